// Backoff waits: exponential from counts kept in status, capped; a rate limit's Retry-After wins
// over the computed wait but is bounded too, and a Retry-After that is not a usable number is ignored.
import { describe, expect, it } from "vitest";
import { backoffDelay, rateLimitDelay } from "../../../operator/watchdog/backoff.ts";

const S = 1000;
const backoff = { initialMs: 10 * S, factor: 2, maxMs: 60 * S };

describe("the restart backoff", () => {
  it("waits the initial delay before the first retry", () => {
    expect(backoffDelay(backoff, 1)).toBe(10 * S);
  });

  it("waits the initial delay, not less, for a retry count of 0 or below (no negative exponent)", () => {
    expect(backoffDelay(backoff, 0)).toBe(10 * S);
    expect(backoffDelay(backoff, -3)).toBe(10 * S);
  });

  it("multiplies the wait by the factor for each further retry", () => {
    expect(backoffDelay(backoff, 2)).toBe(20 * S);
    expect(backoffDelay(backoff, 3)).toBe(40 * S);
  });

  it("caps the wait at the configured max", () => {
    expect(backoffDelay(backoff, 4)).toBe(60 * S); // 80 s uncapped
    expect(backoffDelay({ ...backoff, maxMs: 40 * S }, 3)).toBe(40 * S); // exactly at the max
  });

  it("keeps a factor of 1 at the initial delay however many retries", () => {
    expect(backoffDelay({ ...backoff, factor: 1 }, 50)).toBe(10 * S);
  });

  it("waits the max when the exponential overflows to Infinity", () => {
    expect(backoffDelay(backoff, 5000)).toBe(60 * S);
  });

  it("waits the max, never NaN, when the product is not a number (0 × Infinity): a NaN wait would never wake the run", () => {
    expect(backoffDelay({ initialMs: 0, factor: Infinity, maxMs: 60 * S }, 2)).toBe(60 * S);
  });
});

describe("the rate-limit wait", () => {
  it("waits the server's Retry-After, in milliseconds, when it is under the max", () => {
    expect(rateLimitDelay(backoff, 3, 2)).toBe(2 * S);
    expect(rateLimitDelay(backoff, 1, 0.5)).toBe(500);
  });

  it("retries at once on a Retry-After of 0, not on the computed backoff", () => {
    expect(rateLimitDelay(backoff, 3, 0)).toBe(0);
  });

  it("bounds a long Retry-After by the max, so a hostile server cannot park a run for days", () => {
    expect(rateLimitDelay(backoff, 1, 86_400)).toBe(60 * S);
    expect(rateLimitDelay(backoff, 1, 60)).toBe(60 * S); // exactly at the max
    expect(rateLimitDelay(backoff, 1, 59)).toBe(59 * S);
  });

  it("falls back to the computed backoff without a Retry-After", () => {
    expect(rateLimitDelay(backoff, 2)).toBe(20 * S);
    expect(rateLimitDelay(backoff, 2, undefined)).toBe(20 * S);
  });

  it("ignores a negative Retry-After and waits the computed backoff", () => {
    expect(rateLimitDelay(backoff, 2, -1)).toBe(20 * S);
    expect(rateLimitDelay(backoff, 2, -0.001)).toBe(20 * S);
  });

  it("ignores a NaN Retry-After and waits the computed backoff", () => {
    expect(rateLimitDelay(backoff, 2, NaN)).toBe(20 * S);
  });

  it("ignores an infinite Retry-After and waits the computed backoff, not the max", () => {
    expect(rateLimitDelay(backoff, 2, Infinity)).toBe(20 * S);
    expect(rateLimitDelay(backoff, 2, -Infinity)).toBe(20 * S);
  });
});
