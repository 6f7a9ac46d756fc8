// Run budgets (spec.budget): spending is status.spent plus the current attempt's heartbeat.usage;
// reaching a limit stops the run for a person (BudgetExhausted); warnAt of a limit sends one
// BudgetWarning; the wall clock runs on the server's clock from the first start.
import { describe, expect, it } from "vitest";
import { formatDecimal, parseDecimal } from "../../../operator/api/decimal.ts";
import { resolveBudget } from "../../../operator/api/defaults.ts";
import { costOf, fold, spending } from "../../../operator/api/spending.ts";
import { decide } from "../../../operator/watchdog/decide.ts";
import { T0 } from "../fixtures.ts";
import { World, startedWorld } from "../world.ts";

const S = 1000;
const M = 60 * S;
const quick = { heartbeatTimeout: "10m", maxRestarts: 5, backoff: { initial: "1s", factor: 1, max: "1s" } };

const metrics = (w: World) => w.plans.flatMap((p) => p.metrics);
const warnings = (w: World) => w.events().filter((e) => e.reason === "BudgetWarning");

/** The current attempt's sandbox crashes; the next attempt starts, runs and heartbeats. */
function nextAttempt(w: World): void {
  w.podExit(1);
  w.settle();
  w.runUntil(Date.parse(w.status.retryAfter));
  w.podRunning();
  w.heartbeat("Planning");
  w.settle();
}

describe("a token budget", () => {
  it("stops at the first report at or over the limit, not before", () => {
    const w = startedWorld({ watchdog: quick, budget: { tokens: 100_000 } });
    for (let i = 1; i <= 9; i++) {
      w.advance(10 * S);
      w.report({ inputTokens: 6_000 * i, outputTokens: 4_000 * i });
      w.settle();
      expect(w.status.phase, `after ${i * 10_000} tokens`).toBe("Planning");
    }
    expect(w.livePods).toHaveLength(1);
    w.advance(10 * S);
    w.report({ inputTokens: 60_000, outputTokens: 40_000 });
    w.settle();
    expect(w.status.phase).toBe("NeedsHumanIntervention");
    expect(w.status.reason).toBe("BudgetExhausted");
    expect(w.status.message).toContain("token budget exhausted: 100000 of 100000 tokens spent");
    expect(w.livePods).toHaveLength(0);
  });

  it("overshoots by at most the one report that crossed the limit", () => {
    const w = startedWorld({ watchdog: quick, budget: { tokens: 100_000 } });
    let reports = 0;
    while (w.status.phase !== "NeedsHumanIntervention" && reports < 20) {
      reports++;
      w.advance(10 * S);
      w.report({ outputTokens: 15_000 * reports });
      w.settle();
    }
    expect(reports).toBe(7); // 90,000 after six, 105,000 after seven
    expect(w.status.message).toContain("token budget exhausted: 105000 of 100000 tokens spent");
    expect(w.status.spent).toMatchObject({ inputTokens: 0, outputTokens: 105_000, throughAttempt: 1 });
  });

  it("kills the sandbox with the kill grace, stops for a person with the figures, a Warning Event and the metric", () => {
    const w = startedWorld({ watchdog: { ...quick, killGracePeriod: "7s" }, budget: { tokens: 1_000, outputTokens: 500 } });
    w.report({ inputTokens: 400, outputTokens: 600 });
    const plan = w.reconcile();
    expect(plan.deletePods).toEqual([{ name: "r-1-uidr", uid: "uid-r-1-uidr", gracePeriodSeconds: 7 }]);
    expect(plan.createPod).toBeUndefined();
    expect(plan.status).toMatchObject({ phase: "NeedsHumanIntervention", reason: "BudgetExhausted" });
    expect(plan.status?.message).toBe(
      "token budget exhausted: 1000 of 1000 tokens spent; output token budget exhausted: 600 of 500 output tokens spent; raise spec.budget.tokens or spec.budget.outputTokens, then resume",
    );
    expect(w.condition("NeedsHumanIntervention")).toMatchObject({ status: "True", reason: "BudgetExhausted" });
    expect(plan.events).toContainEqual(expect.objectContaining({ type: "Warning", reason: "BudgetExhausted", note: expect.stringContaining("token budget exhausted: 1000 of 1000 tokens spent") }));
    // the first limit reached, in the contract's order, labels the counter
    expect(plan.metrics).toContainEqual({ kind: "budgetExhausted", limit: "tokens" });
    expect(plan.metrics).toContainEqual({ kind: "needsHuman", reason: "BudgetExhausted" });
    // the stopped attempt is folded in with the same write
    expect(plan.status?.spent).toMatchObject({ inputTokens: 400, outputTokens: 600, toolCalls: 0, cost: "0", throughAttempt: 1 });
  });

  it("counts tool calls and input tokens against their own limits", () => {
    const calls = startedWorld({ watchdog: quick, budget: { toolCalls: 3 } });
    calls.report({ toolCalls: 2 });
    calls.settle();
    expect(calls.status.phase).toBe("Planning");
    calls.report({ toolCalls: 3 });
    calls.settle();
    expect(calls.status.message).toContain("tool call budget exhausted: 3 of 3 tool calls made");
    expect(metrics(calls)).toContainEqual({ kind: "budgetExhausted", limit: "toolCalls" });

    const input = startedWorld({ watchdog: quick, budget: { inputTokens: 10 } });
    input.report({ inputTokens: 10, outputTokens: 1_000_000 });
    input.settle();
    expect(input.status.message).toContain("input token budget exhausted: 10 of 10 input tokens spent");
  });

  it("lets a completion stand when the last report reached the limit", () => {
    const w = startedWorld({ watchdog: quick, budget: { tokens: 100 } });
    w.report({ outputTokens: 100 });
    w.podExit(0);
    w.settle();
    expect(w.status.phase).toBe("Completed");
    expect(w.status.spent).toMatchObject({ outputTokens: 100, throughAttempt: 1 });
  });

  it("starts no sandbox for a run whose limit is already reached", () => {
    const w = new World({ budget: { tokens: 0 } });
    w.settle();
    expect(w.created).toHaveLength(0);
    expect(w.status).toMatchObject({ phase: "NeedsHumanIntervention", reason: "BudgetExhausted" });
    expect(w.status.message).toContain("token budget exhausted: 0 of 0 tokens spent");
  });
});

