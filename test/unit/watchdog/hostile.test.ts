// The guarantees against a sandbox that is broken or hostile, a person in a hurry with kubectl, and
// clocks that disagree, decided by the pure core. Each describe is one class of defect; each test
// fails on the code before its fix. The same classes run against the real API server in
// test/integration/hostile.test.ts (and on the real node in test/node/guarantees.test.ts).
import { describe, expect, it } from "vitest";
import { FINALIZER } from "../../../operator/api/annotations.ts";
import { MAX_SANDBOX_STATUS_BYTES } from "../../../operator/api/limits.ts";
import { decide } from "../../../operator/watchdog/decide.ts";
import { storedResumeToken } from "../../../operator/watchdog/policy/lifecycle.ts";
import { T0, iso, pod, run } from "../fixtures.ts";
import { World, startedWorld } from "../world.ts";

const S = 1000;
const M = 60 * S;
const H = 60 * M;
const quick = { watchdog: { heartbeatTimeout: "1m", backoff: { initial: "10s", factor: 2, max: "1m" }, unconfirmedAfter: "2m" } };

const started = (spec: Record<string, unknown> = quick) => startedWorld(spec);

/** Heartbeats every `every` ms until `until`, reconciling at each wake-up in between. */
function beatUntil(w: World, until: number, every: number, state: "Planning" | "ExecutingTool" | "AwaitingReply" = "Planning"): void {
  while (w.now < until) {
    w.runUntil(Math.min(until, w.now + every));
    if (w.now < until || w.now === until) w.heartbeat(state);
    w.settle();
  }
}

describe("1. confirmation waits for the grace the kubelet will really use", () => {
  it("waits for the pod's own long grace after a force delete, not the kill's 2 s", () => {
    const w = started({ ...quick, template: { spec: { terminationGracePeriodSeconds: 300, containers: [{ name: "agent", image: "agent:1" }] } } });
    expect(w.status.podGracePeriodSeconds).toBe(300);
    w.kubelet = "cutOff";
    w.runUntil(w.now + 1 * M + 1 * S); // hung: killed with 2 s, the node cannot act on it
    expect(w.status.terminating).toEqual([expect.objectContaining({ gracePeriodSeconds: 2, podGracePeriodSeconds: 300 })]);
    w.forceDeleteByOthers();
    w.runUntil(w.now + 5 * M);
    const back = w.now;
    w.nodeBack();
    // A kubelet that relists never saw the 2 s deletion: it stops the container with the pod's 300 s.
    w.runUntil(back + 300 * S);
    expect(w.created).toHaveLength(1);
    w.runUntil(back + 330 * S);
    expect(w.created).toHaveLength(2);
    expect(w.violations).toEqual([]);
  });

  it("records the grace a pod was created with, for a pod that vanishes while nobody watches", () => {
    const w = started({ ...quick, template: { spec: { terminationGracePeriodSeconds: 120, containers: [{ name: "agent", image: "agent:1" }] } } });
    w.status.nodeName = "node-1";
    w.kubelet = "cutOff";
    w.podVanishedUnseen();
    w.restartOperator();
    w.runUntil(w.now + 3 * M);
    expect(w.status.terminating?.[0]).toMatchObject({ gracePeriodSeconds: 120, podGracePeriodSeconds: 120 });
    const back = w.now;
    w.nodeBack();
    w.runUntil(back + 120 * S);
    expect(w.created).toHaveLength(1);
    w.runUntil(back + 150 * S);
    expect(w.created).toHaveLength(2);
  });

  it("takes a last state that shows every container stopped as the kubelet's word, with no wait", () => {
    const w = started();
    w.kubelet = "slow";
    w.runUntil(w.now + 1 * M + 1 * S);
    const dying = [...w.pods.values()][0]!;
    dying.status = { phase: "Running", containerStatuses: [{ name: "agent", state: { terminated: { exitCode: 137 } } }] };
    w.pods.delete(dying.metadata.name);
    w.tombstones.push(structuredClone(dying));
    w.kubelet = "cutOff"; // even with its node silent: the kubelet reported the stop before the object went
    w.runUntil(w.now + 11 * S);
    expect(w.created).toHaveLength(2);
  });

  it("does not take the pod garbage collector's Failed for a stop: its containers may still run", () => {
    const w = started();
    w.kubelet = "cutOff";
    w.runUntil(w.now + 1 * M + 1 * S);
    const [gc] = [...w.pods.values()];
    gc!.status = { phase: "Failed", containerStatuses: [{ name: "agent", state: { running: { startedAt: iso(T0) } } }] };
    w.runUntil(w.now + 5 * M);
    expect(w.created).toHaveLength(1);
  });
});

