// The ledger: every phase transition and every tool call of every AgentRun, and what each attempt
// spent, in PostgreSQL.
//
// It must never slow down or block a reconcile, and PostgreSQL may be slow, down, or not there
// yet. So the work is split in two:
//   - observe(run), on the reconcile path, is synchronous and does no I/O: it compares the run
//     with a small per-run memory of what it already queued and appends the new rows to a
//     bounded buffer;
//   - a single background loop connects (retrying with backoff), applies migrations, and writes
//     the buffer in batches, one multi-row statement per table per batch.
//
// The run objects are the source of truth, and they keep the newest transitions and tool calls.
// So the ledger does not have to hold on to everything it could not write yet: when the buffer
// is full it drops the oldest rows, and a catch-up later rewrites everything the objects still
// hold. The ledger pulls the objects itself through `listRuns` when it needs them: at start,
// after every reconnect, and after it dropped rows. What neither the buffer nor the objects hold
// any more is recorded in ledger_gaps and logged, so the ledger says what it could not recover.
// A dropped usage row is kept whole instead (one per attempt): an ended attempt's spending is in
// no object, and the row is no bigger than a note of it.
import { Pool, type PoolClient, type PoolConfig } from "pg";
import type { BudgetSpec } from "../api/agentrun.ts";
import type { Json } from "../kube/client.ts";
import type { Logger } from "../log.ts";
import { describeGap } from "./format.ts";
import { migrate } from "./migrations.ts";
import { RowQueue } from "./queue.ts";
import { readHistory, type GapRecord, type RunHistory } from "./read.ts";
import { allRows, rowCount, runRef, RunMemory, type Row, type RunRef } from "./rows.ts";
import { recordChainGaps, recordDroppedGaps, writeRows, type DroppedToolCallRef, type DroppedTransitionRef } from "./store.ts";

export interface LedgerOptions {
  log: Logger;
  /**
   * The current run objects, e.g. the controller's informer cache. The ledger calls it itself
   * whenever it needs to catch up: once connected at start, after each reconnect, and after
   * dropping rows. Return undefined while the cache is not synced yet; the ledger asks again.
   * Without it the ledger can only write what observe() hands it.
   */
  listRuns?: () => readonly Json[] | undefined;
  /**
   * The install's budget defaults. Their prices price an attempt's tokens when its sandbox reports
   * no cost and the run does not price its model, and their cost limit's currency is a run's
   * unless it sets its own: what the watchdog itself counts, so the history agrees with it.
   */
  installBudget?: BudgetSpec;
  /** How long rows may wait before the loop writes them (ms). Default 200. */
  flushIntervalMs?: number;
  /** Rows per write; a full batch is written without waiting for the interval. Default 500. */
  batchRows?: number;
  /** The buffer's bound in rows; beyond it the oldest rows are dropped. Default 10,000. */
  maxBufferedRows?: number;
  /** Rows per catch-up transaction. Default 5,000. */
  catchUpBatchRows?: number;
  /** Backoff between failed attempts (ms): initial, doubling up to max, with jitter. */
  retry?: { initialMs?: number; maxMs?: number };
  /** How often memory of runs that are gone is pruned (ms). Default 10 minutes. */
  pruneIntervalMs?: number;
  /** Extra pg pool settings (timeouts, TLS, ...); the connection string comes from `url`. */
  pool?: Omit<PoolConfig, "connectionString">;
}

