// The user's levers in their own words (policy/lifecycle.ts): suspend, unsuspend and resume, what
// each writes and says, and what a suspended run cleans up.
import { describe, expect, it } from "vitest";
import { type World, startedWorld } from "../world.ts";

const S = 1000;
const RETRIES = { watchdog: { maxRestarts: 0, heartbeatTimeout: "10m", backoff: { initial: "1s", factor: 1, max: "1s" } } };
const plannedEvents = (w: World) => w.plans.flatMap((p) => p.events);

describe("suspending", () => {
  it("removes the pod, ends the attempt, and says so", () => {
    const w = startedWorld(RETRIES);
    w.setSpec({ suspend: true });
    const plan = w.reconcile();
    expect(plan.summary).toBe("suspended; removing r-1-uidr");
    expect(plan.phase).toBe("Suspended");
    expect(plan.deletePods.map((d) => d.name)).toEqual(["r-1-uidr"]);
    expect(w.status).toMatchObject({ phase: "Suspended", reason: "Suspended", message: "spec.suspend is true" });
    // The attempt ended with its pod: no pod named any more.
    expect(w.status.podName).toBeUndefined();
    expect(plannedEvents(w).at(-1)).toEqual({ type: "Normal", reason: "Suspended", action: "Suspend", note: "run suspended; its sandbox pod is removed" });
  });

  it("once suspended, only removes a pod left behind, without another Event", () => {
    const w = startedWorld(RETRIES);
    w.setSpec({ suspend: true });
    w.settle();
    const events = plannedEvents(w).length;
    expect(w.reconcile().summary).toBe("suspended");
    expect(plannedEvents(w)).toHaveLength(events);
  });

  it("queues the attempt again when unsuspended", () => {
    const w = startedWorld(RETRIES);
    w.setSpec({ suspend: true });
    w.settle();
    w.setSpec({ suspend: false });
    const plan = w.reconcile();
    // Handed over to Queued, which starts the attempt in the same decision.
    expect(plan.summary).toBe("unsuspended; starting attempt 2");
    expect(plannedEvents(w)).toContainEqual({ type: "Normal", reason: "Unsuspended", action: "Unsuspend", note: "run unsuspended" });
    expect(w.status.transitions.slice(-2)).toEqual([
      expect.objectContaining({ phase: "Queued", from: "Suspended", reason: "Unsuspended", message: "attempt 2 is queued", attempt: 2 }),
      expect.objectContaining({ phase: "Starting", from: "Queued", attempt: 2 }),
    ]);
    expect(w.status.phase).toBe("Starting");
  });
});

describe("resuming a run that needs a person", () => {
  it("queues the next attempt with fresh allowances, and resets the tool loop's count after the last call", () => {
    const w = startedWorld(RETRIES);
    w.toolCall({ name: "search", state: "Failed", id: "call-9" });
    w.podExit(1);
    w.settle();
    expect(w.status.phase).toBe("NeedsHumanIntervention");
    w.annotate("watchdog.dev/resume", "go");
    const plan = w.reconcile();
    expect(plan.summary).toMatch(/^resumed; /);
    expect(w.status).toMatchObject({ observedResume: "go", restarts: 0, rateLimitRequeues: 0, toolCallsResetAfter: "call-9" });
    expect(w.status.transitions).toContainEqual(expect.objectContaining({ phase: "Queued", reason: "Resumed", message: "resumed by watchdog.dev/resume; attempt 2 is queued" }));
    expect(plannedEvents(w)).toContainEqual({ type: "Normal", reason: "Resumed", action: "Resume", note: "resumed with fresh budgets; attempt 2 is queued" });
    w.advance(2 * S);
    w.settle();
    expect(w.status.attempt).toBe(2);
  });

  it("records a resume given in another phase without acting on it, so it cannot fire later", () => {
    const w = startedWorld(RETRIES);
    w.annotate("watchdog.dev/resume", "early");
    w.reconcile();
    expect(w.status.observedResume).toBe("early");
    expect(w.status.attempt).toBe(1);
    w.podExit(1);
    w.settle();
    expect(w.status.phase).toBe("NeedsHumanIntervention");
    // The same token does nothing now; a new one resumes.
    expect(w.reconcile().summary).not.toMatch(/^resumed/);
    w.annotate("watchdog.dev/resume", "now");
    expect(w.reconcile().summary).toMatch(/^resumed/);
  });
});
