// A sandbox is running the current attempt (Starting, Planning, ExecutingTool, or AwaitingReply
// with its pod): has its agent ended, has it failed to start, is it looping, hung or stalled?
import { SANDBOX_EXIT_CODES } from "../../api/annotations.ts";
import type { Phase } from "../../api/agentrun.ts";
import { formatDuration } from "../../api/duration.ts";
import { cutToCodePoints } from "../../api/limits.ts";
import { reintroduced } from "../../defects.ts";
import { heartbeatAfterPodCreated, lastSignOfLife, onServerClock } from "../liveness.ts";
import { hasWork, isLive, type PodView } from "../observe.ts";
import { event, merge, type Outcome, type OperatorStatus } from "../outcome.ts";
import { REASONS } from "../reasons.ts";
import { attemptOf, currentPod, heartbeatOf, type RunView } from "../run-view.ts";
import { stepStall } from "../stall.ts";
import { detectLoop, inFlightCall, newestCurrentCall } from "../tool-calls.ts";
import { awaiting } from "./awaiting.ts";
import { attemptFailed, deletionOf, needsHuman, rateLimitedExit } from "./failure.ts";
import { isoSeconds, toMillis } from "../../api/timestamp.ts";

function podFailureMessage(pod: PodView): string {
  const end = pod.agent.ended ?? pod.exit;
  const parts = [`sandbox pod ${pod.name} failed`];
  if (end?.code !== undefined) parts.push(`exit code ${end.code}`);
  if (end?.reason) parts.push(end.reason);
  if (end?.message) parts.push(cutToCodePoints(end.message, 200));
  return parts.join(": ");
}

/** The attempt ended because its agent container did: exit 0 completes the run. */
function agentEnded(view: RunView, next: OperatorStatus, pod: PodView): Outcome | undefined {
  const ended = pod.agent.ended;
  const done = pod.phase === "Succeeded" || (ended !== undefined && ended.code === 0);
  if (done) {
    return {
      summary: "completed",
      phase: { phase: "Completed", reason: REASONS.completed, message: `the agent container of sandbox pod ${pod.name} exited 0` },
      set: { completionTime: isoSeconds(view.now), retryAfter: undefined },
      // Sidecars still running go, with the pod's own grace; a pod whose containers have all
      // stopped stays, with its logs, as a Job's pods do.
      deletions: hasWork(pod) ? deletionOf(pod, false) : [],
      events: [event("Normal", REASONS.completed, "Complete", `attempt ${attemptOf(next)} completed`)],
    };
  }
  const crashed = pod.phase === "Failed" || ended !== undefined;
  if (!crashed) return undefined;
  if (ended?.code === SANDBOX_EXIT_CODES.unconfirmedSideEffect) {
    // The SDK refused to run again a non-idempotent call whose outcome is unknown: a person must
    // look (rule 10). Restarting would only meet the same refusal.
    const outcome = needsHuman(view, next, REASONS.unconfirmedSideEffect, `${podFailureMessage(pod)} (the sandbox refused to repeat a call whose outcome is unknown)`, undefined);
    return { ...outcome, deletions: deletionOf(pod, false) };
  }
  if (ended?.code === SANDBOX_EXIT_CODES.rateLimited) {
    const throttled = rateLimitedExit(view, next, podFailureMessage(pod), pod);
    if (throttled) return throttled;
  }
  return attemptFailed(view, next, REASONS.podFailed, podFailureMessage(pod), pod, false);
}

/**
 * When the run named the attempt's pod: the time of its Starting transition of this attempt, which
 * the write that names the pod (at creation, or on adoption after that write was lost) records. A
 * sandbox cannot heartbeat before it (admission fences writes by status.podName), so a naming that
 * came late (a leader killed between the create and the write, then a storm of conflicts) must not
 * eat into its heartbeat timeout. Undefined once the history no longer holds it: the container's
 * start alone then counts.
 */
function namedAt(next: OperatorStatus, attempt: number): number | undefined {
  const starting = (next.transitions ?? []).findLast((t) => t.phase === "Starting" && t.attempt === attempt);
  return toMillis(starting?.time);
}