describe("2. a pod is the run's pod until it is confirmed gone, whatever happens to its labels", () => {
  it("keeps a pod whose owner reference was removed as the current attempt: no crash, no replacement", () => {
    const w = started();
    const current = w.currentPod()!;
    delete current.metadata.ownerReferences;
    for (let i = 0; i < 10; i++) {
      w.advance(20 * S);
      w.heartbeat("Planning");
      w.settle();
    }
    expect(w.status).toMatchObject({ phase: "Planning", attempt: 1, restarts: 0 });
    expect(w.created).toHaveLength(1);
  });

  it("keeps a relabelled pod, looked up by name, as the current attempt", () => {
    const r = run({
      status: { phase: "Planning", attempt: 1, restarts: 0, podName: "r-1", podUID: "uid-pod-1", nodeName: "node-1", podGracePeriodSeconds: 30 },
    });
    r.metadata.finalizers = [FINALIZER];
    const quarantined = pod(1, { nodeName: "node-1" });
    delete quarantined.metadata.labels["watchdog.dev/run"];
    delete quarantined.metadata.ownerReferences;
    // Not in the label-selected cache; the controller found it by name.
    const plan = decide({ run: r, pods: [], detachedPods: [quarantined], now: T0 + 10 * S });
    expect(plan.phase).toBe("Planning");
    expect(plan.createPod).toBeUndefined();
    expect(plan.deletePods).toEqual([]);
    expect(plan.status?.terminating).toBeUndefined();
  });
});

describe("3. deletion of a run is supervised", () => {
  it("puts the finalizer on before the first pod, and never creates a pod for a run being deleted", () => {
    const w = new World(quick);
    const plan = w.reconcile();
    expect(plan.createPod).toBeDefined();
    expect(plan.finalizer).toBe("add");
    expect(w.run.metadata.finalizers).toEqual([FINALIZER]);
  });

  it("keeps a deleted run, and its watchdog, until its sandbox is confirmed gone; then lets it go", () => {
    const w = started();
    w.kubelet = "cutOff";
    w.deleteRun();
    w.settle();
    expect(w.runGone).toBe(false);
    expect(w.deleted).toHaveLength(1); // its sandbox goes first, with its own grace
    w.runUntil(w.now + 5 * M);
    expect(w.runGone).toBe(false);
    expect(w.condition("SandboxUnconfirmed")?.status).toBe("True");
    w.nodeBack();
    w.runUntil(w.now + 10 * S);
    expect(w.runGone).toBe(true);
    expect(w.created).toHaveLength(1);
    expect(w.violations).toEqual([]);
  });

  it("lets a finished run, or one waiting for a person, go without the operator: the finalizer comes off once nothing may run", () => {
    const w = started();
    w.podExit(0);
    w.settle();
    expect(w.status.phase).toBe("Completed");
    expect(w.run.metadata.finalizers).toEqual([]);

    const v = started({ watchdog: { ...quick.watchdog, maxRestarts: 0 } });
    v.podExit(1);
    v.settle();
    expect(v.status.phase).toBe("NeedsHumanIntervention");
    expect(v.run.metadata.finalizers).toEqual([]);
    // Resumed: the finalizer goes on again before the next pod exists.
    v.annotate("watchdog.dev/resume", "go");
    const plan = v.reconcile();
    expect(plan).toMatchObject({ finalizer: "add", createPod: expect.anything() });
    expect(v.violations).toEqual([]);
  });
});

