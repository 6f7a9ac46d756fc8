// Pods and nodes as the core sees them (observe.ts): what a pod's object says of its attempt, owner,
// phase, deletion and grace, how its sandbox ended and when its agent started; which pods may still
// run (rule 9) and which have anything left to stop; and a node's readiness, shutdown and last
// contact. Whatever a field holds, a value that does not parse is left out, never thrown.
import { describe, expect, it } from "vitest";
import { LABELS } from "../../../operator/api/annotations.ts";
import { hasWork, isLive, nodeView, OUT_OF_SERVICE_TAINT, podView } from "../../../operator/watchdog/observe.ts";
import { OWNER, T0, iso, pod } from "../fixtures.ts";

const S = 1000;
type Json = Record<string, any>;

/** Attempt 1's pod with its status replaced. */
const withStatus = (status: Json, overrides: Parameters<typeof pod>[1] = {}): Json => ({ ...pod(1, overrides), status });
const terminatedAs = (name: string, terminated: Json): Json => ({ name, state: { terminated } });
const runningSince = (name: string, startedAt: string): Json => ({ name, state: { running: { startedAt } } });

describe("a pod's object", () => {
  it("names its attempt by a positive whole-number label, and no attempt otherwise", () => {
    for (const [label, attempt] of [
      ["3", 3],
      ["0", undefined],
      ["-1", undefined],
      ["1.5", undefined],
      ["three", undefined],
      [undefined, undefined],
    ] as const) {
      const p = pod(1);
      if (label === undefined) delete p.metadata.labels[LABELS.attempt];
      else p.metadata.labels[LABELS.attempt] = label;
      expect(podView(p).attempt, `label ${String(label)}`).toBe(attempt);
    }
  });

  it("belongs to the run its controller owner names, not to another owner", () => {
    expect(podView(pod(1)).ownerUid).toBe("uid-r");
    expect(podView(pod(1, { owner: { ...OWNER, uid: "uid-other", controller: false } })).ownerUid).toBeUndefined();
    expect(podView(pod(1, { owner: null })).ownerUid).toBeUndefined();
    const twoOwners = pod(1);
    twoOwners.metadata.ownerReferences = [{ ...OWNER, uid: "uid-set", controller: false }, OWNER];
    expect(podView(twoOwners).ownerUid).toBe("uid-r");
    const badUid = pod(1, { owner: { ...OWNER, uid: 7 } });
    expect(podView(badUid).ownerUid).toBeUndefined();
  });

  it("keeps its uid, name and node only when they are names", () => {
    const p = pod(1, { nodeName: "node-1" });
    expect(podView(p)).toMatchObject({ name: "r-1", uid: "uid-pod-1", nodeName: "node-1" });
    p.metadata.uid = 42;
    p.spec.nodeName = "";
    const view = podView(p);
    expect(view.uid).toBeUndefined();
    expect(view.nodeName).toBeUndefined();
    expect(podView({ ...p, spec: { ...p.spec, nodeName: 5 } }).nodeName).toBeUndefined();
  });

  it("takes the kubelet's phases as they are, a pod with no status for Pending, and anything else for Unknown", () => {
    for (const phase of ["Pending", "Running", "Succeeded", "Failed"]) expect(podView(withStatus({ phase })).phase).toBe(phase);
    expect(podView(withStatus({})).phase).toBe("Pending");
    expect(podView({ ...pod(1), status: undefined }).phase).toBe("Pending");
    expect(podView(withStatus({ phase: "Lost" })).phase).toBe("Unknown");
    expect(podView(withStatus({ phase: 3 })).phase).toBe("Unknown");
  });

  it("counts from its creation on the API server's clock, and from 0 when it has none", () => {
    expect(podView(pod(1, { created: T0 + 5 * S })).createdAt).toBe(T0 + 5 * S);
    const p = pod(1);
    delete p.metadata.creationTimestamp;
    expect(podView(p).createdAt).toBe(0);
  });

  it("is being deleted from its deletionTimestamp, asked for its grace before it", () => {
    const view = podView(pod(1, { deleting: true }));
    expect(view.deleting).toBe(true);
    // deletionTimestamp is when the grace ends: the deletion was asked for 30 s before it.
    expect(view.deletionRequestedAt).toBe(T0 - 30 * S);
    expect(view.gracePeriodSeconds).toBe(30);
    const live = podView(pod(1));
    expect(live.deleting).toBe(false);
    expect(live.deletionRequestedAt).toBeUndefined();
    const cleared = pod(1);
    cleared.metadata.deletionTimestamp = null;
    expect(podView(cleared).deleting).toBe(false);
  });

  it("takes the deletion's grace over the pod's own, and 30 s for a pod that says none", () => {
    const p = pod(1, { deleting: true });
    p.metadata.deletionGracePeriodSeconds = 5;
    p.spec.terminationGracePeriodSeconds = 60;
    expect(podView(p)).toMatchObject({ gracePeriodSeconds: 5, podGracePeriodSeconds: 60, deletionRequestedAt: T0 - 5 * S });
    const own = pod(1);
    own.spec.terminationGracePeriodSeconds = 0;
    expect(podView(own)).toMatchObject({ gracePeriodSeconds: 0, podGracePeriodSeconds: 0 });
    const unset = pod(1);
    unset.spec.terminationGracePeriodSeconds = "60";
    expect(podView(unset)).toMatchObject({ gracePeriodSeconds: 30, podGracePeriodSeconds: 30 });
    // A deletion whose grace is not a number was asked for at its timestamp, with the pod's grace.
    const odd = pod(1, { deleting: true });
    odd.metadata.deletionGracePeriodSeconds = "5";
    expect(podView(odd)).toMatchObject({ gracePeriodSeconds: 30, deletionRequestedAt: T0 });
  });
});

