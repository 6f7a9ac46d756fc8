// PostgreSQL goes away while runs keep changing. observe() must never wait for it, and once
// the server is back the ledger must hold everything: from its buffer, or, where the buffer had
// to drop rows, from the run objects. What neither holds any more is recorded as a gap.
import { afterAll, afterEach, beforeAll, expect, inject, it } from "vitest";
import type { Json } from "../../operator/kube/client.ts";
import { Ledger, type LedgerOptions } from "../../operator/ledger/ledger.ts";
import { MIGRATIONS } from "../../operator/ledger/migrations.ts";
import { waitFor } from "../support/wait.ts";
import { capturingLogger, createDatabase, ledgerProblems, postgres, RunSim, storedTransitions, type TestDatabase } from "./support.ts";

let db: TestDatabase;
const open: Ledger[] = [];
const extraDatabases: TestDatabase[] = [];

beforeAll(async () => {
  db = await createDatabase(inject("databaseUrl"), import.meta.filename);
});
afterEach(async () => {
  // A failed test must not leave the shared server down for the next one.
  postgres("start");
  await Promise.all(open.splice(0).map((l) => l.close(1_000)));
});
afterAll(async () => {
  postgres("start");
  for (const extra of extraDatabases) await extra.drop();
  await db?.drop();
});

const FAST_RETRY = { initialMs: 50, maxMs: 400 };

function openLedger(options: Partial<LedgerOptions> = {}, url = db.url) {
  const { log, messages } = capturingLogger();
  const ledger = Ledger.open(url, { log, flushIntervalMs: 20, retry: FAST_RETRY, ...options });
  open.push(ledger);
  return { ledger, messages };
}

// This thread's CPU time where Node.js can tell it; else the whole process's.
const cpuUsage: (previous?: NodeJS.CpuUsage) => NodeJS.CpuUsage =
  typeof process.threadCpuUsage === "function" ? (p) => process.threadCpuUsage(p) : (p) => process.cpuUsage(p);

/**
 * observe(), watched: it runs on the reconcile path and must never wait for the database. That
 * is a property of its shape, so that is what is checked: every call returns synchronously,
 * nothing to await, and asks the connection pool for nothing while it runs (the pool's connect
 * and query are counted during each call). What the calls cost is printed, not asserted: time on
 * a shared test machine is a figure for a bench, not a verdict.
 */
class WatchedObserver {
  readonly cpuMs: number[] = [];
  readonly wallMs: number[] = [];
  private readonly ledger: Ledger;
  private insideObserve = false;
  private poolCallsInside = 0;
  private returnedValues = 0;
  constructor(ledger: Ledger) {
    this.ledger = ledger;
    const pool = (ledger as unknown as { pool: Record<"connect" | "query", (...args: unknown[]) => unknown> }).pool;
    for (const method of ["connect", "query"] as const) {
      const original = pool[method].bind(pool);
      pool[method] = (...args: unknown[]) => {
        if (this.insideObserve) this.poolCallsInside++;
        return original(...args);
      };
    }
  }
  observe(run: Json, times = 1): void {
    for (let i = 0; i < times; i++) {
      const wall = performance.now();
      const cpu = cpuUsage();
      this.insideObserve = true;
      let returned: unknown;
      try {
        returned = this.ledger.observe(run) as unknown;
      } finally {
        this.insideObserve = false;
      }
      if (returned !== undefined) this.returnedValues++;
      const used = cpuUsage(cpu);
      this.wallMs.push(performance.now() - wall);
      this.cpuMs.push((used.user + used.system) / 1000);
    }
  }
  /** Asserts that no call waited for, or even asked for, the database; prints what they cost. */
  expectNoWait(): void {
    expect(this.cpuMs.length).toBeGreaterThan(0);
    expect(this.returnedValues, "observe() returned something to wait for").toBe(0);
    expect(this.poolCallsInside, "observe() asked the connection pool for something").toBe(0);
    const wall = [...this.wallMs].sort((a, b) => a - b);
    console.log(
      `observe(): ${wall.length} calls; cpu ms max ${Math.max(...this.cpuMs).toFixed(3)}; wall ms median ${wall[wall.length >> 1]?.toFixed(3)}, p95 ${wall[Math.floor(wall.length * 0.95)]?.toFixed(3)}, max ${wall.at(-1)?.toFixed(3)}`,
    );
  }
}