describe("spending across attempts", () => {
  it("adds up the ended attempts and the current one, and ignores a stale attempt's late report", () => {
    const w = startedWorld({ watchdog: quick, budget: { tokens: 100_000 } });
    w.report({ outputTokens: 50_000 });
    nextAttempt(w);
    expect(w.status.attempt).toBe(2);
    expect(w.status.spent).toMatchObject({ outputTokens: 50_000, throughAttempt: 1 });
    w.report({ outputTokens: 10_000 });
    w.settle();
    // attempt 1's sandbox, already folded, writes late: it counts for nothing
    w.report({ outputTokens: 90_000 }, 1);
    w.settle();
    expect(w.status.phase).toBe("Planning");
    expect(w.status.spent).toMatchObject({ outputTokens: 50_000, throughAttempt: 1 });
    w.report({ outputTokens: 49_999 }, 2);
    w.settle();
    expect(w.status.phase).toBe("Planning");
    w.report({ outputTokens: 50_000 }, 2);
    w.settle();
    expect(w.status.phase).toBe("NeedsHumanIntervention");
    expect(w.status.message).toContain("token budget exhausted: 100000 of 100000 tokens spent");
    expect(w.status.spent).toMatchObject({ outputTokens: 100_000, throughAttempt: 2 });
  });

  it("ignores a report from an attempt the run has not reached", () => {
    const w = startedWorld({ watchdog: quick, budget: { tokens: 100 } });
    w.report({ outputTokens: 1_000 }, 2);
    const plan = w.reconcile();
    expect(plan.deletePods).toEqual([]);
    expect(w.status.reason).not.toBe("BudgetExhausted");
  });

  it("folds an ended attempt once: deciding again, or from a restarted operator, adds nothing", () => {
    const w = startedWorld({ watchdog: quick });
    w.report({ inputTokens: 7, outputTokens: 3, toolCalls: 2, cost: "0.25" });
    w.podExit(1);
    // the same object decided twice, as two replicas or a retried reconcile would
    const once = decide({ run: structuredClone(w.run), pods: [...w.pods.values()], now: w.now });
    const twice = decide({ run: structuredClone(w.run), pods: [...w.pods.values()], now: w.now });
    expect(once.status?.spent).toEqual({ inputTokens: 7, outputTokens: 3, toolCalls: 2, cost: "0.25", wallClock: "0s", throughAttempt: 1 });
    expect(twice.status?.spent).toEqual(once.status?.spent);
    w.settle();
    const spent = structuredClone(w.status.spent);
    expect(spent).toMatchObject({ inputTokens: 7, outputTokens: 3, toolCalls: 2, cost: "0.25", throughAttempt: 1 });
    w.restartOperator();
    for (let i = 0; i < 3; i++) {
      const plan = w.reconcile();
      expect(plan.status?.spent).toBeUndefined();
    }
    expect(w.status.spent).toEqual(spent);
    // the heartbeat still names attempt 1 after the fold: it is not counted again in Queued either
    const totals = spending(w.status.spent, w.status.heartbeat, w.status.attempt, []);
    expect(totals).toMatchObject({ inputTokens: 7, outputTokens: 3, toolCalls: 2 });
  });

  it("writes nothing for a heartbeat that reports the same usage", () => {
    const w = startedWorld({ watchdog: quick, budget: { tokens: 1_000_000 } });
    w.report({ outputTokens: 10 });
    w.settle();
    w.advance(10 * S);
    w.report({ outputTokens: 10 });
    expect(w.reconcile().status).toBeUndefined();
  });
});

