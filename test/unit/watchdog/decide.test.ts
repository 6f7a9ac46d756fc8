import { describe, expect, it } from "vitest";
import { decide } from "../../../operator/watchdog/decide.ts";
import { isQuiet } from "../../../operator/watchdog/plan.ts";
import { T0, iso, pod, run } from "../fixtures.ts";
import { World, startedWorld } from "../world.ts";

const S = 1000;
const M = 60 * S;
const fast = { watchdog: { heartbeatTimeout: "1m", backoff: { initial: "10s", factor: 2, max: "1m" } } };

const started = (spec: Record<string, unknown> = fast) => startedWorld(spec);

describe("rule 1: start", () => {
  it("queues a new run and creates attempt 1's sandbox pod with the contract's labels, env and owner", () => {
    const w = new World();
    const plan = w.settle();
    expect(w.status.phase).toBe("Starting");
    expect(w.status.attempt).toBe(1);
    expect(w.status.podName).toBe("r-1-uidr");
    expect(w.annotations["watchdog.dev/attempt"]).toBe("1");
    expect(w.condition("Running")?.status).toBe("True");
    const created = w.pods.get("r-1-uidr")!;
    expect(created.metadata.labels).toMatchObject({ "watchdog.dev/run": "r", "watchdog.dev/attempt": "1" });
    expect(created.metadata.ownerReferences[0]).toMatchObject({ kind: "AgentRun", name: "r", uid: "uid-r", controller: true });
    expect(created.spec.restartPolicy).toBe("Never");
    expect(created.spec.containers[0].env).toEqual([
      { name: "WATCHDOG_RUN_NAME", value: "r" },
      { name: "WATCHDOG_RUN_NAMESPACE", value: "ns" },
      { name: "WATCHDOG_ATTEMPT", value: "1" },
    ]);
    expect(plan.wakeAt).toBeDefined();
  });

  it("records every phase transition in order, starting with Queued", () => {
    const w = started();
    w.podExit(0);
    w.settle();
    expect(w.status.transitions.map((t: any) => [t.from, t.phase])).toEqual([
      [undefined, "Queued"],
      ["Queued", "Starting"],
      ["Starting", "Planning"],
      ["Planning", "Completed"],
    ]);
  });

  it("moves the phase with the sandbox's reported state", () => {
    const w = started();
    expect(w.status.phase).toBe("Planning");
    w.heartbeat("ExecutingTool");
    w.settle();
    expect(w.status.phase).toBe("ExecutingTool");
  });

  it("a heartbeat-only change writes nothing and only moves the wake-up", () => {
    const w = started();
    const before = w.reconcile();
    w.advance(10 * S);
    w.heartbeat("Planning");
    const after = w.reconcile();
    expect(isQuiet(after)).toBe(true);
    expect(after.wakeAt! - before.wakeAt!).toBe(10 * S);
  });
});

