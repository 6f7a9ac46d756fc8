// What a run has spent against its budget, as the plugin and the console show it: status.spent
// plus the current attempt's heartbeat.usage, measured against status.budget, read defensively.
import { describe, expect, it } from "vitest";
import { budgetReport, lineCell, nearestLimit, type BudgetLine } from "../../../operator/cli/budget.ts";
import { T0, iso, run } from "../fixtures.ts";

const S = 1000;

/** Attempt 1 ended and was folded into status.spent; attempt 2 is reporting. */
function spendingRun(budget: Record<string, unknown> = { tokens: 100_000, warnAt: 0.8 }) {
  return run({
    status: {
      phase: "Planning",
      attempt: 2,
      startTime: iso(T0),
      budget,
      spent: { inputTokens: 50_000, outputTokens: 10_000, cost: "0.2", toolCalls: 4, throughAttempt: 1 },
      heartbeat: { time: iso(T0 + 60 * S), attempt: 2, usage: { inputTokens: 20_000, outputTokens: 2_000, cost: "0.06", toolCalls: 1 } },
    },
  });
}

const line = (over: Partial<BudgetLine>): BudgetLine => ({ limit: "tokens", used: "0", allowed: "1", fraction: 0, exhausted: false, text: "", ...over });

describe("budgetReport", () => {
  it("adds the ended attempts (status.spent) and the current attempt's usage", () => {
    const report = budgetReport(spendingRun(), T0 + 60 * S);
    expect(report).toMatchObject({
      total: { inputTokens: 70_000, outputTokens: 12_000, cost: "0.26", toolCalls: 5 },
      ended: { inputTokens: 50_000, outputTokens: 10_000, cost: "0.2", toolCalls: 4, throughAttempt: 1 },
      current: { inputTokens: 20_000, outputTokens: 2_000, cost: "0.06", toolCalls: 1 },
      elapsed: "1m",
    });
    expect(report?.limits).toEqual([{ limit: "tokens", used: "82000", allowed: "100000", fraction: 0.82, exhausted: false, text: "82000 of 100000 tokens spent" }]);
  });

  it("counts nothing of a heartbeat from an attempt already folded into status.spent", () => {
    const stale = spendingRun();
    stale.status.heartbeat.attempt = 1; // attempt 2 has not reported yet; attempt 1's last report stays
    const report = budgetReport(stale, T0);
    expect(report?.current).toEqual({ inputTokens: 0, outputTokens: 0, cost: "0", toolCalls: 0 });
    expect(report?.total).toEqual({ inputTokens: 50_000, outputTokens: 10_000, cost: "0.2", toolCalls: 4 });
    expect(report?.limits[0]).toMatchObject({ used: "60000", fraction: 0.6 });

    // At rest, the current attempt itself is folded: its heartbeat counts once, in status.spent.
    const atRest = spendingRun();
    atRest.status.phase = "NeedsHumanIntervention";
    atRest.status.spent = { inputTokens: 70_000, outputTokens: 12_000, cost: "0.26", toolCalls: 5, throughAttempt: 2 };
    expect(budgetReport(atRest, T0)?.total).toEqual({ inputTokens: 70_000, outputTokens: 12_000, cost: "0.26", toolCalls: 5 });
  });

  it("prices tokens from spec.budget.prices when the usage reports no cost", () => {
    const cost = { amount: "12.50", currency: "USD" };
    const r = run({
      spec: { budget: { cost, prices: [{ model: "m", inputPerMillion: "2", outputPerMillion: "10" }] } },
      status: { attempt: 1, budget: { cost, warnAt: 0.8 }, heartbeat: { time: iso(T0), attempt: 1, usage: { inputTokens: 1_000_000, outputTokens: 715_000, model: "m" } } },
    });
    const report = budgetReport(r, T0);
    expect(report?.total.cost).toBe("9.15");
    expect(report?.currency).toBe("USD");
    expect(report?.limits).toEqual([{ limit: "cost", used: "9.15 USD", allowed: "12.50 USD", fraction: 0.732, exhausted: false, text: "9.15 of 12.50 USD spent" }]);
    expect(lineCell(report!.limits[0]!)).toBe("9.15/12.50 USD");
    // The spending is shown with the limit's decimals: 9.1 beside 12.50 reads 9.10.
    r.status.heartbeat.usage.outputTokens = 710_000;
    expect(lineCell(budgetReport(r, T0)!.limits[0]!)).toBe("9.10/12.50 USD");

    // A cost the sandbox reports is taken as it is.
    r.status.heartbeat.usage.cost = "1.5";
    expect(budgetReport(r, T0)?.total.cost).toBe("1.5");
    // A model nobody priced costs nothing known.
    delete r.status.heartbeat.usage.cost;
    r.status.heartbeat.usage.model = "other";
    expect(budgetReport(r, T0)?.total.cost).toBe("0");
  });

  it("stops the wall clock at a finished run's completionTime", () => {
    const r = run({ status: { phase: "Completed", attempt: 1, startTime: iso(T0), completionTime: iso(T0 + 192 * S), budget: { wallClock: "1h", warnAt: 0.8 } } });
    const report = budgetReport(r, T0 + 5 * 3600 * S);
    expect(report).toMatchObject({ elapsed: "3m12s", elapsedMs: 192 * S, clockRunning: false });
    expect(report?.limits).toEqual([
      { limit: "wallClock", used: "3m12s", allowed: "1h", fraction: 0.0533, exhausted: false, text: "3m12s of 1h since the run's first start", allowedMs: 3600 * S },
    ]);
    expect(lineCell(report!.limits[0]!)).toBe("3m12s/1h");
    // Still running, it counts on to now (in whole seconds, never rounded up), and says its clock runs.
    delete r.status.completionTime;
    const running = budgetReport(r, T0 + 3600 * S + 999);
    expect(running?.limits[0]).toMatchObject({ used: "1h", fraction: 1.0002, exhausted: true });
    expect(running).toMatchObject({ elapsedMs: 3600 * S + 999, clockRunning: true });
  });

  it("marks a limit reached, and a limit of 0 reached before anything is spent", () => {
    const over = spendingRun({ tokens: 82_000, toolCalls: 0, warnAt: 0.8 });
    expect(budgetReport(over, T0)?.limits.map((l) => [l.limit, l.fraction, l.exhausted])).toEqual([
      ["tokens", 1, true],
      ["toolCalls", 1, true],
    ]);
  });

  it("has nothing to say of a run with no limit that spent nothing, and reads garbage without failing", () => {
    expect(budgetReport(run(), T0)).toBeUndefined();
    expect(budgetReport(run({ status: { attempt: 1, heartbeat: { time: iso(T0), attempt: 1, usage: { inputTokens: 0, outputTokens: 0 } } } }), T0)).toBeUndefined();
    const garbage = run({
      spec: { budget: "lots" },
      status: {
        attempt: "two",
        startTime: "yesterday",
        budget: { tokens: "many", warnAt: "soon" },
        spent: { inputTokens: -1, cost: 5 },
        heartbeat: { attempt: 1, usage: { inputTokens: "1e9", cost: "NaN" } },
      },
    });
    expect(budgetReport(garbage, T0)).toBeUndefined();
    // A readable spending with an unreadable budget: the figures, no limits.
    const partial = spendingRun({ tokens: -5, warnAt: 0.8, extra: true });
    expect(budgetReport(partial, T0)).toMatchObject({ limits: [], total: { inputTokens: 70_000 } });
  });
});

