// Reads a run's history from the ledger:
//
//   DATABASE_URL=postgres://... node operator/ledger/cli.ts history <namespace> <name> [--json]
//   DATABASE_URL=postgres://... node operator/ledger/cli.ts history --uid <uid> [--json]
//   node operator/ledger/cli.ts history --database-url-file=FILE <namespace> <name>
//
// Prints a readable timeline, or with --json the same document GET /history/<namespace>/<name>
// serves. Exits 1 when the ledger holds nothing for the run, 2 on a usage error.
import { parseArgs } from "node:util";
import { Client } from "pg";
import { DatabaseUrlError, givesRefusedFlag, REFUSAL, resolveDatabaseUrl } from "../cli/database-url.ts";
import { terminalWriter } from "../cli/terminal.ts";
import { formatHistory } from "./format.ts";
import { readHistory, type RunSelector } from "./read.ts";

const USAGE = `usage: cli.ts history <namespace> <name> [--json] [--database-url-file=FILE]
       cli.ts history --uid <uid> [--json] [--database-url-file=FILE]
DATABASE_URL, or the file given with --database-url-file, holds the ledger database's URL
(postgres://user@host:port/db); never the command line, which ps shows to every user.`;

class UsageError extends Error {}

export interface CliIo {
  out: (text: string) => void;
  err: (text: string) => void;
}

const stdio: CliIo = {
  out: (text) => process.stdout.write(text),
  err: (text) => process.stderr.write(text),
};

function parse(argv: string[]): { selector: RunSelector; json: boolean; databaseUrlFile: string | undefined } {
  if (givesRefusedFlag(argv)) throw new UsageError(REFUSAL);
  const { values, positionals } = parseArgs({
    args: argv,
    allowPositionals: true,
    options: { json: { type: "boolean" }, uid: { type: "string" }, "database-url-file": { type: "string" }, help: { type: "boolean", short: "h" } },
  });
  if (values.help) throw new UsageError("");
  const databaseUrlFile = values["database-url-file"];
  const [command, ...rest] = positionals;
  if (command !== "history") throw new UsageError(command ? `unknown command ${JSON.stringify(command)}` : "missing command");
  const json = values.json ?? false;
  if (values.uid !== undefined) {
    if (rest.length) throw new UsageError("give either --uid or <namespace> <name>, not both");
    return { selector: { uid: values.uid }, json, databaseUrlFile };
  }
  if (rest.length !== 2) throw new UsageError("history needs <namespace> <name>");
  return { selector: { namespace: rest[0] as string, name: rest[1] as string }, json, databaseUrlFile };
}

/** Runs the CLI; resolves to the exit code. */
export async function main(argv: string[], env: NodeJS.ProcessEnv, terminal: CliIo = stdio): Promise<number> {
  // The history holds what sandboxes wrote, and errors echo the database's words: none of it may
  // drive the terminal.
  const io = terminalWriter(terminal);
  let args: ReturnType<typeof parse>;
  try {
    args = parse(argv);
  } catch (err) {
    if (!(err instanceof UsageError) && !(err instanceof TypeError)) throw err;
    io.err(`${err.message ? `${err.message}\n` : ""}${USAGE}\n`);
    return 2;
  }
  let url: string | undefined;
  try {
    url = resolveDatabaseUrl(args.databaseUrlFile, env);
  } catch (err) {
    if (!(err instanceof DatabaseUrlError)) throw err;
    io.err(`${err.message}\n${USAGE}\n`);
    return 2;
  }
  if (!url) {
    io.err(`DATABASE_URL is not set and no --database-url-file is given\n${USAGE}\n`);
    return 2;
  }
  const client = new Client({ connectionString: url, connectionTimeoutMillis: 10_000, application_name: "agent-watchdog-ledger-cli" });
  try {
    await client.connect();
    const history = await readHistory(client, args.selector);
    const what = "uid" in args.selector ? `uid ${args.selector.uid}` : `${args.selector.namespace}/${args.selector.name}`;
    if (!history) {
      io.err(`no history recorded for ${what}\n`);
      return 1;
    }
    io.out(args.json ? `${JSON.stringify(history, null, 2)}\n` : formatHistory(history));
    return 0;
  } catch (err) {
    const code = (err as { code?: unknown }).code;
    io.err(code === "42P01" ? "the database holds no ledger (its tables do not exist)\n" : `ledger: ${err instanceof Error ? err.message : String(err)}\n`);
    return 1;
  } finally {
    await client.end().catch(() => undefined);
  }
}

if (import.meta.main) {
  process.exitCode = await main(process.argv.slice(2), process.env);
}