describe("how a sandbox ended", () => {
  it("is told only once the pod reached a final phase", () => {
    const statuses = [terminatedAs("agent", { exitCode: 1, reason: "Error" })];
    expect(podView(withStatus({ phase: "Running", containerStatuses: statuses })).exit).toBeUndefined();
    expect(podView(withStatus({ phase: "Failed", containerStatuses: statuses })).exit).toEqual({ code: 1, reason: "Error", message: undefined });
    expect(podView(withStatus({ phase: "Succeeded", containerStatuses: [terminatedAs("agent", { exitCode: 0 })] })).exit).toEqual({ code: 0, reason: undefined, message: undefined });
    expect(podView(withStatus({ phase: "Failed" })).exit).toBeUndefined();
  });

  it("is told by the first container that failed, not by one that exited 0 before it nor one that failed after", () => {
    const view = podView(
      withStatus({
        phase: "Failed",
        containerStatuses: [
          terminatedAs("sidecar", { exitCode: 0, reason: "Completed" }),
          { name: "waiting", state: { waiting: { reason: "PodInitializing" } } },
          terminatedAs("agent", { exitCode: 137, reason: "OOMKilled", message: "out of memory" }),
          terminatedAs("other", { exitCode: 2, reason: "Error", message: "later" }),
        ],
      }),
    );
    expect(view.exit).toEqual({ code: 137, reason: "OOMKilled", message: "out of memory" });
  });

  it("is told by the first container that ended when none failed, and from its last state when it was restarted", () => {
    const first = podView(withStatus({ phase: "Succeeded", containerStatuses: [terminatedAs("a", { exitCode: 0, reason: "First" }), terminatedAs("b", { exitCode: 0, reason: "Second" })] }));
    expect(first.exit?.reason).toBe("First");
    const restarted = podView(withStatus({ phase: "Failed", containerStatuses: [{ name: "agent", state: { waiting: {} }, lastState: { terminated: { exitCode: 3, reason: "Error" } } }] }));
    expect(restarted.exit).toEqual({ code: 3, reason: "Error", message: undefined });
  });

  it("takes the pod's own reason and message over its containers' (an eviction), and keeps the exit code", () => {
    const evicted = podView(withStatus({ phase: "Failed", reason: "Evicted", message: "low on memory", containerStatuses: [terminatedAs("agent", { exitCode: 137, reason: "Error", message: "killed" })] }));
    expect(evicted.exit).toEqual({ code: 137, reason: "Evicted", message: "low on memory" });
    expect(podView(withStatus({ phase: "Failed", reason: "Evicted" })).exit).toEqual({ reason: "Evicted", message: undefined });
    const reasonOnly = podView(withStatus({ phase: "Failed", reason: "Evicted", containerStatuses: [terminatedAs("agent", { exitCode: 1, message: "killed" })] }));
    expect(reasonOnly.exit).toEqual({ code: 1, reason: "Evicted", message: "killed" });
  });

  it("drops an exit code, reason or message that is not of its kind", () => {
    const view = podView(withStatus({ phase: "Failed", reason: 5, message: {}, containerStatuses: [terminatedAs("agent", { exitCode: "1", reason: 2, message: ["m"] })] }));
    expect(view.exit).toEqual({ code: undefined, reason: undefined, message: undefined });
  });
});

