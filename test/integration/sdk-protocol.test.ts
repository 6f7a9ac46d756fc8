// One protocol suite for both sandbox SDKs. Each scenario is a script of SDK calls that a driver
// plays as a sandbox process (test/support/protocol/driver.ts on the TypeScript SDK, driver.py on
// the Python SDK under Debian's python3), against the real API server and a real operator
// process; the test plays the kubelet around it. The assertions are the same for both SDKs, and
// they are on what lands in the run's status and on what the SDK answered the agent.
import { spawn, type ChildProcess } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from "vitest";
import { SANDBOX_FIELD_MANAGER } from "../../operator/api/annotations.ts";
import { MAX_CHECKPOINT_BYTES } from "../../operator/api/limits.ts";
import { paths, type KubeClient } from "../../operator/kube/client.ts";
import { EXIT_CODES } from "../../operator/sandbox/errors.ts";
import { argsHash, idempotencyKey } from "../../operator/sandbox/keys.ts";
import { condition, createRun, deleteNamespace, getRun, kube, kubeconfigPath, listPods, newNamespace, ofAttempt, runManifest } from "../support/cluster.ts";
import { startOperator, type OperatorProcess } from "../support/operator-process.ts";
import type { Step } from "../support/protocol/driver.ts";
import { setPodPhase } from "../support/sandbox.ts";
import { waitFor } from "../support/wait.ts";

const driverDir = fileURLToPath(new URL("../support/protocol/", import.meta.url));
const SDKS = [
  { sdk: "typescript", command: process.execPath, args: [join(driverDir, "driver.ts")] },
  { sdk: "python", command: "python3", args: [join(driverDir, "driver.py")] },
] as const;

const quick = { heartbeatTimeout: "30s", backoff: { initial: "1s", factor: 2, max: "4s" } };

interface Driver {
  child: ChildProcess;
  code: Promise<number | null>;
  output: () => string;
  /** What the SDK answered, one record per line the driver wrote. */
  events: () => any[];
}