describe("4. spec.suspend always wins", () => {
  it("does not start a pod, not even for one reconcile, for a suspended run that is resumed", () => {
    const w = started({ watchdog: { ...quick.watchdog, maxRestarts: 0 } });
    w.podExit(1);
    w.settle();
    expect(w.status.phase).toBe("NeedsHumanIntervention");
    w.setSpec({ suspend: true });
    w.settle();
    w.annotate("watchdog.dev/resume", "go");
    const plans = [w.reconcile(), ...[1, 2, 3].map(() => w.reconcile())];
    expect(plans.map((p) => p.createPod)).toEqual([undefined, undefined, undefined, undefined]);
    expect(w.status.phase).toBe("Suspended");
    expect(w.created).toHaveLength(1);
    w.setSpec({ suspend: false });
    w.settle();
    expect(w.created).toHaveLength(2);
    expect(w.violations).toEqual([]);
  });
});

describe("5. answers bind to the request they name, end to end", () => {
  const asking = { watchdog: { heartbeatTimeout: "1m", releaseAwaitingAfter: "5m" } };

  it("ends a request when the run leaves the wait, and refuses an answer to it afterwards", () => {
    const w = started(asking);
    w.heartbeat("AwaitingReply");
    w.settle();
    const asked = w.status.approval.id;
    w.advance(1 * S);
    w.heartbeat("Planning"); // the agent moved on without an answer
    w.settle();
    expect(w.status.approval).toMatchObject({ id: asked, state: "Withdrawn" });
    w.answer("approve", "too late", asked);
    w.settle();
    expect(w.events().filter((e) => e.reason === "AnswerRefused").at(-1)?.note).toContain("withdrawn");
    w.advance(1 * S);
    w.heartbeat("AwaitingReply"); // and asks something else
    w.settle();
    const second = w.status.approval.id;
    expect(second).not.toBe(asked);
    w.answer("approve", "yes to the first question", asked);
    w.settle();
    expect(w.status.approval).toMatchObject({ id: second, state: "Pending" });
    expect(w.events().filter((e) => e.reason === "AnswerRefused")).toHaveLength(2);
  });

  it("never lets an answer read against one request approve the request that replaces it", () => {
    const w = started({ watchdog: { ...asking.watchdog, maxRestarts: 3 } });
    w.heartbeat("AwaitingReply");
    w.settle();
    const asked = w.status.approval.id;
    w.podExit(1); // the sandbox dies while waiting
    w.answer("approve", "yes", asked); // given at the same moment
    w.runUntil(w.now + 2 * M); // backoff, attempt 2 starts
    w.podRunning();
    w.heartbeat("AwaitingReply");
    w.settle();
    expect(w.status.approval.id).not.toBe(asked);
    expect(w.status.approval.state).toBe("Pending");
  });

  it("gives an approved run whose sandbox was released before it read the answer a new sandbox", () => {
    const w = started(asking);
    w.heartbeat("AwaitingReply");
    w.settle();
    w.answer("approve", "ship it");
    w.settle();
    expect(w.status.approval.state).toBe("Approved");
    // The sandbox has not read it yet when the release comes.
    w.runUntil(w.now + 5 * M + 1 * S);
    expect(w.created.map((c) => c.attempt)).toEqual([1, 2]);
    expect(w.status.approval).toMatchObject({ state: "Approved", answer: "ship it" });
    expect(w.status.phase).toBe("Starting");
  });

  it("records the question and the key the sandbox gave it, whatever the sandbox writes later", () => {
    const w = started(asking);
    w.run.status.checkpoint = { step: 2, data: { "watchdog.dev/approval-request": { question: "Deploy v2?", askedAt: iso(w.now), key: "k-1" }, data: {} } };
    w.heartbeat("AwaitingReply");
    w.settle();
    expect(w.status.approval).toMatchObject({ state: "Pending", question: "Deploy v2?", requestKey: "k-1", attempt: 1 });
    w.run.status.checkpoint.data["watchdog.dev/approval-request"].question = "Delete production?";
    w.heartbeat("AwaitingReply");
    w.settle();
    expect(w.status.approval.question).toBe("Deploy v2?");
  });
});