describe("the agent container", () => {
  it("is the first container, or the one the run names, with its start on the node's clock", () => {
    const p = withStatus({ phase: "Running", containerStatuses: [runningSince("agent", iso(T0 + 2 * S)), runningSince("helper", iso(T0 + 3 * S))] });
    p.spec.containers = [{ name: "agent" }, { name: "helper" }];
    expect(podView(p).agent).toEqual({ name: "agent", startedAt: T0 + 2 * S });
    expect(podView(p, "helper").agent).toEqual({ name: "helper", startedAt: T0 + 3 * S });
    expect(podView(p, "absent").agent).toEqual({ name: "absent" });
  });

  it("has ended with its own terminated state, and keeps the start it had", () => {
    const p = withStatus({ phase: "Failed", containerStatuses: [terminatedAs("agent", { exitCode: 2, reason: "Error", startedAt: iso(T0 + S) })] });
    expect(podView(p).agent).toEqual({ name: "agent", startedAt: T0 + S, ended: { code: 2, reason: "Error", message: undefined } });
  });

  it("has not ended while it runs, whatever its last state says", () => {
    const p = withStatus({ phase: "Running", containerStatuses: [{ ...runningSince("agent", iso(T0)), lastState: { terminated: { exitCode: 1 } } }] });
    expect(podView(p).agent).toEqual({ name: "agent", startedAt: T0 });
  });

  it("never started when it terminated with the zero start time of a container that never ran", () => {
    const p = withStatus({ phase: "Failed", containerStatuses: [terminatedAs("agent", { exitCode: 128, reason: "StartError", startedAt: "1970-01-01T00:00:00Z" })] });
    expect(podView(p).agent.startedAt).toBeUndefined();
    expect(podView(p).agent.ended?.code).toBe(128);
  });

  it("has no name in a pod object with no containers, and no state before the kubelet reports one", () => {
    expect(podView({ metadata: { name: "bare" } }).agent).toEqual({});
    // With no container named, no reported state is the agent's, not even one without a name.
    expect(podView({ metadata: { name: "bare" }, status: { containerStatuses: [{ state: { running: { startedAt: iso(T0) } } }] } }).agent).toEqual({});
    expect(podView(pod(1)).agent).toEqual({ name: "agent" });
  });
});

