// The four promises under the failures that break them, decided by the pure core: a run never has
// two sandboxes (confirmed before replaced, owner-bound pods), never retries early, is never killed
// while healthy (liveness on the server's clock), and no input stops a kill.
import { describe, expect, it } from "vitest";
import { decide } from "../../../operator/watchdog/decide.ts";
import { believe, livenessFacts, type LivenessFacts } from "../../../operator/watchdog/liveness.ts";
import { OPERATOR_STATUS_FIELDS, isQuiet } from "../../../operator/watchdog/plan.ts";
import { crdStatusProblems } from "../../support/crd-schema.ts";
import { T0, heartbeatManagedFields, iso, pod, run } from "../fixtures.ts";
import { NODE, World, startedWorld } from "../world.ts";

const S = 1000;
const M = 60 * S;
const H = 60 * M;
const quick = { watchdog: { heartbeatTimeout: "1m", backoff: { initial: "10s", factor: 2, max: "1m" }, unconfirmedAfter: "2m" } };

const started = (spec: Record<string, unknown> = quick) => startedWorld(spec);

describe("rule 9: confirmed before replaced", () => {
  it("kills gracefully with killGracePeriod, never with grace 0", () => {
    const w = started({ watchdog: { ...quick.watchdog, killGracePeriod: "5s" } });
    w.runUntil(w.now + 2 * M);
    expect(w.deleted[0]).toMatchObject({ name: w.podName(1), grace: 5 });
    expect(w.violations).toEqual([]);
  });

  it("starts no replacement while the killed pod runs on a node cut off from the API server", () => {
    const w = started();
    w.kubelet = "cutOff";
    w.runUntil(w.now + 1 * M + 1 * S);
    expect(w.status).toMatchObject({ phase: "Queued", attempt: 2 });
    // retry-after passes, and then unconfirmedAfter: still no second sandbox, and the run says why.
    w.runUntil(w.now + 3 * M);
    expect(w.created).toHaveLength(1);
    expect(w.condition("SandboxUnconfirmed")).toMatchObject({ status: "True", reason: "NodeUnreachable" });
    expect(w.condition("SandboxUnconfirmed")!.message).toContain(`${w.podName(1)} on node ${NODE}`);
    expect(w.events().filter((e) => e.reason === "SandboxUnconfirmed")).toHaveLength(1);
    expect(w.status.terminating).toEqual([expect.objectContaining({ name: w.podName(1), nodeName: NODE })]);
    // The node comes back: its kubelet stops the container, and only then does attempt 2 start.
    w.nodeBack();
    w.settle();
    expect(w.created.map((c) => c.attempt)).toEqual([1, 2]);
    expect(w.condition("SandboxUnconfirmed")).toMatchObject({ status: "False", reason: "SandboxGone" });
    expect(w.status.terminating).toBeUndefined();
    expect(w.violations).toEqual([]);
  });

  it("does not take a force-deleted pod on a cut-off node for gone, until the node has been back for longer than its grace", () => {
    const w = started();
    w.kubelet = "cutOff";
    w.runUntil(w.now + 1 * M + 1 * S); // killed: terminating, containers running
    w.forceDeleteByOthers(); // someone removes the object; the container runs on
    w.runUntil(w.now + 10 * M);
    expect(w.created).toHaveLength(1);
    expect(w.condition("SandboxUnconfirmed")?.status).toBe("True");
    const back = w.now;
    w.nodeBack();
    w.settle();
    expect(w.created).toHaveLength(1); // heard from, but its kubelet gets time to stop the container
    // It may never have seen the deletion (a relist): it kills with the pod's own grace (30 s), not
    // the kill's 2 s, after its watch has caught up and within its floor and a margin (22 s).
    w.runUntil(back + 51 * S);
    expect(w.created).toHaveLength(1);
    w.runUntil(back + 53 * S);
    expect(w.created).toHaveLength(2);
    expect(w.violations).toEqual([]);
  });

  it("records the node with the next write it makes anyway, not with a write of its own", () => {
    const w = new World(quick);
    w.settle();
    expect(w.events()).toEqual([]); // the start is in status; an Event would cost a request of its own
    w.podRunning(); // bound and started
    expect(isQuiet(w.settle())).toBe(true);
    expect(w.status.nodeName).toBeUndefined();
    w.heartbeat("Planning");
    w.settle();
    expect(w.status).toMatchObject({ phase: "Planning", nodeName: NODE });
  });

  it("takes a pod that vanished unseen, with no node on record, as possibly running on any node", () => {
    const w = new World(quick);
    w.settle();
    w.podRunning();
    w.settle();
    expect(w.status.nodeName).toBeUndefined();
    w.kubelet = "cutOff";
    w.podVanishedUnseen(); // its container runs on, on a node the operator no longer hears from
    w.runUntil(w.now + 5 * M);
    expect(w.created).toHaveLength(1);
    expect(w.condition("SandboxUnconfirmed")).toMatchObject({ status: "True", reason: "NodeUnreachable" });
    expect(w.condition("SandboxUnconfirmed")!.message).toContain("no node on record");
    const back = w.now;
    w.nodeBack();
    w.settle();
    expect(w.created).toHaveLength(1); // heard from again: its kubelet gets the pod's grace to stop it
    w.runUntil(back + 60 * S);
    expect(w.created.map((c) => c.attempt)).toEqual([1, 2]);
    expect(w.violations).toEqual([]);
  });

  it("leaves a pod on an out-of-service node to the pod garbage collector and goes on", () => {
    const plan = decide({
      run: run({
        status: {
          phase: "Queued",
          attempt: 2,
          restarts: 1,
          terminating: [{ name: "r-1", uid: "uid-pod-1", nodeName: "gone-node", since: iso(T0 - 10 * M), vanishedAt: iso(T0 - 5 * M) }],
        },
      }),
      pods: [],
      now: T0,
      nodes: new Map([["gone-node", { name: "gone-node", ready: "Unknown" as const, outOfService: true }]]),
    });
    expect(plan.createPod).toBeDefined();
    expect(plan.status?.terminating).toBeNull();
  });

  it("wakes up and says so when someone else's deletion of the pod hangs, instead of waiting silently", () => {
    const w = started();
    w.kubelet = "slow";
    w.podDeletedByOthers();
    const plan = w.settle();
    expect(w.status).toMatchObject({ phase: "Queued", reason: "PodFailed" });
    expect(plan.wakeAt).toBeDefined();
    w.runUntil(w.now + 2 * M + 1 * S);
    expect(w.condition("SandboxUnconfirmed")).toMatchObject({ status: "True", reason: "TerminationPending" });
    expect(w.created).toHaveLength(1);
    w.finalizePods();
    w.settle();
    expect(w.created).toHaveLength(2);
  });

  it("deletes with the pod's own grace when it suspends, releases or cleans up, and waits for confirmation before resuming", () => {
    const w = started();
    w.kubelet = "slow";
    w.setSpec({ suspend: true });
    w.settle();
    expect(w.deleted[0]).toMatchObject({ name: w.podName(1), grace: undefined });
    w.setSpec({ suspend: false });
    w.runUntil(w.now + 30 * S);
    expect(w.created).toHaveLength(1); // the suspended pod still runs
    w.finalizePods();
    w.settle();
    expect(w.created).toHaveLength(2);

    const c = started();
    c.heartbeat("Planning");
    c.podExit(0);
    // A sidecar still running: the attempt is done, its pod goes with its own grace.
    c.currentPod()!.status = {
      phase: "Running",
      containerStatuses: [
        { name: "agent", state: { terminated: { exitCode: 0 } } },
        { name: "proxy", state: { running: { startedAt: iso(c.now) } } },
      ],
    };
    c.settle();
    expect(c.status.phase).toBe("Completed");
    expect(c.deleted).toEqual([expect.objectContaining({ grace: undefined })]);

    // All its containers stopped: the pod stays, with its logs, as a Job's pods do.
    const d = started();
    d.currentPod()!.status = { phase: "Running", containerStatuses: [{ name: "agent", state: { terminated: { exitCode: 0 } } }] };
    d.settle();
    expect(d.status.phase).toBe("Completed");
    expect(d.deleted).toEqual([]);
  });
});

