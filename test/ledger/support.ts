// Shared by the ledger tests: a database of their own on the shared server, synthetic runs that
// change the way the controller and the sandbox change them, and checks of what the ledger holds.
import { execFileSync } from "node:child_process";
import { randomBytes, randomUUID } from "node:crypto";
import { existsSync } from "node:fs";
import { basename } from "node:path";
import { fileURLToPath } from "node:url";
import { pino, type Logger } from "pino";
import { Client } from "pg";
import { MAX_TRANSITIONS, type BudgetSpec, type Heartbeat, type Phase, type ToolCall, type Transition, type Usage } from "../../operator/api/agentrun.ts";
import type { Json } from "../../operator/kube/client.ts";
import { Ledger, type LedgerOptions } from "../../operator/ledger/ledger.ts";
import { afterAll, afterEach, beforeAll, inject } from "vitest";

const root = fileURLToPath(new URL("../..", import.meta.url));

/**
 * The Node.js the project pins (the `node` devDependency), to run the TypeScript CLI with even
 * when the test runner itself was started by an older node found first on PATH.
 */
export const NODE = existsSync(`${root}node_modules/.bin/node`) ? `${root}node_modules/.bin/node` : process.execPath;

/** Runs `hack/postgres.sh <command>` (stop/start simulate an outage of the shared server). */
export function postgres(command: "up" | "stop" | "start" | "status"): void {
  execFileSync("bash", [`${root}hack/postgres.sh`, command], { stdio: ["ignore", "ignore", "inherit"] });
}

export interface TestDatabase {
  url: string;
  name: string;
  query<T = any>(sql: string, params?: unknown[]): Promise<T[]>;
  drop(): Promise<void>;
}

/**
 * Creates a database named after the test file with a random suffix, so no two test files (or
 * runs) ever see each other's rows. The watchdog role may CREATE DATABASE.
 */
export async function createDatabase(baseUrl: string, testFile: string): Promise<TestDatabase> {
  const label = basename(testFile).replace(/\.test\.ts$/, "").replace(/[^a-z0-9]+/gi, "_").toLowerCase();
  const name = `ledger_${label}_${randomBytes(4).toString("hex")}`;
  const admin = new Client({ connectionString: baseUrl });
  await admin.connect();
  try {
    await admin.query(`CREATE DATABASE "${name}"`);
  } finally {
    await admin.end();
  }
  const url = new URL(baseUrl);
  url.pathname = `/${name}`;
  const dbUrl = url.toString();
  return {
    url: dbUrl,
    name,
    async query(sql, params) {
      const client = new Client({ connectionString: dbUrl });
      await client.connect();
      try {
        return (await client.query(sql, params)).rows;
      } finally {
        await client.end();
      }
    },
    async drop() {
      const client = new Client({ connectionString: baseUrl });
      await client.connect();
      try {
        // FORCE ends the database's connections, but a role that is not a superuser may not end
        // an autovacuum worker's (42501): that one finishes on its own, so the drop is tried again.
        for (let tries = 1; ; tries++) {
          try {
            await client.query(`DROP DATABASE IF EXISTS "${name}" WITH (FORCE)`);
            return;
          } catch (err) {
            if ((err as { code?: string }).code !== "42501" || tries >= 50) throw err;
            await new Promise((resolve) => setTimeout(resolve, 200));
          }
        }
      } finally {
        await client.end();
      }
    },
  };
}

/** A pino logger that keeps its lines, to check what the ledger said. */
export function capturingLogger(): { log: Logger; lines: Record<string, unknown>[]; messages: () => string[] } {
  const lines: Record<string, unknown>[] = [];
  const log = pino({ level: "debug" }, { write: (line: string) => void lines.push(JSON.parse(line) as Record<string, unknown>) });
  return { log, lines, messages: () => lines.map((l) => String(l.msg)) };
}

const MAX_TOOL_CALLS = 64;