describe.each(SDKS)("the $sdk SDK", ({ sdk, command, args }) => {
  let client: KubeClient;
  let ns: string;
  let operator: OperatorProcess;
  let dir: string;
  let drivers: Driver[] = [];

  beforeAll(async () => {
    client = kube();
    ns = await newNamespace(client, `protocol-${sdk.slice(0, 2)}`);
    operator = await startOperator(ns);
  });

  beforeEach(() => {
    dir = mkdtempSync(join(tmpdir(), "agent-watchdog-protocol-"));
  });

  afterEach(async (ctx) => {
    for (const d of drivers) if (d.child.exitCode === null && d.child.signalCode === null) d.child.kill("SIGKILL");
    if (ctx.task.result?.state === "fail") {
      for (const d of drivers) console.error(d.output().slice(-4000));
      console.error(operator.logs.slice(-30).join("\n"));
    }
    drivers = [];
    rmSync(dir, { recursive: true, force: true });
  });

  afterAll(async () => {
    await operator?.stop();
    await deleteNamespace(client, ns);
  });

  const file = (name: string) => join(dir, name);
  const sideEffects = (): string[] => (existsSync(file("side-effects")) ? readFileSync(file("side-effects"), "utf8").trim().split("\n").filter(Boolean) : []);

  /** Waits for the attempt's pod, marks it Running as a kubelet would, and runs the driver as its agent. */
  async function sandbox(run: string, attempt: number, script: Step[]): Promise<{ pod: any; driver: Driver }> {
    const pod = await waitFor(`pod ${run}-${attempt}`, async () => (await listPods(client, ns, run)).find(ofAttempt(attempt)));
    await setPodPhase(client, ns, pod.metadata.name, "Running");
    const podEnv = Object.fromEntries(pod.spec.containers[0].env.map((e: any) => [e.name, e.value])) as Record<string, string>;
    const eventsFile = file(`events-${run}-${attempt}`);
    writeFileSync(eventsFile, "");
    const env = {
      PATH: process.env.PATH,
      HOME: dir,
      PYTHONDONTWRITEBYTECODE: "1",
      ...podEnv,
      KUBECONFIG: kubeconfigPath(),
      PROTOCOL_SCRIPT: JSON.stringify(script),
      PROTOCOL_EVENTS: eventsFile,
      SIDE_EFFECTS_FILE: file("side-effects"),
    };
    const child = spawn(command, args, { env, stdio: ["ignore", "pipe", "pipe"], timeout: 120_000 });
    let output = "";
    child.stdout?.on("data", (c: Buffer) => (output += c.toString()));
    child.stderr?.on("data", (c: Buffer) => (output += c.toString()));
    const code = new Promise<number | null>((resolve) => child.once("close", (c) => resolve(c)));
    const driver: Driver = {
      child,
      code,
      output: () => output,
      events: () => readFileSync(eventsFile, "utf8").trim().split("\n").filter(Boolean).map((l) => JSON.parse(l)),
    };
    drivers.push(driver);
    return { pod, driver };
  }

  /** The driver's exit code, reported to the API server as the kubelet would. */
  async function exits(run: string, { pod, driver }: { pod: any; driver: Driver }): Promise<number | null> {
    const code = await driver.code;
    await setPodPhase(client, ns, pod.metadata.name, code === 0 ? "Succeeded" : "Failed", code ?? 137);
    return code;
  }

  const phaseOf = (run: string, phase: string) =>
    waitFor(`${run} in phase ${phase}`, async () => {
      const r = await getRun(client, ns, run);
      return r.status?.phase === phase ? r : undefined;
    });

  const callsOf = async (run: string) => (await getRun(client, ns, run)).status?.toolCalls ?? [];

  it("reports in for its attempt, streams its final text, and completes under its own field manager", { timeout: 60_000 }, async () => {
    await createRun(client, ns, runManifest("hello", quick, { goal: "say hello" }));
    const s = await sandbox("hello", 1, [{ do: "stream", chunks: ["Hello, ", "world."] }]);
    expect(await exits("hello", s), s.driver.output()).toBe(0);
    const done = await phaseOf("hello", "Completed");
    expect(s.driver.events()[0]).toEqual({ event: "start", attempt: 1, goal: "say hello", checkpoint: null, lastFailure: null });
    expect(done.status.heartbeat).toMatchObject({ attempt: 1, activity: { kind: "text" } });
    const managers = (done.metadata.managedFields ?? []).filter((m: any) => m.subresource === "status").map((m: any) => m.manager);
    expect(managers).toContain(SANDBOX_FIELD_MANAGER);
  });

  it("records a tool call Started before it runs, then Succeeded with its result, under the shared key", { timeout: 60_000 }, async () => {
    await createRun(client, ns, runManifest("lookup", quick));
    const toolArgs = { topic: "the weather", units: ["C", "F"] };
    const s = await sandbox("lookup", 1, [{ do: "tool", name: "lookup", args: toolArgs, result: { fact: "sunny" }, idempotent: true, holdFile: file("go") }]);
    const started = await waitFor("the Started record while the tool runs", async () => (await callsOf("lookup")).find((c: any) => c.name === "lookup"));
    expect(started).toMatchObject({ state: "Started", attempt: 1, idempotent: true });
    expect(sideEffects(), "Started is committed before the tool runs").toEqual([]);
    await waitFor("the run executing the tool", async () => (await getRun(client, ns, "lookup")).status?.phase === "ExecutingTool");
    writeFileSync(file("go"), "");

    expect(await exits("lookup", s), s.driver.output()).toBe(0);
    const done = await phaseOf("lookup", "Completed");
    const hash = argsHash(toolArgs);
    const key = idempotencyKey({ runUid: done.metadata.uid, step: 1, index: 0, name: "lookup", argsHash: hash });
    expect(done.status.toolCalls).toEqual([expect.objectContaining({ id: started.id, name: "lookup", argsHash: hash, idempotencyKey: key, state: "Succeeded", result: JSON.stringify({ fact: "sunny" }) })]);
    expect(s.driver.events()[1]).toEqual({ event: "tool", ok: true, replayed: false, value: { fact: "sunny" }, key });
    expect(sideEffects()).toEqual([`lookup ${key}`]);
  });

  it("records a failing tool Failed with its message, and the agent goes on", { timeout: 60_000 }, async () => {
    await createRun(client, ns, runManifest("failing", quick));
    const s = await sandbox("failing", 1, [
      { do: "tool", name: "fetch_page", args: { url: "https://example.invalid/" }, fail: "the page could not be fetched (HTTP 502)", idempotent: true },
      { do: "say", text: "The page is down; I will report that." },
    ]);
    expect(await exits("failing", s), s.driver.output()).toBe(0);
    const done = await phaseOf("failing", "Completed");
    expect(done.status.toolCalls).toEqual([expect.objectContaining({ name: "fetch_page", state: "Failed", error: expect.objectContaining({ message: "the page could not be fetched (HTTP 502)" }) })]);
    expect(s.driver.events()[1]).toMatchObject({ event: "tool", ok: false, error: "the page could not be fetched (HTTP 502)" });
  });

  it("commits checkpoints and keys later calls on the next step", { timeout: 60_000 }, async () => {
    await createRun(client, ns, runManifest("checkpoint", quick));
    const s = await sandbox("checkpoint", 1, [
      { do: "checkpoint", step: 3, data: { notes: ["a", "b"] } },
      { do: "tool", name: "count", args: { n: 2 }, result: 2, idempotent: true },
      { do: "say", text: "Counted." },
    ]);
    expect(await exits("checkpoint", s), s.driver.output()).toBe(0);
    const done = await phaseOf("checkpoint", "Completed");
    expect(done.status.checkpoint).toEqual({ step: 3, data: { notes: ["a", "b"] } });
    expect(done.status.toolCalls[0].idempotencyKey).toBe(idempotencyKey({ runUid: done.metadata.uid, step: 4, index: 0, name: "count", argsHash: argsHash({ n: 2 }) }));
  });

  it("on the next attempt returns the saved result without running the tool again, and reads lastFailure", { timeout: 90_000 }, async () => {
    await createRun(client, ns, runManifest("replay", quick));
    const lookup: Step = { do: "tool", name: "lookup", args: { topic: "tides" }, result: { fact: "high at noon" }, idempotent: true };
    const one = await sandbox("replay", 1, [lookup, { do: "crash" }]);
    expect(await exits("replay", one)).toBe(1);

    const two = await sandbox("replay", 2, [lookup, { do: "say", text: "High tide is at noon." }]);
    expect(await exits("replay", two), two.driver.output()).toBe(0);
    const done = await phaseOf("replay", "Completed");
    const [start, call] = two.driver.events();
    expect(start).toMatchObject({ event: "start", attempt: 2, lastFailure: expect.any(String) });
    expect(call).toMatchObject({ event: "tool", ok: true, replayed: true, value: { fact: "high at noon" } });
    expect(sideEffects(), "the tool ran once, in attempt 1").toHaveLength(1);
    expect(done.status.toolCalls).toEqual([expect.objectContaining({ name: "lookup", attempt: 1, state: "Succeeded" })]);
  });

  it("never runs again a non-idempotent call whose outcome is unknown, even after a person resumes", { timeout: 90_000 }, async () => {
    await createRun(client, ns, runManifest("charge", quick));
    const charge: Step = { do: "tool", name: "charge_card", args: { cents: 1999 }, result: { charged: true }, holdFile: file("never") };
    const one = await sandbox("charge", 1, [charge]);
    await waitFor("the charge Started", async () => (await callsOf("charge")).find((c: any) => c.state === "Started"));
    one.driver.child.kill("SIGKILL"); // the sandbox dies while the payment is in flight
    await exits("charge", one);
    const stopped = await phaseOf("charge", "NeedsHumanIntervention");
    expect(condition(stopped, "NeedsHumanIntervention")).toMatchObject({ status: "True", reason: "UnconfirmedSideEffect" });

    await client.mergePatch(paths.run(ns, "charge"), { metadata: { annotations: { "watchdog.dev/resume": "checked-by-hand" } } });
    const two = await sandbox("charge", 2, [{ ...charge, holdFile: undefined }, { do: "say", text: "Not charged again." }]);
    expect(await exits("charge", two), two.driver.output()).toBe(0);
    expect(two.driver.events()[1]).toMatchObject({ event: "tool", ok: false, error: expect.stringContaining("outcome is unknown") });
    expect(sideEffects(), "never charged").toEqual([]);
  });

  it("hands over a nudge of the stall watchdog through its watch, once", { timeout: 60_000 }, async () => {
    await createRun(client, ns, runManifest("nudge", { ...quick, stall: { timeout: "1s", maxNudges: 3 } }));
    const s = await sandbox("nudge", 1, [{ do: "say", text: "I will wait for the user." }, { do: "nudge" }, { do: "say", text: "Back to work: done." }]);
    expect(await exits("nudge", s), s.driver.output()).toBe(0);
    await phaseOf("nudge", "Completed");
    expect(s.driver.events().filter((e) => e.event === "nudge")).toEqual([{ event: "nudge", message: expect.stringContaining("Reply chain broken"), count: 1 }]);
  });

  it("waits for an approval as AwaitingReply and goes on with the answer", { timeout: 60_000 }, async () => {
    await createRun(client, ns, runManifest("approve", quick));
    const s = await sandbox("approve", 1, [{ do: "approval", question: "Deploy version 2?" }, { do: "say", text: "Deployed." }]);
    const pending = await waitFor("the recorded request", async () => {
      const r = await getRun(client, ns, "approve");
      return r.status?.approval?.state === "Pending" && r.status.approval.id && r.status.heartbeat?.state === "AwaitingReply" ? r : undefined;
    });
    expect(pending.status.phase).toBe("AwaitingReply");
    await client.mergePatch(paths.run(ns, "approve"), { metadata: { annotations: { "watchdog.dev/approve": "ship it", "watchdog.dev/approval-id": pending.status.approval.id } } });
    expect(await exits("approve", s), s.driver.output()).toBe(0);
    await phaseOf("approve", "Completed");
    expect(s.driver.events()[1]).toEqual({ event: "approval", answer: "ship it" });
  });

  it("gets its own answer to each of two questions asked one after the other", { timeout: 60_000 }, async () => {
    await createRun(client, ns, runManifest("twice", quick));
    const s = await sandbox("twice", 1, [{ do: "approval", question: "Deploy version 2?" }, { do: "approval", question: "Migrate the database?" }, { do: "say", text: "Done." }]);
    const ids: string[] = [];
    for (const [question, answer] of [["Deploy version 2?", "ship it"], ["Migrate the database?", "migrate"]] as const) {
      const pending = await waitFor(`the request for ${question}`, async () => {
        const r = await getRun(client, ns, "twice");
        return r.status?.approval?.state === "Pending" && r.status.approval.question === question ? r : undefined;
      });
      // The operator opened it under the key the SDK gave its question.
      expect(pending.status.approval.requestKey).toBe(pending.status.checkpoint.data["watchdog.dev/approval-request"].key);
      ids.push(pending.status.approval.id);
      await client.mergePatch(paths.run(ns, "twice"), { metadata: { annotations: { "watchdog.dev/approve": answer, "watchdog.dev/approval-id": pending.status.approval.id } } });
    }
    expect(new Set(ids).size).toBe(2);
    expect(await exits("twice", s), s.driver.output()).toBe(0);
    await phaseOf("twice", "Completed");
    expect(s.driver.events().filter((e) => e.event === "approval")).toEqual([
      { event: "approval", answer: "ship it" },
      { event: "approval", answer: "migrate" },
    ]);
  });

  it("refuses a checkpoint too large for the run's status at the call, keeps the last one, and goes on", { timeout: 60_000 }, async () => {
    await createRun(client, ns, runManifest("large", quick));
    const s = await sandbox("large", 1, [
      { do: "checkpoint", step: 1, data: { notes: ["a"] } },
      { do: "checkpoint", step: 2, padding: MAX_CHECKPOINT_BYTES },
      { do: "say", text: "Kept the small one." },
    ]);
    expect(await exits("large", s), s.driver.output()).toBe(0);
    const done = await phaseOf("large", "Completed");
    expect(s.driver.events()[1]).toEqual({ event: "checkpoint", ok: false, error: "CheckpointTooLargeError", bytes: MAX_CHECKPOINT_BYTES + 20, limit: MAX_CHECKPOINT_BYTES });
    expect(done.status.checkpoint).toEqual({ step: 1, data: { notes: ["a"] } });
    expect(condition(done, "SandboxReportValid")?.status).not.toBe("False");
  });

  it("exits as rate limited when it gives up right after a call failed with 429, and the run waits out the rate limit", { timeout: 60_000 }, async () => {
    await createRun(client, ns, runManifest("limited", { ...quick, maxRestarts: 0 }));
    const s = await sandbox("limited", 1, [
      { do: "tool", name: "call_model", args: { prompt: "hi" }, fail: "429 Too Many Requests", httpStatus: 429, retryAfterSeconds: 2, idempotent: true },
      { do: "giveUp", message: "giving up this attempt" },
    ]);
    expect(await exits("limited", s), s.driver.output()).toBe(EXIT_CODES.rateLimited);
    const queued = await phaseOf("limited", "Queued");
    expect(queued.status).toMatchObject({ restarts: 0, lastFailure: { reason: "RateLimited" } });
    expect(queued.status.toolCalls.at(-1)).toMatchObject({ name: "call_model", state: "Failed", error: { httpStatus: 429, retryAfterSeconds: 2 } });
  });

  it("stops with the fenced exit code when the run is suspended under it", { timeout: 60_000 }, async () => {
    await createRun(client, ns, runManifest("fenced", quick));
    const s = await sandbox("fenced", 1, [{ do: "tool", name: "crawl", args: { site: "a" }, result: 1, idempotent: true, holdFile: file("never") }]);
    await waitFor("the call Started", async () => (await callsOf("fenced")).find((c: any) => c.state === "Started"));
    await client.mergePatch(paths.run(ns, "fenced"), { spec: { suspend: true } });
    expect(await s.driver.code, s.driver.output()).toBe(EXIT_CODES.fenced);
    await phaseOf("fenced", "Suspended");
  });
});