describe("rule 2: hung", () => {
  it("deletes the pod after the deadline and not before, requeues with backoff and annotations", () => {
    const w = started();
    // The API server keeps the heartbeat's time in whole seconds; the deadline counts from the end
    // of that second, so a healthy sandbox is never killed early.
    const hbAt = w.now + 999;
    w.advance(1 * M + 999);
    w.settle();
    expect(w.pods.get("r-1-uidr")).toBeDefined(); // exactly at the deadline: not yet hung
    w.advance(1);
    const plan = w.settle();
    expect(w.pods.has("r-1-uidr")).toBe(false);
    expect(w.status.phase).toBe("Queued");
    expect(w.status.attempt).toBe(2);
    expect(w.status.restarts).toBe(1);
    expect(w.annotations["watchdog.dev/attempt"]).toBe("2");
    expect(w.annotations["watchdog.dev/backoff-reason"]).toBe("HeartbeatTimeout");
    const retryAfter = Date.parse(w.annotations["watchdog.dev/retry-after"]!);
    expect(retryAfter).toBeGreaterThanOrEqual(w.now + 10 * S);
    expect(w.condition("BackingOff")).toMatchObject({ status: "True", reason: "HeartbeatTimeout" });
    expect(w.status.lastFailure).toMatchObject({ reason: "HeartbeatTimeout", attempt: 1, state: "Planning" });
    const kill = w.plans.flatMap((p) => p.metrics).find((m) => m.kind === "hungKilled");
    expect(kill).toEqual({ kind: "hungKilled", deadline: hbAt + 1 * M });
    expect(w.events().some((e) => e.type === "Warning" && e.reason === "HeartbeatTimeout")).toBe(true);
    expect(plan.wakeAt).toBe(retryAfter);

    w.runUntil(retryAfter - 1);
    expect(w.pods.size).toBe(0);
    w.runUntil(retryAfter);
    expect(w.pods.get("r-2-uidr")).toBeDefined();
    expect(w.created.at(-1)!.at).toBeGreaterThanOrEqual(retryAfter);
    expect(w.status.phase).toBe("Starting");
    expect(w.condition("BackingOff")?.status).toBe("False");
  });

  it("counts a started sandbox that never heartbeats from its agent container's start", () => {
    const w = new World(fast);
    w.settle();
    w.advance(30 * S); // an image pull
    w.podRunning();
    const startedAt = w.now;
    w.runUntil(startedAt + 1 * M);
    expect(w.status.phase).toBe("Starting");
    w.runUntil(startedAt + 1 * M + 1);
    expect(w.status.phase).toBe("Queued");
    expect(w.status.lastFailure.reason).toBe("HeartbeatTimeout");
  });

  it("gives a sandbox whose agent has not started startTimeout, and counts that as a restart", () => {
    const w = new World({ watchdog: { ...fast.watchdog, startTimeout: "5m" } });
    w.settle();
    const createdAt = w.now;
    w.runUntil(createdAt + 5 * M);
    expect(w.status.phase).toBe("Starting");
    w.runUntil(createdAt + 5 * M + 1);
    expect(w.status).toMatchObject({ phase: "Queued", reason: "StartTimeout", restarts: 1 });
    expect(w.deleted.at(-1)).toMatchObject({ name: "r-1-uidr", grace: 2 });
  });

  it("never counts AwaitingReply as hung", () => {
    const w = started({ watchdog: { heartbeatTimeout: "1m", releaseAwaitingAfter: "2h" } });
    w.heartbeat("AwaitingReply");
    w.settle();
    w.runUntil(w.now + 60 * M);
    expect(w.status.phase).toBe("AwaitingReply");
    expect(w.pods.has("r-1-uidr")).toBe(true);
  });

  it("grows the backoff by the factor up to max", () => {
    const w = started({ watchdog: { heartbeatTimeout: "1m", maxRestarts: 10, backoff: { initial: "10s", factor: 3, max: "2m" } } });
    const waits: number[] = [];
    for (let i = 0; i < 5; i++) {
      w.podExit(1);
      w.settle();
      const failedAt = w.now;
      const retryAfter = Date.parse(w.annotations["watchdog.dev/retry-after"]!);
      waits.push(retryAfter - failedAt);
      w.runUntil(retryAfter);
      w.podRunning();
    }
    expect(waits).toEqual([10 * S, 30 * S, 90 * S, 120 * S, 120 * S]);
  });
});

describe("rule 3: crashed", () => {
  it("replaces a failed pod without waiting for the heartbeat timeout", () => {
    const w = started();
    w.advance(1 * S);
    w.podExit(137, "OOMKilled");
    w.settle();
    expect(w.status.phase).toBe("Queued");
    expect(w.status.restarts).toBe(1);
    expect(w.status.lastFailure.reason).toBe("PodFailed");
    expect(w.status.lastFailure.message).toContain("exit code 137");
    expect(w.status.lastFailure.message).toContain("OOMKilled");
    expect(w.condition("BackingOff")).toMatchObject({ status: "True", reason: "PodFailed" });
    w.runUntil(w.now + 10 * S);
    expect(w.pods.get("r-2-uidr")).toBeDefined();
  });

  it("treats deletion by anyone else as a crash", () => {
    const w = started();
    w.podDeletedByOthers();
    w.settle();
    expect(w.status.lastFailure.reason).toBe("PodFailed");
    expect(w.status.attempt).toBe(2);
  });

  it("ends the run on exit 0", () => {
    const w = started();
    w.podExit(0);
    w.settle();
    expect(w.status.phase).toBe("Completed");
    expect(w.condition("Succeeded")?.status).toBe("True");
    expect(w.status.completionTime).toBeDefined();
    // absorbing
    w.setSpec({ suspend: true });
    w.annotate("watchdog.dev/resume", "x");
    w.runUntil(w.now + 60 * M);
    expect(w.status.phase).toBe("Completed");
    expect(w.created).toHaveLength(1);
  });
});

