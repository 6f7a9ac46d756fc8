// What observe() queues of each attempt's usage: a row when a figure grew, never one that lowers
// what was queued, nothing for a report it cannot trust, and a cost priced the way the watchdog
// prices it when the sandbox reports none.
import { describe, expect, it } from "vitest";
import type { BudgetSpec } from "../../../operator/api/agentrun.ts";
import type { Json } from "../../../operator/kube/client.ts";
import { allRows, rowCount, runRef, RunMemory, type AttemptUsageRow, type Row } from "../../../operator/ledger/rows.ts";
import { dedupe } from "../../../operator/ledger/store.ts";
import { MAX_ATTEMPTS_REMEMBERED, UsageMemory } from "../../../operator/ledger/usage.ts";

const SEEN = "2030-01-01T00:00:00.000Z";
const LATER = "2030-01-01T00:00:05.000Z";

function runWith(usage: unknown, heartbeatAttempt: unknown = 1, extra: { attempt?: number; budget?: unknown } = {}): Json {
  return {
    metadata: { uid: "uid-1", namespace: "ns", name: "r" },
    spec: { template: { spec: { containers: [{ name: "agent" }] } }, ...(extra.budget !== undefined ? { budget: extra.budget } : {}) },
    status: { attempt: extra.attempt ?? 2, heartbeat: { time: SEEN, attempt: heartbeatAttempt, state: "Planning", usage } },
  };
}

function usageRows(memory: RunMemory, run: Json, seenAt = SEEN, install?: BudgetSpec): AttemptUsageRow[] {
  return memory.diff(run, runRef(run)!, seenAt, install).flatMap((r: Row) => (r.kind === "attemptUsage" ? [r.row] : []));
}

const fresh = () => new RunMemory({ uid: "uid-1", namespace: "ns", name: "r" });

