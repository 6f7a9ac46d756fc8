// What every framework adapter shares: one framework tool call run under the sandbox's protocol,
// and a model call's usage reported to the sandbox. The adapters differ only in where they hook
// into their framework; what a call records in status (Started before it runs, then Succeeded or
// Failed, the saved result on replay) and how usage is counted against the run's budget are the
// SDK's.
import { ToolError, UnconfirmedSideEffectError } from "../errors.ts";
import type { Sandbox } from "../sandbox.ts";
import type { ToolContext } from "../tool-runner.ts";
import { modelName } from "../usage.ts";

/** Which tools may run twice with the same idempotency key: names, or a test on the name. */
export type IdempotentTools = readonly string[] | ((toolName: string) => boolean);

export interface AdapterOptions {
  /** Tools that are safe to run again after an attempt died mid-call. Default: none. */
  idempotent?: IdempotentTools;
}

export function isIdempotent(tools: IdempotentTools | undefined, toolName: string): boolean {
  if (tools === undefined) return false;
  return typeof tools === "function" ? tools(toolName) : tools.includes(toolName);
}

/**
 * Runs one tool call of a framework through `sandbox.tool`. Resolves with the tool's value, or
 * with the saved value when an earlier attempt already made this call. A failed call throws a
 * ToolError with the failure's message, which every framework here hands to the model as the
 * tool's error; an unconfirmed side effect (UnconfirmedSideEffectError) and fencing are thrown as
 * they are, since the agent must stop rather than let the model carry on.
 */
export async function callTool<A, R>(
  sandbox: Sandbox,
  name: string,
  args: A,
  fn: (args: A, ctx: ToolContext) => R | Promise<R>,
  options: AdapterOptions = {},
): Promise<R> {
  const outcome = await sandbox.tool(name, args, fn, { idempotent: isIdempotent(options.idempotent, name) });
  if (outcome.ok) return outcome.value;
  const { error } = outcome;
  const toolError = new ToolError(error.message, {
    ...(error.httpStatus !== undefined ? { httpStatus: error.httpStatus } : {}),
    ...(error.retryAfterSeconds !== undefined ? { retryAfterSeconds: error.retryAfterSeconds } : {}),
  });
  throw toolError;
}

/**
 * Errors an adapter must let through to the agent's main function instead of the model: an
 * unconfirmed side effect, fencing, and an exhausted budget (the run may spend no more).
 */
export function mustStop(err: unknown): boolean {
  return err instanceof UnconfirmedSideEffectError || (err instanceof Error && (err.name === "FencedError" || err.name === "BudgetExhaustedError"));
}

// ---------------------------------------------------------------------------------------------
// usage

export interface UsageOptions {
  /**
   * Report each model call's token usage with sandbox.recordUsage(). Default true; false when the
   * agent reports usage itself, so that nothing is counted twice. (A model call is refused once
   * the run's budget is exhausted either way.)
   */
  reportUsage?: boolean;
  /** The model name usage is reported under, as spec.budget.prices names it. Default: the name the framework gives. */
  model?: string;
}

/** Input and output tokens of a model call. */
export interface Tokens {
  inputTokens: number;
  outputTokens: number;
}

const tokenField = (value: unknown): number | undefined => {
  if (typeof value === "number") return Number.isFinite(value) && value > 0 ? Math.min(Math.round(value), Number.MAX_SAFE_INTEGER) : 0;
  // The provider specification's { total } (the AI SDK's LanguageModelV3/V4 usage)
  if (typeof value === "object" && value !== null && "total" in value) return tokenField((value as { total?: unknown }).total);
  return undefined;
};

/**
 * The tokens of a framework's usage object, whichever spelling it uses: `inputTokens` and
 * `outputTokens` (the AI SDK 5 and later, the OpenAI Agents SDK, the provider specification's
 * `{ total }`), `promptTokens` and `completionTokens` (the AI SDK 4, LangChain's
 * llmOutput.tokenUsage), `input_tokens` and `output_tokens` (LangChain's usage_metadata, the
 * Responses API), `prompt_tokens` and `completion_tokens` (Chat Completions). Undefined when it
 * names none.
 */
export function tokensOf(usage: unknown): Tokens | undefined {
  if (typeof usage !== "object" || usage === null) return undefined;
  const u = usage as Record<string, unknown>;
  const spellings: [string, string][] = [
    ["inputTokens", "outputTokens"],
    ["promptTokens", "completionTokens"],
    ["input_tokens", "output_tokens"],
    ["prompt_tokens", "completion_tokens"],
  ];
  for (const [input, output] of spellings) {
    const i = tokenField(u[input]);
    const o = tokenField(u[output]);
    if (i !== undefined || o !== undefined) return { inputTokens: i ?? 0, outputTokens: o ?? 0 };
  }
  return undefined;
}

/**
 * Reports one model call's usage (anything tokensOf() reads) under `model`, unless the options
 * turn it off. Never throws: a framework's odd usage object must not break the agent's run.
 */
export function reportUsage(sandbox: Pick<Sandbox, "recordUsage">, usage: unknown, model: unknown, options: UsageOptions = {}): void {
  if (options.reportUsage === false) return;
  const tokens = tokensOf(usage);
  if (!tokens || tokens.inputTokens + tokens.outputTokens === 0) return;
  const name = modelName(options.model) ?? modelName(model);
  try {
    sandbox.recordUsage(name === undefined ? tokens : { ...tokens, model: name });
  } catch {
    // not a usage the SDK can count; the operator's budget does not depend on it
  }
}
