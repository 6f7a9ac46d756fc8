// Reading the ledger: a run's full history, by namespace and name or by uid. Used by the
// operator's /history route and by the CLI; it needs only a connection, not a running Ledger.
import type { QueryResult, QueryResultRow } from "pg";
import { formatDecimal, parseDecimal } from "../api/decimal.ts";
import type { ToolCallErrorRow, ToolCallState } from "./rows.ts";

/** Anything that runs a query: a pg Pool, Client or PoolClient. */
export interface Queryable {
  query<R extends QueryResultRow>(text: string, values?: unknown[]): Promise<QueryResult<R>>;
}

export interface TransitionRecord {
  runUid: string;
  namespace: string;
  name: string;
  phase: string;
  from?: string;
  reason?: string;
  message?: string;
  attempt: number;
  time: string;
}

export interface ToolCallRecord {
  runUid: string;
  namespace: string;
  runName: string;
  id: string;
  name: string;
  argsHash: string;
  idempotencyKey?: string;
  idempotent?: boolean;
  attempt?: number;
  state: ToolCallState;
  error?: ToolCallErrorRow;
  result?: string;
  startedAt?: string;
  finishedAt?: string;
  /** When the ledger first saw the call, and when it last saw it change. */
  firstSeen: string;
  lastSeen: string;
}

/** What one attempt of a run spent, as its sandbox last reported it (cumulative within the attempt). */
export interface AttemptUsageRecord {
  runUid: string;
  namespace: string;
  runName: string;
  attempt: number;
  inputTokens: number;
  outputTokens: number;
  /** An exact decimal string: reported, or priced from the run's prices; absent when neither is known. */
  cost?: string;
  /** The currency of the run's cost limit, when it has one. */
  currency?: string;
  toolCalls: number;
  model?: string;
  /** When the ledger first saw the attempt's usage, and when it last saw it grow. */
  firstSeen: string;
  lastSeen: string;
}

export interface GapRecord {
  runUid: string;
  namespace: string;
  name: string;
  kind: "transitions" | "tool_call";
  cause: "chain" | "dropped";
  /** The last transition stored before the gap; absent when the run's start is missing. */
  after?: { time: string; phase: string };
  /** The first transition stored after the gap; absent when none is. */
  before?: { time: string; from?: string; phase: string };
  /** How many transitions are known to be missing; absent when only their existence is known. */
  missing?: number;
  /** For kind tool_call: the call that was seen but never stored. */
  callId?: string;
  detectedAt: string;
}

export interface RunHistory {
  namespace: string;
  name: string;
  /** Every run that bore this name, oldest first (a name can be reused after a delete). */
  uids: string[];
  /** Oldest first. */
  transitions: TransitionRecord[];
  /** By start time (or first sight), oldest first. */
  toolCalls: ToolCallRecord[];
  gaps: GapRecord[];
  /**
   * What each attempt spent, by run, then attempt. Always read from the database; absent only
   * from a history an operator served before the ledger recorded usage.
   */
  usage?: AttemptUsageRecord[];
}

const iso = (v: unknown): string | undefined =>
  v instanceof Date ? v.toISOString() : typeof v === "string" ? new Date(v).toISOString() : undefined;

/** Copies the defined values only, so JSON output carries no nulls. */
function compact<T extends object>(value: T): T {
  return Object.fromEntries(Object.entries(value).filter(([, v]) => v !== undefined && v !== null)) as T;
}

function transitionRecord(r: QueryResultRow): TransitionRecord {
  return compact({
    runUid: r.run_uid,
    namespace: r.namespace,
    name: r.name,
    phase: r.to_phase,
    from: r.from_phase,
    reason: r.reason,
    message: r.message,
    attempt: r.attempt,
    time: iso(r.time) as string,
  });
}

function toolCallRecord(r: QueryResultRow): ToolCallRecord {
  return compact({
    runUid: r.run_uid,
    namespace: r.namespace,
    runName: r.run_name,
    id: r.call_id,
    name: r.tool_name,
    argsHash: r.args_hash,
    idempotencyKey: r.idempotency_key,
    idempotent: r.idempotent,
    attempt: r.attempt,
    state: r.state,
    error: r.error,
    result: r.result,
    startedAt: iso(r.started_at),
    finishedAt: iso(r.finished_at),
    firstSeen: iso(r.first_seen) as string,
    lastSeen: iso(r.last_seen) as string,
  });
}

/** Counts are bigint columns (pg reads them as strings); they never exceed 2^53 - 1, so a number holds them exactly. */
const count = (v: unknown): number => Number(v ?? 0);