describe("6. no input wedges a run", () => {
  it("stops a sandbox that fills its status past the protocol's bound, before the object has no room", () => {
    const w = started();
    w.run.status.checkpoint = { step: 1, data: { blob: "x".repeat(MAX_SANDBOX_STATUS_BYTES) } };
    w.heartbeat("Planning");
    w.settle();
    expect(w.status).toMatchObject({ phase: "NeedsHumanIntervention", reason: "SandboxReportTooLarge" });
    expect(w.condition("SandboxReportValid")).toMatchObject({ status: "False", reason: "SandboxReportTooLarge" });
    expect(w.livePods).toEqual([]);
  });

  it("answers a status write the API server refused with a small write that stops the run, and the kill behind it", () => {
    const w = started();
    w.run.status.checkpoint = { step: 1, data: { blob: "x".repeat(MAX_SANDBOX_STATUS_BYTES + 10) } };
    const plan = decide({ run: w.run, pods: [...w.pods.values()], now: w.now + 2 * M, nodes: w.nodes(), refusedWrite: { message: "etcdserver: request is too large", tooLarge: true } });
    expect(plan.phase).toBe("NeedsHumanIntervention");
    expect(plan.status).toMatchObject({ phase: "NeedsHumanIntervention", reason: "StatusWriteRefused", checkpoint: null });
    expect(plan.status).not.toHaveProperty("transitions");
    expect(plan.status).not.toHaveProperty("lastFailure");
    expect(plan.deletePods).toHaveLength(1);
    expect(JSON.stringify(plan.status).length).toBeLessThan(16_384);
  });

  it("never splits a surrogate pair when it keeps a long resume token, so the token never fires by itself", () => {
    const token = `${"a".repeat(255)}😀tail`;
    expect(storedResumeToken(token)).toBe(`${"a".repeat(255)}😀`);
    const w = started({ watchdog: { ...quick.watchdog, maxRestarts: 0 } });
    w.podExit(1);
    w.settle();
    w.annotate("watchdog.dev/resume", token);
    w.runUntil(w.now + 10 * S);
    expect(w.created).toHaveLength(2);
    // The API server keeps what the operator wrote; the same token never resumes again.
    w.currentPod()!.status = { phase: "Failed", containerStatuses: [{ name: "agent", state: { terminated: { exitCode: 1 } } }] };
    w.runUntil(w.now + 5 * M);
    expect(w.status.phase).toBe("NeedsHumanIntervention");
    expect(w.created).toHaveLength(2);
  });
});

