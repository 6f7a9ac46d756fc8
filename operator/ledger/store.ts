// The ledger's writes. Each takes its rows as one JSON parameter and expands it with
// jsonb_to_recordset, so a batch of any size is a single multi-row statement per table without
// running into the protocol's limit on bind parameters. Every write is idempotent: replaying a
// batch, or writing rows another replica wrote already, changes nothing.
import type { ClientBase, QueryResultRow } from "pg";
import { gapRecord, type GapRecord } from "./read.ts";
import { stateRank, type Row, type ToolCallRow, type TransitionRow } from "./rows.ts";
import { mergeUsage, type AttemptUsageRow } from "./usage.ts";

type Seen = { first_seen: string; last_seen: string };
type ToolCallWrite = Omit<ToolCallRow, "seen_at"> & Seen;
type UsageWrite = Omit<AttemptUsageRow, "seen_at"> & Seen;

const span = (known: Seen, seen: string): Seen => ({
  first_seen: known.first_seen < seen ? known.first_seen : seen,
  last_seen: known.last_seen > seen ? known.last_seen : seen,
});

/** Collapses repeats inside one batch: ON CONFLICT DO UPDATE may touch a row only once per statement. */
export function dedupe(rows: readonly Row[]): { transitions: TransitionRow[]; toolCalls: ToolCallWrite[]; usage: UsageWrite[] } {
  const transitions = new Map<string, TransitionRow>();
  const toolCalls = new Map<string, ToolCallWrite>();
  const usage = new Map<string, UsageWrite>();
  for (const r of rows) {
    if (r.kind === "transition") {
      const key = `${r.row.run_uid}\u0000${r.row.time}\u0000${r.row.to_phase}`;
      if (!transitions.has(key)) transitions.set(key, r.row);
      continue;
    }
    if (r.kind === "attemptUsage") {
      const key = `${r.row.run_uid}\u0000${r.row.attempt}`;
      const { seen_at: seen, ...figures } = r.row;
      const known = usage.get(key);
      const write = { ...figures, first_seen: seen, last_seen: seen };
      usage.set(key, known ? { ...mergeUsage(known, write), ...span(known, seen) } : write);
      continue;
    }
    const key = `${r.row.run_uid}\u0000${r.row.call_id}`;
    const { seen_at: seen, ...call } = r.row;
    const known = toolCalls.get(key);
    if (!known) {
      toolCalls.set(key, { ...call, first_seen: seen, last_seen: seen });
      continue;
    }
    const winner = stateRank(call.state) > stateRank(known.state) ? call : known;
    toolCalls.set(key, { ...winner, ...span(known, seen) });
  }
  return { transitions: [...transitions.values()], toolCalls: [...toolCalls.values()], usage: [...usage.values()] };
}

const INSERT_TRANSITIONS = `
  INSERT INTO ledger_transitions (run_uid, namespace, name, attempt, from_phase, to_phase, reason, message, time)
  SELECT r.run_uid, r.namespace, r.name, r.attempt, r.from_phase, r.to_phase, r.reason, r.message, r.time
  FROM jsonb_to_recordset($1::jsonb) AS r(
    run_uid text, namespace text, name text, attempt integer, from_phase text, to_phase text,
    reason text, message text, time timestamptz)
  ORDER BY r.run_uid, r.time
  ON CONFLICT ON CONSTRAINT ledger_transitions_key DO NOTHING`;

// A call's state only moves forward: Started may become Succeeded or Failed, never the reverse,
// and a final state is never replaced. So the update applies only to a stored Started row.
const UPSERT_TOOL_CALLS = `
  INSERT INTO ledger_tool_calls AS c (
    run_uid, namespace, run_name, call_id, idempotency_key, tool_name, args_hash, idempotent,
    attempt, state, error, result, started_at, finished_at, first_seen, last_seen)
  SELECT r.run_uid, r.namespace, r.run_name, r.call_id, r.idempotency_key, r.tool_name, r.args_hash,
    r.idempotent, r.attempt, r.state, r.error, r.result, r.started_at, r.finished_at, r.first_seen, r.last_seen
  FROM jsonb_to_recordset($1::jsonb) AS r(
    run_uid text, namespace text, run_name text, call_id text, idempotency_key text, tool_name text,
    args_hash text, idempotent boolean, attempt integer, state text, error jsonb, result text,
    started_at timestamptz, finished_at timestamptz, first_seen timestamptz, last_seen timestamptz)
  ORDER BY r.run_uid, r.call_id
  ON CONFLICT ON CONSTRAINT ledger_tool_calls_key DO UPDATE SET
    idempotency_key = COALESCE(EXCLUDED.idempotency_key, c.idempotency_key),
    tool_name = EXCLUDED.tool_name,
    args_hash = EXCLUDED.args_hash,
    idempotent = COALESCE(EXCLUDED.idempotent, c.idempotent),
    attempt = COALESCE(EXCLUDED.attempt, c.attempt),
    state = EXCLUDED.state,
    error = EXCLUDED.error,
    result = EXCLUDED.result,
    started_at = COALESCE(c.started_at, EXCLUDED.started_at),
    finished_at = EXCLUDED.finished_at,
    first_seen = LEAST(c.first_seen, EXCLUDED.first_seen),
    last_seen = GREATEST(c.last_seen, EXCLUDED.last_seen)
  WHERE c.state = 'Started' AND EXCLUDED.state <> 'Started'`;

