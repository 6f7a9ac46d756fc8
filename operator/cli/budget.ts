// What a run has spent against its budget, as the plugin and the console show it: the operator's
// own arithmetic (api/spending.ts) over what the run's object says, so that a person sees the
// figures the watchdog decides on. The spending is status.spent (the ended attempts) plus the
// current attempt's status.heartbeat.usage; the limits are status.budget, the effective budget the
// operator resolved (install defaults included). Read defensively: the heartbeat is written by the
// sandbox, and a page must show whatever is there.
import { BudgetSpec, EffectiveBudget, Spent, Usage, type BudgetLimit, type Heartbeat } from "../api/agentrun.ts";
import { formatDecimal } from "../api/decimal.ts";
import { resolveBudget, type BudgetSettings } from "../api/defaults.ts";
import { formatElapsed } from "../api/duration.ts";
import type { Json } from "../kube/client.ts";
import { exhausted, measures, spending, spentFigures, usageFigures, unfoldedUsage, type Figures } from "../api/spending.ts";

/** One limit, with what is spent of it. */
export interface BudgetLine {
  limit: BudgetLimit;
  /** "82000", "9.10 USD", "3m12s" */
  used: string;
  /** "100000", "12.50 USD", "1h" */
  allowed: string;
  /** used / allowed; 1 or more once the limit is reached. */
  fraction: number;
  exhausted: boolean;
  /** "82000 of 100000 tokens spent" */
  text: string;
  /** For the wall clock: the limit in milliseconds, so a page can move the line on by itself. */
  allowedMs?: number;
}

/** Figures as shown: tokens and calls as counts, cost as a decimal string. */
export interface ShownFigures {
  inputTokens: number;
  outputTokens: number;
  cost: string;
  toolCalls: number;
}

export interface BudgetReport {
  /** What the run has spent: the ended attempts plus the current one. */
  total: ShownFigures;
  /** What the ended attempts spent (status.spent), and through which attempt. */
  ended: ShownFigures & { throughAttempt: number };
  /** The current attempt's usage not counted in `ended` yet. */
  current: ShownFigures;
  /** The currency of the cost figures, when the budget names one. */
  currency?: string;
  /** Time since the run's first start. */
  elapsed?: string;
  /** The same in milliseconds, as of `now`. */
  elapsedMs?: number;
  /** Whether that clock still runs (the run has started and not finished). */
  clockRunning?: boolean;
  /** Each limit the effective budget sets, in the order a breach names them. */
  limits: BudgetLine[];
}

/**
 * The limits as the watchdog applies them: status.budget is the budget already resolved over the
 * install's defaults; the run's own prices are what a tool can know of the price table (the
 * install's are not in the object). Undefined limits when status.budget is unreadable.
 */
function settingsOf(effective: EffectiveBudget | undefined, prices: BudgetSettings["prices"]): BudgetSettings {
  try {
    return resolveBudget(effective ? { ...effective, prices } : { prices }, undefined);
  } catch {
    // A wall-clock limit no duration parser reads: the operator would not have written it.
    return resolveBudget({ prices }, undefined);
  }
}

/** `amount` with at least the decimals of `like`: 9.1 beside a 12.50 limit reads 9.10. */
function asPrecise(amount: string, like: string): string {
  const want = like.split(".")[1]?.length ?? 0;
  const [whole, fraction = ""] = amount.split(".");
  return fraction.length >= want ? amount : `${whole}.${fraction.padEnd(want, "0")}`;
}

const shown = (f: Figures): ShownFigures => ({ inputTokens: f.inputTokens, outputTokens: f.outputTokens, cost: formatDecimal(f.cost), toolCalls: f.toolCalls });

/** A value the schema admits, or undefined: the object may hold anything a writer managed to put there. */
function parsed<T>(schema: { safeParse(v: unknown): { success: true; data: T } | { success: false } }, value: unknown): T | undefined {
  const result = schema.safeParse(value);
  return result.success ? result.data : undefined;
}