describe("rule 9: pods belong to runs by owner uid", () => {
  it("never adopts, counts or completes from an earlier run's pod of the same name", () => {
    // The earlier run was deleted with --cascade=orphan: its pods lost their owner reference, or
    // keep the old uid.
    const orphan = pod(1, { name: "r-1-uidr", phase: "Succeeded", exitCode: 0, owner: null });
    const older = pod(1, { name: "r-1", owner: { kind: "AgentRun", name: "r", uid: "uid-old", controller: true } });
    const plan = decide({ run: run(), pods: [orphan, older], now: T0 });
    expect(plan.phase).toBe("Starting");
    expect(plan.createPod?.metadata.name).toBe("r-1-uidr".replace("uidr", "uidr")); // its own name
    expect(plan.deletePods).toEqual([]); // not its pods to delete either

    const w = started();
    // A foreign pod of the current attempt's name and label reports success: not ours.
    const mine = w.currentPod()!;
    w.pods.set("foreign", { ...structuredClone(mine), metadata: { ...structuredClone(mine.metadata), name: "foreign", uid: "uid-foreign", ownerReferences: [] }, status: { phase: "Succeeded" } });
    w.settle();
    expect(w.status.phase).toBe("Planning");
  });

  it("names each run's pods after its uid, so that a re-created run never collides with an orphan", () => {
    const a = decide({ run: run(), pods: [], now: T0 });
    const b = decide({ run: { ...run(), metadata: { ...run().metadata, uid: "0f8e2a9c-aaaa" } }, pods: [], now: T0 });
    expect(a.createPod?.metadata.name).toBe("r-1-uidr");
    expect(b.createPod?.metadata.name).toBe("r-1-0f8e2");
  });
});

