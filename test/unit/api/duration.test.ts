import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { durationNanos, formatDuration, MAX_DURATION_NS, parseDuration } from "../../../operator/api/duration.ts";

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

  it("counts nanoseconds as Go's time.ParseDuration does, which the API server's CEL uses", () => {
    expect(durationNanos("0.5ns")).toBe(0n);
    expect(durationNanos("1.000000001s")).toBe(1_000_000_001n);
    expect(durationNanos("0.3h")).toBe(1_080_000_000_000n);
    expect(durationNanos("1h30m")).toBe(5_400_000_000_000n);
    expect(durationNanos("2562047h47m16.854775807s")).toBe(MAX_DURATION_NS);
    expect(durationNanos("2562047h47m16.854775808s")).toBeUndefined();
    expect(durationNanos("9223372036854775807ns")).toBe(MAX_DURATION_NS);
    expect(durationNanos("9223372036854775808ns")).toBeUndefined();
    expect(durationNanos("99999999999999999999h")).toBeUndefined();
    // Go scales the fraction in float64: these are the values time.ParseDuration returns.
    expect(durationNanos("1." + "9".repeat(40) + "s")).toBe(2_000_000_000n);
    expect(durationNanos("0.1h0.7m1.3333333333333s")).toBe(403_333_333_333n);
    expect(durationNanos("5.55555555555555555555555555h")).toBe(20_000_000_000_000n);
    expect(durationNanos("1d")).toBeUndefined();
  });

  it("formats what it parses", () => {
    fc.assert(
      fc.property(fc.integer({ min: 1, max: 100_000 }), (seconds) => {
        expect(parseDuration(formatDuration(seconds * 1000))).toBe(seconds * 1000);
      }),
    );
  });
});
