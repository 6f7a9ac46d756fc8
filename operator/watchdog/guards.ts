// The guard chain of decide(): each guard looks at the run and either answers (an Outcome) or
// passes (undefined). The first answer decides; an answer that hands the run over to Queued (a
// resume, an unsuspend, an approval of a released sandbox) runs the chain once more, so that the
// guards before the phase's own policy still have their say: spec.suspend wins over a resume, a
// deletion over everything but a finished run.
import { ACTIVE_PHASES, TERMINAL_PHASES, type Phase } from "../api/agentrun.ts";
import type { Outcome, OperatorStatus } from "./outcome.ts";
import { released } from "./policy/awaiting.ts";
import { overBudget, resumeOverBudget } from "./policy/budget.ts";
import { needsHuman } from "./policy/failure.ts";
import { cleanUp, resumption, suspension } from "./policy/lifecycle.ts";
import { queued } from "./policy/queued.ts";
import { running } from "./policy/running.ts";
import { REASONS } from "./reasons.ts";
import { currentPod, type RunView } from "./run-view.ts";

export type Guard = (view: RunView, next: OperatorStatus) => Outcome | undefined;

/** How many times one decision may run the chain again after a hand-over. */
export const HAND_OVERS = 1;

/** Completed and Failed absorb: nothing restarts a finished run; a live pod left behind is only cleaned up. */
const finished: Guard = (view, next) => (TERMINAL_PHASES.includes(next.phase as Phase) ? cleanUp(view, `${next.phase}`) : undefined);

/** A run being deleted keeps its watchdog until its sandbox is confirmed gone (the finalizer holds it). */
const beingDeleted: Guard = (view) => (view.run.metadata.deletionTimestamp ? cleanUp(view, "the run is being deleted; its sandbox goes first") : undefined);

/** The API server refused the last status write for what it held: stop for a person, with a write it takes (rule 12). */
const writeRefused: Guard = (view, next) =>
  view.refusedWrite === undefined
    ? undefined
    : needsHuman(view, next, REASONS.statusWriteRefused, `the API server refused the run's status write (${view.refusedWrite})`, currentPod(view, next));

/**
 * A new watchdog.dev/resume value on a run that needs a person: a new attempt, with fresh
 * allowances; refused while the run's spending is still at a spec.budget limit.
 */
const resumed: Guard = (view, next) => resumeOverBudget(view, next) ?? resumption(view, next);

/** A run that needs a person runs nothing until resumed. */
const waitingForPerson: Guard = (view, next) => (next.phase === "NeedsHumanIntervention" ? cleanUp(view, "waiting for a person") : undefined);

/** spec.suspend: no sandbox, no timer, no nudge; false resumes. */
const suspended: Guard = suspension;

/**
 * A sandbox that filled its status past the protocol's bound (a broken or hostile one: the SDKs
 * refuse such a checkpoint) stops, and no new one starts on that status, before the object has no
 * room left for the operator's own writes.
 */
const oversizeReport: Guard = (view, next) => {
  if (view.oversizeReport === undefined || next.phase === "Suspended") return undefined;
  const running = ACTIVE_PHASES.includes(next.phase as Phase) ? currentPod(view, next) : undefined;
  return needsHuman(view, next, REASONS.sandboxReportTooLarge, `${view.oversizeReport}; clear status.checkpoint (or the records) and resume`, running);
};

/**
 * spec.budget: a run whose spending has reached a limit stops for a person, and no sandbox starts
 * for it: also after an unsuspend or an approval, until the limit is raised.
 */
const budgetSpent: Guard = overBudget;

/** The phase's own policy. */
const byPhase: Guard = (view, next) => {
  if (next.phase === "Queued") return queued(view, next);
  if (next.phase === "AwaitingReply" && next.podName === undefined) return released(view, next);
  return running(view, next);
};

export const GUARDS: readonly Guard[] = [finished, beingDeleted, writeRefused, resumed, waitingForPerson, suspended, oversizeReport, budgetSpent, byPhase];
