// A run's history as people read it: one time-ordered timeline of phase transitions, tool calls,
// what each attempt spent, and the gaps the ledger could not fill.
import { formatDecimal, parseDecimal } from "../api/decimal.ts";
import { escapeTerminal } from "../cli/terminal.ts";
import type { AttemptUsageRecord, GapRecord, RunHistory, ToolCallRecord, TransitionRecord } from "./read.ts";

export type TimelineEntry =
  | { kind: "transition"; time: string; transition: TransitionRecord }
  | { kind: "toolCall"; time: string; toolCall: ToolCallRecord }
  | { kind: "usage"; time: string; usage: AttemptUsageRecord }
  | { kind: "gap"; time: string; gap: GapRecord };

// Where a gap belongs: just before the first transition after it, else after the last before it.
function gapTime(g: GapRecord): string {
  return g.before?.time ?? g.after?.time ?? g.detectedAt;
}

const ORDER: Record<TimelineEntry["kind"], number> = { gap: 0, transition: 1, toolCall: 2, usage: 3 };

/**
 * Everything in the history, oldest first; a gap comes before the transition that ends it, and an
 * attempt's usage stands where the ledger last saw it grow.
 */
export function timeline(history: RunHistory): TimelineEntry[] {
  const entries: TimelineEntry[] = [
    ...history.transitions.map((t) => ({ kind: "transition" as const, time: t.time, transition: t })),
    ...history.toolCalls.map((c) => ({ kind: "toolCall" as const, time: c.startedAt ?? c.firstSeen, toolCall: c })),
    ...(history.usage ?? []).map((u) => ({ kind: "usage" as const, time: u.lastSeen, usage: u })),
    ...history.gaps.map((g) => ({ kind: "gap" as const, time: gapTime(g), gap: g })),
  ];
  // Stable sort keeps each kind's own order among equal times.
  return entries.sort((a, b) => (a.time < b.time ? -1 : a.time > b.time ? 1 : ORDER[a.kind] - ORDER[b.kind]));
}

/** One sentence saying what the ledger could not recover. */
export function describeGap(g: GapRecord): string {
  if (g.kind === "tool_call") return `could not recover tool call ${g.callId ?? "?"}: it was seen but never stored`;
  const count = g.missing === undefined ? "one or more transitions" : `${g.missing} transition${g.missing === 1 ? "" : "s"}`;
  const after = g.after ? `after ${g.after.phase} at ${g.after.time}` : "at the start of the run";
  const before = g.before
    ? `before ${g.before.from ?? "?"} -> ${g.before.phase} at ${g.before.time}`
    : "with nothing stored after them";
  const why = g.cause === "dropped" ? "the buffer dropped them and the run no longer holds them" : "the stored transitions do not chain";
  return `could not recover ${count} ${after}, ${before} (${why})`;
}

const plural = (n: number | bigint, what: string) => `${n} ${what}${n === 1 || n === 1n ? "" : "s"}`;

/** "0.31 USD", or "cost 0.31" when the run has no cost limit to name a currency. */
const money = (amount: string, currency: string | undefined) => (currency ? `${amount} ${currency}` : `cost ${amount}`);

/** Spending as one phrase: "12000 input + 800 output tokens, 0.31 USD, 4 tool calls". */
function spendingPhrase(inputTokens: number | bigint, outputTokens: number | bigint, cost: string, toolCalls: number | bigint): string {
  return `${inputTokens} input + ${outputTokens} output tokens, ${cost}, ${plural(toolCalls, "tool call")}`;
}

/** The attempt's cost; an attempt that used no tokens cost nothing, priced or not. */
const costOfAttempt = (u: AttemptUsageRecord): string | undefined => u.cost ?? (u.inputTokens === 0 && u.outputTokens === 0 ? "0" : undefined);

/** What one attempt spent: "attempt 2 spent 12000 input + 800 output tokens, 0.31 USD, 4 tool calls (model gpt-5)". */
export function describeUsage(u: AttemptUsageRecord): string {
  const known = costOfAttempt(u);
  const cost = known === undefined ? "cost unknown" : money(known, u.currency);
  // The model is the sandbox's words; escaping is idempotent, so a caller escaping the line again changes nothing.
  const model = u.model === undefined ? "" : ` (model ${escapeTerminal(u.model)})`;
  return `attempt ${u.attempt} spent ${spendingPhrase(u.inputTokens, u.outputTokens, cost, u.toolCalls)}${model}`;
}

