// The watchdog's behaviours against a real API server: each test applies an AgentRun, plays the
// sandbox (merge patches on the status subresource) and the kubelet (pod status), and watches a
// real operator process act.
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { paths, type KubeClient } from "../../operator/kube/client.ts";
import { condition, createRun, deleteNamespace, getRun, kube, listEvents, listPods, newNamespace, runManifest, ofAttempt } from "../support/cluster.ts";
import { startOperator, type OperatorProcess } from "../support/operator-process.ts";
import { failedCall, heartbeat, setPodPhase, writeToolCalls } from "../support/sandbox.ts";
import { holds, waitFor } from "../support/wait.ts";

const quick = { heartbeatTimeout: "4s", backoff: { initial: "2s", factor: 2, max: "10s" }, rateLimitBackoff: { initial: "3s", factor: 2, max: "10s" } };

let client: KubeClient;
let ns: string;
let operator: OperatorProcess | undefined;

beforeEach(async (ctx) => {
  client = kube();
  ns = await newNamespace(client, ctx.task.name.toLowerCase().replace(/[^a-z0-9]+/g, "-").slice(0, 40).replace(/-$/, ""));
  operator = await startOperator(ns);
});

afterEach(async (ctx) => {
  await operator?.stop();
  if (ctx.task.result?.state === "fail") console.error(operator?.logs.slice(-40).join("\n"));
  await deleteNamespace(client, ns);
});

async function podOf(run: string, attempt: number): Promise<any> {
  return waitFor(`pod ${run}-${attempt}`, async () => (await listPods(client, ns, run)).find(ofAttempt(attempt)));
}

async function running(run: string, attempt = 1): Promise<any> {
  const pod = await podOf(run, attempt);
  await setPodPhase(client, ns, pod.metadata.name, "Running");
  return pod;
}

async function phaseOf(run: string, phase: string, timeoutMs = 30_000): Promise<any> {
  return waitFor(`${run} in phase ${phase}`, async () => {
    const r = await getRun(client, ns, run);
    return r.status?.phase === phase ? r : undefined;
  }, { timeoutMs });
}

