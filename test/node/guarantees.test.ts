// The guarantees that only a real node can test (issue classes 1 and 4), with the operator running
// as a process against the real-node cluster and sandboxes in real pods:
//   1. confirmed before replaced: a sandbox killed, or force-deleted by someone else, while its node
//      is cut off (node-pause) keeps running there; no replacement starts until the node is back and
//      has stopped it, and the run says why in the meantime (SandboxUnconfirmed);
//   4. real pods start and finish like real pods: a slow start is startTimeout's, not a hang; the
//      agent container decides, whatever a sidecar does.
// Throughout, an observer polls containerd on the node: at no moment do two pods of one run have a
// running container.
import { afterAll, afterEach, beforeAll, describe, expect, inject, it } from "vitest";
import { RESTRICTED_NAMESPACE } from "../../harness/cluster.ts";
import { nodePause, nodeResume } from "../../harness/real-node.ts";
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { runScript } from "../../harness/cluster.ts";
import { ApiError, isNotFound, paths, type Json, type KubeClient } from "../../operator/kube/client.ts";
import { componentPid } from "../../measure/bench/lib.ts";
import { deleteNamespace, kube, newNamespace, ofAttempt } from "../support/cluster.ts";
import { startOperator, type OperatorProcess } from "../support/operator-process.ts";
import { waitFor } from "../support/wait.ts";
import { ensureSandboxRole, NodeObserver, SANDBOX_FLAGS } from "./support.ts";


let client: KubeClient;
let ns: string;
let operator: OperatorProcess;
let observer: NodeObserver;
let paused = false;

const condition = (run: any, type: string) => (run.status?.conditions ?? []).find((c: any) => c.type === type);
const getRun = (name: string) => client.get<any>(paths.run(ns, name));
const podsOf = async (name: string) => (await client.get<{ items: any[] }>(paths.pods(ns), { labelSelector: `watchdog.dev/run=${name}` })).items;

/**
 * A sandbox that is nothing but a process: it heartbeats `beats` times, a second apart (or, with
 * beats 0, until its run carries the annotation SILENCE, so that a test decides when it hangs),
 * then stops, hung, and ignores SIGTERM and the run's attempt moving on, as a wedged process would.
 * Only the kubelet can stop it.
 */
const SILENCE = "test.watchdog.dev/silence";
const ZOMBIE = `
const fs = require("fs");
const sa = "/var/run/secrets/kubernetes.io/serviceaccount";
const e = process.env;
const run = "https://" + e.KUBERNETES_SERVICE_HOST + ":" + e.KUBERNETES_SERVICE_PORT + "/apis/watchdog.dev/v1alpha1/namespaces/" + e.WATCHDOG_RUN_NAMESPACE + "/agentruns/" + e.WATCHDOG_RUN_NAME;
const auth = () => ({ authorization: "Bearer " + fs.readFileSync(sa + "/token", "utf8") });
process.on("SIGTERM", () => console.log("ignoring SIGTERM"));
let n = 0;
let silent = false;
setInterval(async () => {
  if (silent || (Number(e.BEATS) > 0 && n >= Number(e.BEATS))) return;
  if (Number(e.BEATS) === 0) {
    const current = await fetch(run, { headers: auth() }).then((r) => r.json(), () => undefined);
    if (current?.metadata?.annotations?.["${SILENCE}"] !== undefined) {
      silent = true;
      console.log("silenced");
      return;
    }
  }
  n++;
  const heartbeat = { time: new Date().toISOString(), attempt: Number(e.WATCHDOG_ATTEMPT), state: "Planning" };
  fetch(run + "/status?fieldManager=agent-watchdog-sandbox", { method: "PATCH", headers: { ...auth(), "content-type": "application/merge-patch+json" }, body: JSON.stringify({ status: { heartbeat } }) })
    .then((r) => console.log("heartbeat", n, r.status), (err) => console.log("heartbeat failed", String(err.cause ?? err)));
}, 1000);
`;