/**
 * A synthetic AgentRun whose status changes as the operator (phase transitions) and the sandbox
 * (tool calls) would change it, bounded the same way. It remembers the full history, which is
 * what a complete ledger must hold.
 */
export class RunSim {
  readonly namespace: string;
  readonly name: string;
  readonly uid = randomUUID();
  phase: Phase | undefined;
  attempt = 1;
  /** Every transition ever made, oldest first. */
  readonly history: Transition[] = [];
  /** Every call ever made, in its latest state. */
  readonly calls = new Map<string, ToolCall>();
  /** spec.budget, if the run has one. */
  budget: BudgetSpec | undefined;
  private heartbeat: Heartbeat | undefined;
  private transitions: Transition[] = [];
  private toolCalls: ToolCall[] = [];
  private clock: number;
  private callCount = 0;

  constructor(namespace: string, name: string, start = Date.now()) {
    this.namespace = namespace;
    this.name = name;
    this.clock = start;
  }

  private now(): string {
    // Unique, increasing millisecond times, as the operator's transitions have.
    this.clock += 1 + (this.history.length % 7);
    return new Date(this.clock).toISOString();
  }

  to(phase: Phase, reason?: string, message?: string): this {
    const t: Transition = { phase, attempt: this.attempt, time: this.now() };
    if (this.phase) t.from = this.phase;
    if (reason) t.reason = reason;
    if (message) t.message = message;
    this.phase = phase;
    this.history.push(t);
    this.transitions = [...this.transitions, t].slice(-MAX_TRANSITIONS);
    return this;
  }

  startCall(name: string, extra: Partial<ToolCall> = {}): string {
    const id = `${this.name}-call-${++this.callCount}`;
    const call: ToolCall = {
      id,
      name,
      argsHash: `sha256:${id}`,
      idempotencyKey: `key-${id}`,
      idempotent: this.callCount % 2 === 0,
      attempt: this.attempt,
      state: "Started",
      startedAt: this.now(),
      ...extra,
    };
    this.calls.set(id, call);
    this.toolCalls = [...this.toolCalls, call].slice(-MAX_TOOL_CALLS);
    return id;
  }

  finishCall(id: string, outcome: "Succeeded" | { httpStatus: number; message: string } = "Succeeded"): this {
    const started = this.calls.get(id);
    if (!started) throw new Error(`no call ${id}`);
    const done: ToolCall =
      outcome === "Succeeded"
        ? { ...started, state: "Succeeded", finishedAt: this.now(), result: JSON.stringify({ ok: id }) }
        : { ...started, state: "Failed", finishedAt: this.now(), error: { httpStatus: outcome.httpStatus, message: outcome.message } };
    this.calls.set(id, done);
    this.toolCalls = this.toolCalls.map((c) => (c.id === id ? done : c));
    return this;
  }

  /** The sandbox's heartbeat with its attempt's cumulative usage, as the sandbox writes it. */
  report(usage: Usage, attempt = this.attempt): this {
    this.heartbeat = { time: this.now(), attempt, state: "Planning", usage };
    return this;
  }

  /** The object as the controller would hand it to observe(): plain JSON, a fresh copy. */
  object(): Json {
    return structuredClone({
      apiVersion: "watchdog.dev/v1alpha1",
      kind: "AgentRun",
      metadata: { uid: this.uid, namespace: this.namespace, name: this.name, resourceVersion: String(this.clock) },
      spec: { template: { spec: { containers: [{ name: "agent", image: "agent:latest" }] } }, ...(this.budget ? { budget: this.budget } : {}) },
      status: {
        phase: this.phase,
        attempt: this.attempt,
        transitions: this.transitions,
        toolCalls: this.toolCalls,
        ...(this.heartbeat ? { heartbeat: this.heartbeat } : {}),
      },
    });
  }

