// The census behind the gauges: runs by phase, and each run waiting for a person by name, so that
// the alert that pages someone says which run; a reason that is not one the operator writes (a
// status edited by hand, or by a sandbox left unfenced) never reaches a label.
import { describe, expect, it } from "vitest";
import { census } from "../../../operator/controller/census.ts";

type Json = Record<string, any>;

const run = (namespace: string, name: string, status: Json): Json => ({ metadata: { namespace, name }, spec: {}, status });
const waiting = (reason: unknown) => ({ phase: "NeedsHumanIntervention", conditions: [{ type: "Running", status: "False", reason: "Stopped" }, { type: "NeedsHumanIntervention", status: "True", reason }] });

describe("census", () => {
  it("names each run waiting for a person with its condition's reason, and counts the phases", () => {
    const runs = [run("team-a", "fix-bug", waiting("ToolLoop")), run("team-b", "fix-bug", waiting("RecoveryBudgetExhausted")), run("team-a", "busy", { phase: "Planning" })];
    const counted = census(runs, {}, Date.now());
    expect(counted.waitingForPerson).toEqual([
      { namespace: "team-a", name: "fix-bug", reason: "ToolLoop" },
      { namespace: "team-b", name: "fix-bug", reason: "RecoveryBudgetExhausted" },
    ]);
    expect(counted.phases).toMatchObject({ NeedsHumanIntervention: 2, Planning: 1 });
  });

  it("puts Unknown in place of a reason the operator does not write, or of none", () => {
    const hostile = ["", "toolLoop", 'x"} 1\nwatchdog_up 0', "A".repeat(65), 42, undefined];
    const counted = census(hostile.map((reason, i) => run("ns", `r${i}`, waiting(reason))), {}, Date.now());
    expect(counted.waitingForPerson.map((w) => w.reason)).toEqual(hostile.map(() => "Unknown"));
    expect(census([run("ns", "bare", { phase: "NeedsHumanIntervention" })], {}, Date.now()).waitingForPerson).toEqual([{ namespace: "ns", name: "bare", reason: "Unknown" }]);
  });

  it("names no run that does not wait for a person", () => {
    const phases = ["Queued", "Starting", "Planning", "Suspended", "Completed", "Failed"];
    expect(census(phases.map((phase, i) => run("ns", `r${i}`, { phase, conditions: [{ type: "NeedsHumanIntervention", status: "False", reason: "Resumed" }] })), {}, Date.now()).waitingForPerson).toEqual([]);
  });
});
