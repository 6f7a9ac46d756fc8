// `npm run demo`: the watchdog at work on a local cluster, from nothing, in two or three minutes.
//
// It starts what is not already running (the control plane with a kwok node, PostgreSQL for the
// ledger), installs the CRD, starts the operator and the local sandbox runner (which plays the
// kubelet for sandbox pods and runs the example agent as local processes), and applies one
// AgentRun per example behaviour with short watchdog timings. A live view shows the runs until
// every one has reached its final state; the demo approves the run that asks for approval. It ends
// with what the watchdog did (from the operator's metrics and the ledger) and whether each
// behaviour ended as the watchdog's rules say it must.
//
//   npm run demo                 live view, summary, then waits: Ctrl-C tears down what it started
//   npm run demo -- --once       runs to the end without interaction; exit 0 only when every
//                                behaviour ended in its expected state (for tests and CI)
//   --namespace=NAME             where the runs go (default agent-watchdog-demo)
//   --timeout=SECONDS            how long the runs may take to settle (default 300)
//
// Ctrl-C at any point stops the operator, the runner and the agents, and stops the control plane
// and PostgreSQL only if this demo started them.
//
// The scenario (the runs, their timings and the expected end states) is exported, so the
// end-to-end tests drive exactly what the demo shows.
import { spawn, type ChildProcess } from "node:child_process";
import { closeSync, mkdirSync, openSync, readFileSync, readdirSync, rmSync } from "node:fs";
import { freePort } from "./lib/free-port.ts";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";
import { KubeConfig } from "@kubernetes/client-node";
import { pino } from "pino";
import { parseAllDocuments } from "yaml";
import { Outbox } from "../operator/example-agent/outbox.ts";
import { APPLY_PATCH, KubeClient, isNotFound, paths, type Json } from "../operator/kube/client.ts";
import { formatHistory } from "../operator/ledger/format.ts";
import type { RunHistory } from "../operator/ledger/read.ts";
import { SandboxRunner, stateRoot } from "./sandbox-runner.ts";

const root = fileURLToPath(new URL("..", import.meta.url));

// ---------------------------------------------------------------------------------------------
// the scenario

export type Behaviour =
  | "healthy"
  | "hang-in-tool"
  | "crash"
  | "tool-loop"
  | "rate-limited"
  | "stall"
  | "await-approval"
  | "side-effect-then-crash";

export interface DemoRun {
  name: string;
  behaviour: Behaviour;
  /** spec.watchdog */
  watchdog: Json;
  /** The end state the watchdog's rules require, in words. */
  expected: string;
}

/**
 * Short timings, so the whole demo takes a couple of minutes. The heartbeat timeout is the one
 * generous value: only the hanging run waits on it, and the others must not be mistaken for hung
 * while a loaded two-core machine starts eight Node processes at once (over 10 s has been seen).
 */
export const DEMO_WATCHDOG = {
  heartbeatTimeout: "30s",
  maxRestarts: 2,
  backoff: { initial: "3s", factor: 2, max: "12s" },
  rateLimitBackoff: { initial: "2s", factor: 2, max: "10s" },
  stall: { timeout: "5s", maxNudges: 2 },
  releaseAwaitingAfter: "10s",
};

export const DEMO_RUNS: DemoRun[] = [
  { name: "summarise-docs", behaviour: "healthy", watchdog: DEMO_WATCHDOG, expected: "Completed on attempt 1, no restarts" },
  {
    name: "build-release",
    behaviour: "hang-in-tool",
    // The example wedges in the same tool on every attempt, so each attempt is killed as hung
    // until the allowance is spent. One restart keeps that to two attempts of about 25 s each
    // (no progress for a timeout, then no heartbeat for another).
    watchdog: { ...DEMO_WATCHDOG, heartbeatTimeout: "15s", maxRestarts: 1 },
    expected: "NeedsHumanIntervention (RecoveryBudgetExhausted) after a HeartbeatTimeout requeue: it hangs on every attempt",
  },
  { name: "index-repo", behaviour: "crash", watchdog: DEMO_WATCHDOG, expected: "Completed after one PodFailed restart, resumed from its checkpoint" },
  { name: "fetch-report", behaviour: "tool-loop", watchdog: DEMO_WATCHDOG, expected: "NeedsHumanIntervention (ToolLoop)" },
  { name: "ask-model", behaviour: "rate-limited", watchdog: DEMO_WATCHDOG, expected: "Completed after a RateLimited requeue, restarts 0" },
  { name: "answer-ticket", behaviour: "stall", watchdog: DEMO_WATCHDOG, expected: "NeedsHumanIntervention (StallUnresolved) after 2 nudges" },
  { name: "deploy-v2", behaviour: "await-approval", watchdog: DEMO_WATCHDOG, expected: "Completed after its pod was released and the demo approved" },
  {
    name: "email-report",
    behaviour: "side-effect-then-crash",
    watchdog: DEMO_WATCHDOG,
    expected: "Completed after one PodFailed restart, with exactly one e-mail sent",
  },
];

/** Example-agent settings for every sandbox (see operator/example-agent/main.ts). */
export const EXAMPLE_ENV = {
  EXAMPLE_STEPS: "3",
  EXAMPLE_STEP_DELAY_MS: "1000",
  EXAMPLE_LOOP_DELAY_MS: "500",
  EXAMPLE_RETRY_AFTER_SECONDS: "4",
};

export const APPROVAL_ANSWER = "ship it";
export const DEFAULT_NAMESPACE = "agent-watchdog-demo";

export function manifestFor(run: DemoRun): Json {
  return {
    apiVersion: "watchdog.dev/v1alpha1",
    kind: "AgentRun",
    metadata: { name: run.name, labels: { "app.kubernetes.io/part-of": "agent-watchdog-demo" } },
    spec: {
      // The example agent takes its behaviour from the goal.
      goal: run.behaviour,
      template: { spec: { containers: [{ name: "agent", image: "agent-watchdog:0.1.0", args: ["example-agent"] }] } },
      watchdog: run.watchdog,
    },
  };
}

