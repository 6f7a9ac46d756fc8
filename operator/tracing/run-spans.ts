// A run's spans, derived from its phase transitions (status.transitions) and its approval and
// stall status: pure, so what a trace holds can be read and tested without a collector.
//
// A span is exported once it has ended, and it ends at a transition, so the fold works on
// transitions: replaying those a run already holds rebuilds which attempt and which wait are open
// (and since when) without exporting anything, and folding the transitions this operator then
// writes ends spans. A restarted or failed-over operator therefore continues the trace where the
// last one stopped, with the same ids (trace-context.ts) and the start times the object keeps.
//
// The shape, in the OpenTelemetry GenAI conventions where they have words and in `watchdog.*`
// where they have none (attempts, waits, retries, resumes):
//   agentrun <name>                      the run, from its creation to its terminal phase
//   ├─ invoke_agent <name>               one per attempt, linked to the attempt before it
//   │    events: watchdog.kill, watchdog.nudge, watchdog.intervention
//   │    └─ (the sandbox's spans: execute_tool, the framework's own, under TRACEPARENT)
//   ├─ wait backoff | rate_limit | intervention | suspension   between attempts
//   └─ wait approval                     from the request to its answer
import type { AgentRunStatus, Phase, Transition } from "../api/agentrun.ts";
import { REASONS } from "../watchdog/reasons.ts";
import { approvalSpanId, attemptSpanId, runSpanId, waitSpanId } from "../watchdog/trace-context.ts";

export type AttributeValue = string | number | boolean;
export type Attributes = Record<string, AttributeValue>;

export interface SpanEvent {
  name: string;
  time: number;
  attributes: Attributes;
}

/** One ended span, as the exporter needs it. Times are ms since the epoch, from the run's own records. */
export interface SpanRecord {
  spanId: string;
  /** Absent for the run's root span. */
  parentSpanId?: string;
  name: string;
  start: number;
  end: number;
  attributes: Attributes;
  events: SpanEvent[];
  links: { spanId: string; attributes: Attributes }[];
  status: { code: "ok" } | { code: "error"; message: string } | { code: "unset" };
}

/** Who the run is: what every span of it names. */
export interface RunIdentity {
  uid: string;
  name: string;
  namespace: string;
  /** metadata.creationTimestamp, ms: where the root span starts. */
  createdAt: number;
}

export type WaitKind = "backoff" | "rate_limit" | "intervention" | "suspension";

interface OpenAttempt {
  attempt: number;
  start: number;
  events: SpanEvent[];
}

interface OpenWait {
  kind: WaitKind;
  reason?: string;
  /** The transition that opened it: its time names the span. */
  startedAt: string;
  attempt: number;
}

/** What the fold remembers of one run between observations. */
export interface RunTraceState {
  /** Time of the newest transition folded in. */
  through?: number;
  attempt?: OpenAttempt;
  wait?: OpenWait;
  /** Approval requests whose wait has been accounted for (newest last, a few). */
  approvals: string[];
  /** Time of the newest nudge seen. */
  lastNudge?: string;
  /** The root span has ended. */
  ended: boolean;
}

export const initialTraceState = (): RunTraceState => ({ approvals: [], ended: false });

const ACTIVE: ReadonlySet<Phase> = new Set<Phase>(["Starting", "Planning", "ExecutingTool", "AwaitingReply"]);
const TERMINAL: ReadonlySet<Phase> = new Set<Phase>(["Completed", "Failed"]);
/** Reasons for which the watchdog deleted the sandbox: the attempt's span gets a watchdog.kill event. */
const KILLS: ReadonlySet<string> = new Set<string>([
  REASONS.heartbeatTimeout,
  REASONS.startTimeout,
  REASONS.toolLoop,
  REASONS.stallUnresolved,
  REASONS.budgetExhausted,
]);
/** Attempt outcomes that are failures of the attempt (its span's status is an error). */
const FAILURES: ReadonlySet<string> = new Set<string>([REASONS.heartbeatTimeout, REASONS.startTimeout, REASONS.podFailed]);
const APPROVALS_KEPT = 8;

/** The wait a transition begins, if it begins one worth a span. */
function waitKindOf(transition: Transition): WaitKind | undefined {
  switch (transition.phase) {
    case "NeedsHumanIntervention":
      return "intervention";
    case "Suspended":
      return "suspension";
    case "Queued":
      if (transition.reason === REASONS.rateLimited) return "rate_limit";
      if (transition.reason !== undefined && FAILURES.has(transition.reason)) return "backoff";
      return undefined;
    default:
      return undefined;
  }
}

const agentAttributes = (run: RunIdentity): Attributes => ({
  "gen_ai.agent.name": run.name,
  "gen_ai.agent.id": run.uid,
  "watchdog.run.namespace": run.namespace,
});

