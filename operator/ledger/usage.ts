// Where the money went: one ledger row per attempt of a run, from the usage its sandbox reports in
// status.heartbeat.usage (cumulative within the attempt). Pure, like rows.ts.
//
// The report is sandbox-written. A figure that is not a count, or a cost that is not a decimal,
// makes the whole report unusable: half a report would understate the attempt without saying so.
// Figures only ever grow here, in memory and in the database alike, so a stale object, a late
// write or another replica's replay can never lower what an attempt is recorded to have spent.
import type { BudgetSpec } from "../api/agentrun.ts";
import { DECIMAL_PATTERN, formatDecimal, parseDecimal } from "../api/decimal.ts";
import { resolveBudget } from "../api/defaults.ts";
import type { Json } from "../kube/client.ts";
import { costOf } from "../api/spending.ts";
import type { RunRef } from "./rows.ts";

/** A row of ledger_attempt_usage, as written. seen_at becomes first_seen and last_seen. */
export interface AttemptUsageRow {
  run_uid: string;
  namespace: string;
  run_name: string;
  attempt: number;
  input_tokens: number;
  output_tokens: number;
  tool_calls: number;
  /** An exact decimal; null when the sandbox reported none and no price applies to its model. */
  cost: string | null;
  /** The currency of the run's effective cost limit, null when it has none. */
  currency: string | null;
  model: string | null;
  seen_at: string;
}

/** The figures a row carries, whatever else it holds (the store adds first_seen and last_seen). */
export type UsageFigures = Pick<AttemptUsageRow, "input_tokens" | "output_tokens" | "tool_calls" | "cost" | "model" | "currency">;

/** One attempt's report, checked. */
interface Report {
  attempt: number;
  inputTokens: number;
  outputTokens: number;
  toolCalls: number;
  /** The reported cost, scaled (decimal.ts). */
  cost: bigint | undefined;
  model: string | undefined;
}

/** The CRD bounds a model name the same way; a sandbox's text never grows a row beyond it. */
const MAX_MODEL = 256;

/** A count, capped at 2^53 - 1 as budget.ts caps sums; 0 when absent; null when not a count. */
function count(value: unknown): number | null {
  if (value === undefined) return 0;
  return typeof value === "number" && Number.isInteger(value) && value >= 0 ? Math.min(value, Number.MAX_SAFE_INTEGER) : null;
}

function report(run: Json): Report | undefined {
  const status = run.status as Record<string, unknown> | undefined;
  const heartbeat = status?.heartbeat as Record<string, unknown> | undefined;
  const usage = heartbeat?.usage as Record<string, unknown> | undefined;
  if (typeof usage !== "object" || usage === null || Array.isArray(usage)) return undefined;
  const attempt = heartbeat?.attempt;
  if (typeof attempt !== "number" || !Number.isInteger(attempt) || attempt < 1 || attempt > 2_147_483_647) return undefined;
  // A report from an attempt the operator has not started counts for nothing (budget.ts).
  if (typeof status?.attempt === "number" && attempt > status.attempt) return undefined;
  const inputTokens = count(usage.inputTokens);
  const outputTokens = count(usage.outputTokens);
  const toolCalls = count(usage.toolCalls);
  if (inputTokens === null || outputTokens === null || toolCalls === null) return undefined;
  let cost: bigint | undefined;
  if (usage.cost !== undefined) {
    cost = typeof usage.cost === "string" && DECIMAL_PATTERN.test(usage.cost) ? parseDecimal(usage.cost) : undefined;
    if (cost === undefined) return undefined;
  }
  // Nothing spent yet (every attempt's first heartbeat reports zeros): nothing to record.
  if (inputTokens === 0 && outputTokens === 0 && toolCalls === 0 && !cost) return undefined;
  // PostgreSQL text cannot hold NUL.
  const model = typeof usage.model === "string" ? usage.model.replaceAll("\u0000", "").slice(0, MAX_MODEL) || undefined : undefined;
  return { attempt, inputTokens, outputTokens, toolCalls, cost, model };
}

/**
 * The report's cost, else its tokens priced by the run's prices (spec.budget over the install's);
 * undefined when neither applies, since costOf's 0 for an unpriced model would claim a cost it does
 * not know. Also the currency of the run's cost limit, which the cost is in.
 */
