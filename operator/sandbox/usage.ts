// Usage and run budgets on the sandbox's side. The sandbox reports what its attempt has spent in
// every heartbeat (status.heartbeat.usage: input and output tokens, cost, tool calls, model); the
// operator adds ended attempts into status.spent and stops the run for a person (BudgetExhausted)
// at the first report at or over a limit of spec.budget. What the SDK adds here is cooperative:
// it refuses to start more work once the run's spending, as it sees it, has reached a limit, so
// that an agent stops before the operator has to kill it. The operator never depends on it.
//
// Rules the API server enforces, and so the meter keeps:
// - within an attempt no figure goes down (a CEL rule refuses a lowering write): the meter only
//   adds non-negative amounts, and caps at the largest value the CRD admits, which is monotonic;
// - once an attempt has reported a cost, every later report carries one.
//
// Cost is money, so it is never a float: decimal strings, added as integers scaled by 10^18
// (BigInt, operator/api/decimal.ts), exactly as the operator adds them.
//
// Which cost the operator counts: the reported `cost` when there is one; otherwise the tokens
// priced by spec.budget.prices for the reported `model`. The meter therefore leaves `cost` out
// for as long as every token it recorded came without a cost and with one model (or none), and
// the operator prices them (install default prices included). From the first report that
// carries a cost, or names a second model, it reports a cost for the whole attempt: the costs
// given, plus the tokens recorded without one priced by the run's own spec.budget.prices at the
// time they were recorded (tokens of a model the run does not price count nothing towards it).
import type { ModelPrice, Usage } from "../api/agentrun.ts";
import { DECIMAL_SCALE, formatDecimal } from "../api/decimal.ts";
import type { BudgetBreach } from "./errors.ts";

/** The limits the SDK checks: all but the wall clock, which the operator measures on the API server's clock. */
export type SpendingLimit = BudgetBreach["limit"];
export const SPENDING_LIMITS: readonly SpendingLimit[] = ["tokens", "inputTokens", "outputTokens", "cost", "toolCalls"];

/** One model call's usage, as the agent (or an adapter) reports it to recordUsage(). */
export interface UsageReport {
  /** Input (prompt) tokens: a non-negative integer. */
  inputTokens?: number;
  /** Output (completion) tokens: a non-negative integer. */
  outputTokens?: number;
  /**
   * What this call cost, in the budget's currency (spec.budget.cost.currency): a decimal string
   * such as "0.0123", or a number, taken as the decimal it prints as (0.1 is 0.1). Left out, the
   * operator prices the tokens by `model` (spec.budget.prices).
   */
  cost?: string | number;
  /** The model used, as spec.budget.prices names it. */
  model?: string;
}

/** The run's spending as the SDK sees it: status.spent plus this attempt's usage. */
export interface Spending {
  inputTokens: number;
  outputTokens: number;
  /** inputTokens + outputTokens. */
  tokens: number;
  /** A decimal string in the budget's currency ("0" when nothing is known to have cost anything). */
  cost: string;
  toolCalls: number;
}

// ---------------------------------------------------------------------------------------------
// numbers

/** The largest count the CRD admits. */
const MAX_COUNT = Number.MAX_SAFE_INTEGER;
/** The largest cost the CRD admits (18 digits either side of the point), scaled. */
export const MAX_COST = 10n ** 36n - 1n;
const MAX_MODEL_CHARS = 256;

const cappedCount = (n: number) => Math.min(n, MAX_COUNT);
const cappedCost = (c: bigint) => (c > MAX_COST ? MAX_COST : c);

/** A token count of a report: a non-negative integer (fractions and huge values are refused, not guessed at). */
function tokenCount(value: unknown, field: string): number {
  if (value === undefined) return 0;
  if (typeof value !== "number" || !Number.isInteger(value) || value < 0) throw new RangeError(`recordUsage: ${field} must be a non-negative integer, not ${String(value)}`);
  return cappedCount(value);
}

/**
 * A cost as a scaled integer (10^18). A string must be a plain decimal ("0.0123", "12"); a number
 * is taken as the decimal it prints as. More than 18 fraction digits round up: a budget is never
 * undercounted. Negative, non-finite and malformed values throw.
 */