/** A snapshot of the ledger's counters and gauges. */
export interface LedgerStats {
  /** Rows waiting to be written, including a batch being written (gauge). */
  bufferedRows: number;
  /** Rows PostgreSQL added or moved forward, from the buffer and by catch-ups (counter). */
  writtenRows: number;
  /** Rows dropped before they were written: buffer full, unwritable, or left at close (counter). */
  lostRows: number;
  /** Failed attempts to reach, migrate or write to PostgreSQL (counter). */
  failedFlushes: number;
  /** When a write last succeeded (ms since the epoch), or undefined before the first. */
  lastFlushTime: number | undefined;
  /** Whether the last attempt to reach PostgreSQL succeeded (gauge, 0 or 1). */
  connected: boolean;
  /** Catch-ups completed (counter). */
  catchUps: number;
  /** Gaps recorded in ledger_gaps (counter). */
  gapsRecorded: number;
  /** Runs the ledger keeps memory for (gauge). */
  trackedRuns: number;
}

const DEFAULTS = {
  flushIntervalMs: 200,
  batchRows: 500,
  maxBufferedRows: 10_000,
  catchUpBatchRows: 5_000,
  retryInitialMs: 200,
  retryMaxMs: 5_000,
  pruneIntervalMs: 10 * 60_000,
};

/**
 * SQLSTATE classes 22 (data exception) and 23 (integrity violation) mean the rows themselves
 * are unwritable: retrying them would block the ledger forever, so such a batch is dropped.
 */
function isDataError(err: unknown): boolean {
  const code = (err as { code?: unknown } | undefined)?.code;
  return typeof code === "string" && (code.startsWith("22") || code.startsWith("23"));
}

const UNDEFINED_TABLE = "42P01";

/**
 * How long a run's dropped rows may wait for its listed object to catch up with what was
 * observed, and how often it is looked at meanwhile. An informer cache lags by milliseconds,
 * seconds at worst; an object whose status was reset never catches up.
 */
const MAX_DEFER_MS = 30_000;
const DEFER_RETRY_MS = 1_000;

export class Ledger {
  private readonly log: Logger;
  private readonly pool: Pool;
  private readonly listRuns: (() => readonly Json[] | undefined) | undefined;
  private readonly installBudget: BudgetSpec | undefined;
  private readonly flushIntervalMs: number;
  private readonly batchRows: number;
  private readonly catchUpBatchRows: number;
  private readonly retryInitialMs: number;
  private readonly retryMaxMs: number;
  private readonly pruneIntervalMs: number;

  private readonly queue: RowQueue;
  private readonly runs = new Map<string, RunMemory>();
  private tick = 0;
  private inFlight = 0;
  private migrated = false;
  /** undefined until the first attempt: then whether the last attempt reached PostgreSQL. */
  private up: boolean | undefined;
  private catchUpPending = true;
  /** A catch-up that waits for lagging objects is not retried before this time (ms). */
  private catchUpNotBefore = 0;
  private droppedSinceCatchUp = 0;
  private lastAttempt = 0;
  private lastPrune = Date.now();
  private closing = false;
  private closeDeadline = 0;
  private wakeUp: (() => void) | undefined;
  private readonly done: Promise<void>;
  private closed: Promise<void> | undefined;

  private written = 0;
  private lost = 0;
  private failures = 0;
  private lastFlush: number | undefined;
  private catchUpCount = 0;
  private gaps = 0;

  /**
   * Starts a ledger on `url` and returns at once. It never throws because PostgreSQL is
   * unreachable: it keeps retrying in the background, applies migrations when it gets through,
   * and buffers rows meanwhile. It throws only for a malformed URL.
   */
  static open(url: string, options: LedgerOptions): Ledger {
    return new Ledger(url, options);
  }