function pricing(r: Report, run: Json, install: BudgetSpec | undefined): { cost: bigint | undefined; currency: string | undefined } {
  try {
    const budget = resolveBudget((run.spec as { budget?: BudgetSpec } | undefined)?.budget, install);
    const priced = r.model !== undefined && budget.prices.some((p) => p.model === r.model);
    const usage = { inputTokens: r.inputTokens, outputTokens: r.outputTokens, ...(r.model !== undefined ? { model: r.model } : {}) };
    const currency = budget.cost?.currency;
    return { cost: r.cost ?? (priced ? costOf(usage, budget.prices) : undefined), currency: typeof currency === "string" ? currency : undefined };
  } catch {
    // A budget the API server would not have admitted: the reported figures are still worth a row.
    return { cost: r.cost, currency: undefined };
  }
}

function row(r: Report, run: Json, ref: RunRef, seenAt: string, install: BudgetSpec | undefined): AttemptUsageRow {
  const { cost, currency } = pricing(r, run, install);
  return {
    run_uid: ref.uid,
    namespace: ref.namespace,
    run_name: ref.name,
    attempt: r.attempt,
    input_tokens: r.inputTokens,
    output_tokens: r.outputTokens,
    tool_calls: r.toolCalls,
    cost: cost === undefined ? null : formatDecimal(cost),
    currency: currency?.replaceAll("\u0000", "") ?? null,
    model: r.model ?? null,
    seen_at: seenAt,
  };
}

/** The usage row the run object holds (its heartbeat's attempt), if its report is well-formed. */
export function usageRow(run: Json, ref: RunRef, seenAt: string, install?: BudgetSpec): AttemptUsageRow | undefined {
  const r = report(run);
  return r && row(r, run, ref, seenAt, install);
}

/** Whether the run object carries a usage report at all (for sizing a catch-up). */
export function hasUsage(run: Json): boolean {
  const heartbeat = (run.status as Record<string, unknown> | undefined)?.heartbeat as Record<string, unknown> | undefined;
  return typeof heartbeat?.usage === "object" && heartbeat.usage !== null;
}

const scaled = (cost: string | null): bigint | undefined => (cost === null ? undefined : parseDecimal(cost));

function higherCost(a: string | null, b: string | null): string | null {
  const x = scaled(a);
  const y = scaled(b);
  if (y === undefined) return a;
  return x === undefined || y > x ? b : a;
}

/**
 * Two views of one attempt's usage as one: the greatest of each figure, and the model and
 * currency of the view that is not behind in any count (within an attempt counts never go down,
 * so that one is the newer).
 */
export function mergeUsage<T extends UsageFigures>(known: T, next: T): T {
  const behind = next.input_tokens < known.input_tokens || next.output_tokens < known.output_tokens || next.tool_calls < known.tool_calls;
  return {
    ...(behind ? known : next),
    input_tokens: Math.max(known.input_tokens, next.input_tokens),
    output_tokens: Math.max(known.output_tokens, next.output_tokens),
    tool_calls: Math.max(known.tool_calls, next.tool_calls),
    cost: higherCost(known.cost, next.cost),
  };
}

/** Whether `r` has any figure beyond `known`. Priced costs grow only with tokens, so they need no pricing to compare. */
function grew(known: AttemptUsageRow, r: Report): boolean {
  if (r.inputTokens > known.input_tokens || r.outputTokens > known.output_tokens || r.toolCalls > known.tool_calls) return true;
  if (r.cost === undefined) return false;
  const cost = scaled(known.cost);
  return cost === undefined || r.cost > cost;
}

/** Attempts remembered per run; a run that restarts often has moved past the oldest long ago. */
export const MAX_ATTEMPTS_REMEMBERED = 8;

/** What the ledger has queued of each recent attempt's usage, for one run. */
export class UsageMemory {
  private readonly attempts = new Map<number, AttemptUsageRow>();

  /** The run's usage row when a figure grew beyond what was queued (merged, so it never lowers anything), remembering it. */
  diff(run: Json, ref: RunRef, seenAt: string, install: BudgetSpec | undefined): AttemptUsageRow | undefined {
    const r = report(run);
    if (!r) return undefined;
    const known = this.attempts.get(r.attempt);
    if (known && !grew(known, r)) return undefined;
    if (!this.remember(row(r, run, ref, seenAt, install))) return undefined;
    return { ...(this.attempts.get(r.attempt) as AttemptUsageRow), seen_at: seenAt };
  }

  /** Records a row as queued; false when it is of an attempt older than every one remembered and the memory is full. */
  remember(next: AttemptUsageRow): boolean {
    const known = this.attempts.get(next.attempt);
    if (known) {
      this.attempts.set(next.attempt, mergeUsage(known, next));
      return true;
    }
    if (this.attempts.size >= MAX_ATTEMPTS_REMEMBERED) {
      const oldest = Math.min(...this.attempts.keys());
      if (next.attempt < oldest) return false;
      this.attempts.delete(oldest);
    }
    this.attempts.set(next.attempt, next);
    return true;
  }
}