export function parseCost(value: string | number): bigint {
  let text: string;
  if (typeof value === "number") {
    if (!Number.isFinite(value) || value < 0) throw new RangeError(`recordUsage: cost must be a non-negative amount, not ${value}`);
    if (value >= 1e18) return MAX_COST;
    text = String(value);
    if (/e/i.test(text)) text = value.toFixed(18);
  } else if (typeof value === "string") {
    text = value.trim();
  } else {
    throw new TypeError(`recordUsage: cost must be a decimal string such as "0.0123" or a number, not ${typeof value}`);
  }
  const match = /^([0-9]+)(?:[.]([0-9]*))?$/.exec(text) ?? /^()[.]([0-9]+)$/.exec(text);
  if (!match) throw new RangeError(`recordUsage: cost must be a non-negative decimal such as "0.0123", not ${JSON.stringify(value)}`);
  const whole = BigInt(match[1] || "0");
  const fraction = match[2] ?? "";
  const kept = BigInt(fraction.slice(0, 18).padEnd(18, "0"));
  const roundUp = /[1-9]/.test(fraction.slice(18)) ? 1n : 0n;
  return cappedCost(whole * DECIMAL_SCALE + kept + roundUp);
}

/** A decimal string of a spec or status (a price, a limit, spent.cost) as a scaled integer; undefined when it is not one. */
function decimalOf(value: unknown): bigint | undefined {
  if (typeof value !== "string") return undefined;
  const match = /^([0-9]+)(?:[.]([0-9]{1,18}))?$/.exec(value);
  if (!match) return undefined;
  return BigInt(match[1] as string) * DECIMAL_SCALE + BigInt((match[2] ?? "").padEnd(18, "0"));
}

const countOf = (value: unknown): number | undefined => (typeof value === "number" && Number.isSafeInteger(value) && value >= 0 ? value : undefined);

/** A model name as the CRD admits it, or undefined. */
export function modelName(value: unknown): string | undefined {
  return typeof value === "string" && value.length > 0 && value.length <= MAX_MODEL_CHARS ? value : undefined;
}

/** The cost of tokens at a model's price (per million tokens, exactly, as the operator prices them); undefined when the model is not priced. */
export function priceTokens(prices: readonly ModelPrice[], model: string | undefined, inputTokens: number, outputTokens: number): bigint | undefined {
  if (model === undefined) return undefined;
  const price = prices.find((p) => p.model === model);
  if (!price) return undefined;
  const perToken = (perMillion: string) => (decimalOf(perMillion) ?? 0n) / 1_000_000n;
  return BigInt(inputTokens) * perToken(price.inputPerMillion) + BigInt(outputTokens) * perToken(price.outputPerMillion);
}

// ---------------------------------------------------------------------------------------------
// the attempt's usage

/** What the meter holds, in the units it adds them in. */
export interface UsageFigures {
  inputTokens: number;
  outputTokens: number;
  cost: bigint;
  toolCalls: number;
}

/**
 * The attempt's running totals. Every change only adds, so every report it produces is at least
 * the one before it (what the API server requires within an attempt).
 */
export class UsageMeter {
  private inputTokens = 0;
  private outputTokens = 0;
  private toolCalls = 0;
  /** Costs given with reports. */
  private given = 0n;
  /** Tokens reported without a cost, priced by the run's own prices when they were recorded. */
  private priced = 0n;
  /** Whether the report carries a cost (from the first report that gave one, or named a second model, on). */
  private costed = false;
  /** The model reported: the first one named. */
  private model: string | undefined;
  /** Models whose tokens were recorded without a cost and without a price. */
  private readonly unpriced = new Set<string>();
  private readonly told = new Set<string>();

  /**
   * Adds one call's usage. `prices` are the run's spec.budget.prices now. Returns the names of
   * models newly found without a price while a cost is reported (their tokens count nothing
   * towards it), so that the caller can say so once.
   */
  record(report: UsageReport, prices: readonly ModelPrice[]): string[] {
    if (typeof report !== "object" || report === null) throw new TypeError("recordUsage: expected { inputTokens, outputTokens, cost?, model? }");
    const input = tokenCount(report.inputTokens, "inputTokens");
    const output = tokenCount(report.outputTokens, "outputTokens");
    const cost = report.cost === undefined || report.cost === null ? undefined : parseCost(report.cost);
    if (report.model !== undefined && modelName(report.model) === undefined) throw new RangeError(`recordUsage: model must be a name of 1 to ${MAX_MODEL_CHARS} characters`);
    const model = report.model;