describe("cost", () => {
  const prices = [{ model: "m", inputPerMillion: "0.1", outputPerMillion: "0.2" }];

  it("prices tokens by model per million, exactly: three calls of 0.1 are 0.3", () => {
    const settings = resolveBudget({ prices }, undefined);
    const usage = { inputTokens: 1_000_000, model: "m" };
    expect(formatDecimal(costOf(usage, settings.prices))).toBe("0.1");
    let spent;
    for (let attempt = 1; attempt <= 3; attempt++) {
      spent = fold({ spent, heartbeat: { time: "2026-11-30T12:00:00Z", attempt, state: "Planning", usage }, through: attempt, now: T0, startTime: T0, prices: settings.prices });
    }
    expect(spent?.cost).toBe("0.3");
    expect(formatDecimal(costOf({ inputTokens: 1, outputTokens: 1, model: "m" }, settings.prices))).toBe("0.0000003");
    expect(costOf({ inputTokens: 1, model: "unpriced" }, settings.prices)).toBe(0n);
    // a reported cost wins over the price
    expect(formatDecimal(costOf({ inputTokens: 1_000_000, model: "m", cost: "5" }, settings.prices))).toBe("5");
  });

  it("adds priced attempts into status.spent exactly", () => {
    const w = startedWorld({ watchdog: quick, budget: { cost: { amount: "1", currency: "USD" }, prices } });
    for (let attempt = 1; attempt <= 3; attempt++) {
      w.report({ inputTokens: 1_000_000, model: "m" });
      nextAttempt(w);
    }
    expect(w.status.spent).toMatchObject({ cost: "0.3", inputTokens: 3_000_000, throughAttempt: 3 });
  });

  it("reaches a cost limit that floating point would miss (0.7 + 0.1 is 0.8)", () => {
    const w = startedWorld({ watchdog: quick, budget: { cost: { amount: "0.8", currency: "USD" }, warnAt: 1 } });
    w.report({ cost: "0.7" });
    nextAttempt(w);
    w.report({ cost: "0.1" });
    w.settle();
    expect(w.status.reason).toBe("BudgetExhausted");
    expect(w.status.message).toContain("cost budget exhausted: 0.8 of 0.8 USD spent");
    expect(w.status.spent.cost).toBe("0.8");
    expect(metrics(w)).toContainEqual({ kind: "budgetExhausted", limit: "cost" });
  });

  it("parses and formats decimals without floating error", () => {
    expect(parseDecimal("12.50")).toBe(12_500_000_000_000_000_000n);
    expect(formatDecimal(parseDecimal("0.1")! + parseDecimal("0.2")!)).toBe("0.3");
    expect(parseDecimal("1e3")).toBeUndefined();
    expect(parseDecimal("-1")).toBeUndefined();
  });
});

