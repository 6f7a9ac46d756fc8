// The guard chain of decide(): the first guard with an answer decides, in the order finished,
// being deleted, write refused, resumed, waiting for a person, suspended, oversize report, budget
// spent, the phase's own policy; a hand-over to Queued runs the chain once more. Each test sets up
// two guards that would both answer and checks that the earlier one decides, with its own words.
import { describe, expect, it } from "vitest";
import { MAX_SANDBOX_STATUS_BYTES } from "../../../operator/api/limits.ts";
import { decide } from "../../../operator/watchdog/decide.ts";
import { GUARDS, HAND_OVERS } from "../../../operator/watchdog/guards.ts";
import { T0, iso } from "../fixtures.ts";
import { World, startedWorld } from "../world.ts";

const S = 1000;
const quick = { watchdog: { heartbeatTimeout: "10m", maxRestarts: 0, killGracePeriod: "7s", backoff: { initial: "1s", factor: 1, max: "1s" } } };
const REFUSAL = "etcdserver: request is too large";

/** A run whose first sandbox crashed with no restart allowed: it waits for a person, no pod left. */
function needingPerson(): World {
  const w = startedWorld(quick);
  w.podExit(1);
  w.settle();
  expect(w.status.phase).toBe("NeedsHumanIntervention");
  return w;
}

/** The sandbox fills its status past the protocol's bound. */
const overfill = (w: World) => {
  w.run.status.checkpoint = { step: 1, data: { blob: "x".repeat(MAX_SANDBOX_STATUS_BYTES) } };
};

/** decide() on the world as it is, with the API server having refused the last status write. */
const refused = (w: World) => decide({ run: structuredClone(w.run), pods: [...w.pods.values()], now: w.now, nodes: w.nodes(), refusedWrite: { message: REFUSAL, tooLarge: false } });

describe("the guard chain", () => {
  it("has nine guards and allows one hand-over per decision", () => {
    expect(GUARDS).toHaveLength(9);
    expect(HAND_OVERS).toBe(1);
  });
});

describe("a finished run", () => {
  it("only has a live sandbox left behind cleaned up, with its own grace, and stays Completed", () => {
    const w = startedWorld(quick);
    w.run.status.phase = "Completed";
    const plan = w.reconcile();
    expect(plan.summary).toBe("Completed; removing r-1-uidr");
    expect(plan.phase).toBe("Completed");
    expect(plan.deletePods).toEqual([{ name: "r-1-uidr", uid: "uid-r-1-uidr" }]);
  });

  it("stays Failed, whatever else is asked of it", () => {
    const w = startedWorld(quick);
    w.run.status.phase = "Failed";
    w.setSpec({ suspend: true });
    const plan = w.reconcile();
    expect(plan.summary).toBe("Failed; removing r-1-uidr");
    expect(plan.phase).toBe("Failed");
  });

  it("that is being deleted is cleaned up as finished: finished comes before being deleted", () => {
    const w = startedWorld(quick);
    w.run.status.phase = "Completed";
    w.deleteRun();
    expect(w.reconcile().summary).toBe("Completed; removing r-1-uidr");
  });

  it("with nothing live left says only its phase", () => {
    const w = startedWorld(quick);
    w.podExit(0);
    w.settle();
    expect(w.status.phase).toBe("Completed");
    expect(w.reconcile().summary).toBe("Completed");
  });
});

describe("a run being deleted", () => {
  it("has its sandbox removed first, with its own grace, before any refusal of its status write is answered", () => {
    const w = startedWorld(quick);
    w.deleteRun();
    const plan = refused(w);
    expect(plan.summary).toBe("the run is being deleted; its sandbox goes first; removing r-1-uidr");
    expect(plan.phase).toBe("Planning");
    expect(plan.deletePods).toEqual([{ name: "r-1-uidr", uid: "uid-r-1-uidr" }]);
  });
});

describe("a refused status write", () => {
  it("stops a running run for a person, killing its sandbox with the kill grace", () => {
    const w = startedWorld(quick);
    const plan = refused(w);
    expect(plan.summary).toBe("needs human intervention: StatusWriteRefused");
    expect(plan.status).toMatchObject({ phase: "NeedsHumanIntervention", reason: "StatusWriteRefused", message: `the API server refused the run's status write (${REFUSAL})` });
    expect(plan.deletePods).toEqual([{ name: "r-1-uidr", uid: "uid-r-1-uidr", gracePeriodSeconds: 7 }]);
  });

  it("comes before a resume: a run whose writes are refused is not resumed", () => {
    const w = needingPerson();
    w.annotate("watchdog.dev/resume", "go");
    const plan = refused(w);
    expect(plan.summary).toBe("needs human intervention: StatusWriteRefused");
    expect(plan.createPod).toBeUndefined();
  });
});

