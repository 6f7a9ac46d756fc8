// What every framework adapter shares: one framework tool call run under the sandbox's protocol.
// The adapters differ only in where they hook into their framework; what a call records in status
// (Started before it runs, then Succeeded or Failed, the saved result on replay) is the SDK's.
import { ToolError, UnconfirmedSideEffectError } from "../errors.ts";
import type { Sandbox } from "../sandbox.ts";
import type { ToolContext } from "../tool-runner.ts";

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

/** Errors an adapter must let through to the agent's main function instead of the model. */
export function mustStop(err: unknown): boolean {
  return err instanceof UnconfirmedSideEffectError || (err instanceof Error && err.name === "FencedError");
}