describe("attempt usage rows", () => {
  it("queues an attempt's usage once per growth, with its exact cost", () => {
    const memory = fresh();
    const first = runWith({ inputTokens: 1000, outputTokens: 50, cost: "0.1", toolCalls: 1, model: "gpt-5" });
    expect(usageRows(memory, first)).toEqual([
      {
        run_uid: "uid-1",
        namespace: "ns",
        run_name: "r",
        attempt: 1,
        input_tokens: 1000,
        output_tokens: 50,
        tool_calls: 1,
        cost: "0.1",
        currency: null,
        model: "gpt-5",
        seen_at: SEEN,
      },
    ]);
    // Heartbeats that report the same figures again bring nothing.
    expect(usageRows(memory, first)).toEqual([]);
    expect(usageRows(memory, runWith({ inputTokens: 1000, outputTokens: 50, cost: "0.1", toolCalls: 1, model: "gpt-5" }))).toEqual([]);
    // Each figure growing on its own is news; three reports of 0.1 add up to exactly 0.3.
    expect(usageRows(memory, runWith({ inputTokens: 1000, outputTokens: 50, cost: "0.2", toolCalls: 1 }), LATER)).toMatchObject([{ cost: "0.2", seen_at: LATER }]);
    expect(usageRows(memory, runWith({ inputTokens: 1000, outputTokens: 50, cost: "0.3", toolCalls: 2 }))).toMatchObject([{ cost: "0.3", tool_calls: 2 }]);
    expect(usageRows(memory, runWith({ inputTokens: 1001, outputTokens: 50, cost: "0.3", toolCalls: 2 }))).toMatchObject([{ input_tokens: 1001 }]);
  });

  it("records nothing for an attempt that has spent nothing", () => {
    const memory = fresh();
    expect(usageRows(memory, runWith({ inputTokens: 0, outputTokens: 0, toolCalls: 0 }))).toEqual([]);
    expect(usageRows(memory, runWith({ inputTokens: 0, outputTokens: 0, toolCalls: 1 }))).toMatchObject([{ tool_calls: 1 }]);
  });

  it("keeps each attempt apart, and never queues a row that lowers one", () => {
    const memory = fresh();
    const attempt1 = runWith({ inputTokens: 5000, outputTokens: 400, cost: "0.5", toolCalls: 3 }, 1);
    const attempt2 = runWith({ inputTokens: 200, outputTokens: 10, cost: "0.01", toolCalls: 0 }, 2);
    expect(usageRows(memory, attempt1).map((r) => r.attempt)).toEqual([1]);
    expect(usageRows(memory, attempt2).map((r) => r.attempt)).toEqual([2]);
    // A stale cached object of attempt 1, from before its last report: nothing to queue.
    expect(usageRows(memory, runWith({ inputTokens: 4000, outputTokens: 300, cost: "0.4", toolCalls: 2 }, 1))).toEqual([]);
    // One figure of a reordered report grew while others are behind: the row carries the greatest of each.
    expect(usageRows(memory, runWith({ inputTokens: 100, outputTokens: 10, cost: "0.01", toolCalls: 1, model: "late" }, 2))).toEqual([
      expect.objectContaining({ attempt: 2, input_tokens: 200, output_tokens: 10, cost: "0.01", tool_calls: 1, model: null }),
    ]);
  });

  it("skips a report it cannot trust, without throwing", () => {
    const garbage: unknown[] = [
      null,
      "lots",
      [1, 2],
      { inputTokens: -1 },
      { inputTokens: 1.5 },
      { outputTokens: "10" },
      { toolCalls: Number.NaN },
      { inputTokens: Number.POSITIVE_INFINITY },
      { inputTokens: 10, cost: "1e3" },
      { inputTokens: 10, cost: 0.1 },
      { inputTokens: 10, cost: "-1" },
    ];
    for (const usage of garbage) {
      const memory = fresh();
      expect(() => usageRows(memory, runWith(usage)), JSON.stringify(usage)).not.toThrow();
      expect(usageRows(fresh(), runWith(usage)), JSON.stringify(usage)).toEqual([]);
    }
    const fine = { inputTokens: 10 };
    for (const attempt of [0, -1, 1.5, "1", null, 3 /* beyond status.attempt 2: not started yet */]) {
      expect(usageRows(fresh(), runWith(fine, attempt)), String(attempt)).toEqual([]);
    }
    for (const status of [undefined, null, "odd", { heartbeat: null }, { heartbeat: "odd" }, { heartbeat: { attempt: 1 } }, { heartbeat: { usage: { inputTokens: 1 } } }]) {
      const run = { metadata: { uid: "u", namespace: "ns", name: "r" }, status } as Json;
      expect(() => usageRows(fresh(), run)).not.toThrow();
      expect(usageRows(fresh(), run)).toEqual([]);
      expect(allRows(run, runRef(run)!, SEEN)).toEqual([]);
    }
  });

  it("caps huge counts at 2^53 - 1, keeps a model's text within bounds and a currency from the spec", () => {
    const [row] = usageRows(fresh(), runWith({ inputTokens: 1e300, outputTokens: 2 ** 60, toolCalls: 0, model: `m\u0000${"x".repeat(1000)}` }, 1, { budget: { cost: { amount: "5", currency: "EUR" } } }));
    expect(row).toMatchObject({ input_tokens: Number.MAX_SAFE_INTEGER, output_tokens: Number.MAX_SAFE_INTEGER, cost: null, currency: "EUR" });
    expect(row?.model).toBe(`m${"x".repeat(255)}`);
  });

  it("prices the tokens by the run's prices over the install's when the sandbox reports no cost", () => {
    const install: BudgetSpec = {
      cost: { amount: "100", currency: "USD" },
      prices: [
        { model: "gpt-5", inputPerMillion: "1.25", outputPerMillion: "10" },
        { model: "small", inputPerMillion: "0.1", outputPerMillion: "0.4" },
      ],
    };
    const budget = { prices: [{ model: "gpt-5", inputPerMillion: "2.5", outputPerMillion: "20" }] };
    const usage = { inputTokens: 12_000, outputTokens: 800, toolCalls: 4 };
    // The run's own price: 12000 * 2.5e-6 + 800 * 20e-6 = 0.046 exactly; the currency is the install's cost limit's.
    expect(usageRows(fresh(), runWith({ ...usage, model: "gpt-5" }, 1, { budget }), SEEN, install)).toMatchObject([{ cost: "0.046", currency: "USD" }]);
    // A model only the install prices: 12000 * 0.1e-6 + 800 * 0.4e-6 = 0.00152.
    expect(usageRows(fresh(), runWith({ ...usage, model: "small" }, 1, { budget }), SEEN, install)).toMatchObject([{ cost: "0.00152" }]);
    // A reported cost wins over any price.
    expect(usageRows(fresh(), runWith({ ...usage, model: "gpt-5", cost: "0.31" }, 1, { budget }), SEEN, install)).toMatchObject([{ cost: "0.31" }]);
    // Nobody prices it, or it names no model: the cost is unknown, not 0.
    expect(usageRows(fresh(), runWith({ ...usage, model: "mystery" }), SEEN, install)).toMatchObject([{ cost: null, currency: "USD" }]);
    expect(usageRows(fresh(), runWith(usage), SEEN, install)).toMatchObject([{ cost: null }]);
    // A budget the API server would not have admitted costs the row its price, not the row.
    expect(usageRows(fresh(), runWith({ ...usage, model: "gpt-5" }, 1, { budget: { prices: "cheap", wallClock: "soon" } }))).toMatchObject([{ cost: null, input_tokens: 12_000 }]);
  });

  it("is part of what a catch-up rewrites, and remembered so observe() does not queue it again", () => {
    const run = runWith({ inputTokens: 10, outputTokens: 1, toolCalls: 0, cost: "0.001" });
    const rows = allRows(run, runRef(run)!, SEEN);
    expect(rows.map((r) => r.kind)).toEqual(["attemptUsage"]);
    expect(rowCount(run)).toBe(1);
    const memory = fresh();
    memory.remember(rows);
    expect(usageRows(memory, run)).toEqual([]);
    // A dropped usage row is kept whole, for the next catch-up to write back.
    memory.noteDropped(rows[0]!);
    expect(memory.hasDropped).toBe(true);
    expect([...memory.droppedUsage.values()]).toEqual([rows[0]!.row]);
  });

  it("remembers a bounded number of attempts, forgetting the oldest", () => {
    const memory = new UsageMemory();
    const ref = { uid: "uid-1", namespace: "ns", name: "r" };
    const usage = { inputTokens: 1 };
    for (let a = 1; a <= MAX_ATTEMPTS_REMEMBERED + 2; a++) expect(memory.diff(runWith(usage, a, { attempt: 100 }), ref, SEEN, undefined)).toBeDefined();
    expect((memory as unknown as { attempts: Map<number, unknown> }).attempts.size).toBe(MAX_ATTEMPTS_REMEMBERED);
    // An attempt older than every one remembered was seen long ago.
    expect(memory.diff(runWith(usage, 1, { attempt: 100 }), ref, SEEN, undefined)).toBeUndefined();
  });
});

describe("dedupe of usage rows", () => {
  it("collapses one attempt's rows in a batch to the greatest of each figure and the span they were seen over", () => {
    const base = { run_uid: "u", namespace: "ns", run_name: "r", attempt: 1, currency: "USD" };
    const newer: AttemptUsageRow = { ...base, input_tokens: 30, output_tokens: 3, tool_calls: 2, cost: "0.3", model: "b", seen_at: LATER };
    const older: AttemptUsageRow = { ...base, input_tokens: 10, output_tokens: 1, tool_calls: 1, cost: null, model: "a", seen_at: SEEN };
    const other: AttemptUsageRow = { ...older, attempt: 2 };
    for (const order of [
      [older, newer],
      [newer, older],
    ]) {
      const { usage } = dedupe([...order, other].map((row) => ({ kind: "attemptUsage" as const, row })));
      expect(usage).toEqual([
        { ...base, input_tokens: 30, output_tokens: 3, tool_calls: 2, cost: "0.3", model: "b", first_seen: SEEN, last_seen: LATER },
        { ...base, attempt: 2, input_tokens: 10, output_tokens: 1, tool_calls: 1, cost: null, model: "a", first_seen: SEEN, last_seen: SEEN },
      ]);
    }
  });
});
