// Errors of the sandbox SDK, and how any error a tool throws becomes the small failure record the
// watchdog reads (message, HTTP status, Retry-After). The watchdog acts on these fields: 429 means
// "rate limited, back off without spending restarts", and a Retry-After sets the wait.
import type { ToolCall } from "../api/agentrun.ts";
import { SANDBOX_EXIT_CODES } from "../api/annotations.ts";
import { parseRetryAfter } from "../api/api-error.ts";

// Retry-After is read as every client of the API server reads it.
export { MAX_RETRY_AFTER_SECONDS, parseRetryAfter } from "../api/api-error.ts";

/** Upper bounds of the ToolCallError fields in the CRD. */
export const MAX_ERROR_MESSAGE = 4096;

/**
 * How a sandbox process ends. Only 0 completes the run; unconfirmedSideEffect stops it for a
 * person; rateLimited requeues it with the rate-limit backoff; every other code is a crash to the
 * watchdog.
 */
export const EXIT_CODES = {
  completed: 0,
  failed: 1,
  /** The sandbox env does not name a run. */
  config: 2,
  /**
   * A non-idempotent call of an earlier attempt has an unknown outcome (rule 10): the watchdog
   * reads this exit as NeedsHumanIntervention (UnconfirmedSideEffect), never as a crash.
   */
  unconfirmedSideEffect: SANDBOX_EXIT_CODES.unconfirmedSideEffect,
  /** A newer attempt took over, or the operator stopped the run. */
  fenced: 4,
  /** The approval was rejected or timed out. */
  approvalDenied: 5,
  /**
   * The agent gave up its attempt on a rate limit: its newest tool call failed with HTTP 429, or
   * it threw a ToolError with that status. The watchdog requeues the run with the rate-limit
   * backoff (or the call's Retry-After) without spending a restart (rule 4).
   */
  rateLimited: SANDBOX_EXIT_CODES.rateLimited,
} as const;

/** What a tool throws to report a failure the watchdog should understand. */
export class ToolError extends Error {
  readonly httpStatus?: number;
  readonly retryAfterSeconds?: number;
  constructor(message: string, options: { httpStatus?: number; retryAfterSeconds?: number; cause?: unknown } = {}) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.name = "ToolError";
    if (options.httpStatus !== undefined) this.httpStatus = options.httpStatus;
    if (options.retryAfterSeconds !== undefined) this.retryAfterSeconds = options.retryAfterSeconds;
  }
}

/**
 * A non-idempotent call was started by an earlier attempt and never confirmed: it may or may not
 * have had its effect, and running it again is not safe. The agent must stop for a person.
 */
export class UnconfirmedSideEffectError extends Error {
  readonly call: ToolCall;
  constructor(call: ToolCall) {
    super(
      `tool ${call.name} (call ${call.id}, idempotency key ${call.idempotencyKey ?? "none"}) was started by attempt ${call.attempt ?? "?"} ` +
        "and its outcome is unknown; it is not idempotent, so it is not run again. A person must check its effect and resume the run.",
    );
    this.name = "UnconfirmedSideEffectError";
    this.call = call;
  }
}

/** This sandbox no longer speaks for the run: a newer attempt took over, or the run stopped. */
export class FencedError extends Error {
  constructor(reason: string) {
    super(`sandbox fenced: ${reason}`);
    this.name = "FencedError";
  }
}

/** The approval the agent waited for was rejected or timed out; the operator fails the run. */
export class ApprovalDeniedError extends Error {
  readonly state: "Rejected" | "TimedOut";
  constructor(state: "Rejected" | "TimedOut", reason?: string) {
    super(state === "Rejected" ? `approval rejected${reason ? `: ${reason}` : ""}` : "approval timed out");
    this.name = "ApprovalDeniedError";
    this.state = state;
  }
}

/**
 * A checkpoint too large for the run's status (operator/api/limits.ts), refused at the call:
 * nothing was written, the last committed checkpoint stands, and heartbeats go on.
 */