export async function applyRuns(client: KubeClient, namespace: string, runs: readonly DemoRun[] = DEMO_RUNS): Promise<void> {
  for (const run of runs) await client.create(paths.runs(namespace), manifestFor(run));
}

// ---------------------------------------------------------------------------------------------
// driving the runs to their end

/* eslint-disable @typescript-eslint/no-explicit-any -- runs are read as plain JSON here */
export type Run = { metadata: { name: string; uid: string; annotations?: Record<string, string> }; status?: any };

const FINAL_PHASES = new Set(["Completed", "Failed", "NeedsHumanIntervention"]);
export const isSettled = (run: Run) => FINAL_PHASES.has(run.status?.phase);

/** Awaiting a reply with its pod given back: only an answer moves it on. */
export const isReleased = (run: Run) =>
  run.status?.phase === "AwaitingReply" && run.status?.reason === "SandboxReleased" && run.status?.approval?.state === "Pending";

export interface DriveOptions {
  client: KubeClient;
  namespace: string;
  /** ms since the epoch */
  deadline: number;
  signal?: AbortSignal;
  intervalMs?: number;
  /** How long a released run is left on show before the demo approves it. */
  approveAfterMs?: number;
  onTick?: (runs: Run[]) => void;
  onApprove?: (run: string) => void;
}

/**
 * Polls the runs until every one has settled (or the deadline passes), approving each run whose
 * pod was released while it awaited a reply. Returns the runs as last seen.
 */
export async function driveUntilSettled(options: DriveOptions): Promise<{ runs: Run[]; settled: boolean; approved: Set<string> }> {
  const { client, namespace, deadline, signal } = options;
  const releasedSince = new Map<string, number>();
  const approved = new Set<string>();
  let runs: Run[] = [];
  for (;;) {
    signal?.throwIfAborted();
    try {
      runs = (await client.get<{ items: Run[] }>(paths.runs(namespace))).items;
    } catch (err) {
      // A slow or restarting API server is no reason to stop watching; the deadline still holds.
      if (Date.now() > deadline) throw err;
    }
    options.onTick?.(runs);
    const now = Date.now();
    for (const run of runs) {
      const name = run.metadata.name;
      if (!isReleased(run) || approved.has(name)) continue;
      const since = releasedSince.get(name) ?? now;
      releasedSince.set(name, since);
      if (now - since < (options.approveAfterMs ?? 0)) continue;
      try {
        await client.mergePatch(paths.run(namespace, name), { metadata: { annotations: { "watchdog.dev/approve": APPROVAL_ANSWER } } });
      } catch {
        continue; // tried again on the next round
      }
      approved.add(name);
      options.onApprove?.(name);
    }
    if (runs.length > 0 && runs.every(isSettled)) return { runs, settled: true, approved };
    if (now > deadline) return { runs, settled: false, approved };
    await abortableSleep(options.intervalMs ?? 1000, signal);
  }
}

// ---------------------------------------------------------------------------------------------
// judging the end states

export interface Verdict {
  name: string;
  behaviour: Behaviour;
  phase: string;
  ok: boolean;
  expected: string;
  problems: string[];
}

export interface JudgeContext {
  /** E-mails in the outbox sent on behalf of the run. */
  emailsSent(run: string): number;
  /** Whether the run was approved once it had been seen with its pod released. */
  approvedAfterRelease(run: string): boolean;
}

function transitionedFor(run: Run, phase: string, reason: string): boolean {
  return (run.status?.transitions ?? []).some((t: any) => t.phase === phase && t.reason === reason);
}

/** Checks one run against what the watchdog's rules require of its behaviour. */
export function judge(demo: DemoRun, run: Run | undefined, context: JudgeContext): Verdict {
  const problems: string[] = [];
  const status = run?.status ?? {};
  const want = (cond: boolean, problem: string) => {
    if (!cond) problems.push(problem);
  };
  const phase = (expected: string, reason?: string) => {
    want(status.phase === expected, `phase is ${status.phase ?? "unset"}, expected ${expected}`);
    if (reason) want(status.reason === reason, `reason is ${status.reason ?? "unset"}, expected ${reason}`);
  };
  if (!run) {
    problems.push("the run does not exist");
  } else {
    switch (demo.behaviour) {
      case "healthy":
        phase("Completed");
        want(status.restarts === 0 && status.attempt === 1, `attempt ${status.attempt} with ${status.restarts} restarts, expected attempt 1 with none`);
        break;
      case "hang-in-tool": {
        const allowance = (demo.watchdog as { maxRestarts?: number }).maxRestarts ?? 3;
        phase("NeedsHumanIntervention", "RecoveryBudgetExhausted");
        want(status.lastFailure?.reason === "HeartbeatTimeout", `last failure is ${status.lastFailure?.reason ?? "unset"}, expected HeartbeatTimeout`);
        want(transitionedFor(run, "Queued", "HeartbeatTimeout"), "no HeartbeatTimeout requeue in its transitions");
        want(status.restarts === allowance, `${status.restarts} restarts, expected the whole allowance of ${allowance}`);
        break;
      }
      case "crash":
        phase("Completed");
        want(transitionedFor(run, "Queued", "PodFailed"), "no PodFailed requeue in its transitions");
        want(status.restarts === 1, `${status.restarts} restarts, expected 1`);
        break;
      case "tool-loop":
        phase("NeedsHumanIntervention", "ToolLoop");
        break;
      case "rate-limited":
        phase("Completed");
        want(transitionedFor(run, "Queued", "RateLimited"), "no RateLimited requeue in its transitions");
        want(status.restarts === 0, `${status.restarts} restarts, expected 0 (a rate limit spends none)`);
        break;
      case "stall": {
        const nudges = ((demo.watchdog as { stall?: { maxNudges?: number } }).stall?.maxNudges ?? 3);
        phase("NeedsHumanIntervention", "StallUnresolved");
        want(status.stall?.nudges === nudges, `${status.stall?.nudges ?? 0} nudges, expected ${nudges}`);
        break;
      }
      case "await-approval":
        phase("Completed");
        want(context.approvedAfterRelease(demo.name), "it was never seen awaiting a reply with its pod released");
        want(status.approval?.state === "Approved" && status.approval?.answer === APPROVAL_ANSWER, `approval is ${JSON.stringify(status.approval)}`);
        // The release ends attempt 1 without spending a restart; the answer starts attempt 2.
        want(status.attempt === 2 && status.restarts === 0, `attempt ${status.attempt} with ${status.restarts} restarts, expected attempt 2 with none`);
        want(
          (status.transitions ?? []).some((t: any) => t.from === "AwaitingReply" && t.attempt === 2),
          "no new sandbox resumed after the answer",
        );
        break;
      case "side-effect-then-crash": {
        phase("Completed");
        want(transitionedFor(run, "Queued", "PodFailed"), "no PodFailed requeue in its transitions");
        const sent = context.emailsSent(demo.name);
        want(sent === 1, `${sent} e-mails in the outbox, expected exactly 1`);
        break;
      }
    }
  }
  return { name: demo.name, behaviour: demo.behaviour, phase: status.phase ?? "-", ok: problems.length === 0, expected: demo.expected, problems };
}