  private constructor(url: string, options: LedgerOptions) {
    const parsed = new URL(url);
    if (parsed.protocol !== "postgres:" && parsed.protocol !== "postgresql:") {
      throw new Error(`DATABASE_URL must be a postgres:// URL, not ${parsed.protocol}//...`);
    }
    this.log = options.log.child({ component: "ledger" });
    this.listRuns = options.listRuns;
    this.installBudget = options.installBudget;
    this.flushIntervalMs = options.flushIntervalMs ?? DEFAULTS.flushIntervalMs;
    this.batchRows = options.batchRows ?? DEFAULTS.batchRows;
    this.catchUpBatchRows = options.catchUpBatchRows ?? DEFAULTS.catchUpBatchRows;
    this.retryInitialMs = options.retry?.initialMs ?? DEFAULTS.retryInitialMs;
    this.retryMaxMs = options.retry?.maxMs ?? DEFAULTS.retryMaxMs;
    this.pruneIntervalMs = options.pruneIntervalMs ?? DEFAULTS.pruneIntervalMs;
    this.queue = new RowQueue(options.maxBufferedRows ?? DEFAULTS.maxBufferedRows, (row) => this.dropped(row));
    this.pool = new Pool({
      // One connection for the loop, the others for reads (the /history route).
      max: 3,
      connectionTimeoutMillis: 5_000,
      idleTimeoutMillis: 30_000,
      // A server that vanishes without closing the connection must not hang the loop.
      keepAlive: true,
      query_timeout: 60_000,
      statement_timeout: 55_000,
      application_name: "agent-watchdog-ledger",
      ...options.pool,
      connectionString: url,
    });
    // An idle connection that breaks (server restart, network) is reported here; without a
    // listener it would crash the process. The next query simply opens a new connection.
    this.pool.on("error", (err) => this.log.debug({ err }, "idle PostgreSQL connection failed"));
    this.done = this.loop().catch((err: unknown) => this.log.error({ err }, "ledger loop stopped unexpectedly"));
  }

  // -------------------------------------------------------------------------------------------
  // the reconcile path

  /**
   * Queues whatever in `run` the ledger has not queued before. Synchronous, no I/O, never
   * throws: call it with every run after reconciling it.
   */
  observe(run: Json): void {
    if (this.closing) return;
    try {
      const ref = runRef(run);
      if (!ref) return;
      const memory = this.memory(ref.uid, ref.namespace, ref.name);
      memory.touched = ++this.tick;
      const rows = memory.diff(run, ref, new Date().toISOString(), this.installBudget);
      for (const row of rows) this.queue.push(row);
      if (this.queue.length >= this.batchRows) this.wake();
    } catch (err) {
      // A bug here must cost a ledger row, never a reconcile.
      this.log.error({ err }, "observing a run failed");
    }
  }

  /** Asks for a catch-up from `listRuns`, e.g. when this replica becomes the leader. */
  requestCatchUp(): void {
    this.catchUpPending = true;
    this.catchUpNotBefore = 0;
    this.wake();
  }

  // -------------------------------------------------------------------------------------------
  // metrics: plain getters, for the operator to export

  get bufferedRows(): number {
    return this.queue.length + this.inFlight;
  }
  get writtenRows(): number {
    return this.written;
  }
  get lostRows(): number {
    return this.lost;
  }
  get failedFlushes(): number {
    return this.failures;
  }
  get lastFlushTime(): number | undefined {
    return this.lastFlush;
  }
  get connected(): boolean {
    return this.up === true;
  }
  /** True once migrations are applied and the last attempt reached PostgreSQL. */
  get ready(): boolean {
    return this.migrated && this.up === true;
  }
  get catchUps(): number {
    return this.catchUpCount;
  }
  get gapsRecorded(): number {
    return this.gaps;
  }
  get trackedRuns(): number {
    return this.runs.size;
  }
  /** True while a catch-up is due or running. */
  get catchingUp(): boolean {
    return this.catchUpPending;
  }

  stats(): LedgerStats {
    return {
      bufferedRows: this.bufferedRows,
      writtenRows: this.writtenRows,
      lostRows: this.lostRows,
      failedFlushes: this.failedFlushes,
      lastFlushTime: this.lastFlushTime,
      connected: this.connected,
      catchUps: this.catchUps,
      gapsRecorded: this.gapsRecorded,
      trackedRuns: this.trackedRuns,
    };
  }

  // -------------------------------------------------------------------------------------------
  // reading