describe("rule 4: rate limited", () => {
  it("uses the rate-limit backoff and spends no restart, even with maxRestarts 0", () => {
    const w = started({ watchdog: { maxRestarts: 0 } });
    w.toolCall({ name: "search", state: "Failed", httpStatus: 429 });
    w.heartbeat("ExecutingTool");
    w.settle();
    w.podExit(6); // the SDK's rate-limited exit
    w.settle();
    expect(w.status.phase).toBe("Queued");
    expect(w.status.restarts).toBe(0);
    expect(w.status.rateLimitRequeues).toBe(1);
    expect(w.annotations["watchdog.dev/backoff-reason"]).toBe("RateLimited");
    expect(Date.parse(w.annotations["watchdog.dev/retry-after"]!) - w.now).toBe(2 * S);
  });

  it("lets a reported Retry-After win, capped at max", () => {
    const w = started({ watchdog: { rateLimitBackoff: { max: "1m" } } });
    w.toolCall({ name: "search", state: "Failed", httpStatus: 429, retryAfterSeconds: 30 });
    w.podExit(6);
    w.settle();
    expect(Date.parse(w.annotations["watchdog.dev/retry-after"]!) - w.now).toBe(30 * S);

    const v = started({ watchdog: { rateLimitBackoff: { max: "1m" } } });
    v.toolCall({ name: "search", state: "Failed", httpStatus: 429, retryAfterSeconds: 3600 });
    v.podExit(6);
    v.settle();
    expect(Date.parse(v.annotations["watchdog.dev/retry-after"]!) - v.now).toBe(1 * M);
  });
});

describe("rule 5: budget", () => {
  it("needs a person when a failure would exceed maxRestarts, and leaves no pod", () => {
    const w = started({ watchdog: { maxRestarts: 1, backoff: { initial: "1s" } } });
    w.podExit(1);
    w.runUntil(w.now + 2 * S);
    w.podRunning();
    expect(w.status.restarts).toBe(1);
    w.podExit(1);
    w.settle();
    expect(w.status.phase).toBe("NeedsHumanIntervention");
    expect(w.condition("NeedsHumanIntervention")).toMatchObject({ status: "True", reason: "RecoveryBudgetExhausted" });
    expect(w.status.restarts).toBe(1);
    expect(w.livePods).toHaveLength(0);
    w.runUntil(w.now + 60 * M);
    expect(w.created).toHaveLength(2);
  });
});

describe("rule 6: loop", () => {
  it("stops a run whose newest calls failed the same way", () => {
    const w = started();
    for (let i = 0; i < 2; i++) w.toolCall({ name: "fetch", argsHash: "a1", state: "Failed" });
    w.settle();
    expect(w.status.phase).toBe("Planning");
    w.toolCall({ name: "fetch", argsHash: "a1", state: "Failed" });
    w.settle();
    expect(w.status.phase).toBe("NeedsHumanIntervention");
    expect(w.condition("NeedsHumanIntervention")?.reason).toBe("ToolLoop");
    expect(w.pods.has("r-1-uidr")).toBe(false);
    expect(w.events().some((e) => e.reason === "ToolLoop" && e.type === "Warning")).toBe(true);
    expect(w.plans.flatMap((p) => p.metrics)).toContainEqual({ kind: "needsHuman", reason: "ToolLoop" });
  });

  it("does not call different arguments, or a success in between, a loop", () => {
    const w = started();
    w.toolCall({ name: "fetch", argsHash: "a1", state: "Failed" });
    w.toolCall({ name: "fetch", argsHash: "a2", state: "Failed" });
    w.toolCall({ name: "fetch", argsHash: "a1", state: "Failed" });
    w.toolCall({ name: "fetch", argsHash: "a1", state: "Succeeded" });
    w.toolCall({ name: "fetch", argsHash: "a1", state: "Failed" });
    w.toolCall({ name: "fetch", argsHash: "a1", state: "Failed" });
    w.settle();
    expect(w.status.phase).toBe("Planning");
  });
});

