// Everything the operator writes fits the CRD's limits (rule 12): strings cut to their maxLength in
// code points, lists to their maxItems keeping the newest, so that no status write is refused for
// ever and with it the decision that kills a hung sandbox.
import { describe, expect, it } from "vitest";
import type { Transition } from "../../../operator/api/agentrun.ts";
import { MAX_TRANSITIONS } from "../../../operator/api/agentrun.ts";
import { withinLimits } from "../../../operator/watchdog/bounds.ts";
import { T0, iso } from "../fixtures.ts";

const transition = (i: number): Transition => ({ phase: "Planning", attempt: i, time: iso(T0 + i) });

describe("a status within the CRD's limits", () => {
  it("is left exactly as it is when everything fits", () => {
    const status = { phase: "Planning" as const, reason: "SandboxRunning", message: "m".repeat(4096), attempt: 2, restarts: 0, transitions: [transition(1)] };
    expect(withinLimits(status)).toEqual(status);
  });

  it("keeps a null where the schema limits a string (a field cleared by a merge patch)", () => {
    expect(withinLimits({ message: null } as unknown as Parameters<typeof withinLimits>[0])).toEqual({ message: null });
  });

  it("keeps free-form data the schema does not describe, nested objects included", () => {
    const checkpoint = { step: 3, data: { plan: { steps: ["a", "b"], note: "n".repeat(5000) } } };
    expect(withinLimits({ checkpoint } as Parameters<typeof withinLimits>[0])).toEqual({ checkpoint });
  });

  it("has a message over its limit cut to 4096 characters", () => {
    expect(withinLimits({ message: "m".repeat(5000) }).message).toBe("m".repeat(4096));
  });

  it("has a string one over its limit cut, and one at its limit kept", () => {
    expect(withinLimits({ reason: "r".repeat(257) }).reason).toBe("r".repeat(256));
    expect(withinLimits({ reason: "r".repeat(256) }).reason).toBe("r".repeat(256));
  });

  it("counts a string's length in code points, as the API server does, and never splits a surrogate pair", () => {
    const token = `${"a".repeat(255)}😀😀`;
    expect(withinLimits({ observedResume: token }).observedResume).toBe(`${"a".repeat(255)}😀`);
    const emoji = "😀".repeat(256); // 512 UTF-16 units, 256 code points: fits
    expect(withinLimits({ observedResume: emoji }).observedResume).toBe(emoji);
  });

  it("keeps the newest transitions when there are more than the CRD allows", () => {
    const all = Array.from({ length: MAX_TRANSITIONS + 3 }, (_, i) => transition(i));
    expect(withinLimits({ transitions: all }).transitions).toEqual(all.slice(3));
  });

  it("keeps a list exactly at its limit whole", () => {
    const all = Array.from({ length: MAX_TRANSITIONS }, (_, i) => transition(i));
    expect(withinLimits({ transitions: all }).transitions).toEqual(all);
  });

  it("cuts strings inside list items and nested objects", () => {
    const long = { ...transition(1), message: "x".repeat(2000) };
    const out = withinLimits({ transitions: [long], lastFailure: { reason: "PodFailed", message: "y".repeat(5000), time: iso(T0) } });
    expect(out.transitions?.[0]?.message).toBe("x".repeat(1024));
    expect(out.lastFailure?.message).toBe("y".repeat(4096));
  });

  it("leaves fields the schema does not bound, numbers, booleans and nulls as they are", () => {
    const status = { attempt: 123456, extra: "z".repeat(10_000), nothing: null } as unknown as Parameters<typeof withinLimits>[0];
    expect(withinLimits(status)).toEqual(status);
  });
});