/** E-mails in the example agent's outbox, counted per run (the subject names the run). */
export async function emailsByRun(outboxDir: string): Promise<Map<string, number>> {
  const counts = new Map<string, number>();
  for (const email of await new Outbox(outboxDir).sent()) {
    const run = /^Report for (.+)$/.exec(email.subject)?.[1] ?? "?";
    counts.set(run, (counts.get(run) ?? 0) + 1);
  }
  return counts;
}

// ---------------------------------------------------------------------------------------------
// metrics

export interface Sample {
  name: string;
  labels: Record<string, string>;
  value: number;
}

/** Prometheus text format, the parts the summary needs (no escapes in label values). */
export function parseMetrics(text: string): Sample[] {
  const samples: Sample[] = [];
  for (const line of text.split("\n")) {
    if (!line || line.startsWith("#")) continue;
    const m = /^([a-zA-Z_:][\w:]*)(?:\{(.*)\})?\s+(\S+)/.exec(line);
    if (!m) continue;
    const labels: Record<string, string> = {};
    for (const pair of (m[2] ?? "").matchAll(/(\w+)="([^"]*)"/g)) labels[pair[1] as string] = pair[2] as string;
    samples.push({ name: m[1] as string, labels, value: Number(m[3]) });
  }
  return samples;
}

export const total = (samples: Sample[], name: string) => samples.filter((s) => s.name === name).reduce((sum, s) => sum + s.value, 0);

export function byLabel(samples: Sample[], name: string, label: string): Record<string, number> {
  const out: Record<string, number> = {};
  for (const s of samples) if (s.name === name && s.value > 0) out[s.labels[label] ?? ""] = (out[s.labels[label] ?? ""] ?? 0) + s.value;
  return out;
}

// ---------------------------------------------------------------------------------------------
// infrastructure, shared with the end-to-end tests' setup

/** Runs a hack/ script; its progress goes to our stderr, its stdout is returned. */
export function runScript(script: string, args: string[], options: { quiet?: boolean } = {}): Promise<{ code: number; stdout: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn("bash", [join(root, "hack", script), ...args], { stdio: ["ignore", "pipe", options.quiet ? "ignore" : "inherit"] });
    let stdout = "";
    child.stdout.on("data", (chunk: Buffer) => (stdout += chunk.toString()));
    child.once("error", reject);
    child.once("close", (code, signal) => resolve({ code: code ?? (signal ? 130 : 1), stdout }));
  });
}

async function scriptOk(script: string, args: string[]): Promise<string> {
  const { code, stdout } = await runScript(script, args);
  if (code !== 0) throw new Error(`hack/${script} ${args.join(" ")} failed (exit ${code})`);
  return stdout;
}

export const exported = (stdout: string, name: string) => new RegExp(`export ${name}=(\\S+)`).exec(stdout)?.[1];

export function clientFor(kubeconfig: string): KubeClient {
  const kc = new KubeConfig();
  kc.loadFromFile(kubeconfig);
  return new KubeClient(kc);
}

/** Installs the CRDs in crds/ (server-side apply) and waits until they are served. */
export async function applyCrds(client: KubeClient, timeoutMs = 60_000): Promise<void> {
  const dir = join(root, "crds");
  const names: string[] = [];
  for (const file of readdirSync(dir).filter((f) => f.endsWith(".yaml")).sort()) {
    for (const doc of parseAllDocuments(readFileSync(join(dir, file), "utf8"))) {
      const crd = doc.toJS() as Json | null;
      if (!crd) continue;
      const name = (crd.metadata as { name: string }).name;
      await client.request("PATCH", `/apis/apiextensions.k8s.io/v1/customresourcedefinitions/${name}`, {
        body: crd,
        contentType: APPLY_PATCH,
        query: { fieldManager: "agent-watchdog-hack", force: true },
      });
      names.push(name);
    }
  }
  await pollUntil(`the CRDs to be established`, timeoutMs, async () => {
    for (const name of names) {
      const crd = await client.get<{ status?: { conditions?: { type: string; status: string }[] } }>(
        `/apis/apiextensions.k8s.io/v1/customresourcedefinitions/${name}`,
      );
      if (!crd.status?.conditions?.some((c) => c.type === "Established" && c.status === "True")) return false;
    }
    return true;
  });
}

/** Deletes the namespace if it exists and waits until it is gone, then creates it afresh. */
export async function freshNamespace(client: KubeClient, namespace: string, signal?: AbortSignal): Promise<void> {
  try {
    await client.delete(`/api/v1/namespaces/${namespace}`);
    await pollUntil(`namespace ${namespace} from an earlier demo to be deleted`, 180_000, async () => {
      try {
        await client.get(`/api/v1/namespaces/${namespace}`);
        return false;
      } catch (err) {
        if (isNotFound(err)) return true;
        throw err;
      }
    }, signal);
  } catch (err) {
    if (!isNotFound(err)) throw err;
  }
  await client.create("/api/v1/namespaces", { apiVersion: "v1", kind: "Namespace", metadata: { name: namespace } });
  // Pods are refused until the namespace's default ServiceAccount exists.
  await pollUntil(`the default ServiceAccount in ${namespace}`, 60_000, async () => {
    try {
      await client.get(`/api/v1/namespaces/${namespace}/serviceaccounts/default`);
      return true;
    } catch (err) {
      if (isNotFound(err)) return false;
      throw err;
    }
  }, signal);
}

function abortableSleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(signal.reason);
    const timer = setTimeout(() => {
      signal?.removeEventListener("abort", onAbort);
      resolve();
    }, ms);
    const onAbort = () => {
      clearTimeout(timer);
      reject(signal?.reason);
    };
    signal?.addEventListener("abort", onAbort, { once: true });
  });
}

export async function pollUntil(what: string, timeoutMs: number, probe: () => Promise<boolean>, signal?: AbortSignal, intervalMs = 250): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  let last: unknown;
  for (;;) {
    signal?.throwIfAborted();
    try {
      if (await probe()) return;
      last = undefined;
    } catch (err) {
      last = err;
    }
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs / 1000}s waiting for ${what}${last ? `: ${String(last)}` : ""}`);
    await abortableSleep(intervalMs, signal);
  }
}

export interface OperatorHandle {
  child: ChildProcess;
  metricsUrl: string;
  baseUrl: string;
  logFile: string;
  stop(): Promise<void>;
}

/** Starts `node operator/cli/operator.ts` for one namespace, with the ledger, logging to a file. */
export async function startOperator(options: { kubeconfig: string; namespace: string; databaseUrl: string; logFile: string; signal?: AbortSignal }): Promise<OperatorHandle> {
  const metricsPort = await freePort();
  const healthPort = await freePort();
  const fd = openSync(options.logFile, "a");
  const env: NodeJS.ProcessEnv = { ...process.env, KUBECONFIG: options.kubeconfig };
  delete env.POD_NAME;
  delete env.DATABASE_URL;
  const child = spawn(
    process.execPath,
    [
      join(root, "operator/cli/operator.ts"),
      `--namespaces=${options.namespace}`,
      `--database-url=${options.databaseUrl}`,
      `--metrics-bind-address=127.0.0.1:${metricsPort}`,
      `--health-probe-bind-address=127.0.0.1:${healthPort}`,
      "--log-level=info",
    ],
    // Its own process group: a Ctrl-C reaches the demo, which stops the operator in order.
    { env, stdio: ["ignore", fd, fd], detached: true },
  );
  closeSync(fd);
  const exited = new Promise<void>((resolve) => child.once("close", () => resolve()));
  const handle: OperatorHandle = {
    child,
    baseUrl: `http://127.0.0.1:${metricsPort}`,
    metricsUrl: `http://127.0.0.1:${metricsPort}/metrics`,
    logFile: options.logFile,
    async stop() {
      if (child.exitCode !== null || child.signalCode !== null) return;
      child.kill("SIGTERM");
      const timer = setTimeout(() => child.kill("SIGKILL"), 10_000);
      await exited;
      clearTimeout(timer);
    },
  };
  try {
    await pollUntil("the operator to be ready", 60_000, async () => {
      if (child.exitCode !== null) throw new Error(`the operator exited with ${child.exitCode}; see ${options.logFile}`);
      const res = await fetch(`http://127.0.0.1:${healthPort}/readyz`).catch(() => undefined);
      return res?.ok === true;
    }, options.signal);
  } catch (err) {
    await handle.stop();
    throw err;
  }
  return handle;
}

/** A run's history as the operator's ledger serves it, once it has caught up with the run. */
export async function ledgerHistory(operatorUrl: string, run: Run, timeoutMs = 20_000): Promise<RunHistory | undefined> {
  let history: RunHistory | undefined;
  const want = (run.status?.transitions ?? []) as { phase: string }[];
  try {
    await pollUntil(`the ledger to hold ${run.metadata.name}'s history`, timeoutMs, async () => {
      const res = await fetch(`${operatorUrl}/history?uid=${encodeURIComponent(run.metadata.uid)}`);
      if (!res.ok) return false;
      history = (await res.json()) as RunHistory;
      return history.transitions.length >= want.length && history.transitions.at(-1)?.phase === run.status?.phase;
    });
  } catch {
    // What the ledger has so far is still worth showing.
  }
  return history;
}

// ---------------------------------------------------------------------------------------------
// the live view

const tty = process.stdout.isTTY === true;
const colour = tty && !process.env.NO_COLOR;
const paint = (code: number) => (text: string) => (colour ? `\x1b[${code}m${text}\x1b[0m` : text);
const green = paint(32);
const red = paint(31);
const yellow = paint(33);
const dim = paint(2);
const bold = paint(1);

function phaseColour(phase: string): (s: string) => string {
  if (phase === "Completed") return green;
  if (phase === "NeedsHumanIntervention" || phase === "Failed") return red;
  if (phase === "Queued" || phase === "AwaitingReply") return yellow;
  return (s) => s;
}

const seconds = (ms: number) => `${(ms / 1000).toFixed(ms < 10_000 ? 1 : 0)}s`;
const ACTIVE = new Set(["Starting", "Planning", "ExecutingTool", "AwaitingReply"]);

interface Row {
  name: string;
  behaviour: string;
  phase: string;
  attempt: string;
  restarts: string;
  heartbeat: string;
  nudges: string;
  reason: string;
}

function rowOf(run: Run, behaviours: Map<string, string>, now: number): Row {
  const s = run.status ?? {};
  const hb = s.heartbeat?.attempt === s.attempt && s.podName ? Date.parse(s.heartbeat.time) : NaN;
  const reason = s.reason ?? (s.lastFailure ? `after ${s.lastFailure.reason}` : "");
  return {
    name: run.metadata.name,
    behaviour: behaviours.get(run.metadata.name) ?? "?",
    phase: s.phase ?? "-",
    attempt: String(s.attempt ?? "-"),
    restarts: s.watchdog ? `${s.restarts ?? 0}/${s.watchdog.maxRestarts}` : "-",
    heartbeat: ACTIVE.has(s.phase) && Number.isFinite(hb) ? seconds(Math.max(0, now - hb)) : "-",
    nudges: s.watchdog ? `${s.stall?.nudges ?? 0}/${s.watchdog.stall.maxNudges}` : "-",
    reason,
  };
}