describe("rule 7: stall", () => {
  const stall = { watchdog: { heartbeatTimeout: "10m", stall: { timeout: "30s", maxNudges: 2 } } };

  it("nudges after the timeout, then escalates after maxNudges", () => {
    const w = started(stall);
    w.heartbeat("Planning", { kind: "text" });
    w.settle();
    expect(w.status.stall).toMatchObject({ state: "Armed", nudges: 0 });
    const armed = w.now;
    w.runUntil(armed + 30 * S - 1);
    expect(w.status.stall.nudges).toBe(0);
    w.runUntil(armed + 30 * S);
    expect(w.status.stall).toMatchObject({ state: "Fired", nudges: 1 });
    expect(w.status.stall.lastNudge.message).toContain("Reply chain broken");
    w.runUntil(armed + 60 * S);
    expect(w.status.stall.nudges).toBe(2);
    expect(w.status.phase).toBe("Planning");
    w.runUntil(armed + 90 * S);
    expect(w.status.phase).toBe("NeedsHumanIntervention");
    expect(w.condition("NeedsHumanIntervention")?.reason).toBe("StallUnresolved");
    expect(w.livePods).toHaveLength(0);
    expect(w.plans.flatMap((p) => p.metrics).filter((m) => m.kind === "nudge")).toHaveLength(2);
  });

  it("is disarmed by a delta, a user message, NO_REPLY or empty text", () => {
    for (const kind of ["delta", "userMessage", "noReply", "emptyText"]) {
      const w = started(stall);
      w.heartbeat("Planning", { kind: "text" });
      w.settle();
      w.advance(10 * S);
      w.heartbeat("Planning", { kind });
      w.settle();
      expect(w.status.stall.state).toBe("Disarmed");
      w.runUntil(w.now + 5 * M);
      expect(w.status.stall.nudges).toBe(0);
    }
  });

  it("resets its count when a nudge is answered", () => {
    const w = started(stall);
    w.heartbeat("Planning", { kind: "text" });
    w.runUntil(w.now + 30 * S);
    expect(w.status.stall.nudges).toBe(1);
    w.advance(1 * S);
    w.heartbeat("Planning", { kind: "noReply" });
    w.settle();
    expect(w.status.stall).toMatchObject({ state: "Disarmed", nudges: 0 });
  });

  it("restarts the timer on a tool result without arming", () => {
    const w = started(stall);
    w.heartbeat("Planning", { kind: "text" });
    w.settle();
    const armed = w.now;
    w.advance(20 * S);
    w.heartbeat("ExecutingTool", { kind: "toolResult" });
    w.runUntil(armed + 40 * S);
    expect(w.status.stall).toMatchObject({ state: "Armed", nudges: 0 });
    w.runUntil(armed + 50 * S);
    expect(w.status.stall.nudges).toBe(1);

    const v = started(stall);
    v.heartbeat("Planning", { kind: "toolResult" });
    v.runUntil(v.now + 5 * M);
    expect(v.status.stall?.state ?? "Disarmed").toBe("Disarmed");
  });

  it("ignores activity a new attempt inherited from the last one", () => {
    const w = started({ watchdog: { heartbeatTimeout: "10m", backoff: { initial: "10s" }, stall: { timeout: "30s" } } });
    w.heartbeat("Planning", { kind: "text" });
    w.podExit(1);
    w.runUntil(w.now + 10 * S);
    w.podRunning();
    // attempt 2's first write names no activity; the merged heartbeat still holds attempt 1's text
    w.heartbeat("Planning", undefined, 2);
    expect(w.status.heartbeat.activity.kind).toBe("text");
    w.runUntil(w.now + 5 * M);
    expect(w.status.stall?.nudges ?? 0).toBe(0);
  });

  it("sends nothing when disabled or suspended", () => {
    const w = started({ watchdog: { heartbeatTimeout: "10m", stall: { enabled: false } } });
    w.heartbeat("Planning", { kind: "text" });
    w.runUntil(w.now + 5 * M);
    expect(w.status.stall?.nudges ?? 0).toBe(0);

    const v = started(stall);
    v.heartbeat("Planning", { kind: "text" });
    v.settle();
    v.setSpec({ suspend: true });
    v.runUntil(v.now + 5 * M);
    expect(v.status.phase).toBe("Suspended");
    expect(v.plans.flatMap((p) => p.metrics).filter((m) => m.kind === "nudge")).toHaveLength(0);
  });
});