  /** The history of the run(s) named namespace/name, or undefined when the ledger has none. */
  history(namespace: string, name: string): Promise<RunHistory | undefined> {
    return readHistory(this.pool, { namespace, name });
  }

  /** The history of the run with this uid, or undefined when the ledger has none. */
  historyByUid(uid: string): Promise<RunHistory | undefined> {
    return readHistory(this.pool, { uid });
  }

  // -------------------------------------------------------------------------------------------
  // shutdown

  /**
   * Writes what it can of the buffer within `timeoutMs`, then closes the connections. Rows left
   * unwritten are counted as lost and logged; the next start catches up on what the objects
   * still hold.
   */
  close(timeoutMs = 5_000): Promise<void> {
    this.closed ??= this.shutDown(timeoutMs);
    return this.closed;
  }

  private async shutDown(timeoutMs: number): Promise<void> {
    this.closing = true;
    this.closeDeadline = Date.now() + timeoutMs;
    this.wake();
    let timer: NodeJS.Timeout | undefined;
    const timeout = (ms: number) => new Promise<void>((resolve) => (timer = setTimeout(resolve, ms)));
    // The loop stops by the deadline unless a statement hangs; never wait much past it.
    await Promise.race([this.done, timeout(Math.max(0, this.closeDeadline - Date.now()) + 1_000)]);
    clearTimeout(timer);
    const left = this.bufferedRows;
    if (left > 0) {
      this.lost += left;
      this.log.warn({ rows: left }, "closing with rows not written; the next start catches up on what the runs still hold");
    }
    await Promise.race([this.pool.end().catch(() => undefined), timeout(1_000)]);
    clearTimeout(timer);
  }

  // -------------------------------------------------------------------------------------------
  // the loop

  private async loop(): Promise<void> {
    let failures = 0;
    let retryAt = 0;
    for (;;) {
      const now = Date.now();
      if (this.closing && (this.queue.length === 0 || now >= this.closeDeadline)) return;
      // Pace: one attempt per interval, or a backoff after failures. A full batch goes at once,
      // and so does the rest of the buffer when closing, unless PostgreSQL is failing.
      const due = failures > 0 ? retryAt : this.lastAttempt + this.flushIntervalMs;
      const urgent = failures === 0 && (this.closing || this.queue.length >= this.batchRows);
      if (now < due && !urgent) {
        await this.sleep(this.closing ? Math.min(due, this.closeDeadline) - now : due - now);
        continue;
      }
      this.lastAttempt = now;
      const runs = this.migrated && this.catchUpPending && !this.closing && now >= this.catchUpNotBefore ? this.snapshot() : undefined;
      if (this.migrated && !runs && this.queue.length === 0) {
        this.maybePrune(now);
        continue; // idle: the pacing above waits for the next interval
      }
      try {
        if (!this.migrated) await this.migrateSchema();
        else if (runs) await this.catchUp(runs);
        else await this.flush();
        this.succeeded();
        failures = 0;
      } catch (err) {
        failures++;
        this.failed(err);
        const backoff = Math.min(this.retryMaxMs, this.retryInitialMs * 2 ** Math.min(failures - 1, 30));
        retryAt = Date.now() + backoff * (0.5 + Math.random() / 2);
      }
    }
  }

  private sleep(ms: number): Promise<void> {
    return new Promise((resolve) => {
      const done = () => {
        clearTimeout(timer);
        this.wakeUp = undefined;
        resolve();
      };
      const timer = setTimeout(done, Math.max(0, ms));
      // Waiting for the next batch must not keep the process alive; finishing a close must.
      if (!this.closing) timer.unref();
      this.wakeUp = done;
    });
  }

  private wake(): void {
    this.wakeUp?.();
  }