describe("7. no clock but the API server's decides a kill", () => {
  it.each([
    ["ahead", H],
    ["behind", -H],
  ])("neither kills early nor keeps a dead sandbox alive when the node's clock is %s by an hour", (_, skew) => {
    const w = new World(quick);
    w.nodeClockSkewMs = skew;
    w.settle();
    w.advance(20 * S);
    w.podRunning(); // the kubelet's startedAt is off by an hour
    const startedAt = w.now;
    w.runUntil(startedAt + 1 * M);
    expect(w.status).toMatchObject({ phase: "Starting", attempt: 1 }); // not killed before its first heartbeat is due
    w.runUntil(startedAt + 1 * M + 2 * S);
    expect(w.status).toMatchObject({ phase: "Queued", attempt: 2 }); // nor kept alive for an hour
  });

  it("counts a restarted operator's deadline from the API server's record of the start", () => {
    const w = new World(quick);
    w.nodeClockSkewMs = H;
    w.watching = false;
    w.settle();
    w.advance(20 * S);
    w.podRunning();
    const startedAt = w.now;
    w.runUntil(startedAt + 1 * M);
    expect(w.status.phase).toBe("Starting");
    w.runUntil(startedAt + 1 * M + 2 * S);
    expect(w.status.lastFailure?.reason).toBe("HeartbeatTimeout");
  });

  it("counts the first heartbeat's deadline from when the run named the pod, when the write that named it came late", () => {
    // A leader killed between the pod's create and the status write that names it, then a storm
    // of conflicts: the pod is adopted long after its agent started, and admission refused every
    // write of its sandbox until then.
    const w = new World(quick);
    w.reconcile(); // the finalizer, the pod, and the write that names it
    const name = w.status.podName as string;
    expect(w.pods.has(name)).toBe(true);
    w.podRunning();
    const startedAt = w.now;
    // That naming write was lost: status is still as it was before the start.
    const { podName: _n, podUID: _u, podGracePeriodSeconds: _g, ...unnamed } = w.status;
    w.run.status = { ...unnamed, phase: "Queued", transitions: (w.status.transitions as { phase: string }[]).filter((t) => t.phase !== "Starting") };
    w.advance(55 * S);
    w.reconcile();
    expect(w.status).toMatchObject({ phase: "Starting", podName: name }); // adopted
    const namedAt = w.now;
    w.runUntil(startedAt + 1 * M + 5 * S);
    expect(w.status).toMatchObject({ phase: "Starting", attempt: 1 }); // the sandbox still has its minute
    w.runUntil(namedAt + 1 * M + 2 * S);
    expect(w.status).toMatchObject({ phase: "Queued", attempt: 2 });
    expect(w.status.lastFailure?.reason).toBe("HeartbeatTimeout");
  });
});

describe("7b. the kubelet's later writes do not put off a kill", () => {
  /** The kubelet writes the pod's status again (as after an API server restart): its container-state write moves to now. */
  const kubeletWritesAgain = (w: World) => {
    const pod = w.currentPod() as { metadata: { managedFields: { time: string }[] } };
    pod.metadata.managedFields = pod.metadata.managedFields.map((entry) => ({ ...entry, time: iso(Math.floor(w.now / S) * S).replace(".000Z", "Z") }));
  };

  /** A sandbox that started, heartbeated once and went silent. */
  const heartbeatedOnce = () => {
    const w = new World(quick);
    w.settle();
    w.advance(5 * S);
    w.podRunning();
    w.advance(3 * S);
    w.heartbeat();
    w.settle();
    return w;
  };

  for (const takenOver of [false, true]) {
    it(`kills a sandbox a minute after its last heartbeat, though the kubelet wrote its pod's status since${takenOver ? ", for an operator that took the run over" : ""}`, () => {
      const w = heartbeatedOnce();
      const lastBeat = w.now;
      w.advance(30 * S);
      kubeletWritesAgain(w);
      // A replica given the run's shard (or restarted) saw neither the start nor the heartbeat.
      if (takenOver) w.restartOperator();
      w.reconcile();
      expect(w.status.phase).toBe("Planning");
      w.runUntil(lastBeat + 1 * M + 2 * S);
      expect(w.status).toMatchObject({ phase: "Queued", attempt: 2 });
      expect(w.status.lastFailure?.reason).toBe("HeartbeatTimeout");
      expect(w.status.lastFailure?.message).toMatch(/the last heartbeat was accepted at/);
    });
  }

  it("keeps the agent's start in force when the heartbeat may be older than the pod", () => {
    // As when an approved run resumes in a new sandbox within the same attempt: the attempt's
    // heartbeat may be the old sandbox's, and only the new agent's start says when it began.
    const w = heartbeatedOnce();
    const pod = w.currentPod() as { metadata: { creationTimestamp: string } };
    // The same attempt's heartbeat, accepted in the second this pod was made: it may be the old sandbox's.
    pod.metadata.creationTimestamp = iso(Math.floor(w.now / S) * S).replace(".000Z", "Z");
    const lastBeat = w.now;
    w.advance(30 * S);
    kubeletWritesAgain(w);
    w.restartOperator();
    w.runUntil(lastBeat + 1 * M + 2 * S);
    expect(w.status).toMatchObject({ phase: "Planning", attempt: 1 });
  });
});