describe("lineCell", () => {
  it("writes spent/limit with the limit's unit", () => {
    expect(lineCell(line({ limit: "tokens", used: "82000", allowed: "100000" }))).toBe("82000/100000 tokens");
    expect(lineCell(line({ limit: "outputTokens", used: "5", allowed: "10" }))).toBe("5/10 output tokens");
    expect(lineCell(line({ limit: "toolCalls", used: "9", allowed: "40" }))).toBe("9/40 tool calls");
    expect(lineCell(line({ limit: "cost", used: "9.10 USD", allowed: "12.50 USD" }))).toBe("9.10/12.50 USD");
    expect(lineCell(line({ limit: "wallClock", used: "3m12s", allowed: "1h" }))).toBe("3m12s/1h");
  });
});

describe("nearestLimit", () => {
  it("picks the limit with the highest fraction spent, a reached one first", () => {
    const report = budgetReport(spendingRun({ tokens: 100_000, toolCalls: 5, cost: { amount: "1", currency: "USD" }, warnAt: 0.8 }), T0);
    expect(report?.limits.map((l) => [l.limit, l.fraction])).toEqual([
      ["tokens", 0.82],
      ["cost", 0.26],
      ["toolCalls", 1],
    ]);
    expect(nearestLimit(report!)?.limit).toBe("toolCalls");
    expect(nearestLimit({ ...report!, limits: [] })).toBeUndefined();
    // On a tie the first named wins.
    expect(nearestLimit({ ...report!, limits: [line({ limit: "tokens", fraction: 0.5 }), line({ limit: "cost", fraction: 0.5 })] })?.limit).toBe("tokens");
  });
});