describe("rule 2: liveness on the server's clock", () => {
  for (const skew of [+1 * H, -1 * H, +59 * M, -55 * S]) {
    it(`never kills a heartbeating sandbox whose clock is ${skew > 0 ? "ahead" : "behind"} by ${skew / S}s, and it costs no writes`, () => {
      const w = new World(quick);
      w.sandboxClockSkewMs = skew;
      w.settle();
      w.podRunning();
      w.heartbeat("Planning");
      w.settle();
      const writes = w.plans.length;
      for (let i = 0; i < 30; i++) {
        w.advance(40 * S);
        w.heartbeat("Planning");
        const plan = w.reconcile();
        expect(isQuiet(plan)).toBe(true);
      }
      expect(w.deleted).toEqual([]);
      expect(w.plans.length - writes).toBe(30);
      expect(w.condition("SandboxReportValid")?.status ?? "True").toBe("True");
    });

    it(`kills a sandbox whose clock is off by ${skew / S}s one timeout after it stops, not later`, () => {
      const w = new World(quick);
      w.sandboxClockSkewMs = skew;
      w.settle();
      w.podRunning();
      w.heartbeat("Planning");
      w.settle();
      const last = w.now;
      w.runUntil(last + 1 * M + 999);
      expect(w.deleted).toEqual([]);
      w.runUntil(last + 1 * M + 1 * S);
      expect(w.deleted).toHaveLength(1);
      expect(w.status.lastFailure.reason).toBe("HeartbeatTimeout");
    });
  }

  it("falls back on its own observation of a heartbeat when the server's record is missing", () => {
    const r = run({ spec: quick, status: { phase: "Planning", attempt: 1, restarts: 0, podName: "r-1", podUID: "uid-pod-1", heartbeat: { time: iso(T0 - 2 * H), attempt: 1, state: "Planning" } } });
    const p = pod(1, { created: T0 - 10 * M });
    p.status.containerStatuses = [{ name: "agent", state: { running: { startedAt: iso(T0 - 10 * M) } } }];
    // The sandbox's own time says two hours ago; this operator saw it arrive 10 s ago.
    expect(decide({ run: r, pods: [p], now: T0, heartbeatSeenAt: T0 - 10 * S }).deletePods).toEqual([]);
    // Without either, the agent's start is the last sign of life, and that is long past.
    expect(decide({ run: r, pods: [p], now: T0 }).deletePods).toHaveLength(1);
  });

  it("counts from its own sight of a heartbeat when that is earlier than the server's whole second, and a restarted operator from the server's", () => {
    const r = run({ spec: quick, status: { phase: "Planning", attempt: 1, restarts: 0, podName: "r-1", podUID: "uid-pod-1", heartbeat: { time: iso(T0), attempt: 1, state: "Planning" } } });
    r.metadata.managedFields = heartbeatManagedFields(T0 + 100); // accepted at T0 + 0.1 s, recorded as T0
    const p = pod(1, { created: T0 - 10 * M });
    p.status.containerStatuses = [{ name: "agent", state: { running: { startedAt: iso(T0 - 10 * M) } } }];
    const seenAt = T0 + 150;
    expect(decide({ run: r, pods: [p], now: seenAt + 1 * M - 1, heartbeatSeenAt: seenAt }).deletePods).toEqual([]);
    expect(decide({ run: r, pods: [p], now: seenAt + 1 * M + 1, heartbeatSeenAt: seenAt }).deletePods).toHaveLength(1);
    // Without its own sight, the end of the server's second: later, never earlier.
    expect(decide({ run: r, pods: [p], now: T0 + 999 + 1 * M - 1 }).deletePods).toEqual([]);
    expect(decide({ run: r, pods: [p], now: T0 + 999 + 1 * M + 1 }).deletePods).toHaveLength(1);
    // A late sight (a slow watch) never moves the deadline past the server's record.
    expect(decide({ run: r, pods: [p], now: T0 + 999 + 1 * M + 1, heartbeatSeenAt: T0 + 5 * S }).deletePods).toHaveLength(1);
  });

  it("neither kills the current sandbox nor keeps it alive for long when an earlier attempt's late heartbeat replaces its own", () => {
    const current = { time: iso(T0 - 5 * S), attempt: 2, state: "Planning" as const };
    const late = { time: iso(T0 - 2 * S), attempt: 1, state: "Planning" as const };
    const at = (hb: object, acceptedAt: number) => {
      const r = run({ spec: quick, status: { phase: "Planning", attempt: 2, restarts: 1, podName: "r-2", podUID: "uid-pod-2", heartbeat: hb } });
      r.metadata.managedFields = heartbeatManagedFields(acceptedAt);
      return r;
    };
    const p = pod(2, { created: T0 - 10 * M });
    p.status.containerStatuses = [{ name: "agent", state: { running: { startedAt: iso(T0 - 10 * M) } } }];
    const uid = at(current, T0).metadata.uid as string;
    // What a controller that watched remembers of attempt 2, and what a fresh one derives alone.
    const remembered = believe(livenessFacts(at(current, T0 - 5 * S), undefined) as LivenessFacts, undefined).memory;
    expect(remembered).toMatchObject({ runUid: uid, attempt: 2 });
    const fresh = believe(livenessFacts(at(late, T0 - 2 * S), undefined) as LivenessFacts, undefined).memory;
    expect(fresh).toMatchObject({ erasedAt: T0 - 2 * S + 999 });
    // The agent started 10 minutes ago, so only the heartbeat keeps it: either belief keeps it alive.
    expect(decide({ run: at(late, T0 - 2 * S), pods: [p], now: T0, liveness: remembered }).deletePods).toEqual([]);
    expect(decide({ run: at(late, T0 - 2 * S), pods: [p], now: T0, liveness: fresh }).deletePods).toEqual([]);
    expect(decide({ run: at(late, T0 - 2 * S), pods: [p], now: T0 }).deletePods).toEqual([]);
    // A dead current sandbox is killed one timeout after its last heartbeat, or after the erasure;
    // later late writes move neither.
    const later = at(late, T0 + 50 * S);
    expect(believe(livenessFacts(later, undefined) as LivenessFacts, fresh).memory).toEqual(fresh);
    expect(decide({ run: later, pods: [p], now: T0 - 5 * S + 1 * M + 999 + 1, liveness: remembered }).deletePods).toHaveLength(1);
    expect(decide({ run: later, pods: [p], now: T0 - 2 * S + 999 + 1 * M - 1, liveness: fresh }).deletePods).toEqual([]);
    expect(decide({ run: later, pods: [p], now: T0 - 2 * S + 999 + 1 * M + 1, liveness: fresh }).deletePods).toHaveLength(1);
  });

  it("measures the stall timer on the server's clock too", () => {
    const w = new World({ watchdog: { heartbeatTimeout: "10m", stall: { timeout: "30s" } } });
    w.sandboxClockSkewMs = -1 * H;
    w.settle();
    w.podRunning();
    w.heartbeat("Planning", { kind: "text" });
    w.settle();
    const armed = w.now;
    w.runUntil(armed + 29 * S);
    expect(w.status.stall.nudges).toBe(0);
    w.runUntil(armed + 31 * S);
    expect(w.status.stall.nudges).toBe(1);
  });
});