function run(name: string, container: Json, watchdog: Json, spec: Json = {}): Json {
  return {
    apiVersion: "watchdog.dev/v1alpha1",
    kind: "AgentRun",
    metadata: { name },
    spec: { goal: "node test", template: { spec: { terminationGracePeriodSeconds: 3, containers: [container], ...spec } }, watchdog },
  };
}

/** The zombie stops heartbeating now (it reads its run once a second). */
const silence = (name: string) => client.mergePatch(paths.run(ns, name), { metadata: { annotations: { [SILENCE]: "now" } } });

function zombie(beats: number): Json {
  return {
    name: "agent",
    image: inject("image"),
    command: ["/nodejs/bin/node", "-e", ZOMBIE],
    env: [
      { name: "BEATS", value: String(beats) },
      { name: "NODE_EXTRA_CA_CERTS", value: "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt" },
    ],
  };
}

function example(behaviour: string, env: Record<string, string> = {}): Json {
  return {
    name: "agent",
    image: inject("image"),
    args: ["example-agent"],
    env: Object.entries({ EXAMPLE_BEHAVIOUR: behaviour, ...env }).map(([name, value]) => ({ name, value })),
  };
}

async function pause(): Promise<void> {
  await nodePause(inject("nodeState"));
  paused = true;
}
async function resume(): Promise<void> {
  await nodeResume(inject("nodeState"));
  paused = false;
}

beforeAll(async () => {
  client = kube();
  // What the chart's sandbox ClusterRole grants; the operator binds each namespace's sandboxes to it.
  await ensureSandboxRole(client);
  ns = await newNamespace(client, "aw-guard", RESTRICTED_NAMESPACE);
  operator = await startOperator(ns, SANDBOX_FLAGS);
});

afterEach(async (ctx) => {
  if (paused) await resume();
  if (ctx.task.result?.state === "fail") console.error(operator.logs.slice(-40).join("\n"));
});

afterAll(async () => {
  await operator?.stop();
  await deleteNamespace(client, ns);
});

