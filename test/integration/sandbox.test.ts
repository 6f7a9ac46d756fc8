// The sandbox SDK and the example agent against a real API server and a real operator process.
// No kubelet runs, so each test plays it: it waits for the attempt's pod, marks it Running, runs
// the sandbox (in-process, or the example agent as a child process) with that pod's identity, and
// reports the pod Succeeded or Failed according to how the sandbox ended.
import { spawn } from "node:child_process";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { paths, type Json, type KubeClient } from "../../operator/kube/client.ts";
import { createLogger } from "../../operator/log.ts";
import { Outbox } from "../../operator/example-agent/outbox.ts";
import { EXIT_CODES, runAgent, Sandbox, type SandboxOptions, type ToolContext } from "../../operator/sandbox/index.ts";
import { condition, createRun, deleteNamespace, getRun, kube, kubeconfigPath, listPods, newNamespace, runManifest, ofAttempt } from "../support/cluster.ts";
import { startOperator, type OperatorProcess } from "../support/operator-process.ts";
import { setPodPhase } from "../support/sandbox.ts";
import { holds, waitFor } from "../support/wait.ts";

const root = fileURLToPath(new URL("../..", import.meta.url));
const quick = { heartbeatTimeout: "4s", backoff: { initial: "1s", factor: 2, max: "4s" }, rateLimitBackoff: { initial: "1s", factor: 2, max: "4s" } };

let client: KubeClient;
let ns: string;
let operator: OperatorProcess | undefined;
let cleanups: (() => unknown)[] = [];

beforeEach(async (ctx) => {
  client = kube();
  ns = await newNamespace(client, `sdk-${ctx.task.name.toLowerCase().replace(/[^a-z0-9]+/g, "-").slice(0, 36).replace(/-$/, "")}`);
  operator = await startOperator(ns);
});

afterEach(async (ctx) => {
  for (const cleanup of cleanups.reverse()) await cleanup();
  cleanups = [];
  await operator?.stop();
  if (ctx.task.result?.state === "fail") console.error(operator?.logs.slice(-40).join("\n"));
  await deleteNamespace(client, ns);
});

// --- playing the kubelet --------------------------------------------------------------------

async function podOf(run: string, attempt: number, timeoutMs = 30_000): Promise<any> {
  return waitFor(`pod ${run}-${attempt}`, async () => (await listPods(client, ns, run)).find(ofAttempt(attempt)), { timeoutMs });
}

/** Waits for the attempt's pod and marks it Running, as a kubelet would. */
async function running(run: string, attempt: number, timeoutMs?: number): Promise<any> {
  const pod = await podOf(run, attempt, timeoutMs);
  await setPodPhase(client, ns, pod.metadata.name, "Running");
  return pod;
}

/** Reports how the sandbox process ended, as a kubelet would. */
async function exited(run: string, attempt: number, code: number): Promise<void> {
  await setPodPhase(client, ns, (await podOf(run, attempt)).metadata.name, code === 0 ? "Succeeded" : "Failed", code);
}

async function phaseOf(run: string, phase: string, timeoutMs = 30_000): Promise<any> {
  return waitFor(`${run} in phase ${phase}`, async () => {
    const r = await getRun(client, ns, run);
    return r.status?.phase === phase ? r : undefined;
  }, { timeoutMs });
}

/** The pod's env, as the operator wrote it: the sandbox reads its identity from there. */
function podEnv(pod: any): Record<string, string> {
  return Object.fromEntries(pod.spec.containers[0].env.map((e: any) => [e.name, e.value]));
}

// --- running sandboxes ----------------------------------------------------------------------

interface Counted {
  sandbox: Sandbox;
  /** Status PATCHes this sandbox's client sent, counted at the HTTP layer. */
  patches: () => number;
}

/**
 * The SDK in-process, for the pod of `attempt`, with its own client so its writes can be counted.
 * `slowWritesMs` delays each status write before it is sent, like a slow link to the API server.
 */
