// The API server's clock as the operator learns it from response Date headers: never ahead of the
// server's true time for deadlines, never behind it for sightings, whatever this machine's clock
// says, and narrow once responses have fallen at different points of the server's seconds.
import { describe, expect, it } from "vitest";
import { ServerClock } from "../../../operator/kube/server-clock.ts";

const httpDate = (ms: number) => new Date(Math.floor(ms / 1000) * 1000).toUTCString();

/** A machine whose clock is `skewMs` off the server's, asking every `everyMs` with `rttMs` round trips. */
function learn(skewMs: number, rttMs: number, count: number, everyMs = 137) {
  let local = 1_800_000_000_000 + 123;
  const clock = new ServerClock(() => local);
  for (let i = 0; i < count; i++) {
    const sentAt = local;
    const serverAt = sentAt - skewMs + rttMs / 2; // the server answers halfway
    local += rttMs;
    clock.observe(httpDate(serverAt), sentAt, local);
    local += everyMs;
  }
  return { clock, local: () => local, trueServerNow: () => local - skewMs };
}

describe("ServerClock", () => {
  it.each([0, 3_600_000, -3_600_000, 1234])("never puts the server's time ahead of the truth, nor a sighting behind it, with this clock off by %i ms", (skew) => {
    const { clock, trueServerNow, local } = learn(skew, 8, 200);
    expect(clock.now()).toBeLessThanOrEqual(trueServerNow());
    expect(clock.upper(local())).toBeGreaterThanOrEqual(trueServerNow());
  });

  it("narrows to about a round trip once responses fall at different points of the server's seconds", () => {
    const { clock } = learn(3_600_000, 8, 300);
    const { low, high } = clock.offset();
    expect(high - low).toBeLessThan(50);
    expect(low).toBeLessThanOrEqual(-3_600_000);
    expect(high).toBeGreaterThanOrEqual(-3_600_000);
  });

  it("starts afresh when this machine's clock is stepped", () => {
    let local = 1_800_000_000_000;
    const clock = new ServerClock(() => local);
    for (let i = 0; i < 50; i++, local += 300) clock.observe(httpDate(local), local - 5, local);
    local += 7_200_000; // stepped forward two hours; the server's time has not moved that much
    const sentAt = local - 5;
    clock.observe(httpDate(1_800_000_000_000 + 50 * 300), sentAt, local);
    expect(clock.now()).toBeLessThanOrEqual(1_800_000_000_000 + 50 * 300 + 1000);
  });

  it("stands in with the local clock until it has heard from the server, and ignores a missing Date", () => {
    let local = 1_800_000_000_000;
    const clock = new ServerClock(() => local);
    clock.observe(undefined, local, local + 3);
    expect(clock.known).toBe(false);
    expect(clock.now()).toBe(local);
    local += 10;
    expect(clock.localTimeOf(local + 500)).toBe(local + 500);
  });
});