describe("8. a spec edit never kills a healthy run", () => {
  it("counts a shortened heartbeatTimeout from when it changed", () => {
    const w = started({ watchdog: { heartbeatTimeout: "1h" } });
    beatUntil(w, w.now + 40 * M, 20 * M); // a sandbox heartbeating every 20 minutes, well within 1h
    w.advance(10 * M); // its last heartbeat is 10 minutes old when the timeout drops to 5 minutes
    w.setSpec({ watchdog: { heartbeatTimeout: "5m" } });
    w.settle();
    expect(w.status.phase).toBe("Planning");
    const changed = w.now;
    expect(w.status.timeoutsChangedAt).toBe(iso(Math.floor(changed / 1000) * 1000).replace(".000Z", "Z"));
    // It learns the new timeout and heartbeats within it: never killed.
    w.runUntil(changed + 4 * M);
    w.heartbeat("Planning");
    w.settle();
    beatUntil(w, changed + 30 * M, 1 * M);
    expect(w.status).toMatchObject({ phase: "Planning", attempt: 1 });
  });

  it("still kills a sandbox that never heartbeats again, one new timeout after the change", () => {
    const w = started({ watchdog: { heartbeatTimeout: "1h" } });
    w.advance(30 * M);
    w.setSpec({ watchdog: { heartbeatTimeout: "5m" } });
    w.settle();
    const changed = w.now;
    w.runUntil(changed + 5 * M);
    expect(w.status.phase).toBe("Planning");
    w.runUntil(changed + 5 * M + 2 * S);
    expect(w.status.lastFailure?.reason).toBe("HeartbeatTimeout");
  });

  it("treats a new install default the same way", () => {
    const w = new World({}, { heartbeatTimeout: "1h" });
    w.settle();
    w.podRunning();
    w.heartbeat("Planning");
    w.settle();
    w.advance(30 * M);
    w.defaults = { heartbeatTimeout: "5m" };
    w.settle();
    expect(w.status.phase).toBe("Planning");
  });
});

describe("9. rate limits do not hide crashes", () => {
  it("counts a crash after a rate-limited call as a restart", () => {
    const w = started({ watchdog: { ...quick.watchdog, maxRestarts: 0 } });
    w.toolCall({ name: "search", state: "Failed", httpStatus: 429 });
    w.podExit(137, "OOMKilled");
    w.settle();
    expect(w.status).toMatchObject({ phase: "NeedsHumanIntervention", reason: "RecoveryBudgetExhausted" });
  });

  it("counts a hang after a rate-limited call as a restart", () => {
    const w = started();
    w.toolCall({ name: "search", state: "Failed", httpStatus: 429 });
    w.runUntil(w.now + 1 * M + 1 * S);
    expect(w.status).toMatchObject({ phase: "Queued", restarts: 1 });
    expect(w.status.lastFailure.reason).toBe("HeartbeatTimeout");
  });

  it("gives rate-limit requeues an allowance of their own, and then asks for a person", () => {
    const w = started({ watchdog: { ...quick.watchdog, maxRateLimitRequeues: 2, rateLimitBackoff: { initial: "1s", max: "2s" } } });
    for (let i = 1; i <= 3; i++) {
      w.toolCall({ name: "model", state: "Failed", httpStatus: 429 });
      w.podExit(6);
      w.runUntil(w.now + 5 * S);
      if (i < 3) {
        expect(w.status).toMatchObject({ rateLimitRequeues: i, restarts: 0 });
        w.podRunning();
        w.heartbeat("Planning");
        w.settle();
      }
    }
    expect(w.status).toMatchObject({ phase: "NeedsHumanIntervention", reason: "RateLimitRequeuesExhausted", restarts: 0 });
  });

  it("takes the rate-limited exit without a throttled call on record for the crash it is", () => {
    const w = started({ watchdog: { ...quick.watchdog, maxRestarts: 0 } });
    w.podExit(6);
    w.settle();
    expect(w.status.reason).toBe("RecoveryBudgetExhausted");
  });
});