describe("which pods may still run (rule 9) and which have anything to stop", () => {
  const view = (phase: string, states: Json[]) => podView(withStatus({ phase, containerStatuses: states }));
  const ended = terminatedAs("agent", { exitCode: 0 });
  const running = runningSince("agent", iso(T0));

  it("counts every pod before its final phase as live, with work to stop", () => {
    for (const phase of ["Pending", "Running", "Unknown"]) {
      expect(isLive(view(phase, [running])), phase).toBe(true);
      expect(hasWork(view(phase, [running])), phase).toBe(true);
    }
  });

  it("counts a pod in its final phase with every container stopped as gone", () => {
    const done = view("Succeeded", [ended, terminatedAs("sidecar", { exitCode: 1 })]);
    expect(done).toMatchObject({ stopped: true, containerStates: 2 });
    expect(isLive(done)).toBe(false);
    expect(hasWork(done)).toBe(false);
    // A final phase with no container states at all: nothing ever ran.
    expect(isLive(view("Failed", []))).toBe(false);
    expect(isLive(podView(withStatus({ phase: "Failed" })))).toBe(false);
  });

  it("still counts a pod the pod garbage collector marked Failed with its containers shown running as live", () => {
    const marked = view("Failed", [ended, running]);
    expect(marked).toMatchObject({ stopped: false, containerStates: 2 });
    expect(isLive(marked)).toBe(true);
    expect(hasWork(marked)).toBe(true);
  });

  it("leaves a pod whose containers all stopped, waiting for the kubelet's final phase, live but with nothing to stop", () => {
    const stopping = view("Running", [ended]);
    expect(stopping.stopped).toBe(true);
    expect(isLive(stopping)).toBe(true);
    expect(hasWork(stopping)).toBe(false);
    // No container states yet is not "all stopped", nor is a container with no state reported.
    expect(view("Pending", []).stopped).toBe(false);
    expect(view("Pending", [{ name: "agent" }]).stopped).toBe(false);
  });
});

describe("a node", () => {
  const node = (conditions: Json[], taints?: Json[]): Json => ({ metadata: { name: "node-1" }, spec: taints ? { taints } : {}, status: { conditions } });
  const lease = (renewedAt: string, path: Json = { "f:spec": { "f:renewTime": {} } }): Json => ({ metadata: { managedFields: [{ manager: "kubelet", time: renewedAt, fieldsV1: path }] } });

  it("is Ready as the node controller says, and Unknown when it says nothing it knows", () => {
    expect(nodeView(node([{ type: "Ready", status: "True" }])).ready).toBe("True");
    expect(nodeView(node([{ type: "MemoryPressure", status: "False" }, { type: "Ready", status: "False" }])).ready).toBe("False");
    expect(nodeView(node([{ type: "Ready", status: "Unknown" }])).ready).toBe("Unknown");
    expect(nodeView(node([{ type: "MemoryPressure", status: "True" }])).ready).toBe("Unknown");
    expect(nodeView({ metadata: { name: "node-1" } })).toEqual({ name: "node-1", ready: "Unknown", outOfService: false });
  });

  it("is out of service only with the out-of-service taint", () => {
    // The taint's name is Kubernetes' own (non-graceful node shutdown), not ours to choose.
    expect(OUT_OF_SERVICE_TAINT).toBe("node.kubernetes.io/out-of-service");
    expect(nodeView(node([], [{ key: "node.kubernetes.io/out-of-service", effect: "NoExecute" }])).outOfService).toBe(true);
    expect(nodeView(node([], [{ key: "node.kubernetes.io/unreachable", effect: "NoExecute" }])).outOfService).toBe(false);
  });

  it("was last in contact when the API server accepted its kubelet's Lease renewal, and unknown without one", () => {
    expect(nodeView(node([]), lease("2026-11-30T12:00:05Z")).lastContact).toBe(T0 + 5 * S);
    // A write of the Lease that is not a renewal says nothing of the kubelet.
    expect(nodeView(node([]), lease("2026-11-30T12:00:05Z", { "f:metadata": {} })).lastContact).toBeUndefined();
    expect("lastContact" in nodeView(node([]))).toBe(false);
  });
});