  /** One step of a busy agent: plan, run a tool, finish it, and go back to planning. */
  busyStep(i: number): this {
    if (this.phase !== "Planning") this.to("Planning", "Heartbeat");
    const id = this.startCall(i % 3 === 0 ? "shell" : "search");
    this.to("ExecutingTool", "ToolStarted");
    this.finishCall(id, i % 5 === 4 ? { httpStatus: 500, message: "tool failed" } : "Succeeded");
    return this;
  }
}

/** The transitions the ledger holds for a run, as stored, oldest first. */
export async function storedTransitions(db: TestDatabase, uid: string) {
  return db.query<{ time: Date; to_phase: string; from_phase: string | null; attempt: number; reason: string | null; message: string | null }>(
    "SELECT time, to_phase, from_phase, attempt, reason, message FROM ledger_transitions WHERE run_uid = $1 ORDER BY time, id",
    [uid],
  );
}

/**
 * What is wrong with the ledger's copy of these runs, or an empty list when it holds every
 * transition and every call exactly once, with each call in its latest state.
 */
export async function ledgerProblems(db: TestDatabase, sims: readonly RunSim[]): Promise<string[]> {
  const problems: string[] = [];
  for (const sim of sims) {
    const transitions = await storedTransitions(db, sim.uid);
    const got = transitions.map((t) => `${t.time.toISOString()} ${t.from_phase ?? "-"}->${t.to_phase} #${t.attempt} ${t.reason ?? ""}`);
    const want = sim.history.map((t) => `${t.time} ${t.from ?? "-"}->${t.phase} #${t.attempt} ${t.reason ?? ""}`);
    if (JSON.stringify(got) !== JSON.stringify(want)) {
      problems.push(`${sim.name}: ${got.length} transitions stored, ${want.length} made; first difference at ${firstDifference(got, want)}`);
    }
    const calls = await db.query<{ call_id: string; state: string; n: string }>(
      "SELECT call_id, max(state) AS state, count(*) AS n FROM ledger_tool_calls WHERE run_uid = $1 GROUP BY call_id",
      [sim.uid],
    );
    const stored = new Map(calls.map((c) => [c.call_id, c]));
    for (const [id, call] of sim.calls) {
      const row = stored.get(id);
      if (!row) problems.push(`${sim.name}: call ${id} missing`);
      else if (row.n !== "1") problems.push(`${sim.name}: call ${id} stored ${row.n} times`);
      else if (row.state !== call.state) problems.push(`${sim.name}: call ${id} is ${row.state}, not ${call.state}`);
    }
    if (stored.size > sim.calls.size) problems.push(`${sim.name}: ${stored.size} calls stored, ${sim.calls.size} made`);
  }
  return problems;
}

function firstDifference(got: string[], want: string[]): string {
  for (let i = 0; i < Math.max(got.length, want.length); i++) {
    if (got[i] !== want[i]) return `#${i}: stored ${got[i] ?? "nothing"}, made ${want[i] ?? "nothing"}`;
  }
  return "none";
}

/**
 * The test file's own database, made before its tests and dropped after them, and the ledgers its
 * tests open on it, each closed after its test. Call once, at the top of a test file.
 */
export function fileDatabase(file: string): { readonly db: TestDatabase; openLedger(options?: Partial<LedgerOptions>, log?: Logger): Ledger } {
  let db: TestDatabase | undefined;
  const open: Ledger[] = [];
  beforeAll(async () => {
    db = await createDatabase(inject("databaseUrl"), file);
  });
  afterEach(async () => {
    await Promise.all(open.splice(0).map((l) => l.close()));
  });
  afterAll(async () => {
    await db?.drop();
  });
  return {
    get db(): TestDatabase {
      if (!db) throw new Error("the test database is made in beforeAll: use it inside a test or a hook");
      return db;
    },
    openLedger(options = {}, log = capturingLogger().log): Ledger {
      const ledger = Ledger.open(this.db.url, { log, flushIntervalMs: 20, ...options });
      open.push(ledger);
      return ledger;
    },
  };
}
