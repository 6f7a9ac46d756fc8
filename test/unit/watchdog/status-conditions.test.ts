// The run's conditions, derived from its phase and what the decision found: Running, BackingOff,
// NeedsHumanIntervention, Succeeded, SandboxReportValid and SandboxUnconfirmed.
import { describe, expect, it } from "vitest";
import type { Condition } from "../../../operator/api/agentrun.ts";
import type { Unconfirmed } from "../../../operator/watchdog/sandboxes.ts";
import { conditionsFor, type ConditionFacts } from "../../../operator/watchdog/status-conditions.ts";
import { T0, iso } from "../fixtures.ts";

const NOW = iso(T0);
const facts = (fields: Partial<ConditionFacts>): ConditionFacts => ({
  phase: "Planning",
  next: { phase: "Planning", attempt: 2, podName: "r-2-uidr" },
  nowIso: NOW,
  generation: 1,
  backingOff: false,
  problems: [],
  overdue: [],
  ...fields,
});
const condition = (f: ConditionFacts, type: string) => conditionsFor(f).find((c) => c.type === type);
const was = (type: string, status: Condition["status"], reason = "Before"): Condition => ({ type, status, reason, message: "before", lastTransitionTime: iso(T0 - 60_000) });
const unconfirmed = (reason: Unconfirmed["reason"], nodeName?: string, name = "r-1-uidr"): Unconfirmed => ({
  entry: { name, uid: `uid-${name}`, since: iso(T0 - 120_000), ...(nodeName ? { nodeName } : {}) },
  overdue: true,
  reason,
});

describe("the conditions of a running run", () => {
  it("are exactly Running, BackingOff, NeedsHumanIntervention and Succeeded, sorted by type", () => {
    const c = (type: string, status: string, reason: string, message: string) => ({ type, status, reason, message, lastTransitionTime: NOW, observedGeneration: 1 });
    expect(conditionsFor(facts({}))).toEqual([
      c("BackingOff", "False", "Planning", ""),
      c("NeedsHumanIntervention", "False", "NoInterventionNeeded", ""),
      c("Running", "True", "SandboxRunning", "attempt 2 runs in pod r-2-uidr"),
      c("Succeeded", "Unknown", "NotFinished", ""),
    ]);
  });

  it("say Running with attempt 0 and no pod name when the status has neither", () => {
    expect(condition(facts({ phase: "Starting", next: { phase: "Starting" } }), "Running")?.message).toBe("attempt 0 runs in pod ");
  });
});

describe("Running", () => {
  it("is False outside the active phases, with the run's reason and message", () => {
    expect(condition(facts({ phase: "Queued", next: { phase: "Queued", reason: "PodFailed", message: "exit code 1" } }), "Running")).toMatchObject({
      status: "False",
      reason: "PodFailed",
      message: "exit code 1",
    });
  });

  it("is False with the phase as its reason, and no message, when the run gives none", () => {
    expect(condition(facts({ phase: "Suspended", next: { phase: "Suspended" } }), "Running")).toMatchObject({ status: "False", reason: "Suspended", message: "" });
  });
});

describe("BackingOff", () => {
  it("is True while a queued run waits out its backoff, with the run's reason", () => {
    expect(condition(facts({ phase: "Queued", next: { phase: "Queued", reason: "HeartbeatTimeout", message: "hung" }, backingOff: true }), "BackingOff")).toMatchObject({
      status: "True",
      reason: "HeartbeatTimeout",
      message: "hung",
    });
  });

  it("is False with RetryDue once a queued run's retry is due", () => {
    expect(condition(facts({ phase: "Queued", next: { phase: "Queued", reason: "HeartbeatTimeout" } }), "BackingOff")).toMatchObject({ status: "False", reason: "RetryDue", message: "" });
  });
});