describe("suspend", () => {
  it("removes the pod, fires no timer, and resumes as a new attempt", () => {
    const w = started();
    w.setSpec({ suspend: true });
    const plan = w.settle();
    expect(w.status.phase).toBe("Suspended");
    expect(w.condition("Running")).toMatchObject({ status: "False", reason: "Suspended" });
    expect(w.pods.has("r-1-uidr")).toBe(false);
    expect(plan.wakeAt).toBeUndefined();
    w.runUntil(w.now + 60 * M);
    expect(w.created).toHaveLength(1);
    w.setSpec({ suspend: false });
    w.settle();
    expect(w.status.phase).toBe("Starting");
    expect(w.status.attempt).toBe(2);
    expect(w.status.restarts).toBe(0);
    expect(w.pods.has("r-2-uidr")).toBe(true);
  });
});

describe("rule 8: resume", () => {
  it("clears NeedsHumanIntervention with fresh budgets and a fresh failure streak", () => {
    const w = started({ watchdog: { maxRestarts: 1, backoff: { initial: "1s" } } });
    w.podExit(1);
    w.runUntil(w.now + 2 * S);
    for (let i = 0; i < 3; i++) w.toolCall({ name: "fetch", argsHash: "a1", state: "Failed" });
    w.heartbeat("Planning");
    w.settle();
    expect(w.condition("NeedsHumanIntervention")?.reason).toBe("ToolLoop");
    expect(w.status.restarts).toBe(1);
    w.annotate("watchdog.dev/resume", "2026-11-30T13:00:00Z");
    w.settle();
    expect(w.status.phase).toBe("Starting");
    expect(w.status.attempt).toBe(3);
    expect(w.status.restarts).toBe(0);
    expect(w.condition("NeedsHumanIntervention")).toMatchObject({ status: "False", reason: "Resumed" });
    w.podRunning();
    w.heartbeat("Planning");
    w.settle();
    expect(w.status.phase).toBe("Planning"); // the old failures do not count again
    w.toolCall({ name: "fetch", argsHash: "a1", state: "Failed" });
    w.settle();
    expect(w.status.phase).toBe("Planning");
    // the same value again does nothing
    for (let i = 0; i < 2; i++) w.toolCall({ name: "fetch", argsHash: "a1", state: "Failed" });
    w.settle();
    expect(w.status.phase).toBe("NeedsHumanIntervention");
    w.settle();
    expect(w.status.phase).toBe("NeedsHumanIntervention");
  });

  it("records each phase a resume passes through", () => {
    const w = started();
    w.advance(1000);
    for (let i = 0; i < 3; i++) w.toolCall({ name: "fetch", argsHash: "a1", state: "Failed" });
    w.settle();
    w.advance(1000);
    w.annotate("watchdog.dev/resume", "1");
    w.settle();
    const tail = w.status.transitions.slice(-3).map((t: any) => [t.from, t.phase, t.reason]);
    expect(tail).toEqual([
      ["Planning", "NeedsHumanIntervention", "ToolLoop"],
      ["NeedsHumanIntervention", "Queued", "Resumed"],
      ["Queued", "Starting", undefined],
    ]);
    const times = w.status.transitions.slice(-3).map((t: any) => Date.parse(t.time));
    expect(new Set(times).size).toBe(3); // one decision, three distinct times
  });

  it("records a resume value given outside NeedsHumanIntervention so it cannot fire later", () => {
    const w = started();
    w.annotate("watchdog.dev/resume", "early");
    w.settle();
    expect(w.status.observedResume).toBe("early");
    expect(w.status.attempt).toBe(1);
  });
});

