// What the console sends its pages of a run's budget: the watchdog's own figures (status.spent
// plus the current attempt's heartbeat.usage against status.budget), on every summary the list,
// the queue and the run page get; read defensively, since sandboxes write the status too.
import { EventEmitter } from "node:events";
import type { ServerResponse } from "node:http";
import { describe, expect, it } from "vitest";
import { budgetSummary, runSummary } from "../../../operator/console/summary.ts";
import { EventStream, streamRun } from "../../../operator/console/streams.ts";
import type { KubeClient } from "../../../operator/kube/client.ts";
import { T0, iso, run } from "../fixtures.ts";

/** Attempt 1 ended and was folded into status.spent; attempt 2 is reporting. */
function spendingRun() {
  return run({
    status: {
      phase: "Planning",
      attempt: 2,
      startTime: iso(T0),
      budget: { tokens: 100_000, toolCalls: 40, warnAt: 0.8 },
      spent: { inputTokens: 50_000, outputTokens: 10_000, cost: "0", toolCalls: 4, throughAttempt: 1 },
      heartbeat: { time: iso(T0 + 60_000), attempt: 2, usage: { inputTokens: 20_000, outputTokens: 2_000, toolCalls: 1 } },
    },
  });
}

describe("a run's budget in its summary", () => {
  it("sums the ended attempts and the current one, and names the limit nearest to being reached", () => {
    const budget = runSummary(spendingRun()).budget;
    expect(budget).toMatchObject({
      warnAt: 0.8,
      total: { inputTokens: 70_000, outputTokens: 12_000, toolCalls: 5 },
      ended: { inputTokens: 50_000, outputTokens: 10_000, toolCalls: 4, throughAttempt: 1 },
      current: { inputTokens: 20_000, outputTokens: 2_000, toolCalls: 1 },
    });
    expect(budget?.limits.map((l) => [l.limit, l.cell, l.warned, l.exhausted])).toEqual([
      ["tokens", "82000/100000 tokens", true, false],
      ["toolCalls", "5/40 tool calls", false, false],
    ]);
    expect(budget?.nearest).toEqual({
      limit: "tokens",
      used: "82000",
      allowed: "100000",
      fraction: 0.82,
      exhausted: false,
      warned: true,
      text: "82000 of 100000 tokens spent",
      cell: "82000/100000 tokens",
    });
    // It goes to the page as JSON: nothing in it that JSON does not keep.
    expect(JSON.parse(JSON.stringify(budget))).toEqual(budget);
  });

  it("warns at the run's own warnAt, and marks a reached limit exhausted", () => {
    const r = spendingRun();
    r.status.budget.warnAt = 0.9;
    expect(runSummary(r).budget?.nearest).toMatchObject({ limit: "tokens", warned: false, exhausted: false });
    r.status.budget.tokens = 82_000;
    expect(runSummary(r).budget?.nearest).toMatchObject({ limit: "tokens", fraction: 1, warned: true, exhausted: true, cell: "82000/82000 tokens" });
  });

  it("prices a cost budget from spec.budget.prices, in its currency", () => {
    const cost = { amount: "12.50", currency: "USD" };
    const r = run({
      spec: { budget: { cost, prices: [{ model: "m", inputPerMillion: "2", outputPerMillion: "10" }] } },
      status: { attempt: 1, budget: { cost, warnAt: 0.8 }, heartbeat: { time: iso(T0), attempt: 1, usage: { inputTokens: 1_000_000, outputTokens: 715_000, model: "m" } } },
    });
    const budget = budgetSummary(r, T0);
    expect(budget).toMatchObject({ currency: "USD", total: { cost: "9.15" }, current: { cost: "9.15" }, ended: { cost: "0", throughAttempt: 0 } });
    expect(budget?.nearest).toMatchObject({ limit: "cost", text: "9.15 of 12.50 USD spent", cell: "9.15/12.50 USD", fraction: 0.732, warned: false });
  });

  it("shows the time since the first start, stopped at completion", () => {
    const r = run({ status: { phase: "Completed", attempt: 1, startTime: iso(T0), completionTime: iso(T0 + 192_000), budget: { wallClock: "1h", warnAt: 0.8 } } });
    expect(budgetSummary(r, T0 + 10 * 3600_000)).toMatchObject({ elapsed: "3m12s", nearest: { limit: "wallClock", cell: "3m12s/1h" } });
  });

  it("is left out for a run with no limit that spent nothing", () => {
    expect(runSummary(run())).not.toHaveProperty("budget");
    expect(runSummary(run({ status: { phase: "Planning", attempt: 1, heartbeat: { time: iso(T0), attempt: 1, usage: { inputTokens: 0 } } } }))).not.toHaveProperty("budget");
  });

  it("keeps the spending of a run with no limit, with no bar to draw", () => {
    const r = spendingRun();
    delete r.status.budget;
    const budget = runSummary(r).budget;
    expect(budget).toMatchObject({ limits: [], warnAt: 0.8, total: { inputTokens: 70_000, outputTokens: 12_000 } });
    expect(budget).not.toHaveProperty("nearest");
  });

  it("reads a garbage budget, spending or heartbeat without failing: no budget, or what can be read of it", () => {
    const unreadable: unknown[] = ["garbage", 42, null, [1, 2], { tokens: "lots", warnAt: 7 }, { tokens: 10, warnAt: 0.8, extra: 1 }];
    for (const value of unreadable) {
      const r = spendingRun();
      r.status.budget = value;
      const summary = runSummary(r);
      // The spending is readable, the budget not: figures without limits.
      expect(summary.budget, JSON.stringify(value)).toMatchObject({ limits: [], total: { inputTokens: 70_000 } });
      expect(summary).toMatchObject({ name: "r", phase: "Planning" });
    }
    // Readable but odd (the operator writes no such thing): shown as it is, as data; the page
    // renders it as text and clamps the bar.
    const odd = spendingRun();
    odd.status.budget = { tokens: -1, cost: { amount: "x", currency: "<b>USD</b>" }, warnAt: 0.5 };
    expect(runSummary(odd).budget?.limits.map((l) => [l.cell, l.exhausted])).toEqual([
      ["82000/-1 tokens", true],
      ["0/x <b>USD</b>", true],
    ]);
    for (const heartbeat of ["x", { attempt: "2", usage: { inputTokens: 5 } }, { attempt: 2, usage: [1] }, { attempt: 2, usage: { inputTokens: -5, cost: "NaN" } }]) {
      const r = spendingRun();
      r.status.heartbeat = heartbeat;
      // The current attempt's report is unreadable: the ended attempts still count.
      expect(runSummary(r).budget?.total, JSON.stringify(heartbeat)).toMatchObject({ inputTokens: 50_000, outputTokens: 10_000 });
    }
    const r = spendingRun();
    r.status.spent = { inputTokens: "1e400" };
    r.status.heartbeat = { attempt: 2, usage: { toolCalls: Number.MAX_SAFE_INTEGER + 10 } };
    // Neither spending is readable: the limits, with nothing counted against them.
    expect(runSummary(r).budget).toMatchObject({ total: { inputTokens: 0, outputTokens: 0, cost: "0", toolCalls: 0 }, nearest: { cell: "0/100000 tokens" } });
    delete r.status.budget;
    expect(runSummary(r)).not.toHaveProperty("budget");
    expect(runSummary({ status: { budget: { tokens: 10, warnAt: 0.8 }, heartbeat: null, spent: [] } }).budget).toMatchObject({ limits: [{ limit: "tokens", cell: "0/10 tokens" }] });
    expect(() => runSummary({ spec: "x", status: "y" })).not.toThrow();
  });

  it("falls back to the built-in warnAt when status.budget's is not a fraction", () => {
    const r = spendingRun();
    r.status.budget.warnAt = 7;
    expect(runSummary(r).budget).toMatchObject({ warnAt: 0.8, nearest: { warned: true } });
  });
});

describe("the run stream", () => {
  it("sends each version of the run followed by its summary, budget included", async () => {
    const written: string[] = [];
    const res = Object.assign(new EventEmitter(), { writeHead: () => undefined, write: (chunk: string) => written.push(chunk) });
    const client = {
      server: "https://stub",
      get: async () => ({ metadata: { resourceVersion: "1" }, items: [spendingRun()] }),
      // A watch that is accepted and then stays quiet.
      watch: async () => new AbortController(),
    } as unknown as KubeClient;
    const stream = new EventStream(res as unknown as ServerResponse);
    void streamRun(client, "ns", "r", stream);
    await new Promise((resolve) => setTimeout(resolve, 10));
    res.emit("close");
    const events = written.filter((w) => w.startsWith("event: ")).map((w) => ({ event: /^event: (\S+)/.exec(w)?.[1], data: JSON.parse(/\ndata: (.*)\n/.exec(w)?.[1] ?? "null") }));
    expect(events.map((e) => e.event)).toEqual(["run", "summary"]);
    expect(events[0]?.data.metadata.name).toBe("r");
    expect(events[1]?.data).toMatchObject({ name: "r", budget: { nearest: { cell: "82000/100000 tokens" } } });
  });
});
