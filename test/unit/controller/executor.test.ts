// The executor's order of writes, and what it does when the API server refuses one: the start
// writes the finalizer before the pod and names the pod after it exists; a kill writes its status
// before the delete and never deletes behind a status write that failed; a refusal for content is
// handed to the next decision, which stops the run for a person and deletes the pod behind that.
import { describe, expect, it } from "vitest";
import type { Logger } from "pino";
import type { EventRecorder } from "../../../operator/controller/events.ts";
import { Executor, ReconcileDeadlineExceeded, type ReconcileContext } from "../../../operator/controller/executor.ts";
import { planRun } from "../../../operator/controller/plan-run.ts";
import type { KubeClient } from "../../../operator/kube/client.ts";
import { ApiWorld } from "./api-world.ts";

const S = 1000;

async function startedWorld(): Promise<ApiWorld> {
  const w = new ApiWorld({ watchdog: { heartbeatTimeout: "30s", maxRestarts: 2 } });
  await w.settleThroughExecutor();
  w.podRunning();
  w.heartbeat("Planning");
  await w.settleThroughExecutor();
  w.requests = [];
  return w;
}

const before = (requests: string[], a: string, b: string) => requests.indexOf(a) >= 0 && requests.indexOf(b) >= 0 && requests.indexOf(a) < requests.indexOf(b);

describe("the executor", () => {
  it("starts a run with the finalizer first, then the pod, then the status that names the pod's uid", async () => {
    const w = new ApiWorld({ watchdog: { heartbeatTimeout: "30s" } });
    await w.reconcileThroughExecutor();
    expect(w.requests).toEqual(["readRun", "listPods", "writeMetadata", "createPod", "writeStatus"]);
    expect(w.run.metadata.finalizers).toEqual(["watchdog.dev/sandbox-gone"]);
    const pod = w.currentPod()!;
    expect(w.status.podUID).toBe(pod.metadata.uid);
    expect(w.violations).toEqual([]);
  });

  it("lists the pods afresh before a create planned from a cache it may not trust", async () => {
    const w = new ApiWorld({ watchdog: { heartbeatTimeout: "30s" } });
    await w.reconcileThroughExecutor(w.snapshot());
    expect(w.requests.slice(0, 2)).toEqual(["listPods", "writeMetadata"]);
    const again = new ApiWorld({ watchdog: { heartbeatTimeout: "30s" } });
    again.trustCache = true;
    await again.reconcileThroughExecutor(again.snapshot());
    expect(again.requests[0]).toBe("writeMetadata");
  });

  it("kills a hung sandbox with the status write first and the graceful delete after it", async () => {
    const w = await startedWorld();
    w.advance(31 * S);
    await w.reconcileThroughExecutor();
    expect(before(w.requests, "writeStatus", "deletePod")).toBe(true);
    expect(w.status.lastFailure).toMatchObject({ reason: "HeartbeatTimeout", attempt: 1 });
    expect(w.deleted.map((d) => d.grace)).toEqual([w.deleted[0]!.grace]);
    expect(w.deleted[0]!.grace).toBeGreaterThan(0);
    expect(w.violations).toEqual([]);
  });

  it("lets a heartbeat that lands before the kill's status write win: no kill, no delete", async () => {
    const w = await startedWorld();
    w.advance(31 * S);
    w.fault = { operation: "writeStatus", race: true };
    // The write's resourceVersion precondition refuses the stale kill; the executor does not
    // decide again itself: the conflict goes back to the caller, whose retry decides afresh.
    expect(await w.reconcileThroughExecutor()).toBeUndefined();
    expect(w.requests).toEqual(["readRun", "listPods", "writeStatus"]);
    await w.reconcileThroughExecutor();
    expect(w.requests).not.toContain("deletePod");
    expect(w.status.lastFailure).toBeUndefined();
    expect(w.currentPod()?.metadata.deletionTimestamp).toBeUndefined();
    expect(w.violations).toEqual([]);
  });

  it("deletes nothing behind a status write that failed, and kills on the next try", async () => {
    const w = await startedWorld();
    w.advance(31 * S);
    w.fault = { operation: "writeStatus", code: 500 };
    expect(await w.reconcileThroughExecutor()).toBeUndefined();
    expect(w.requests).toEqual(["readRun", "listPods", "writeStatus", "writeStatus refused 500"]);
    expect(w.currentPod()?.metadata.deletionTimestamp).toBeUndefined();
    await w.reconcileThroughExecutor();
    expect(w.deleted).toHaveLength(1);
  });

  it("hands a refusal for content to the next decision, which stops the run for a person and deletes the pod behind that write", async () => {
    const w = await startedWorld();
    w.advance(31 * S);
    w.fault = { operation: "writeStatus", code: 422 };
    expect(await w.reconcileThroughExecutor()).toBeUndefined();
    expect(w.requests).not.toContain("deletePod");
    w.requests = [];
    await w.reconcileThroughExecutor();
    expect(w.status).toMatchObject({ phase: "NeedsHumanIntervention", reason: "StatusWriteRefused" });
    expect(before(w.requests, "writeStatus", "deletePod")).toBe(true);
    expect(w.violations).toEqual([]);
  });

  it("deletes again on the next try when the delete itself failed after the status was written", async () => {
    const w = await startedWorld();
    w.advance(31 * S);
    w.fault = { operation: "deletePod", code: 500 };
    expect(await w.reconcileThroughExecutor()).toBeUndefined();
    expect(w.status.lastFailure).toMatchObject({ reason: "HeartbeatTimeout" });
    expect(w.deleted).toHaveLength(0);
    await w.settleThroughExecutor();
    expect(w.deleted).toHaveLength(1);
    expect(w.violations).toEqual([]);
  });

  it("adopts its own pod, never a second one, when the status write naming it was lost", async () => {
    const w = new ApiWorld({ watchdog: { heartbeatTimeout: "30s" } });
    w.fault = { operation: "writeStatus", code: 500 };
    await w.reconcileThroughExecutor(); // the pod exists, the status naming it was lost
    expect(w.pods.size).toBe(1);
    await w.settleThroughExecutor();
    expect(w.pods.size).toBe(1);
    expect(w.status.podUID).toBe(w.currentPod()!.metadata.uid);
    expect(w.violations).toEqual([]);
  });

  it("writes nothing once its reconcile is past its deadline or the operator stops", async () => {
    const silent = { debug() {}, info() {}, warn() {}, error() {} } as unknown as Logger;
    const attempt = async (context: ReconcileContext) => {
      const w = await startedWorld();
      w.advance(31 * S);
      const { run, pods } = w.snapshot();
      const decision = await planRun(run, pods, { now: () => w.now, inputs: () => ({ defaults: w.defaults }), podsComplete: () => true, listPods: async () => pods });
      expect(decision.plan.deletePods).toHaveLength(1); // a kill was planned
      const executor = new Executor(w.client as unknown as KubeClient, { record() {} } as unknown as EventRecorder, { clock: () => w.now });
      const refused = await executor.execute(decision, silent, () => {}, context).then(() => undefined, (err: unknown) => err);
      expect(w.requests).toEqual([]);
      expect(w.deleted).toHaveLength(0);
      return refused;
    };
    const live = new AbortController().signal;
    expect(await attempt({ signal: live, deadline: Date.now() - 1 })).toBeInstanceOf(ReconcileDeadlineExceeded);
    const stopping = new AbortController();
    stopping.abort(new Error("the operator is stopping"));
    expect(String(await attempt({ signal: stopping.signal, deadline: Date.now() + 60_000 }))).toContain("stopping");
  });
});