describe("the watchdog against a real API server", () => {
  it("starts a burst of runs with the pods first, and still writes each run's attempt annotation and node", async () => {
    const names = Array.from({ length: 40 }, (_, i) => `burst-${i}`);
    await Promise.all(names.map((name) => createRun(client, ns, runManifest(name, { heartbeatTimeout: "5m" }))));
    // Under the burst the annotation may trail its pod by up to 5 s; it is never left out.
    await waitFor(
      "every run's attempt annotation",
      async () => {
        const list = await client.get<{ items: any[] }>(paths.runs(ns));
        return list.items.length === names.length && list.items.every((r) => r.metadata.annotations?.["watchdog.dev/attempt"] === "1" && r.status?.phase === "Starting");
      },
      { timeoutMs: 30_000, intervalMs: 250 },
    );
    // The node rides on the next write the run needs anyway: here its first heartbeat's phase.
    const pod = await running("burst-0");
    await heartbeat(client, ns, "burst-0", 1, "Planning");
    const planning = await phaseOf("burst-0", "Planning");
    const bound = await client.get<any>(paths.pod(ns, pod.metadata.name));
    expect(planning.status.nodeName).toBe(bound.spec.nodeName);
    const events = await listEvents(client, ns);
    expect(events.filter((e) => e.reason === "SandboxCreated")).toEqual([]);
  });

  it("completes a healthy run when its pod exits 0", async () => {
    await createRun(client, ns, runManifest("healthy", quick));
    const pod = await running("healthy");
    expect(pod.metadata.labels).toMatchObject({ "watchdog.dev/run": "healthy", "watchdog.dev/attempt": "1" });
    const env = pod.spec.containers[0].env.map((e: any) => `${e.name}=${e.value}`);
    expect(env).toEqual(expect.arrayContaining(["WATCHDOG_RUN_NAME=healthy", `WATCHDOG_RUN_NAMESPACE=${ns}`, "WATCHDOG_ATTEMPT=1"]));
    expect(pod.metadata.ownerReferences[0]).toMatchObject({ kind: "AgentRun", name: "healthy", controller: true });
    await heartbeat(client, ns, "healthy", 1, "ExecutingTool");
    await phaseOf("healthy", "ExecutingTool");
    await setPodPhase(client, ns, pod.metadata.name, "Succeeded", 0);
    const done = await phaseOf("healthy", "Completed");
    expect(condition(done, "Succeeded")).toMatchObject({ status: "True" });
    expect(done.status.completionTime).toBeDefined();
  });

  it("deletes a hung pod after its deadline and not before, then backs off", async () => {
    await createRun(client, ns, runManifest("hung", quick));
    await running("hung");
    for (let i = 0; i < 3; i++) {
      await heartbeat(client, ns, "hung", 1, "ExecutingTool");
      await new Promise((r) => setTimeout(r, 500)); // the sandbox's heartbeat interval
    }
    const last = await heartbeat(client, ns, "hung", 1, "ExecutingTool");
    const deadline = Date.parse((last.status as any).heartbeat.time) + 4000;
    // not before the deadline (minus a second for clock granularity between processes)
    await holds("pod hung-1 to live until its deadline", async () => (await listPods(client, ns, "hung")).some(ofAttempt(1)), deadline - Date.now() - 1000);
    await waitFor("pod hung-1 deleted", async () => !(await listPods(client, ns, "hung")).some(ofAttempt(1)), { timeoutMs: 15_000 });
    const deletedAt = Date.now();
    expect(deletedAt).toBeGreaterThanOrEqual(deadline - 1000);

    // The status is the commit point and the pod goes right after it; the annotations mirror the
    // status a write later.
    const run = await waitFor("annotations of attempt 2", async () => {
      const r = await getRun(client, ns, "hung");
      return r.metadata.annotations?.["watchdog.dev/attempt"] === "2" ? r : undefined;
    });
    const retryAfter = Date.parse(run.metadata.annotations["watchdog.dev/retry-after"]);
    expect(retryAfter).toBeGreaterThan(deadline);
    expect(run.metadata.annotations["watchdog.dev/backoff-reason"]).toBe("HeartbeatTimeout");
    expect(condition(run, "BackingOff")).toMatchObject({ status: "True", reason: "HeartbeatTimeout" });
    expect(run.status).toMatchObject({ phase: "Queued", attempt: 2, restarts: 1 });
    await waitFor("a HeartbeatTimeout Warning", async () =>
      (await listEvents(client, ns)).some((e) => e.type === "Warning" && e.reason === "HeartbeatTimeout" && e.regarding.name === "hung"),
    );

    const next = await podOf("hung", 2);
    expect(Date.parse(next.metadata.creationTimestamp)).toBeGreaterThanOrEqual(Math.floor(retryAfter / 1000) * 1000);
    await phaseOf("hung", "Starting");
  });

  it("replaces a crashed pod without waiting for the heartbeat timeout", async () => {
    await createRun(client, ns, runManifest("crash", { ...quick, heartbeatTimeout: "5m", backoff: { initial: "1s" } }));
    const pod = await running("crash");
    await heartbeat(client, ns, "crash", 1, "Planning");
    const crashedAt = Date.now();
    await setPodPhase(client, ns, pod.metadata.name, "Failed", 137);
    const queued = await phaseOf("crash", "Queued");
    expect(queued.status.lastFailure).toMatchObject({ reason: "PodFailed" });
    expect(queued.status.lastFailure.message).toContain("exit code 137");
    await podOf("crash", 2);
    expect(Date.now() - crashedAt).toBeLessThan(60_000);
    const run = await phaseOf("crash", "Starting");
    expect(run.status.restarts).toBe(1);
  });

  it("needs a person when the recovery allowance is spent, and leaves no pod", async () => {
    await createRun(client, ns, runManifest("budget", { ...quick, maxRestarts: 1, backoff: { initial: "1s" } }));
    const first = await running("budget");
    await setPodPhase(client, ns, first.metadata.name, "Failed", 1);
    const second = await running("budget", 2);
    await setPodPhase(client, ns, second.metadata.name, "Failed", 1);
    const run = await phaseOf("budget", "NeedsHumanIntervention");
    expect(condition(run, "NeedsHumanIntervention")).toMatchObject({ status: "True", reason: "RecoveryBudgetExhausted" });
    await holds("no live pod", async () => (await listPods(client, ns, "budget")).every((p) => ["Failed", "Succeeded"].includes(p.status?.phase)), 3000);
  });

  it("stops a tool loop: three identical failed calls", async () => {
    await createRun(client, ns, runManifest("loop", { ...quick, heartbeatTimeout: "5m" }));
    await running("loop");
    await heartbeat(client, ns, "loop", 1, "ExecutingTool");
    await writeToolCalls(client, ns, "loop", [1, 2, 3].map((i) => failedCall(`c${i}`, 1, "fetch_url", "abc123")));
    const run = await phaseOf("loop", "NeedsHumanIntervention");
    expect(condition(run, "NeedsHumanIntervention")).toMatchObject({ status: "True", reason: "ToolLoop" });
    await waitFor("pod loop-1 deleted", async () => (await listPods(client, ns, "loop")).length === 0);
    await waitFor("a ToolLoop Warning", async () => (await listEvents(client, ns)).some((e) => e.reason === "ToolLoop" && e.type === "Warning"));
    await waitFor("the ToolLoop intervention counted", async () => /watchdog_needs_human_intervention_total\{reason="ToolLoop"\} 1/.test(await operator!.metrics()));
  });

  it("uses the rate-limit backoff when the sandbox gives up on a 429 (exit 6) and spends no restart, even at maxRestarts 0", async () => {
    await createRun(client, ns, runManifest("ratelimit", { ...quick, maxRestarts: 0, heartbeatTimeout: "5m" }));
    const pod = await running("ratelimit");
    await heartbeat(client, ns, "ratelimit", 1, "ExecutingTool");
    await writeToolCalls(client, ns, "ratelimit", [failedCall("c1", 1, "llm", "h1", { message: "Too Many Requests", httpStatus: 429 })]);
    const crashedAt = Date.now();
    await setPodPhase(client, ns, pod.metadata.name, "Failed", 6); // the SDK's rate-limited exit
    await phaseOf("ratelimit", "Queued");
    const queued = await waitFor("the backoff annotations", async () => {
      const r = await getRun(client, ns, "ratelimit");
      return r.metadata.annotations?.["watchdog.dev/retry-after"] ? r : undefined;
    });
    expect(queued.status.restarts).toBe(0);
    expect(queued.metadata.annotations["watchdog.dev/backoff-reason"]).toBe("RateLimited");
    // rateLimitBackoff.initial is 3s; the failure time is recorded rounded down and retry-after
    // rounded up to whole seconds
    const wait = Date.parse(queued.metadata.annotations["watchdog.dev/retry-after"]) - Date.parse(queued.status.lastFailure.time);
    expect(wait).toBeGreaterThanOrEqual(3000);
    expect(wait).toBeLessThanOrEqual(5000);
    expect(Date.parse(queued.status.lastFailure.time)).toBeGreaterThanOrEqual(Math.floor(crashedAt / 1000) * 1000);
    await podOf("ratelimit", 2);
    const run = await getRun(client, ns, "ratelimit");
    expect(run.status.phase).not.toBe("NeedsHumanIntervention");
    expect(run.status.restarts).toBe(0);
  });

  it("nudges a stalled agent, escalates, and is disarmed by a delta", async () => {
    const stall = { heartbeatTimeout: "5m", stall: { timeout: "2s", maxNudges: 2 } };
    await createRun(client, ns, runManifest("stall", stall));
    await running("stall");
    await heartbeat(client, ns, "stall", 1, "Planning", { kind: "text" });
    const first = await waitFor("first nudge", async () => {
      const r = await getRun(client, ns, "stall");
      return r.status?.stall?.nudges === 1 ? r : undefined;
    });
    expect(first.status.stall).toMatchObject({ state: "Fired", nudges: 1 });
    expect(first.status.stall.lastNudge.message).toContain("Reply chain broken");
    const run = await phaseOf("stall", "NeedsHumanIntervention", 20_000);
    expect(run.status.stall.nudges).toBe(2);
    expect(condition(run, "NeedsHumanIntervention")).toMatchObject({ reason: "StallUnresolved" });
    expect((await listEvents(client, ns)).filter((e) => e.reason === "StallDetected")).toHaveLength(2);

    await createRun(client, ns, runManifest("disarmed", stall));
    await running("disarmed");
    await heartbeat(client, ns, "disarmed", 1, "Planning", { kind: "text" });
    await waitFor("armed", async () => (await getRun(client, ns, "disarmed")).status?.stall?.state === "Armed");
    await heartbeat(client, ns, "disarmed", 1, "Planning", { kind: "delta" });
    await waitFor("disarmed", async () => (await getRun(client, ns, "disarmed")).status?.stall?.state === "Disarmed");
    await holds("no nudge after a delta", async () => ((await getRun(client, ns, "disarmed")).status?.stall?.nudges ?? 0) === 0, 4000);
  });

  it("suspends and unsuspends", async () => {
    await createRun(client, ns, runManifest("suspend", { ...quick, heartbeatTimeout: "5m" }));
    await running("suspend");
    await heartbeat(client, ns, "suspend", 1, "Planning");
    await phaseOf("suspend", "Planning");
    await client.mergePatch(paths.run(ns, "suspend"), { spec: { suspend: true } });
    const suspended = await phaseOf("suspend", "Suspended");
    expect(condition(suspended, "Running")).toMatchObject({ status: "False", reason: "Suspended" });
    await waitFor("pod removed", async () => (await listPods(client, ns, "suspend")).length === 0);
    await holds("no pod while suspended", async () => (await listPods(client, ns, "suspend")).length === 0, 2000);
    await client.mergePatch(paths.run(ns, "suspend"), { spec: { suspend: false } });
    await podOf("suspend", 2);
    const resumed = await phaseOf("suspend", "Starting");
    expect(resumed.status.restarts).toBe(0);
  });

  it("resumes a run that needs a person, with fresh budgets, on a new resume annotation", async () => {
    await createRun(client, ns, runManifest("resume", { ...quick, heartbeatTimeout: "5m" }));
    await running("resume");
    await heartbeat(client, ns, "resume", 1, "ExecutingTool");
    await writeToolCalls(client, ns, "resume", [1, 2, 3].map((i) => failedCall(`c${i}`, 1, "fetch_url", "abc")));
    await phaseOf("resume", "NeedsHumanIntervention");
    await client.mergePatch(paths.run(ns, "resume"), { metadata: { annotations: { "watchdog.dev/resume": "by-test-1" } } });
    await podOf("resume", 2);
    const run = await phaseOf("resume", "Starting");
    expect(run.status).toMatchObject({ attempt: 2, restarts: 0, observedResume: "by-test-1" });
    expect(condition(run, "NeedsHumanIntervention")).toMatchObject({ status: "False", reason: "Resumed" });
    // the old failures do not count again
    await setPodPhase(client, ns, (await podOf("resume", 2)).metadata.name, "Running");
    await heartbeat(client, ns, "resume", 2, "Planning");
    await phaseOf("resume", "Planning");
    await holds("no loop from old failures", async () => (await getRun(client, ns, "resume")).status.phase === "Planning", 2000);
  });

  it("ignores heartbeats from a stale attempt", async () => {
    await createRun(client, ns, runManifest("stale", { ...quick, backoff: { initial: "1s" } }));
    const first = await running("stale");
    await setPodPhase(client, ns, first.metadata.name, "Failed", 1);
    await running("stale", 2);
    const started = Date.now();
    // the old sandbox keeps writing; the watchdog must not take it for attempt 2's
    const stale = setInterval(() => void heartbeat(client, ns, "stale", 1, "ExecutingTool").catch(() => {}), 500);
    try {
      await waitFor("attempt 2 hung", async () => {
        const r = await getRun(client, ns, "stale");
        return r.status?.lastFailure?.attempt === 2 && r.status.lastFailure.reason === "HeartbeatTimeout" ? r : undefined;
      }, { timeoutMs: 20_000 });
    } finally {
      clearInterval(stale);
    }
    expect(Date.now() - started).toBeGreaterThan(3000);
    const run = await getRun(client, ns, "stale");
    expect(run.status.phase).not.toBe("ExecutingTool");
  });
});
