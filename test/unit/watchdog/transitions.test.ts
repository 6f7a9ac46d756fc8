// The bounded history of phase transitions in status: each phase a decision passed through, with
// where it came from, the attempt, and a millisecond of its own (the ledger keys on the time).
import { describe, expect, it } from "vitest";
import { MAX_TRANSITIONS, type Transition } from "../../../operator/api/agentrun.ts";
import { withTransitions } from "../../../operator/watchdog/transitions.ts";
import { T0, iso } from "../fixtures.ts";

describe("phase transitions", () => {
  it("are left as they were when the decision passed through no phase", () => {
    const before: Transition[] = [{ phase: "Queued", attempt: 1, time: iso(T0) }];
    expect(withTransitions({ phase: "Queued", transitions: before }, "Queued", [], T0 + 5)).toBe(before);
    expect(withTransitions({ phase: "Queued" }, "Queued", [], T0 + 5)).toBeUndefined();
  });

  it("record a first phase with no phase before it, the attempt, and the decision's time", () => {
    expect(withTransitions({ phase: "Queued", attempt: 1, reason: "Created", message: "waiting" }, undefined, [{ phase: "Queued" }], T0)).toEqual([
      { phase: "Queued", attempt: 1, reason: "Created", message: "waiting", time: iso(T0) },
    ]);
  });

  it("record the phase left, and give the run's attempt as 0 when it has none", () => {
    expect(withTransitions({ phase: "Starting" }, "Queued", [{ phase: "Starting" }], T0)).toEqual([{ phase: "Starting", from: "Queued", attempt: 0, time: iso(T0) }]);
  });

  it("skip a first step into the phase the run is already in", () => {
    expect(withTransitions({ phase: "Planning", attempt: 1 }, "Planning", [{ phase: "Planning" }], T0)).toBeUndefined();
  });

  it("keep a later step back into the phase the run started from", () => {
    const steps = [{ phase: "Queued" as const, reason: "Resumed" }, { phase: "NeedsHumanIntervention" as const }];
    expect(withTransitions({ phase: "NeedsHumanIntervention", attempt: 2 }, "NeedsHumanIntervention", steps, T0)?.map((t) => [t.from, t.phase])).toEqual([
      ["NeedsHumanIntervention", "Queued"],
      ["Queued", "NeedsHumanIntervention"],
    ]);
  });

  it("give each step its own millisecond, the last one the decision's time, and chain each from the one before", () => {
    const steps = [{ phase: "Queued" as const, reason: "Resumed", message: "resumed" }, { phase: "Starting" as const }];
    expect(withTransitions({ phase: "Starting", attempt: 2 }, "NeedsHumanIntervention", steps, T0)).toEqual([
      { phase: "Queued", from: "NeedsHumanIntervention", attempt: 2, reason: "Resumed", message: "resumed", time: iso(T0 - 1) },
      { phase: "Starting", from: "Queued", attempt: 2, time: iso(T0) },
    ]);
  });

  it("give the final phase the reason and message it ended the decision with", () => {
    const steps = [{ phase: "Queued" as const, reason: "Early", message: "early" }];
    expect(withTransitions({ phase: "Queued", attempt: 1, reason: "Late", message: "late" }, "Planning", steps, T0)).toEqual([
      { phase: "Queued", from: "Planning", attempt: 1, reason: "Late", message: "late", time: iso(T0) },
    ]);
    // cleared within the decision: the transition carries none
    expect(withTransitions({ phase: "Queued", attempt: 1 }, "Planning", [{ phase: "Queued", reason: "Early", message: "early" }], T0)).toEqual([
      { phase: "Queued", from: "Planning", attempt: 1, time: iso(T0) },
    ]);
  });

  it("keep a final step's own reason when the run's phase is another one", () => {
    expect(withTransitions({ phase: "Suspended", attempt: 1, reason: "Suspended" }, "Planning", [{ phase: "Queued", reason: "Own", message: "own" }], T0)).toEqual([
      { phase: "Queued", from: "Planning", attempt: 1, reason: "Own", message: "own", time: iso(T0) },
    ]);
  });

  it("leave out an empty reason or message", () => {
    expect(withTransitions({ phase: "Queued", attempt: 1, reason: "", message: "" }, "Planning", [{ phase: "Queued" }], T0)).toEqual([
      { phase: "Queued", from: "Planning", attempt: 1, time: iso(T0) },
    ]);
  });

  it("are appended to the ones kept, newest last, keeping only the newest the CRD allows", () => {
    const before: Transition[] = Array.from({ length: MAX_TRANSITIONS }, (_, i) => ({ phase: "Planning", attempt: 1, time: iso(T0 + i) }));
    const after = withTransitions({ phase: "Queued", attempt: 1, transitions: before }, "Planning", [{ phase: "Queued" }], T0 + 100);
    expect(after).toHaveLength(MAX_TRANSITIONS);
    expect(after?.[0]).toEqual(before[1]);
    expect(after?.at(-1)).toEqual({ phase: "Queued", from: "Planning", attempt: 1, time: iso(T0 + 100) });
  });
});