const COLUMNS: [keyof Row, string, number][] = [
  ["name", "NAME", 16],
  ["behaviour", "BEHAVIOUR", 24],
  ["phase", "PHASE", 24],
  ["attempt", "ATTEMPT", 9],
  ["restarts", "RESTARTS", 10],
  ["heartbeat", "HEARTBEAT", 11],
  ["nudges", "NUDGES", 8],
  ["reason", "REASON", 0],
];

function tableLines(rows: Row[]): string[] {
  const line = (cells: (key: keyof Row, width: number) => string) => COLUMNS.map(([key, , width]) => cells(key, width)).join("");
  const header = bold(line((key, width) => (COLUMNS.find((c) => c[0] === key)?.[1] ?? "").padEnd(width)));
  const body = rows.map((row) =>
    line((key, width) => {
      const text = row[key].padEnd(width);
      return key === "phase" ? phaseColour(row.phase)(text) : text;
    }),
  );
  return [header, ...body];
}

interface EventLine {
  time: string;
  text: string;
}

class LiveView {
  private drawn = 0;
  private readonly last = new Map<string, string>();
  private readonly started = Date.now();
  private readonly behaviours: Map<string, string>;
  private events: EventLine[] = [];
  private readonly notes: string[] = [];
  private readonly namespace: string;

  constructor(namespace: string, runs: readonly DemoRun[]) {
    this.namespace = namespace;
    this.behaviours = new Map(runs.map((r) => [r.name, r.behaviour]));
  }

  note(text: string): void {
    if (tty) this.notes.push(text);
    else process.stdout.write(`${this.stamp()}  ${text}\n`);
  }

  setEvents(events: EventLine[]): void {
    this.events = events;
  }

  private stamp(): string {
    return `+${seconds(Date.now() - this.started)}`.padStart(7);
  }

  update(runs: Run[]): void {
    const now = Date.now();
    const sorted = [...runs].sort((a, b) => this.order(a) - this.order(b));
    const rows = sorted.map((r) => rowOf(r, this.behaviours, now));
    if (tty) {
      this.redraw(rows);
      return;
    }
    // Not a terminal: one line per change of what matters, never a redraw.
    for (const [i, row] of rows.entries()) {
      const s = sorted[i]?.status ?? {};
      const key = [row.phase, row.attempt, row.reason, row.nudges].join("|");
      if (this.last.get(row.name) === key) continue;
      this.last.set(row.name, key);
      const detail = s.message && !ACTIVE.has(row.phase) ? `  ${String(s.message).slice(0, 140)}` : "";
      process.stdout.write(
        `${this.stamp()}  ${row.name.padEnd(15)} ${row.behaviour.padEnd(23)} ${row.phase.padEnd(23)} attempt ${row.attempt}  restarts ${row.restarts}  nudges ${row.nudges}${row.reason ? `  ${row.reason}` : ""}${detail}\n`,
      );
    }
  }

  private order(run: Run): number {
    const i = [...this.behaviours.keys()].indexOf(run.metadata.name);
    return i < 0 ? 99 : i;
  }

  private redraw(rows: Row[]): void {
    const width = Math.max(40, (process.stdout.columns ?? 120) - 1);
    const settled = rows.filter((r) => FINAL_PHASES.has(r.phase)).length;
    const lines = [
      `${bold("agent-watchdog demo")}  namespace ${this.namespace}  ${seconds(Date.now() - this.started)}  ${settled}/${rows.length} runs settled`,
      "",
      ...tableLines(rows),
      "",
      bold("recent watchdog events"),
      ...(this.events.length ? this.events.slice(-7).map((e) => `  ${dim(e.time)}  ${e.text}`) : [dim("  (none yet)")]),
      ...(this.notes.length ? ["", ...this.notes.slice(-3).map((n) => `  ${yellow(n)}`)] : []),
      "",
      dim("Ctrl-C stops the demo and cleans up."),
    ].map((l) => clip(l, width));
    let out = this.drawn ? `\x1b[${this.drawn}A\r` : "";
    out += lines.map((l) => `${l}\x1b[K`).join("\n") + "\n\x1b[J";
    process.stdout.write(out);
    this.drawn = lines.length;
  }
}

/** Cuts a line to the terminal's width, counting only visible characters. */
function clip(line: string, width: number): string {
  let visible = 0;
  let out = "";
  for (let i = 0; i < line.length; i++) {
    if (line[i] === "\x1b") {
      const end = line.indexOf("m", i);
      out += line.slice(i, end + 1);
      i = end;
      continue;
    }
    if (visible >= width) continue;
    out += line[i];
    visible++;
  }
  return out;
}

async function recentEvents(client: KubeClient, namespace: string): Promise<EventLine[]> {
  const list = await client.get<{ items: any[] }>(paths.events(namespace));
  return list.items
    .filter((e) => e.regarding?.kind === "AgentRun")
    .map((e) => ({ at: e.eventTime ?? e.deprecatedLastTimestamp ?? e.metadata?.creationTimestamp ?? "", e }))
    .sort((a, b) => (a.at < b.at ? -1 : a.at > b.at ? 1 : 0))
    .map(({ at, e }) => ({
      time: at ? new Date(at).toISOString().slice(11, 19) : "--:--:--",
      text: `${String(e.regarding.name).padEnd(15)} ${e.type === "Warning" ? yellow(e.reason) : e.reason}: ${e.note}`,
    }));
}

// ---------------------------------------------------------------------------------------------
// the summary