  private succeeded(): void {
    if (this.up === false) {
      this.log.info({ buffered: this.bufferedRows }, "PostgreSQL is reachable again; writing the buffer and catching up");
      // Whatever happened while it was away, the run objects know best.
      this.catchUpPending = true;
      this.catchUpNotBefore = 0;
    }
    this.up = true;
  }

  private failed(err: unknown): void {
    this.failures++;
    if ((err as { code?: unknown } | undefined)?.code === UNDEFINED_TABLE) this.migrated = false; // the schema went away
    if (this.up !== false) {
      this.log.warn(
        { err, buffered: this.bufferedRows },
        this.up === undefined ? "cannot reach PostgreSQL yet; buffering rows and retrying" : "lost PostgreSQL; buffering rows and retrying",
      );
    }
    this.up = false;
  }

  private async withClient<T>(fn: (client: PoolClient) => Promise<T>): Promise<T> {
    const client = await this.pool.connect();
    let failure: Error | undefined;
    try {
      return await fn(client);
    } catch (err) {
      failure = err instanceof Error ? err : new Error(String(err));
      throw err;
    } finally {
      // A connection that failed mid-way may be broken or mid-transaction: discard it.
      client.release(failure);
    }
  }

  private transaction<T>(fn: (client: PoolClient) => Promise<T>): Promise<T> {
    return this.withClient(async (client) => {
      await client.query("BEGIN");
      try {
        const out = await fn(client);
        await client.query("COMMIT");
        return out;
      } catch (err) {
        await client.query("ROLLBACK").catch(() => undefined);
        throw err;
      }
    });
  }

  private async migrateSchema(): Promise<void> {
    const result = await this.withClient((client) => migrate(client));
    this.migrated = true;
    if (result.unknown.length) {
      this.log.warn({ unknown: result.unknown }, "the ledger schema has migrations this operator does not know (a newer version ran)");
    }
    this.log.info({ applied: result.applied, version: result.current }, result.applied.length ? "ledger schema migrated" : "ledger schema is current");
  }

  private async flush(): Promise<void> {
    const batch = this.queue.take(this.batchRows);
    this.inFlight = batch.length;
    try {
      this.wrote(await this.transaction((client) => writeRows(client, batch)));
    } catch (err) {
      this.inFlight = 0;
      if (isDataError(err)) {
        // Retrying rows PostgreSQL rejects would stop the ledger for good; lose them loudly.
        this.lost += batch.length;
        this.log.error({ err, rows: batch.length }, "PostgreSQL rejected a batch of ledger rows; dropping it");
        return;
      }
      this.queue.putBack(batch);
      throw err;
    } finally {
      this.inFlight = 0;
    }
  }

  private wrote(rows: number): void {
    this.written += rows;
    this.lastFlush = Date.now();
  }

  // -------------------------------------------------------------------------------------------
  // catching up

  private snapshot(): readonly Json[] | undefined {
    if (!this.listRuns) return [];
    try {
      return this.listRuns();
    } catch (err) {
      this.log.error({ err }, "listing runs for a catch-up failed");
      return undefined;
    }
  }

