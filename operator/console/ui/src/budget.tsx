// A run's budget as the pages show it: a bar per limit, coloured as the operator's Events go
// (BudgetWarning from warnAt of a limit, BudgetExhausted once it is reached), and the spending
// behind it. The server works the figures out (BudgetSummary): the page only draws them.
import { formatElapsed } from "../../../api/duration.ts";
import type { BudgetFigures, BudgetLimitName, BudgetLineSummary, BudgetSummary } from "./api.ts";
import { Field } from "./common.tsx";
import { useElapsed } from "./tick.tsx";

/** The limit as the operator's messages name it: "token budget exhausted: ...". */
const BUDGET_NAMES: Record<BudgetLimitName, string> = {
  tokens: "token budget",
  inputTokens: "input token budget",
  outputTokens: "output token budget",
  cost: "cost budget",
  toolCalls: "tool call budget",
  wallClock: "wall-clock budget",
};

const LIMIT_LABELS: Record<BudgetLimitName, string> = {
  tokens: "Tokens",
  inputTokens: "Input tokens",
  outputTokens: "Output tokens",
  cost: "Cost",
  toolCalls: "Tool calls",
  wallClock: "Wall clock",
};

type Level = "ok" | "warn" | "bad";
const levelOf = (line: BudgetLineSummary): Level => (line.exhausted ? "bad" : line.warned ? "warn" : "ok");
const LEVEL_WORDS: Record<Level, string> = { ok: "", warn: ", past the warning threshold", bad: ", exhausted" };

/** Whole percent spent, never rounded up to a limit not yet reached; the bar stops at 100. */
const percentOf = (line: BudgetLineSummary): number => Math.max(0, Math.floor(line.fraction * 100));

/** One limit as a bar; its colour only helps scanning, the text and the accessible value say it all. */
function Meter({ line }: { line: BudgetLineSummary }) {
  const level = levelOf(line);
  const percent = Math.min(100, percentOf(line));
  return (
    <span
      class={`budget-meter ${level}`}
      role="meter"
      aria-label={BUDGET_NAMES[line.limit]}
      aria-valuemin={0}
      aria-valuemax={100}
      aria-valuenow={percent}
      aria-valuetext={`${line.text}${LEVEL_WORDS[level]}`}
      title={line.text}
      data-level={level}
    >
      <span class="budget-fill" style={{ width: `${percent}%` }} />
    </span>
  );
}

const tokens = (f: BudgetFigures) => f.inputTokens + f.outputTokens;

/**
 * The list's and the queue's cell: the limit nearest to being reached, as "82000/100000 tokens";
 * a run without limits shows the tokens it spent, as the plugin's BUDGET column does.
 */
export function BudgetCell({ budget }: { budget: BudgetSummary | undefined }) {
  if (!budget) return <>-</>;
  const line = budget.nearest;
  if (!line) return <span class="budget-cell-text meta">{tokens(budget.total)} tokens</span>;
  return (
    <span class="budget-cell">
      <span class="budget-cell-text">{line.cell}</span>
      <Meter line={line} />
    </span>
  );
}

/** "1200 input + 340 output tokens, 0.42 USD, 7 tool calls"; a cost of 0 in no known currency says nothing. */
function figures(f: BudgetFigures, currency: string | undefined): string {
  const cost = currency ? `${f.cost} ${currency}, ` : f.cost !== "0" ? `cost ${f.cost}, ` : "";
  return `${f.inputTokens} input + ${f.outputTokens} output tokens, ${cost}${f.toolCalls} tool calls`;
}

/**
 * The wall-clock line moved on to `elapsedMs`: between versions of the run nothing else changes,
 * but its clock runs. Whether it is exhausted stays the operator's word.
 */
function movedOn(line: BudgetLineSummary, elapsedMs: number | undefined, warnAt: number): BudgetLineSummary {
  if (line.limit !== "wallClock" || line.allowedMs === undefined || elapsedMs === undefined) return line;
  const fraction = Math.max(line.fraction, line.allowedMs <= 0 ? 1 : Math.floor((elapsedMs * 10_000) / line.allowedMs) / 10_000);
  const used = formatElapsed(elapsedMs);
  // The text starts with the time used ("3m12s of 1h since the run's first start").
  return { ...line, used, fraction, warned: line.warned || fraction >= warnAt, text: line.text.replace(/^\S+/, used) };
}

/** The run page's section: each limit with its bar, then where the spending comes from. */
export function BudgetSection({ budget, attempt }: { budget: BudgetSummary; attempt: number | undefined }) {
  const { ended, currency } = budget;
  const elapsedMs = useElapsed(budget.elapsedMs, budget.clockRunning === true);
  const limits = budget.limits.map((line) => movedOn(line, elapsedMs, budget.warnAt));
  return (
    <section aria-labelledby="sec-budget" class="budget">
      <h2 id="sec-budget">Budget</h2>
      {limits.length === 0 ? (
        <p class="meta">No limit applies to this run (spec.budget and the install's defaults set none); what it has spent:</p>
      ) : (
        <ul class="budget-lines">
          {limits.map((line) => {
            const level = levelOf(line);
            return (
              <li key={line.limit} data-limit={line.limit} class={level}>
                <span class="budget-label">{LIMIT_LABELS[line.limit]}</span>
                <Meter line={line} />
                <span>
                  {line.text} ({percentOf(line)}%)
                  {level !== "ok" && <span class={`budget-flag ${level}`}>{level === "bad" ? "Exhausted" : "Warning"}</span>}
                </span>
              </li>
            );
          })}
        </ul>
      )}
      <dl class="fields">
        {limits.length > 0 && <Field label="Warn at">{`${Number((budget.warnAt * 100).toFixed(2))}% of each limit`}</Field>}
        <Field label="Spent" always>
          {figures(budget.total, currency)}
        </Field>
        <Field label="Ended attempts">{ended.throughAttempt > 0 ? `${figures(ended, currency)}, through attempt ${ended.throughAttempt}` : undefined}</Field>
        <Field label={attempt ? `Current attempt (${attempt})` : "Current attempt"} always>
          {figures(budget.current, currency)}
        </Field>
        <Field label="Currency">{currency}</Field>
        <Field label="Elapsed">{elapsedMs !== undefined ? `${formatElapsed(elapsedMs)} since the first start` : budget.elapsed ? `${budget.elapsed} since the first start` : undefined}</Field>
      </dl>
    </section>
  );
}
