// What runs spend, as counters by namespace: growth counted once, a restart's baseline not counted
// again, deleted runs kept in the totals, and the namespace label bounded.
import { Registry } from "prom-client";
import { describe, expect, it } from "vitest";
import { OTHER, SpendingMetrics } from "../../../operator/metrics/spending.ts";

let uids = 0;

/** A run in `namespace` whose ended attempts spent `spent` tokens and whose current attempt reports `current`. */
function run(namespace: string, spent: number, current: number, extra: { cost?: string; budget?: object; uid?: string } = {}) {
  return {
    metadata: { namespace, name: `r${uids}`, uid: extra.uid ?? `uid-${uids++}` },
    spec: extra.budget ? { budget: extra.budget } : {},
    status: {
      attempt: 2,
      spent: { inputTokens: spent, outputTokens: 0, cost: "0", toolCalls: 1, throughAttempt: 1 },
      heartbeat: { time: "2026-12-05T10:00:00Z", attempt: 2, usage: { inputTokens: current, outputTokens: 10, toolCalls: 2, ...(extra.cost ? { cost: extra.cost } : {}) } },
    },
  };
}

async function values(registry: Registry, name: string): Promise<Record<string, number>> {
  const metric = (await registry.getMetricsAsJSON()).find((m) => m.name === name);
  return Object.fromEntries((metric?.values ?? []).map((v) => [Object.values(v.labels).join("/"), v.value]));
}

describe("spending counters", () => {
  it("count each run's growth once, by namespace, and a deleted run's spending stays counted", async () => {
    const registry = new Registry();
    const spending = new SpendingMetrics(registry, { maxNamespaces: 10 });
    spending.observe([]); // the first look: nothing there yet
    const a = run("team-a", 100, 50, { uid: "a" });
    spending.observe([a, run("team-b", 0, 5, { uid: "b" })]);
    expect(await values(registry, "watchdog_tokens_total")).toEqual({ "team-a/input": 150, "team-a/output": 10, "team-b/input": 5, "team-b/output": 10 });
    expect(await values(registry, "watchdog_tool_calls_total")).toEqual({ "team-a": 3, "team-b": 3 });
    a.status.heartbeat.usage.inputTokens = 80;
    spending.observe([a]);
    spending.observe([a]);
    expect((await values(registry, "watchdog_tokens_total"))["team-a/input"]).toBe(180);
    // team-b's run was deleted: what it spent stays in the counter.
    expect((await values(registry, "watchdog_tokens_total"))["team-b/input"]).toBe(5);
  });

  it("take the runs of the first look as a baseline, so that a restarted operator counts nothing twice", async () => {
    const registry = new Registry();
    const spending = new SpendingMetrics(registry, { maxNamespaces: 10 });
    const a = run("team-a", 100, 50, { uid: "a" });
    spending.observe([a]);
    expect(await values(registry, "watchdog_tokens_total")).toEqual({});
    a.status.heartbeat.usage.inputTokens = 70;
    spending.observe([a]);
    expect(await values(registry, "watchdog_tokens_total")).toEqual({ "team-a/input": 20 });
  });

  it("count a dip and its recovery once", async () => {
    const registry = new Registry();
    const spending = new SpendingMetrics(registry, { maxNamespaces: 10 });
    spending.observe([]);
    const a = run("team-a", 0, 50, { uid: "a" });
    spending.observe([a]);
    a.status.heartbeat.usage.inputTokens = 10; // a report the cache shows out of order
    spending.observe([a]);
    a.status.heartbeat.usage.inputTokens = 60;
    spending.observe([a]);
    expect((await values(registry, "watchdog_tokens_total"))["team-a/input"]).toBe(60);
  });

  it("count cost reported or priced, in the currency of the run's cost limit", async () => {
    const registry = new Registry();
    const spending = new SpendingMetrics(registry, { maxNamespaces: 10, installBudget: { prices: [{ model: "m", inputPerMillion: "3", outputPerMillion: "15" }] } });
    spending.observe([]);
    const priced = run("team-a", 0, 1_000_000, { budget: { cost: { amount: "10", currency: "EUR" } } });
    (priced.status.heartbeat.usage as Record<string, unknown>).model = "m";
    spending.observe([priced, run("team-b", 0, 0, { cost: "1.25", budget: { cost: { amount: "10", currency: "USD" } } })]);
    expect(await values(registry, "watchdog_cost_total")).toEqual({ "team-a/EUR": 3.00015, "team-b/USD": 1.25 });
  });

  it("give the first maxNamespaces namespaces series of their own and count the rest together", async () => {
    const registry = new Registry();
    const spending = new SpendingMetrics(registry, { maxNamespaces: 2 });
    spending.observe([]);
    spending.observe(["a", "b", "c", "d"].map((ns) => run(ns, 0, 1)));
    const input = Object.entries(await values(registry, "watchdog_tokens_total")).filter(([k]) => k.endsWith("/input"));
    expect(Object.fromEntries(input)).toEqual({ "a/input": 1, "b/input": 1, [`${OTHER}/input`]: 2 });
  });

  it("skip what it cannot read and go on", async () => {
    const registry = new Registry();
    const spending = new SpendingMetrics(registry, { maxNamespaces: 10 });
    spending.observe([]);
    const garbage = { metadata: { namespace: "x", uid: "g" }, spec: { budget: { wallClock: "forever" } }, status: { heartbeat: "nope" } };
    expect(() => spending.observe([garbage, {}, run("team-a", 0, 1)])).not.toThrow();
    expect((await values(registry, "watchdog_tokens_total"))["team-a/input"]).toBe(1);
  });
});