describe("the wall clock", () => {
  it("fires at exactly startTime + wallClock on the server's clock, with no heartbeat at all", () => {
    const w = new World({ watchdog: { ...quick, killGracePeriod: "3s" }, budget: { wallClock: "2m", warnAt: 0.5 } });
    w.settle();
    expect(w.status.startTime).toBe("2026-11-30T12:00:00Z");
    const start = Date.parse(w.status.startTime);
    // the first wake-up is the warning's, at half the limit
    expect(w.plans.at(-1)!.wakeAt).toBe(start + 1 * M);
    w.runUntil(start + 1 * M);
    expect(warnings(w)).toEqual([expect.objectContaining({ type: "Warning", note: "wall-clock budget 50% spent: 1m of 2m since the run's first start" })]);
    // then the deadline itself
    expect(w.plans.at(-1)!.wakeAt).toBe(start + 2 * M);
    w.runUntil(start + 2 * M - 1);
    expect(w.status.phase).toBe("Starting");
    expect(w.deleted).toEqual([]);
    w.runUntil(start + 2 * M);
    expect(w.status).toMatchObject({ phase: "NeedsHumanIntervention", reason: "BudgetExhausted" });
    expect(w.status.message).toContain("wall-clock budget exhausted: 2m of 2m since the run's first start");
    expect(w.deleted).toEqual([{ name: "r-1-uidr", at: start + 2 * M, grace: 3 }]);
    expect(metrics(w)).toContainEqual({ kind: "budgetExhausted", limit: "wallClock" });
  });

  it("counts backoff and every attempt from the first start", () => {
    const w = startedWorld({ watchdog: { ...quick, backoff: { initial: "30s", factor: 1, max: "30s" } }, budget: { wallClock: "90s" } });
    const start = Date.parse(w.status.startTime);
    w.advance(50 * S);
    w.podExit(1);
    w.settle();
    expect(w.status.phase).toBe("Queued");
    w.runUntil(start + 90 * S - 1);
    expect(w.status.attempt).toBe(2);
    expect(w.status.phase).toBe("Starting");
    w.runUntil(start + 90 * S);
    expect(w.status.reason).toBe("BudgetExhausted");
    expect(w.status.startTime).toBe(new Date(start).toISOString().replace(".000Z", "Z"));
  });

  it("does not act while the run is suspended, and stops it, with no pod, when unsuspended past the deadline", () => {
    const w = startedWorld({ watchdog: quick, budget: { wallClock: "5m" } });
    const start = Date.parse(w.status.startTime);
    w.setSpec({ suspend: true });
    const plan = w.settle();
    expect(plan.wakeAt).toBeUndefined();
    w.runUntil(start + 10 * M);
    expect(w.status.phase).toBe("Suspended");
    w.setSpec({ suspend: false });
    w.settle();
    expect(w.status).toMatchObject({ phase: "NeedsHumanIntervention", reason: "BudgetExhausted" });
    expect(w.created).toHaveLength(1);
  });
});

describe("resume", () => {
  /** A run stopped by its token budget at 100,000 tokens. */
  function exhaustedRun(): World {
    const w = startedWorld({ watchdog: quick, budget: { tokens: 100_000 } });
    w.report({ outputTokens: 100_000 });
    w.settle();
    expect(w.status.reason).toBe("BudgetExhausted");
    return w;
  }

  it("with the limit raised, continues in a new sandbox with the totals kept", () => {
    const w = exhaustedRun();
    w.setSpec({ budget: { tokens: 200_000 } });
    w.annotate("watchdog.dev/resume", "more");
    w.settle();
    expect(w.status.phase).toBe("Starting");
    expect(w.status.attempt).toBe(2);
    expect(w.pods.has("r-2-uidr")).toBe(true);
    expect(w.status.spent).toMatchObject({ outputTokens: 100_000, throughAttempt: 1 });
    w.podRunning();
    w.report({ outputTokens: 99_999 });
    w.settle();
    expect(w.status.phase).toBe("Planning");
    w.report({ outputTokens: 100_000 });
    w.settle();
    expect(w.status.message).toContain("token budget exhausted: 200000 of 200000 tokens spent");
  });

  it("without raising the limit, stays at BudgetExhausted: no new attempt, no pod", () => {
    const w = exhaustedRun();
    const stops = metrics(w).length;
    w.annotate("watchdog.dev/resume", "again");
    expect(w.reconcile().summary).toBe("resume refused: tokens budget exhausted");
    const plan = w.settle();
    expect(w.status).toMatchObject({ phase: "NeedsHumanIntervention", reason: "BudgetExhausted", attempt: 1 });
    expect(w.status.message).toBe("token budget exhausted: 100000 of 100000 tokens spent; the resume is refused: raise spec.budget.tokens, then resume");
    expect(w.events().at(-1)).toMatchObject({ type: "Warning", reason: "BudgetExhausted", action: "RefuseResume" });
    expect(w.created).toHaveLength(1);
    expect(w.livePods).toHaveLength(0);
    expect(w.status.spent).toMatchObject({ outputTokens: 100_000, throughAttempt: 1 });
    expect(w.status.observedResume).toBe("again");
    // the same stop, not a new one: the counters do not move
    expect(metrics(w)).toHaveLength(stops);
    expect(plan.wakeAt).toBeUndefined();
    // raised now, and resumed: attempt 2, the next one
    w.setSpec({ budget: { tokens: 100_001 } });
    w.annotate("watchdog.dev/resume", "raised");
    w.settle();
    expect(w.status).toMatchObject({ phase: "Starting", attempt: 2 });
    expect(w.pods.has("r-2-uidr")).toBe(true);
  });
});