const yieldToLoop = () => new Promise<void>((resolve) => setImmediate(resolve));

function startRuns(count: number, prefix: string): RunSim[] {
  return Array.from({ length: count }, (_, i) => new RunSim("outage", `${prefix}-${i}`).to("Queued").to("Starting", "PodCreated").to("Planning"));
}

async function complete(ledger: Ledger, sims: RunSim[], timeoutMs = 30_000): Promise<void> {
  await waitFor(
    "the ledger to hold every transition and call exactly once",
    async () => ledger.bufferedRows === 0 && !ledger.catchingUp && (await ledgerProblems(db, sims)).length === 0,
    { timeoutMs, intervalMs: 100 },
  ).catch(async (err: Error) => {
    throw new Error(`${err.message}\n${(await ledgerProblems(db, sims).catch((e: Error) => [e.message])).join("\n")}`);
  });
}

/** Stops PostgreSQL and waits until the ledger has tried to write and failed. */
async function outage(ledger: Ledger, keepBusy: () => void): Promise<void> {
  const failuresBefore = ledger.failedFlushes;
  postgres("stop");
  await waitFor(
    "the ledger to notice the outage",
    async () => {
      keepBusy();
      await yieldToLoop();
      return ledger.failedFlushes > failuresBefore && !ledger.connected;
    },
    { timeoutMs: 20_000, intervalMs: 20 },
  );
}

async function gapRows(uid: string) {
  return db.query("SELECT * FROM ledger_gaps WHERE run_uid = $1 ORDER BY id", [uid]);
}

it("keeps observe() off the database through an outage and writes the buffer once PostgreSQL is back", async () => {
  // No listRuns: nothing to catch up from, so everything must come through the buffer.
  const { ledger, messages } = openLedger();
  const timed = new WatchedObserver(ledger);
  const sims = startRuns(4, "buffered");
  for (const sim of sims) ledger.observe(sim.object());
  await complete(ledger, sims);

  let step = 0;
  const advance = () => {
    if (step >= 8) return;
    for (const sim of sims) timed.observe(sim.busyStep(step).object(), 3); // resyncs repeat each version
    step++;
  };
  await outage(ledger, advance);
  while (step < 8) {
    advance();
    await yieldToLoop();
  }
  expect(ledger.connected).toBe(false);
  expect(ledger.bufferedRows).toBeGreaterThan(0);
  expect(messages()).toContain("lost PostgreSQL; buffering rows and retrying");

  postgres("start");
  await complete(ledger, sims);
  expect(ledger.connected).toBe(true);
  expect(ledger.lostRows).toBe(0);
  expect(messages()).toContain("PostgreSQL is reachable again; writing the buffer and catching up");
  expect(await db.query("SELECT * FROM ledger_gaps")).toEqual([]);
  expect(timed.wallMs).toHaveLength(8 * 4 * 3);
  timed.expectNoWait();
});

it("recovers rows its full buffer dropped from the run objects", async () => {
  const sims = startRuns(3, "overflow");
  const { ledger, messages } = openLedger({ maxBufferedRows: 8, listRuns: () => sims.map((s) => s.object()) });
  const timed = new WatchedObserver(ledger);
  for (const sim of sims) ledger.observe(sim.object());
  await complete(ledger, sims);

  let step = 0;
  const advance = () => {
    if (step >= 8) return;
    for (const sim of sims) timed.observe(sim.busyStep(step).object(), 2);
    step++;
  };
  await outage(ledger, advance);
  // 3 + 2 per step transitions: the objects still hold all of them (20), the buffer cannot.
  while (step < 8) {
    advance();
    await yieldToLoop();
  }
  expect(ledger.bufferedRows).toBeLessThanOrEqual(8);
  expect(ledger.lostRows).toBeGreaterThan(0);
  expect(messages()).toContain("ledger buffer full; dropping the oldest rows until a catch-up recovers them from the runs");

  postgres("start");
  await complete(ledger, sims);
  expect(await db.query("SELECT * FROM ledger_gaps")).toEqual([]);
  timed.expectNoWait();
});

