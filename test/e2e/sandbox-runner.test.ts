// The local sandbox runner against the real control plane and kwok, with a stand-in agent: it
// must play the kubelet's part exactly, because every other end-to-end test believes what it
// reports. No operator runs here; the tests create and delete the pods themselves.
import { spawn } from "node:child_process";
import { fileURLToPath } from "node:url";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { paths, type KubeClient } from "../../operator/kube/client.ts";
import { parseClaim } from "../../harness/sandbox-runner.ts";
import { deleteNamespace, kube, kubeconfigPath, newNamespace } from "../support/cluster.ts";
import { holds, waitFor } from "../support/wait.ts";
import { FAKE_AGENT, NODE, alive, startRunner, type RunnerHandle } from "./support.ts";

const root = fileURLToPath(new URL("../..", import.meta.url));

let client: KubeClient;
let ns: string;
let runners: RunnerHandle[] = [];

beforeAll(async () => {
  client = kube();
  ns = await newNamespace(client, "e2e-runner");
});

afterEach(async () => {
  for (const r of runners) await r.stop();
  runners = [];
});

afterAll(async () => {
  await deleteNamespace(client, ns);
});

async function runner(env: Record<string, string> = {}): Promise<RunnerHandle> {
  const r = await startRunner(ns, { command: FAKE_AGENT, env });
  runners.push(r);
  return r;
}

/** A sandbox-like pod: the run label and the contract's env, plus the fake agent's settings. */
async function createPod(name: string, env: Record<string, string>): Promise<void> {
  const run = name.replace(/-\d+$/, "");
  await client.create(paths.pods(ns), {
    apiVersion: "v1",
    kind: "Pod",
    metadata: { name, labels: { "watchdog.dev/run": run, "watchdog.dev/attempt": "1" } },
    spec: {
      restartPolicy: "Never",
      containers: [
        {
          name: "agent",
          image: "agent-watchdog:test",
          env: Object.entries({ WATCHDOG_RUN_NAME: run, WATCHDOG_RUN_NAMESPACE: ns, WATCHDOG_ATTEMPT: "1", ...env }).map(([k, v]) => ({ name: k, value: v })),
        },
      ],
    },
  });
}

const getPod = (name: string) => client.get<any>(paths.pod(ns, name));

async function phaseOf(name: string, phase: string, timeoutMs = 30_000): Promise<any> {
  return waitFor(`pod ${name} ${phase}`, async () => {
    const pod = await getPod(name);
    return pod.status?.phase === phase ? pod : undefined;
  }, { timeoutMs });
}

function startedPid(r: RunnerHandle, pod: string): Promise<number> {
  return waitFor(`the runner to start ${pod}`, () => {
    const e = r.events.find((e) => e.type === "started" && e.pod === pod);
    return e?.type === "started" ? e.pid : undefined;
  });
}

