// metav1.Condition bookkeeping: a condition's lastTransitionTime moves only when its status does;
// one condition per type, sorted by type.
import { describe, expect, it } from "vitest";
import type { Condition } from "../../../operator/api/agentrun.ts";
import { findCondition, setCondition } from "../../../operator/watchdog/conditions.ts";
import { T0, iso } from "../fixtures.ts";

const EARLIER = iso(T0);
const NOW = iso(T0 + 60_000);
const running: Condition = { type: "Running", status: "True", reason: "SandboxRunning", message: "attempt 1", lastTransitionTime: EARLIER, observedGeneration: 1 };

describe("setting a condition", () => {
  it("adds a new one stamped now, with the generation it was set for", () => {
    expect(setCondition([], { type: "Running", status: "True", reason: "SandboxRunning", message: "m" }, NOW, 3)).toEqual([
      { type: "Running", status: "True", reason: "SandboxRunning", message: "m", lastTransitionTime: NOW, observedGeneration: 3 },
    ]);
  });

  it("leaves out the generation when it is unknown", () => {
    expect(setCondition([], { type: "Running", status: "True", reason: "R", message: "" }, NOW, undefined)[0]).not.toHaveProperty("observedGeneration");
  });

  it("keeps the transition time when the status stays, taking the new reason and message", () => {
    expect(setCondition([running], { type: "Running", status: "True", reason: "Other", message: "attempt 2" }, NOW, 2)).toEqual([
      { type: "Running", status: "True", reason: "Other", message: "attempt 2", lastTransitionTime: EARLIER, observedGeneration: 2 },
    ]);
  });

  it("moves the transition time when the status changes", () => {
    expect(setCondition([running], { type: "Running", status: "False", reason: "Queued", message: "" }, NOW, 1)[0]?.lastTransitionTime).toBe(NOW);
  });

  it("does not take another type's transition time", () => {
    const other: Condition = { ...running, type: "BackingOff" };
    expect(setCondition([other], { type: "Running", status: "True", reason: "R", message: "" }, NOW, 1).find((c) => c.type === "Running")?.lastTransitionTime).toBe(NOW);
  });

  it("replaces the condition of its type, keeps the others, and sorts them by type", () => {
    const succeeded: Condition = { ...running, type: "Succeeded", status: "Unknown" };
    const out = setCondition([succeeded, running], { type: "BackingOff", status: "False", reason: "RetryDue", message: "" }, NOW, 1);
    expect(out.map((c) => c.type)).toEqual(["BackingOff", "Running", "Succeeded"]);
    const replaced = setCondition(out, { type: "Running", status: "False", reason: "Queued", message: "" }, NOW, 1);
    expect(replaced.map((c) => [c.type, c.status])).toEqual([
      ["BackingOff", "False"],
      ["Running", "False"],
      ["Succeeded", "Unknown"],
    ]);
  });
});

describe("finding a condition", () => {
  it("finds the condition of a type, and none when it is absent or there are no conditions", () => {
    expect(findCondition([running], "Running")).toBe(running);
    expect(findCondition([running], "BackingOff")).toBeUndefined();
    expect(findCondition(undefined, "Running")).toBeUndefined();
  });
});