describe("rule 2: real pods start and finish like real pods", () => {
  it("spends no restart on a slow image pull, until startTimeout", () => {
    const w = new World({ watchdog: { heartbeatTimeout: "30s", startTimeout: "10m" } });
    w.settle();
    w.runUntil(w.now + 9 * M);
    expect(w.status).toMatchObject({ phase: "Starting", restarts: 0 });
    w.podRunning(); // the image arrived
    const startedAt = w.now;
    w.runUntil(startedAt + 29 * S);
    expect(w.status.restarts).toBe(0);
    w.heartbeat("Planning");
    w.settle();
    expect(w.status.phase).toBe("Planning");
  });

  it("decides by the agent container, whatever a sidecar does", () => {
    const spec = { template: { spec: { containers: [{ name: "proxy", image: "proxy:1" }, { name: "agent", image: "agent:1" }] } }, watchdog: { ...quick.watchdog, agentContainer: "agent" } };
    const w = new World(spec);
    w.settle();
    w.heartbeat("Planning");
    const p = w.currentPod()!;
    p.status = {
      phase: "Running",
      containerStatuses: [
        { name: "proxy", state: { running: { startedAt: iso(w.now) } } },
        { name: "agent", state: { terminated: { exitCode: 0, reason: "Completed" } } },
      ],
    };
    w.settle();
    expect(w.status.phase).toBe("Completed");

    const v = new World(spec);
    v.settle();
    v.heartbeat("Planning");
    v.currentPod()!.status = {
      phase: "Running",
      containerStatuses: [
        { name: "proxy", state: { terminated: { exitCode: 1 } } },
        { name: "agent", state: { running: { startedAt: iso(v.now) } } },
      ],
    };
    v.settle();
    expect(v.status.phase).toBe("Planning"); // the sidecar's exit decides nothing
  });

  it("stops for a person when the sandbox refuses to repeat a call of unknown outcome (exit 3), without a restart", () => {
    const w = started();
    w.podExit(3, "Error");
    w.settle();
    expect(w.status).toMatchObject({ phase: "NeedsHumanIntervention", reason: "UnconfirmedSideEffect", restarts: 0 });
  });
});

