// Run budgets, the arithmetic: what a run has spent, what a limit allows, and the fold that moves
// an ended attempt's usage into status.spent. Pure, and a fact of the API: the core's policy
// (watchdog/policy/budget.ts) decides with it; the CLI, the metrics and the ledger show and store
// the same figures with it.
//
// A run's spending is status.spent (the ended attempts, folded once each) plus the usage of the
// one attempt not folded yet, as its sandbox last reported it in status.heartbeat.usage. An
// attempt is folded when it ends: the decision that ends it (a kill, a crash, a completion, a
// release, a suspension, a breach) moves status.attempt on or leaves the run at rest, and the
// same write records the fold, with `throughAttempt` saying which attempts it holds. So a restarted
// operator counts the same, deciding twice adds nothing twice, a late write of an attempt already
// folded counts for nothing, and a heartbeat alone never costs the operator a write.
import type { BudgetLimit, Heartbeat, Spent, Usage } from "./agentrun.ts";
import { DECIMAL_SCALE, decimalOfNumber, formatDecimal, parseDecimal } from "./decimal.ts";
import type { BudgetSettings } from "./defaults.ts";
import { formatDuration } from "./duration.ts";

/** Spending, as the core adds it up. Cost is scaled by 10^18 (decimal.ts). */
export interface Figures {
  inputTokens: number;
  outputTokens: number;
  cost: bigint;
  toolCalls: number;
}

export const NOTHING: Figures = { inputTokens: 0, outputTokens: 0, cost: 0n, toolCalls: 0 };

/** Sums stay within what the CRD admits (2^53 - 1), whatever a sandbox reports: rule 12. */
const capped = (n: number) => Math.min(n, Number.MAX_SAFE_INTEGER);

export function add(a: Figures, b: Figures): Figures {
  return {
    inputTokens: capped(a.inputTokens + b.inputTokens),
    outputTokens: capped(a.outputTokens + b.outputTokens),
    cost: a.cost + b.cost,
    toolCalls: capped(a.toolCalls + b.toolCalls),
  };
}

/**
 * The cost of an attempt's usage: what the sandbox reported, else its tokens priced by the model
 * it names (per million tokens, exactly), else nothing known (0).
 */
export function costOf(usage: Usage, prices: BudgetSettings["prices"]): bigint {
  if (usage.cost !== undefined) return parseDecimal(usage.cost) ?? 0n;
  const price = usage.model === undefined ? undefined : prices.find((p) => p.model === usage.model);
  if (!price) return 0n;
  const perToken = (perMillion: string) => (parseDecimal(perMillion) ?? 0n) / 1_000_000n;
  return BigInt(usage.inputTokens ?? 0) * perToken(price.inputPerMillion) + BigInt(usage.outputTokens ?? 0) * perToken(price.outputPerMillion);
}

export function usageFigures(usage: Usage | undefined, prices: BudgetSettings["prices"]): Figures {
  if (!usage) return NOTHING;
  return { inputTokens: usage.inputTokens ?? 0, outputTokens: usage.outputTokens ?? 0, cost: costOf(usage, prices), toolCalls: usage.toolCalls ?? 0 };
}

export function spentFigures(spent: Spent | undefined): Figures {
  if (!spent) return NOTHING;
  return { inputTokens: spent.inputTokens, outputTokens: spent.outputTokens, cost: parseDecimal(spent.cost) ?? 0n, toolCalls: spent.toolCalls };
}

/**
 * The usage not folded into `spent` yet: the heartbeat's, when it belongs to an attempt after the
 * last one folded and not after the run's current attempt. Any other attempt's report (a stale
 * sandbox's late write, or one from the future) counts for nothing.
 */
export function unfoldedUsage(heartbeat: Heartbeat | undefined, spent: Spent | undefined, attempt: number): Usage | undefined {
  if (!heartbeat?.usage) return undefined;
  const through = spent?.throughAttempt ?? 0;
  return heartbeat.attempt > through && heartbeat.attempt <= attempt ? heartbeat.usage : undefined;
}

/** What the run has spent: the ended attempts plus the one not folded yet. */
export function spending(spent: Spent | undefined, heartbeat: Heartbeat | undefined, attempt: number, prices: BudgetSettings["prices"]): Figures {
  return add(spentFigures(spent), usageFigures(unfoldedUsage(heartbeat, spent, attempt), prices));
}