describe("rule 9: never two sandboxes", () => {
  it("waits for the old pod to be gone before creating the next", () => {
    const w = started();
    w.kubelet = "slow";
    w.runUntil(w.now + 1 * M + 1000);
    expect(w.status.phase).toBe("Queued");
    w.runUntil(w.now + 10 * M);
    expect(w.pods.has("r-2-uidr")).toBe(false);
    w.finalizePods();
    w.settle();
    expect(w.pods.has("r-2-uidr")).toBe(true);
    expect(w.violations).toEqual([]);
  });

  it("ignores heartbeats from a stale attempt", () => {
    const w = started();
    w.podExit(1);
    w.runUntil(w.now + 10 * S);
    expect(w.status.attempt).toBe(2);
    const created = w.now;
    w.podRunning();
    for (let i = 0; i < 10; i++) {
      w.advance(10 * S);
      w.heartbeat("ExecutingTool", undefined, 1);
      w.settle();
      if (w.status.attempt !== 2) break;
    }
    expect(w.status.lastFailure.reason).toBe("HeartbeatTimeout");
    expect(w.status.lastFailure.attempt).toBe(2);
    expect(w.deleted.at(-1)!.at - created).toBeGreaterThan(1 * M);
  });

  it("deletes a stray pod of an earlier attempt while a run is active", () => {
    const plan = decide({
      run: run({ status: { phase: "Planning", attempt: 2, restarts: 1, podName: "r-2", podUID: "uid-pod-2" } }),
      pods: [pod(1), pod(2)],
      now: T0,
    });
    expect(plan.deletePods.map((d) => d.name)).toEqual(["r-1"]);
    expect(plan.createPod).toBeUndefined();
  });

  it("adopts the current attempt's pod when the status write after its creation was lost", () => {
    const plan = decide({ run: run({ status: { phase: "Queued", attempt: 1, restarts: 0 } }), pods: [pod(1)], now: T0 });
    expect(plan.createPod).toBeUndefined();
    expect(plan.status).toMatchObject({ phase: "Starting", podName: "r-1", podUID: "uid-pod-1" });
  });
});

describe("durability", () => {
  it("decides the same from the same object, whatever ran before", () => {
    const w = started();
    w.podExit(1);
    w.settle();
    const frozen = structuredClone(w.run);
    const a = decide({ run: frozen, pods: [...w.pods.values()], now: w.now + 3 * S });
    const b = decide({ run: structuredClone(frozen), pods: [...w.pods.values()], now: w.now + 3 * S });
    expect(a).toEqual(b);
    expect(a.wakeAt).toBe(Date.parse(w.annotations["watchdog.dev/retry-after"]!));
  });

  it("honours the later of the annotation and the status copy of retry-after", () => {
    const status = { phase: "Queued", attempt: 2, restarts: 1, retryAfter: iso(T0 + 5 * S) };
    const plan = decide({
      run: run({ status, annotations: { "watchdog.dev/retry-after": iso(T0 + 20 * S), "watchdog.dev/attempt": "2" } }),
      pods: [],
      now: T0 + 10 * S,
    });
    expect(plan.createPod).toBeUndefined();
    expect(plan.wakeAt).toBe(T0 + 20 * S);
  });
});

describe("bad input", () => {
  it("reports garbage in sandbox fields in a condition and keeps going", () => {
    const w = started();
    w.run.status.heartbeat = { time: "yesterday", attempt: "one", state: "Dancing" };
    const plan = w.reconcile();
    expect(w.condition("SandboxReportValid")).toMatchObject({ status: "False", reason: "InvalidSandboxReport" });
    expect(w.condition("SandboxReportValid")!.message).toContain("status.heartbeat");
    expect(plan.phase).toBe("Starting");
  });

  it("does not let a heartbeat from the future keep a dead sandbox alive", () => {
    const w = started();
    w.run.status.heartbeat = { time: iso(w.now + 365 * 24 * 60 * M), attempt: 1, state: "Planning" };
    w.runUntil(w.now + 2 * M);
    expect(w.status.lastFailure?.reason).toBe("HeartbeatTimeout");
  });

  it("survives a run it cannot read", () => {
    const plan = decide({ run: { metadata: {}, spec: { template: 3 } }, pods: [], now: T0 });
    expect(isQuiet(plan)).toBe(true);
    expect(plan.summary).toContain("cannot read run");
  });
});

describe("defaults", () => {
  it("resolves spec over install defaults over built-in defaults, and shows the result", () => {
    const w = new World({ watchdog: { backoff: { max: "20m" } } }, { heartbeatTimeout: "2m", backoff: { initial: "5s", max: "1m" } });
    w.settle();
    expect(w.status.watchdog).toMatchObject({
      heartbeatTimeout: "2m",
      maxRestarts: 3,
      backoff: { initial: "5s", factor: 2, max: "20m" },
    });
  });
});