/** What the healthy run's sandbox SDK wrote, from the stats its agent logs when it completes. */
interface SdkWrites {
  run: string;
  seconds: number;
  writes: number;
  heartbeatWrites: number;
  heartbeatIntervalMs: number;
}

function sdkWrites(logDir: string, namespace: string, run: Run | undefined): SdkWrites | undefined {
  if (!run?.status?.attempt) return undefined;
  let text: string;
  try {
    text = readFileSync(join(logDir, `${namespace}_${run.metadata.name}-${run.status.attempt}.log`), "utf8");
  } catch {
    return undefined;
  }
  for (const line of text.split("\n").reverse()) {
    if (!line.includes('"agent completed"')) continue;
    try {
      const { time, stats } = JSON.parse(line) as { time: string; stats: { writes: number; heartbeatWrites: number; heartbeatIntervalMs: number; startedAt: number } };
      const seconds = (Date.parse(time) - stats.startedAt) / 1000;
      return { run: run.metadata.name, seconds, writes: stats.writes, heartbeatWrites: stats.heartbeatWrites, heartbeatIntervalMs: stats.heartbeatIntervalMs };
    } catch {
      return undefined;
    }
  }
  return undefined;
}

function summaryLines(samples: Sample[], runs: Run[], verdicts: Verdict[], emails: Map<string, number>, sdk?: SdkWrites): string[] {
  const lines: string[] = [];
  const list = (counts: Record<string, number>) =>
    Object.entries(counts)
      .sort(([a], [b]) => a.localeCompare(b))
      .map(([k, v]) => `${k} ${v}`)
      .join(", ") || "none";
  const row = (label: string, value: number | string, detail = "") => lines.push(`  ${label.padEnd(34)} ${String(value).padStart(3)}${detail ? `   ${detail}` : ""}`);

  lines.push(bold("What the watchdog did") + dim("  (the operator's metrics)"));
  const killed = total(samples, "watchdog_hung_sandboxes_killed_total");
  const count = total(samples, "watchdog_detection_latency_seconds_count");
  const sum = total(samples, "watchdog_detection_latency_seconds_sum");
  const buckets = samples
    .filter((s) => s.name === "watchdog_detection_latency_seconds_bucket" && s.labels.le !== "+Inf")
    .sort((a, b) => Number(a.labels.le) - Number(b.labels.le));
  const within = buckets.find((b) => b.value >= count && count > 0)?.labels.le;
  row("hung sandboxes killed", killed, count ? `detected ${(sum / count).toFixed(2)}s after the heartbeat deadline on average${within ? `, each within ${within}s` : ""}` : "");
  const requeues = byLabel(samples, "watchdog_requeues_total", "reason");
  row("requeues with backoff", total(samples, "watchdog_requeues_total"), list(requeues));
  row("stall nudges", total(samples, "watchdog_nudges_total"));
  const interventions = byLabel(samples, "watchdog_needs_human_intervention_total", "reason");
  row("runs stopped for a person", total(samples, "watchdog_needs_human_intervention_total"), list(interventions));

  // Replays: a later attempt calling a tool an earlier attempt started, with the same key.
  const replays: string[] = [];
  for (const run of runs) {
    const byKey = new Map<string, Set<number>>();
    for (const call of run.status?.toolCalls ?? []) {
      if (!call.idempotencyKey) continue;
      const attempts = byKey.get(call.idempotencyKey) ?? new Set<number>();
      attempts.add(call.attempt);
      byKey.set(call.idempotencyKey, attempts);
    }
    for (const [key, attempts] of byKey) {
      if (attempts.size < 2) continue;
      const call = (run.status.toolCalls as any[]).find((c) => c.idempotencyKey === key);
      replays.push(`${call.name} in ${run.metadata.name} (attempts ${[...attempts].sort().join(", ")})`);
    }
  }
  row("calls re-run under the same key", replays.length, replays.join("; "));
  const mailer = DEMO_RUNS.find((r) => r.behaviour === "side-effect-then-crash");
  if (mailer) {
    const sent = emails.get(mailer.name) ?? 0;
    const verdict = sent === 1 ? green("exactly once") : red(`${sent} times`);
    row("e-mails in the outbox", sent, `${mailer.name} crashed after sending and sent again with the same key: delivered ${verdict}`);
  }

  if (sdk && sdk.seconds > 0) {
    const perMinute = (n: number) => ((n * 60) / sdk.seconds).toFixed(1);
    row(
      "status writes by the healthy sandbox",
      sdk.writes,
      `${sdk.run} in ${sdk.seconds.toFixed(0)}s: ${sdk.heartbeatWrites} heartbeat-only (${perMinute(sdk.heartbeatWrites)}/min; at most one per ${sdk.heartbeatIntervalMs / 1000}s), the rest carried state changes, tool records and checkpoints`,
    );
  }

  lines.push("", bold("How each behaviour ended"));
  for (const v of verdicts) {
    const mark = v.ok ? green("✓") : red("✗");
    const run = runs.find((r) => r.metadata.name === v.name);
    const s = run?.status ?? {};
    const detail = `attempt ${s.attempt ?? "-"}, restarts ${s.restarts ?? 0}${s.reason ? `, ${s.reason}` : ""}`;
    lines.push(`  ${mark} ${v.name.padEnd(15)} ${v.behaviour.padEnd(23)} ${phaseColour(v.phase)(v.phase.padEnd(23))} ${dim(detail)}`);
    if (!v.ok) {
      lines.push(`      expected: ${v.expected}`);
      for (const p of v.problems) lines.push(`      ${red(p)}`);
    }
  }
  return lines;
}

// ---------------------------------------------------------------------------------------------
// main

const USAGE = `usage: npm run demo -- [--once] [--namespace=NAME] [--timeout=SECONDS]

  --once            run to the end without interaction; exit 0 only when every behaviour
                    ended in its expected state
  --namespace=NAME  where the runs go (default ${DEFAULT_NAMESPACE}); it is recreated
  --timeout=SECONDS how long the runs may take to settle (default 300)
`;

