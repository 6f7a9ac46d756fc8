// The demo's summary: what the watchdog did, from the operator's metrics, the outbox and the
// healthy sandbox's own account of its writes, and how each behaviour ended.
import type { Run } from "./driver.ts";
import type { Verdict } from "./judge.ts";
import { byLabel, total, type Sample } from "./prometheus.ts";
import { DEMO_RUNS } from "./scenario.ts";
import { bold, dim, green, phaseColour, red } from "./view.ts";

/* eslint-disable @typescript-eslint/no-explicit-any -- runs are read as plain JSON here */
/** What the healthy run's sandbox SDK wrote, from the stats its agent logs when it completes. */
export interface SdkWrites {
  run: string;
  seconds: number;
  writes: number;
  heartbeatWrites: number;
  heartbeatIntervalMs: number;
}

/** From the log of the run's last sandbox (its pod's log, or the local runner's log file). */
export function sdkWrites(run: Run | undefined, text: string | undefined): SdkWrites | undefined {
  if (!run || text === undefined) return undefined;
  for (const line of text.split("\n").reverse()) {
    if (!line.includes('"agent completed"')) continue;
    try {
      const { time, stats } = JSON.parse(line) as { time: string; stats: { writes: number; heartbeatWrites: number; heartbeatIntervalMs: number; startedAt: number } };
      const seconds = (Date.parse(time) - stats.startedAt) / 1000;
      return { run: run.metadata.name, seconds, writes: stats.writes, heartbeatWrites: stats.heartbeatWrites, heartbeatIntervalMs: stats.heartbeatIntervalMs };
    } catch {
      return undefined;
    }
  }
  return undefined;
}

export function summaryLines(samples: Sample[], runs: Run[], verdicts: Verdict[], emails: Map<string, number>, sdk?: SdkWrites): string[] {
  const lines: string[] = [];
  const list = (counts: Record<string, number>) =>
    Object.entries(counts)
      .sort(([a], [b]) => a.localeCompare(b))
      .map(([k, v]) => `${k} ${v}`)
      .join(", ") || "none";
  const row = (label: string, value: number | string, detail = "") => lines.push(`  ${label.padEnd(34)} ${String(value).padStart(3)}${detail ? `   ${detail}` : ""}`);

  lines.push(bold("What the watchdog did") + dim("  (the operator's metrics)"));
  const killed = total(samples, "watchdog_hung_sandboxes_killed_total");
  const count = total(samples, "watchdog_detection_latency_seconds_count");
  const sum = total(samples, "watchdog_detection_latency_seconds_sum");
  const buckets = samples
    .filter((s) => s.name === "watchdog_detection_latency_seconds_bucket" && s.labels.le !== "+Inf")
    .sort((a, b) => Number(a.labels.le) - Number(b.labels.le));
  const within = buckets.find((b) => b.value >= count && count > 0)?.labels.le;
  row("hung sandboxes killed", killed, count ? `detected ${(sum / count).toFixed(2)}s after the heartbeat deadline on average${within ? `, each within ${within}s` : ""}` : "");
  const requeues = byLabel(samples, "watchdog_requeues_total", "reason");
  row("requeues with backoff", total(samples, "watchdog_requeues_total"), list(requeues));
  row("stall nudges", total(samples, "watchdog_nudges_total"));
  const interventions = byLabel(samples, "watchdog_needs_human_intervention_total", "reason");
  row("runs stopped for a person", total(samples, "watchdog_needs_human_intervention_total"), list(interventions));

  // Replays: a later attempt calling a tool an earlier attempt started, with the same key.
  const replays: string[] = [];
  for (const run of runs) {
    const byKey = new Map<string, Set<number>>();
    for (const call of run.status?.toolCalls ?? []) {
      if (!call.idempotencyKey) continue;
      const attempts = byKey.get(call.idempotencyKey) ?? new Set<number>();
      attempts.add(call.attempt);
      byKey.set(call.idempotencyKey, attempts);
    }
    for (const [key, attempts] of byKey) {
      if (attempts.size < 2) continue;
      const call = (run.status.toolCalls as any[]).find((c) => c.idempotencyKey === key);
      replays.push(`${call.name} in ${run.metadata.name} (attempts ${[...attempts].sort().join(", ")})`);
    }
  }
  row("calls re-run under the same key", replays.length, replays.join("; "));
  const mailer = DEMO_RUNS.find((r) => r.behaviour === "side-effect-then-crash");
  if (mailer) {
    const sent = emails.get(mailer.name) ?? 0;
    const verdict = sent === 1 ? green("exactly once") : red(`${sent} times`);
    row("e-mails in the outbox", sent, `${mailer.name} crashed after sending and sent again with the same key: delivered ${verdict}`);
  }

  const runaway = DEMO_RUNS.find((r) => r.behaviour === "runaway");
  const looped = runaway && runs.find((r) => r.metadata.name === runaway.name);
  if (runaway && looped) {
    const spent = (looped.status?.spent?.inputTokens ?? 0) + (looped.status?.spent?.outputTokens ?? 0);
    const stopped = looped.status?.reason === "BudgetExhausted" ? green("stopped by its budget") : red(`not stopped by its budget (${looped.status?.reason ?? looped.status?.phase ?? "?"})`);
    row("tokens spent by the runaway", spent, `${runaway.name} looped without failing, against a ${(runaway.budget as { tokens?: number }).tokens}-token limit: ${stopped}`);
  }

  if (sdk && sdk.seconds > 0) {
    const perMinute = (n: number) => ((n * 60) / sdk.seconds).toFixed(1);
    row(
      "status writes by the healthy sandbox",
      sdk.writes,
      `${sdk.run} in ${sdk.seconds.toFixed(0)}s: ${sdk.heartbeatWrites} heartbeat-only (${perMinute(sdk.heartbeatWrites)}/min; at most one per ${sdk.heartbeatIntervalMs / 1000}s), the rest carried state changes, tool records and checkpoints`,
    );
  }

  lines.push("", bold("How each behaviour ended"));
  for (const v of verdicts) {
    const mark = v.ok ? green("✓") : red("✗");
    const run = runs.find((r) => r.metadata.name === v.name);
    const s = run?.status ?? {};
    const detail = `attempt ${s.attempt ?? "-"}, restarts ${s.restarts ?? 0}${s.reason ? `, ${s.reason}` : ""}`;
    lines.push(`  ${mark} ${v.name.padEnd(15)} ${v.behaviour.padEnd(23)} ${phaseColour(v.phase)(v.phase.padEnd(23))} ${dim(detail)}`);
    if (!v.ok) {
      lines.push(`      expected: ${v.expected}`);
      for (const p of v.problems) lines.push(`      ${red(p)}`);
    }
  }
  return lines;
}
