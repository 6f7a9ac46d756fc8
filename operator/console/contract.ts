// What the console's server sends its pages, shared by both sides (the pages import these types
// only): a run as the list, the queue and the run page's budget section show it.

export interface ApprovalSummary {
  id?: string;
  state: string;
  question?: string;
  requestedAt?: string;
}

export interface RunSummary {
  namespace: string;
  name: string;
  uid: string;
  createdAt: string;
  phase?: string;
  attempt?: number;
  restarts?: number;
  maxRestarts?: number;
  heartbeatTime?: string;
  nudges?: number;
  maxNudges?: number;
  reason?: string;
  message?: string;
  suspended: boolean;
  /** NeedsHumanIntervention, or AwaitingReply with a request pending: a person is needed. */
  needsPerson: boolean;
  approval?: ApprovalSummary;
  /** Absent when the run has no limit and has spent nothing. */
  budget?: BudgetSummary;
}

/** A limit of a run's budget (spec.budget), by its field name. */
export type BudgetLimitName = "tokens" | "inputTokens" | "outputTokens" | "cost" | "toolCalls" | "wallClock";

/** One limit with what is spent of it, as `kubectl agentrun describe` prints it. */
export interface BudgetLineSummary {
  limit: BudgetLimitName;
  /** "82000", "9.10 USD", "3m12s" */
  used: string;
  /** "100000", "12.50 USD", "1h" */
  allowed: string;
  /** used / allowed: 1 or more once the limit is reached. */
  fraction: number;
  exhausted: boolean;
  /** At or over warnAt of the limit: a BudgetWarning has been (or is about to be) sent. */
  warned: boolean;
  /** "82000 of 100000 tokens spent" */
  text: string;
  /** "82000/100000 tokens", the list's BUDGET column */
  cell: string;
  /** For the wall clock: the limit in milliseconds, so the page moves the line on between versions. */
  allowedMs?: number;
}

/** Spending: tokens and calls as counts, cost as a decimal string in the budget's currency. */
export interface BudgetFigures {
  inputTokens: number;
  outputTokens: number;
  cost: string;
  toolCalls: number;
}

/** A run's budget and spending, as the watchdog adds them up (operator/cli/budget.ts). */
export interface BudgetSummary {
  /** Each limit of the effective budget (status.budget); none when no limit applies. */
  limits: BudgetLineSummary[];
  /** The limit nearest to being reached, a reached one first. */
  nearest?: BudgetLineSummary;
  /** The fraction of a limit at which the run is warned (status.budget.warnAt). */
  warnAt: number;
  /** The ended attempts plus the current one. */
  total: BudgetFigures;
  /** status.spent: the attempts already ended, 1 to throughAttempt (0: none yet). */
  ended: BudgetFigures & { throughAttempt: number };
  /** The current attempt's usage not in `ended` yet. */
  current: BudgetFigures;
  currency?: string;
  /** Time since the run's first start ("3m12s"), as of when the server last saw the run. */
  elapsed?: string;
  /** The same in milliseconds. The page adds the time since it received it while `clockRunning`. */
  elapsedMs?: number;
  /** The run has started and not finished, so its elapsed time keeps growing. */
  clockRunning?: boolean;
}