interface Started {
  /** The demo started the control plane from nothing, so it takes it down again. */
  controlPlane: boolean;
  /** What undoes the demo's \`hack/postgres.sh up\`: down (it created the server), stop (it started a stopped one). */
  postgres?: "down" | "stop";
}

async function main(argv: string[]): Promise<number> {
  const { values } = parseArgs({
    args: argv,
    options: {
      once: { type: "boolean" },
      namespace: { type: "string" },
      timeout: { type: "string" },
      help: { type: "boolean", short: "h" },
    },
  });
  if (values.help) {
    process.stdout.write(USAGE);
    return 0;
  }
  const once = values.once ?? false;
  const namespace = values.namespace ?? DEFAULT_NAMESPACE;
  const timeoutS = Number(values.timeout ?? 300);
  if (!/^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/.test(namespace)) throw new Error(`--namespace=${namespace} is not a namespace name`);
  if (!(timeoutS > 0)) throw new Error(`--timeout=${values.timeout} must be a positive number of seconds`);

  const abort = new AbortController();
  const started: Started = { controlPlane: false };
  let operator: OperatorHandle | undefined;
  let runner: SandboxRunner | undefined;
  let client: KubeClient | undefined;
  let namespaceCreated = false;
  let interruptedAt = 0;
  const onSignal = (signal: NodeJS.Signals) => {
    // npm passes the terminal's Ctrl-C on to its script, which then gets it twice at once: only a
    // later one is a second Ctrl-C.
    if (interruptedAt && Date.now() - interruptedAt < 1000) return;
    if (!interruptedAt) {
      interruptedAt = Date.now();
      process.stdout.write(`\n${yellow(`${signal}: stopping the demo and cleaning up (again to stop at once)`)}\n`);
      abort.abort(new Error(signal));
      return;
    }
    // A second Ctrl-C: nothing is waited for, but no process of ours is left behind.
    for (const p of runner?.running() ?? []) {
      try {
        process.kill(-p.pid, "SIGKILL");
      } catch {
        // gone
      }
    }
    operator?.child.kill("SIGKILL");
    process.exit(130);
  };
  process.on("SIGINT", onSignal);
  process.on("SIGTERM", onSignal);

  const demoDir = join(stateRoot(), "demo", namespace);
  const outboxDir = join(demoDir, "outbox");
  const t0 = Date.now();
  const step = async <T>(what: string, work: () => Promise<T>, detail?: (value: T) => string): Promise<T> => {
    abort.signal.throwIfAborted();
    const at = Date.now();
    process.stdout.write(`${dim("→")} ${what}\n`);
    const value = await work();
    process.stdout.write(`${green("✓")} ${what} ${dim(`(${seconds(Date.now() - at)})`)}${detail ? `  ${detail(value)}` : ""}\n`);
    return value;
  };

  let exitCode = 1;
  let waitingForTheEnd = false;
  try {
    process.stdout.write(`${bold("agent-watchdog demo")}: eight agent runs, one per behaviour the watchdog handles\n\n`);
    rmSync(demoDir, { recursive: true, force: true });
    mkdirSync(join(demoDir, "sandboxes"), { recursive: true });

    const kubeconfig = await step(
      "local control plane with a kwok node (the first run builds it from pinned Go modules)",
      async () => {
        const before = await runScript("control-plane.sh", ["status"], { quiet: true });
        // Only a machine with no cluster state at all gets a cluster that the demo then removes.
        started.controlPlane = before.code !== 0 && before.stdout.includes("no state");
        const out = await scriptOk("control-plane.sh", ["up", "--nodes"]);
        const path = exported(out, "KUBECONFIG");
        if (!path) throw new Error("hack/control-plane.sh up printed no KUBECONFIG");
        return path;
      },
      () => (started.controlPlane ? "started" : "already running; it stays up afterwards"),
    );
    client = clientFor(kubeconfig);
    const kube = client;
    await step("AgentRun CRD", () => applyCrds(kube));
    const databaseUrl = await step(
      "PostgreSQL for the ledger",
      async () => {
        const before = await runScript("postgres.sh", ["status"], { quiet: true });
        if (before.code !== 0) started.postgres = before.stdout.includes("stopped") ? "stop" : "down";
        const url = exported(await scriptOk("postgres.sh", ["up"]), "DATABASE_URL");
        if (!url) throw new Error("hack/postgres.sh up printed no DATABASE_URL");
        return url;
      },
      () => (started.postgres ? "started" : "already running; it stays up afterwards"),
    );
    await step(`namespace ${namespace}`, async () => {
      namespaceCreated = true;
      await freshNamespace(kube, namespace, abort.signal);
    });
    operator = await step(
      "operator",
      () => startOperator({ kubeconfig, namespace, databaseUrl, logFile: join(demoDir, "operator.log"), signal: abort.signal }),
      (op) => dim(`metrics ${op.metricsUrl}, log ${op.logFile}`),
    );
    runner = await step(
      "sandbox runner (plays the kubelet: runs each sandbox pod's agent as a local process)",
      async () => {
        const r = new SandboxRunner({
          kubeconfig,
          namespaces: [namespace],
          env: { ...EXAMPLE_ENV, EXAMPLE_OUTBOX_DIR: outboxDir },
          logDir: join(demoDir, "sandboxes"),
          log: pino({ name: "sandbox-runner", level: "info", timestamp: pino.stdTimeFunctions.isoTime }, pino.destination({ dest: join(demoDir, "runner.log"), sync: true })),
        });
        await r.start();
        return r;
      },
      () => dim(`agent logs in ${join(demoDir, "sandboxes")}`),
    );
    await step(`${DEMO_RUNS.length} AgentRuns`, () => applyRuns(kube, namespace));
    process.stdout.write(`  ${dim(`ready in ${seconds(Date.now() - t0)}; watching the runs`)}\n\n`);

    // -- the live view
    const view = new LiveView(namespace, DEMO_RUNS);
    let eventsAt = 0;
    const { runs, settled, approved } = await driveUntilSettled({
      client: kube,
      namespace,
      deadline: Date.now() + timeoutS * 1000,
      signal: abort.signal,
      intervalMs: 1000,
      approveAfterMs: 3000,
      onTick: (current) => {
        if (tty && Date.now() - eventsAt >= 1000) {
          eventsAt = Date.now();
          recentEvents(kube, namespace).then((e) => view.setEvents(e), () => {});
        }
        view.update(current);
      },
      onApprove: (name) => view.note(`the demo approves ${name}: annotate watchdog.dev/approve="${APPROVAL_ANSWER}"`),
    });
    process.stdout.write("\n");

    // -- the summary
    const emails = await emailsByRun(outboxDir);
    const context: JudgeContext = { emailsSent: (name) => emails.get(name) ?? 0, approvedAfterRelease: (name) => approved.has(name) };
    const verdicts = DEMO_RUNS.map((demo) => judge(demo, runs.find((r) => r.metadata.name === demo.name), context));
    const samples = parseMetrics(await (await fetch(operator.metricsUrl)).text());
    const healthy = runs.find((r) => r.metadata.name === DEMO_RUNS.find((d) => d.behaviour === "healthy")?.name);
    const sdk = sdkWrites(join(demoDir, "sandboxes"), namespace, healthy);
    for (const line of summaryLines(samples, runs, verdicts, emails, sdk)) process.stdout.write(`${line}\n`);

    const shown = DEMO_RUNS.find((r) => r.behaviour === "side-effect-then-crash");
    const shownRun = runs.find((r) => r.metadata.name === shown?.name);
    if (shown && shownRun) {
      process.stdout.write(`\n${bold(`The ledger's history of ${shown.name}`)} ${dim(`(${shown.behaviour}; GET ${operator.baseUrl}/history/${namespace}/${shown.name})`)}\n`);
      const history = await ledgerHistory(operator.baseUrl, shownRun);
      const text = history ? formatHistory(history) : "  the ledger holds nothing for it yet\n";
      process.stdout.write(text.split("\n").map((l) => (l ? `  ${l}` : l)).join("\n"));
    }

    const failed = verdicts.filter((v) => !v.ok);
    process.stdout.write("\n");
    if (!settled) {
      const open = runs.filter((r) => !isSettled(r)).map((r) => `${r.metadata.name} (${r.status?.phase ?? "no phase"})`);
      process.stdout.write(`${red(`Not every run settled within ${timeoutS}s:`)} ${open.join(", ")}\n`);
    }
    if (failed.length === 0 && settled) {
      process.stdout.write(`${green(`All ${verdicts.length} behaviours ended as the watchdog's rules require.`)} ${dim(`(${seconds(Date.now() - t0)} in all)`)}\n`);
      exitCode = 0;
    } else {
      process.stdout.write(`${red(`${failed.length} of ${verdicts.length} behaviours did not end as expected:`)} ${failed.map((v) => v.name).join(", ")}\n`);
      process.stdout.write(dim(`  logs: operator ${operator.logFile}, agents ${join(demoDir, "sandboxes")}\n`));
    }

    if (!once) {
      process.stdout.write(
        [
          "",
          "Everything is still running, so you can look around:",
          `  export KUBECONFIG=${kubeconfig}`,
          `  kubectl get agentruns -n ${namespace}`,
          `  kubectl describe agentrun -n ${namespace} build-release`,
          `  DATABASE_URL=${databaseUrl} ${process.execPath} operator/ledger/cli.ts history ${namespace} deploy-v2`,
          `  curl -s ${operator.metricsUrl} | grep ^watchdog_`,
          "",
          bold("Press Ctrl-C to stop the demo and clean up."),
          "",
        ].join("\n"),
      );
      // Asked for: a Ctrl-C here is the normal end, and the exit status stays the verdict.
      waitingForTheEnd = !abort.signal.aborted;
      if (waitingForTheEnd) await new Promise<void>((resolve) => abort.signal.addEventListener("abort", () => resolve(), { once: true }));
    }
  } catch (err) {
    if (abort.signal.aborted) {
      exitCode = 130;
    } else {
      process.stdout.write(`\n${red("demo failed:")} ${err instanceof Error ? err.message : String(err)}\n`);
      exitCode = 1;
    }
  } finally {
    if (abort.signal.aborted && !waitingForTheEnd) exitCode = 130;
    await teardown({ runner, operator, client, namespace: namespaceCreated ? namespace : undefined, started });
    process.off("SIGINT", onSignal);
    process.off("SIGTERM", onSignal);
  }
  return exitCode;
}

async function teardown(what: { runner?: SandboxRunner; operator?: OperatorHandle; client?: KubeClient; namespace?: string; started: Started }): Promise<void> {
  const quietly = async (label: string, work: () => Promise<unknown>) => {
    try {
      await work();
      process.stdout.write(`${dim(`  stopped ${label}`)}\n`);
    } catch (err) {
      process.stdout.write(`${yellow(`  could not stop ${label}: ${err instanceof Error ? err.message : String(err)}`)}\n`);
    }
  };
  process.stdout.write(`\n${dim("cleaning up")}\n`);
  if (what.runner) await quietly("the sandbox runner and its agents", () => what.runner!.stop());
  if (what.operator) await quietly("the operator", () => what.operator!.stop());
  // On a cluster that stays up, the demo's runs go; on one that goes down, they go with it.
  if (what.namespace && what.client && !what.started.controlPlane) {
    await quietly(`namespace ${what.namespace} (deleting in the background)`, async () => {
      try {
        await what.client!.delete(`/api/v1/namespaces/${what.namespace}`);
      } catch (err) {
        if (!isNotFound(err)) throw err;
      }
    });
  }
  const postgres = what.started.postgres;
  if (postgres) await quietly("PostgreSQL", () => scriptOk("postgres.sh", [postgres]));
  if (what.started.controlPlane) await quietly("the control plane", () => scriptOk("control-plane.sh", ["down"]));
}

if (import.meta.main) {
  process.exitCode = await main(process.argv.slice(2)).catch((err: unknown) => {
    process.stderr.write(`demo: ${err instanceof Error ? err.message : String(err)}\n`);
    return 2;
  });
}