/**
 * status.spent with every attempt up to `through` folded in: unchanged when they are already
 * (idempotent), so that only a decision that ends an attempt writes it.
 */
export function fold(f: { spent: Spent | undefined; heartbeat: Heartbeat | undefined; through: number; now: number; startTime: number | undefined; prices: BudgetSettings["prices"] }): Spent | undefined {
  if (f.through <= (f.spent?.throughAttempt ?? 0)) return f.spent;
  const total = add(spentFigures(f.spent), usageFigures(unfoldedUsage(f.heartbeat, f.spent, f.through), f.prices));
  const folded: Spent = {
    inputTokens: total.inputTokens,
    outputTokens: total.outputTokens,
    cost: formatDecimal(total.cost),
    toolCalls: total.toolCalls,
    throughAttempt: f.through,
  };
  // Whole seconds: the informational figure of when the fold happened, not a deadline.
  if (f.startTime !== undefined) {
    const seconds = Math.floor(Math.max(0, f.now - f.startTime) / 1000);
    folded.wallClock = seconds === 0 ? "0s" : formatDuration(seconds * 1000);
  }
  return folded;
}

// ---------------------------------------------------------------------------------------------
// limits

/** One limit of a budget, as spending is measured against it. Values are scaled integers, so that comparisons are exact. */
export interface Measure {
  limit: BudgetLimit;
  /** What the limit allows, and what is spent of it, in the same (scaled) unit. */
  allowed: bigint;
  used: bigint;
  /** The limit as the spec states it (status.budgetWarnings records it). */
  stated: string;
  /** "100000 of 100000 tokens spent" */
  describe: (used: bigint) => string;
}

const WHAT: Record<BudgetLimit, string> = {
  tokens: "token",
  inputTokens: "input token",
  outputTokens: "output token",
  cost: "cost",
  toolCalls: "tool call",
  wallClock: "wall-clock",
};

/** "token budget", "cost budget", ... */
export const budgetName = (limit: BudgetLimit) => `${WHAT[limit]} budget`;

/**
 * Each limit the budget sets, with what is spent of it. `elapsedMs` is the time since the run's
 * first start on the server's clock (undefined before it started).
 */
export function measures(budget: BudgetSettings, spent: Figures, elapsedMs: number | undefined): Measure[] {
  const out: Measure[] = [];
  const count = (limit: BudgetLimit, allowed: number | undefined, used: number, unit: string) => {
    if (allowed === undefined) return;
    out.push({ limit, allowed: BigInt(allowed), used: BigInt(used), stated: String(allowed), describe: (u) => `${u} of ${allowed} ${unit}` });
  };
  count("tokens", budget.tokens, capped(spent.inputTokens + spent.outputTokens), "tokens spent");
  count("inputTokens", budget.inputTokens, spent.inputTokens, "input tokens spent");
  count("outputTokens", budget.outputTokens, spent.outputTokens, "output tokens spent");
  if (budget.cost) {
    const { amount, currency } = budget.cost;
    out.push({ limit: "cost", allowed: parseDecimal(amount) ?? 0n, used: spent.cost, stated: `${amount} ${currency}`, describe: (u) => `${formatDecimal(u)} of ${amount} ${currency} spent` });
  }
  count("toolCalls", budget.toolCalls, spent.toolCalls, "tool calls made");
  if (budget.wallClockMs !== undefined && budget.wallClock !== undefined && elapsedMs !== undefined) {
    const stated = budget.wallClock;
    out.push({
      limit: "wallClock",
      allowed: BigInt(Math.ceil(budget.wallClockMs)),
      used: BigInt(Math.floor(Math.max(0, elapsedMs))),
      stated,
      describe: (u) => `${formatDuration(Number(u))} of ${stated} since the run's first start`,
    });
  }
  return out;
}

/** Spending reaches the limit: the run may spend no more. A limit of 0 is reached before anything is spent. */
export const exhausted = (m: Measure) => m.used >= m.allowed;

/** What warnAt of the limit is, in the limit's unit (rounded up: a warning never comes before its threshold). */
export function warnThreshold(m: Measure, warnAt: number): bigint {
  const product = m.allowed * decimalOfNumber(warnAt);
  return (product + DECIMAL_SCALE - 1n) / DECIMAL_SCALE;
}

/** Spending has reached warnAt of the limit. */
export const warned = (m: Measure, warnAt: number) => m.used >= warnThreshold(m, warnAt);
