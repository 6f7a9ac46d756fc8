// Answers bound to questions (rule 11). Every approval request gets a new status.approval.id; an
// approve or reject annotation counts only together with watchdog.dev/approval-id naming the
// request that is pending. Any other answer (none pending, another request's id, no id, a request
// that has ended: answered, timed out, or withdrawn when the run left the wait) is refused with a
// Warning Event and removed, so that it can never answer a later question: not one
// given too early, not one left behind by an operator that died before removing it, not one a
// GitOps tool re-applies.
import type { AgentRun, ApprovalStatus } from "../api/agentrun.ts";
import { ANNOTATIONS, ANSWER_ANNOTATIONS } from "../api/annotations.ts";
import { cutToCodePoints } from "../api/limits.ts";
import { reintroduced } from "../defects.ts";
import { event, type Outcome } from "./outcome.ts";
import { REASONS } from "./reasons.ts";

/** An answer, with the id of the request it names: it answers that request and no other. */
export type Answer = ({ kind: "approve"; answer: string } | { kind: "reject"; reason: string }) & { requestId: string };

export interface Answers {
  /** An answer to the pending request, for the policy that handles it. */
  answer?: Answer;
  /** The refusal of an answer that names no pending request. */
  refused?: Outcome;
}

/** Reads the answer annotations against the pending request. */
export function readAnswers(run: AgentRun, approval: ApprovalStatus | undefined): Answers {
  const annotations = run.metadata.annotations ?? {};
  const reject = annotations[ANNOTATIONS.reject];
  const approve = annotations[ANNOTATIONS.approve];
  if (reject === undefined && approve === undefined) return {};
  const named = annotations[ANNOTATIONS.approvalId];
  const pending = approval?.state === "Pending" ? approval.id : undefined;
  if (pending !== undefined && (named === pending || reintroduced("unbound-answers"))) {
    return {
      answer: reject !== undefined ? { kind: "reject", reason: reject || "rejected", requestId: pending } : { kind: "approve", answer: approve || "approved", requestId: pending },
    };
  }
  if (pending === undefined && reintroduced("unbound-answers")) return {}; // kept for the next request
  const what = reject !== undefined ? ANNOTATIONS.reject : ANNOTATIONS.approve;
  const ended = approval && approval.state !== "Pending" && named !== undefined && named === approval.id ? approval : undefined;
  const why =
    ended !== undefined
      ? `request ${ended.id ?? ""} has ended (${ended.state === "Withdrawn" ? "withdrawn: the run left the wait without an answer" : ended.state})`
      : pending === undefined
        ? "no approval request is pending"
        : named === undefined
        ? `it does not name the pending request (set ${ANNOTATIONS.approvalId}=${pending})`
        : `it names request ${JSON.stringify(cutToCodePoints(named, 64))}, but the pending request is ${pending}`;
  return {
    refused: {
      summary: `refused ${what}: ${why}`,
      consume: [...ANSWER_ANNOTATIONS].filter((key) => annotations[key] !== undefined),
      events: [event("Warning", REASONS.answerRefused, "RefuseAnswer", `${what} refused and removed: ${why}`)],
    },
  };
}

/** A new, unique id for the request made at `now` by `attempt`: the core has no randomness. */
export function requestId(attempt: number, now: number): string {
  return `${attempt}-${now.toString(36)}`;
}