describe("sandbox runner", () => {
  it("runs a Running pod's agent with the pod's env and reports its exit as the pod's phase, which kwok leaves alone", async () => {
    const r = await runner({ FAKE_SHARED: "from the runner", FAKE_EXIT: "9" });
    await createPod("ok-1", { FAKE_EXIT: "0" });
    await createPod("bad-1", { FAKE_EXIT: "3" });

    const ok = await phaseOf("ok-1", "Succeeded");
    expect(ok.status.containerStatuses[0].state.terminated).toMatchObject({ exitCode: 0, reason: "Completed" });
    const bad = await phaseOf("bad-1", "Failed");
    expect(bad.status.containerStatuses[0].state.terminated).toMatchObject({ exitCode: 3, reason: "Error", message: "fake failure with exit code 3" });
    expect(bad.status.conditions.find((c: any) => c.type === "Ready")).toMatchObject({ status: "False" });
    expect(parseClaim(bad.status.containerStatuses[0].containerID)).toMatchObject({ pid: process.pid });

    // The agent saw the pod's env over the runner's, and the kubeconfig to reach the API server.
    const env = JSON.parse(r.log(ns, "bad-1").split("\n")[0] as string).env;
    expect(env).toEqual({
      WATCHDOG_RUN_NAME: "bad",
      WATCHDOG_RUN_NAMESPACE: ns,
      WATCHDOG_ATTEMPT: "1",
      KUBECONFIG: kubeconfigPath(),
      EXAMPLE_OUTBOX_DIR: r.outboxDir,
      FAKE_SHARED: "from the runner",
      FAKE_EXIT: "3",
    });
    // The runner records an exit once its status write has returned, which can be a moment after
    // the phase it wrote is seen here.
    const exits = () => r.events.filter((e) => e.type === "exited").map((e) => e.type === "exited" && [e.pod, e.code, e.reported]).sort();
    await waitFor("the runner to record both exits", () => (exits().length === 2 ? true : undefined));
    expect(exits()).toEqual([
      ["bad-1", 3, "Failed"],
      ["ok-1", 0, "Succeeded"],
    ]);

    // kwok's stages never move a pod on from a final phase.
    await holds("the reported phases to stay", async () => (await getPod("ok-1")).status.phase === "Succeeded" && (await getPod("bad-1")).status.phase === "Failed", 3000, 250);
  });

  it("reports a pod Failed with exit code 127 when its agent cannot be started", async () => {
    const r = await startRunner(ns, { command: ["/nonexistent/agent"] });
    runners.push(r);
    await createPod("missing-1", {});
    const pod = await phaseOf("missing-1", "Failed");
    expect(pod.status.containerStatuses[0].state.terminated).toMatchObject({ exitCode: 127, message: expect.stringContaining("ENOENT") });
  });

  it("kills the agent at once when its pod is deleted, and reports nothing for it", async () => {
    const r = await runner();
    await createPod("hung-1", { FAKE_HANG: "1" });
    const pid = await startedPid(r, "hung-1");
    expect(alive(pid)).toBe(true);
    const deletedAt = Date.now();
    // As the operator deletes a hung sandbox: no grace period.
    await client.delete(paths.pod(ns, "hung-1"), { apiVersion: "v1", kind: "DeleteOptions", gracePeriodSeconds: 0 });
    await waitFor("the agent to be killed", () => !alive(pid), { timeoutMs: 5000, intervalMs: 20 });
    expect(Date.now() - deletedAt).toBeLessThan(5000);
    expect(r.events.find((e) => e.type === "killed" && e.pod === "hung-1")).toBeDefined();
    await waitFor("the runner to see the agent end", () => r.events.find((e) => e.type === "exited" && e.pod === "hung-1"));
    expect(r.events.find((e) => e.type === "exited" && e.pod === "hung-1")).toEqual(expect.not.objectContaining({ reported: expect.anything() }));
  });

  it("never runs two processes for one pod, even with two runners watching it", async () => {
    const one = await runner();
    const two = await runner();
    for (let i = 1; i <= 3; i++) await createPod(`twin${i}-1`, { FAKE_HANG: "1" });
    const starts = () => [...one.events, ...two.events].filter((e) => e.type === "started");
    await waitFor("all three pods to be started", () => starts().length >= 3);
    // Resyncs hand every pod to both runners again; still nobody starts a second process.
    await holds("one process per pod", () => starts().length === 3, 3000, 250);
    expect(starts().map((e) => e.pod).sort()).toEqual(["twin1-1", "twin2-1", "twin3-1"]);
    const running = [...one.runner.running(), ...two.runner.running()].map((p) => p.pod).sort();
    expect(running).toEqual(["twin1-1", "twin2-1", "twin3-1"]);
  });

  it("on stop, kills every agent it started", async () => {
    const r = await runner();
    await createPod("stop-1", { FAKE_HANG: "1" });
    const pid = await startedPid(r, "stop-1");
    await r.stop();
    runners = runners.filter((x) => x !== r);
    expect(alive(pid)).toBe(false);
  });

  it("reports a pod Failed when the runner that started it died, and kills the agent it left behind", async () => {
    // The command-line runner, killed without a chance to clean up.
    await createPod("orphan-1", { FAKE_HANG: "1" });
    const cli = spawn(NODE, [`${root}harness/sandbox-runner.ts`, `--namespaces=${ns}`, "--", ...FAKE_AGENT], {
      env: { ...process.env, KUBECONFIG: kubeconfigPath() },
      stdio: ["ignore", "ignore", "pipe"],
    });
    let stderr = "";
    cli.stderr.on("data", (chunk: Buffer) => (stderr += chunk.toString()));
    const claim = await waitFor("the command-line runner to start the agent", async () => {
      if (cli.exitCode !== null) throw new Error(`the runner exited: ${stderr}`);
      const c = parseClaim((await getPod("orphan-1")).status?.containerStatuses?.[0]?.containerID);
      return c?.childPid ? c : undefined;
    });
    expect(claim.pid).toBe(cli.pid);
    const exited = new Promise((resolve) => cli.once("exit", resolve));
    cli.kill("SIGKILL");
    await exited;
    expect(alive(claim.childPid as number)).toBe(true); // orphaned, still running

    const r = await runner();
    const lost = await phaseOf("orphan-1", "Failed");
    expect(lost.status.containerStatuses[0].state.terminated).toMatchObject({ exitCode: 137, reason: "ContainerStatusUnknown" });
    await waitFor("the orphaned agent to be killed", () => !alive(claim.childPid as number), { timeoutMs: 5000 });
    expect(r.events).toContainEqual(expect.objectContaining({ type: "lost", pod: "orphan-1" }));
    expect(r.events.filter((e) => e.type === "started" && e.pod === "orphan-1")).toEqual([]);
  });
});
