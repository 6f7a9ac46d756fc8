// The Queued policy (rule 1, rule 9) in its own words: when it starts a sandbox and with what, when
// it adopts one whose status write was lost, what it waits for and says while it waits, and how it
// refuses a template whose service account would go unfenced.
import { describe, expect, it } from "vitest";
import { DISARMED } from "../../../operator/watchdog/stall.ts";
import { DEFAULT_POD_GRACE_SECONDS } from "../../../operator/watchdog/sandboxes.ts";
import { decide } from "../../../operator/watchdog/decide.ts";
import { T0, iso, run } from "../fixtures.ts";
import { World, startedWorld } from "../world.ts";

const S = 1000;
const START_TIMEOUT = { watchdog: { startTimeout: "90s" } };
const RETRIES = { maxRestarts: 3, backoff: { initial: "1s", factor: 1, max: "1s" } };
const plannedEvents = (w: World) => w.plans.flatMap((p) => p.events);

describe("starting an attempt", () => {
  it("names the pod, takes the template's grace, disarms the stall watch, and looks again just after the start timeout", () => {
    const w = new World({ ...START_TIMEOUT, template: { spec: { terminationGracePeriodSeconds: 45, containers: [{ name: "agent", image: "agent:1" }] } } });
    const plan = w.reconcile();
    expect(plan.summary).toBe("starting attempt 1");
    expect(plan.phase).toBe("Starting");
    expect(plan.createPod?.metadata.name).toBe("r-1-uidr");
    expect(plan.wakeAt).toBe(T0 + 90 * S + 1);
    expect(w.status).toMatchObject({ podName: "r-1-uidr", podGracePeriodSeconds: 45, startTime: iso(T0).replace(".000Z", "Z"), stall: DISARMED });
    // The start is in status already: no Event for it.
    expect(plannedEvents(w)).toEqual([]);
  });

  it("keeps a grace of 0 and takes the default for one that is no whole number of seconds", () => {
    for (const [grace, expected] of [
      [0, 0],
      [-1, DEFAULT_POD_GRACE_SECONDS],
      [1.5, DEFAULT_POD_GRACE_SECONDS],
      ["45", DEFAULT_POD_GRACE_SECONDS],
      [undefined, DEFAULT_POD_GRACE_SECONDS],
    ] as const) {
      const w = new World({ template: { spec: { ...(grace === undefined ? {} : { terminationGracePeriodSeconds: grace }), containers: [{ name: "agent", image: "agent:1" }] } } });
      w.reconcile();
      expect(w.status.podGracePeriodSeconds, `terminationGracePeriodSeconds ${String(grace)}`).toBe(expected);
    }
  });

  it("disarms a stall watch armed in the attempt before, and keeps the run's first start time", () => {
    const w = startedWorld({ watchdog: { startTimeout: "90s", ...RETRIES } });
    const firstStart = w.status.startTime;
    w.run.status.stall = { state: "Nudged", nudges: 2 };
    w.podExit(1);
    w.settle();
    w.advance(2 * S);
    w.settle();
    expect(w.status.attempt).toBe(2);
    expect(w.status.podName).toBe("r-2-uidr");
    expect(w.status.stall).toMatchObject(DISARMED);
    expect(w.status.startTime).toBe(firstStart);
  });
});

describe("adopting the attempt's pod", () => {
  it("takes the pod whose status write was lost, says so in an Event, and keeps the start time", () => {
    const w = new World(START_TIMEOUT);
    const before = structuredClone(w.run.status ?? {});
    w.reconcile(); // the pod is created...
    w.run.status = before; // ...but the status write naming it is lost
    w.run.status.startTime = iso(T0 - 5 * S);
    w.advance(3 * S);
    const plan = w.reconcile();
    expect(plan.summary).toBe("adopted sandbox pod r-1-uidr");
    expect(plan.phase).toBe("Starting");
    expect(plan.createPod).toBeUndefined();
    expect(plan.wakeAt).toBe(T0 + 3 * S + 90 * S + 1);
    expect(w.status).toMatchObject({ podName: "r-1-uidr", podUID: "uid-r-1-uidr", nodeName: "node-1", startTime: iso(T0 - 5 * S) });
    expect(plannedEvents(w).at(-1)).toEqual({
      type: "Normal",
      reason: "SandboxAdopted",
      action: "AdoptPod",
      note: "sandbox pod r-1-uidr for attempt 1 was created before a status write that was lost; adopted it",
    });
  });
});

describe("waiting", () => {
  it("names every pod it waits for before the next attempt starts", () => {
    const w = startedWorld({ watchdog: { ...RETRIES, heartbeatTimeout: "10s" } });
    w.kubelet = "slow"; // a killed pod stays terminating, its containers running
    w.advance(11 * S);
    w.settle();
    w.advance(5 * S);
    const plan = w.settle();
    expect(w.status.phase).toBe("Queued");
    expect(plan.summary).toBe("waiting for r-1-uidr to be confirmed gone before attempt 2 starts");
    expect(plan.createPod).toBeUndefined();
  });

  it("backs off until the later of the status' and the annotation's retry-after", () => {
    const w = startedWorld({ watchdog: { maxRestarts: 3, backoff: { initial: "10s", factor: 1, max: "10s" } } });
    w.podExit(1);
    w.settle();
    expect(w.status.phase).toBe("Queued");
    const statusRetry = Date.parse(w.status.retryAfter);
    // A later annotation (a person, or a write the status lost) wins...
    const later = statusRetry + 30 * S;
    w.annotate("watchdog.dev/retry-after", iso(later));
    let plan = w.reconcile();
    expect(plan.summary).toBe(`backing off until ${iso(later)}`);
    expect(plan.wakeAt).toBe(later);
    // ...and so does a later status copy when the annotation is earlier or gone.
    w.annotate("watchdog.dev/retry-after", iso(statusRetry - 5 * S));
    plan = w.reconcile();
    expect(plan.summary).toBe(`backing off until ${iso(statusRetry)}`);
    delete w.run.status.retryAfter;
    w.annotate("watchdog.dev/retry-after", iso(later));
    plan = w.reconcile();
    expect(plan.summary).toBe(`backing off until ${iso(later)}`);
    w.advance(later - w.now);
    expect(w.reconcile().summary).toBe("starting attempt 2");
  });
});

describe("a template's own service account", () => {
  it("fails the run before any pod, naming the account, with a Warning Event", () => {
    const r = run({ spec: { template: { spec: { serviceAccountName: "builder", containers: [{ name: "agent", image: "agent:1" }] } } } });
    r.metadata.finalizers = ["watchdog.dev/sandbox-cleanup"];
    r.status = { phase: "Queued", attempt: 1 };
    const plan = decide({ run: r, pods: [], now: T0, sandbox: { serviceAccount: "run", clusterRole: "agent-watchdog-sandbox", tokenExpirationSeconds: 3600 } });
    expect(plan.createPod).toBeUndefined();
    expect(plan.summary).toBe("refused service account builder");
    expect(plan.phase).toBe("Failed");
    expect(plan.status).toMatchObject({ phase: "Failed", reason: "ServiceAccountRefused", completionTime: iso(T0).replace(".000Z", "Z") });
    const message = plan.status!.message as string;
    expect(message).toMatch(/^spec\.template\.spec\.serviceAccountName builder is refused: .* ending in -sandbox$/);
    expect(plan.events).toContainEqual({ type: "Warning", reason: "ServiceAccountRefused", action: "RefuseRun", note: message });
  });
});
