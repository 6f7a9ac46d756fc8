// How an attempt ends when its sandbox failed (rules 2-5, 10): the run is requeued with backoff,
// or it stops for a person when the allowance is spent or a non-idempotent call's outcome is
// unknown. A crash or a hang spends a restart whatever the last call was: a rate limit cannot
// hide one. Only an attempt that gave up on a rate limit (the SDK's rate-limited exit, with the
// throttled call on record) is requeued with the rate-limit backoff instead, spending no restart
// but an allowance of its own, so that a quota exhausted for good still ends with a person.
// Also the two ways every failure path ends: requeue and needsHuman.
import type { FailureRecord, Heartbeat } from "../../api/agentrun.ts";
import { ANNOTATIONS } from "../../api/annotations.ts";
import { formatDuration } from "../../api/duration.ts";
import { backoffDelay, rateLimitDelay } from "../backoff.ts";
import { isLive, type PodView } from "../observe.ts";
import { event, type Outcome, type OperatorStatus } from "../outcome.ts";
import { REASONS, type InterventionReason, type RestartReason } from "../reasons.ts";
import { attemptOf, heartbeatOf, type RunView } from "../run-view.ts";
import { DISARMED } from "../stall.ts";
import { isRateLimited, newestCurrentCall, unconfirmedCall } from "../tool-calls.ts";
import { isoCeilSeconds, isoSeconds } from "../../api/timestamp.ts";

export function failureRecord(view: RunView, next: OperatorStatus, reason: string, message: string): FailureRecord {
  const hb = heartbeatOf(view);
  const record: FailureRecord = { reason, message, time: isoSeconds(view.now), attempt: attemptOf(next) };
  if (hb) record.state = hb.state;
  const call = newestCurrentCall(view.status.toolCalls, hb, attemptOf(next));
  if (call) record.tool = { name: call.name, argsHash: call.argsHash, state: call.state };
  return record;
}

/** The status of a run whose attempt has ended: the next sandbox is a new attempt. */
export function endedAttempt(next: OperatorStatus): Partial<OperatorStatus> {
  return { attempt: attemptOf(next) + 1, podName: undefined, podUID: undefined, nodeName: undefined, podGracePeriodSeconds: undefined, stall: { ...DISARMED } };
}

/** The pod goes: a kill when the watchdog stops a sandbox, a clean-up otherwise. */
export const deletionOf = (pod: PodView | undefined, kill: boolean) => (pod && isLive(pod) ? [{ pod, kill }] : []);

export function requeue(view: RunView, next: OperatorStatus, reason: string, message: string, delayMs: number, pod: PodView | undefined, kill: boolean): Outcome {
  const failed = attemptOf(next);
  const retryAfter = isoCeilSeconds(view.now + delayMs);
  return {
    summary: `requeued (${reason}) for ${formatDuration(delayMs)}`,
    phase: { phase: "Queued", reason, message: `${message}; attempt ${failed + 1} starts after ${retryAfter}` },
    set: { ...endedAttempt(next), lastFailure: failureRecord(view, next, reason, message), retryAfter },
    deletions: deletionOf(pod, kill),
    events: [event("Warning", reason, "Requeue", `attempt ${failed}: ${message}; attempt ${failed + 1} starts in ${formatDuration(delayMs)}`)],
    metrics: [{ kind: "requeue", reason }],
    wakeAt: [Date.parse(retryAfter)],
  };
}

export function needsHuman(view: RunView, next: OperatorStatus, reason: InterventionReason, message: string, pod: PodView | undefined, cause?: string): Outcome {
  return {
    summary: `needs human intervention: ${reason}`,
    phase: { phase: "NeedsHumanIntervention", reason, message },
    set: { podName: undefined, podUID: undefined, nodeName: undefined, podGracePeriodSeconds: undefined, lastFailure: failureRecord(view, next, cause ?? reason, message) },
    deletions: deletionOf(pod, true),
    events: [event("Warning", reason, "Escalate", `${message}; the run needs a person (annotate ${ANNOTATIONS.resume} to resume)`)],
    metrics: [{ kind: "needsHuman", reason }],
  };
}

/**
 * The sandbox of the current attempt failed for `cause`. `kill` says whether the watchdog is
 * stopping it (hung, start timeout) rather than cleaning up after it (it crashed, or someone else
 * deleted it). `deadline` is the heartbeat deadline a hung sandbox missed.
 */
export function attemptFailed(view: RunView, next: OperatorStatus, cause: RestartReason, message: string, pod: PodView | undefined, kill: boolean, deadline?: number): Outcome {
  const hb: Heartbeat | undefined = heartbeatOf(view);
  const killed = cause === REASONS.heartbeatTimeout && deadline !== undefined ? [{ kind: "hungKilled" as const, deadline }] : [];
  const withKill = (outcome: Outcome): Outcome => ({ ...outcome, metrics: [...killed, ...(outcome.metrics ?? [])] });

  const unconfirmed = unconfirmedCall(view.status.toolCalls, hb, attemptOf(next));
  if (unconfirmed) {
    // Rule 10: the call may or may not have had its effect, and running it again is not safe.
    return withKill(
      needsHuman(view, next, REASONS.unconfirmedSideEffect, `${message}; the non-idempotent call ${unconfirmed.name} (${unconfirmed.id}) was started and its outcome is unknown`, pod, cause),
    );
  }
  const restarts = (next.restarts ?? 0) + 1;
  const max = view.settings.maxRestarts;
  if (restarts > max) {
    return withKill(needsHuman(view, next, REASONS.recoveryBudgetExhausted, `${message}; the recovery allowance of ${max} restart${max === 1 ? "" : "s"} is spent`, pod, cause));
  }
  const outcome = requeue(view, next, cause, message, backoffDelay(view.settings.backoff, restarts), pod, kill);
  return withKill({ ...outcome, set: { ...outcome.set, restarts, rateLimitRequeues: 0 } });
}

/**
 * The sandbox gave its attempt up on a rate limit (rule 4): it exited with the rate-limited code
 * and its newest call of this attempt failed with HTTP 429. Requeued with the rate-limit backoff
 * (the call's Retry-After wins), spending no restart; past maxRateLimitRequeues in a row, a
 * person must look (the quota may be gone for good). Anything else is a crash.
 */
export function rateLimitedExit(view: RunView, next: OperatorStatus, message: string, pod: PodView): Outcome | undefined {
  const newest = newestCurrentCall(view.status.toolCalls, heartbeatOf(view), attemptOf(next));
  if (!isRateLimited(newest)) return undefined;
  const n = (next.rateLimitRequeues ?? 0) + 1;
  const max = view.settings.maxRateLimitRequeues;
  const throttled = `${message}; the last call to ${newest.name} was rate limited (HTTP 429)`;
  if (n > max) {
    return needsHuman(view, next, REASONS.rateLimitRequeuesExhausted, `${throttled}, and the run was requeued for rate limits ${max} time${max === 1 ? "" : "s"} in a row`, pod, REASONS.rateLimited);
  }
  const delay = rateLimitDelay(view.settings.rateLimitBackoff, n, newest.error?.retryAfterSeconds);
  const outcome = requeue(view, next, REASONS.rateLimited, throttled, delay, pod, false);
  return { ...outcome, set: { ...outcome.set, rateLimitRequeues: n } };
}
