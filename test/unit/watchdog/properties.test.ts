// Property tests of the watchdog core over random event sequences: whatever the sandbox, the
// kubelet, the user and the clock do, the invariants of DESIGN.md hold.
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { decide } from "../../../operator/watchdog/decide.ts";
import { isQuiet } from "../../../operator/watchdog/plan.ts";
import { parseDuration } from "../../../operator/api/duration.ts";
import { parseDecimal } from "../../../operator/api/decimal.ts";
import { resolveBudget } from "../../../operator/api/defaults.ts";
import { readRun } from "../../../operator/api/read-run.ts";
import { exhausted, measures, spending } from "../../../operator/watchdog/budget.ts";
import { heartbeatManagedFields, iso } from "../fixtures.ts";
import { World, type Kubelet } from "../world.ts";

const RUNS = Number(process.env.PROPERTY_RUNS ?? 1000);

type Command =
  | { kind: "advance"; ms: number }
  | { kind: "heartbeat"; state: "Planning" | "ExecutingTool" | "AwaitingReply"; activity?: string }
  | { kind: "staleHeartbeat" }
  | { kind: "toolCall"; name: string; args: string; state: "Started" | "Succeeded" | "Failed"; rateLimited: boolean; retryAfter?: number; idempotent?: boolean }
  | { kind: "podRunning" }
  | { kind: "podExit"; code: number }
  | { kind: "podDeletedByOthers" }
  | { kind: "finalizePods" }
  | { kind: "forceDelete" }
  | { kind: "nodeBack" }
  | { kind: "suspend"; value: boolean }
  | { kind: "resume"; token: string }
  | { kind: "garbage" }
  | { kind: "answer"; approve: boolean }
  | { kind: "deleteRun" }
  | { kind: "quarantine" }
  | { kind: "heartbeatTimeout"; seconds: number }
  | { kind: "usage"; tokens: number; calls: number; cost: string }
  | { kind: "budget"; tokens: number }
  | { kind: "wake" };

const command: fc.Arbitrary<Command> = fc.oneof(
  { weight: 4, arbitrary: fc.record({ kind: fc.constant("advance" as const), ms: fc.integer({ min: 0, max: 180_000 }) }) },
  {
    weight: 4,
    arbitrary: fc.record(
      {
        kind: fc.constant("heartbeat" as const),
        state: fc.constantFrom("Planning" as const, "ExecutingTool" as const, "AwaitingReply" as const),
        activity: fc.constantFrom("text", "delta", "toolResult", "userMessage", "noReply", "emptyText"),
      },
      { requiredKeys: ["kind", "state"] },
    ),
  },
  { weight: 1, arbitrary: fc.constant({ kind: "staleHeartbeat" as const }) },
  {
    weight: 3,
    arbitrary: fc.record(
      {
        kind: fc.constant("toolCall" as const),
        name: fc.constantFrom("search", "email"),
        args: fc.constantFrom("a", "b"),
        state: fc.constantFrom("Started" as const, "Succeeded" as const, "Failed" as const),
        rateLimited: fc.boolean(),
        retryAfter: fc.integer({ min: 0, max: 3600 }),
        idempotent: fc.boolean(),
      },
      { requiredKeys: ["kind", "name", "args", "state", "rateLimited"] },
    ),
  },
  { weight: 2, arbitrary: fc.constant({ kind: "podRunning" as const }) },
  { weight: 2, arbitrary: fc.record({ kind: fc.constant("podExit" as const), code: fc.constantFrom(0, 1, 3, 6, 137) }) },
  { weight: 1, arbitrary: fc.constant({ kind: "podDeletedByOthers" as const }) },
  { weight: 2, arbitrary: fc.constant({ kind: "finalizePods" as const }) },
  { weight: 1, arbitrary: fc.constant({ kind: "forceDelete" as const }) },
  { weight: 1, arbitrary: fc.constant({ kind: "nodeBack" as const }) },
  { weight: 1, arbitrary: fc.record({ kind: fc.constant("suspend" as const), value: fc.boolean() }) },
  { weight: 1, arbitrary: fc.record({ kind: fc.constant("resume" as const), token: fc.constantFrom("r1", "r2", "r3") }) },
  { weight: 1, arbitrary: fc.constant({ kind: "garbage" as const }) },
  { weight: 1, arbitrary: fc.record({ kind: fc.constant("answer" as const), approve: fc.boolean() }) },
  { weight: 1, arbitrary: fc.constant({ kind: "deleteRun" as const }) },
  { weight: 1, arbitrary: fc.constant({ kind: "quarantine" as const }) },
  { weight: 1, arbitrary: fc.record({ kind: fc.constant("heartbeatTimeout" as const), seconds: fc.integer({ min: 5, max: 600 }) }) },
  {
    weight: 3,
    arbitrary: fc.record({
      kind: fc.constant("usage" as const),
      tokens: fc.integer({ min: 0, max: 40_000 }),
      calls: fc.integer({ min: 0, max: 3 }),
      cost: fc.constantFrom("0", "0.1", "0.25", "1"),
    }),
  },
  { weight: 1, arbitrary: fc.record({ kind: fc.constant("budget" as const), tokens: fc.integer({ min: 0, max: 200_000 }) }) },
  { weight: 4, arbitrary: fc.constant({ kind: "wake" as const }) },
);