describe("1. confirmed before replaced, on a node cut off from the API server", () => {
  it("keeps the killed sandbox's replacement back until the node is back and has stopped it", async () => {
    observer = new NodeObserver(ns, ["hung"]);
    observer.start();
    try {
      await client.create(paths.runs(ns), run("hung", zombie(0), { heartbeatTimeout: "5s", killGracePeriod: "2s", unconfirmedAfter: "6s", backoff: { initial: "1s" }, maxRestarts: 3 }));
      await waitFor("the sandbox's heartbeats", async () => (await getRun("hung")).status?.phase === "Planning", { timeoutMs: 60_000 });
      // Cut off first, and only then hung: the kill happens while the node cannot act on it. (With
      // a sandbox that hung by itself after a few beats, a slow pause let the kill happen before
      // it, the kubelet stopped attempt 1 at once, and attempt 2 was what the test paused on.)
      await pause();
      await silence("hung");
      // It stops heartbeating and is killed: its pod is deleted (gracefully) while the kubelet
      // cannot act on it.
      const killed = await waitFor("the kill", async () => {
        const r = await getRun("hung");
        return r.status?.phase === "Queued" && r.status.lastFailure?.reason === "HeartbeatTimeout" ? r : undefined;
      }, { timeoutMs: 30_000 });
      expect(killed.status.terminating).toEqual([expect.objectContaining({ name: expect.stringMatching(/^hung-1-/), gracePeriodSeconds: 2 })]);
      // The status that names the pod terminating is written before the delete is asked for (so
      // that an operator killed in between deletes it again): the pod shows it a moment later.
      const old = await waitFor("the old pod terminating", async () => (await podsOf("hung")).find((p) => p.metadata.deletionTimestamp), { timeoutMs: 10_000 });
      expect((await podsOf("hung")).map((p) => p.metadata.name)).toEqual([old.metadata.name]);
      expect(old.metadata.deletionGracePeriodSeconds).toBe(2);
      // The container runs on, retry-after passes, unconfirmedAfter passes: no second sandbox.
      const unconfirmed = await waitFor("SandboxUnconfirmed", async () => {
        const r = await getRun("hung");
        return condition(r, "SandboxUnconfirmed")?.status === "True" ? r : undefined;
      }, { timeoutMs: 30_000 });
      expect(["NodeUnreachable", "TerminationPending"]).toContain(condition(unconfirmed, "SandboxUnconfirmed").reason);
      expect(await observer.running("hung")).toEqual([old.metadata.name]);
      expect((await podsOf("hung")).filter(ofAttempt(2))).toEqual([]);
      const events = (await client.get<{ items: any[] }>(paths.events(ns))).items;
      expect(events.some((e) => e.reason === "SandboxUnconfirmed" && e.type === "Warning")).toBe(true);

      // The node is back: its kubelet stops the container, and only then does attempt 2 start.
      await resume();
      // (as the observer saw it: it samples the node all along)
      await waitFor("attempt 2 running on the node", () => [...(observer.seen.get("hung") ?? [])].some((p) => p.startsWith("hung-2-")), { timeoutMs: 60_000 });
      const after = await getRun("hung");
      expect(condition(after, "SandboxUnconfirmed")).toMatchObject({ status: "False" });
    } finally {
      await observer.stop();
    }
    expect(observer.overlaps).toEqual([]);
    expect(observer.samples).toBeGreaterThan(20);
    expect([...(observer.seen.get("hung") ?? [])].map((p) => p.split("-")[1]).sort()).toEqual(["1", "2"]);
  });

  it("does not take a pod force-deleted by someone else for gone while its node still runs it", async () => {
    observer = new NodeObserver(ns, ["forced"]);
    observer.start();
    try {
      await client.create(paths.runs(ns), run("forced", zombie(10_000), { heartbeatTimeout: "30s", unconfirmedAfter: "5s", backoff: { initial: "1s" } }));
      await waitFor("the sandbox's heartbeats", async () => (await getRun("forced")).status?.phase === "Planning", { timeoutMs: 60_000 });
      await pause();
      const [pod] = await podsOf("forced");
      // Someone force-deletes it: the object vanishes at once, the container runs on.
      await client.delete(paths.pod(ns, pod.metadata.name), { apiVersion: "v1", kind: "DeleteOptions", gracePeriodSeconds: 0 });
      await waitFor("the pod object to vanish", async () => {
        try {
          await client.get(paths.pod(ns, pod.metadata.name));
          return false;
        } catch (err) {
          return isNotFound(err);
        }
      });
      const waiting = await waitFor("SandboxUnconfirmed", async () => {
        const r = await getRun("forced");
        return condition(r, "SandboxUnconfirmed")?.status === "True" ? r : undefined;
      }, { timeoutMs: 30_000 });
      expect(waiting.status).toMatchObject({ phase: "Queued", attempt: 2, reason: "PodFailed" });
      expect(await observer.running("forced")).toEqual([pod.metadata.name]);
      expect(await podsOf("forced")).toEqual([]);

      await resume();
      await waitFor("attempt 2 running on the node", () => [...(observer.seen.get("forced") ?? [])].some((p) => p.startsWith("forced-2-")), { timeoutMs: 60_000 });
    } finally {
      await observer.stop();
    }
    expect(observer.overlaps).toEqual([]);
  });
});