function attemptSpan(run: RunIdentity, open: OpenAttempt, ended: Transition, end: number): SpanRecord {
  const outcome = ended.reason ?? ended.phase;
  const events = [...open.events];
  if (ended.reason !== undefined && KILLS.has(ended.reason)) {
    events.push({ name: "watchdog.kill", time: end, attributes: { "watchdog.reason": ended.reason } });
  }
  if (ended.phase === "NeedsHumanIntervention") {
    events.push({ name: "watchdog.intervention", time: end, attributes: { "watchdog.reason": outcome } });
  }
  const failed = ended.phase === "Failed" || ended.phase === "NeedsHumanIntervention" || FAILURES.has(outcome);
  return {
    spanId: attemptSpanId(run.uid, open.attempt),
    parentSpanId: runSpanId(run.uid),
    name: `invoke_agent ${run.name}`,
    start: open.start,
    end,
    attributes: { "gen_ai.operation.name": "invoke_agent", ...agentAttributes(run), "watchdog.attempt": open.attempt, "watchdog.outcome": outcome },
    events,
    // Attempts are numbered one after another; each continues the one before it, after a retry or
    // a person's resume alike.
    links: open.attempt > 1 ? [{ spanId: attemptSpanId(run.uid, open.attempt - 1), attributes: { "watchdog.link": "previous_attempt" } }] : [],
    status: ended.phase === "Completed" ? { code: "ok" } : failed ? { code: "error", message: ended.message ?? outcome } : { code: "unset" },
  };
}

function waitSpan(run: RunIdentity, open: OpenWait, end: number): SpanRecord {
  const attributes: Attributes = { "watchdog.wait.kind": open.kind, "watchdog.attempt": open.attempt, ...agentAttributes(run) };
  if (open.reason !== undefined) attributes["watchdog.wait.reason"] = open.reason;
  return {
    spanId: waitSpanId(run.uid, open.kind, open.startedAt),
    parentSpanId: runSpanId(run.uid),
    name: `wait ${open.kind}`,
    start: Date.parse(open.startedAt),
    end,
    attributes,
    events: [],
    links: [],
    status: { code: "unset" },
  };
}

function rootSpan(run: RunIdentity, ended: Transition, end: number): SpanRecord {
  const outcome = ended.reason ?? ended.phase;
  return {
    spanId: runSpanId(run.uid),
    name: `agentrun ${run.name}`,
    start: Math.min(run.createdAt, end),
    end,
    attributes: { ...agentAttributes(run), "watchdog.run.name": run.name, "watchdog.run.uid": run.uid, "watchdog.attempts": ended.attempt, "watchdog.outcome": outcome },
    events: [],
    links: [],
    status: ended.phase === "Completed" ? { code: "ok" } : { code: "error", message: ended.message ?? outcome },
  };
}

/** Folds one transition in: the spans it ends, and what stays open. */
function foldTransition(run: RunIdentity, state: RunTraceState, transition: Transition): SpanRecord[] {
  const time = Date.parse(transition.time);
  const ended: SpanRecord[] = [];
  const open = state.attempt;
  const active = ACTIVE.has(transition.phase);
  if (open && (!active || transition.attempt !== open.attempt)) {
    ended.push(attemptSpan(run, open, transition, time));
    state.attempt = undefined;
  }
  // A wait lasts until the run's next transition, whatever it is.
  if (state.wait) {
    ended.push(waitSpan(run, state.wait, time));
    state.wait = undefined;
  }
  if (active && !state.attempt) state.attempt = { attempt: transition.attempt, start: time, events: [] };
  const kind = waitKindOf(transition);
  if (kind && !state.wait) {
    state.wait = { kind, startedAt: transition.time, attempt: transition.attempt, ...(transition.reason !== undefined ? { reason: transition.reason } : {}) };
  }
  if (TERMINAL.has(transition.phase) && !state.ended) {
    ended.push(rootSpan(run, transition, time));
    state.ended = true;
  }
  state.through = time;
  return ended;
}

/** The wait for an approval's answer, once it has one. */
function approvalSpan(run: RunIdentity, approval: NonNullable<AgentRunStatus["approval"]> & { id: string }, end: number): SpanRecord {
  return {
    spanId: approvalSpanId(run.uid, approval.id),
    parentSpanId: runSpanId(run.uid),
    name: "wait approval",
    start: Date.parse(approval.requestedAt),
    end,
    attributes: { "watchdog.wait.kind": "approval", "watchdog.approval.id": approval.id, "watchdog.approval.state": approval.state, ...agentAttributes(run) },
    events: [],
    links: [],
    status: { code: "unset" },
  };
}

/**
 * Folds a run's status into `state` and returns the spans that ended since the state was last
 * folded (the state is updated in place). Transitions at or before `state.through` were folded
 * already. Fold a run's status as first seen to rebuild the state, discarding what it returns.
 */
export function runSpans(run: RunIdentity, status: AgentRunStatus | undefined, state: RunTraceState): SpanRecord[] {
  const spans: SpanRecord[] = [];
  for (const transition of status?.transitions ?? []) {
    const time = Date.parse(transition.time);
    if (!Number.isFinite(time) || (state.through !== undefined && time <= state.through)) continue;
    spans.push(...foldTransition(run, state, transition));
  }
  const nudge = status?.stall?.lastNudge;
  if (nudge && nudge.time !== state.lastNudge) {
    state.lastNudge = nudge.time;
    state.attempt?.events.push({ name: "watchdog.nudge", time: Date.parse(nudge.time), attributes: { "watchdog.nudges": status?.stall?.nudges ?? 0 } });
  }
  const approval = status?.approval;
  const id = approval?.id;
  if (approval && id && approval.state !== "Pending" && !state.approvals.includes(id)) {
    state.approvals = [...state.approvals, id].slice(-APPROVALS_KEPT);
    const end = Date.parse(approval.decidedAt ?? "") || state.through;
    if (end !== undefined && Number.isFinite(Date.parse(approval.requestedAt))) spans.push(approvalSpan(run, { ...approval, id }, end));
  }
  return spans;
}
