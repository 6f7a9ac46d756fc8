// `npm run check-history -- FILE`: judges a recorded history again, offline, with the same checker
// that gave the soak its verdict (hack/soak/analyse.ts, a pure function of the file). FILE is a
// history.json or the soak directory that holds one. Exit 0 when every invariant held and every
// run settled, 1 when not, 2 when the file cannot be read.
import { existsSync, readFileSync, statSync } from "node:fs";
import { join } from "node:path";
import { parseArgs } from "node:util";
import type { SoakRecord } from "./soak/record.ts";
import { judge, selfTestText } from "./soak/verdict.ts";

const USAGE = `usage: npm run check-history -- FILE|DIR
       npm run check-history -- --self-test

  FILE|DIR     a history.json a soak wrote, or the soak's directory (it holds history.json)
  --self-test  check the checker: a history with one violation of each kind, each of which must be
               counted exactly once

Prints the soak's table (faults, invariants, figures, each violation with the events that prove
it), then one JSON line. Exit 0 when nothing was violated and every run settled.
`;

function historyPath(given: string): string {
  if (!statSync(given).isDirectory()) return given;
  // Soaks before the history was named so left a record.json.
  for (const name of ["history.json", "record.json"]) if (existsSync(join(given, name))) return join(given, name);
  throw new Error(`${given} holds no history.json`);
}

function main(argv: string[]): number {
  const { values, positionals } = parseArgs({ args: argv, allowPositionals: true, options: { "self-test": { type: "boolean" }, help: { type: "boolean", short: "h" } } });
  if (values.help) {
    process.stdout.write(USAGE);
    return 0;
  }
  if (values["self-test"]) {
    const result = selfTestText();
    process.stdout.write(result.text);
    return result.ok ? 0 : 1;
  }
  if (positionals.length !== 1) {
    process.stderr.write(USAGE);
    return 2;
  }
  let history: SoakRecord;
  const path = historyPath(positionals[0] as string);
  try {
    history = JSON.parse(readFileSync(path, "utf8")) as SoakRecord;
  } catch (err) {
    process.stderr.write(`check-history: cannot read ${path}: ${err instanceof Error ? err.message : String(err)}\n`);
    return 2;
  }
  const verdict = judge(history, { path });
  process.stdout.write(verdict.text);
  return verdict.ok ? 0 : 1;
}

try {
  process.exit(main(process.argv.slice(2)));
} catch (err) {
  process.stderr.write(`check-history: ${err instanceof Error ? err.message : String(err)}\n`);
  process.exit(2);
}