describe("1. a force-deleted sandbox is confirmed gone only after the grace its kubelet really uses", () => {
  /**
   * A zombie with a grace of its own (20 s) far longer than the kill's (2 s) is killed while its
   * node is cut off, and then force-deleted; the node comes back one of three ways. What the
   * kubelet then does is measured in containerd (when the old container stops), and the
   * replacement must start only after it has.
   */
  async function forceDeletedWhileCutOff(name: string, back: () => Promise<void>, whileCutOff: () => Promise<void> = async () => {}): Promise<{ graceMs: number | undefined; replacedAfterMs: number }> {
    const observer = new NodeObserver(ns, [name]);
    observer.start();
    let backAt: number | undefined;
    let stoppedAt: number | undefined;
    let termAt: number | undefined;
    let old = "";
    try {
      await client.create(
        paths.runs(ns),
        run(name, zombie(0), { heartbeatTimeout: "5s", killGracePeriod: "2s", unconfirmedAfter: "10m", backoff: { initial: "1s" } }, { terminationGracePeriodSeconds: 20 }),
      );
      await waitFor("the sandbox's heartbeats", async () => (await getRun(name)).status?.phase === "Planning", { timeoutMs: 60_000 });
      await pause();
      await whileCutOff();
      await silence(name);
      const [pod] = await waitFor("the kill", async () => {
        const pods = await podsOf(name);
        return pods.length === 1 && pods[0].metadata.deletionTimestamp ? pods : undefined;
      }, { timeoutMs: 30_000 });
      old = pod.metadata.name;
      // Its log on the node (the kubelet's CRI log, one timestamp per line) says when it got SIGTERM.
      const logFile = join(inject("nodeState"), "control-plane/node/pod-logs", `${ns}_${old}_${pod.metadata.uid}`, "agent", "0.log");
      await client.delete(paths.pod(ns, old), { apiVersion: "v1", kind: "DeleteOptions", gracePeriodSeconds: 0 });
      await waitFor("the object gone", async () => (await podsOf(name)).filter((p) => p.metadata.name === old).length === 0);
      expect(await observer.running(name)).toEqual([old]);
      await back();
      paused = false;
      backAt = Date.now();
      await waitFor("the old container stopped by its kubelet", async () => {
        termAt ??= sigtermTime(logFile);
        if ((await observer.running(name)).includes(old)) return undefined;
        stoppedAt = Date.now();
        return true;
      }, { timeoutMs: 90_000, intervalMs: 200 });
      await waitFor("the replacement running on the node", () => [...(observer.seen.get(name) ?? [])].some((p) => p !== old), { timeoutMs: 120_000 });
    } finally {
      await observer.stop();
    }
    expect(observer.overlaps).toEqual([]);
    const since = backAt ?? Date.now();
    // A kubelet that restarted kills what it finds orphaned without the container seeing a SIGTERM.
    return { graceMs: termAt === undefined ? undefined : (stoppedAt ?? since) - termAt, replacedAfterMs: Date.now() - since };
  }

  /** When the container logged that it got SIGTERM (the CRI log's own timestamp), if it has. */
  function sigtermTime(logFile: string): number | undefined {
    try {
      const line = readFileSync(logFile, "utf8").split("\n").find((l) => l.includes("ignoring SIGTERM"));
      return line ? Date.parse(line.split(" ")[0] as string) : undefined;
    } catch {
      return undefined;
    }
  }

  /** Compacts the real-node cluster's etcd to its newest revision: no watch can resume from before now. */
  async function compactEtcd(): Promise<void> {
    const ports = readFileSync(join(inject("nodeState"), "control-plane", "ports"), "utf8");
    const port = /ETCD_PORT=(\d+)/.exec(ports)?.[1];
    const etcd = `http://127.0.0.1:${port}/v3/kv`;
    const head = (await (await fetch(`${etcd}/range`, { method: "POST", body: JSON.stringify({ key: Buffer.from("\0").toString("base64") }) })).json()) as { header: { revision: string } };
    const res = await fetch(`${etcd}/compaction`, { method: "POST", body: JSON.stringify({ revision: head.header.revision, physical: true }) });
    if (!res.ok) throw new Error(`etcd compaction: ${res.status} ${await res.text()}`);
  }

  /**
   * Kills a component of the real-node cluster and starts it again: `up --kubelet` for the kubelet
   * (it resumes a paused one too), plain `up` for the control plane, which leaves a paused kubelet
   * paused.
   */
  async function restartComponent(component: "kube-apiserver" | "kubelet"): Promise<void> {
    const state = inject("nodeState");
    const pid = componentPid(join(state, "control-plane", "kubeconfig"), component);
    if (!pid) throw new Error(`no pid for ${component}`);
    process.kill(pid, "SIGKILL");
    await waitFor(`${component} gone`, () => !existsSync(`/proc/${pid}`) || readFileSync(`/proc/${pid}/stat`, "utf8").split(") ")[1]?.startsWith("Z"));
    const { code } = await runScript("control-plane.sh", component === "kubelet" ? ["up", "--kubelet"] : ["up"], { env: { AGENT_WATCHDOG_STATE: state } });
    if (code !== 0) throw new Error(`up exited ${code}`);
  }

  // What the kubelet does on each path, measured: from its SIGTERM (in the container's log) to the
  // container's end (in containerd). The pod's own grace is 20 s, the deletion's 2 s.
  it("when the kubelet's watch resumes and replays the deletion: the deletion's grace", async () => {
    const measured = await forceDeletedWhileCutOff("resumed", () => resume());
    console.log(`watch resumed: the kubelet gave the container ${measured.graceMs} ms after SIGTERM; the replacement ran ${measured.replacedAfterMs} ms after the node was back`);
    expect(measured.graceMs).toBeDefined();
    expect(measured.graceMs).toBeLessThan(10_000);
  });

  it("when the kubelet relists (its watch cannot resume) and finds the pod gone without having seen the deletion: the pod's own grace", async () => {
    // The API server restarts while the kubelet is cut off, before the kill: the kubelet's watch
    // connections are gone with nothing of the deletion in them, the new watch cache begins after
    // where the kubelet stood, and etcd is compacted past it. Its watch cannot resume: it lists.
    const measured = await forceDeletedWhileCutOff(
      "relisted",
      async () => {
        await compactEtcd();
        await resume();
      },
      () => restartComponent("kube-apiserver"),
    );
    console.log(`relist: the kubelet gave the container ${measured.graceMs} ms after SIGTERM; the replacement ran ${measured.replacedAfterMs} ms after the node was back`);
    expect(measured.graceMs).toBeGreaterThan(15_000);
  });

  it("when the kubelet restarts and finds the container orphaned: a couple of seconds", async () => {
    const measured = await forceDeletedWhileCutOff("restarted", () => restartComponent("kubelet"));
    console.log(`kubelet restart: the kubelet stopped the container ${measured.graceMs === undefined ? "with no SIGTERM it saw" : `${measured.graceMs} ms after SIGTERM`}; the replacement ran ${measured.replacedAfterMs} ms after the node was back`);
    expect(measured.graceMs ?? 0).toBeLessThan(10_000);
  });
});

