// The sandbox's usage arithmetic (operator/sandbox/usage.ts), pure: exact costs, reports that never
// go down within an attempt, a lenient reading of the run's budget, and the same verdict on a
// budget as the operator's own arithmetic (operator/api/spending.ts) reaches from the report.
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import type { Usage } from "../../../operator/api/agentrun.ts";
import { resolveBudget } from "../../../operator/api/defaults.ts";
import { exhausted, measures, spending as operatorSpending } from "../../../operator/api/spending.ts";
import { BudgetView, MAX_COST, UsageMeter, parseCost, priceTokens } from "../../../operator/sandbox/usage.ts";
import { DECIMAL_SCALE } from "../../../operator/api/decimal.ts";

const E18 = DECIMAL_SCALE;

describe("parseCost", () => {
  it.each([
    ["0.0123", 123n * 10n ** 14n],
    ["12", 12n * E18],
    ["12.", 12n * E18],
    [".5", E18 / 2n],
    [" 3.25 ", 325n * 10n ** 16n],
    [0.1, E18 / 10n],
    [1e-7, 10n ** 11n],
    [0, 0n],
    ["0.000000000000000001", 1n],
    // More than 18 fraction digits round up: a budget is never undercounted.
    ["0.0000000000000000001", 1n],
    ["0.0000000000000000010", 1n],
    ["1e30", undefined],
    [1e30, MAX_COST],
    ["1000000000000000000000", MAX_COST],
  ])("%j is %s", (value, scaled) => {
    if (scaled === undefined) expect(() => parseCost(value)).toThrow(RangeError);
    else expect(parseCost(value)).toBe(scaled);
  });

  it.each([["-1"], [-0.5], [Number.NaN], [Number.POSITIVE_INFINITY], ["1,5"], [""], ["0x10"]])("refuses %j", (value) => {
    expect(() => parseCost(value as string)).toThrow(RangeError);
  });
});

const models = ["a", "b"] as const;
const prices = [
  { model: "a", inputPerMillion: "0.15", outputPerMillion: "0.600000000001" },
  { model: "b", inputPerMillion: "3", outputPerMillion: "15" },
];
const report = fc.record(
  {
    inputTokens: fc.nat({ max: 5_000_000 }),
    outputTokens: fc.nat({ max: 500_000 }),
    cost: fc.oneof(fc.constant(undefined), fc.stringMatching(/^[0-9]{1,3}(\.[0-9]{1,20})?$/)),
    model: fc.oneof(fc.constant(undefined), fc.constantFrom(...models)),
  },
  { requiredKeys: [] },
);

/** Whether `next` is a report the API server accepts after `previous` within one attempt (USAGE_MONOTONIC_RULE). */
function notLower(previous: Usage, next: Usage): boolean {
  for (const f of ["inputTokens", "outputTokens", "toolCalls"] as const) if (previous[f] !== undefined && !(next[f] !== undefined && next[f] >= previous[f])) return false;
  if (previous.cost !== undefined && !(next.cost !== undefined && parseCost(next.cost) >= parseCost(previous.cost))) return false;
  return true;
}

describe("UsageMeter", () => {
  it("never reports less than it reported before, whatever it is given", () => {
    fc.assert(
      fc.property(fc.array(fc.oneof(report, fc.constant("tool" as const)), { maxLength: 30 }), (steps) => {
        const meter = new UsageMeter();
        let previous = meter.report();
        expect(previous).toEqual({ inputTokens: 0, outputTokens: 0, toolCalls: 0 });
        for (const step of steps) {
          if (step === "tool") meter.toolCall();
          else meter.record(step, prices);
          const next = meter.report();
          expect(notLower(previous, next)).toBe(true);
          previous = next;
        }
      }),
    );
  });

  it("adds costs exactly, as decimals", () => {
    const meter = new UsageMeter();
    for (let i = 0; i < 10; i++) meter.record({ cost: 0.1 }, []);
    expect(meter.report().cost).toBe("1");
    meter.record({ cost: "0.000000000000000001" }, []);
    expect(meter.report().cost).toBe("1.000000000000000001");
  });

  it("leaves the cost out, with one model and no cost given, and then prices exactly as the operator does", () => {
    fc.assert(
      fc.property(fc.array(fc.record({ inputTokens: fc.nat({ max: 10_000_000 }), outputTokens: fc.nat({ max: 1_000_000 }) }), { maxLength: 10 }), fc.constantFrom(...models), (calls, model) => {
        const meter = new UsageMeter();
        for (const c of calls) meter.record({ ...c, model }, prices);
        const usage = meter.report();
        expect(usage.cost).toBeUndefined();
        const heartbeat = { time: "2026-11-30T12:00:00Z", attempt: 1, state: "Planning" as const, usage };
        const operator = operatorSpending(undefined, heartbeat, 1, prices);
        expect(meter.figures(prices).cost).toBe(operator.cost);
        expect(operator.cost).toBe(priceTokens(prices, model, usage.inputTokens ?? 0, usage.outputTokens ?? 0));
      }),
    );
  });

  it("caps at what the CRD admits instead of overflowing", () => {
    const meter = new UsageMeter();
    meter.record({ inputTokens: Number.MAX_SAFE_INTEGER, cost: "999999999999999999" }, []);
    meter.record({ inputTokens: 10, cost: "10" }, []);
    expect(meter.report()).toMatchObject({ inputTokens: Number.MAX_SAFE_INTEGER, cost: "999999999999999999.999999999999999999" });
  });

  it("resumes from its own attempt's report, garbage read as nothing", () => {
    const meter = new UsageMeter();
    meter.resume({ inputTokens: 5, outputTokens: "x", toolCalls: 2, cost: "1.5", model: "" });
    expect(meter.report()).toEqual({ inputTokens: 5, outputTokens: 0, cost: "1.5", toolCalls: 2 });
    meter.resume("garbage");
    expect(meter.report()).toEqual({ inputTokens: 5, outputTokens: 0, cost: "1.5", toolCalls: 2 });
  });
});

