// A running attempt in its own words (policy/running.ts): a completion, a crash and how its pod's
// end is told, a vanished pod, the start and first-heartbeat waits and their deadlines, a hung
// sandbox that never heartbeat, a stall nudged then escalated (counted in the right plural), and a
// tool loop.
import { describe, expect, it } from "vitest";
import { SANDBOX_EXIT_CODES } from "../../../operator/api/annotations.ts";
import { World, startedWorld } from "../world.ts";

const S = 1000;
const ESCALATE = "; the run needs a person (annotate watchdog.dev/resume to resume)";
const noRestarts = (extra: Record<string, unknown> = {}) => ({ watchdog: { heartbeatTimeout: "10s", maxRestarts: 0, ...extra } });

describe("an attempt that ends", () => {
  it("completes on exit 0, saying which attempt", () => {
    const w = startedWorld(noRestarts());
    w.podExit(0);
    const plan = w.reconcile();
    expect(plan.summary).toBe("completed");
    expect(w.status).toMatchObject({ phase: "Completed", reason: "Completed", message: "the agent container of sandbox pod r-1-uidr exited 0" });
    expect(plan.events).toEqual([{ type: "Normal", reason: "Completed", action: "Complete", note: "attempt 1 completed" }]);
  });

  it("tells a crash by its exit code, reason and message, the message cut to 200 characters", () => {
    const w = startedWorld(noRestarts());
    expect(SANDBOX_EXIT_CODES.unconfirmedSideEffect).not.toBe(2);
    w.currentPod()!.status = { phase: "Failed", containerStatuses: [{ name: "agent", state: { terminated: { exitCode: 2, reason: "Error", message: "x".repeat(300) } } }] };
    w.reconcile();
    expect(w.status.lastFailure.message).toBe(`sandbox pod r-1-uidr failed: exit code 2: Error: ${"x".repeat(200)}; the recovery allowance of 0 restarts is spent`);
  });

  it("tells a pod that failed with no container end by its name alone", () => {
    const w = startedWorld(noRestarts());
    w.currentPod()!.status = { phase: "Failed" };
    w.reconcile();
    expect(w.status.lastFailure.message).toBe("sandbox pod r-1-uidr failed; the recovery allowance of 0 restarts is spent");
  });

  it("stops for a person, without a kill, when the sandbox refused to repeat a call of unknown outcome", () => {
    const w = startedWorld(noRestarts());
    w.podExit(SANDBOX_EXIT_CODES.unconfirmedSideEffect);
    const plan = w.reconcile();
    expect(w.status).toMatchObject({ reason: "UnconfirmedSideEffect", message: `sandbox pod r-1-uidr failed: exit code ${SANDBOX_EXIT_CODES.unconfirmedSideEffect} (the sandbox refused to repeat a call whose outcome is unknown)` });
    expect(plan.deletePods).toEqual([]);
  });

  it("names a pod that vanished", () => {
    const w = startedWorld(noRestarts());
    w.podVanishedUnseen();
    w.reconcile();
    expect(w.status.message).toBe("sandbox pod r-1-uidr was deleted or vanished; the recovery allowance of 0 restarts is spent");
  });
});