describe("3. deletion of a run is supervised", () => {
  it("never runs a re-applied run of the same name beside the deleted one's sandbox, whatever the node does meanwhile", async () => {
    const observer = new NodeObserver(ns, ["again"]);
    observer.start();
    try {
      await client.create(paths.runs(ns), run("again", zombie(0), { heartbeatTimeout: "30s" }));
      await waitFor("the sandbox's heartbeats", async () => (await getRun("again")).status?.phase === "Planning", { timeoutMs: 60_000 });
      const [first] = await podsOf("again");
      await pause();
      await client.delete(paths.run(ns, "again"));
      // Applied again at once, and again until it is taken; the node comes back in between.
      let tries = 0;
      const created = await waitFor("the run applied again", async () => {
        if (++tries === 20) await resume();
        try {
          return await client.create<any>(paths.runs(ns), run("again", zombie(0), { heartbeatTimeout: "30s" }));
        } catch (err) {
          if (err instanceof ApiError && err.code === 409) return undefined;
          throw err;
        }
      }, { timeoutMs: 120_000, intervalMs: 250 });
      expect(tries, "refused while the deleted run's sandbox may run").toBeGreaterThan(20);
      await waitFor("the new run's sandbox running on the node", () => [...(observer.seen.get("again") ?? [])].some((p) => p !== first.metadata.name), { timeoutMs: 90_000 });
      expect(created.metadata.uid).not.toBe(first.metadata.ownerReferences[0].uid);
    } finally {
      await observer.stop();
    }
    expect(observer.overlaps).toEqual([]);
  });
});

