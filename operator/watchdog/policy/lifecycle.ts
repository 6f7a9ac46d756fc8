// The phases in which no sandbox should run, and the user's levers on them: suspend and unsuspend
// (spec.suspend), resume (watchdog.dev/resume, rule 8), and the clean-up of a run that needs a
// person or has finished.
import { ANNOTATIONS } from "../../api/annotations.ts";
import { cutToCodePoints } from "../../api/limits.ts";
import { hasWork } from "../observe.ts";
import { event, type Outcome, type OperatorStatus } from "../outcome.ts";
import { REASONS } from "../reasons.ts";
import { attemptOf, type RunView } from "../run-view.ts";
import { endedAttempt } from "./failure.ts";

/** Every live pod of the run goes, with its own grace (a clean-up, not a kill). */
export function cleanUp(view: RunView, summary: string): Outcome {
  const deletions = view.sandboxes.owned.filter((p) => hasWork(p) && !p.deleting).map((pod) => ({ pod, kill: false }));
  return { summary: deletions.length ? `${summary}; removing ${deletions.map((d) => d.pod.name).join(", ")}` : summary, deletions };
}

/** spec.suspend: the pod is removed, no timer fires, nothing is nudged; false resumes. */
export function suspension(view: RunView, next: OperatorStatus): Outcome | undefined {
  const suspend = view.run.spec.suspend === true;
  if (suspend && next.phase !== "Suspended") {
    return {
      ...cleanUp(view, "suspended"),
      phase: { phase: "Suspended", reason: REASONS.suspended, message: "spec.suspend is true" },
      // The running attempt ends with its pod.
      set: next.podName !== undefined ? endedAttempt(next) : {},
      events: [event("Normal", REASONS.suspended, "Suspend", "run suspended; its sandbox pod is removed")],
    };
  }
  if (suspend) return cleanUp(view, "suspended");
  if (next.phase === "Suspended") {
    return {
      summary: "unsuspended",
      phase: { phase: "Queued", reason: REASONS.unsuspended, message: `attempt ${attemptOf(next)} is queued` },
      events: [event("Normal", REASONS.unsuspended, "Unsuspend", "run unsuspended")],
      then: "queued",
    };
  }
  return undefined;
}

/**
 * The resume token as status keeps it: its first 256 characters, counted in code points as the
 * API server counts them, so that a cut never splits a surrogate pair. (A split pair would be
 * stored as U+FFFD, compare unequal to the token for ever after, and resume every later
 * intervention by itself.)
 */
export function storedResumeToken(token: string): string {
  return cutToCodePoints(token, 256);
}

/** A new watchdog.dev/resume value, which does not act now: recorded, so that it cannot fire later by surprise. */
export function newResumeToken(view: RunView, next: OperatorStatus): string | undefined {
  const token = view.run.metadata.annotations?.[ANNOTATIONS.resume];
  if (token === undefined) return undefined;
  const stored = storedResumeToken(token);
  return stored === next.observedResume ? undefined : stored;
}

/**
 * A new watchdog.dev/resume value, acted on only in NeedsHumanIntervention: fresh restart and
 * rate-limit allowances and a new attempt from the checkpoint. What the run spent (status.spent)
 * is kept, and a run still at a spec.budget limit is not resumed (resumeOverBudget, before this).
 * (In other phases decide() records it; see newResumeToken.)
 */
export function resumption(view: RunView, next: OperatorStatus): Outcome | undefined {
  const stored = newResumeToken(view, next);
  if (stored === undefined || next.phase !== "NeedsHumanIntervention") return undefined;
  return {
    summary: "resumed",
    phase: { phase: "Queued", reason: REASONS.resumed, message: `resumed by ${ANNOTATIONS.resume}; attempt ${attemptOf(next) + 1} is queued` },
    set: {
      ...endedAttempt(next),
      observedResume: stored,
      restarts: 0,
      rateLimitRequeues: 0,
      retryAfter: undefined,
      toolCallsResetAfter: view.status.toolCalls?.at(-1)?.id,
    },
    events: [event("Normal", REASONS.resumed, "Resume", `resumed with fresh budgets; attempt ${attemptOf(next) + 1} is queued`)],
    then: "queued",
  };
}
