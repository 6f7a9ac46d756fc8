import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { formatDuration, parseDuration } from "../../../operator/api/duration.ts";

describe("durations", () => {
  it("parses Go-style durations", () => {
    expect(parseDuration("30s")).toBe(30_000);
    expect(parseDuration("5m")).toBe(300_000);
    expect(parseDuration("1h30m")).toBe(5_400_000);
    expect(parseDuration("1.5s")).toBe(1500);
    expect(parseDuration("250ms")).toBe(250);
  });

  it("rejects what the CRD rejects", () => {
    for (const bad of ["5 minutes", "10x", "-5m", "", "5", "m5", "1h 30m"]) expect(() => parseDuration(bad), bad).toThrow(/invalid duration/);
  });

  it("formats what it parses", () => {
    fc.assert(
      fc.property(fc.integer({ min: 1, max: 100_000 }), (seconds) => {
        expect(parseDuration(formatDuration(seconds * 1000))).toBe(seconds * 1000);
      }),
    );
  });
});