async function sandboxFor(pod: any, options: Partial<SandboxOptions> = {}, slowWritesMs = 0): Promise<Counted> {
  const own = kube();
  if (slowWritesMs > 0) {
    const send = own.mergePatch.bind(own);
    own.mergePatch = async (...args: Parameters<KubeClient["mergePatch"]>) => {
      await new Promise((r) => setTimeout(r, slowWritesMs));
      return send(...args);
    };
  }
  let patches = 0;
  own.onRequest((method, code) => {
    if (method === "PATCH" && code >= 200 && code < 300) patches++;
  });
  const sandbox = await Sandbox.start({ client: own, env: podEnv(pod), logger: createLogger("silent"), exit: () => {}, ...options });
  cleanups.push(() => sandbox.abandon());
  return { sandbox, patches: () => patches };
}

interface Child {
  logs: string[];
  code: Promise<number>;
  /** Log records (pino JSON) with the given message. */
  said(msg: string): Json[];
}

/** The example agent as a child process, with the pod's identity and the test kubeconfig. */
function example(pod: any, behaviour: string, env: Record<string, string> = {}): Child {
  const child = spawn(process.execPath, [`${root}operator/example-agent/main.ts`], {
    env: {
      ...process.env,
      ...podEnv(pod),
      KUBECONFIG: kubeconfigPath(),
      EXAMPLE_BEHAVIOUR: behaviour,
      EXAMPLE_STEP_DELAY_MS: "100",
      EXAMPLE_LOOP_DELAY_MS: "100",
      ...env,
    },
    stdio: ["ignore", "pipe", "pipe"],
  });
  const logs: string[] = [];
  const collect = (chunk: Buffer) => logs.push(...chunk.toString().split("\n").filter(Boolean));
  child.stdout.on("data", collect);
  child.stderr.on("data", collect);
  const code = new Promise<number>((resolve) => child.once("exit", (c, signal) => resolve(c ?? (signal ? 128 : 1))));
  cleanups.push(() => {
    if (child.exitCode === null && child.signalCode === null) child.kill("SIGKILL");
  });
  const records = () =>
    logs.flatMap((line) => {
      try {
        return [JSON.parse(line) as Json];
      } catch {
        return [];
      }
    });
  return { logs, code, said: (msg) => records().filter((r) => r.msg === msg) };
}

/** Runs the example agent for one attempt and plays the kubelet around it; returns its exit code. */
async function attemptOf(run: string, attempt: number, behaviour: string, env?: Record<string, string>): Promise<{ code: number; child: Child }> {
  const pod = await running(run, attempt);
  const child = example(pod, behaviour, env);
  const code = await withDeadline(child.code, 60_000, () => `example agent (${behaviour}, attempt ${attempt}) did not exit:\n${child.logs.slice(-20).join("\n")}`);
  await exited(run, attempt, code).catch(() => {}); // the operator may have deleted the pod already
  return { code, child };
}

async function withDeadline<T>(p: Promise<T>, ms: number, what: () => string): Promise<T> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const deadline = new Promise<never>((_, reject) => (timer = setTimeout(() => reject(new Error(what())), ms)));
  try {
    return await Promise.race([p, deadline]);
  } finally {
    clearTimeout(timer);
  }
}

async function annotate(run: string, annotations: Record<string, string>): Promise<void> {
  await client.mergePatch(paths.run(ns, run), { metadata: { annotations } });
}

/** Approves the run's pending request, naming it (watchdog.dev/approval-id) as the contract requires. */
async function approveRequest(run: string, answer: string): Promise<void> {
  const pending = await waitFor(`a recorded request of ${run}`, async () => {
    const r = await getRun(client, ns, run);
    return r.status?.approval?.state === "Pending" && r.status.approval.id ? r.status.approval.id : undefined;
  });
  await annotate(run, { "watchdog.dev/approve": answer, "watchdog.dev/approval-id": pending });
}

/** Keeps an in-process agent busy (showing progress) for `ms`: the agent's work, not a wait. */
async function work(sandbox: Sandbox, ms: number): Promise<void> {
  for (const until = Date.now() + ms; Date.now() < until; ) {
    sandbox.progress();
    await new Promise((r) => setTimeout(r, 50));
  }
}

// --- the tests ------------------------------------------------------------------------------

