import { describe, expect, it } from "vitest";
import { ARGS_HASH_LENGTH, argsHash, canonicalJson, idempotencyKey } from "../../../operator/sandbox/keys.ts";

describe("canonical JSON and the arguments hash", () => {
  it("ignores key order at every depth", () => {
    const a = { to: "x@example.com", meta: { b: 1, a: [{ y: 2, x: 1 }] } };
    const b = { meta: { a: [{ x: 1, y: 2 }], b: 1 }, to: "x@example.com" };
    expect(canonicalJson(a)).toBe(canonicalJson(b));
    expect(canonicalJson(a)).toBe('{"meta":{"a":[{"x":1,"y":2}],"b":1},"to":"x@example.com"}');
    expect(argsHash(a)).toBe(argsHash(b));
  });

  it("keeps array order, and any change of a value changes the hash", () => {
    expect(argsHash([1, 2])).not.toBe(argsHash([2, 1]));
    expect(argsHash({ n: 1 })).not.toBe(argsHash({ n: 2 }));
    expect(argsHash({ n: 1 })).not.toBe(argsHash({ n: "1" }));
  });

  it("reduces values as JSON does", () => {
    expect(canonicalJson({ a: undefined, b: 1 })).toBe('{"b":1}');
    expect(canonicalJson(new Date("2026-01-01T00:00:00Z"))).toBe('"2026-01-01T00:00:00.000Z"');
    expect(canonicalJson({ big: 10n })).toBe('{"big":"10"}');
    expect(canonicalJson(undefined)).toBe("null");
  });

  it("is a short hex string", () => {
    expect(argsHash({ q: "x" })).toMatch(new RegExp(`^[0-9a-f]{${ARGS_HASH_LENGTH}}$`));
  });
});

describe("idempotency keys", () => {
  const base = { runUid: "uid-1", step: 2, index: 0, name: "send_email", argsHash: argsHash({ to: "a" }) };

  it("is the sha256 of run uid, step, index, name and arguments hash", async () => {
    const { createHash } = await import("node:crypto");
    const expected = createHash("sha256").update(`uid-1/2/0/send_email/${base.argsHash}`).digest("hex");
    expect(idempotencyKey(base)).toBe(expected);
  });

  it("is stable, and differs when any part differs", () => {
    expect(idempotencyKey({ ...base })).toBe(idempotencyKey(base));
    const variants = [
      { ...base, runUid: "uid-2" },
      { ...base, step: 3 },
      { ...base, index: 1 },
      { ...base, name: "send_sms" },
      { ...base, argsHash: argsHash({ to: "b" }) },
    ];
    const keys = new Set([idempotencyKey(base), ...variants.map(idempotencyKey)]);
    expect(keys.size).toBe(variants.length + 1);
  });
});