export function running(view: RunView, next: OperatorStatus): Outcome {
  const attempt = attemptOf(next);
  const pod = currentPod(view, next);
  const hb = view.heartbeat;
  if (!pod || (pod.deleting && isLive(pod))) {
    // Deleted by someone else, or gone: a crash, replaced once the pod is confirmed gone (rule 9).
    return attemptFailed(view, next, REASONS.podFailed, `sandbox pod ${next.podName} was deleted or vanished`, undefined, false);
  }
  const ended = agentEnded(view, next, pod);
  if (ended) return ended;

  // A timeout shortened by a spec edit (or an install default) counts from when it changed at the
  // earliest: a sandbox still on the old heartbeat interval must get the time to learn it (rule 2).
  const notBefore = (t: number) => Math.max(t, toMillis(next.timeoutsChangedAt) ?? 0);

  // Before its agent container starts (scheduling, image pulls) the pod has startTimeout.
  if (pod.agent.startedAt === undefined && !hb) {
    const deadline = notBefore(pod.createdAt) + view.settings.startTimeoutMs;
    if (view.now > deadline) {
      return attemptFailed(view, next, REASONS.startTimeout, `the agent container of sandbox pod ${pod.name} did not start within ${formatDuration(view.settings.startTimeoutMs)}`, pod, true);
    }
    return merge(bound(pod, next), { summary: `waiting for sandbox pod ${pod.name} to start`, wakeAt: [deadline + 1] });
  }

  const loop = detectLoop(view.status.toolCalls, next.toolCallsResetAfter, heartbeatOf(view), attempt, view.settings.maxConsecutiveToolFailures);
  if (loop) {
    const n = view.settings.maxConsecutiveToolFailures;
    return needsHuman(view, next, REASONS.toolLoop, `tool ${loop.name} failed ${n} times in a row with the same arguments (${loop.argsHash})`, pod);
  }

  // In an active phase the phase mirrors what the sandbox reports; reasons belong to the phases
  // that explain why no sandbox runs.
  const phase: Phase = hb ? hb.heartbeat.state : "Starting";
  const mirror: Outcome = phase !== next.phase || next.reason !== undefined || next.message !== undefined ? { summary: "", phase: { phase } } : { summary: "" };
  if (phase === "AwaitingReply") return merge(mirror, awaiting(view, next, pod), bound(pod, next));

  // The container's start as the API server (or this operator) saw it, never the node's own clock;
  // and never before the run named this pod, since admission refuses its writes until then.
  // Only before the first heartbeat: an accepted one already came after the naming.
  const named = hb || reintroduced("late-naming") ? undefined : namedAt(next, attempt);
  const started = heartbeatAfterPodCreated(hb, pod.createdAt) ? undefined : pod.agent.startSeenAt;
  const lastAlive = lastSignOfLife(hb, started, view.heartbeatErasedAt, named);
  const deadline = notBefore(lastAlive ?? pod.createdAt) + view.settings.heartbeatTimeoutMs;
  if (view.now > deadline) {
    const since =
      hb?.acceptedAt !== undefined && hb.acceptedAt === lastAlive
        ? `the last heartbeat was accepted at ${isoSeconds(hb.acceptedAt)}`
        : view.heartbeatErasedAt !== undefined && view.heartbeatErasedAt === lastAlive
          ? `an earlier attempt's late heartbeat replaced this attempt's at ${isoSeconds(lastAlive)}`
          : named !== undefined && named === lastAlive && named !== pod.agent.startSeenAt
            ? `the run named sandbox pod ${pod.name} at ${isoSeconds(named)}, after its agent container had started`
            : `the agent container started at ${isoSeconds(lastAlive ?? pod.createdAt)}`;
    return attemptFailed(
      view,
      next,
      REASONS.heartbeatTimeout,
      `no heartbeat for ${formatDuration(view.now - (lastAlive ?? pod.createdAt))} (timeout ${formatDuration(view.settings.heartbeatTimeoutMs)}); ${since}`,
      pod,
      true,
      deadline,
    );
  }
  const alive: Outcome = { summary: "", wakeAt: [deadline + 1] };
  if (!hb) return merge(mirror, alive, bound(pod, next), { summary: `waiting for the first heartbeat of attempt ${attempt}` });

  // A merge patch keeps members it does not name, so a new attempt's first heartbeat may still
  // carry the last attempt's activity: only activity since this pod was created counts.
  const activityAt = onServerClock(hb, hb.heartbeat.activity?.time);
  const activity = activityAt !== undefined && activityAt >= pod.createdAt - 2_000 ? hb.heartbeat.activity : undefined;
  // A tool call in flight is work: it holds the stall timer (rule 7).
  const held = inFlightCall(view.status.toolCalls, hb.heartbeat, attempt) !== undefined;
  const step = stepStall(next.stall, activity, view.now, view.settings.stall, held, (t) => onServerClock(hb, t));
  if (step.escalate) {
    const n = view.settings.stall.maxNudges;
    return merge(mirror, needsHuman(view, next, REASONS.stallUnresolved, `the agent stayed stalled after ${n} nudge${n === 1 ? "" : "s"}`, pod));
  }
  const stall: Outcome = { summary: "", set: { stall: step.stall }, wakeAt: [step.wakeAt] };
  if (step.nudge) {
    stall.summary = `nudged (${step.stall.nudges}/${view.settings.stall.maxNudges})`;
    stall.events = [event("Normal", REASONS.stallDetected, "Nudge", `stall detected; nudge ${step.stall.nudges} of ${view.settings.stall.maxNudges} recorded`)];
    stall.metrics = [{ kind: "nudge" }];
  }
  // A call that got through ends a streak of rate limits.
  const newest = newestCurrentCall(view.status.toolCalls, hb.heartbeat, attempt);
  const streak: Outcome = newest?.state === "Succeeded" && (next.rateLimitRequeues ?? 0) > 0 ? { summary: "", set: { rateLimitRequeues: 0 } } : { summary: "" };
  return merge(mirror, alive, stall, streak, bound(pod, next));
}

/** The node the current pod is bound to, recorded so that a pod that vanishes can still be traced. */
function bound(pod: PodView, next: OperatorStatus): Outcome {
  const set: Partial<OperatorStatus> = {};
  if (pod.nodeName && next.nodeName !== pod.nodeName) set.nodeName = pod.nodeName;
  if (pod.uid && next.podUID !== pod.uid) set.podUID = pod.uid;
  return { summary: "", set };
}

