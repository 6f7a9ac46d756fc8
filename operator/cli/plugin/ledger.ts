// Reading a run's history from the ledger for the plugin. pg is loaded only when a ledger is
// given, so the commands that never touch it start no faster or slower for its sake.
import { readHistory, type RunHistory, type RunSelector } from "../../ledger/read.ts";

export class LedgerError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "LedgerError";
  }
}

/** host:port/database, never the password. */
export function ledgerName(url: string): string {
  try {
    const u = new URL(url);
    return `${u.hostname}${u.port ? `:${u.port}` : ""}${u.pathname}`;
  } catch {
    return "the ledger database";
  }
}

const UNDEFINED_TABLE = "42P01";

/** The run's history, undefined when the ledger holds nothing for it; a LedgerError when it cannot be read. */
export async function readLedger(url: string, selector: RunSelector): Promise<RunHistory | undefined> {
  const { Client } = await import("pg");
  let client;
  try {
    client = new Client({ connectionString: url, connectionTimeoutMillis: 10_000, application_name: "kubectl-agentrun" });
  } catch (err) {
    throw new LedgerError(`cannot use the ledger URL: ${(err as Error).message}`);
  }
  // A server that goes away mid-query makes the client emit an error the query also reports.
  client.on("error", () => undefined);
  try {
    await client.connect();
    return await readHistory(client, selector);
  } catch (err) {
    const e = err as { code?: string; message?: string; errors?: { code?: string }[] };
    const code = e.code ?? e.errors?.[0]?.code;
    const name = ledgerName(url);
    if (code === UNDEFINED_TABLE) throw new LedgerError(`${name} holds no ledger (its tables do not exist)`);
    if (code === "ECONNREFUSED") throw new LedgerError(`cannot reach the ledger at ${name}: connection refused`);
    throw new LedgerError(`cannot read the ledger at ${name}: ${e.message || code || String(err)}`);
  } finally {
    await client.end().catch(() => undefined);
  }
}
