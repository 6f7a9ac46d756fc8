// The guarantees against a sandbox that is broken or hostile, a person in a hurry with kubectl, and
// clocks that disagree, each against the real API server with a real operator process. Each
// describe is one class of defect (numbered as in test/unit/watchdog/hostile.test.ts); each test
// failed on the code before its fix. The test plays the kubelet (pod status) and the sandbox
// (status merge patches under the SDK's field manager). Classes 1 and 3 also run on the real node
// (test/node/guarantees.test.ts), where what runs is checked in containerd.
import { existsSync, readdirSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { FINALIZER, SANDBOX_FIELD_MANAGER } from "../../operator/api/annotations.ts";
import { ApiError, isNotFound, paths, type Json, type KubeClient } from "../../operator/kube/client.ts";
import { condition, createRun, getRun, kubeconfigPath, listPods, ofAttempt, runManifest } from "../support/cluster.ts";
import { startFaultProxy } from "../support/fault-proxy.ts";
import { annotate, beat, cluster, keepBeating, phaseOf, podOf, running, warnings } from "../support/guarantees.ts";
import { startOperator } from "../support/operator-process.ts";
import { setPodPhase, writeToolCalls } from "../support/sandbox.ts";
import { holds, waitFor } from "../support/wait.ts";

const S = 1000;
const H = 3600 * S;

const gone = (client: KubeClient, path: string) => client.get(path).then(() => false, (err) => (isNotFound(err) ? true : Promise.reject(err)));

/** The kubelet's report that the agent runs, with its own (possibly wrong) clock's start time. */
function runningSince(client: KubeClient, ns: string, pod: string, startedAt: string): Promise<Json> {
  return client.mergePatch(paths.podStatus(ns, pod), {
    status: { phase: "Running", containerStatuses: [{ name: "agent", image: "agent-watchdog:test", imageID: "", ready: true, restartCount: 0, state: { running: { startedAt } } }] },
  });
}

/** A status write as the sandbox SDK makes it. */
function sandboxWrite(client: KubeClient, ns: string, run: string, status: Json): Promise<Json> {
  return client.mergePatch(paths.runStatus(ns, run), { status }, { fieldManager: SANDBOX_FIELD_MANAGER });
}

describe("2. a pod is the run's pod until it is confirmed gone, whatever happens to its labels", () => {
  const env = cluster("quarantine");

  it("keeps a quarantined pod (run label and owner reference removed) as the current attempt, and replaces it only once it is gone", async () => {
    const { client, ns } = env;
    await createRun(client, ns, runManifest("q", { heartbeatTimeout: "20s", backoff: { initial: "1s" } }, { template: { spec: { terminationGracePeriodSeconds: 1, containers: [{ name: "agent", image: "agent-watchdog:test" }] } } }));
    const pod = await running(env, "q", 1);
    const beats = keepBeating(env, [{ run: "q", attempt: 1 }], 1000);
    try {
      await phaseOf(env, "q", "Planning");
      // Quarantined for debugging: out of the run's label selector and owned by nobody.
      await client.request("PATCH", paths.pod(ns, pod.metadata.name), {
        body: [
          { op: "remove", path: "/metadata/labels/watchdog.dev~1run" },
          { op: "remove", path: "/metadata/ownerReferences" },
        ],
        contentType: "application/json-patch+json",
      });
      await holds("no second pod, the run still on attempt 1", async () => {
        const r = await getRun(client, ns, "q");
        const all = (await client.get<{ items: any[] }>(paths.pods(ns))).items;
        return r.status?.phase === "Planning" && r.status.attempt === 1 && r.status.restarts === 0 && all.length === 1;
      }, 8000, 250);
    } finally {
      await beats.stop();
    }
    // Its container stops and someone deletes it: only now is attempt 2 started.
    await client.delete(paths.pod(ns, pod.metadata.name), { apiVersion: "v1", kind: "DeleteOptions", gracePeriodSeconds: 0 });
    const next = await podOf(env, "q", 2, undefined, 90_000);
    expect(next.metadata.name).not.toBe(pod.metadata.name);
  });
});

describe("3. deletion of a run is supervised", () => {
  const env = cluster("deletion");

  it("keeps the watchdog on a run held by another controller's finalizer, removes its sandbox, and lets its own finalizer go only then", async () => {
    const { client, ns } = env;
    const manifest = runManifest("held", { heartbeatTimeout: "30s" });
    (manifest.metadata as Json).finalizers = ["example.com/hold"];
    await createRun(client, ns, manifest);
    const pod = await running(env, "held", 1);
    await beat(env, "held", 1, "Planning");
    const planning = await phaseOf(env, "held", "Planning");
    expect(planning.metadata.finalizers).toEqual(expect.arrayContaining([FINALIZER, "example.com/hold"]));
    await client.delete(paths.run(ns, "held"));
    // Being deleted, held by the other finalizer: its sandbox goes first, then the watchdog's finalizer.
    await waitFor("the sandbox deleted", async () => {
      const p = await client.get<any>(paths.pod(ns, pod.metadata.name)).catch((err) => (isNotFound(err) ? undefined : Promise.reject(err)));
      return !p || p.metadata.deletionTimestamp ? true : undefined;
    });
    await setPodPhase(client, ns, pod.metadata.name, "Failed", 143).catch(() => undefined);
    await waitFor("the pod gone", () => gone(client, paths.pod(ns, pod.metadata.name)), { timeoutMs: 60_000 });
    const held = await waitFor("the watchdog's finalizer removed", async () => {
      const r = await getRun(client, ns, "held");
      return (r.metadata.finalizers ?? []).includes(FINALIZER) ? undefined : r;
    });
    expect(held.metadata.finalizers).toEqual(["example.com/hold"]);
    await client.mergePatch(paths.run(ns, "held"), { metadata: { finalizers: null } });
  });

  it("never starts a re-applied run of the same name while the deleted one's sandbox may run", async () => {
    const { client, ns } = env;
    const template = { template: { spec: { terminationGracePeriodSeconds: 2, containers: [{ name: "agent", image: "agent-watchdog:test" }] } } };
    await createRun(client, ns, runManifest("again", { heartbeatTimeout: "30s" }, template));
    const old = await running(env, "again", 1);
    await beat(env, "again", 1, "Planning");
    await phaseOf(env, "again", "Planning");
    await client.delete(paths.run(ns, "again"));
    // The person applies it again at once, and again until it is taken: refused (409, being
    // deleted) while the old run stays, and the old run stays until its sandbox is gone.
    let oldPodGoneAt: number | undefined;
    const created = await waitFor("the run re-applied", async () => {
      if (oldPodGoneAt === undefined && (await gone(client, paths.pod(ns, old.metadata.name)))) oldPodGoneAt = Date.now();
      try {
        const taken = await createRun(client, ns, runManifest("again", { heartbeatTimeout: "30s" }, template));
        // The old sandbox and run may both go between the look above and this create: then the
        // sandbox must be gone now, or the old run was let go while it still existed.
        if (oldPodGoneAt === undefined && (await gone(client, paths.pod(ns, old.metadata.name)))) oldPodGoneAt = Date.now();
        return taken;
      } catch (err) {
        if (err instanceof ApiError && err.code === 409) return undefined;
        throw err;
      }
    }, { timeoutMs: 120_000, intervalMs: 100 });
    expect(oldPodGoneAt, "the old run went only after its sandbox").toBeDefined();
    const fresh = await podOf(env, "again", 1, (created.metadata as { uid: string }).uid);
    expect(fresh.metadata.uid).not.toBe(old.metadata.uid);
    expect(Date.parse(fresh.metadata.creationTimestamp)).toBeGreaterThanOrEqual(Math.floor((oldPodGoneAt as number) / 1000) * 1000 - 1000);
  });
});

describe("4. spec.suspend always wins", () => {
  const env = cluster("suspend");

  it("gives a run stopped for a person, suspended, then resumed, no pod until it is unsuspended", async () => {
    const { client, ns } = env;
    await createRun(client, ns, runManifest("s", { heartbeatTimeout: "30s", maxRestarts: 0 }));
    const first = await running(env, "s", 1);
    await beat(env, "s", 1, "Planning");
    await phaseOf(env, "s", "Planning");
    await setPodPhase(client, ns, first.metadata.name, "Failed", 1);
    await phaseOf(env, "s", "NeedsHumanIntervention");
    await client.mergePatch(paths.run(ns, "s"), { spec: { suspend: true } });
    await annotate(env, "s", { "watchdog.dev/resume": "go" });
    await waitFor("the resume recorded", async () => ((await getRun(client, ns, "s")).status?.observedResume === "go" ? true : undefined));
    await holds("no second pod while suspended", async () => (await listPods(client, ns, "s")).filter(ofAttempt(2)).length === 0, 4000, 100);
    expect((await getRun(client, ns, "s")).status.phase).toBe("Suspended");
    await client.mergePatch(paths.run(ns, "s"), { spec: { suspend: false } });
    await podOf(env, "s", 2);
  });
});

describe("5. answers bind to the request they name, end to end", () => {
  const env = cluster("answers2");

  /** The sandbox asks, as the SDK does: the question and its key in the checkpoint, and AwaitingReply. */
  const ask = (run: string, attempt: number, question: string, key: string) =>
    sandboxWrite(env.client, env.ns, run, {
      heartbeat: { time: new Date().toISOString(), attempt, state: "AwaitingReply" },
      checkpoint: { step: 1, data: { "watchdog.dev/approval-request": { question, askedAt: new Date().toISOString(), key }, data: {} } },
    });

  it("ends a request when the run leaves the wait, refuses an answer to it, and records the question as asked", async () => {
    const { client, ns } = env;
    await createRun(client, ns, runManifest("w", { heartbeatTimeout: "30s", releaseAwaitingAfter: "5m" }));
    await running(env, "w", 1);
    await ask("w", 1, "Deploy v2?", "k1");
    const asked = await waitFor("a pending request", async () => {
      const r = await getRun(client, ns, "w");
      return r.status?.approval?.state === "Pending" ? r : undefined;
    });
    expect(asked.status.approval).toMatchObject({ question: "Deploy v2?", requestKey: "k1", attempt: 1 });
    const id = asked.status.approval.id as string;
    // The sandbox rewrites its checkpoint: the recorded question stays as it was asked.
    await sandboxWrite(client, ns, "w", { checkpoint: { step: 1, data: { "watchdog.dev/approval-request": { question: "Delete production?", askedAt: new Date().toISOString(), key: "k1" } } } });
    await beat(env, "w", 1, "Planning"); // the agent moved on without an answer
    const withdrawn = await waitFor("the request withdrawn", async () => {
      const r = await getRun(client, ns, "w");
      return r.status?.approval?.state === "Withdrawn" ? r : undefined;
    });
    expect(withdrawn.status.approval).toMatchObject({ id, question: "Deploy v2?" });
    await annotate(env, "w", { "watchdog.dev/approve": "yes", "watchdog.dev/approval-id": id });
    const refusal = await waitFor("the answer refused", async () => (await warnings(env, "w", "AnswerRefused"))[0]);
    expect(refusal.note).toContain("withdrawn");
    // It asks something else: the old answer was never kept to approve it.
    await ask("w", 1, "Rotate the keys?", "k2");
    const second = await waitFor("a second request", async () => {
      const r = await getRun(client, ns, "w");
      return r.status?.approval?.state === "Pending" && r.status.approval.id !== id ? r : undefined;
    });
    expect(second.status.approval).toMatchObject({ question: "Rotate the keys?", requestKey: "k2" });
    await holds("the second request stays pending", async () => (await getRun(client, ns, "w")).status?.approval?.state === "Pending", 2000, 200);
  });

  it("gives an approved run whose sandbox is released before it reads the answer a new sandbox that gets it", async () => {
    const { client, ns } = env;
    await createRun(client, ns, runManifest("rel", { heartbeatTimeout: "30s", releaseAwaitingAfter: "4s" }));
    const first = await running(env, "rel", 1);
    await ask("rel", 1, "Ship it?", "k3");
    const pending = await waitFor("a pending request", async () => {
      const r = await getRun(client, ns, "rel");
      return r.status?.approval?.state === "Pending" ? r : undefined;
    });
    await annotate(env, "rel", { "watchdog.dev/approve": "ship it", "watchdog.dev/approval-id": pending.status.approval.id });
    await waitFor("approved", async () => ((await getRun(client, ns, "rel")).status?.approval?.state === "Approved" ? true : undefined));
    // The sandbox never reads it; the release comes.
    await waitFor("the first pod released", async () => {
      const p = await client.get<any>(paths.pod(ns, first.metadata.name)).catch((err) => (isNotFound(err) ? undefined : Promise.reject(err)));
      return !p || p.metadata.deletionTimestamp ? true : undefined;
    }, { timeoutMs: 20_000 });
    await setPodPhase(client, ns, first.metadata.name, "Failed", 143).catch(() => undefined);
    await podOf(env, "rel", 2, undefined, 60_000);
    const resumed = await getRun(client, ns, "rel");
    expect(resumed.status.approval).toMatchObject({ state: "Approved", answer: "ship it", requestKey: "k3" });
  });
});

describe("6. no input wedges a run", () => {
  const env = cluster("wedge");

  /** The largest checkpoint the API server still takes, to within `precision` bytes. */
  async function fillToTheLimit(run: string, precision = 512): Promise<number> {
    let low = 0;
    let high = 3 * 1024 * 1024;
    while (high - low > precision) {
      const size = Math.floor((low + high) / 2);
      try {
        await sandboxWrite(env.client, env.ns, run, { checkpoint: { step: 1, data: { blob: "x".repeat(size) } } });
        low = size;
      } catch {
        high = size;
      }
    }
    // The operator may have written to the run meanwhile, so the largest size of the search can be
    // a little too large now: step down until the write is taken.
    for (let size = low; ; size -= precision) {
      try {
        await sandboxWrite(env.client, env.ns, run, { checkpoint: { step: 1, data: { blob: "x".repeat(size) } } });
        return size;
      } catch (err) {
        if (size <= low - 16 * precision) throw err;
      }
    }
  }

  it("stops a hung sandbox whose status fills the object to the storage limit, and says why, instead of failing every write", async () => {
    const { client, ns } = env;
    await createRun(client, ns, runManifest("big", { heartbeatTimeout: "8s", backoff: { initial: "1s" } }));
    const pod = await running(env, "big", 1);
    await beat(env, "big", 1, "Planning");
    await phaseOf(env, "big", "Planning");
    const size = await fillToTheLimit("big");
    expect(size).toBeGreaterThan(1_000_000);
    const stopped = await waitFor("the run stopped for a person", async () => {
      const r = await getRun(client, ns, "big");
      return r.status?.phase === "NeedsHumanIntervention" ? r : undefined;
    }, { timeoutMs: 60_000 });
    expect(["StatusWriteRefused", "SandboxReportTooLarge"]).toContain(stopped.status.reason);
    expect(stopped.status.message).toMatch(/too large|limit/);
    await waitFor("the sandbox deleted", async () => {
      const p = await client.get<any>(paths.pod(ns, pod.metadata.name)).catch((err) => (isNotFound(err) ? undefined : Promise.reject(err)));
      return !p || p.metadata.deletionTimestamp ? true : undefined;
    });
  });

  it("resumes once for a resume token of 256 characters and more, cut inside a surrogate pair", async () => {
    const { client, ns } = env;
    await createRun(client, ns, runManifest("tok", { heartbeatTimeout: "30s", maxRestarts: 0 }));
    const first = await running(env, "tok", 1);
    await setPodPhase(client, ns, first.metadata.name, "Failed", 1);
    await phaseOf(env, "tok", "NeedsHumanIntervention");
    await annotate(env, "tok", { "watchdog.dev/resume": `${"a".repeat(255)}😀 and more` });
    const second = await running(env, "tok", 2);
    await setPodPhase(client, ns, second.metadata.name, "Failed", 1);
    await phaseOf(env, "tok", "NeedsHumanIntervention");
    await holds("the same token does not resume it again", async () => (await getRun(client, ns, "tok")).status?.phase === "NeedsHumanIntervention", 4000, 250);
    expect((await listPods(client, ns, "tok")).filter(ofAttempt(3))).toEqual([]);
  });

  it("records a non-ASCII Warning whose note is longer than the API takes in bytes", async () => {
    const { client, ns } = env;
    await createRun(client, ns, runManifest("utf", { heartbeatTimeout: "30s", maxConsecutiveToolFailures: 2 }));
    await running(env, "utf", 1);
    await beat(env, "utf", 1, "Planning");
    await phaseOf(env, "utf", "Planning");
    // A tool name of 256 four-byte characters: within the CRD's 256 characters, 1 kB in bytes. The
    // ToolLoop Warning quotes it; cut by characters, its note was over the API's 1 kB and refused.
    const name = "🔁".repeat(256);
    const failed = (id: string) => ({ id, attempt: 1, name, argsHash: "h", state: "Failed", error: { message: "no" } });
    await writeToolCalls(client, ns, "utf", [failed("a"), failed("b")]);
    await phaseOf(env, "utf", "NeedsHumanIntervention");
    const events = await waitFor("the ToolLoop Warning", async () => {
      const found = await warnings(env, "utf", "ToolLoop");
      return found.length ? found : undefined;
    });
    expect(Buffer.byteLength(events[0].note)).toBeLessThanOrEqual(1024);
    expect(events[0].note).toContain("🔁");
  });
});

describe("7. no clock but the API server's decides a kill", () => {
  const env = cluster("clocks");

  it("neither kills a pod whose node's clock is behind before its first heartbeat is due, nor keeps one whose node is ahead alive", async () => {
    const { client, ns } = env;
    await createRun(client, ns, runManifest("behind", { heartbeatTimeout: "6s" }));
    await createRun(client, ns, runManifest("ahead", { heartbeatTimeout: "6s" }));
    const behind = await podOf(env, "behind", 1);
    const ahead = await podOf(env, "ahead", 1);
    const startedAt = Date.now();
    await runningSince(client, ns, behind.metadata.name, new Date(startedAt - H).toISOString());
    await runningSince(client, ns, ahead.metadata.name, new Date(startedAt + H).toISOString());
    await holds("neither is killed before its timeout", async () => {
      const r = await getRun(client, ns, "behind");
      return r.status?.attempt === 1 && r.status.phase === "Starting";
    }, 4000, 200);
    const killed = await waitFor("the silent sandbox on the node ahead killed", async () => {
      const r = await getRun(client, ns, "ahead");
      return r.status?.lastFailure?.reason === "HeartbeatTimeout" ? r : undefined;
    }, { timeoutMs: 20_000 });
    expect(Date.parse(killed.status.lastFailure.time) - startedAt).toBeLessThan(15 * S);
  });
});

describe("7. no clock but the API server's: the operator's own", () => {
  const env = cluster("own-clock");
  /** libfaketime, from Debian's faketime: every clock of the process it is preloaded into runs off. */
  const libfaketime = readdirSync("/usr/lib").map((d) => join("/usr/lib", d, "faketime/libfaketime.so.1")).find((f) => existsSync(f));

  it("neither kills a healthy run nor spares a dead one when the operator's own clock is an hour ahead", async () => {
    const { client, ns } = env;
    expect(libfaketime, "Debian's faketime must be installed").toBeDefined();
    await env.operator.stop();
    env.operator = await startOperator(ns, [], { LD_PRELOAD: libfaketime as string, FAKETIME: "+1h", FAKETIME_DONT_FAKE_MONOTONIC: "1" });
    try {
      await createRun(client, ns, runManifest("skewed", { heartbeatTimeout: "6s" }));
      const pod = await running(env, "skewed", 1);
      const beats = keepBeating(env, [{ run: "skewed", attempt: 1 }], 1000);
      try {
        await phaseOf(env, "skewed", "Planning");
        await holds("the healthy run is not killed", async () => !(await client.get<any>(paths.pod(ns, pod.metadata.name))).metadata.deletionTimestamp, 10_000, 250);
      } finally {
        await beats.stop();
      }
      const stoppedAt = Date.now();
      const killed = await waitFor("the silent sandbox killed", async () => {
        const r = await getRun(client, ns, "skewed");
        return r.status?.lastFailure?.reason === "HeartbeatTimeout" ? r : undefined;
      }, { timeoutMs: 30_000 });
      expect(Date.now() - stoppedAt).toBeLessThan(15 * S);
      expect(killed.status.attempt).toBe(2);
    } finally {
      await env.operator.stop();
      env.operator = await startOperator(ns);
    }
  });
});

describe("8. a spec edit never kills a healthy run", () => {
  const env = cluster("edit");

  it("counts a lowered heartbeatTimeout from the edit, so a sandbox on the old interval learns it before it is judged", async () => {
    const { client, ns } = env;
    await createRun(client, ns, runManifest("edit", { heartbeatTimeout: "2m" }));
    const pod = await running(env, "edit", 1);
    await beat(env, "edit", 1, "Planning");
    await phaseOf(env, "edit", "Planning");
    // Its last heartbeat is older than the new timeout when the edit lands.
    await new Promise((resolve) => setTimeout(resolve, 7 * S));
    await client.mergePatch(paths.run(ns, "edit"), { spec: { watchdog: { heartbeatTimeout: "5s" } } });
    await waitFor("the edit seen", async () => ((await getRun(client, ns, "edit")).status?.watchdog?.heartbeatTimeout === "5s" ? true : undefined));
    // It learns the new timeout and beats within it.
    const beats = keepBeating(env, [{ run: "edit", attempt: 1 }], 1500);
    try {
      await holds("the healthy run is not killed", async () => {
        const r = await getRun(client, ns, "edit");
        return r.status?.attempt === 1 && r.status.restarts === 0 && !(await client.get<any>(paths.pod(ns, pod.metadata.name))).metadata.deletionTimestamp;
      }, 8000, 250);
    } finally {
      await beats.stop();
    }
  });
});

describe("9. rate limits do not hide crashes", () => {
  const env = cluster("ratelimit");
  const throttled = (attempt: number) => [{ id: `c-${attempt}`, attempt, name: "model", argsHash: "h", state: "Failed", error: { message: "429", httpStatus: 429, retryAfterSeconds: 1 } }];

  it("spends a restart on a crash after a 429, and a rate-limit allowance, ending with a person, on the SDK's rate-limited exit", async () => {
    const { client, ns } = env;
    await createRun(client, ns, runManifest("rl", { heartbeatTimeout: "30s", maxRestarts: 2, maxRateLimitRequeues: 1, backoff: { initial: "1s" }, rateLimitBackoff: { initial: "1s" } }));
    const first = await running(env, "rl", 1);
    await writeToolCalls(client, ns, "rl", throttled(1));
    await setPodPhase(client, ns, first.metadata.name, "Failed", 1); // a crash, whatever the last call was
    const crashed = await waitFor("attempt 1 counted as a crash", async () => {
      const r = await getRun(client, ns, "rl");
      return r.status?.attempt === 2 ? r : undefined;
    });
    expect(crashed.status).toMatchObject({ restarts: 1, lastFailure: expect.objectContaining({ reason: "PodFailed" }) });
    const second = await running(env, "rl", 2);
    await writeToolCalls(client, ns, "rl", throttled(2));
    await setPodPhase(client, ns, second.metadata.name, "Failed", 6); // gave up on the rate limit
    const limited = await waitFor("attempt 2 requeued for the rate limit", async () => {
      const r = await getRun(client, ns, "rl");
      return r.status?.attempt === 3 ? r : undefined;
    });
    expect(limited.status).toMatchObject({ restarts: 1, rateLimitRequeues: 1, lastFailure: expect.objectContaining({ reason: "RateLimited" }) });
    const third = await running(env, "rl", 3, undefined);
    await writeToolCalls(client, ns, "rl", throttled(3));
    await setPodPhase(client, ns, third.metadata.name, "Failed", 6);
    const stopped = await phaseOf(env, "rl", "NeedsHumanIntervention");
    expect(stopped.status).toMatchObject({ reason: "RateLimitRequeuesExhausted", restarts: 1 });
  });
});

describe("10. a refused write never carries a kill a newer heartbeat would have refused", () => {
  const env = cluster("refused");

  it.each([
    ["429 from API Priority and Fairness", "tooManyRequests"],
    ["a 503", "unavailable"],
    ["a timeout", "timeout"],
  ] as const)("does not delete a pod behind a status write refused with %s, while the sandbox heartbeats again", async (_, fault) => {
    const { client, ns } = env;
    const proxy = await startFaultProxy(kubeconfigPath());
    const run = `slow-${fault.toLowerCase()}`;
    try {
      await env.operator.stop();
      env.operator = await startOperator(ns, [], { KUBECONFIG: proxy.kubeconfig });
      await createRun(client, ns, runManifest(run, { heartbeatTimeout: "5s" }));
      const pod = await running(env, run, 1);
      await beat(env, run, 1, "Planning");
      await phaseOf(env, run, "Planning");
      // From now on the operator's status writes are turned away. The sandbox is slow for longer
      // than its timeout: the operator decides to kill it, and that write is refused. Then the
      // sandbox heartbeats again.
      proxy.refuse((method, path) => method === "PATCH" && path === paths.runStatus(ns, run), fault);
      await waitFor("the kill's status write refused", () => (proxy.refused > 0 ? true : undefined), { timeoutMs: 30_000 });
      const beats = keepBeating(env, [{ run, attempt: 1 }], 1000);
      try {
        await holds("the pod is not deleted while its writes are refused", async () => !(await client.get<any>(paths.pod(ns, pod.metadata.name))).metadata.deletionTimestamp, 5000, 200);
        proxy.refuse(undefined);
        await holds("the healthy run runs on once writes are taken again", async () => {
          const r = await getRun(client, ns, run);
          return r.status?.attempt === 1 && !(await client.get<any>(paths.pod(ns, pod.metadata.name))).metadata.deletionTimestamp;
        }, 4000, 250);
      } finally {
        await beats.stop();
      }
      expect(condition(await getRun(client, ns, run), "Running")?.status).toBe("True");
    } finally {
      proxy.refuse(undefined);
      await env.operator.stop();
      env.operator = await startOperator(ns);
      await proxy.close();
    }
  });
});