describe("waits and their deadlines", () => {
  it("waits for the agent to start until startTimeout, then fails the attempt naming it", () => {
    const w = new World({ watchdog: { startTimeout: "30s", maxRestarts: 0 } });
    w.settle();
    w.advance(5 * S);
    const plan = w.reconcile();
    expect(plan.summary).toBe("waiting for sandbox pod r-1-uidr to start");
    expect(plan.wakeAt).toBe(w.now - 5 * S + 30 * S + 1);
    w.advance(25 * S + 1);
    w.reconcile();
    expect(w.status.message).toBe("the agent container of sandbox pod r-1-uidr did not start within 30s; the recovery allowance of 0 restarts is spent");
  });

  it("waits for the first heartbeat until heartbeatTimeout after the start, then says it never came", () => {
    const w = new World(noRestarts());
    w.settle();
    w.podRunning();
    const plan = w.reconcile();
    expect(plan.summary).toBe("waiting for the first heartbeat of attempt 1");
    expect(plan.wakeAt).toBe(w.now + 10 * S + 1);
    w.advance(11 * S);
    const killed = w.reconcile();
    expect(w.status.message).toBe("no heartbeat for 11s (timeout 10s); the agent container started at 2026-11-30T12:00:00Z; the recovery allowance of 0 restarts is spent");
    expect(killed.events).toEqual([{ type: "Warning", reason: "RecoveryBudgetExhausted", action: "Escalate", note: `${w.status.message}${ESCALATE}` }]);
  });

  it("says when the last heartbeat was accepted, for a sandbox that heartbeat and hung", () => {
    const w = startedWorld(noRestarts());
    w.advance(12 * S);
    w.reconcile();
    expect(w.status.message).toMatch(/^no heartbeat for 1\ds \(timeout 10s\); the last heartbeat was accepted at 2026-11-30T12:00:0\dZ; the recovery allowance of 0 restarts is spent$/);
  });
});

describe("a stall", () => {
  for (const [maxNudges, words] of [
    [1, "1 nudge"],
    [2, "2 nudges"],
  ] as const) {
    it(`is nudged up to stall.maxNudges (${maxNudges}), then needs a person: "${words}"`, () => {
      const w = startedWorld({ watchdog: { heartbeatTimeout: "10m", stall: { timeout: "30s", maxNudges } } });
      w.heartbeat("Planning", { kind: "text" });
      w.settle();
      w.advance(31 * S);
      const nudged = w.reconcile();
      expect(nudged.summary).toBe(`nudged (1/${maxNudges})`);
      expect(nudged.events).toEqual([{ type: "Normal", reason: "StallDetected", action: "Nudge", note: `stall detected; nudge 1 of ${maxNudges} recorded` }]);
      expect(nudged.wakeAt).toBe(w.now + 30 * S);
      for (let i = 0; i < maxNudges; i++) {
        w.advance(31 * S);
        w.reconcile();
      }
      expect(w.status).toMatchObject({ phase: "NeedsHumanIntervention", reason: "StallUnresolved", message: `the agent stayed stalled after ${words}` });
    });
  }
});

describe("a tool loop", () => {
  it("needs a person after maxConsecutiveToolFailures identical failures, naming the tool and the arguments' hash", () => {
    const w = startedWorld({ watchdog: { heartbeatTimeout: "10m", maxConsecutiveToolFailures: 2 } });
    w.toolCall({ name: "grep", state: "Failed", argsHash: "abc" });
    w.toolCall({ name: "grep", state: "Failed", argsHash: "abc" });
    const plan = w.reconcile();
    expect(plan.summary).toBe("needs human intervention: ToolLoop");
    expect(w.status.message).toBe("tool grep failed 2 times in a row with the same arguments (abc)");
  });
});

describe("the rate-limit streak", () => {
  it("starts again at 0 after a call of the attempt succeeds", () => {
    const w = startedWorld({ watchdog: { heartbeatTimeout: "10m", maxRateLimitRequeues: 3, rateLimitBackoff: { initial: "1s", factor: 1, max: "1s" } } });
    w.toolCall({ name: "llm", state: "Failed", httpStatus: 429 });
    w.podExit(SANDBOX_EXIT_CODES.rateLimited);
    w.settle();
    expect(w.status.rateLimitRequeues).toBe(1);
    w.runUntil(w.now + 5 * S);
    w.podRunning();
    w.heartbeat();
    w.settle();
    expect(w.status.rateLimitRequeues).toBe(1);
    w.toolCall({ name: "llm", state: "Succeeded" });
    w.settle();
    expect(w.status.rateLimitRequeues).toBe(0);
  });
});