const durationS = (min: number, max: number) => fc.integer({ min, max }).map((s) => `${s}s`);
const settings = fc.record({
  heartbeatTimeout: durationS(5, 300),
  maxRestarts: fc.integer({ min: 0, max: 4 }),
  backoff: fc.record({ initial: durationS(1, 60), factor: fc.constantFrom(1, 1.5, 2, 3), max: durationS(60, 600) }),
  rateLimitBackoff: fc.record({ initial: durationS(1, 10), factor: fc.constantFrom(1, 2), max: durationS(10, 300) }),
  maxConsecutiveToolFailures: fc.integer({ min: 1, max: 4 }),
  stall: fc.record({ enabled: fc.boolean(), timeout: durationS(5, 60), maxNudges: fc.integer({ min: 0, max: 3 }) }),
  releaseAwaitingAfter: durationS(5, 600),
  approvalTimeout: durationS(60, 3600),
});

// A run budget, or none; its limits small enough for random usage to reach them.
const budget = fc.option(
  fc.record(
    {
      tokens: fc.integer({ min: 0, max: 150_000 }),
      outputTokens: fc.integer({ min: 0, max: 100_000 }),
      toolCalls: fc.integer({ min: 0, max: 12 }),
      cost: fc.constantFrom({ amount: "0.8", currency: "USD" }, { amount: "3", currency: "USD" }),
      wallClock: durationS(60, 3600),
      warnAt: fc.constantFrom(0.5, 0.8, 1),
    },
    { requiredKeys: [] },
  ),
  { nil: undefined },
);

const scenario = fc.record({
  watchdog: settings,
  budget,
  kubelet: fc.constantFrom<Kubelet>("prompt", "slow", "cutOff"),
  // The sandbox's clock may be off by up to an hour either way: it must not matter.
  clockSkewMs: fc.oneof(fc.constant(0), fc.integer({ min: -3_600_000, max: 3_600_000 })),
  commands: fc.array(command, { minLength: 1, maxLength: 30 }),
});