export class CheckpointTooLargeError extends Error {
  readonly step: number;
  /** What is over its limit: the checkpoint itself, or the sandbox's whole part of status. */
  readonly what: "checkpoint" | "sandbox status";
  /** UTF-8 bytes of it as JSON. */
  readonly bytes: number;
  readonly limit: number;
  constructor(step: number, what: "checkpoint" | "sandbox status", bytes: number, limit: number) {
    super(
      what === "checkpoint"
        ? `the checkpoint of step ${step} is ${bytes} bytes as JSON, over the limit of ${limit} bytes; nothing was written`
        : `the checkpoint of step ${step} would make the sandbox's part of status (heartbeat, tool calls and checkpoint) ${bytes} bytes as JSON, over the limit of ${limit} bytes; nothing was written`,
    );
    this.name = "CheckpointTooLargeError";
    this.step = step;
    this.what = what;
    this.bytes = bytes;
    this.limit = limit;
  }
}

/** A limit of the run's budget that its spending has reached (usage.ts). */
export interface BudgetBreach {
  limit: "tokens" | "inputTokens" | "outputTokens" | "cost" | "toolCalls";
  /** What is spent of the limit and what it allows, as text: "120000" (tokens), "12.5" (cost). */
  used: string;
  allowed: string;
  /** "token budget exhausted: 120000 of 100000 tokens spent" */
  message: string;
}

/**
 * The run's spending (status.spent plus this attempt's usage) has reached a limit of its budget
 * (spec.budget), so the SDK refuses to start more work: a model call through an adapter, a tool
 * call, or whatever the agent guards with sandbox.assertWithinBudget(). The operator stops the
 * run for a person (NeedsHumanIntervention, BudgetExhausted) on the report that reached the limit;
 * runAgent waits a little for that before it exits.
 */
export class BudgetExhaustedError extends Error {
  /** Every limit reached, in the order the operator names them (tokens, input, output, cost, tool calls). */
  readonly breaches: readonly BudgetBreach[];
  constructor(breaches: readonly BudgetBreach[]) {
    super(`run budget exhausted: ${breaches.map((b) => b.message.replace(/^(.*) budget exhausted: /, "$1 budget: ")).join("; ") || "a limit is reached"}; no more work is started (raise ${breaches.map((b) => `spec.budget.${b.limit}`).join(" or ") || "the limit"}, then resume the run)`);
    this.name = "BudgetExhaustedError";
    this.breaches = breaches;
  }

  /** The first limit reached. */
  get limit(): BudgetBreach["limit"] | undefined {
    return this.breaches[0]?.limit;
  }
}

/** The sandbox's environment does not name a run, a namespace and an attempt. */
export class SandboxConfigError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "SandboxConfigError";
  }
}

// ---------------------------------------------------------------------------------------------
// turning errors into failure records

export interface ValidationIssue {
  /** Dotted path of the offending field; empty for the arguments as a whole. */
  path: string;
  message: string;
  /** What was expected, when the validator says. */
  expected?: string;
}

/** A tool failure as the agent reads it and as the status records it. */
export interface ToolFailure {
  /** validation: the arguments were wrong (fix them and retry); error: the tool failed;
   *  unconfirmed: an earlier attempt started the call and its outcome is unknown. */
  kind: "validation" | "error" | "unconfirmed";
  message: string;
  httpStatus?: number;
  retryAfterSeconds?: number;
  issues?: ValidationIssue[];
}

interface IssueLike {
  path: readonly PropertyKey[];
  message: string;
  expected?: unknown;
}

/** A zod error, recognised by shape so that errors from any copy of zod are understood. */
export function isValidationError(err: unknown): err is { issues: IssueLike[] } {
  if (typeof err !== "object" || err === null) return false;
  const e = err as { name?: unknown; issues?: unknown };
  return e.name === "ZodError" && Array.isArray(e.issues);
}

const formatPath = (path: readonly PropertyKey[]) =>
  path.map((p, i) => (typeof p === "number" ? `[${p}]` : `${i > 0 ? "." : ""}${String(p)}`)).join("");

/**
 * A validation error as a message the agent (or the model behind it) can act on: each wrong field
 * with what was expected, e.g. `invalid arguments for send_email: to: Invalid input: expected
 * string, received number`.
 */
export function validationFailure(toolName: string, err: { issues: readonly IssueLike[] }): ToolFailure {
  const issues: ValidationIssue[] = err.issues.map((issue) => {
    const out: ValidationIssue = { path: formatPath(issue.path), message: issue.message };
    if (typeof issue.expected === "string") out.expected = issue.expected;
    return out;
  });
  const parts = issues.map((i) => (i.path ? `${i.path}: ${i.message}` : i.message));
  const message = clip(`invalid arguments for ${toolName}: ${parts.join("; ") || "rejected by the schema"}`, MAX_ERROR_MESSAGE);
  return { kind: "validation", message, issues };
}

