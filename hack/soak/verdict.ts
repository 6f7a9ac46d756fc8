// The one verdict on a soak's history, shared by the soak itself and by `npm run check-history`,
// so that a history checked again offline is judged exactly as it was when it was recorded.
import { FINAL_PHASES } from "../demo/driver.ts";
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
    durationMs: extra.durationMs ?? history.endedAt - history.startedAt,
    settled,
    faults: history.faults,
    findings,
    samples: extra.samples ?? 0,
    ...(extra.path ? { history: extra.path } : {}),
  };
  return { ok: settled && findings.violations.length === 0, findings, text: `${table(summary)}\n${jsonLine(summary)}\n` };
}

/** The checker's own test: a history with one violation of each kind, each counted exactly once. */
export function selfTestText(): { ok: boolean; text: string } {
  const result = selfTest();
  const lines = Object.entries(result.counts).map(([invariant, n]) => `  ${invariant.padEnd(20)} injected 1, counted ${n}${n === 1 ? "" : "  <-- wrong"}`);
  lines.push(result.ok ? "self-test passed: each injected violation was counted exactly once" : "self-test FAILED");
  return { ok: result.ok, text: `${lines.join("\n")}\n` };
}
