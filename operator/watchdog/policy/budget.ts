// Run budgets (spec.budget): a run whose spending reaches a limit stops for a person
// (BudgetExhausted), its sandbox killed as for any kill; a run that has spent warnAt of a limit
// gets one BudgetWarning Event for it; and each ended attempt's usage is folded into status.spent
// once (the arithmetic is budget.ts).
//
// Choices, and why:
// - The wall clock counts from status.startTime, the first sandbox's start, which nothing resets:
//   backoff, waits for a reply, resumes and suspensions all count, as the contract says of the
//   whole run. Unlike the Job controller's activeDeadlineSeconds, a suspension does not restart
//   it; but like every timer it does not act while spec.suspend is true: a run past its deadline
//   stops when it is unsuspended, before any sandbox starts.
// - A resume keeps status.spent. A resume of a run still at a limit is refused: the run stays in
//   NeedsHumanIntervention (BudgetExhausted) with no pod and no new attempt, and the resume value
//   is recorded as acted on, so it cannot fire later by surprise; raise the limit, then resume.
// - A warning is recorded with the limit's value it was sent for, so a raised (or lowered) limit
//   warns again once spending reaches warnAt of the new value.
// - An attempt whose agent has already exited is left to its phase's policy: a completion stands,
//   and a crash is handled as a crash (the stop for the budget comes before any new sandbox).
import { ACTIVE_PHASES, type BudgetWarningRecord, type Phase } from "../../api/agentrun.ts";
import { cutToCodePoints } from "../../api/limits.ts";
import { hasLimits } from "../../api/defaults.ts";
import { budgetName, exhausted, fold, measures, spending, warned, warnThreshold, type Measure } from "../../api/spending.ts";
import { type PodView } from "../observe.ts";
import { event, type Outcome, type OperatorStatus } from "../outcome.ts";
import { REASONS } from "../reasons.ts";
import { attemptOf, currentPod, type RunView } from "../run-view.ts";
import { needsHuman } from "./failure.ts";
import { newResumeToken } from "./lifecycle.ts";
import { isoSeconds, toMillis } from "../../api/timestamp.ts";

/**
 * Each limit of the run's budget with what the run has spent of it, now. Every decision asks,
 * heartbeat-only ones included: a run without limits (most runs) adds nothing up.
 */
export function budgetMeasures(view: RunView, next: OperatorStatus): Measure[] {
  if (!hasLimits(view.budget)) return [];
  const spent = spending(next.spent, view.status.heartbeat, attemptOf(next), view.budget.prices);
  const start = toMillis(next.startTime);
  return measures(view.budget, spent, start === undefined ? undefined : view.now - start);
}

/** The agent of the attempt has exited (or its pod has finished): its policy ends the attempt. */
const agentDone = (pod: PodView) => pod.agent.ended !== undefined || pod.phase === "Succeeded" || pod.phase === "Failed";

/** The guard: a run at or over any limit runs no further, and starts no sandbox. */
export function overBudget(view: RunView, next: OperatorStatus): Outcome | undefined {
  const hit = budgetMeasures(view, next).filter(exhausted);
  const first = hit[0];
  if (!first) return undefined;
  const pod = ACTIVE_PHASES.includes(next.phase as Phase) ? currentPod(view, next) : undefined;
  if (pod && agentDone(pod)) return undefined;
  const outcome = needsHuman(view, next, REASONS.budgetExhausted, cutToCodePoints(`${exhaustion(hit)}; raise ${limitFields(hit)}, then resume`, 4096), pod);
  return { ...outcome, metrics: [...(outcome.metrics ?? []), { kind: "budgetExhausted", limit: first.limit }] };
}

/**
 * A new watchdog.dev/resume value on a run that needs a person while a limit is still reached: no
 * new attempt, no sandbox. Counted as a stop for the budget only if the run was stopped for
 * something else (its spending reached a limit meanwhile, or the limit was lowered).
 */
