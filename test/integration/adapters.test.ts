// The four framework adapters' examples (operator/sandbox/examples/), each run as a sandbox process
// against the real API server and a real operator, with the framework's own test model: the
// example's one tool call is recorded Started, then Succeeded, and its final text reported. The
// test then plays a kubelet whose container died after its last report (exit 1), so the operator
// starts attempt 2, and the same example, run again, gets the saved result without running the
// tool a second time. Each scripted model call says it used 120 input and 30 output tokens; the
// usage reaches the run's status (heartbeat.usage, then status.spent once the attempt ends).
import { spawn } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { paths, type KubeClient } from "../../operator/kube/client.ts";
import { argsHash, idempotencyKey } from "../../operator/sandbox/keys.ts";
import { createRun, deleteNamespace, getRun, kube, kubeconfigPath, listPods, newNamespace, ofAttempt, runManifest } from "../support/cluster.ts";
import { startOperator, type OperatorProcess } from "../support/operator-process.ts";
import { setPodPhase } from "../support/sandbox.ts";
import { waitFor } from "../support/wait.ts";

const examples = fileURLToPath(new URL("../../operator/sandbox/examples/", import.meta.url));
const ADAPTERS = ["ai", "langchain", "openai-agents", "mcp"];
/** What one attempt of each example reports: two model calls (MCP has no model) and one tool call. */
const ATTEMPT_USAGE: Record<string, { inputTokens: number; outputTokens: number }> = {
  ai: { inputTokens: 240, outputTokens: 60 },
  langchain: { inputTokens: 240, outputTokens: 60 },
  "openai-agents": { inputTokens: 240, outputTokens: 60 },
  mcp: { inputTokens: 0, outputTokens: 0 },
};

let client: KubeClient;
let ns: string;
let operator: OperatorProcess;
let dir: string;

beforeAll(async () => {
  client = kube();
  ns = await newNamespace(client, "adapters");
  operator = await startOperator(ns);
  dir = mkdtempSync(join(tmpdir(), "agent-watchdog-adapters-"));
});

afterAll(async () => {
  await operator?.stop();
  await deleteNamespace(client, ns);
  rmSync(dir, { recursive: true, force: true });
});

/** Runs the example as the agent of the attempt's pod; resolves with its exit code and output. */
async function runExample(adapter: string, run: string, attempt: number, sideEffects: string): Promise<{ pod: any; code: number | null; output: string }> {
  const pod = await waitFor(`pod ${run}-${attempt}`, async () => (await listPods(client, ns, run)).find(ofAttempt(attempt)));
  await setPodPhase(client, ns, pod.metadata.name, "Running");
  const podEnv = Object.fromEntries(pod.spec.containers[0].env.map((e: any) => [e.name, e.value])) as Record<string, string>;
  const env = { PATH: process.env.PATH, HOME: dir, ...podEnv, KUBECONFIG: kubeconfigPath(), SIDE_EFFECTS_FILE: sideEffects };
  const child = spawn(process.execPath, [join(examples, `${adapter}.ts`)], { env, stdio: ["ignore", "pipe", "pipe"], timeout: 60_000 });
  let output = "";
  child.stdout.on("data", (c: Buffer) => (output += c.toString()));
  child.stderr.on("data", (c: Buffer) => (output += c.toString()));
  const code = await new Promise<number | null>((resolve) => child.once("close", resolve));
  return { pod, code, output };
}

describe.each(ADAPTERS)("the %s adapter's example", (adapter) => {
  it("records its tool call Started, then Succeeded, and on the next attempt replays the saved result", { timeout: 120_000 }, async () => {
    const run = `example-${adapter}`;
    const sideEffects = join(dir, `${adapter}-side-effects`);
    const created = await createRun(client, ns, runManifest(run, { heartbeatTimeout: "30s", backoff: { initial: "1s", factor: 2, max: "4s" } }, { goal: "tides" }));

    // Every version of the run from its creation on, as the watch delivers them: each state the
    // tool's record went through, in order.
    const states: string[] = [];
    const watch = await client.watch(
      paths.runs(ns),
      { fieldSelector: `metadata.name=${run}`, resourceVersion: (created.metadata as any).resourceVersion },
      (_type, object: any) => {
        const call = object.status?.toolCalls?.find((c: any) => c.name === "lookup" && c.attempt === 1);
        if (call && states.at(-1) !== call.state) states.push(call.state);
      },
      () => {},
    );
    const one = await runExample(adapter, run, 1, sideEffects);
    await waitFor("the watch to show the Succeeded record", () => states.includes("Succeeded"));
    watch.abort();
    expect(one.code, one.output).toBe(0);
    const first = await getRun(client, ns, run);
    const hash = argsHash({ topic: "tides" });
    const call = first.status.toolCalls.find((c: any) => c.name === "lookup");
    expect(call).toMatchObject({
      attempt: 1,
      state: "Succeeded",
      argsHash: hash,
      idempotent: true,
      idempotencyKey: idempotencyKey({ runUid: first.metadata.uid, step: 1, index: 0, name: "lookup", argsHash: hash }),
    });
    // The saved result is what the framework's tool returned: the fact itself, or (MCP) the
    // server's CallToolResult that carries it.
    expect(call.result).toContain("a fact about tides");
    expect(states, "Started is a version of its own, before Succeeded").toEqual(["Started", "Succeeded"]);
    expect(first.status.heartbeat).toMatchObject({ attempt: 1, activity: { kind: "text" } });
    // The scripted model's usage and the tool call, as the adapter reported them.
    const tokens = ATTEMPT_USAGE[adapter]!;
    expect(first.status.heartbeat.usage).toMatchObject({ ...tokens, toolCalls: 1 });
    expect(readFileSync(sideEffects, "utf8")).toBe("lookup tides\n");

    // The container died after its last report: the operator starts attempt 2.
    await setPodPhase(client, ns, one.pod.metadata.name, "Failed", 1);
    const two = await runExample(adapter, run, 2, sideEffects);
    expect(two.code, two.output).toBe(0);
    await setPodPhase(client, ns, two.pod.metadata.name, "Succeeded", 0);
    const done = await waitFor(`${run} Completed`, async () => {
      const r = await getRun(client, ns, run);
      return r.status?.phase === "Completed" ? r : undefined;
    });
    expect(existsSync(sideEffects) && readFileSync(sideEffects, "utf8")).toBe("lookup tides\n");
    // The saved record stands: attempt 1's call, not run again.
    expect(done.status.toolCalls.filter((c: any) => c.name === "lookup")).toEqual([expect.objectContaining({ id: call.id, attempt: 1, state: "Succeeded" })]);
    expect(done.status.heartbeat).toMatchObject({ attempt: 2, activity: { kind: "text" } });
    // Both attempts' model calls are counted; the replayed tool call is not counted again.
    expect(done.status.spent).toMatchObject({ inputTokens: 2 * tokens.inputTokens, outputTokens: 2 * tokens.outputTokens, toolCalls: 1, throughAttempt: 2 });
  });
});