describe("rule 7: no nudges during work", () => {
  it("holds the stall timer while a tool call is in flight", () => {
    const w = started({ watchdog: { heartbeatTimeout: "10m", stall: { timeout: "30s", maxNudges: 3 } } });
    w.heartbeat("Planning", { kind: "text" });
    w.toolCall({ name: "build", state: "Started", id: "long" });
    w.heartbeat("ExecutingTool");
    w.settle();
    for (let i = 0; i < 10; i++) {
      w.advance(30 * S);
      w.heartbeat("ExecutingTool");
      w.settle();
    }
    expect(w.status.stall.nudges).toBe(0);
    expect(w.status.phase).toBe("ExecutingTool");
    w.toolCall({ name: "build", state: "Succeeded", id: "long" });
    w.heartbeat("Planning", { kind: "toolResult" });
    w.settle();
    w.runUntil(w.now + 31 * S);
    expect(w.status.stall.nudges).toBe(1); // still armed by the text, timed from the result
  });
});

describe("rule 11: answers bound to questions", () => {
  const asking = { watchdog: { heartbeatTimeout: "1m", releaseAwaitingAfter: "5m" } };

  it("refuses and removes an answer given while nothing is pending, so it never answers the next question", () => {
    const w = started(asking);
    w.annotate("watchdog.dev/approve", "yes to anything");
    w.settle();
    expect(w.annotations["watchdog.dev/approve"]).toBeUndefined();
    expect(w.events().filter((e) => e.reason === "AnswerRefused")).toHaveLength(1);
    w.heartbeat("AwaitingReply");
    w.settle();
    expect(w.status.approval).toMatchObject({ state: "Pending", id: expect.any(String) });
  });

  it("refuses an answer that names another request, or none, and accepts one that names the pending request", () => {
    const w = started(asking);
    w.heartbeat("AwaitingReply");
    w.settle();
    const id = w.status.approval.id as string;
    w.answer("approve", "stale", "1-old");
    w.settle();
    expect(w.status.approval.state).toBe("Pending");
    expect(w.annotations).not.toHaveProperty("watchdog.dev/approve");
    expect(w.annotations).not.toHaveProperty("watchdog.dev/approval-id");
    w.annotate("watchdog.dev/reject", "no id");
    w.settle();
    expect(w.status.phase).toBe("AwaitingReply");
    w.answer("approve", "ship it", id);
    w.settle();
    expect(w.status.approval).toMatchObject({ id, state: "Approved", answer: "ship it" });
    expect(w.events().filter((e) => e.reason === "AnswerRefused")).toHaveLength(2);
  });

  it("gives every request a new id", () => {
    const w = started(asking);
    w.heartbeat("AwaitingReply");
    w.settle();
    const first = w.status.approval.id;
    w.answer("approve", "ok");
    w.settle();
    w.advance(1 * S);
    w.heartbeat("Planning");
    w.settle();
    w.advance(1 * S);
    w.heartbeat("AwaitingReply");
    w.settle();
    expect(w.status.approval.id).not.toBe(first);
    // The first answer's annotations are gone: nothing can answer the second by accident.
    expect(w.status.approval.state).toBe("Pending");
  });
});

