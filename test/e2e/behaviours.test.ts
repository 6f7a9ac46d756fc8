// Every example behaviour on the real machinery: the operator (with its ledger) and the example
// agent as real processes, kwok scheduling and starting the sandbox pods, the local sandbox runner
// playing the kubelet. The runs are the demo's own scenario (harness/scenario.ts), so what the demo shows
// is what is tested here. They run side by side, as in the demo; each test then checks one part.
import { Client } from "pg";
import { pino } from "pino";
import { afterAll, beforeAll, describe, expect, inject, it } from "vitest";
import { Informer } from "../../operator/controller/informer.ts";
import { paths, type Json, type KubeClient } from "../../operator/kube/client.ts";
import { readHistory } from "../../operator/ledger/read.ts";
import { isLive, podView } from "../../operator/watchdog/observe.ts";
import { sandboxPodName } from "../../operator/watchdog/sandbox-pod.ts";
import { driveUntilSettled, type Run } from "../../harness/driver.ts";
import { emailsByRun, judge } from "../../harness/judge.ts";
import { byLabel, parseMetrics, total } from "../../harness/prometheus.ts";
import { APPROVAL_ANSWER, DEMO_RUNS, EXAMPLE_ENV, applyRuns, type Behaviour } from "../../harness/scenario.ts";
import { createDatabase, type TestDatabase } from "../ledger/support.ts";
import { deleteNamespace, kube, listEvents, newNamespace } from "../support/cluster.ts";
import { startOperator, type OperatorProcess } from "../support/operator-process.ts";
import { waitFor } from "../support/wait.ts";
import { said, startRunner, type RunnerHandle } from "./support.ts";

let client: KubeClient;
let ns: string;
let db: TestDatabase;
let operator: OperatorProcess;
let sandboxes: RunnerHandle;
let pods: Informer;
let runs: Run[];
let approved: Set<string>;
let emails: Map<string, number>;

/** The name of a run's attempt's pod (it carries the run's uid). */
const podOf = (name: string, attempt: number) => sandboxPodName(runs.find((r) => r.metadata.name === name)!, attempt);
/** The most live pods any one run had at once, as the pod watch saw them. */
const maxLive = new Map<string, number>();

const nameOf = (behaviour: Behaviour) => DEMO_RUNS.find((r) => r.behaviour === behaviour)?.name as string;
const runOf = (behaviour: Behaviour): any => runs.find((r) => r.metadata.name === nameOf(behaviour));

beforeAll(async () => {
  client = kube();
  ns = await newNamespace(client, "e2e-behaviours");
  db = await createDatabase(inject("databaseUrl"), import.meta.filename);
  operator = await startOperator(ns, [], { DATABASE_URL: db.url });
  sandboxes = await startRunner(ns, { env: { ...EXAMPLE_ENV } });

  // Never two sandboxes: watch every pod of the namespace for the whole scenario.
  pods = new Informer(client, { name: "e2e-pods", path: paths.pods(ns), labelSelector: "watchdog.dev/run", resyncMs: 60_000, silenceMs: 60_000, log: pino({ level: "warn" }) });
  pods.on(() => {
    const live = new Map<string, number>();
    for (const pod of pods.list()) {
      const run = (pod.metadata as { labels: Record<string, string> }).labels["watchdog.dev/run"] as string;
      if (isLive(podView(pod))) live.set(run, (live.get(run) ?? 0) + 1);
    }
    for (const [run, n] of live) maxLive.set(run, Math.max(maxLive.get(run) ?? 0, n));
  });
  pods.start();

  await applyRuns(client, ns);
  const result = await driveUntilSettled({ client, namespace: ns, deadline: Date.now() + 240_000, intervalMs: 500 });
  runs = result.runs;
  approved = result.approved;
  emails = await emailsByRun(sandboxes.outboxDir);
  if (!result.settled) {
    console.error(operator.logs.slice(-60).join("\n"));
    throw new Error(`not every run settled: ${runs.map((r) => `${r.metadata.name}=${r.status?.phase}`).join(", ")}`);
  }
});

afterAll(async () => {
  pods?.stop();
  await sandboxes?.stop();
  await operator?.stop();
  await deleteNamespace(client, ns);
  await db?.drop();
});