describe("4. real pods start and finish like real pods", () => {
  it("gives a sandbox that cannot start yet its startTimeout, not the heartbeat timeout, and spends no restart", async () => {
    await pause();
    // The kubelet is not there to start the container: as a slow image pull would.
    // The heartbeat timeout is short, but longer than a real sandbox takes from its container's
    // start to its first write on a loaded two-core node (4 s was not, in a CI run).
    await client.create(paths.runs(ns), run("slow", example("healthy", { EXAMPLE_STEPS: "2", EXAMPLE_STEP_DELAY_MS: "500" }), { heartbeatTimeout: "10s", startTimeout: "3m" }));
    await waitFor("the pod to be bound to the node", async () => (await podsOf("slow"))[0]?.spec.nodeName);
    const pendingSince = Date.now();
    await waitFor("two and a half heartbeat timeouts", async () => Date.now() - pendingSince > 25_000, { timeoutMs: 35_000, intervalMs: 500 });
    const waiting = await getRun("slow");
    expect(waiting.status).toMatchObject({ phase: "Starting", attempt: 1, restarts: 0 });
    await resume();
    const done = await waitFor("the run to complete", async () => {
      const r = await getRun("slow");
      return r.status?.phase === "Completed" ? r : undefined;
    }, { timeoutMs: 90_000 });
    expect(done.status).toMatchObject({ attempt: 1, restarts: 0 });
  });

  it("fails a sandbox whose agent never starts with StartTimeout, counted against the allowance", async () => {
    const never = { ...example("healthy"), image: "localhost/agent-watchdog/does-not-exist:1", imagePullPolicy: "IfNotPresent" };
    await client.create(paths.runs(ns), run("never", never, { heartbeatTimeout: "3s", startTimeout: "8s", maxRestarts: 0 }));
    const failed = await waitFor("StartTimeout", async () => {
      const r = await getRun("never");
      return r.status?.lastFailure?.reason === "StartTimeout" ? r : undefined;
    }, { timeoutMs: 60_000 });
    expect(failed.status).toMatchObject({ phase: "NeedsHumanIntervention", reason: "RecoveryBudgetExhausted" });
    expect(failed.status.lastFailure.message).toContain("did not start within 8s");
  });

  it("completes when the agent container exits 0, whatever its sidecars do, and removes a classic sidecar with the pod", async () => {
    const sidecar = { name: "proxy", image: inject("image"), command: ["/nodejs/bin/node", "-e", "setInterval(() => {}, 1000)"] };
    const quick = { EXAMPLE_STEPS: "2", EXAMPLE_STEP_DELAY_MS: "300" };
    await client.create(paths.runs(ns), run("classic", example("healthy", quick), { heartbeatTimeout: "30s", agentContainer: "agent" }, { containers: [sidecar, example("healthy", quick)] }));
    await client.create(
      paths.runs(ns),
      run("native", example("healthy", quick), { heartbeatTimeout: "30s" }, { initContainers: [{ ...sidecar, restartPolicy: "Always" }] }),
    );
    for (const name of ["classic", "native"]) {
      const done = await waitFor(`${name} to complete`, async () => {
        const r = await getRun(name);
        if (["Queued", "NeedsHumanIntervention", "Failed"].includes(r.status?.phase) && r.status?.lastFailure) throw new Error(`${name}: ${r.status.lastFailure.message}`);
        return r.status?.phase === "Completed" ? r : undefined;
      }, { timeoutMs: 90_000 });
      expect(done.status).toMatchObject({ attempt: 1, restarts: 0 });
    }
    // The classic sidecar outlived the agent: its pod was deleted (the pod's own grace), and goes.
    await waitFor("the classic pod's sidecar to stop", async () => (await podsOf("classic")).every((p) => p.status.phase !== "Running"), { timeoutMs: 60_000 });
  });
});