  /**
   * Rewrites everything the run objects hold, then records what is still missing as gaps.
   *
   * Ordering matters for telling a gap from rows that are merely late: the buffer is drained
   * into the same transaction, taken in the same synchronous step as the snapshot, so every row
   * observed before the snapshot is stored before the chain of transitions is checked.
   */
  private async catchUp(runs: readonly Json[]): Promise<void> {
    const tick = ++this.tick;
    const seenAt = new Date().toISOString();
    // Chunks hold the objects, not their rows: with thousands of runs, building every row up
    // front would cost far more memory than the buffer is allowed.
    type Chunk = { runs: { run: Json; ref: RunRef }[]; size: number };
    const chunks: Chunk[] = [];
    let chunk: Chunk = { runs: [], size: 0 };
    const listed = new Set<string>();
    const behind = new Set<string>();
    for (const run of runs) {
      const ref = runRef(run);
      if (!ref || listed.has(ref.uid)) continue;
      listed.add(ref.uid);
      const memory = this.memory(ref.uid, ref.namespace, ref.name);
      memory.touched = tick;
      // Judging drops against an object older than one observed could call a row lost that
      // the object is about to hold: leave those for a later catch-up, for a while.
      if (memory.hasDropped && !memory.coveredBy(run) && Date.now() - (memory.deferredSince ??= Date.now()) < MAX_DEFER_MS) {
        behind.add(ref.uid);
      } else memory.deferredSince = undefined;
      const size = rowCount(run);
      if (chunk.size > 0 && chunk.size + size > this.catchUpBatchRows) {
        chunks.push(chunk);
        chunk = { runs: [], size: 0 };
      }
      chunk.runs.push({ run, ref });
      chunk.size += size;
    }
    chunks.push(chunk);

    // Drops known now are settled by this catch-up; later ones ask for the next.
    const dropped = this.takeDropped(behind);
    this.catchUpPending = behind.size > 0;
    this.catchUpNotBefore = behind.size > 0 ? Date.now() + DEFER_RETRY_MS : 0;
    const droppedRows = this.droppedSinceCatchUp;
    this.droppedSinceCatchUp = 0;

    const found: GapRecord[] = [];
    try {
      for (const [i, current] of chunks.entries()) {
        if (i > 0) await new Promise<void>((resolve) => setImmediate(resolve)); // let reconciles run
        // A run whose object lags what was observed of it may look broken only for now.
        const uids = current.runs.map(({ ref }) => ref.uid).filter((uid) => !behind.has(uid));
        // Transitions and calls no observe() had queued: if this chunk's write fails, they go into
        // the buffer (a retried catch-up finds them known and does not add them twice).
        const unqueued: Row[] = [];
        const rows = current.runs.flatMap(({ run, ref }) => {
          const all = allRows(run, ref, seenAt, this.installBudget);
          // This catch-up writes them, so observe() need not queue them again.
          unqueued.push(...this.memory(ref.uid, ref.namespace, ref.name).remember(all));
          return all;
        });
        const buffered = this.queue.take(Number.MAX_SAFE_INTEGER);
        this.inFlight = buffered.length;
        try {
          // Dropped usage rows go back in with the first chunk; the upsert keeps each figure's
          // greatest value, so writing them after what the objects hold lowers nothing.
          const recovered = i === 0 ? dropped.usage : [];
          const { changed, gaps } = await this.transaction(async (client) => {
            const changed = await writeRows(client, [...buffered, ...rows, ...recovered]);
            return { changed, gaps: await recordChainGaps(client, uids) };
          });
          found.push(...gaps);
          this.wrote(changed);
        } catch (err) {
          // Left to the next catch-up, a row the run rotates out of its status before PostgreSQL
          // is back would be lost unrecorded.
          this.queue.putBack([...buffered, ...unqueued]);
          throw err;
        } finally {
          this.inFlight = 0;
        }
      }
      if (dropped.transitions.length || dropped.toolCalls.length) {
        found.push(...(await this.transaction((client) => recordDroppedGaps(client, dropped.transitions, dropped.toolCalls))));
      }
    } catch (err) {
      this.catchUpPending = true;
      this.restoreDropped(dropped);
      this.droppedSinceCatchUp += droppedRows;
      throw err;
    }

    this.catchUpCount++;
    this.gaps += found.length;
    for (const gap of found) {
      this.log.warn({ namespace: gap.namespace, name: gap.name, uid: gap.runUid, gap }, `ledger ${describeGap(gap)}`);
    }
    if (dropped.untracked.length) {
      for (const { namespace, name, uid, count } of dropped.untracked) {
        this.log.warn({ namespace, name, uid, rows: count }, "could not recover dropped ledger rows beyond the per-run tracking limit");
      }
    }
    const summary = { runs: listed.size, rows: chunks.reduce((n, c) => n + c.size, 0), droppedRows, gaps: found.length, deferred: behind.size };
    if (droppedRows || found.length) this.log.info(summary, "ledger caught up with the runs");
    else this.log.debug(summary, "ledger caught up with the runs");
    if (this.listRuns) this.prune(listed, tick);
  }