// Each figure only grows, whatever order writes come in, and a write that grows none changes
// nothing (so last_seen is when the attempt last spent more). The model and currency follow the
// newer report: one not behind the stored one in any count. cost is sent as a string so that it
// reaches numeric exactly; GREATEST ignores NULL, so a known cost is never forgotten.
const NOT_BEHIND =
  "EXCLUDED.input_tokens >= u.input_tokens AND EXCLUDED.output_tokens >= u.output_tokens AND EXCLUDED.tool_calls >= u.tool_calls";
const UPSERT_USAGE = `
  INSERT INTO ledger_attempt_usage AS u (
    run_uid, namespace, run_name, attempt, input_tokens, output_tokens, cost, currency, tool_calls, model, first_seen, last_seen)
  SELECT r.run_uid, r.namespace, r.run_name, r.attempt, r.input_tokens, r.output_tokens, r.cost, r.currency, r.tool_calls,
    r.model, r.first_seen, r.last_seen
  FROM jsonb_to_recordset($1::jsonb) AS r(
    run_uid text, namespace text, run_name text, attempt integer, input_tokens bigint, output_tokens bigint, cost numeric,
    currency text, tool_calls bigint, model text, first_seen timestamptz, last_seen timestamptz)
  ORDER BY r.run_uid, r.attempt
  ON CONFLICT ON CONSTRAINT ledger_attempt_usage_key DO UPDATE SET
    input_tokens = GREATEST(u.input_tokens, EXCLUDED.input_tokens),
    output_tokens = GREATEST(u.output_tokens, EXCLUDED.output_tokens),
    cost = GREATEST(u.cost, EXCLUDED.cost),
    tool_calls = GREATEST(u.tool_calls, EXCLUDED.tool_calls),
    model = CASE WHEN ${NOT_BEHIND} THEN COALESCE(EXCLUDED.model, u.model) ELSE u.model END,
    currency = CASE WHEN ${NOT_BEHIND} THEN COALESCE(EXCLUDED.currency, u.currency) ELSE u.currency END,
    first_seen = LEAST(u.first_seen, EXCLUDED.first_seen),
    last_seen = GREATEST(u.last_seen, EXCLUDED.last_seen)
  WHERE EXCLUDED.input_tokens > u.input_tokens OR EXCLUDED.output_tokens > u.output_tokens
    OR EXCLUDED.tool_calls > u.tool_calls OR EXCLUDED.cost > COALESCE(u.cost, -1)`;

/** Writes rows idempotently; returns how many rows the database actually added or advanced. */
export async function writeRows(db: ClientBase, rows: readonly Row[]): Promise<number> {
  const { transitions, toolCalls, usage } = dedupe(rows);
  let changed = 0;
  if (transitions.length) changed += (await db.query(INSERT_TRANSITIONS, [JSON.stringify(transitions)])).rowCount ?? 0;
  if (toolCalls.length) changed += (await db.query(UPSERT_TOOL_CALLS, [JSON.stringify(toolCalls)])).rowCount ?? 0;
  if (usage.length) changed += (await db.query(UPSERT_USAGE, [JSON.stringify(usage)])).rowCount ?? 0;
  return changed;
}

// Gap keys name the first transition stored after the gap (microseconds, UTC), so finding the
// same gap again, by either rule, records it once.
const GAP_KEY_TIME = `to_char(%s AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')`;
const gapKey = (column: string) => `'transitions:' || COALESCE(${GAP_KEY_TIME.replace("%s", column)}, 'end')`;

const RECORD_CHAIN_GAPS = `
  WITH chain AS (
    SELECT t.run_uid, t.namespace, t.name, t.time, t.from_phase, t.to_phase,
      lag(t.time) OVER w AS prev_time, lag(t.to_phase) OVER w AS prev_phase
    FROM ledger_transitions t
    WHERE t.run_uid = ANY($1::text[])
    WINDOW w AS (PARTITION BY t.run_uid ORDER BY t.time, t.id)
  )
  INSERT INTO ledger_gaps AS g (run_uid, namespace, name, kind, gap_key, cause,
    after_time, after_phase, before_time, before_from, before_phase)
  SELECT run_uid, namespace, name, 'transitions', ${gapKey("time")}, 'chain',
    prev_time, prev_phase, time, from_phase, to_phase
  FROM chain
  -- A transition without "from" starts a run (or a status that was reset): nothing precedes it.
  WHERE from_phase IS NOT NULL AND from_phase IS DISTINCT FROM prev_phase
  ON CONFLICT ON CONSTRAINT ledger_gaps_key DO NOTHING
  RETURNING g.*`;