function play(w: World, c: Command): void {
  switch (c.kind) {
    case "advance":
      w.advance(c.ms);
      break;
    case "heartbeat":
      w.heartbeat(c.state, c.activity ? { kind: c.activity } : undefined);
      break;
    case "staleHeartbeat":
      if ((w.status.attempt ?? 0) > 1) w.heartbeat("Planning", { kind: "delta" }, w.status.attempt - 1);
      break;
    case "toolCall":
      w.toolCall({
        name: c.name,
        argsHash: c.args,
        state: c.state,
        ...(c.state === "Failed" && c.rateLimited ? { httpStatus: 429 } : {}),
        ...(c.state === "Failed" && c.rateLimited && c.retryAfter !== undefined ? { retryAfterSeconds: c.retryAfter } : {}),
      });
      if (c.idempotent !== undefined) w.run.status.toolCalls.at(-1).idempotent = c.idempotent;
      break;
    case "podRunning":
      if (w.currentPod() && !w.currentPod()!.metadata.deletionTimestamp) w.podRunning();
      break;
    case "podExit":
      w.podExit(c.code);
      break;
    case "podDeletedByOthers":
      w.podDeletedByOthers();
      break;
    case "finalizePods":
      w.finalizePods();
      break;
    case "forceDelete":
      w.forceDeleteByOthers();
      break;
    case "nodeBack":
      w.nodeBack();
      break;
    case "suspend":
      w.setSpec({ suspend: c.value });
      break;
    case "resume":
      w.annotate("watchdog.dev/resume", c.token);
      break;
    case "garbage":
      w.run.status = { ...w.status, heartbeat: { time: "not a time", attempt: -3, state: 42 }, toolCalls: "nope" };
      break;
    case "answer":
      w.answer(c.approve ? "approve" : "reject", "from a person");
      break;
    case "deleteRun":
      w.deleteRun();
      break;
    case "quarantine": {
      // Someone takes the current pod out for debugging: its label and owner reference go.
      const pod = w.currentPod();
      if (pod) {
        delete pod.metadata.labels["watchdog.dev/run"];
        delete pod.metadata.ownerReferences;
      }
      break;
    }
    case "heartbeatTimeout":
      w.setSpec({ watchdog: { ...(w.run.spec.watchdog ?? {}), heartbeatTimeout: `${c.seconds}s` } });
      break;
    case "usage": {
      // The sandbox reports its attempt's cumulative usage: never lower within the attempt (the
      // CRD's transition rule refuses that).
      const attempt = w.status.attempt ?? 1;
      const hb = w.status.heartbeat;
      const before = hb && typeof hb === "object" && hb.attempt === attempt && hb.usage ? hb.usage : {};
      const cost = (parseDecimal(before.cost ?? "0") ?? 0n) + (parseDecimal(c.cost) ?? 0n);
      w.report(
        {
          inputTokens: (before.inputTokens ?? 0) + Math.floor(c.tokens / 2),
          outputTokens: (before.outputTokens ?? 0) + Math.ceil(c.tokens / 2),
          toolCalls: (before.toolCalls ?? 0) + c.calls,
          cost: (Number(cost / 10n ** 16n) / 100).toFixed(2),
        },
        attempt,
      );
      break;
    }
    case "budget":
      w.setSpec({ budget: { ...(w.run.spec.budget ?? {}), tokens: c.tokens } });
      break;
    case "wake": {
      const wake = w.plans.at(-1)?.wakeAt;
      if (wake !== undefined && wake > w.now) w.advance(wake - w.now);
      break;
    }
  }
}

interface Observer {
  (w: World, before: { status: any; now: number }): void;
}

/** Plays a scenario, reconciling after each command, and calls `check` after each step. */
function simulate(s: { watchdog: any; budget?: any; kubelet: Kubelet; clockSkewMs: number; commands: Command[] }, check: Observer, started?: (w: World) => void): World {
  const w = new World({ watchdog: s.watchdog, ...(s.budget ? { budget: s.budget } : {}) });
  w.kubelet = s.kubelet;
  w.sandboxClockSkewMs = s.clockSkewMs;
  w.settle();
  started?.(w);
  for (const c of s.commands) {
    const before = { status: structuredClone(w.status), now: w.now };
    play(w, c);
    w.settle();
    check(w, before);
  }
  return w;
}

const params = { numRuns: RUNS };