describe("BudgetView", () => {
  const run = (budget: unknown, status: Record<string, unknown> = {}) => ({ spec: { budget }, status });

  it("reads garbage as no limit and nothing spent, never throws", () => {
    const view = new BudgetView(2);
    for (const garbage of [undefined, null, 3, "x", { spec: 1 }, run({ tokens: -1, cost: { amount: "lots" }, prices: [{ model: 1 }, "x"] }, { spent: { inputTokens: "9", cost: 12 } })]) {
      view.observe(garbage);
      expect(view.limited).toBe(false);
      expect(view.modelPrices).toEqual([]);
      expect(view.spending({ inputTokens: 1, outputTokens: 2, cost: 3n, toolCalls: 4 })).toEqual({ inputTokens: 1, outputTokens: 2, cost: 3n, toolCalls: 4 });
    }
  });

  it("does not add its own usage again once status.spent holds its attempt", () => {
    const view = new BudgetView(2);
    view.observe(run({ tokens: 10 }, { spent: { inputTokens: 10, outputTokens: 0, cost: "0", toolCalls: 0, throughAttempt: 2 } }));
    expect(view.spending({ inputTokens: 10, outputTokens: 0, cost: 0n, toolCalls: 0 })).toMatchObject({ inputTokens: 10 });
  });

  it("reaches the same verdict as the operator on the same report, limit by limit", () => {
    const limit = fc.oneof(fc.constant(undefined), fc.nat({ max: 3_000_000 }));
    const budget = fc.record({
      tokens: limit,
      inputTokens: limit,
      outputTokens: limit,
      toolCalls: fc.oneof(fc.constant(undefined), fc.nat({ max: 20 })),
      cost: fc.oneof(fc.constant(undefined), fc.stringMatching(/^[0-9](\.[0-9]{1,6})?$/).map((amount) => ({ amount, currency: "USD" }))),
    });
    const spent = fc.record({
      inputTokens: fc.nat({ max: 1_000_000 }),
      outputTokens: fc.nat({ max: 1_000_000 }),
      cost: fc.stringMatching(/^[0-9](\.[0-9]{1,6})?$/),
      toolCalls: fc.nat({ max: 10 }),
    });
    fc.assert(
      fc.property(budget, spent, fc.array(report, { maxLength: 8 }), fc.nat({ max: 10 }), (b, s, reports, toolCalls) => {
        const spec = Object.fromEntries(Object.entries({ ...b, prices }).filter(([, v]) => v !== undefined));
        const status = { attempt: 2, spent: { ...s, throughAttempt: 1 } };
        const meter = new UsageMeter();
        for (const r of reports) meter.record(r, prices);
        for (let i = 0; i < toolCalls; i++) meter.toolCall();
        const view = new BudgetView(2);
        view.observe(run(spec, status));

        const settings = resolveBudget(spec as never, undefined);
        const heartbeat = { time: "2026-11-30T12:00:00Z", attempt: 2, state: "Planning" as const, usage: meter.report() };
        const operator = measures(settings, operatorSpending(status.spent, heartbeat, 2, prices), undefined).filter(exhausted).map((m) => m.limit);
        const sdk = view.breaches(view.spending(meter.figures(view.modelPrices))).map((x) => x.limit);
        expect(sdk).toEqual(operator);
      }),
    );
  });
});
