// From run objects to ledger rows, and the small per-run memory that lets observe() queue only
// what is new. Pure: no I/O, no clock (callers pass the time), so it is cheap on the reconcile
// path and easy to test.
//
// The run objects come straight from the API server, so nothing here trusts their shape: an
// entry that is not well-formed is skipped rather than allowed to poison a batch later.
import { MAX_TRANSITIONS, TOOL_CALL_STATES, type BudgetSpec } from "../api/agentrun.ts";
import type { Json } from "../kube/client.ts";
import { hasUsage, mergeUsage, UsageMemory, usageRow, type AttemptUsageRow } from "./usage.ts";

export interface RunRef {
  uid: string;
  namespace: string;
  name: string;
}

/** A row of ledger_transitions, as written (times are ISO strings). */
export interface TransitionRow {
  run_uid: string;
  namespace: string;
  name: string;
  attempt: number;
  from_phase: string | null;
  to_phase: string;
  reason: string | null;
  message: string | null;
  time: string;
}

export type ToolCallState = (typeof TOOL_CALL_STATES)[number];

export interface ToolCallErrorRow {
  message?: string;
  httpStatus?: number;
  retryAfterSeconds?: number;
}

/** A row of ledger_tool_calls, as written. seen_at becomes first_seen and last_seen. */
export interface ToolCallRow {
  run_uid: string;
  namespace: string;
  run_name: string;
  call_id: string;
  idempotency_key: string | null;
  tool_name: string;
  args_hash: string;
  idempotent: boolean | null;
  attempt: number | null;
  state: ToolCallState;
  error: ToolCallErrorRow | null;
  result: string | null;
  started_at: string | null;
  finished_at: string | null;
  seen_at: string;
}

export type { AttemptUsageRow } from "./usage.ts";

export type Row =
  | { kind: "transition"; row: TransitionRow }
  | { kind: "toolCall"; row: ToolCallRow }
  | { kind: "attemptUsage"; row: AttemptUsageRow };

/** Started is the only state a call leaves; Succeeded and Failed are final. */
export function stateRank(state: ToolCallState): number {
  return state === "Started" ? 0 : 1;
}

// PostgreSQL text and jsonb cannot hold NUL; one stray byte from a sandbox must not make a batch
// fail forever.
function text(value: unknown): string | undefined {
  return typeof value === "string" ? value.replaceAll("\u0000", "") : undefined;
}

function int(value: unknown): number | undefined {
  return typeof value === "number" && Number.isSafeInteger(value) && Math.abs(value) <= 2_147_483_647 ? value : undefined;
}

/** Normalises a timestamp to ISO 8601 UTC, or undefined when it does not parse. */
function isoTime(value: unknown): string | undefined {
  if (typeof value !== "string") return undefined;
  const ms = Date.parse(value);
  return Number.isFinite(ms) ? new Date(ms).toISOString() : undefined;
}

export function runRef(run: Json): RunRef | undefined {
  const meta = run.metadata as Record<string, unknown> | undefined;
  const uid = text(meta?.uid);
  const namespace = text(meta?.namespace);
  const name = text(meta?.name);
  return uid && namespace !== undefined && name ? { uid, namespace, name } : undefined;
}

function statusList(run: Json, field: "transitions" | "toolCalls"): Record<string, unknown>[] {
  const status = run.status as Record<string, unknown> | undefined;
  const list = status?.[field];
  return Array.isArray(list) ? list.filter((e): e is Record<string, unknown> => typeof e === "object" && e !== null) : [];
}

function transitionRow(t: Record<string, unknown>, ref: RunRef): TransitionRow | undefined {
  const phase = text(t.phase);
  const time = isoTime(t.time);
  const attempt = int(t.attempt);
  if (!phase || !time || attempt === undefined) return undefined;
  return {
    run_uid: ref.uid,
    namespace: ref.namespace,
    name: ref.name,
    attempt,
    from_phase: text(t.from) ?? null,
    to_phase: phase,
    reason: text(t.reason) ?? null,
    message: text(t.message) ?? null,
    time,
  };
}

export function transitionRows(run: Json, ref: RunRef): TransitionRow[] {
  const rows: TransitionRow[] = [];
  for (const t of statusList(run, "transitions")) {
    const row = transitionRow(t, ref);
    if (row) rows.push(row);
  }
  return rows;
}

function errorRow(value: unknown): ToolCallErrorRow | null {
  if (typeof value !== "object" || value === null) return null;
  const e = value as Record<string, unknown>;
  const row: ToolCallErrorRow = {};
  const message = text(e.message);
  if (message !== undefined) row.message = message;
  const httpStatus = int(e.httpStatus);
  if (httpStatus !== undefined) row.httpStatus = httpStatus;
  if (typeof e.retryAfterSeconds === "number" && Number.isFinite(e.retryAfterSeconds)) row.retryAfterSeconds = e.retryAfterSeconds;
  return row;
}