describe("approval waits", () => {
  const awaiting = { watchdog: { heartbeatTimeout: "1m", releaseAwaitingAfter: "5m", approvalTimeout: "1h" } };

  function asking(spec: Record<string, unknown> = awaiting): World {
    const w = started(spec);
    w.heartbeat("AwaitingReply");
    w.settle();
    return w;
  }

  it("records the request and releases the pod after releaseAwaitingAfter, spending nothing", () => {
    const w = asking();
    expect(w.status.approval).toMatchObject({ state: "Pending" });
    const asked = w.now;
    w.runUntil(asked + 5 * M - 1);
    expect(w.pods.has("r-1-uidr")).toBe(true);
    w.runUntil(asked + 5 * M);
    expect(w.pods.has("r-1-uidr")).toBe(false);
    expect(w.status).toMatchObject({ phase: "AwaitingReply", reason: "SandboxReleased", attempt: 2, restarts: 0 });
    expect(w.status.podName).toBeUndefined();
    w.runUntil(w.now + 30 * M);
    expect(w.created).toHaveLength(1);
  });

  it("starts a new sandbox with the answer when a released run is approved", () => {
    const w = asking();
    w.runUntil(w.now + 5 * M);
    w.answer("approve", "ship it");
    w.settle();
    expect(w.status.approval).toMatchObject({ state: "Approved", answer: "ship it" });
    expect(w.annotations["watchdog.dev/approve"]).toBeUndefined();
    expect(w.status).toMatchObject({ phase: "Starting", attempt: 2, restarts: 0 });
    expect(w.pods.has("r-2-uidr")).toBe(true);
  });

  it("lets a live sandbox carry on when approved before the release", () => {
    const w = asking();
    w.answer("approve", "yes");
    w.settle();
    expect(w.status.approval.state).toBe("Approved");
    expect(w.pods.has("r-1-uidr")).toBe(true);
    w.heartbeat("Planning");
    w.settle();
    expect(w.status.phase).toBe("Planning");
    // a second question is a new request
    w.advance(1 * S);
    w.heartbeat("AwaitingReply");
    w.settle();
    expect(w.status.approval.state).toBe("Pending");
  });

  it("ends the run on a rejection, and on the approval timeout", () => {
    const w = asking();
    w.answer("reject", "too risky");
    w.settle();
    expect(w.status).toMatchObject({ phase: "Failed", reason: "Rejected" });
    expect(w.condition("Succeeded")).toMatchObject({ status: "False", reason: "Rejected" });
    expect(w.livePods).toHaveLength(0);

    const v = asking();
    v.runUntil(v.now + 1 * 60 * M);
    expect(v.status).toMatchObject({ phase: "Failed", reason: "ApprovalTimeout" });
    expect(v.status.approval.state).toBe("TimedOut");
  });
});

describe("rule 10: unconfirmed side effects", () => {
  it("stops for a person when a non-idempotent call was started and the sandbox died", () => {
    const w = started();
    w.toolCall({ name: "send_email", state: "Started" });
    w.run.status.toolCalls.at(-1).idempotent = false;
    w.podExit(1);
    w.settle();
    expect(w.status.phase).toBe("NeedsHumanIntervention");
    expect(w.condition("NeedsHumanIntervention")?.reason).toBe("UnconfirmedSideEffect");
    expect(w.status.lastFailure.tool).toMatchObject({ name: "send_email", state: "Started" });
  });

  it("looks at every started non-idempotent call of the attempt, not only the newest", () => {
    const w = started();
    w.toolCall({ name: "send_email", state: "Started" });
    w.run.status.toolCalls.at(-1).idempotent = false;
    w.toolCall({ name: "search", state: "Succeeded" });
    w.podExit(1);
    w.settle();
    expect(w.condition("NeedsHumanIntervention")?.reason).toBe("UnconfirmedSideEffect");
  });

  it("requeues when the started call is idempotent, so it can be replayed with its key", () => {
    const w = started();
    w.toolCall({ name: "send_email", state: "Started" });
    w.run.status.toolCalls.at(-1).idempotent = true;
    w.podExit(1);
    w.settle();
    expect(w.status.phase).toBe("Queued");
    expect(w.status.lastFailure.tool).toMatchObject({ name: "send_email", state: "Started" });
  });
});