/** The limit's unit as a column cell shows it after the figures. */
const UNIT: Record<BudgetLimit, string> = {
  tokens: "tokens",
  inputTokens: "input tokens",
  outputTokens: "output tokens",
  cost: "",
  toolCalls: "tool calls",
  wallClock: "",
};

/** `used/allowed unit`, e.g. "82000/100000 tokens", "9.10/12.50 USD", "3m12s/1h". */
export function lineCell(line: BudgetLine): string {
  const unit = UNIT[line.limit];
  if (line.limit === "cost") {
    const [allowed, currency] = line.allowed.split(" ");
    return `${line.used.split(" ")[0]}/${allowed} ${currency ?? ""}`.trimEnd();
  }
  return `${line.used}/${line.allowed}${unit ? ` ${unit}` : ""}`;
}

/** The limit nearest to being reached (a reached one first): what a one-cell summary shows. */
export function nearestLimit(report: BudgetReport): BudgetLine | undefined {
  return report.limits.reduce<BudgetLine | undefined>((best, line) => (best === undefined || line.fraction > best.fraction ? line : best), undefined);
}

/**
 * What the run has spent and how near each limit it is, or undefined when it has neither a limit
 * nor any spending to show.
 */
export function budgetReport(run: Json, now: number): BudgetReport | undefined {
  const spec = (run.spec ?? {}) as Json;
  const status = (run.status ?? {}) as Json;
  const effective = parsed(EffectiveBudget, status.budget);
  const prices = parsed(BudgetSpec, spec.budget)?.prices ?? [];
  const settings = settingsOf(effective, prices);
  const spent = parsed(Spent, status.spent);
  const hb = (status.heartbeat ?? {}) as Json;
  const usage = parsed(Usage, hb.usage);
  const heartbeat = usage && typeof hb.attempt === "number" ? ({ attempt: hb.attempt, usage } as Heartbeat) : undefined;
  const attempt = typeof status.attempt === "number" ? status.attempt : 0;
  const total = spending(spent, heartbeat, attempt, settings.prices);
  const started = typeof status.startTime === "string" ? Date.parse(status.startTime) : NaN;
  // A finished run's clock stopped at its completion; one waiting for a person still counts.
  const ended = typeof status.completionTime === "string" ? Date.parse(status.completionTime) : NaN;
  const elapsedMs = Number.isNaN(started) ? undefined : Math.max(0, (Number.isNaN(ended) ? now : ended) - started);
  const limits = effective
    ? measures(settings, total, elapsedMs).map((m): BudgetLine => {
        const allowed = m.stated;
        const used = m.limit === "cost" ? `${asPrecise(formatDecimal(m.used), settings.cost?.amount ?? "")} ${settings.cost?.currency ?? ""}`.trimEnd() : m.limit === "wallClock" ? formatElapsed(Number(m.used)) : String(m.used);
        const fraction = m.allowed === 0n ? 1 : Number((m.used * 10_000n) / m.allowed) / 10_000;
        const line: BudgetLine = { limit: m.limit, used, allowed, fraction, exhausted: exhausted(m), text: m.describe(m.used) };
        if (m.limit === "wallClock") line.allowedMs = Number(m.allowed);
        return line;
      })
    : [];
  const nothingSpent = total.inputTokens === 0 && total.outputTokens === 0 && total.cost === 0n && total.toolCalls === 0;
  if (limits.length === 0 && nothingSpent) return undefined;
  const report: BudgetReport = {
    total: shown(total),
    ended: { ...shown(spentFigures(spent)), throughAttempt: spent?.throughAttempt ?? 0 },
    current: shown(usageFigures(unfoldedUsage(heartbeat, spent, attempt), settings.prices)),
    limits,
  };
  if (settings.cost) report.currency = settings.cost.currency;
  if (elapsedMs !== undefined) {
    report.elapsed = formatElapsed(elapsedMs);
    report.elapsedMs = elapsedMs;
    report.clockRunning = Number.isNaN(ended);
  }
  return report;
}