it("records the transitions it dropped that the run no longer holds, even when the rest chains", async () => {
  const [sim] = startRuns(1, "chained") as [RunSim];
  const { ledger, messages } = openLedger({ maxBufferedRows: 8, listRuns: () => [sim.object()] });
  const timed = new WatchedObserver(ledger);
  ledger.observe(sim.object());
  await complete(ledger, [sim]);
  const storedBefore = sim.history.length;

  // Planning <-> ExecutingTool 30 times: every transition chains onto the one before, so the
  // chain alone cannot show that some went missing; only the ledger's record of drops can.
  let flips = 0;
  const flip = () => {
    if (flips >= 30) return;
    timed.observe(sim.to(sim.phase === "Planning" ? "ExecutingTool" : "Planning", "Heartbeat").object());
    flips++;
  };
  await outage(ledger, flip);
  while (flips < 30) {
    flip();
    await yieldToLoop();
  }
  postgres("start");

  const lost = sim.history.slice(storedBefore, sim.history.length - 20);
  expect(lost.length).toBeGreaterThan(0);
  const gap = await waitFor("the gap to be recorded", async () => (await gapRows(sim.uid))[0], { timeoutMs: 30_000 });
  await waitFor("the catch-up to finish", () => ledger.bufferedRows === 0 && !ledger.catchingUp);

  const stored = (await storedTransitions(db, sim.uid)).map((t) => t.time.toISOString());
  const expected = sim.history.filter((t) => !lost.includes(t)).map((t) => t.time);
  expect(stored).toEqual(expected);
  const after = sim.history[storedBefore - 1]!;
  const before = sim.history[sim.history.length - 20]!;
  expect(before.from).toBe(after.phase); // it chains
  expect(await gapRows(sim.uid)).toHaveLength(1);
  expect(gap).toMatchObject({
    kind: "transitions",
    cause: "dropped",
    missing: lost.length,
    after_phase: after.phase,
    before_from: before.from,
    before_phase: before.phase,
  });
  expect(gap.after_time.toISOString()).toBe(after.time);
  expect(gap.before_time.toISOString()).toBe(before.time);
  expect(ledger.gapsRecorded).toBe(1);
  expect(messages().filter((m) => m.includes("could not recover"))).toEqual([
    `ledger could not recover ${lost.length} transitions after ${after.phase} at ${after.time}, before ${before.from} -> ${before.phase} at ${before.time} (the buffer dropped them and the run no longer holds them)`,
  ]);
  timed.expectNoWait();
});

it("judges dropped rows only against an object as new as the ones it observed", async () => {
  // The controller observes the object a write returned; the informer cache the ledger catches
  // up from may not have it yet. Rows dropped meanwhile are late, not lost.
  const [sim] = startRuns(1, "lagging") as [RunSim];
  let cached = sim.object();
  const { ledger } = openLedger({ maxBufferedRows: 2, listRuns: () => [cached] });
  ledger.observe(sim.object());
  await complete(ledger, [sim]);

  let flipped = 0;
  const flip = () => {
    if (flipped >= 8) return;
    ledger.observe(sim.to(sim.phase === "Planning" ? "ExecutingTool" : "Planning", `Flip${flipped++}`).object());
  };
  await outage(ledger, flip);
  while (flipped < 8) flip();
  cached = sim.object();
  (cached.status as { transitions: unknown[] }).transitions.splice(-5); // the cache is 5 transitions behind
  const catchUpsBefore = ledger.catchUps;
  postgres("start");

  await waitFor("catch-ups against the lagging cache", () => ledger.catchUps >= catchUpsBefore + 2, { timeoutMs: 20_000 });
  expect(ledger.catchingUp).toBe(true); // still waiting to judge the drops
  expect(await gapRows(sim.uid)).toEqual([]);
  expect(await ledgerProblems(db, [sim])).not.toEqual([]); // some rows are only in the newer object

  cached = sim.object(); // the cache catches up
  await complete(ledger, [sim]);
  expect(await gapRows(sim.uid)).toEqual([]);
  expect(ledger.gapsRecorded).toBe(0);
});