    this.inputTokens = cappedCount(this.inputTokens + input);
    this.outputTokens = cappedCount(this.outputTokens + output);
    if (cost !== undefined) {
      this.given = cappedCost(this.given + cost);
      this.costed = true;
    } else if (input + output > 0) {
      // Tokens of a second model cannot be priced by one model name: from here on the sandbox
      // reports the cost itself.
      if (model !== undefined && this.model !== undefined && model !== this.model) this.costed = true;
      const price = priceTokens(prices, model ?? this.model, input, output);
      if (price !== undefined) this.priced = cappedCost(this.priced + price);
      else if (model ?? this.model) this.unpriced.add((model ?? this.model) as string);
    }
    this.model ??= model;
    if (!this.costed) return [];
    const fresh = [...this.unpriced].filter((m) => !this.told.has(m));
    for (const m of fresh) this.told.add(m);
    return fresh;
  }

  /**
   * Starts from what this same attempt already reported (status.heartbeat.usage of its own
   * attempt, found at start): a report may not go below it. Read leniently; garbage counts as 0.
   */
  resume(usage: unknown): void {
    const u = obj(usage);
    if (!u) return;
    this.inputTokens = Math.max(this.inputTokens, countOf(u.inputTokens) ?? 0);
    this.outputTokens = Math.max(this.outputTokens, countOf(u.outputTokens) ?? 0);
    this.toolCalls = Math.max(this.toolCalls, countOf(u.toolCalls) ?? 0);
    if (u.cost !== undefined) {
      const cost = decimalOf(u.cost);
      this.costed = true;
      if (cost !== undefined && cost > this.given) this.given = cappedCost(cost);
    }
    this.model ??= modelName(u.model);
  }

  /** One more tool call made by this attempt. */
  toolCall(): void {
    this.toolCalls = cappedCount(this.toolCalls + 1);
  }

  /** What status.heartbeat.usage says: zeros before anything is spent. */
  report(): Usage {
    const usage: Usage = { inputTokens: this.inputTokens, outputTokens: this.outputTokens };
    if (this.costed) usage.cost = formatDecimal(cappedCost(this.given + this.priced));
    usage.toolCalls = this.toolCalls;
    if (this.model !== undefined) usage.model = this.model;
    return usage;
  }

  /** The attempt's spending with its cost as the operator will count it, given the run's prices now. */
  figures(prices: readonly ModelPrice[]): UsageFigures {
    const cost = this.costed ? cappedCost(this.given + this.priced) : (priceTokens(prices, this.model, this.inputTokens, this.outputTokens) ?? 0n);
    return { inputTokens: this.inputTokens, outputTokens: this.outputTokens, cost, toolCalls: this.toolCalls };
  }
}

// ---------------------------------------------------------------------------------------------
// the run's budget, as the sandbox reads it

interface Limits {
  tokens?: number;
  inputTokens?: number;
  outputTokens?: number;
  cost?: { amount: bigint; stated: string };
  toolCalls?: number;
}

type Obj = Record<string, unknown>;
const obj = (value: unknown): Obj | undefined => (typeof value === "object" && value !== null && !Array.isArray(value) ? (value as Obj) : undefined);

/**
 * The budget of a run and what its ended attempts spent, read leniently from the run as the SDK
 * finds it and watches it: the effective limits the operator publishes in status.budget (they
 * include the install's defaults), else the run's own spec.budget; the prices of spec.budget; and
 * status.spent. Anything unreadable counts as absent: the operator, not the SDK, enforces.
 */
export class BudgetView {
  private limits: Limits = {};
  private prices: ModelPrice[] = [];
  private spent: UsageFigures = { inputTokens: 0, outputTokens: 0, cost: 0n, toolCalls: 0 };
  /** The last attempt status.spent includes. */
  private through = 0;