describe("rule 12: no input stops a kill", () => {
  it("keeps everything it writes within the CRD's limits, whatever users and sandboxes wrote", () => {
    const w = started({ watchdog: { ...quick.watchdog, releaseAwaitingAfter: "10m" } });
    const written = () => {
      const fields: Record<string, unknown> = {};
      for (const field of OPERATOR_STATUS_FIELDS) if (w.status[field] !== undefined) fields[field] = w.status[field];
      return fields;
    };
    const steps: (() => void)[] = [
      () => w.annotate("watchdog.dev/resume", "r".repeat(300_000)),
      () => w.heartbeat("AwaitingReply"),
      () => w.answer("approve", "a".repeat(1_000_000)),
      () => (w.run.status.heartbeat.time = `2026-11-30T12:00:00.${"9".repeat(5000)}Z`),
      () => w.toolCall({ name: "n".repeat(256), argsHash: "h".repeat(128), state: "Failed" }),
      () => {
        w.podExit(1);
        w.currentPod()!.status.containerStatuses[0].state.terminated.message = "m".repeat(100_000);
      },
    ];
    for (const step of steps) {
      step();
      w.settle();
      expect(crdStatusProblems(written())).toEqual([]);
    }
    expect(w.status.observedResume).toHaveLength(256);
    expect(w.status.phase).toBe("Queued");
  });

  it("drops only the malformed tool record, so a started non-idempotent call still stops the run for a person", () => {
    const w = started();
    w.toolCall({ name: "send_email", state: "Started", idempotent: false });
    w.run.status.toolCalls.push({ id: 42, garbage: true }, { name: "", state: "Maybe" });
    w.podExit(1);
    w.settle();
    expect(w.status).toMatchObject({ phase: "NeedsHumanIntervention", reason: "UnconfirmedSideEffect" });
    expect(w.condition("SandboxReportValid")).toMatchObject({ status: "False" });
    expect(w.condition("SandboxReportValid")!.message).toContain("2 of 3 status.toolCalls records are invalid");
  });

  it("reads a heartbeat accepted by the server as alive, whatever its time says", () => {
    const r = run({
      spec: quick,
      status: { phase: "Planning", attempt: 1, restarts: 0, podName: "r-1", podUID: "uid-pod-1", heartbeat: { time: "2099-01-01T00:00:00Z", attempt: 1, state: "Planning" } },
    });
    r.metadata.managedFields = heartbeatManagedFields(T0 - 30 * S);
    const p = pod(1, { created: T0 - 10 * M });
    expect(decide({ run: r, pods: [p], now: T0 }).deletePods).toEqual([]);
    expect(decide({ run: r, pods: [p], now: T0 + 31 * S }).deletePods).toHaveLength(1);
  });
});