describe("a resume", () => {
  it("of a run that needs a person hands it to Queued, which starts the next attempt in the same decision", () => {
    const w = needingPerson();
    w.annotate("watchdog.dev/resume", "go");
    const plan = w.reconcile();
    expect(plan.summary).toBe("resumed; starting attempt 2");
    expect(plan.phase).toBe("Starting");
    expect(plan.createPod?.metadata.name).toBe("r-2-uidr");
  });

  it("of a suspended run that needs a person is handed over and then suspended in the same decision: spec.suspend wins", () => {
    const w = needingPerson();
    w.setSpec({ suspend: true });
    w.annotate("watchdog.dev/resume", "go");
    const plan = w.reconcile();
    expect(plan.phase).toBe("Suspended");
    expect(plan.createPod).toBeUndefined();
  });
});

describe("a run waiting for a person", () => {
  it("runs nothing and stays waiting, even when suspended: waiting comes before suspension", () => {
    const w = needingPerson();
    w.setSpec({ suspend: true });
    const plan = w.reconcile();
    expect(plan.summary).toBe("waiting for a person");
    expect(plan.phase).toBe("NeedsHumanIntervention");
  });
});

describe("an oversize sandbox report", () => {
  it("stops the run for a person, killing its sandbox, and says what to clear", () => {
    const w = startedWorld(quick);
    overfill(w);
    const plan = w.reconcile();
    expect(plan.summary).toBe("needs human intervention: SandboxReportTooLarge");
    expect(plan.status?.message).toMatch(/^the sandbox's part of status \(heartbeat, toolCalls, checkpoint\) is \d+ bytes, over the sandbox protocol's limit of \d+; clear status.checkpoint \(or the records\) and resume$/);
    expect(plan.deletePods).toEqual([{ name: "r-1-uidr", uid: "uid-r-1-uidr", gracePeriodSeconds: 7 }]);
  });

  it("of a suspended run leaves it suspended: suspension comes first", () => {
    const w = startedWorld(quick);
    overfill(w);
    w.setSpec({ suspend: true });
    expect(w.reconcile().phase).toBe("Suspended");
  });

  it("comes before a spent budget: the run stops for the report", () => {
    const w = startedWorld({ ...quick, budget: { tokens: 10 } });
    w.report({ inputTokens: 100 });
    overfill(w);
    expect(w.reconcile().status).toMatchObject({ reason: "SandboxReportTooLarge" });
  });
});

describe("the phase's own policy", () => {
  it("starts a queued run's sandbox", () => {
    const plan = new World(quick).reconcile();
    expect(plan.summary).toBe("starting attempt 1");
    expect(plan.createPod?.metadata.name).toBe("r-1-uidr");
  });

  it("leaves a run awaiting a reply whose sandbox was released waiting, with no pod to watch", () => {
    const w = new World(quick);
    w.run.status = {
      phase: "AwaitingReply",
      attempt: 1,
      restarts: 0,
      approval: { id: "1-x", state: "Pending", requestedAt: iso(T0) },
    };
    const plan = w.reconcile();
    expect(plan.summary).toBe("awaiting a reply (sandbox released)");
    expect(plan.phase).toBe("AwaitingReply");
    expect(plan.createPod).toBeUndefined();
  });

  it("watches the sandbox of a run awaiting a reply that still has its pod: it is not treated as released", () => {
    const w = startedWorld(quick);
    w.heartbeat("AwaitingReply");
    w.settle();
    expect(w.status.podName).toBe("r-1-uidr");
    expect(w.reconcile()).toMatchObject({ summary: "awaiting a reply", phase: "AwaitingReply" });
  });

  it("watches a running run's sandbox: nothing to do while it heartbeats", () => {
    const w = startedWorld(quick);
    w.advance(10 * S);
    w.heartbeat("Planning");
    expect(w.reconcile()).toMatchObject({ summary: "no change", phase: "Planning", deletePods: [] });
  });
});