  private memory(uid: string, namespace: string, name: string): RunMemory {
    let memory = this.runs.get(uid);
    if (!memory) {
      memory = new RunMemory({ uid, namespace, name });
      this.runs.set(uid, memory);
    }
    return memory;
  }

  private dropped(row: Row): void {
    this.lost++;
    if (this.droppedSinceCatchUp === 0) {
      this.log.warn({ buffered: this.queue.length }, "ledger buffer full; dropping the oldest rows until a catch-up recovers them from the runs");
    }
    this.droppedSinceCatchUp++;
    const r = row.row;
    this.memory(r.run_uid, r.namespace, row.kind === "transition" ? row.row.name : row.row.run_name).noteDropped(row);
    this.catchUpPending = true;
  }

  private takeDropped(skip: ReadonlySet<string>): {
    transitions: DroppedTransitionRef[];
    toolCalls: DroppedToolCallRef[];
    usage: Row[];
    untracked: { uid: string; namespace: string; name: string; count: number }[];
  } {
    const transitions: DroppedTransitionRef[] = [];
    const toolCalls: DroppedToolCallRef[] = [];
    const usage: Row[] = [];
    const untracked: { uid: string; namespace: string; name: string; count: number }[] = [];
    for (const [uid, m] of this.runs) {
      if (!m.hasDropped || skip.has(uid)) continue;
      const base = { run_uid: uid, namespace: m.namespace, name: m.name };
      for (const t of m.droppedTransitions) transitions.push({ ...base, time: t.time, phase: t.phase });
      for (const id of m.droppedCalls) toolCalls.push({ ...base, call_id: id });
      for (const row of m.droppedUsage.values()) usage.push({ kind: "attemptUsage", row });
      if (m.droppedUntracked) untracked.push({ uid, namespace: m.namespace, name: m.name, count: m.droppedUntracked });
      m.droppedTransitions = [];
      m.droppedCalls = new Set();
      m.droppedUsage = new Map();
      m.droppedUntracked = 0;
    }
    return { transitions, toolCalls, usage, untracked };
  }

  private restoreDropped(dropped: ReturnType<Ledger["takeDropped"]>): void {
    for (const t of dropped.transitions) this.memory(t.run_uid, t.namespace, t.name).droppedTransitions.push({ time: t.time, phase: t.phase });
    for (const c of dropped.toolCalls) this.memory(c.run_uid, c.namespace, c.name).droppedCalls.add(c.call_id);
    for (const u of dropped.usage) if (u.kind === "attemptUsage") this.memory(u.row.run_uid, u.row.namespace, u.row.run_name).noteDropped(u);
    for (const u of dropped.untracked) this.memory(u.uid, u.namespace, u.name).droppedUntracked += u.count;
  }

  /** Forgets runs that are gone: not listed, not observed since `tick`, nothing left to settle. */
  private prune(listed: ReadonlySet<string>, tick: number): void {
    for (const [uid, memory] of this.runs) {
      if (!listed.has(uid) && memory.touched < tick && !memory.hasDropped) this.runs.delete(uid);
    }
    this.lastPrune = Date.now();
  }

  private maybePrune(now: number): void {
    if (!this.listRuns || now - this.lastPrune < this.pruneIntervalMs) return;
    this.lastPrune = now;
    const runs = this.snapshot();
    if (!runs) return;
    const tick = ++this.tick;
    const listed = new Set<string>();
    for (const run of runs) {
      const ref = runRef(run);
      if (ref) listed.add(ref.uid);
    }
    this.prune(listed, tick);
  }
}
