// The one verdict on a soak's history, shared by the soak itself and by `npm run check-history`,
// so that a history checked again offline is judged exactly as it was when it was recorded.
import { existsSync, readFileSync, statSync } from "node:fs";
import { join } from "node:path";
import { gunzipSync } from "node:zlib";
import { parseArgs } from "node:util";
import { FINAL_PHASES } from "../../harness/driver.ts";
import { analyse, type Findings } from "./analyse.ts";
import type { SoakRecord } from "./record.ts";
import { jsonLine, table, type Summary } from "./report.ts";
import { selfTest } from "./self-test.ts";

export interface Verdict {
  ok: boolean;
  findings: Findings;
  /** The table, then the JSON line. */
  text: string;
}

/** Judges a history: every invariant held, and every run reached an end state. */
export function judge(history: SoakRecord, extra: { runs?: number; samples?: number; durationMs?: number; path?: string } = {}): Verdict {
  const findings = analyse(history);
  const settled = history.runs.length >= (extra.runs ?? 0) && history.runs.every((r) => FINAL_PHASES.has(r.final?.phase ?? ""));
  const summary: Summary = {
    seed: history.seed ?? NaN,
    node: history.node,
    runs: extra.runs ?? history.runs.length,
    durationMs: extra.durationMs ?? history.durationMs ?? history.endedAt - history.startedAt,
    settled,
    faults: history.faults,
    findings,
    samples: extra.samples ?? 0,
    ...(history.reintroduced ? { reintroduced: history.reintroduced } : {}),
    ...(history.sharding ? { replicas: history.sharding.replicas, shards: history.sharding.shards } : {}),
    ...(extra.path ? { history: extra.path } : {}),
  };
  return { ok: settled && findings.violations.length === 0, findings, text: `${table(summary)}\n${jsonLine(summary)}\n` };
}

/** The checker's own test: a history with one violation of each kind, each counted exactly once. */
export function selfTestText(): { ok: boolean; text: string } {
  const result = selfTest();
  const lines = Object.entries(result.counts).map(([invariant, n]) => `  ${invariant.padEnd(20)} injected 1, counted ${n}${n === 1 ? "" : "  <-- wrong"}`);
  const handoff = result.handoff;
  const clean = handoff.violations.length === 0;
  lines.push(`  ${"a shard handoff".padEnd(20)} injected 0, counted ${handoff.violations.length} (${handoff.writes.checked} writes by ${handoff.writes.replicas} replica processes checked)${clean ? "" : "  <-- wrong"}`);
  for (const v of handoff.violations) lines.push(`    ${v.invariant}${v.run ? ` ${v.run}` : ""}: ${v.what}`);
  lines.push(result.ok ? "self-test passed: each injected violation was counted exactly once, and the shard handoff found clean" : "self-test FAILED");
  return { ok: result.ok, text: `${lines.join("\n")}\n` };
}

const CHECK_HISTORY_USAGE = `usage: npm run check-history -- FILE|DIR
       npm run check-history -- --self-test

  FILE|DIR     a history.json a soak wrote (or the same gzipped, .json.gz), or the soak's
               directory (it holds history.json)
  --self-test  check the checker: a history with one violation of each kind, each of which must be
               counted exactly once, and a sharded history with a shard handed over, which must
               be found clean

Prints the soak's table (faults, invariants, figures, each violation with the events that prove
it), then one JSON line. Exit 0 when nothing was violated and every run settled.
`;

/** A history as a soak wrote it, or gzipped (as histories are kept: a soak's is 100 to 200 kB). */
export function readHistory(path: string): SoakRecord {
  const bytes = readFileSync(path);
  return JSON.parse((path.endsWith(".gz") ? gunzipSync(bytes) : bytes).toString("utf8")) as SoakRecord;
}

function historyPath(given: string): string {
  if (!statSync(given).isDirectory()) return given;
  // Soaks before the history was named so left a record.json.
  for (const name of ["history.json", "record.json"]) if (existsSync(join(given, name))) return join(given, name);
  throw new Error(`${given} holds no history.json`);
}

/** `npm run check-history -- ARGS`: prints the verdict (or the self-test) and returns the exit code. */
export function checkHistoryCommand(argv: string[]): number {
  const { values, positionals } = parseArgs({ args: argv, allowPositionals: true, options: { "self-test": { type: "boolean" }, help: { type: "boolean", short: "h" } } });
  if (values.help) {
    process.stdout.write(CHECK_HISTORY_USAGE);
    return 0;
  }
  if (values["self-test"]) {
    const result = selfTestText();
    process.stdout.write(result.text);
    return result.ok ? 0 : 1;
  }
  if (positionals.length !== 1) {
    process.stderr.write(CHECK_HISTORY_USAGE);
    return 2;
  }
  let history: SoakRecord;
  const path = historyPath(positionals[0] as string);
  try {
    history = readHistory(path);
  } catch (err) {
    process.stderr.write(`check-history: cannot read ${path}: ${err instanceof Error ? err.message : String(err)}\n`);
    return 2;
  }
  const verdict = judge(history, { path });
  process.stdout.write(verdict.text);
  return verdict.ok ? 0 : 1;
}
