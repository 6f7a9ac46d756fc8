// What each attempt spent, in PostgreSQL: one row per attempt, read back per attempt with exact
// costs, and never lowered by a stale object, a replay or a write that comes late.
import { Client } from "pg";
import { expect, inject, it } from "vitest";
import type { BudgetSpec } from "../../operator/api/agentrun.ts";
import type { Ledger } from "../../operator/ledger/ledger.ts";
import { formatHistory } from "../../operator/ledger/format.ts";
import { MIGRATIONS, migrate } from "../../operator/ledger/migrations.ts";
import { readHistory } from "../../operator/ledger/read.ts";
import { writeRows } from "../../operator/ledger/store.ts";
import type { AttemptUsageRow } from "../../operator/ledger/usage.ts";
import { waitFor } from "../support/wait.ts";
import { createDatabase, fileDatabase, RunSim } from "./support.ts";

const file = fileDatabase(import.meta.filename);
const openLedger = file.openLedger.bind(file);

async function written(ledger: Ledger): Promise<void> {
  await waitFor("the ledger to write", () => ledger.ready && ledger.bufferedRows === 0 && ledger.lastFlushTime !== undefined, { timeoutMs: 20_000 });
}

type Stored = { attempt: number; input_tokens: string; output_tokens: string; cost: string | null; currency: string | null; tool_calls: string; model: string | null };
const stored = (uid: string) =>
  file.db.query<Stored>("SELECT attempt, input_tokens, output_tokens, cost::text AS cost, currency, tool_calls, model FROM ledger_attempt_usage WHERE run_uid = $1 ORDER BY attempt", [uid]);

const INSTALL: BudgetSpec = { cost: { amount: "50", currency: "USD" }, prices: [{ model: "gpt-5", inputPerMillion: "1.25", outputPerMillion: "10" }] };

it("records each attempt's usage and reads it back per attempt, exactly", async () => {
  const ledger = openLedger({ installBudget: INSTALL });
  const sim = new RunSim("team-a", "spender").to("Queued").to("Starting").to("Planning");
  // Attempt 1 reports its cost; its reports grow, and every version is observed, some twice.
  for (const cost of ["0.1", "0.2", "0.300000000000000001"]) {
    sim.report({ inputTokens: 1000 * cost.length, outputTokens: 100, cost, toolCalls: 1, model: "gpt-5" });
    ledger.observe(sim.object());
    ledger.observe(sim.object());
  }
  sim.to("Queued", "HeartbeatTimeout");
  sim.attempt = 2;
  sim.to("Starting").to("Planning");
  // Attempt 2 reports only tokens: priced by the install's price, 12000 * 1.25e-6 + 800 * 10e-6 = 0.023.
  sim.report({ inputTokens: 12_000, outputTokens: 800, toolCalls: 4, model: "gpt-5" });
  ledger.observe(sim.object());
  await written(ledger);

  expect(await stored(sim.uid)).toEqual([
    { attempt: 1, input_tokens: "20000", output_tokens: "100", cost: "0.300000000000000001", currency: "USD", tool_calls: "1", model: "gpt-5" },
    { attempt: 2, input_tokens: "12000", output_tokens: "800", cost: "0.023", currency: "USD", tool_calls: "4", model: "gpt-5" },
  ]);
  const history = await ledger.history(sim.namespace, sim.name);
  expect(history?.usage).toEqual([
    expect.objectContaining({ runUid: sim.uid, runName: sim.name, attempt: 1, inputTokens: 20_000, outputTokens: 100, cost: "0.300000000000000001", currency: "USD", toolCalls: 1, model: "gpt-5" }),
    expect.objectContaining({ attempt: 2, inputTokens: 12_000, outputTokens: 800, cost: "0.023", toolCalls: 4 }),
  ]);
  expect(await ledger.historyByUid(sim.uid)).toEqual(history);
  const text = formatHistory(history!);
  expect(text).toContain("spent in all: 32000 input + 900 output tokens, 0.323000000000000001 USD, 5 tool calls over 2 attempts\n");
  expect(text).toMatch(/ {2}usage {2}attempt 2 spent 12000 input \+ 800 output tokens, 0\.023 USD, 4 tool calls \(model gpt-5\)\n/);
  // -o json is the same document.
  expect(JSON.parse(JSON.stringify(history))).toEqual(history);
  expect(ledger.lostRows).toBe(0);
  expect(ledger.failedFlushes).toBe(0);
});