function headerValue(headers: unknown, name: string): unknown {
  if (!headers || typeof headers !== "object") return undefined;
  const h = headers as { get?: unknown } & Record<string, unknown>;
  if (typeof h.get === "function") return (h.get as (n: string) => unknown).call(headers, name) ?? undefined;
  for (const [key, value] of Object.entries(h)) if (key.toLowerCase() === name) return Array.isArray(value) ? value[0] : value;
  return undefined;
}

const asHttpStatus = (value: unknown) => (typeof value === "number" && Number.isInteger(value) && value >= 100 && value <= 599 ? value : undefined);

function clip(text: string, max: number): string {
  return text.length <= max ? text : `${text.slice(0, max - 1)}…`;
}

/**
 * The failure record of anything a tool threw. HTTP status comes from `httpStatus`, `status`,
 * `statusCode`, a numeric `code` or `response.status`; Retry-After from `retryAfterSeconds`,
 * `retryAfter` or a `retry-after` header (on the error or its response).
 */
export function describeFailure(err: unknown, now: number, toolName = "the tool"): ToolFailure {
  if (isValidationError(err)) return validationFailure(toolName, err);
  const e = (typeof err === "object" && err !== null ? err : {}) as Record<string, unknown>;
  const response = (typeof e.response === "object" && e.response !== null ? e.response : {}) as Record<string, unknown>;
  const message = err instanceof Error ? err.message || err.name : typeof err === "string" ? err : JSON.stringify(err) ?? String(err);
  const failure: ToolFailure = { kind: "error", message: clip(message, MAX_ERROR_MESSAGE) };
  const httpStatus = asHttpStatus(e.httpStatus) ?? asHttpStatus(e.status) ?? asHttpStatus(e.statusCode) ?? asHttpStatus(e.code) ?? asHttpStatus(response.status);
  if (httpStatus !== undefined) failure.httpStatus = httpStatus;
  const retryAfter =
    parseRetryAfter(e.retryAfterSeconds, now) ??
    parseRetryAfter(e.retryAfter, now) ??
    parseRetryAfter(headerValue(e.headers, "retry-after"), now) ??
    parseRetryAfter(headerValue(response.headers, "retry-after"), now);
  if (retryAfter !== undefined) failure.retryAfterSeconds = retryAfter;
  return failure;
}

/** How many causes deep a rate limit is looked for: enough for wrappers, and no cycle spins. */
const MAX_CAUSES = 8;

/**
 * Whether `err` is, or wraps (its `cause`, and theirs), a ToolError with HTTP 429. Recognised by
 * shape, as zod errors are, so that a ToolError of another copy of this SDK counts alike.
 */
export function isRateLimitError(err: unknown): boolean {
  let e: unknown = err;
  for (let depth = 0; depth < MAX_CAUSES && typeof e === "object" && e !== null; depth++) {
    const { name, httpStatus, cause } = e as { name?: unknown; httpStatus?: unknown; cause?: unknown };
    if (name === "ToolError" && httpStatus === 429) return true;
    e = cause;
  }
  return false;
}

/** Whether `err` is, or wraps (its `cause`, and theirs), a BudgetExhaustedError, of any copy of this SDK. */
export function isBudgetExhausted(err: unknown): boolean {
  let e: unknown = err;
  for (let depth = 0; depth < MAX_CAUSES && typeof e === "object" && e !== null; depth++) {
    const { name, cause } = e as { name?: unknown; cause?: unknown };
    if (name === "BudgetExhaustedError") return true;
    e = cause;
  }
  return false;
}

/** The exit code for an error that ended the agent's work. */
export function exitCodeFor(err: unknown): number {
  if (err instanceof UnconfirmedSideEffectError) return EXIT_CODES.unconfirmedSideEffect;
  if (err instanceof FencedError) return EXIT_CODES.fenced;
  if (err instanceof ApprovalDeniedError) return EXIT_CODES.approvalDenied;
  if (err instanceof SandboxConfigError) return EXIT_CODES.config;
  if (isRateLimitError(err)) return EXIT_CODES.rateLimited;
  return EXIT_CODES.failed;
}
