// What runs spend, by namespace, as Prometheus counters: tokens, cost and tool calls. Counted at
// each scrape from the cache (status.spent plus the current attempt's heartbeat.usage, the same
// sum the watchdog enforces), as the growth of each run's spending since the last scrape, so that
// heartbeats cost the operator nothing and a counter never goes down when a run is deleted.
//
// Choices, and why:
// - A run already there at the operator's first scrape is a baseline: what it spent before is not
//   counted again by a restarted operator (rate() would take it for new spending). A run first
//   seen later counts from zero. What a run spends while no operator runs is counted by no replica;
//   the dashboard's rates are honest, its lifetime totals a lower bound.
// - Namespaces are labels with bounded cardinality: the first `maxNamespaces` namespaces seen get
//   their own series, any later one is counted under namespace="_other" (a counter cannot give a
//   label back). Currencies likewise, at most MAX_CURRENCIES.
import { Counter, type Registry } from "prom-client";
import { formatDecimal } from "../api/decimal.ts";
import { resolveBudget } from "../api/defaults.ts";
import type { AgentRunStatus, BudgetSpec } from "../api/agentrun.ts";
import type { Json } from "../kube/client.ts";
import { NOTHING, spending, type Figures } from "../api/spending.ts";

export const OTHER = "_other";
const MAX_CURRENCIES = 8;

export interface SpendingOptions {
  /** How many namespaces get series of their own. */
  maxNamespaces: number;
  /** The install's budget defaults: their prices price what a run does not. */
  installBudget?: BudgetSpec | undefined;
}

export class SpendingMetrics {
  readonly tokens: Counter<"namespace" | "type">;
  readonly cost: Counter<"namespace" | "currency">;
  readonly toolCalls: Counter<"namespace">;
  private readonly seen = new Map<string, Figures>();
  private readonly namespaces = new Set<string>();
  private readonly currencies = new Set<string>();
  private first = true;
  private readonly options: SpendingOptions;

  constructor(registry: Registry, options: SpendingOptions) {
    this.options = options;
    this.tokens = new Counter({
      name: "watchdog_tokens_total",
      help: `Tokens spent by AgentRuns (input or output), by namespace (at most ${options.maxNamespaces}; later ones as ${OTHER}), as the operator saw them grow`,
      labelNames: ["namespace", "type"] as const,
      registers: [registry],
    });
    this.cost = new Counter({
      name: "watchdog_cost_total",
      help: `What AgentRuns cost (reported, or priced from spec.budget.prices), in the currency of their cost limit, by namespace`,
      labelNames: ["namespace", "currency"] as const,
      registers: [registry],
    });
    this.toolCalls = new Counter({
      name: "watchdog_tool_calls_total",
      help: "Tool calls AgentRuns reported, by namespace",
      labelNames: ["namespace"] as const,
      registers: [registry],
    });
  }

  /** The namespace's label: its own while there is room, else OTHER. */
  private namespaceLabel(namespace: string): string {
    if (this.namespaces.has(namespace)) return namespace;
    if (this.namespaces.size >= this.options.maxNamespaces) return OTHER;
    this.namespaces.add(namespace);
    return namespace;
  }

  private currencyLabel(currency: string | undefined): string {
    const c = currency ?? "";
    if (this.currencies.has(c)) return c;
    if (this.currencies.size >= MAX_CURRENCIES) return OTHER;
    this.currencies.add(c);
    return c;
  }

  /** Adds each run's growth since the last look; `runs` is every run in the cache. */
  observe(runs: readonly Json[]): void {
    const present = new Set<string>();
    for (const run of runs) {
      const meta = (run.metadata ?? {}) as { uid?: string; namespace?: string };
      if (!meta.uid || !meta.namespace) continue;
      present.add(meta.uid);
      let now: { figures: Figures; currency: string | undefined };
      try {
        now = this.figuresOf(run);
      } catch {
        continue; // a run the core cannot read is reported by its own condition
      }
      const before = this.seen.get(meta.uid) ?? (this.first ? now.figures : NOTHING);
      // The highest seen of each figure: a dip and its recovery count nothing twice.
      this.seen.set(meta.uid, highest(before, now.figures));
      this.count(meta.namespace, now.currency, growth(before, now.figures));
    }
    for (const uid of this.seen.keys()) if (!present.has(uid)) this.seen.delete(uid);
    this.first = false;
  }

  private figuresOf(run: Json): { figures: Figures; currency: string | undefined } {
    const spec = (run.spec ?? {}) as { budget?: BudgetSpec };
    const status = (run.status ?? {}) as Pick<AgentRunStatus, "spent" | "heartbeat" | "attempt">;
    const budget = resolveBudget(spec.budget, this.options.installBudget);
    const figures = spending(status.spent, status.heartbeat, status.attempt ?? 0, budget.prices);
    return { figures, currency: budget.cost?.currency };
  }

  private count(namespace: string, currency: string | undefined, f: Figures): void {
    if (f.inputTokens === 0 && f.outputTokens === 0 && f.cost === 0n && f.toolCalls === 0) return;
    const ns = this.namespaceLabel(namespace);
    if (f.inputTokens > 0) this.tokens.inc({ namespace: ns, type: "input" }, f.inputTokens);
    if (f.outputTokens > 0) this.tokens.inc({ namespace: ns, type: "output" }, f.outputTokens);
    if (f.cost > 0n) this.cost.inc({ namespace: ns, currency: this.currencyLabel(currency) }, Number(formatDecimal(f.cost)));
    if (f.toolCalls > 0) this.toolCalls.inc({ namespace: ns }, f.toolCalls);
  }
}

function highest(a: Figures, b: Figures): Figures {
  return {
    inputTokens: Math.max(a.inputTokens, b.inputTokens),
    outputTokens: Math.max(a.outputTokens, b.outputTokens),
    cost: a.cost > b.cost ? a.cost : b.cost,
    toolCalls: Math.max(a.toolCalls, b.toolCalls),
  };
}

/** What was added since `before`; a figure that went down (a new attempt's report before the fold is seen) adds nothing. */
function growth(before: Figures, after: Figures): Figures {
  const up = (a: number, b: number) => Math.max(0, b - a);
  return {
    inputTokens: up(before.inputTokens, after.inputTokens),
    outputTokens: up(before.outputTokens, after.outputTokens),
    cost: after.cost > before.cost ? after.cost - before.cost : 0n,
    toolCalls: up(before.toolCalls, after.toolCalls),
  };
}
