// A failed attempt in its own words (policy/failure.ts): a requeue with its backoff, an escalation
// once the allowance is spent (counted in the right plural), the kill counted only for a hung
// sandbox, and a rate-limited exit that spends no restart.
import { describe, expect, it } from "vitest";
import { SANDBOX_EXIT_CODES } from "../../../operator/api/annotations.ts";
import { startedWorld } from "../world.ts";

const S = 1000;
const retries = (maxRestarts: number, extra: Record<string, unknown> = {}) => ({
  watchdog: { maxRestarts, heartbeatTimeout: "10s", backoff: { initial: "5s", factor: 1, max: "5s" }, ...extra },
});
const ESCALATE = "; the run needs a person (annotate watchdog.dev/resume to resume)";

describe("a crashed attempt with restarts left", () => {
  it("is requeued after its backoff, saying which attempt failed and which starts when", () => {
    const w = startedWorld(retries(1));
    w.podExit(1);
    const plan = w.reconcile();
    expect(plan.summary).toBe("requeued (PodFailed) for 5s");
    expect(plan.metrics).toEqual([{ kind: "requeue", reason: "PodFailed" }]);
    expect(w.status).toMatchObject({
      phase: "Queued",
      reason: "PodFailed",
      message: "sandbox pod r-1-uidr failed: exit code 1; attempt 2 starts after 2026-11-30T12:00:05Z",
      retryAfter: "2026-11-30T12:00:05Z",
      restarts: 1,
      rateLimitRequeues: 0,
      attempt: 2,
      lastFailure: { reason: "PodFailed", message: "sandbox pod r-1-uidr failed: exit code 1", attempt: 1 },
    });
    expect(plan.wakeAt).toBe(Date.parse("2026-11-30T12:00:05Z"));
    expect(plan.events).toEqual([{ type: "Warning", reason: "PodFailed", action: "Requeue", note: "attempt 1: sandbox pod r-1-uidr failed: exit code 1; attempt 2 starts in 5s" }]);
  });
});

describe("an attempt past the recovery allowance", () => {
  it("counts a hung sandbox's kill beside the escalation, and says 0 restarts", () => {
    const w = startedWorld(retries(0));
    w.advance(11 * S);
    const plan = w.reconcile();
    expect(plan.summary).toBe("needs human intervention: RecoveryBudgetExhausted");
    expect(plan.metrics).toEqual([expect.objectContaining({ kind: "hungKilled" }), { kind: "needsHuman", reason: "RecoveryBudgetExhausted" }]);
    expect(w.status.message).toMatch(/^no heartbeat for 10s .*; the recovery allowance of 0 restarts is spent$/);
    expect(w.status.lastFailure.reason).toBe("HeartbeatTimeout");
    expect(plan.events).toEqual([{ type: "Warning", reason: "RecoveryBudgetExhausted", action: "Escalate", note: `${w.status.message}${ESCALATE}` }]);
    expect(plan.deletePods.map((d) => d.name)).toEqual(["r-1-uidr"]);
  });

  it("counts no kill for a crash, and says 1 restart", () => {
    const w = startedWorld(retries(1));
    w.podExit(1);
    w.settle();
    w.advance(6 * S);
    w.settle();
    w.podRunning();
    w.heartbeat();
    w.settle();
    w.podExit(2);
    const plan = w.reconcile();
    expect(plan.metrics).toEqual([{ kind: "needsHuman", reason: "RecoveryBudgetExhausted" }]);
    expect(w.status.message).toBe("sandbox pod r-2-uidr failed: exit code 2; the recovery allowance of 1 restart is spent");
    expect(w.status.lastFailure.reason).toBe("PodFailed");
  });
});

describe("a rate-limited exit", () => {
  it("is requeued after the call's Retry-After, spending no restart", () => {
    const w = startedWorld(retries(0, { maxRateLimitRequeues: 2 }));
    w.toolCall({ name: "llm", state: "Failed", httpStatus: 429, retryAfterSeconds: 7 });
    w.podExit(SANDBOX_EXIT_CODES.rateLimited);
    const plan = w.reconcile();
    expect(plan.summary).toBe("requeued (RateLimited) for 7s");
    expect(w.status.message).toMatch(/; the last call to llm was rate limited \(HTTP 429\); attempt 2 starts after /);
    expect(w.status.rateLimitRequeues).toBe(1);
    expect(w.status.restarts ?? 0).toBe(0);
    expect(plan.deletePods).toEqual([]);
  });

  it("needs a person past maxRateLimitRequeues in a row, counted in the right plural", () => {
    for (const [max, words] of [
      [1, "1 time"],
      [0, "0 times"],
    ] as const) {
      const w = startedWorld(retries(3, { maxRateLimitRequeues: max }));
      for (let i = 0; i <= max; i++) {
        w.toolCall({ name: "llm", state: "Failed", httpStatus: 429 });
        w.podExit(SANDBOX_EXIT_CODES.rateLimited);
        w.settle();
        if (w.status.phase === "NeedsHumanIntervention") break;
        w.runUntil(w.now + 60 * S);
        w.podRunning();
        w.heartbeat();
        w.settle();
      }
      expect(w.status.reason).toBe("RateLimitRequeuesExhausted");
      expect(w.status.message).toMatch(new RegExp(`the last call to llm was rate limited \\(HTTP 429\\), and the run was requeued for rate limits ${words} in a row$`));
      expect(w.status.lastFailure.reason).toBe("RateLimited");
    }
  });
});