it("never lowers what an attempt is recorded to have spent", async () => {
  const sim = new RunSim("team-a", "never-lower").to("Queued").to("Starting").to("Planning");
  sim.report({ inputTokens: 500, outputTokens: 50, cost: "0.05", toolCalls: 1, model: "small" });
  const early = sim.object();
  sim.report({ inputTokens: 9000, outputTokens: 700, cost: "0.9", toolCalls: 6, model: "large" });
  const late = sim.object();

  const ledger = openLedger();
  ledger.observe(late);
  ledger.observe(early); // a stale cached version after the newer one
  await written(ledger);
  const want = [{ attempt: 1, input_tokens: "9000", output_tokens: "700", cost: "0.9", currency: null, tool_calls: "6", model: "large" }];
  expect(await stored(sim.uid)).toEqual(want);
  const lastSeen = (await file.db.query<{ last_seen: Date }>("SELECT last_seen FROM ledger_attempt_usage WHERE run_uid = $1", [sim.uid]))[0]?.last_seen;

  // A fresh ledger (a restart, another replica) has no memory: only the database can refuse.
  const fresh = openLedger();
  fresh.observe(early);
  await written(fresh);
  expect(await stored(sim.uid)).toEqual(want);

  // Written straight to the store: lower figures, one reordered to be higher, in one batch.
  const base = { run_uid: sim.uid, namespace: sim.namespace, run_name: sim.name, attempt: 1, currency: null, seen_at: new Date().toISOString() };
  const lower: AttemptUsageRow = { ...base, input_tokens: 1, output_tokens: 1, cost: "0.000000000000000001", tool_calls: 0, model: "stale" };
  const client = new Client({ connectionString: file.db.url });
  await client.connect();
  try {
    expect(await writeRows(client, [{ kind: "attemptUsage", row: lower }])).toBe(0);
    expect(await writeRows(client, [{ kind: "attemptUsage", row: { ...lower, cost: null } }])).toBe(0);
    expect(await stored(sim.uid)).toEqual(want);
    // Only the output grew: that figure moves; the rest stay, and so does the model, the write being behind in the other counts.
    expect(await writeRows(client, [{ kind: "attemptUsage", row: { ...lower, output_tokens: 701 } }])).toBe(1);
    expect(await stored(sim.uid)).toEqual([{ ...want[0], output_tokens: "701" }]);
  } finally {
    await client.end();
  }
  const after = (await file.db.query<{ last_seen: Date }>("SELECT last_seen FROM ledger_attempt_usage WHERE run_uid = $1", [sim.uid]))[0]?.last_seen;
  expect(after!.getTime()).toBeGreaterThanOrEqual(lastSeen!.getTime());
});

it("reads a ledger whose schema predates usage", async () => {
  const old = await createDatabase(inject("databaseUrl"), `${import.meta.filename}-old`);
  try {
    const client = new Client({ connectionString: old.url });
    await client.connect();
    try {
      await migrate(client, MIGRATIONS.filter((m) => m.version < 3));
      await client.query(
        "INSERT INTO ledger_transitions (run_uid, namespace, name, attempt, to_phase, time) VALUES ('u', 'ns', 'r', 1, 'Queued', now())",
      );
      const history = await readHistory(client, { namespace: "ns", name: "r" });
      expect(history?.transitions).toHaveLength(1);
      expect(history?.usage).toEqual([]);
    } finally {
      await client.end();
    }
  } finally {
    await old.drop();
  }
});