/**
 * Records, for the given runs, every place where the stored transitions do not chain: a
 * transition whose "from" is not the phase of the one stored before it (or that has a "from"
 * but nothing stored before it). Returns the gaps it newly recorded.
 */
export async function recordChainGaps(db: ClientBase, runUids: readonly string[]): Promise<GapRecord[]> {
  if (runUids.length === 0) return [];
  return rowsOf(await db.query(RECORD_CHAIN_GAPS, [runUids]));
}

export interface DroppedTransitionRef {
  run_uid: string;
  namespace: string;
  name: string;
  time: string;
  phase: string;
}

export interface DroppedToolCallRef {
  run_uid: string;
  namespace: string;
  name: string;
  call_id: string;
}

// One gap per run, spanning the dropped transitions that are stored nowhere. It may merge with a
// chain gap found at the same place; the count of missing transitions is what it adds.
const RECORD_DROPPED_TRANSITIONS = `
  WITH lost AS (
    SELECT l.run_uid, l.namespace, l.name, l.time
    FROM jsonb_to_recordset($1::jsonb) AS l(run_uid text, namespace text, name text, time timestamptz, phase text)
    WHERE NOT EXISTS (
      SELECT 1 FROM ledger_transitions t WHERE t.run_uid = l.run_uid AND t.time = l.time AND t.to_phase = l.phase)
  ), stretch AS (
    SELECT run_uid, max(namespace) AS namespace, max(name) AS name, min(time) AS lo, max(time) AS hi, count(*)::integer AS n
    FROM lost GROUP BY run_uid
  )
  INSERT INTO ledger_gaps AS g (run_uid, namespace, name, kind, gap_key, cause,
    after_time, after_phase, before_time, before_from, before_phase, missing)
  SELECT s.run_uid, s.namespace, s.name, 'transitions', ${gapKey("b.time")}, 'dropped',
    a.time, a.to_phase, b.time, b.from_phase, b.to_phase, s.n
  FROM stretch s
  LEFT JOIN LATERAL (
    SELECT t.time, t.to_phase FROM ledger_transitions t
    WHERE t.run_uid = s.run_uid AND t.time < s.lo ORDER BY t.time DESC LIMIT 1) a ON true
  LEFT JOIN LATERAL (
    SELECT t.time, t.from_phase, t.to_phase FROM ledger_transitions t
    WHERE t.run_uid = s.run_uid AND t.time > s.hi ORDER BY t.time LIMIT 1) b ON true
  ON CONFLICT ON CONSTRAINT ledger_gaps_key DO UPDATE SET
    cause = 'dropped',
    missing = COALESCE(g.missing, 0) + EXCLUDED.missing
  RETURNING g.*`;

const RECORD_DROPPED_TOOL_CALLS = `
  INSERT INTO ledger_gaps AS g (run_uid, namespace, name, kind, gap_key, cause, call_id)
  SELECT l.run_uid, l.namespace, l.name, 'tool_call', 'tool_call:' || l.call_id, 'dropped', l.call_id
  FROM jsonb_to_recordset($1::jsonb) AS l(run_uid text, namespace text, name text, call_id text)
  WHERE NOT EXISTS (SELECT 1 FROM ledger_tool_calls c WHERE c.run_uid = l.run_uid AND c.call_id = l.call_id)
  ON CONFLICT ON CONSTRAINT ledger_gaps_key DO NOTHING
  RETURNING g.*`;

/**
 * Records as gaps the dropped rows that neither the run objects nor anyone else brought back.
 * Call it after writing everything the objects hold. Returns the gaps it recorded or extended.
 */
export async function recordDroppedGaps(
  db: ClientBase,
  transitions: readonly DroppedTransitionRef[],
  toolCalls: readonly DroppedToolCallRef[],
): Promise<GapRecord[]> {
  const out: GapRecord[] = [];
  if (transitions.length) out.push(...rowsOf(await db.query(RECORD_DROPPED_TRANSITIONS, [JSON.stringify(transitions)])));
  if (toolCalls.length) out.push(...rowsOf(await db.query(RECORD_DROPPED_TOOL_CALLS, [JSON.stringify(toolCalls)])));
  return out;
}

function rowsOf(result: { rows: QueryResultRow[] }): GapRecord[] {
  return result.rows.map(gapRecord);
}
