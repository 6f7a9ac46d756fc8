// The bounded history of phase transitions in status (the ledger keeps the whole of it).
import { MAX_TRANSITIONS, type Phase, type Transition } from "../api/agentrun.ts";
import type { OperatorStatus } from "./outcome.ts";

export interface Step {
  phase: Phase;
  reason?: string;
  message?: string;
}

/**
 * Appends the phases a decision passed through. Each gets its own millisecond, the last one `now`,
 * because a transition's time is unique per run (the ledger keys on it).
 */
export function withTransitions(next: OperatorStatus, previous: Phase | undefined, steps: Step[], now: number): Transition[] | undefined {
  const taken = steps.filter((step, i) => i > 0 || step.phase !== previous);
  if (taken.length === 0) return next.transitions;
  const last = taken.at(-1) as Step;
  if (last.phase === next.phase) {
    // the final phase's reason is what it ended with, after any clearing within the decision
    last.reason = next.reason;
    last.message = next.message;
  }
  let from = previous;
  const recorded = taken.map((step, i) => {
    const transition: Transition = { phase: step.phase, attempt: next.attempt ?? 0, time: new Date(now - (taken.length - 1 - i)).toISOString() };
    if (from) transition.from = from;
    if (step.reason) transition.reason = step.reason;
    if (step.message) transition.message = step.message;
    from = step.phase;
    return transition;
  });
  return [...(next.transitions ?? []), ...recorded].slice(-MAX_TRANSITIONS);
}