describe("NeedsHumanIntervention", () => {
  it("is True with the reason and message of the stop", () => {
    expect(
      condition(facts({ phase: "NeedsHumanIntervention", next: { phase: "NeedsHumanIntervention", reason: "ToolLoop", message: "search failed 3 times" } }), "NeedsHumanIntervention"),
    ).toMatchObject({ status: "True", reason: "ToolLoop", message: "search failed 3 times" });
  });

  it("turns False with Resumed when a run that needed a person goes on", () => {
    const next = { phase: "Queued" as const, message: "resumed by watchdog.dev/resume", conditions: [was("NeedsHumanIntervention", "True", "ToolLoop")] };
    expect(condition(facts({ phase: "Queued", next }), "NeedsHumanIntervention")).toMatchObject({ status: "False", reason: "Resumed", message: "resumed by watchdog.dev/resume", lastTransitionTime: NOW });
  });

  it("once False, keeps the reason it got then", () => {
    const next = { phase: "Planning" as const, attempt: 2, podName: "p", conditions: [was("NeedsHumanIntervention", "False", "Resumed")] };
    expect(condition(facts({ next }), "NeedsHumanIntervention")).toEqual(was("NeedsHumanIntervention", "False", "Resumed"));
  });
});

describe("Succeeded", () => {
  it("is True for a completed run", () => {
    expect(condition(facts({ phase: "Completed", next: { phase: "Completed", message: "exit 0" } }), "Succeeded")).toMatchObject({ status: "True", reason: "Completed", message: "exit 0" });
  });

  it("is False for a failed run, with its reason", () => {
    expect(condition(facts({ phase: "Failed", next: { phase: "Failed", reason: "Rejected", message: "no" } }), "Succeeded")).toMatchObject({ status: "False", reason: "Rejected", message: "no" });
  });
});

describe("SandboxReportValid", () => {
  it("is absent while nothing the sandbox wrote was ever wrong", () => {
    expect(condition(facts({}), "SandboxReportValid")).toBeUndefined();
  });

  it("is False with every problem found, as InvalidSandboxReport by default", () => {
    expect(condition(facts({ problems: ["a", "b"] }), "SandboxReportValid")).toMatchObject({ status: "False", reason: "InvalidSandboxReport", message: "a; b" });
  });

  it("is False with the reason the decision gives the problems", () => {
    expect(condition(facts({ problems: ["big"], problemReason: "SandboxReportTooLarge" }), "SandboxReportValid")?.reason).toBe("SandboxReportTooLarge");
  });

  it("turns True once a report that was wrong is valid again", () => {
    const next = { phase: "Planning" as const, conditions: [was("SandboxReportValid", "False")] };
    expect(condition(facts({ next }), "SandboxReportValid")).toMatchObject({ status: "True", reason: "Valid", message: "" });
  });
});

describe("SandboxUnconfirmed", () => {
  it("is absent while every deleted sandbox was confirmed gone in time", () => {
    expect(condition(facts({}), "SandboxUnconfirmed")).toBeUndefined();
  });

  it("is True for a pod whose kubelet has not confirmed its containers stopped", () => {
    expect(condition(facts({ overdue: [unconfirmed("TerminationPending", "node-1")] }), "SandboxUnconfirmed")).toMatchObject({
      status: "True",
      reason: "TerminationPending",
      message: `sandbox pod r-1-uidr on node node-1 was deleted at ${iso(T0 - 120_000)} and is not confirmed gone: the kubelet has not confirmed that its containers stopped; no replacement starts until it is`,
    });
  });

  it("names an unreachable node first, whatever the order found", () => {
    const overdue = [unconfirmed("TerminationPending", "node-1", "r-1-uidr"), unconfirmed("NodeUnreachable", "node-2", "r-2-uidr")];
    expect(condition(facts({ overdue }), "SandboxUnconfirmed")).toMatchObject({
      reason: "NodeUnreachable",
      message: `sandbox pod r-2-uidr on node node-2 was deleted at ${iso(T0 - 120_000)} and is not confirmed gone: its node is not Ready, so its containers may still run; no replacement starts until it is`,
    });
  });

  it("says when a pod vanished with no node on record", () => {
    expect(condition(facts({ overdue: [unconfirmed("NodeUnreachable")] }), "SandboxUnconfirmed")?.message).toBe(
      `sandbox pod r-1-uidr was deleted at ${iso(T0 - 120_000)} and is not confirmed gone: it vanished with no node on record, and not every node has been heard from since, so its containers may still run; no replacement starts until it is`,
    );
  });

  it("turns False with SandboxGone once the pod is confirmed gone", () => {
    const next = { phase: "Queued" as const, conditions: [was("SandboxUnconfirmed", "True", "NodeUnreachable")] };
    expect(condition(facts({ phase: "Queued", next }), "SandboxUnconfirmed")).toMatchObject({ status: "False", reason: "SandboxGone", message: "" });
  });
});
