// The ledger's schema is versioned: numbered migrations, applied once, in order, atomically, and
// safely when several operator replicas start at the same moment.
import { Client } from "pg";
import { afterAll, expect, inject, it } from "vitest";
import { Ledger } from "../../operator/ledger/ledger.ts";
import { MIGRATIONS, migrate, type Migration } from "../../operator/ledger/migrations.ts";
import { waitFor } from "../support/wait.ts";
import { capturingLogger, createDatabase, type TestDatabase } from "./support.ts";

const databases: TestDatabase[] = [];
afterAll(async () => {
  for (const db of databases) await db.drop();
});

async function freshDatabase(): Promise<TestDatabase> {
  const db = await createDatabase(inject("databaseUrl"), import.meta.filename);
  databases.push(db);
  return db;
}

async function withClient<T>(url: string, fn: (client: Client) => Promise<T>): Promise<T> {
  const client = new Client({ connectionString: url });
  await client.connect();
  try {
    return await fn(client);
  } finally {
    await client.end();
  }
}

async function tables(db: TestDatabase): Promise<string[]> {
  const rows = await db.query<{ table_name: string }>(
    "SELECT table_name FROM information_schema.tables WHERE table_schema = 'public' ORDER BY table_name",
  );
  return rows.map((r) => r.table_name);
}

const ALL = MIGRATIONS.map((m) => m.version);

it("numbers its migrations 1, 2, ... without holes", () => {
  expect(ALL).toEqual(ALL.map((_, i) => i + 1));
});

it("applies every migration once, in order, and nothing the second time", async () => {
  const db = await freshDatabase();
  const [first, second] = await withClient(db.url, async (client) => [await migrate(client), await migrate(client)]);
  expect(first).toEqual({ applied: ALL, current: ALL.at(-1), unknown: [] });
  expect(second).toEqual({ applied: [], current: ALL.at(-1), unknown: [] });
  const recorded = await db.query("SELECT version, name FROM schema_migrations ORDER BY version");
  expect(recorded).toEqual(MIGRATIONS.map(({ version, name }) => ({ version, name })));
  expect(await tables(db)).toEqual(["ledger_attempt_usage", "ledger_gaps", "ledger_tool_calls", "ledger_transitions", "schema_migrations"]);
});

it("applies only the migrations a database does not have yet", async () => {
  const db = await freshDatabase();
  const older = await withClient(db.url, (client) => migrate(client, MIGRATIONS.slice(0, 1)));
  expect(older.applied).toEqual([1]);
  expect(await tables(db)).not.toContain("ledger_gaps");
  const newer = await withClient(db.url, (client) => migrate(client));
  expect(newer.applied).toEqual(ALL.slice(1));
  expect(await tables(db)).toContain("ledger_gaps");
});

it("applies all pending migrations or none", async () => {
  const db = await freshDatabase();
  const broken: Migration = { version: ALL.length + 1, name: "broken", sql: "CREATE TABLE broken (x no_such_type)" };
  await expect(withClient(db.url, (client) => migrate(client, [...MIGRATIONS, broken]))).rejects.toThrow(/no_such_type/);
  expect(await tables(db)).toEqual([]);
});

it("reports versions it does not know instead of failing", async () => {
  const db = await freshDatabase();
  const future: Migration = { version: ALL.length + 1, name: "from a newer operator", sql: "SELECT 1" };
  await withClient(db.url, (client) => migrate(client, [...MIGRATIONS, future]));
  const result = await withClient(db.url, (client) => migrate(client));
  expect(result).toEqual({ applied: [], current: future.version, unknown: [future.version] });
});

it("lets replicas that start together migrate at once without failing", async () => {
  const db = await freshDatabase();
  const results = await Promise.all(Array.from({ length: 6 }, () => withClient(db.url, (client) => migrate(client))));
  expect(results.filter((r) => r.applied.length > 0).map((r) => r.applied)).toEqual([ALL]);
  expect(results.every((r) => r.current === ALL.at(-1))).toBe(true);
  expect(await db.query("SELECT count(*)::int AS n FROM schema_migrations")).toEqual([{ n: ALL.length }]);
});

it("migrates once when two ledgers open the same database together", async () => {
  const db = await freshDatabase();
  const logs = [capturingLogger(), capturingLogger()];
  const ledgers = logs.map(({ log }) => Ledger.open(db.url, { log }));
  try {
    await waitFor("both ledgers ready", () => ledgers.every((l) => l.ready), { timeoutMs: 20_000 });
    const applied = logs.map(({ lines }) => lines.find((l) => l.msg === "ledger schema migrated" || l.msg === "ledger schema is current")?.applied);
    expect(applied.sort()).toEqual([[], ALL]);
    expect(ledgers.map((l) => l.failedFlushes)).toEqual([0, 0]);
  } finally {
    await Promise.all(ledgers.map((l) => l.close()));
  }
});
