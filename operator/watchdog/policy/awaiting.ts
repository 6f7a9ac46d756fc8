// Approval waits (rule 11). AwaitingReply is never hung. Each request gets a new id, and records
// the question and the key the sandbox gave it (from its checkpoint), so that the approver answers
// what was asked and the sandbox knows its own request; only an answer naming the id counts
// (answers.ts). After releaseAwaitingAfter the pod is given back without spending a restart, and
// an approval starts a new sandbox that resumes from the checkpoint, also when the approval came
// before the release and the old sandbox had not read it yet; approvalTimeout fails the run. A
// request ends when the run leaves the wait (withdrawn, see decide.ts).
import type { ApprovalStatus } from "../../api/agentrun.ts";
import { ANNOTATIONS, ANSWER_ANNOTATIONS, APPROVAL_REQUEST_KEY } from "../../api/annotations.ts";
import { formatDuration } from "../../api/duration.ts";
import { requestId } from "../answers.ts";
import { type PodView } from "../observe.ts";
import { event, merge, type Outcome, type OperatorStatus } from "../outcome.ts";
import { REASONS } from "../reasons.ts";
import { attemptOf, type RunView } from "../run-view.ts";
import { deletionOf, endedAttempt } from "./failure.ts";
import { isoSeconds, toMillis } from "../../api/timestamp.ts";

function failed(view: RunView, reason: string, message: string, pod: PodView | undefined, approval: OperatorStatus["approval"]): Outcome {
  return {
    summary: `failed: ${reason}`,
    phase: { phase: "Failed", reason, message },
    set: { approval, completionTime: isoSeconds(view.now), podName: undefined, podUID: undefined, nodeName: undefined, podGracePeriodSeconds: undefined },
    deletions: deletionOf(pod, false),
    events: [event("Warning", reason, "Fail", message)],
  };
}

/** The pending request, answered, timed out or still open. `left` when the run leaves AwaitingReply. */
function settle(view: RunView, next: OperatorStatus, pod: PodView | undefined): { outcome?: Outcome; approved?: boolean } {
  const approval = next.approval;
  if (!approval || approval.state !== "Pending") return {};
  const consume = [...ANSWER_ANNOTATIONS].filter((key) => view.run.metadata.annotations?.[key] !== undefined);
  // Only an answer to this very request: one read against a request this decision replaced is not.
  const answer = view.answer?.requestId === approval.id ? view.answer : undefined;
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

/** The question and key of the request the sandbox's checkpoint carries, if any (sandbox data: checked, and cut to the CRD's limits later). */
function askedRequest(view: RunView): Pick<ApprovalStatus, "question" | "requestKey"> {
  const data = view.status.checkpoint?.data;
  const request = data && typeof data === "object" && !Array.isArray(data) ? (data as Record<string, unknown>)[APPROVAL_REQUEST_KEY] : undefined;
  if (!request || typeof request !== "object") return {};
  const { question, key } = request as { question?: unknown; key?: unknown };
  return { ...(typeof question === "string" ? { question } : {}), ...(typeof key === "string" && key ? { requestKey: key } : {}) };
}

/** The sandbox is alive and awaiting a reply. */
export function awaiting(view: RunView, next: OperatorStatus, pod: PodView): Outcome {
  // A new request when the sandbox starts awaiting: a new id, so that no earlier answer fits it.
  // (While it still reports AwaitingReply after an answer, it has not read the answer yet: the SDK
  // reports Planning before it can ask again.) A sandbox that waits again on the request still
  // pending under its key keeps that request.
  let current = next;
  let opened: Outcome = { summary: "" };
  const asked = askedRequest(view);
  const samePending = next.approval?.state === "Pending" && asked.requestKey !== undefined && next.approval.requestKey === asked.requestKey;
  if ((view.status.phase !== "AwaitingReply" || !next.approval) && !samePending) {
    const approval: ApprovalStatus = { id: requestId(attemptOf(next), view.now), state: "Pending", ...asked, attempt: attemptOf(next), requestedAt: isoSeconds(view.now) };
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
  if (next.approval?.state === "Approved") {
    // Approved before the pod was released, and not read by the sandbox that asked: the answer
    // goes to a new sandbox, which finds it in status.approval under its request's key.
    return {
      summary: "approved before the sandbox was released; resuming in a new sandbox",
      phase: { phase: "Queued", reason: REASONS.approved, message: `approved; attempt ${attemptOf(next)} resumes from the checkpoint` },
      set: { retryAfter: undefined },
      then: "queued",
    };
  }
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
