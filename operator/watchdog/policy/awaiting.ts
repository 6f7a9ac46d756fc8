// Approval waits (rule 11). AwaitingReply is never hung. Each request gets a new id; only an answer
// naming it counts (answers.ts). After releaseAwaitingAfter the pod is given back without spending
// a restart, and the answer starts a new sandbox that resumes from the checkpoint; approvalTimeout
// fails the run.
import { ANNOTATIONS, ANSWER_ANNOTATIONS } from "../../api/annotations.ts";
import { formatDuration } from "../../api/duration.ts";
import { requestId } from "../answers.ts";
import { toMillis, type PodView } from "../observe.ts";
import { event, merge, type Outcome, type OperatorStatus } from "../outcome.ts";
import { REASONS } from "../reasons.ts";
import { attemptOf, isoSeconds, type RunView } from "../run-view.ts";
import { deletionOf, endedAttempt } from "./failure.ts";

function failed(view: RunView, reason: string, message: string, pod: PodView | undefined, approval: OperatorStatus["approval"]): Outcome {
  return {
    summary: `failed: ${reason}`,
    phase: { phase: "Failed", reason, message },
    set: { approval, completionTime: isoSeconds(view.now), podName: undefined, podUID: undefined, nodeName: undefined },
    deletions: deletionOf(pod, false),
    events: [event("Warning", reason, "Fail", message)],
  };
}

/** The pending request, answered, timed out or still open. `left` when the run leaves AwaitingReply. */
function settle(view: RunView, next: OperatorStatus, pod: PodView | undefined): { outcome?: Outcome; approved?: boolean } {
  const approval = next.approval;
  if (!approval || approval.state !== "Pending") return {};
  const consume = [...ANSWER_ANNOTATIONS].filter((key) => view.run.metadata.annotations?.[key] !== undefined);
  const answer = view.answer;
  if (answer?.kind === "reject") {
    const outcome = failed(view, REASONS.rejected, `the request was rejected: ${answer.reason}`, pod, { ...approval, state: "Rejected", reason: answer.reason, decidedAt: isoSeconds(view.now) });
    return { outcome: { ...outcome, consume } };
  }
  if (answer?.kind === "approve") {
    return {
      approved: true,
      outcome: {
        summary: "approved",
        set: { approval: { ...approval, state: "Approved", answer: answer.answer, decidedAt: isoSeconds(view.now) } },
        consume,
        events: [event("Normal", REASONS.approved, "Approve", `request ${approval.id ?? ""} was approved`)],
      },
    };
  }
  if (view.settings.approvalTimeoutMs !== undefined) {
    const timeoutAt = (toMillis(approval.requestedAt) ?? view.now) + view.settings.approvalTimeoutMs;
    if (view.now >= timeoutAt) {
      return { outcome: failed(view, REASONS.approvalTimeout, `no reply within ${formatDuration(view.settings.approvalTimeoutMs)}`, pod, { ...approval, state: "TimedOut", decidedAt: isoSeconds(view.now) }) };
    }
    return { outcome: { summary: "", wakeAt: [timeoutAt] } };
  }
  return {};
}

/** The sandbox is alive and awaiting a reply. */
export function awaiting(view: RunView, next: OperatorStatus, pod: PodView): Outcome {
  // A new request when the sandbox starts awaiting: a new id, so that no earlier answer fits it.
  // (While it still reports AwaitingReply after an answer, it has not read the answer yet: the SDK
  // reports Planning before it can ask again.)
  let current = next;
  let opened: Outcome = { summary: "" };
  if (view.status.phase !== "AwaitingReply" || !next.approval) {
    const approval = { id: requestId(attemptOf(next), view.now), state: "Pending" as const, requestedAt: isoSeconds(view.now) };
    opened = {
      summary: `awaiting a reply to request ${approval.id}`,
      set: { approval },
      events: [event("Normal", REASONS.approvalRequested, "AwaitReply", `the agent awaits a reply: annotate ${ANNOTATIONS.approve} (or ${ANNOTATIONS.reject}) with ${ANNOTATIONS.approvalId}=${approval.id}`)],
    };
    current = { ...next, approval };
  }
  const settled = settle(view, current, pod);
  // An approved sandbox carries on by itself; a rejected or timed-out run ends here.
  if (settled.outcome && (settled.approved || settled.outcome.phase)) return merge(opened, settled.outcome);
  const approval = current.approval;
  const releaseAt = (toMillis(approval?.requestedAt) ?? view.now) + view.settings.releaseAwaitingAfterMs;
  if (view.now < releaseAt) return merge(opened, settled.outcome ?? { summary: "" }, { summary: opened.summary || "awaiting a reply", wakeAt: [releaseAt] });
  // Free the pod while a person thinks; the answer starts a new sandbox from the checkpoint.
  return merge(opened, settled.outcome ?? { summary: "" }, {
    summary: "released the sandbox while awaiting a reply",
    phase: {
      phase: "AwaitingReply",
      reason: REASONS.sandboxReleased,
      message: `sandbox pod ${pod.name} released after ${formatDuration(view.settings.releaseAwaitingAfterMs)} awaiting a reply; approve request ${approval?.id ?? ""} to resume`,
    },
    set: endedAttempt(current),
    deletions: deletionOf(pod, false),
    events: [event("Normal", REASONS.sandboxReleased, "DeletePod", `released sandbox pod ${pod.name} while the run awaits a reply`)],
  });
}

/** Awaiting a reply with the pod released: nothing runs until the answer comes. */
export function released(view: RunView, next: OperatorStatus): Outcome {
  const settled = settle(view, next, undefined);
  if (settled.approved && settled.outcome) {
    return merge(settled.outcome, {
      summary: "approved; resuming in a new sandbox",
      phase: { phase: "Queued", reason: REASONS.approved, message: `approved; attempt ${attemptOf(next)} resumes from the checkpoint` },
      set: { retryAfter: undefined },
      then: "queued",
    });
  }
  return settled.outcome ?? { summary: "awaiting a reply (sandbox released)" };
}