function toolCallRow(c: Record<string, unknown>, ref: RunRef, seenAt: string): ToolCallRow | undefined {
  const id = text(c.id);
  const name = text(c.name);
  const state = c.state as ToolCallState;
  if (!id || name === undefined || !TOOL_CALL_STATES.includes(state)) return undefined;
  return {
    run_uid: ref.uid,
    namespace: ref.namespace,
    run_name: ref.name,
    call_id: id,
    idempotency_key: text(c.idempotencyKey) ?? null,
    tool_name: name,
    args_hash: text(c.argsHash) ?? "",
    idempotent: typeof c.idempotent === "boolean" ? c.idempotent : null,
    attempt: int(c.attempt) ?? null,
    state,
    error: errorRow(c.error),
    result: text(c.result) ?? null,
    started_at: isoTime(c.startedAt) ?? null,
    finished_at: isoTime(c.finishedAt) ?? null,
    seen_at: seenAt,
  };
}

export function toolCallRows(run: Json, ref: RunRef, seenAt: string): ToolCallRow[] {
  const rows: ToolCallRow[] = [];
  for (const c of statusList(run, "toolCalls")) {
    const row = toolCallRow(c, ref, seenAt);
    if (row) rows.push(row);
  }
  return rows;
}

/** About how many rows the run object holds, without building them. */
export function rowCount(run: Json): number {
  return statusList(run, "transitions").length + statusList(run, "toolCalls").length + (hasUsage(run) ? 1 : 0);
}

/**
 * Every row the run object holds, whether or not the ledger has it already. `install` is the
 * install's budget defaults, whose prices price the tokens of a model the run does not price.
 */
export function allRows(run: Json, ref: RunRef, seenAt: string, install?: BudgetSpec): Row[] {
  const usage = usageRow(run, ref, seenAt, install);
  return [
    ...transitionRows(run, ref).map((row) => ({ kind: "transition" as const, row })),
    ...toolCallRows(run, ref, seenAt).map((row) => ({ kind: "toolCall" as const, row })),
    ...(usage ? [{ kind: "attemptUsage" as const, row: usage }] : []),
  ];
}

/** A transition the buffer dropped before it was written. */
export interface DroppedTransition {
  time: string;
  phase: string;
}

/** Beyond this many per run, dropped rows are only counted, so an outage cannot grow memory. */
export const MAX_DROPPED_PER_RUN = 1000;

/**
 * What the ledger has queued or written for one run. Only enough to tell what is new: the times
 * of recent transitions (unique per run), the furthest state of each call still in status, and
 * the greatest usage of recent attempts.
 */
export class RunMemory {
  namespace: string;
  name: string;
  /** Times (ms) of transitions already queued, oldest first, bounded. */
  private transitionTimes: number[] = [];
  /** Call id -> rank of the furthest state queued. */
  private calls = new Map<string, number>();
  private readonly usage = new UsageMemory();
  /** Rows dropped from the full buffer, not yet checked against the object and the database. */
  droppedTransitions: DroppedTransition[] = [];
  droppedCalls = new Set<string>();
  /**
   * The greatest dropped usage row of each attempt. A usage row is its own figures, so keeping it
   * costs what a reference would, and the catch-up writes it back: an ended attempt's spending is
   * in no object any more, and would otherwise be lost.
   */
  droppedUsage = new Map<number, AttemptUsageRow>();
  /** Dropped rows beyond MAX_DROPPED_PER_RUN, known only by number. */
  droppedUntracked = 0;
  /** Tick of the last observe or catch-up that touched this run. */
  touched = 0;
  /** Since when catch-ups have left this run's drops for later because its object lagged. */
  deferredSince: number | undefined;
  /** The newest call observe() has seen (status lists calls newest last), by start time. */
  private newestCall: { id: string; startedMs: number } | undefined;

  constructor(ref: RunRef) {
    this.namespace = ref.namespace;
    this.name = ref.name;
  }