it("records the tool calls it dropped that the run no longer holds", async () => {
  const [sim] = startRuns(1, "calls") as [RunSim];
  const { ledger } = openLedger({ maxBufferedRows: 8, listRuns: () => [sim.object()] });
  ledger.observe(sim.object());
  await complete(ledger, [sim]);

  const made: string[] = [];
  const call = () => {
    if (made.length >= 70) return;
    const id = sim.startCall("search");
    ledger.observe(sim.object());
    sim.finishCall(id);
    ledger.observe(sim.object());
    made.push(id);
  };
  await outage(ledger, call);
  // Status keeps the newest 64 calls.
  while (made.length < 70) {
    call();
    await yieldToLoop();
  }
  postgres("start");

  const rotatedOut = made.slice(0, made.length - 64);
  await waitFor("the catch-up to finish", async () => ledger.bufferedRows === 0 && !ledger.catchingUp && ledger.catchUps >= 2, {
    timeoutMs: 30_000,
  });
  const stored = await db.query<{ call_id: string }>("SELECT call_id FROM ledger_tool_calls WHERE run_uid = $1", [sim.uid]);
  const storedIds = new Set(stored.map((r) => r.call_id));
  const lostIds = made.filter((id) => !storedIds.has(id));
  expect(lostIds.length).toBeGreaterThan(0);
  expect(rotatedOut).toEqual(expect.arrayContaining(lostIds)); // only calls the run no longer holds are lost
  const gaps = await gapRows(sim.uid);
  expect(gaps.map((g) => [g.kind, g.cause, g.call_id]).sort()).toEqual(lostIds.map((id) => ["tool_call", "dropped", id]).sort());
});

it("keeps the rows of a catch-up PostgreSQL refused, though the run rotates them out of its status before it is back", async () => {
  const [sim] = startRuns(1, "refused-catch-up") as [RunSim];
  const { ledger } = openLedger({ listRuns: () => [sim.object()] });
  ledger.observe(sim.object());
  await complete(ledger, [sim]);

  // No replica leads: the sandbox makes two calls that nothing observes, and PostgreSQL stops.
  postgres("stop");
  const unobserved = [sim.startCall("search"), sim.startCall("search")];
  for (const id of unobserved) sim.finishCall(id);
  // A replica comes to lead: its catch-up reads the run, holding both calls, and cannot write.
  const failuresBefore = ledger.failedFlushes;
  ledger.requestCatchUp();
  await waitFor("the catch-up to fail", async () => ledger.failedFlushes > failuresBefore && !ledger.connected, { timeoutMs: 20_000, intervalMs: 20 });
  // The sandbox goes on, observed, until both calls have rotated out of the run's status.
  for (let i = 0; i < 64; i++) {
    const id = sim.startCall("search");
    sim.finishCall(id);
    ledger.observe(sim.object());
  }
  expect(sim.object()).not.toMatchObject({ status: { toolCalls: expect.arrayContaining([expect.objectContaining({ id: unobserved[0] })]) } });
  postgres("start");

  await waitFor("the ledger to write its buffer and catch up", async () => ledger.bufferedRows === 0 && !ledger.catchingUp && ledger.connected, { timeoutMs: 30_000 });
  const stored = await db.query<{ call_id: string }>("SELECT call_id FROM ledger_tool_calls WHERE run_uid = $1", [sim.uid]);
  expect(stored.map((r) => r.call_id)).toEqual(expect.arrayContaining(unobserved));
  expect(await gapRows(sim.uid)).toEqual([]);
});