export function resumeOverBudget(view: RunView, next: OperatorStatus): Outcome | undefined {
  const token = newResumeToken(view, next);
  if (token === undefined || next.phase !== "NeedsHumanIntervention") return undefined;
  const hit = budgetMeasures(view, next).filter(exhausted);
  const first = hit[0];
  if (!first) return undefined;
  const message = cutToCodePoints(`${exhaustion(hit)}; the resume is refused: raise ${limitFields(hit)}, then resume`, 4096);
  const again = next.reason !== REASONS.budgetExhausted;
  return {
    summary: `resume refused: ${first.limit} budget exhausted`,
    phase: { phase: "NeedsHumanIntervention", reason: REASONS.budgetExhausted, message },
    set: { observedResume: token },
    events: [event("Warning", REASONS.budgetExhausted, "RefuseResume", message)],
    metrics: again ? [{ kind: "needsHuman", reason: REASONS.budgetExhausted }, { kind: "budgetExhausted", limit: first.limit }] : [],
  };
}

const exhaustion = (hit: Measure[]) => hit.map((m) => `${budgetName(m.limit)} exhausted: ${m.describe(m.used)}`).join("; ");
const limitFields = (hit: Measure[]) => hit.map((m) => `spec.budget.${m.limit}`).join(" or ");

/** Phases in which no budget is watched: the run is finished, waits for a person, or is suspended. */
const UNWATCHED: ReadonlySet<Phase> = new Set(["Completed", "Failed", "NeedsHumanIntervention", "Suspended"]);

/**
 * A run still going: a BudgetWarning for each limit newly past warnAt, and a wake-up at the
 * wall-clock deadline (and at its warning), which fire whether or not the sandbox reports.
 */
export function budgetWatch(view: RunView, next: OperatorStatus): Outcome | undefined {
  if (UNWATCHED.has(next.phase as Phase) || view.run.metadata.deletionTimestamp) return undefined;
  const { warnAt } = view.budget;
  const records = next.budgetWarnings ?? [];
  const sent = (m: Measure) => records.some((r) => r.limit === m.limit && r.of === m.stated);
  const all = budgetMeasures(view, next);
  const due = all.filter((m) => !exhausted(m) && warned(m, warnAt) && !sent(m));
  const wakeAt: number[] = [];
  const start = toMillis(next.startTime);
  const clock = all.find((m) => m.limit === "wallClock");
  if (clock && start !== undefined) {
    if (!exhausted(clock)) wakeAt.push(start + Number(clock.allowed));
    if (!sent(clock) && !warned(clock, warnAt)) wakeAt.push(start + Number(warnThreshold(clock, warnAt)));
  }
  if (due.length === 0) return wakeAt.length ? { summary: "", wakeAt } : undefined;
  const time = isoSeconds(view.now);
  const kept = records.filter((r) => !due.some((m) => m.limit === r.limit));
  const added: BudgetWarningRecord[] = due.map((m) => ({ limit: m.limit, of: m.stated, time }));
  const percent = `${Number((warnAt * 100).toFixed(2))}%`;
  return {
    summary: `budget warning: ${due.map((m) => m.limit).join(", ")}`,
    set: { budgetWarnings: [...kept, ...added] },
    events: due.map((m) => event("Warning", REASONS.budgetWarning, "Warn", `${budgetName(m.limit)} ${percent} spent: ${m.describe(m.used)}`)),
    wakeAt,
  };
}

/**
 * The ended attempts' usage, folded into status.spent: every attempt before the current one, and
 * the current one too once the run is at rest (finished, or stopped for a person), since no
 * sandbox of it runs on. Unchanged (no write) when they are folded already.
 */
export function foldSpent(view: RunView, next: OperatorStatus): Outcome {
  const atRest = next.phase === "NeedsHumanIntervention" || next.phase === "Completed" || next.phase === "Failed";
  const attempt = attemptOf(next);
  const spent = fold({
    spent: next.spent,
    heartbeat: view.status.heartbeat,
    through: atRest ? attempt : attempt - 1,
    now: view.now,
    startTime: toMillis(next.startTime),
    prices: view.budget.prices,
  });
  return spent === next.spent ? { summary: "" } : { summary: "", set: { spent } };
}