function usageRecord(r: QueryResultRow): AttemptUsageRecord {
  const cost = typeof r.cost === "string" ? parseDecimal(r.cost) : undefined;
  return compact({
    runUid: r.run_uid,
    namespace: r.namespace,
    runName: r.run_name,
    attempt: r.attempt,
    inputTokens: count(r.input_tokens),
    outputTokens: count(r.output_tokens),
    // numeric keeps the scale it was given; the shortest form is what the operator writes elsewhere.
    cost: cost === undefined ? r.cost : formatDecimal(cost),
    currency: r.currency,
    toolCalls: count(r.tool_calls),
    model: r.model,
    firstSeen: iso(r.first_seen) as string,
    lastSeen: iso(r.last_seen) as string,
  });
}

export function gapRecord(r: QueryResultRow): GapRecord {
  return compact({
    runUid: r.run_uid,
    namespace: r.namespace,
    name: r.name,
    kind: r.kind,
    cause: r.cause,
    after: r.after_time ? { time: iso(r.after_time) as string, phase: r.after_phase } : undefined,
    before: r.before_time ? compact({ time: iso(r.before_time) as string, from: r.before_from, phase: r.before_phase }) : undefined,
    missing: r.missing,
    callId: r.call_id,
    detectedAt: iso(r.detected_at) as string,
  });
}

const UNDEFINED_TABLE = "42P01";

/**
 * The usage rows, or none when the table does not exist yet: a CLI newer than the operator that
 * writes the ledger reads a schema from before usage was recorded.
 */
async function readUsage(db: Queryable, text: string, params: unknown[]): Promise<QueryResultRow[]> {
  try {
    return (await db.query(text, params)).rows;
  } catch (err) {
    if ((err as { code?: unknown }).code === UNDEFINED_TABLE) return [];
    throw err;
  }
}

export type RunSelector = { namespace: string; name: string } | { uid: string };

/** A run's history, or undefined when the ledger holds nothing for it. */
export async function readHistory(db: Queryable, selector: RunSelector): Promise<RunHistory | undefined> {
  const [where, params] =
    "uid" in selector ? ["run_uid = $1", [selector.uid]] : ["namespace = $1 AND %name = $2", [selector.namespace, selector.name]];
  const filter = (nameColumn: string) => where.replace("%name", nameColumn);
  const transitions = await db.query(`SELECT * FROM ledger_transitions WHERE ${filter("name")} ORDER BY time, id`, params);
  const toolCalls = await db.query(
    `SELECT * FROM ledger_tool_calls WHERE ${filter("run_name")} ORDER BY COALESCE(started_at, first_seen), id`,
    params,
  );
  const gaps = await db.query(
    `SELECT * FROM ledger_gaps WHERE ${filter("name")} ORDER BY COALESCE(before_time, after_time, detected_at), id`,
    params,
  );
  const usage = await readUsage(db, `SELECT * FROM ledger_attempt_usage WHERE ${filter("run_name")} ORDER BY run_uid, attempt`, params);
  if (transitions.rows.length + toolCalls.rows.length + gaps.rows.length + usage.length === 0) return undefined;

  const history: RunHistory = {
    namespace: "",
    name: "",
    uids: [],
    transitions: transitions.rows.map(transitionRecord),
    toolCalls: toolCalls.rows.map(toolCallRecord),
    gaps: gaps.rows.map(gapRecord),
    usage: usage.map(usageRecord),
  };
  // Oldest first: by each uid's earliest record.
  const firstSeen = new Map<string, string>();
  const note = (uid: string, time: string) => {
    const known = firstSeen.get(uid);
    if (known === undefined || time < known) firstSeen.set(uid, time);
  };
  for (const t of history.transitions) note(t.runUid, t.time);
  for (const c of history.toolCalls) note(c.runUid, c.startedAt ?? c.firstSeen);
  for (const g of history.gaps) note(g.runUid, g.after?.time ?? g.before?.time ?? g.detectedAt);
  for (const u of history.usage ?? []) note(u.runUid, u.firstSeen);
  history.uids = [...firstSeen.entries()].sort((a, b) => (a[1] < b[1] ? -1 : a[1] > b[1] ? 1 : 0)).map(([uid]) => uid);
  // Runs oldest first, like the uids; each run's attempts in order.
  const rank = new Map(history.uids.map((uid, i) => [uid, i]));
  history.usage?.sort((a, b) => (rank.get(a.runUid) ?? 0) - (rank.get(b.runUid) ?? 0) || a.attempt - b.attempt);
  const first = history.transitions[0] ?? history.gaps[0];
  const named = history.toolCalls[0] ?? history.usage?.[0];
  history.namespace = first?.namespace ?? named?.namespace ?? "";
  history.name = first?.name ?? named?.runName ?? "";
  if ("namespace" in selector) {
    history.namespace = selector.namespace;
    history.name = selector.name;
  }
  return history;
}