it("writes back the usage of an ended attempt whose row its full buffer dropped", async () => {
  // No object holds an ended attempt's usage any more (the heartbeat moved on to the next
  // attempt), so the ledger keeps the dropped row itself and the catch-up writes it.
  const [sim] = startRuns(1, "spent") as [RunSim];
  const { ledger } = openLedger({ maxBufferedRows: 2, listRuns: () => [sim.object()] });
  sim.report({ inputTokens: 100, outputTokens: 10, cost: "0.01", toolCalls: 1, model: "m" });
  ledger.observe(sim.object());
  await complete(ledger, [sim]);

  let grown = 0;
  await outage(ledger, () => {
    grown++;
    sim.report({ inputTokens: 100 + grown, outputTokens: 10 + grown, cost: "0.02", toolCalls: 1 + grown, model: "m" });
    ledger.observe(sim.object());
  });
  const lastOfAttempt1 = { input_tokens: String(100 + grown), output_tokens: String(10 + grown), tool_calls: String(1 + grown), cost: "0.02" };
  // The attempt ends; the next one's transitions and usage push attempt 1's row out of the buffer.
  const lostBefore = ledger.lostRows;
  sim.to("Queued", "HeartbeatTimeout");
  sim.attempt = 2;
  sim.to("Starting", "PodCreated").to("Planning");
  sim.report({ inputTokens: 7, outputTokens: 3, toolCalls: 0, model: "m" });
  ledger.observe(sim.object());
  expect(ledger.lostRows).toBeGreaterThan(lostBefore);

  postgres("start");
  await complete(ledger, [sim]);
  const usage = () =>
    db.query<{ attempt: number; input_tokens: string; output_tokens: string; tool_calls: string; cost: string | null }>(
      "SELECT attempt, input_tokens::text, output_tokens::text, tool_calls::text, cost::text FROM ledger_attempt_usage WHERE run_uid = $1 ORDER BY attempt",
      [sim.uid],
    );
  await waitFor("both attempts' usage stored", async () => (await usage()).length === 2 && ledger.bufferedRows === 0, { timeoutMs: 30_000 });
  expect(await usage()).toEqual([
    { attempt: 1, ...lastOfAttempt1 },
    { attempt: 2, input_tokens: "7", output_tokens: "3", tool_calls: "0", cost: null },
  ]);
  expect(await gapRows(sim.uid)).toEqual([]);
});

it("opens while PostgreSQL is down, keeps retrying, and migrates when it gets through", async () => {
  const fresh = await createDatabase(inject("databaseUrl"), import.meta.filename);
  extraDatabases.push(fresh);
  postgres("stop");
  const sims = startRuns(2, "early");
  const { ledger, messages } = openLedger({ listRuns: () => sims.map((s) => s.object()) }, fresh.url);
  const timed = new WatchedObserver(ledger);
  for (const sim of sims) timed.observe(sim.object());
  await waitFor("repeated failed attempts", () => ledger.failedFlushes >= 3, { timeoutMs: 20_000 });
  expect(ledger.ready).toBe(false);
  expect(messages()).toContain("cannot reach PostgreSQL yet; buffering rows and retrying");
  for (const sim of sims) timed.observe(sim.busyStep(0).object());

  postgres("start");
  await waitFor("the ledger to be ready", () => ledger.ready, { timeoutMs: 30_000 });
  await waitFor(
    "every row",
    async () => ledger.bufferedRows === 0 && !ledger.catchingUp && (await ledgerProblems(fresh, sims)).length === 0,
    { timeoutMs: 30_000 },
  );
  expect(await fresh.query("SELECT version FROM schema_migrations ORDER BY version")).toEqual(MIGRATIONS.map(({ version }) => ({ version })));
  timed.expectNoWait();
});

it("closes within its timeout while PostgreSQL is down, counting what it could not write", async () => {
  const { ledger } = openLedger();
  const sims = startRuns(1, "closing");
  ledger.observe(sims[0]!.object());
  await complete(ledger, sims);
  await outage(ledger, () => ledger.observe(sims[0]!.busyStep(0).object()));
  const buffered = ledger.bufferedRows;
  expect(buffered).toBeGreaterThan(0);
  const started = Date.now();
  await ledger.close(500);
  expect(Date.now() - started).toBeLessThan(3_000);
  expect(ledger.lostRows).toBe(buffered);
});