const log = (pod: string) => sandboxes.log(ns, pod);
/** Pods of the run whose agent process has ended (none is running any more). */
const ended = (run: string) =>
  sandboxes.events
    .filter((e) => e.type === "exited" && e.pod.startsWith(`${run}-`) && !sandboxes.runner.running().some((p) => p.pod === e.pod))
    .map((e) => e.pod)
    .sort();
const events = async (run: string) => (await listEvents(client, ns)).filter((e) => e.regarding?.name === run);

describe("every example behaviour on the real machinery", () => {
  it("ends each behaviour in the state the watchdog's rules require", () => {
    const verdicts = DEMO_RUNS.map((demo) =>
      judge(demo, runs.find((r) => r.metadata.name === demo.name), { emailsSent: (n) => emails.get(n) ?? 0, approvedAfterRelease: (n) => approved.has(n) }),
    );
    expect(verdicts.filter((v) => !v.ok)).toEqual([]);
  });

  it("runaway: no rule but its budget stops it, at its first report at or over the limit, and its sandbox is killed", async () => {
    const run = runOf("runaway");
    const name = run.metadata.name;
    expect(run.status).toMatchObject({ phase: "NeedsHumanIntervention", reason: "BudgetExhausted", attempt: 1, restarts: 0 });
    expect(run.status.message).toMatch(/^token budget exhausted: \d+ of 100000 tokens spent/);
    // Reports come in steps of 20,000 tokens; the stop is never before the limit (the judge bounds the overshoot).
    const spent = run.status.spent.inputTokens + run.status.spent.outputTokens;
    expect(spent % 20_000 === 0 && spent >= 100_000, `${spent} tokens`).toBe(true);
    expect(run.status.spent).toMatchObject({ throughAttempt: 1 });
    expect(await client.get<any>(paths.pods(ns), { labelSelector: `watchdog.dev/run=${name}` }).then((l) => l.items)).toEqual([]);
    expect(ended(name)).toEqual([podOf(name, 1)]);
    await waitFor("its BudgetWarning and BudgetExhausted Events", async () => {
      const warnings = new Set((await events(name)).filter((e) => e.type === "Warning").map((e) => e.reason));
      return warnings.has("BudgetWarning") && warnings.has("BudgetExhausted");
    });
  });

  it("healthy: completes on its first attempt, every step checkpointed", async () => {
    const run = runOf("healthy");
    expect(run.status).toMatchObject({ phase: "Completed", attempt: 1, restarts: 0, checkpoint: { step: 3 } });
    expect(run.status.toolCalls.map((c: any) => [c.name, c.state, c.attempt])).toEqual([
      ["lookup", "Succeeded", 1],
      ["lookup", "Succeeded", 1],
      ["lookup", "Succeeded", 1],
    ]);
    const pod = await client.get<any>(paths.pod(ns, podOf(run.metadata.name, 1)));
    expect(pod.status.phase).toBe("Succeeded");
    expect(pod.status.containerStatuses[0].state.terminated).toMatchObject({ exitCode: 0 });
  });

  it("hang-in-tool: each hung sandbox is deleted and its process killed; the spent allowance stops the run for a person", async () => {
    const run = runOf("hang-in-tool");
    const name = run.metadata.name;
    expect(run.status).toMatchObject({ phase: "NeedsHumanIntervention", reason: "RecoveryBudgetExhausted", attempt: 2, restarts: 1 });
    expect(run.status.lastFailure).toMatchObject({ reason: "HeartbeatTimeout", attempt: 2, state: "ExecutingTool", tool: { name: "compile", state: "Started" } });
    expect(run.status.transitions).toContainEqual(expect.objectContaining({ phase: "Queued", reason: "HeartbeatTimeout", attempt: 2 }));
    // Both sandboxes were deleted by the operator, and neither process outlived its pod (the
    // runner kills it, unless the agent, fenced by the new attempt, exited first).
    expect(await client.get<any>(paths.pods(ns), { labelSelector: `watchdog.dev/run=${name}` }).then((l) => l.items)).toEqual([]);
    expect(ended(name)).toEqual([podOf(name, 1), podOf(name, 2)]);
    // The agent stopped heartbeating because it made no progress, which is what a hang is.
    expect(log(podOf(name, 2))).toContain("no progress for longer than the progress timeout");
    // Events are recorded after the status that ends the run, so wait for them.
    await waitFor("its Warnings", async () => {
      const warnings = new Set((await events(name)).filter((e) => e.type === "Warning").map((e) => e.reason));
      return warnings.has("HeartbeatTimeout") && warnings.has("RecoveryBudgetExhausted");
    });
  });

  it("crash: the failed pod is replaced at once within the allowance, and the next attempt resumes from the checkpoint", async () => {
    const run = runOf("crash");
    const name = run.metadata.name;
    expect(run.status).toMatchObject({ phase: "Completed", attempt: 2, restarts: 1, lastFailure: { reason: "PodFailed", attempt: 1 } });
    const failed = await client.get<any>(paths.pod(ns, podOf(name, 1)));
    expect(failed.status).toMatchObject({ phase: "Failed" });
    expect(failed.status.containerStatuses[0].state.terminated.exitCode).toBe(1);
    // Step 1 was committed by attempt 1; attempt 2 did steps 2 and 3 only.
    expect(run.status.toolCalls.map((c: any) => c.attempt)).toEqual([1, 2, 2]);
    expect(said(log(podOf(name, 2)), "resuming from the checkpoint")).toEqual([expect.objectContaining({ step: 1 })]);
  });

  it("tool-loop: the same failing call three times stops the run for a person, and its sandbox is killed", async () => {
    const run = runOf("tool-loop");
    const name = run.metadata.name;
    expect(run.status).toMatchObject({ phase: "NeedsHumanIntervention", reason: "ToolLoop", restarts: 0 });
    const calls = run.status.toolCalls.filter((c: any) => c.name === "fetch_url");
    expect(new Set(calls.map((c: any) => c.argsHash)).size).toBe(1);
    expect(calls.filter((c: any) => c.state === "Failed").length).toBeGreaterThanOrEqual(3);
    // The agent may have started one more try before it learned it was stopped; none succeeded.
    expect(calls.slice(0, -1).every((c: any) => c.state === "Failed")).toBe(true);
    expect(["Failed", "Started"]).toContain(calls.at(-1).state);
    expect(await client.get<any>(paths.pods(ns), { labelSelector: `watchdog.dev/run=${name}` }).then((l) => l.items.filter((p: any) => p.status.phase === "Running"))).toEqual([]);
  });

  it("rate-limited: a 429 requeues after its Retry-After without spending a restart, then completes", async () => {
    const run = runOf("rate-limited");
    expect(run.status).toMatchObject({ phase: "Completed", attempt: 2, restarts: 0 });
    const [limited] = run.status.toolCalls;
    expect(limited).toMatchObject({ name: "call_model", attempt: 1, state: "Failed", error: { httpStatus: 429, retryAfterSeconds: Number(EXAMPLE_ENV.EXAMPLE_RETRY_AFTER_SECONDS) } });
    const transitions = run.status.transitions as any[];
    const requeued = transitions.find((t) => t.phase === "Queued" && t.reason === "RateLimited");
    const restarted = transitions.find((t) => t.from === "Queued" && t.attempt === 2);
    // Never early: the next sandbox starts no sooner than Retry-After (recorded in whole seconds).
    expect(Date.parse(restarted.time) - Date.parse(requeued.time)).toBeGreaterThanOrEqual(Number(EXAMPLE_ENV.EXAMPLE_RETRY_AFTER_SECONDS) * 1000 - 1000);
  });

  it("stall: the nudges reach the silent agent, then the run stops for a person", async () => {
    const run = runOf("stall");
    const name = run.metadata.name;
    expect(run.status).toMatchObject({ phase: "NeedsHumanIntervention", reason: "StallUnresolved", stall: { nudges: 2 } });
    expect(said(log(podOf(name, 1)), "nudged; staying silent").map((r) => r.nudge)).toEqual([1, 2]);
    expect((await events(name)).filter((e) => e.reason === "StallDetected")).toHaveLength(2);
  });

  it("await-approval: the pod is released while the run waits, and the answer resumes it in a new sandbox", async () => {
    const run = runOf("await-approval");
    const name = run.metadata.name;
    expect(approved.has(name)).toBe(true);
    expect(run.status).toMatchObject({ phase: "Completed", attempt: 2, restarts: 0, approval: { state: "Approved", answer: APPROVAL_ANSWER } });
    expect(run.status.toolCalls.map((c: any) => [c.attempt, c.name])).toEqual([
      [1, "prepare_release"],
      [2, "deploy"],
    ]);
    expect(ended(name)).toEqual([podOf(name, 1), podOf(name, 2)]);
    expect(said(log(podOf(name, 2)), "approval received")).toEqual([expect.objectContaining({ answer: APPROVAL_ANSWER })]);
  });

  it("side-effect-then-crash: the e-mail is sent exactly once across the crash and the replay", async () => {
    const run = runOf("side-effect-then-crash");
    const name = run.metadata.name;
    expect(run.status).toMatchObject({ phase: "Completed", attempt: 2, restarts: 1, lastFailure: { reason: "PodFailed" } });
    expect(emails.get(name)).toBe(1);
    const [first, second] = run.status.toolCalls;
    expect(first).toMatchObject({ name: "send_email", attempt: 1, state: "Started" });
    expect(second).toMatchObject({ name: "send_email", attempt: 2, state: "Succeeded" });
    expect(second.idempotencyKey).toBe(first.idempotencyKey);
    expect(said(log(podOf(name, 2)), "the outbox already had this e-mail")).toHaveLength(1);
  });

  it("never had two live sandboxes for one run, nor two processes for one pod", () => {
    for (const demo of DEMO_RUNS) expect({ run: demo.name, max: maxLive.get(demo.name) }).toEqual({ run: demo.name, max: 1 });
    const starts = sandboxes.events.filter((e) => e.type === "started").map((e) => `${e.namespace}/${e.pod}`);
    expect(starts.length).toBe(new Set(starts).size);
  });

  it("counts in its metrics exactly what it did", async () => {
    const samples = parseMetrics(await operator.metrics());
    expect(total(samples, "watchdog_hung_sandboxes_killed_total")).toBe(2);
    expect(total(samples, "watchdog_detection_latency_seconds_count")).toBe(2);
    expect(byLabel(samples, "watchdog_requeues_total", "reason")).toEqual({ HeartbeatTimeout: 1, PodFailed: 2, RateLimited: 1 });
    expect(total(samples, "watchdog_nudges_total")).toBe(2);
    expect(byLabel(samples, "watchdog_needs_human_intervention_total", "reason")).toEqual({ BudgetExhausted: 1, RecoveryBudgetExhausted: 1, StallUnresolved: 1, ToolLoop: 1 });
    expect(byLabel(samples, "watchdog_budget_exhausted_total", "limit")).toEqual({ tokens: 1 });
    expect(total(samples, "watchdog_budget_exhausted_total")).toBe(1);
  });

  it("the ledger holds the healthy run's complete history, in order", async () => {
    const run = runOf("healthy");
    const pg = new Client({ connectionString: db.url });
    await pg.connect();
    try {
      const history = await waitFor("the ledger to catch up with the healthy run", async () => {
        const h = await readHistory(pg, { uid: run.metadata.uid });
        return h && h.transitions.at(-1)?.phase === "Completed" && h.toolCalls.every((c) => c.state === "Succeeded") ? h : undefined;
      });
      const t = history.transitions;
      // Complete: it starts where the run started, each transition leaves the phase the one
      // before entered, and it ends where the run ended. Ordered: strictly increasing times.
      expect(t[0]).toMatchObject({ phase: "Queued", reason: "Created", attempt: 1 });
      expect(t[0]?.from).toBeUndefined();
      for (let i = 1; i < t.length; i++) {
        expect(t[i]?.from, `transition ${i}`).toBe(t[i - 1]?.phase);
        expect(Date.parse(t[i]?.time as string)).toBeGreaterThan(Date.parse(t[i - 1]?.time as string));
      }
      expect(t.at(-1)).toMatchObject({ from: expect.any(String), phase: "Completed", reason: "Completed" });
      expect(t.map((x) => x.phase)).toContain("Starting");
      // The same history the run's own status carries (it keeps the latest transitions).
      const fromStatus = (run.status.transitions as Json[]).map((x) => [x.from, x.phase, x.attempt, Date.parse(x.time as string)]);
      expect(t.map((x) => [x.from, x.phase, x.attempt, Date.parse(x.time)]).slice(-fromStatus.length)).toEqual(fromStatus);
      // Every tool call, with its outcome.
      expect(history.toolCalls.map((c) => [c.id, c.name, c.state])).toEqual(run.status.toolCalls.map((c: any) => [c.id, c.name, "Succeeded"]));
      expect(history.gaps).toEqual([]);
    } finally {
      await pg.end();
    }
  });
});
