// Kubernetes names as the API server checks them: anything else must never go into a request path.
import { describe, expect, it } from "vitest";
import { isDnsLabel, isDnsSubdomain } from "../../../operator/api/names.ts";

describe("a namespace name (an RFC 1123 DNS label)", () => {
  it.each(["a", "0", "team-a", "a-0-b", "x".repeat(63)])("takes %s", (name) => expect(isDnsLabel(name)).toBe(true));
  it.each(["", "-a", "a-", "Team", "a.b", "a_b", "a/b", "..", "a\n", "a%2Fb", "x".repeat(64), "é"])("refuses %j", (name) => expect(isDnsLabel(name)).toBe(false));
  it("refuses what is not a string", () => {
    for (const value of [undefined, null, 1, ["a"], { a: 1 }]) expect(isDnsLabel(value)).toBe(false);
  });
});

describe("a run's name (an RFC 1123 DNS subdomain)", () => {
  const longest = `${"a".repeat(63)}.${"b".repeat(63)}.${"c".repeat(63)}.${"d".repeat(61)}`;
  it.each(["r", "r.v2", "a-b.c-d", "0.1.2", longest])("takes %s", (name) => expect(isDnsSubdomain(name)).toBe(true));
  it.each(["", ".r", "r.", "r..x", "-r", "r-", "r.-x", "R", "r/x", "..", "../../secrets/x", "r?watch=1", "r,x", "r\n", "r\u0000", `${longest}a`])("refuses %j", (name) =>
    expect(isDnsSubdomain(name)).toBe(false),
  );
  it("refuses what is not a string", () => {
    for (const value of [undefined, null, 1, ["r"]]) expect(isDnsSubdomain(value)).toBe(false);
  });
});