  /**
   * The rows of `run` that were not queued before, remembering them as queued. Stale objects
   * (an informer cache behind a write the controller already observed) yield nothing new.
   */
  diff(run: Json, ref: RunRef, seenAt: string, install?: BudgetSpec): Row[] {
    this.namespace = ref.namespace;
    this.name = ref.name;
    const out: Row[] = [];
    // Most observations bring nothing new: check the memory before building any row, so the
    // common case allocates next to nothing.
    for (const t of statusList(run, "transitions")) {
      const ms = typeof t.time === "string" ? Date.parse(t.time) : NaN;
      if (!Number.isFinite(ms) || this.transitionTimes.includes(ms)) continue;
      const row = transitionRow(t, ref);
      if (row && this.rememberTransition(ms)) out.push({ kind: "transition", row });
    }
    const calls = statusList(run, "toolCalls");
    const last = calls.at(-1);
    const lastStarted = typeof last?.startedAt === "string" ? Date.parse(last.startedAt) : NaN;
    if (typeof last?.id === "string" && Number.isFinite(lastStarted) && !(lastStarted < (this.newestCall?.startedMs ?? -Infinity))) {
      this.newestCall = { id: last.id, startedMs: lastStarted };
    }
    for (const c of calls) {
      const known = typeof c.id === "string" ? this.calls.get(c.id) : undefined;
      if (known !== undefined && known >= stateRank(c.state as ToolCallState)) continue;
      const row = toolCallRow(c, ref, seenAt);
      if (row && this.rememberCall(row.call_id, row.state)) out.push({ kind: "toolCall", row });
    }
    // Status keeps only the newest calls; ids that rotated out will not come back (a stale
    // object might repeat one, which costs a redundant idempotent write, nothing more).
    if (this.calls.size > calls.length) {
      const current = new Set(calls.map((c) => c.id));
      for (const id of this.calls.keys()) if (!current.has(id)) this.calls.delete(id);
    }
    const usage = this.usage.diff(run, ref, seenAt, install);
    if (usage) out.push({ kind: "attemptUsage", row: usage });
    return out;
  }

  /**
   * Whether `run` is at least as new as every version observe() has seen. A catch-up judges
   * dropped rows lost only against such an object: the controller also observes the object a
   * write returned, and the informer cache the catch-up lists from may lag a moment behind it.
   */
  coveredBy(run: Json): boolean {
    const newestTransition = this.transitionTimes.at(-1);
    if (newestTransition !== undefined) {
      let newest = -Infinity;
      for (const t of statusList(run, "transitions")) {
        const ms = typeof t.time === "string" ? Date.parse(t.time) : NaN;
        if (ms > newest) newest = ms;
      }
      if (!(newest >= newestTransition)) return false;
    }
    if (this.newestCall) {
      const { id, startedMs } = this.newestCall;
      const calls = statusList(run, "toolCalls");
      const same = calls.find((c) => c.id === id);
      if (same) {
        const known = this.calls.get(id);
        if (known !== undefined && stateRank(same.state as ToolCallState) < known) return false;
      } else {
        // Missing: rotated out of a newer object, or not in an older one yet.
        const last = calls.at(-1);
        const lastStarted = typeof last?.startedAt === "string" ? Date.parse(last.startedAt) : NaN;
        if (!(lastStarted > startedMs)) return false;
      }
    }
    return true;
  }

  /** Records rows as queued without producing them (a catch-up writes them itself); returns the transitions and calls it did not know. */
  remember(rows: readonly Row[]): Row[] {
    const unknown: Row[] = [];
    for (const r of rows) {
      if (r.kind === "transition") {
        if (this.rememberTransition(Date.parse(r.row.time))) unknown.push(r);
      } else if (r.kind === "toolCall") {
        if (this.rememberCall(r.row.call_id, r.row.state)) unknown.push(r);
      } else this.usage.remember(r.row);
    }
    return unknown;
  }

  private rememberTransition(ms: number): boolean {
    const times = this.transitionTimes;
    if (times.includes(ms)) return false;
    // Keep the list sorted: transitions normally arrive in order, so this is an append.
    let i = times.length;
    while (i > 0 && (times[i - 1] as number) > ms) i--;
    // Older than everything remembered and the memory is full: it was seen long ago.
    if (i === 0 && times.length >= 2 * MAX_TRANSITIONS) return false;
    times.splice(i, 0, ms);
    if (times.length > 2 * MAX_TRANSITIONS) times.shift();
    return true;
  }

  private rememberCall(id: string, state: ToolCallState): boolean {
    const rank = stateRank(state);
    const known = this.calls.get(id);
    if (known !== undefined && known >= rank) return false;
    this.calls.set(id, rank);
    return true;
  }

  /**
   * Notes a row the buffer had to drop, so a catch-up can tell recovered from lost; a usage row is
   * kept whole (merged with the attempt's earlier drops), for the catch-up to write back.
   */
  noteDropped(row: Row): void {
    const known = row.kind === "attemptUsage" ? this.droppedUsage.get(row.row.attempt) : undefined;
    if (known === undefined && this.droppedTransitions.length + this.droppedCalls.size + this.droppedUsage.size >= MAX_DROPPED_PER_RUN) {
      this.droppedUntracked++;
    } else if (row.kind === "attemptUsage") {
      const seen_at = known && known.seen_at > row.row.seen_at ? known.seen_at : row.row.seen_at;
      this.droppedUsage.set(row.row.attempt, known ? { ...mergeUsage(known, row.row), seen_at } : row.row);
    } else if (row.kind === "transition") {
      this.droppedTransitions.push({ time: row.row.time, phase: row.row.to_phase });
    } else {
      this.droppedCalls.add(row.row.call_id);
    }
  }

  get hasDropped(): boolean {
    return this.droppedTransitions.length > 0 || this.droppedCalls.size > 0 || this.droppedUsage.size > 0 || this.droppedUntracked > 0;
  }
}