/**
 * What a run's attempts spent together, summed exactly: "spent in all: ... over 2 attempts". Costs
 * in different currencies are summed apart; a cost some attempt cannot know makes the sum a floor.
 */
export function describeTotal(usage: readonly AttemptUsageRecord[]): string {
  let input = 0n;
  let output = 0n;
  let calls = 0n;
  let unknown = false;
  const costs = new Map<string, bigint>();
  for (const u of usage) {
    input += BigInt(u.inputTokens);
    output += BigInt(u.outputTokens);
    calls += BigInt(u.toolCalls);
    const stated = costOfAttempt(u);
    const cost = stated === undefined ? undefined : parseDecimal(stated);
    if (cost === undefined) unknown = true;
    else costs.set(u.currency ?? "", (costs.get(u.currency ?? "") ?? 0n) + cost);
  }
  const known = [...costs].map(([currency, sum]) => money(formatDecimal(sum), currency || undefined)).join(" + ");
  const cost = !known ? "cost unknown" : unknown ? `at least ${known}` : known;
  return `spent in all: ${spendingPhrase(input, output, cost, calls)} over ${plural(usage.length, "attempt")}`;
}

function duration(from: string | undefined, to: string | undefined): string {
  if (!from || !to) return "";
  const ms = Date.parse(to) - Date.parse(from);
  if (!(ms >= 0)) return "";
  return ms < 1000 ? ` in ${ms}ms` : ` in ${(ms / 1000).toFixed(1)}s`;
}

function runUid(e: TimelineEntry): string {
  switch (e.kind) {
    case "transition":
      return e.transition.runUid;
    case "toolCall":
      return e.toolCall.runUid;
    case "usage":
      return e.usage.runUid;
    case "gap":
      return e.gap.runUid;
  }
}

function line(e: TimelineEntry): string {
  switch (e.kind) {
    case "transition": {
      const t = e.transition;
      const move = t.from ? `${t.from} -> ${t.phase}` : t.phase;
      const why = t.reason ? `  ${t.reason}${t.message ? `: ${t.message}` : ""}` : t.message ? `  ${t.message}` : "";
      return `${e.time}  phase  ${move}  (attempt ${t.attempt})${why}`;
    }
    case "toolCall": {
      const c = e.toolCall;
      const attempt = c.attempt === undefined ? "" : `  (attempt ${c.attempt})`;
      const error = c.error
        ? `: ${[c.error.httpStatus !== undefined ? `HTTP ${c.error.httpStatus}` : "", c.error.message ?? ""].filter(Boolean).join(" ")}`
        : "";
      const key = c.idempotencyKey ? `  key ${c.idempotencyKey}` : "";
      return `${e.time}  tool   ${c.name} [${c.id}] ${c.state}${duration(c.startedAt, c.finishedAt)}${error}${attempt}  args ${c.argsHash}${key}`;
    }
    case "usage":
      return `${e.time}  usage  ${describeUsage(e.usage)}`;
    case "gap":
      return `${e.time}  GAP    ${describeGap(e.gap)}`;
  }
}

/** The readable timeline the CLI prints. */
export function formatHistory(history: RunHistory): string {
  const header = `AgentRun ${history.namespace}/${history.name}  (uid ${history.uids.join(", ")})`;
  const counts = `${history.transitions.length} transitions, ${history.toolCalls.length} tool calls, ${history.gaps.length} gaps`;
  // A name reused after a delete has several runs: then each line says which one it belongs to,
  // and each run's spending is summed on its own.
  const several = history.uids.length > 1;
  const lines = timeline(history).map((e) => (several ? `${line(e)}  [run ${runUid(e).slice(0, 8)}]` : line(e)));
  const totals = history.uids.flatMap((uid) => {
    const usage = (history.usage ?? []).filter((u) => u.runUid === uid);
    return usage.length === 0 ? [] : [several ? `${describeTotal(usage)}  [run ${uid.slice(0, 8)}]` : describeTotal(usage)];
  });
  // Printed to a terminal, and tool names, errors, messages and models come from sandboxes: each
  // entry stays one line and drives nothing.
  return [header, counts, ...totals, "", ...lines].map((l) => escapeTerminal(l)).join("\n") + "\n";
}
