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
import { exhausted, measures, spending } from "../../../operator/api/spending.ts";
import { heartbeatManagedFields, iso } from "../fixtures.ts";
import { World, type Kubelet } from "../world.ts";
import { play, scenario, type Command } from "./scenario.ts";

const RUNS = Number(process.env.PROPERTY_RUNS ?? 1000);

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
