// The soak's output: a table for people, and one JSON line for machines.
import type { Findings, Stats } from "./analyse.ts";
import { INVARIANTS } from "./analyse.ts";
import type { FaultRecord } from "./record.ts";

const LABELS: Record<(typeof INVARIANTS)[number], string> = {
  duplicateSandboxes: "duplicate sandboxes (node and API view)",
  sharedRuns: "runs written by two replicas at once",
  earlyRetries: "early retries",
  falseKills: "false kills",
  lostOrStuckRuns: "lost or stuck runs",
  ledgerGaps: "ledger rows missing or doubled",
  sideEffects: "side effects not exactly once",
  misappliedAnswers: "answers applied to another request",
  operatorCrashes: "operator crashes",
};

/** A violation this soon after a fault (or after it ended) is listed beside it. */
const AFTER_FAULT_MS = 60_000;

const secs = (ms: number | undefined) => (ms === undefined ? "-" : `${(ms / 1000).toFixed(2)} s`);
const line = (s: Stats) => (s.count === 0 ? "none" : `n=${s.count} p50 ${secs(s.p50)} p99 ${secs(s.p99)} max ${secs(s.max)}`);

export interface Summary {
  seed: number;
  node: string;
  runs: number;
  durationMs: number;
  settled: boolean;
  faults: FaultRecord[];
  findings: Findings;
  samples: number;
  /** The fixed defect the operator ran with, if any (npm run soak -- --reintroduce). */
  reintroduced?: string;
  /** How many replicas ran at once, and over how many shards (absent in older histories). */
  replicas?: number;
  shards?: number;
  /** Where the history was written, for \`npm run check-history\`. */
  history?: string;
}

export function table(summary: Summary): string {
  const { findings } = summary;
  const out: string[] = [];
  const sharing = summary.replicas !== undefined ? `${summary.replicas} replicas, ${summary.shards === 1 ? "one leader" : `${summary.shards} shards`}, ` : "";
  out.push(`soak on ${summary.node}: ${sharing}${summary.runs} runs, ${secs(summary.durationMs)} of faults, seed ${Number.isNaN(summary.seed) ? "unknown" : summary.seed}, ${summary.settled ? "settled" : "did NOT settle"}; ${summary.samples} node samples`);
  if (summary.reintroduced) out.push(`the operator ran with a fixed defect re-introduced on purpose: ${summary.reintroduced}`);
  out.push("");
  out.push("faults");
  const byKind = new Map<string, FaultRecord[]>();
  for (const f of summary.faults) byKind.set(f.kind, [...(byKind.get(f.kind) ?? []), f]);
  out.push(`  ${"".padEnd(18)} applied  skipped  violations within ${AFTER_FAULT_MS / 1000} s after`);
  for (const [kind, faults] of byKind) {
    const applied = faults.filter((f) => !f.skipped);
    const near = findings.violations.filter((v) => v.at !== undefined && applied.some((f) => (v.at as number) >= f.at && (v.at as number) <= (f.until ?? f.at) + AFTER_FAULT_MS)).length;
    out.push(`  ${kind.padEnd(18)} ${String(applied.length).padStart(7)}  ${String(faults.length - applied.length).padStart(7)}  ${String(near).padStart(10)}`);
  }
  out.push("");
  out.push("invariants (each must be 0)");
  for (const invariant of INVARIANTS) out.push(`  ${LABELS[invariant].padEnd(40)} ${findings.counts[invariant]}`);
  out.push("");
  out.push("figures");
  out.push(`  deadline to deletion request, leader at the deadline     ${line(findings.detection.requestWithLeader)}`);
  out.push(`  deadline to deletion request, no leader at the deadline  ${line(findings.detection.requestWithoutLeader)}`);
  out.push(`  deadline to container gone                              ${line(findings.detection.containerGone)}`);
  // Sharded, a failover ends when every shard the replica held is held by another.
  const victim = (summary.shards ?? 1) > 1 ? "a shard holder" : "the leader";
  out.push(`  ${`failover after a SIGKILL of ${victim}`.padEnd(55)} ${line(findings.failover.hard)}`);
  out.push(`  ${`failover after a graceful rollout of ${victim}`.padEnd(55)} ${line(findings.failover.graceful)}`);
  const w = findings.writes;
  out.push(`  replicas' writes to runs checked against Lease tenures   ${w.checked === 0 ? "none recorded" : `${w.checked} writes to ${w.runs} runs by ${w.replicas} replica processes, ${w.tenures} tenures`}`);
  if (findings.violations.length) {
    out.push("");
    out.push("violations");
    for (const v of findings.violations) out.push(`  ${v.invariant}${v.run ? ` ${v.run}` : ""}${v.at ? ` at ${new Date(v.at).toISOString()}` : ""}: ${v.what}`);
  }
  return out.join("\n");
}

export function jsonLine(summary: Summary): string {
  const { findings } = summary;
  return JSON.stringify({
    soak: { node: summary.node, runs: summary.runs, durationMs: summary.durationMs, seed: summary.seed, settled: summary.settled, ...(summary.replicas !== undefined ? { replicas: summary.replicas, shards: summary.shards } : {}), ...(summary.reintroduced ? { reintroduced: summary.reintroduced } : {}), ...(summary.history ? { history: summary.history } : {}) },
    faults: Object.fromEntries([...new Set(summary.faults.map((f) => f.kind))].map((k) => [k, summary.faults.filter((f) => f.kind === k && !f.skipped).length])),
    violations: findings.counts,
    detection: findings.detection,
    failover: findings.failover,
    writes: findings.writes,
  });
}
