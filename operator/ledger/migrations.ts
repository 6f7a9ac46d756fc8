// The ledger's schema, as a numbered list of migrations applied in order. A migration, once
// released, is never edited: a change to the schema is a new entry at the end.
import type { ClientBase } from "pg";

export interface Migration {
  version: number;
  name: string;
  sql: string;
}

export const MIGRATIONS: readonly Migration[] = [
  {
    version: 1,
    name: "transitions and tool calls",
    sql: `
      -- One row per phase transition of a run. The operator stamps each transition with a
      -- millisecond time that is unique per run, so (run, time, phase) identifies it however
      -- often it is observed.
      CREATE TABLE ledger_transitions (
        id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        run_uid     text NOT NULL,
        namespace   text NOT NULL,
        name        text NOT NULL,
        attempt     integer NOT NULL,
        from_phase  text,
        to_phase    text NOT NULL,
        reason      text,
        message     text,
        time        timestamptz NOT NULL,
        recorded_at timestamptz NOT NULL DEFAULT now(),
        CONSTRAINT ledger_transitions_key UNIQUE (run_uid, time, to_phase)
      );
      CREATE INDEX ledger_transitions_by_name ON ledger_transitions (namespace, name, time);

      -- One row per tool call, upserted as the call's state moves forward.
      CREATE TABLE ledger_tool_calls (
        id              bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        run_uid         text NOT NULL,
        namespace       text NOT NULL,
        run_name        text NOT NULL,
        call_id         text NOT NULL,
        idempotency_key text,
        tool_name       text NOT NULL,
        args_hash       text NOT NULL,
        idempotent      boolean,
        attempt         integer,
        state           text NOT NULL CHECK (state IN ('Started', 'Succeeded', 'Failed')),
        error           jsonb,
        result          text,
        started_at      timestamptz,
        finished_at     timestamptz,
        first_seen      timestamptz NOT NULL,
        last_seen       timestamptz NOT NULL,
        CONSTRAINT ledger_tool_calls_key UNIQUE (run_uid, call_id)
      );
      CREATE INDEX ledger_tool_calls_by_name ON ledger_tool_calls (namespace, run_name);
    `,
  },
  {
    version: 2,
    name: "gaps",
    sql: `
      -- What the ledger knows it could not recover. kind 'transitions': transitions are missing
      -- between after_* (the last one stored before the gap; NULL when the start of the run is
      -- missing) and before_* (the first one stored after it; NULL when none is). kind
      -- 'tool_call': the call call_id was seen but never stored. gap_key makes recording a gap
      -- idempotent.
      CREATE TABLE ledger_gaps (
        id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        run_uid      text NOT NULL,
        namespace    text NOT NULL,
        name         text NOT NULL,
        kind         text NOT NULL CHECK (kind IN ('transitions', 'tool_call')),
        gap_key      text NOT NULL,
        -- 'chain': the stored transitions do not chain (a transition's from is not the phase
        -- before it); 'dropped': rows this process dropped from its full buffer are neither in
        -- the run object any more nor stored.
        cause        text NOT NULL CHECK (cause IN ('chain', 'dropped')),
        after_time   timestamptz,
        after_phase  text,
        before_time  timestamptz,
        before_from  text,
        before_phase text,
        -- how many transitions are known to be missing; NULL when only their existence is known
        missing      integer,
        call_id      text,
        detected_at  timestamptz NOT NULL DEFAULT now(),
        CONSTRAINT ledger_gaps_key UNIQUE (run_uid, gap_key)
      );
      CREATE INDEX ledger_gaps_by_name ON ledger_gaps (namespace, name);
    `,
  },
  {
    version: 3,
    name: "attempt usage",
    sql: `
      -- What each attempt of a run spent, as its sandbox last reported it (cumulative within the
      -- attempt), upserted as the figures grow; each figure keeps its greatest value, so a late or
      -- stale write never lowers it. cost is exact (numeric, never a float): reported, or the
      -- tokens priced by the run's prices; NULL when neither is known. currency is that of the
      -- run's cost limit, NULL without one.
      CREATE TABLE ledger_attempt_usage (
        id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        run_uid       text NOT NULL,
        namespace     text NOT NULL,
        run_name      text NOT NULL,
        attempt       integer NOT NULL,
        input_tokens  bigint NOT NULL,
        output_tokens bigint NOT NULL,
        cost          numeric,
        currency      text,
        tool_calls    bigint NOT NULL,
        model         text,
        first_seen    timestamptz NOT NULL,
        last_seen     timestamptz NOT NULL,
        CONSTRAINT ledger_attempt_usage_key UNIQUE (run_uid, attempt)
      );
      CREATE INDEX ledger_attempt_usage_by_name ON ledger_attempt_usage (namespace, run_name);
    `,
  },
];

/**
 * Key of the transaction-scoped advisory lock that serialises migrations: two operator replicas
 * starting together would otherwise both see version n missing and race to create its tables.
 * An arbitrary constant, chosen once ("awledger" in ASCII).
 */
export const MIGRATION_LOCK_KEY = 0x61776c6564676572n;

export interface MigrationResult {
  /** Versions this call applied, in order; empty when the schema was already current. */
  applied: number[];
  /** The newest version in the database afterwards. */
  current: number;
  /** Versions in the database that this code does not know (a newer operator migrated it). */
  unknown: number[];
}

/**
 * Brings the schema up to date in one transaction: all pending migrations apply, or none do.
 * Safe to call from any number of processes at once.
 */
export async function migrate(client: ClientBase, migrations: readonly Migration[] = MIGRATIONS): Promise<MigrationResult> {
  await client.query("BEGIN");
  try {
    await client.query("SELECT pg_advisory_xact_lock($1)", [MIGRATION_LOCK_KEY.toString()]);
    await client.query(`
      CREATE TABLE IF NOT EXISTS schema_migrations (
        version    integer PRIMARY KEY,
        name       text NOT NULL,
        applied_at timestamptz NOT NULL DEFAULT now()
      )`);
    const { rows } = await client.query<{ version: number }>("SELECT version FROM schema_migrations ORDER BY version");
    const done = new Set(rows.map((r) => r.version));
    const known = new Set(migrations.map((m) => m.version));
    const applied: number[] = [];
    for (const migration of [...migrations].sort((a, b) => a.version - b.version)) {
      if (done.has(migration.version)) continue;
      await client.query(migration.sql);
      await client.query("INSERT INTO schema_migrations (version, name) VALUES ($1, $2)", [migration.version, migration.name]);
      applied.push(migration.version);
      done.add(migration.version);
    }
    await client.query("COMMIT");
    return {
      applied,
      current: Math.max(0, ...done),
      unknown: [...done].filter((v) => !known.has(v)).sort((a, b) => a - b),
    };
  } catch (err) {
    await client.query("ROLLBACK").catch(() => undefined);
    throw err;
  }
}