  private readonly attempt: number;

  constructor(attempt: number) {
    this.attempt = attempt;
  }

  /** The run's spec.budget.prices. */
  get modelPrices(): readonly ModelPrice[] {
    return this.prices;
  }

  /** Whether any limit the SDK checks applies. */
  get limited(): boolean {
    return SPENDING_LIMITS.some((l) => this.limits[l] !== undefined);
  }

  observe(run: unknown): void {
    const spec = obj(obj(run)?.spec);
    const status = obj(obj(run)?.status);
    const specBudget = obj(spec?.budget);
    const source = obj(status?.budget) ?? specBudget;
    const limits: Limits = {};
    for (const key of ["tokens", "inputTokens", "outputTokens", "toolCalls"] as const) {
      const value = countOf(source?.[key]);
      if (value !== undefined) limits[key] = value;
    }
    const cost = obj(source?.cost);
    const amount = decimalOf(cost?.amount);
    if (amount !== undefined) limits.cost = { amount, stated: `${cost?.amount as string}${typeof cost?.currency === "string" ? ` ${cost.currency}` : ""}` };
    this.limits = limits;

    this.prices = (Array.isArray(specBudget?.prices) ? specBudget.prices : []).flatMap((p: unknown) => {
      const price = obj(p);
      return price && typeof price.model === "string" && decimalOf(price.inputPerMillion) !== undefined && decimalOf(price.outputPerMillion) !== undefined
        ? [{ model: price.model, inputPerMillion: price.inputPerMillion as string, outputPerMillion: price.outputPerMillion as string }]
        : [];
    });

    const spent = obj(status?.spent);
    this.spent = {
      inputTokens: countOf(spent?.inputTokens) ?? 0,
      outputTokens: countOf(spent?.outputTokens) ?? 0,
      cost: decimalOf(spent?.cost) ?? 0n,
      toolCalls: countOf(spent?.toolCalls) ?? 0,
    };
    this.through = countOf(spent?.throughAttempt) ?? 0;
  }

  /** The run's spending: status.spent plus this attempt's usage, unless status.spent already holds this attempt. */
  spending(own: UsageFigures): UsageFigures {
    if (this.through >= this.attempt) return { ...this.spent };
    return {
      inputTokens: cappedCount(this.spent.inputTokens + own.inputTokens),
      outputTokens: cappedCount(this.spent.outputTokens + own.outputTokens),
      cost: this.spent.cost + own.cost,
      toolCalls: cappedCount(this.spent.toolCalls + own.toolCalls),
    };
  }

  /** The limits the spending has reached, in the order the operator names them. */
  breaches(spending: UsageFigures): BudgetBreach[] {
    const out: BudgetBreach[] = [];
    const { limits } = this;
    const count = (limit: SpendingLimit, allowed: number | undefined, used: number, what: string, unit: string) => {
      if (allowed !== undefined && used >= allowed) out.push({ limit, used: String(used), allowed: String(allowed), message: `${what} budget exhausted: ${used} of ${allowed} ${unit}` });
    };
    count("tokens", limits.tokens, cappedCount(spending.inputTokens + spending.outputTokens), "token", "tokens spent");
    count("inputTokens", limits.inputTokens, spending.inputTokens, "input token", "input tokens spent");
    count("outputTokens", limits.outputTokens, spending.outputTokens, "output token", "output tokens spent");
    if (limits.cost && spending.cost >= limits.cost.amount) {
      const used = formatDecimal(spending.cost);
      out.push({ limit: "cost", used, allowed: formatDecimal(limits.cost.amount), message: `cost budget exhausted: ${used} of ${limits.cost.stated} spent` });
    }
    count("toolCalls", limits.toolCalls, spending.toolCalls, "tool call", "tool calls made");
    return out;
  }
}

/** Spending as the public API shows it. */
export function spendingOf(f: UsageFigures): Spending {
  return { inputTokens: f.inputTokens, outputTokens: f.outputTokens, tokens: cappedCount(f.inputTokens + f.outputTokens), cost: formatDecimal(f.cost), toolCalls: f.toolCalls };
}