describe("the sandbox SDK against a real API server and operator", () => {
  it("heartbeats move the phase, and heartbeat-only writes are throttled to one per timeout/4", async () => {
    await createRun(client, ns, runManifest("beat", quick));
    const pod = await running("beat", 1);
    await phaseOf("beat", "Starting");
    const { sandbox, patches } = await sandboxFor(pod);
    await phaseOf("beat", "Planning");
    expect(sandbox.stats()).toMatchObject({ heartbeatTimeoutMs: 4000, heartbeatIntervalMs: 1000 });

    const before = sandbox.stats();
    await work(sandbox, 3500);
    const after = sandbox.stats();
    const beats = after.heartbeatWrites - before.heartbeatWrites;
    expect(beats).toBeGreaterThanOrEqual(2);
    expect(beats).toBeLessThanOrEqual(4); // 3.5 s at one per second
    expect(after.writes).toBe(patches()); // the counter is what went over the wire
    const hb = (await getRun(client, ns, "beat")).status.heartbeat;
    expect(hb).toMatchObject({ attempt: 1, state: "Planning" });
    expect(Date.now() - Date.parse(hb.time)).toBeLessThan(2500);

    // Activity is not throttled: it is in status when say() resolves.
    await sandbox.say("All done.");
    expect((await getRun(client, ns, "beat")).status.heartbeat.activity).toMatchObject({ kind: "text" });
    await sandbox.close();
    await exited("beat", 1, 0);
    const done = await phaseOf("beat", "Completed");
    expect(condition(done, "Succeeded")).toMatchObject({ status: "True" });
  });

  it("records a tool call as Started, acknowledged, before the tool runs, then Succeeded", async () => {
    await createRun(client, ns, runManifest("tool", { ...quick, heartbeatTimeout: "30s" }));
    const pod = await running("tool", 1);
    const { sandbox } = await sandboxFor(pod, {}, 300); // on a slow link, so that a write not waited for shows
    let seenWhileRunning: any;
    const outcome = await sandbox.tool("search", { q: "weather" }, async (args: { q: string }, ctx: ToolContext) => {
      // Read at once from another client: the record is on the API server before the tool does
      // anything. Then the operator sees the sandbox executing a tool.
      const now = await getRun(client, ns, "tool");
      seenWhileRunning = now.status.toolCalls?.find((c: any) => c.idempotencyKey === ctx.idempotencyKey);
      await phaseOf("tool", "ExecutingTool");
      return { forecast: `sunny for ${args.q}` };
    }, { idempotent: true });
    expect(seenWhileRunning).toMatchObject({ name: "search", state: "Started", attempt: 1, idempotent: true });
    expect(outcome).toMatchObject({ ok: true, replayed: false, value: { forecast: "sunny for weather" } });
    const run = await phaseOf("tool", "Planning");
    expect(run.status.toolCalls).toEqual([
      expect.objectContaining({ id: seenWhileRunning.id, state: "Succeeded", result: '{"forecast":"sunny for weather"}', argsHash: seenWhileRunning.argsHash }),
    ]);

    // Invalid arguments: a readable failure, recorded, and nothing run.
    let ran = false;
    const { z } = await import("zod");
    const invalid = await sandbox.tool("search", { q: 42 } as unknown as { q: string }, () => (ran = true), { schema: z.strictObject({ q: z.string() }) });
    expect(ran).toBe(false);
    expect(invalid).toMatchObject({ ok: false, error: { kind: "validation", message: "invalid arguments for search: q: Invalid input: expected string, received number" } });
    const after = await getRun(client, ns, "tool");
    expect(after.status.toolCalls.at(-1)).toMatchObject({ state: "Failed", error: { message: "invalid arguments for search: q: Invalid input: expected string, received number" } });
  });

  it("on a new attempt returns the saved result of a call that succeeded, without running it", async () => {
    await createRun(client, ns, runManifest("replay", { ...quick, heartbeatTimeout: "30s" }));
    const one = await sandboxFor(await running("replay", 1));
    let runs = 0;
    const lookup = () => ({ price: 42, n: ++runs });
    const first = await one.sandbox.tool("lookup_price", { sku: "A-1" }, lookup, { idempotent: true });
    expect(first).toMatchObject({ ok: true, value: { price: 42, n: 1 } });
    one.sandbox.abandon(); // crash
    await exited("replay", 1, 1);

    const two = await sandboxFor(await running("replay", 2));
    const second = await two.sandbox.tool("lookup_price", { sku: "A-1" }, lookup, { idempotent: true });
    expect(runs).toBe(1);
    expect(second).toMatchObject({ ok: true, replayed: true, value: { price: 42, n: 1 }, idempotencyKey: first.idempotencyKey });
    // A different call in the same place is not a replay.
    const other = await two.sandbox.tool("lookup_price", { sku: "B-2" }, lookup, { idempotent: true });
    expect(other).toMatchObject({ ok: true, replayed: false, value: { n: 2 } });
    await two.sandbox.close();
    await exited("replay", 2, 0);
    await phaseOf("replay", "Completed");
  });

  it("side-effect-then-crash sends the e-mail exactly once across the crash and the replay", async () => {
    const outboxDir = await mkdtemp(join(tmpdir(), "outbox-"));
    cleanups.push(() => rm(outboxDir, { recursive: true, force: true }));
    await createRun(client, ns, runManifest("email", { ...quick, heartbeatTimeout: "30s" }));

    const one = await attemptOf("email", 1, "side-effect-then-crash", { EXAMPLE_OUTBOX_DIR: outboxDir });
    expect(one.code).toBe(1);
    expect(one.child.said("e-mail sent")).toHaveLength(1);
    const crashed = await getRun(client, ns, "email");
    expect(crashed.status.toolCalls).toEqual([expect.objectContaining({ name: "send_email", state: "Started", attempt: 1, idempotent: true })]);

    const two = await attemptOf("email", 2, "side-effect-then-crash", { EXAMPLE_OUTBOX_DIR: outboxDir });
    expect(two.code).toBe(0);
    expect(two.child.said("the outbox already had this e-mail")).toHaveLength(1);
    const done = await phaseOf("email", "Completed");

    const sent = await new Outbox(outboxDir).sent();
    expect(sent).toHaveLength(1);
    expect(sent[0]).toMatchObject({ to: "ops@example.com", subject: "Report for email" });
    const [started, succeeded] = done.status.toolCalls;
    expect(started).toMatchObject({ attempt: 1, state: "Started" });
    expect(succeeded).toMatchObject({ attempt: 2, state: "Succeeded", idempotencyKey: started.idempotencyKey });
    expect(JSON.parse(succeeded.result)).toMatchObject({ messageId: sent[0]!.messageId, duplicate: true });
  });

  it("does not run a non-idempotent call left Started; the run needs a person (UnconfirmedSideEffect)", async () => {
    await createRun(client, ns, runManifest("charge", { ...quick, heartbeatTimeout: "30s" }));
    const one = await sandboxFor(await running("charge", 1));
    let charges = 0;
    const charge = () => {
      charges++;
      return new Promise<never>(() => {}); // the process dies while the payment is in flight
    };
    void one.sandbox.tool("charge_card", { cents: 1999 }, charge, { idempotent: false }).catch(() => {});
    await waitFor("the charge to start", () => charges === 1);
    one.sandbox.abandon();
    await exited("charge", 1, 137);

    const stopped = await phaseOf("charge", "NeedsHumanIntervention");
    expect(condition(stopped, "NeedsHumanIntervention")).toMatchObject({ status: "True", reason: "UnconfirmedSideEffect" });
    await holds("no second sandbox", async () => (await listPods(client, ns, "charge")).every(ofAttempt(1)), 2000);

    // A person looks, then resumes: the new attempt is told the outcome is unknown, and still does
    // not charge again under the same key.
    await annotate("charge", { "watchdog.dev/resume": "checked-1" });
    const two = await sandboxFor(await running("charge", 2));
    const outcome = await two.sandbox.tool("charge_card", { cents: 1999 }, charge, { idempotent: false });
    expect(charges).toBe(1);
    expect(outcome).toMatchObject({ ok: false, error: { kind: "unconfirmed" } });
  });

  it("never reruns a non-idempotent call left Started, even after a person resumes the run", async () => {
    await createRun(client, ns, runManifest("refuse", { ...quick, heartbeatTimeout: "30s" }));
    const one = await sandboxFor(await running("refuse", 1));
    let transfers = 0;
    const transfer = () => {
      transfers++;
      return new Promise<never>(() => {});
    };
    void one.sandbox.tool("transfer", { to: "acct-9", cents: 500 }, transfer, { idempotent: false }).catch(() => {});
    await waitFor("the transfer to start", () => transfers === 1);
    // a later call finishing does not make the earlier one any less unconfirmed
    await one.sandbox.tool("read_balance", { account: "acct-9" }, () => ({ cents: 0 }), { idempotent: true });
    one.sandbox.abandon();
    await exited("refuse", 1, 1);

    // The operator stops for a person instead of replaying the transfer.
    const stopped = await phaseOf("refuse", "NeedsHumanIntervention");
    expect(condition(stopped, "NeedsHumanIntervention")).toMatchObject({ status: "True", reason: "UnconfirmedSideEffect" });

    // The person checks the bank and resumes; the next attempt still never sends it again.
    await client.mergePatch(paths.run(ns, "refuse"), { metadata: { annotations: { "watchdog.dev/resume": "checked-by-hand" } } });
    const pod = await running("refuse", 2);
    let outcome: unknown;
    const code = await runAgent(
      async (sandbox) => {
        outcome = await sandbox.tool("transfer", { to: "acct-9", cents: 500 }, transfer, { idempotent: false });
      },
      { env: podEnv(pod), client: kube(), logger: createLogger("silent"), exit: () => {} },
    );
    expect(outcome).toMatchObject({ ok: false, error: { kind: "unconfirmed" } });
    expect(code).toBe(EXIT_CODES.completed);
    expect(transfers).toBe(1);
  });

  it("hands a nudge to the agent's callback and transcript, once", async () => {
    await createRun(client, ns, runManifest("nudge", { ...quick, heartbeatTimeout: "30s", stall: { timeout: "1s", maxNudges: 3 } }));
    const nudges: string[] = [];
    const { sandbox } = await sandboxFor(await running("nudge", 1), { onNudge: (n) => nudges.push(n.message) });
    await sandbox.say("Here is the report you asked for.");
    await waitFor("a nudge", () => nudges.length > 0, { timeoutMs: 15_000 });
    await sandbox.noReply(); // the agent answers: the stall is over
    expect(nudges).toEqual(["[System] Reply chain broken (stall detected). Resume your task or reply NO_REPLY."]);
    expect(sandbox.transcript.filter((e) => e.kind === "nudge").map((e) => e.text)).toEqual(nudges);
    // The watch keeps showing the same nudge (every heartbeat is an event): it is not handed over again.
    await holds("one nudge only", () => nudges.length === 1, 2500);
    const run = await getRun(client, ns, "nudge");
    expect(run.status.stall).toMatchObject({ state: "Disarmed", nudges: 0 });
  });

  it("a new attempt resumes from the checkpoint after a crash", async () => {
    await createRun(client, ns, runManifest("resume", { ...quick, heartbeatTimeout: "30s" }));
    const one = await attemptOf("resume", 1, "crash", { EXAMPLE_STEPS: "3" });
    expect(one.code).toBe(1);
    expect((await getRun(client, ns, "resume")).status.checkpoint).toMatchObject({ step: 1, data: { notes: ["fact 1 about the crash"] } });

    const two = await attemptOf("resume", 2, "crash", { EXAMPLE_STEPS: "3" });
    expect(two.code).toBe(0);
    expect(two.child.said("resuming from the checkpoint")).toEqual([expect.objectContaining({ step: 1 })]);
    expect(two.child.said("step committed").map((r) => r.step)).toEqual([2, 3]);
    const done = await phaseOf("resume", "Completed");
    expect(done.status.checkpoint).toMatchObject({ step: 3, data: { notes: ["fact 1 about the crash", "fact 2 about the crash", "fact 3 about the crash"] } });
    expect(done.status.toolCalls.map((c: any) => [c.attempt, c.name, c.state])).toEqual([
      [1, "lookup", "Succeeded"],
      [2, "lookup", "Succeeded"],
      [2, "lookup", "Succeeded"],
    ]);
  });

  it("shows the next attempt why the last one ended", async () => {
    await createRun(client, ns, runManifest("why", { ...quick, heartbeatTimeout: "30s" }));
    const one = await sandboxFor(await running("why", 1));
    const fetched = await one.sandbox.tool("fetch", { url: "https://example.com" }, () => "<html>", { idempotent: true });
    one.sandbox.abandon();
    await exited("why", 1, 2);
    const two = await sandboxFor(await running("why", 2));
    expect(two.sandbox.lastFailure).toMatchObject({
      reason: "PodFailed",
      attempt: 1,
      tool: { name: "fetch", state: "Succeeded", argsHash: one.sandbox.calls.find((c) => c.idempotencyKey === fetched.idempotencyKey)!.argsHash },
    });
    expect(two.sandbox.lastFailure!.message).toContain("exit code 2");
  });

  it("fences itself when the attempt moves on: the agent is aborted and nothing more is written", async () => {
    await createRun(client, ns, runManifest("fence", { ...quick, heartbeatTimeout: "30s", backoff: { initial: "30s" } }));
    const fenced: string[] = [];
    const { sandbox, patches } = await sandboxFor(await running("fence", 1), { onFenced: (reason) => fenced.push(reason) });
    await sandbox.say("working");
    // The kubelet reports the pod dead, but the process lives on: a zombie of attempt 1.
    await exited("fence", 1, 1);
    const busy = work(sandbox, 4000);
    await waitFor("the sandbox to fence itself", () => fenced.length > 0, { timeoutMs: 15_000 });
    expect(fenced).toEqual(["attempt 1 was superseded by attempt 2"]);
    expect(sandbox.signal.aborted).toBe(true);
    // A write already on its way when the fence came may still land; nothing may start after it.
    await waitFor("writes in flight to land", async () => {
      const before = patches();
      await new Promise((r) => setTimeout(r, 300));
      return patches() === before;
    });
    const writes = patches();
    const heartbeat = (await getRun(client, ns, "fence")).status.heartbeat;
    await busy; // keeps "making progress" for seconds after being fenced
    expect(patches()).toBe(writes);
    expect((await getRun(client, ns, "fence")).status.heartbeat).toEqual(heartbeat);
    await expect(sandbox.tool("anything", {}, () => 1)).rejects.toThrow("sandbox fenced: attempt 1 was superseded by attempt 2");
  });

  it("hang-in-tool: heartbeats stop without progress, the watchdog replaces the sandbox, and the old one fences itself", async () => {
    // The timeout leaves a loaded machine time to start the process; detection takes about two
    // timeouts: one without progress, then one without heartbeats.
    await createRun(client, ns, runManifest("hang", { ...quick, heartbeatTimeout: "6s", backoff: { initial: "30s" } }));
    const pod = await running("hang", 1);
    const child = example(pod, "hang-in-tool");
    await phaseOf("hang", "ExecutingTool");
    const queued = await phaseOf("hang", "Queued", 30_000);
    expect(queued.status.lastFailure).toMatchObject({ reason: "HeartbeatTimeout", attempt: 1, state: "ExecutingTool", tool: { name: "compile", state: "Started" } });
    const code = await withDeadline(child.code, 30_000, () => `the hung agent did not exit:\n${child.logs.slice(-10).join("\n")}`);
    expect(code).toBe(EXIT_CODES.fenced);
    expect(child.logs.join("\n")).toContain("no progress for longer than the progress timeout");
  });

  it("approval: the pod is released while waiting, and approving resumes a new attempt with the answer", async () => {
    await createRun(client, ns, runManifest("approve", { ...quick, heartbeatTimeout: "30s", releaseAwaitingAfter: "2s" }));
    const pod = await running("approve", 1);
    const first = example(pod, "await-approval");
    const released = await waitFor("the sandbox to be released", async () => {
      const r = await getRun(client, ns, "approve");
      return r.status?.reason === "SandboxReleased" ? r : undefined;
    }, { timeoutMs: 30_000 });
    expect(released.status).toMatchObject({ phase: "AwaitingReply", attempt: 2, approval: { state: "Pending" } });
    expect(released.status.checkpoint.data["watchdog.dev/approval-request"].question).toBe("Deploy v2.0.0 to production?");
    expect(await withDeadline(first.code, 30_000, () => first.logs.slice(-10).join("\n"))).toBe(EXIT_CODES.fenced);
    // The operator writes the status first and deletes the pod after it.
    await waitFor("the released pod to be gone", async () => (await listPods(client, ns, "approve")).length === 0);
    await holds("no sandbox while a person thinks", async () => (await listPods(client, ns, "approve")).length === 0, 1500);

    await approveRequest("approve", "ship it");
    const two = await attemptOf("approve", 2, "await-approval");
    expect(two.code).toBe(0);
    expect(two.child.said("approval received")).toEqual([expect.objectContaining({ answer: "ship it" })]);
    expect(two.child.said("awaiting approval")).toHaveLength(0); // it did not ask again
    const done = await phaseOf("approve", "Completed");
    expect(done.status.approval).toMatchObject({ state: "Approved", answer: "ship it" });
    expect(done.status.toolCalls.map((c: any) => [c.attempt, c.name])).toEqual([
      [1, "prepare_release"],
      [2, "deploy"],
    ]);
  });

  it("approval: an answer reaches the sandbox that is still waiting", async () => {
    await createRun(client, ns, runManifest("wait", { ...quick, heartbeatTimeout: "4s" }));
    const { sandbox } = await sandboxFor(await running("wait", 1));
    const answer = sandbox.awaitApproval("Delete the old index?", { step: 1, data: { index: "v1" } });
    await phaseOf("wait", "AwaitingReply");
    // Longer than the heartbeat timeout: waiting for a person is not hanging.
    await holds("the run to stay AwaitingReply", async () => (await getRun(client, ns, "wait")).status.phase === "AwaitingReply", 5000);
    await approveRequest("wait", "yes, delete it");
    await expect(answer).resolves.toBe("yes, delete it");
    await phaseOf("wait", "Planning");
  });

  it("rate-limited: a 429 with Retry-After requeues without spending a restart, and a later attempt completes", async () => {
    await createRun(client, ns, runManifest("limited", { ...quick, heartbeatTimeout: "30s", maxRestarts: 0 }));
    const one = await attemptOf("limited", 1, "rate-limited", { EXAMPLE_RETRY_AFTER_SECONDS: "2" });
    expect(one.code).toBe(EXIT_CODES.rateLimited);
    const queued = await phaseOf("limited", "Queued");
    expect(queued.status).toMatchObject({ restarts: 0, lastFailure: { reason: "RateLimited" } });
    expect(queued.status.toolCalls.at(-1)).toMatchObject({ name: "call_model", state: "Failed", error: { httpStatus: 429, retryAfterSeconds: 2 } });
    const two = await attemptOf("limited", 2, "rate-limited");
    expect(two.code).toBe(0);
    await phaseOf("limited", "Completed");
  });

  it("tool-loop: the watchdog stops the loop and the agent fences itself", async () => {
    await createRun(client, ns, runManifest("loop", { ...quick, heartbeatTimeout: "30s" }));
    const { code, child } = await attemptOf("loop", 1, "tool-loop");
    expect(code).toBe(EXIT_CODES.fenced);
    const run = await phaseOf("loop", "NeedsHumanIntervention");
    expect(condition(run, "NeedsHumanIntervention")).toMatchObject({ reason: "ToolLoop" });
    expect(child.said("fetch failed; trying the same again").length).toBeGreaterThanOrEqual(3);
  });

  it("stall: the nudges reach a silent agent, the run needs a person, and the agent fences itself", async () => {
    await createRun(client, ns, runManifest("stall", { ...quick, heartbeatTimeout: "30s", stall: { timeout: "1s", maxNudges: 2 } }));
    const { code, child } = await attemptOf("stall", 1, "stall");
    expect(code).toBe(EXIT_CODES.fenced);
    const run = await phaseOf("stall", "NeedsHumanIntervention");
    expect(condition(run, "NeedsHumanIntervention")).toMatchObject({ reason: "StallUnresolved" });
    expect(child.said("nudged; staying silent").map((r) => r.nudge)).toEqual([1, 2]);
  });

  it("healthy: the example agent completes with its checkpoints and tool calls", async () => {
    await createRun(client, ns, runManifest("healthy", { ...quick, heartbeatTimeout: "30s" }, { goal: "healthy" }));
    const { code, child } = await attemptOf("healthy", 1, "", { EXAMPLE_BEHAVIOUR: "", EXAMPLE_STEPS: "2" });
    expect(code).toBe(0);
    expect(child.said("example agent starting")).toEqual([expect.objectContaining({ behaviour: "healthy" })]); // from spec.goal
    const done = await phaseOf("healthy", "Completed");
    expect(done.status.checkpoint).toMatchObject({ step: 2 });
    expect(done.status.toolCalls.map((c: any) => c.state)).toEqual(["Succeeded", "Succeeded"]);
    expect(done.status.heartbeat.activity).toMatchObject({ kind: "text" });
  });
});