/** The run's spending against each limit of its budget, as the status and the clock say now. */
function budgetMeasures(w: World) {
  const read = readRun(w.run);
  if (!read.ok) return [];
  const status = read.run.status ?? {};
  const budget = resolveBudget(read.run.spec.budget, undefined);
  const start = status.startTime ? Date.parse(status.startTime) : undefined;
  return measures(budget, spending(status.spent, status.heartbeat, status.attempt ?? 0, budget.prices), start === undefined ? undefined : w.now - start);
}

describe("watchdog core invariants", () => {
  it("never starts a sandbox while another may still run, never force-deletes, never creates a pod twice", () => {
    fc.assert(
      fc.property(scenario, (s) => {
        simulate(s, (w) => {
          // Live includes terminating pods whose containers a cut-off node keeps running.
          expect(w.livePods.filter((p) => !p.metadata.deletionTimestamp).length).toBeLessThanOrEqual(1);
          expect(w.violations.filter((v) => !v.includes("retry-after"))).toEqual([]);
        });
      }),
      params,
    );
  });

  it("never lowers attempt or restarts", () => {
    fc.assert(
      fc.property(scenario, (s) => {
        simulate(s, (w, before) => {
          expect(w.status.attempt ?? 0).toBeGreaterThanOrEqual(before.status.attempt ?? 0);
          // restarts only go down through a resume, which grants fresh budgets
          if (w.status.observedResume === before.status.observedResume) {
            expect(w.status.restarts ?? 0).toBeGreaterThanOrEqual(before.status.restarts ?? 0);
          }
        });
      }),
      params,
    );
  });

  it("keeps Completed and Failed absorbing", () => {
    fc.assert(
      fc.property(scenario, (s) => {
        simulate(s, (w, before) => {
          if (before.status.phase === "Completed" || before.status.phase === "Failed") {
            expect(w.status.phase).toBe(before.status.phase);
            expect(w.status.attempt).toBe(before.status.attempt);
          }
        });
      }),
      params,
    );
  });

  it("creates no pod before retry-after", () => {
    fc.assert(
      fc.property(scenario, (s) => {
        const w = simulate(s, () => {});
        expect(w.violations.filter((v) => v.includes("retry-after"))).toEqual([]);
      }),
      params,
    );
  });

  it("waits no longer than the configured max for any backoff", () => {
    fc.assert(
      fc.property(scenario, (s) => {
        const limit = Math.max(parseDuration(s.watchdog.backoff.max), parseDuration(s.watchdog.rateLimitBackoff.max));
        simulate(s, (w, before) => {
          if (w.status.retryAfter && w.status.retryAfter !== before.status.retryAfter) {
            const wait = Date.parse(w.status.retryAfter) - w.now;
            const max = w.status.lastFailure?.reason === "RateLimited" ? parseDuration(s.watchdog.rateLimitBackoff.max) : parseDuration(s.watchdog.backoff.max);
            // retry-after is recorded rounded up to the second
            expect(wait).toBeLessThanOrEqual(Math.min(max, limit) + 1000);
          }
        });
      }),
      params,
    );
  });

  it("never spends the recovery allowance on a rate limit, and ends a run of them with a person", () => {
    fc.assert(
      fc.property(scenario, (s) => {
        simulate(s, (w, before) => {
          if (w.status.lastFailure?.reason === "RateLimited" && w.status.lastFailure.time !== before.status.lastFailure?.time) {
            expect(w.status.restarts ?? 0).toBe(before.status.restarts ?? 0);
            if (w.status.phase === "NeedsHumanIntervention") expect(w.status.reason).toBe("RateLimitRequeuesExhausted");
          }
        });
      }),
      params,
    );
  });

  it("never creates a pod while spec.suspend is true, or for a run being deleted", () => {
    fc.assert(
      fc.property(scenario, fc.boolean(), (s, deleting) => {
        const w = simulate(s, (w) => {
          // Whatever state the run has reached, suspended (or deleted) at this moment, no plan starts a pod.
          const frozen = structuredClone(w.run);
          if (deleting) frozen.metadata.deletionTimestamp = iso(w.now);
          else frozen.spec.suspend = true;
          // ...even as a person resumes it, or approves what it awaits, in the same moment.
          frozen.metadata.annotations = { ...frozen.metadata.annotations, "watchdog.dev/resume": `property-${w.now}` };
          if (w.status.approval?.state === "Pending") {
            frozen.metadata.annotations["watchdog.dev/approve"] = "yes";
            frozen.metadata.annotations["watchdog.dev/approval-id"] = w.status.approval.id;
          }
          const plan = decide({ run: frozen, pods: [...w.pods.values()], now: w.now, nodes: w.nodes(), deletedPods: w.tombstones });
          expect(plan.createPod).toBeUndefined();
        });
        expect(w.violations.filter((v) => v.includes("suspended") || v.includes("being deleted"))).toEqual([]);
      }),
      params,
    );
  });

  it("never lets a deleted run go while a sandbox of it may run", () => {
    fc.assert(
      fc.property(scenario, (s) => {
        const w = simulate(s, () => {});
        expect(w.violations.filter((v) => v.includes("finalizer"))).toEqual([]);
      }),
      params,
    );
  });

  it("never lowers what status.spent holds", () => {
    fc.assert(
      fc.property(scenario, (s) => {
        simulate(s, (w, before) => {
          const was = before.status.spent;
          if (!was) return;
          const now = w.status.spent;
          expect(now).toBeDefined();
          for (const key of ["inputTokens", "outputTokens", "toolCalls", "throughAttempt"]) expect(now[key], key).toBeGreaterThanOrEqual(was[key]);
          expect(parseDecimal(now.cost)! >= parseDecimal(was.cost)!).toBe(true);
        });
      }),
      params,
    );
  });

  it("never creates a pod while spending is at or over a limit", () => {
    fc.assert(
      fc.property(scenario, (s) => {
        let created = 0;
        // Spending and limits only change between steps (the sandbox, the user, the clock), so
        // what they are after a step is what they were when its pods were created.
        const check = (w: World) => {
          if (w.created.length > created) expect(budgetMeasures(w).filter(exhausted).map((m) => m.describe(m.used))).toEqual([]);
          created = w.created.length;
        };
        simulate(s, check, check);
      }),
      params,
    );
  });

  it("answers a heartbeat-only change with no API write, only a new wake-up", () => {
    fc.assert(
      fc.property(scenario, fc.integer({ min: 1, max: 60_000 }), (s, step) => {
        const w = simulate(s, () => {});
        const hb = w.status.heartbeat;
        const acceptedAt = Date.parse(w.run.metadata.managedFields?.[0]?.time ?? "");
        if (!hb || typeof hb.time !== "string" || Number.isNaN(Date.parse(hb.time)) || Number.isNaN(acceptedAt)) return;
        w.advance(step);
        const inputs = { pods: [...w.pods.values()], now: w.now, defaults: undefined, nodes: w.nodes(), deletedPods: w.tombstones };
        const settled = decide({ run: w.run, ...inputs });
        if (!isQuiet(settled)) return; // only a settled run can show that a heartbeat costs nothing
        // The sandbox heartbeats again, its clock as far on as the server's: only heartbeat.time
        // moves, and the server's record of the write.
        const moved = structuredClone(w.run);
        moved.metadata.managedFields = heartbeatManagedFields(w.now);
        const serverMoved = Date.parse(moved.metadata.managedFields[0].time) - acceptedAt;
        moved.status.heartbeat.time = new Date(Date.parse(hb.time) + serverMoved).toISOString();
        const plan = decide({ run: moved, ...inputs });
        expect(isQuiet(plan)).toBe(true);
        expect(plan.deletePods).toEqual([]);
      }),
      params,
    );
  });
});
