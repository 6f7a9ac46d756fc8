// What one policy decided. Policies are pure functions of a run's view and its operator status so
// far; they return an Outcome and never mutate anything. decide() applies outcomes in order, so a
// reader follows one reconcile as a list of decisions, each with the reason it was taken.
import type { AgentRunStatus, Phase } from "../api/agentrun.ts";
import type { OPERATOR_STATUS_FIELDS, MetricSignal, PlannedEvent } from "./plan.ts";
import type { PodView } from "./observe.ts";

export type OperatorStatus = Pick<AgentRunStatus, (typeof OPERATOR_STATUS_FIELDS)[number]>;

/** A pod the run must be rid of: a kill (killGracePeriod) or a clean-up (the pod's own grace). */
export interface Deletion {
  pod: PodView;
  kill: boolean;
}

export interface Outcome {
  /** One line saying what was decided and why, for logs. */
  summary: string;
  /** The phase entered, with the reason and message that explain it. */
  phase?: { phase: Phase; reason?: string; message?: string };
  /** Operator status fields to set; a field set to undefined is removed. */
  set?: Partial<OperatorStatus>;
  deletions?: Deletion[];
  /** Start this attempt's sandbox pod. */
  createPod?: boolean;
  events?: PlannedEvent[];
  metrics?: MetricSignal[];
  /** Times (ms) at which the run must be looked at again. */
  wakeAt?: (number | undefined)[];
  /** User annotations this decision consumed (answers). */
  consume?: string[];
  /** Hand the run to the Queued policy next, in the same decision (resume, unsuspend, approval). */
  then?: "queued";
}

export const event = (type: PlannedEvent["type"], reason: string, action: string, note: string): PlannedEvent => ({ type, reason, action, note });

/** Nothing to do but, perhaps, look again later. */
export const wait = (summary: string, ...wakeAt: (number | undefined)[]): Outcome => ({ summary, wakeAt });

/** Several findings of the same decision, in order: later ones win field by field. */
export function merge(...outcomes: Outcome[]): Outcome {
  const out: Outcome = { summary: "" };
  for (const o of outcomes) {
    if (o.summary) out.summary = o.summary;
    if (o.phase) out.phase = o.phase;
    if (o.set) out.set = { ...out.set, ...o.set };
    if (o.deletions) out.deletions = [...(out.deletions ?? []), ...o.deletions];
    if (o.createPod) out.createPod = true;
    if (o.events) out.events = [...(out.events ?? []), ...o.events];
    if (o.metrics) out.metrics = [...(out.metrics ?? []), ...o.metrics];
    if (o.wakeAt) out.wakeAt = [...(out.wakeAt ?? []), ...o.wakeAt];
    if (o.consume) out.consume = [...(out.consume ?? []), ...o.consume];
    if (o.then) out.then = o.then;
  }
  if (!out.summary) out.summary = "no change";
  return out;
}