describe("BudgetWarning", () => {
  it("is sent once per limit when spending reaches warnAt of it, and recorded in status", () => {
    const w = startedWorld({ watchdog: quick, budget: { tokens: 1_000, toolCalls: 10 } });
    w.report({ outputTokens: 799, toolCalls: 1 });
    w.settle();
    expect(warnings(w)).toEqual([]);
    w.report({ outputTokens: 800, toolCalls: 1 });
    w.settle();
    expect(warnings(w).map((e) => e.note)).toEqual(["token budget 80% spent: 800 of 1000 tokens spent"]);
    expect(w.events().filter((e) => e.reason === "BudgetWarning")).toEqual([expect.objectContaining({ type: "Warning", action: "Warn" })]);
    expect(w.plans.some((p) => p.summary.includes("budget warning: tokens"))).toBe(true);
    expect(w.status.budgetWarnings).toEqual([{ limit: "tokens", of: "1000", time: expect.any(String) }]);
    w.report({ outputTokens: 900, toolCalls: 8 });
    w.settle();
    w.restartOperator();
    w.report({ outputTokens: 950, toolCalls: 9 });
    w.settle();
    expect(warnings(w).map((e) => e.note)).toEqual(["token budget 80% spent: 800 of 1000 tokens spent", "tool call budget 80% spent: 8 of 10 tool calls made"]);
    expect(w.events().filter((e) => e.reason === "BudgetWarning").every((e) => e.type === "Warning")).toBe(true);
  });

  it("is not sent for a run that is already at rest, however much it spent", () => {
    for (const end of ["completed", "suspended"] as const) {
      const w = startedWorld({ watchdog: quick, budget: { tokens: 1_000 } });
      if (end === "suspended") {
        w.setSpec({ suspend: true });
        w.settle();
        w.run.status.heartbeat.usage = { outputTokens: 900 };
      } else {
        w.report({ outputTokens: 900 });
        w.podExit(0);
      }
      w.settle();
      expect(warnings(w), end).toEqual([]);
      expect(w.status.budgetWarnings ?? [], end).toEqual([]);
    }
  });

  it("warns again at the new threshold once a raised limit is resumed with", () => {
    const w = startedWorld({ watchdog: quick, budget: { tokens: 1_000 } });
    w.report({ outputTokens: 1_000 });
    w.settle();
    expect(w.status.reason).toBe("BudgetExhausted");
    w.setSpec({ budget: { tokens: 2_000 } });
    w.annotate("watchdog.dev/resume", "more");
    w.settle();
    w.podRunning();
    w.report({ outputTokens: 599 });
    w.settle();
    expect(warnings(w)).toEqual([]);
    w.report({ outputTokens: 600 });
    w.settle();
    expect(warnings(w).map((e) => e.note)).toEqual(["token budget 80% spent: 1600 of 2000 tokens spent"]);
    expect(w.status.budgetWarnings).toEqual([{ limit: "tokens", of: "2000", time: expect.any(String) }]);
  });
});

describe("install defaults", () => {
  it("apply field by field under the run's own spec.budget, and show in status.budget", () => {
    const w = startedWorld({ watchdog: quick, budget: { outputTokens: 50 } }, { budget: { tokens: 100, outputTokens: 1_000, warnAt: 0.5 } });
    expect(w.status.budget).toEqual({ tokens: 100, outputTokens: 50, warnAt: 0.5 });
    w.report({ outputTokens: 50 });
    w.settle();
    expect(w.status.message).toContain("output token budget exhausted: 50 of 50 output tokens spent");
    const none = startedWorld({ watchdog: quick });
    expect(none.status.budget).toBeUndefined();
  });

  it("merge prices by model, the run's first", () => {
    const b = resolveBudget(
      { prices: [{ model: "a", inputPerMillion: "1", outputPerMillion: "2" }] },
      { prices: [{ model: "a", inputPerMillion: "9", outputPerMillion: "9" }, { model: "b", inputPerMillion: "3", outputPerMillion: "4" }] },
    );
    expect(b.prices.map((p) => [p.model, p.inputPerMillion])).toEqual([
      ["a", "1"],
      ["b", "3"],
    ]);
    expect(b.warnAt).toBe(0.8);
  });
});
