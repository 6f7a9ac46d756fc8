// The Vercel AI SDK adapter (package `ai`, version 7): generateText and streamText whose tool
// calls the sandbox records, whose text reaches the run's status, and whose tool approvals a
// person answers through the run's approvals.
//
//   const result = await generateText(sandbox, { model, tools, prompt, stopWhen: stepCountIs(5) }, { idempotent: ["lookup"] });
//
// The wrappers take the AI SDK's own options and return its own result. What they add:
// - every tool's `execute` runs through callTool (watchdogTools);
// - a tool call that needs approval ('user-approval', from `toolApproval` or a tool's
//   `needsApproval`) is put to a person with sandbox.awaitApproval() while the call waits, and
//   resolved as 'approved' with the answer as its reason (watchdogToolApproval);
// - an error that must stop the agent (an unconfirmed side effect, fencing, a denied approval)
//   aborts the call with that error as the reason, since the AI SDK hands every error a tool
//   throws to the model;
// - the final text is reported with sandbox.say(), a stream with sandbox.beginStream();
// - each model call's usage (onLanguageModelCallEnd) is reported with sandbox.recordUsage() and
//   as a GenAI `chat <model>` span (when the agent registered an OpenTelemetry SDK), and
//   each step is refused (prepareStep) with BudgetExhaustedError once the run's budget is
//   exhausted: the call ends with that error, as with any error that must stop the agent.
import { generateText as aiGenerateText, streamText as aiStreamText } from "ai";
import type {
  GenerateTextResult,
  LanguageModelCallEndEvent,
  PrepareStepFunction,
  GenericToolApprovalFunction,
  ModelMessage,
  OutputInterface,
  SingleToolApprovalFunction,
  StreamTextResult,
  ToolApprovalConfiguration,
  ToolApprovalStatus,
  ToolExecutionOptions,
  ToolSet,
} from "ai";
import { canonicalJson } from "../keys.ts";
import type { Sandbox, StreamHandle } from "../sandbox.ts";
import { recordModelCall } from "../tracing.ts";
import { callTool, mustStop, reportUsage, tokensOf, type AdapterOptions, type UsageOptions } from "./common.ts";

/** The AI SDK's Context (a tool's or the run's context object), which `ai` does not export. */
type Context = Record<string, unknown>;

export type GenerateTextParams<TOOLS extends ToolSet, RUNTIME_CONTEXT extends Context = Context, OUTPUT extends OutputInterface = OutputInterface<string, string>> = Parameters<
  typeof aiGenerateText<TOOLS, RUNTIME_CONTEXT, OUTPUT>
>[0];
export type StreamTextParams<TOOLS extends ToolSet, RUNTIME_CONTEXT extends Context = Context, OUTPUT extends OutputInterface = OutputInterface<string, string, never>> = Parameters<
  typeof aiStreamText<TOOLS, RUNTIME_CONTEXT, OUTPUT>
>[0];

/** A tool call waiting for a person's approval. */
export interface ApprovalCall {
  toolName: string;
  toolCallId: string;
  input: unknown;
  /** The reason given with the 'user-approval' status, if any. */
  reason?: string;
}

export interface AiAdapterOptions extends AdapterOptions, UsageOptions {
  /** The question a person is asked for a tool call that needs approval. Default: defaultApprovalQuestion. */
  approvalQuestion?: (call: ApprovalCall) => string;
}

export interface WatchdogToolsOptions extends AdapterOptions {
  /**
   * Aborted with the error that must stop the agent (see mustStop). Pass its signal as the call's
   * `abortSignal`: the AI SDK would hand the error to the model as the tool's failure.
   */
  stop: AbortController;
}

export interface WatchdogToolApprovalOptions extends Pick<AiAdapterOptions, "approvalQuestion"> {
  /** Aborted with the error of an approval that did not end in Approved (as for watchdogTools). */
  stop: AbortController;
}

/**
 * Wraps each tool's `execute` so that every call is recorded (Started before it runs, then
 * Succeeded or Failed) and a call an earlier attempt completed returns its saved result without
 * running. A failure reaches the model as the tool's error. Tools without `execute` (run by the
 * provider, or by the caller) are left as they are. A tool whose `execute` streams preliminary
 * results is recorded with its final result, the only one the model is given.
 */
export function watchdogTools<TOOLS extends ToolSet>(sandbox: Sandbox, tools: TOOLS, options: WatchdogToolsOptions): TOOLS {
  const wrapped: Record<string, unknown> = {};
  for (const [name, tool] of Object.entries(tools)) {
    const execute = tool.execute as ((input: unknown, options: ToolExecutionOptions<unknown>) => unknown) | undefined;
    if (typeof execute !== "function") {
      wrapped[name] = tool;
      continue;
    }
    wrapped[name] = {
      ...tool,
      execute: async (input: unknown, execution: ToolExecutionOptions<unknown>) => {
        try {
          return await callTool(
            sandbox,
            name,
            input,
            async (args, ctx) => {
              // Fencing aborts the tool as well as the call it is part of.
              const abortSignal = execution.abortSignal ? AbortSignal.any([execution.abortSignal, ctx.signal]) : ctx.signal;
              return finalValue(await execute(args, { ...execution, abortSignal }));
            },
            options,
          );
        } catch (err) {
          if (mustStop(err)) options.stop.abort(err);
          throw err;
        }
      },
    };
  }
  return wrapped as TOOLS;
}

/**
 * A `toolApproval` setting that asks a person: the approval status of each call is worked out as
 * the AI SDK does (the given setting first, a generic function or per-tool statuses and
 * functions, then the tool's own `needsApproval`), and a call whose status is 'user-approval'
 * waits for sandbox.awaitApproval(question) and is then 'approved', with the answer as the
 * reason. A rejection or a timeout throws ApprovalDeniedError (the operator fails the run) and
 * aborts `stop` with it. Other statuses are returned as they are.
 */
export function watchdogToolApproval<TOOLS extends ToolSet, RUNTIME_CONTEXT extends Context = Context>(
  sandbox: Pick<Sandbox, "awaitApproval">,
  tools: TOOLS | undefined,
  toolApproval: ToolApprovalConfiguration<TOOLS, RUNTIME_CONTEXT> | undefined,
  options: WatchdogToolApprovalOptions,
): ToolApprovalConfiguration<TOOLS, RUNTIME_CONTEXT> | undefined {
  const question = options.approvalQuestion ?? defaultApprovalQuestion;
  return approvals(tools, toolApproval, async (call, status, messages) => {
    if (status !== "user-approval" && (typeof status !== "object" || status.type !== "user-approval")) return status;
    // A request the messages already hold was answered with them (the AI SDK's own flow), and is
    // only checked again here: the person is not asked twice.
    if (requested(messages, call.toolCallId)) return status;
    const reason = typeof status === "object" ? status.reason : undefined;
    try {
      return { type: "approved", reason: await sandbox.awaitApproval(question({ ...call, reason })) };
    } catch (err) {
      options.stop.abort(err);
      throw err;
    }
  });
}

/** `Approve <tool> <arguments as JSON>?`, and the reason below it when there is one. */
export function defaultApprovalQuestion(call: ApprovalCall): string {
  const args = canonicalJson(call.input) ?? "";
  const shown = args.length > 1000 ? `${args.slice(0, 999)}…` : args;
  return `Approve ${call.toolName} ${shown}?${call.reason ? `\n\n${call.reason}` : ""}`;
}

/**
 * The AI SDK's generateText under the sandbox: tools recorded, approvals asked, and the final
 * text (result.text, the last step's) reported with sandbox.say(). Resolves with the AI SDK's
 * result; rejects with the error that must stop the agent when there was one.
 */
export async function generateText<TOOLS extends ToolSet, RUNTIME_CONTEXT extends Context = Context, OUTPUT extends OutputInterface = OutputInterface<string, string>>(
  sandbox: Sandbox,
  params: GenerateTextParams<TOOLS, RUNTIME_CONTEXT, OUTPUT>,
  options: AiAdapterOptions = {},
): Promise<GenerateTextResult<TOOLS, RUNTIME_CONTEXT, OUTPUT>> {
  const call = begin(sandbox, params.abortSignal);
  try {
    const result = await aiGenerateText<TOOLS, RUNTIME_CONTEXT, OUTPUT>({ ...params, ...call.settings(params, options) });
    // The last step may have ended with the tool that had to stop the agent.
    call.throwIfStopped();
    await sandbox.say(result.text);
    return result;
  } catch (err) {
    call.throwIfStopped();
    throw err;
  } finally {
    call.done();
  }
}

/**
 * The AI SDK's streamText under the sandbox: tools recorded, approvals asked, and the output
 * reported as one stream: sandbox.beginStream() at the first text delta (one `delta` write),
 * each delta a chunk (progress, no write), and end() with the final text (the last step's) when
 * the AI SDK ends the stream; a stream without any text delta reports its final text with
 * sandbox.say(). Returns the AI SDK's result, to be consumed as usual (the AI SDK streams only
 * while something reads it). When an error had to stop the agent, the call is aborted and the
 * result's promises (text, steps, ...) reject with that error.
 */
export function streamText<TOOLS extends ToolSet, RUNTIME_CONTEXT extends Context = Context, OUTPUT extends OutputInterface = OutputInterface<string, string, never>>(
  sandbox: Sandbox,
  params: StreamTextParams<TOOLS, RUNTIME_CONTEXT, OUTPUT>,
  options: AiAdapterOptions = {},
): StreamTextResult<TOOLS, RUNTIME_CONTEXT, OUTPUT> {
  const call = begin(sandbox, params.abortSignal);
  const { onChunk, onAbort } = params;
  const onEnd = params.onEnd ?? params.onFinish; // onFinish is the AI SDK's deprecated alias
  let stream: StreamHandle | undefined;
  return aiStreamText<TOOLS, RUNTIME_CONTEXT, OUTPUT>({
    ...params,
    ...call.settings(params, options),
    onChunk: async (event) => {
      if (event.chunk.type === "text-delta") (stream ??= sandbox.beginStream()).chunk(event.chunk.text);
      else sandbox.progress();
      await onChunk?.(event);
    },
    onEnd: async (event) => {
      call.done();
      await (stream ? stream.end(event.text) : sandbox.say(event.text));
      await onEnd?.(event);
    },
    onFinish: undefined,
    onAbort: async (event) => {
      call.done();
      await onAbort?.(event);
    },
  });
}

// ---------------------------------------------------------------------------------------------

/** One generateText or streamText call: its abort signal and the error that had to stop it. */
function begin(sandbox: Sandbox, userSignal: AbortSignal | undefined) {
  const stop = new AbortController();
  let asking = 0;
  // Fencing ends the call at once, unless a person is being asked: a rejection also ends the
  // run, so the same watch event fences the sandbox, and the rejection must be what the agent
  // learns. The approval then ends the call with its own outcome.
  const onFence = () => {
    if (asking === 0) stop.abort(sandbox.signal.reason);
  };
  if (sandbox.signal.aborted) onFence();
  else sandbox.signal.addEventListener("abort", onFence, { once: true });
  const guarded: Pick<Sandbox, "awaitApproval"> = {
    awaitApproval: async (question, checkpoint) => {
      asking++;
      let answer: string;
      try {
        answer = await sandbox.awaitApproval(question, checkpoint);
      } finally {
        asking--;
      }
      // Approved just as the sandbox was fenced: the fence still ends the call.
      if (sandbox.signal.aborted) onFence();
      return answer;
    },
  };
  return {
    settings<TOOLS extends ToolSet, RUNTIME_CONTEXT extends Context>(params: CallParams<TOOLS, RUNTIME_CONTEXT>, options: AiAdapterOptions) {
      const { tools, toolApproval, prepareStep } = params;
      const onCallEnd = params.onLanguageModelCallEnd ?? params.experimental_onLanguageModelCallEnd;
      return {
        tools: tools && watchdogTools(sandbox, tools, { ...options, stop }),
        toolApproval: watchdogToolApproval(guarded, tools, toolApproval, { ...options, stop }),
        abortSignal: userSignal ? AbortSignal.any([stop.signal, userSignal]) : stop.signal,
        // Before each step's model call. The AI SDK swallows what its event callbacks throw, but
        // not what prepareStep throws: the refusal ends the call here.
        prepareStep: (async (o) => {
          try {
            sandbox.assertWithinBudget();
          } catch (err) {
            stop.abort(err);
            throw err;
          }
          return prepareStep?.(o);
        }) as PrepareStepFunction<TOOLS, RUNTIME_CONTEXT>,
        onLanguageModelCallEnd: async (event: LanguageModelCallEndEvent<TOOLS>) => {
          reportUsage(sandbox, event.usage, event.modelId, options);
          recordModelCall({
            model: event.modelId,
            provider: event.provider,
            startedAt: Date.now() - (event.performance?.responseTimeMs ?? 0),
            tokens: tokensOf(event.usage),
            finishReason: event.finishReason,
            responseId: event.responseId,
          });
          await onCallEnd?.(event);
        },
        experimental_onLanguageModelCallEnd: undefined,
      };
    },
    throwIfStopped(): void {
      if (stop.signal.aborted) throw stop.signal.reason;
    },
    done(): void {
      sandbox.signal.removeEventListener("abort", onFence);
    },
  };
}

/** What begin() reads of a call's parameters (generateText's and streamText's alike). */
interface CallParams<TOOLS extends ToolSet, RUNTIME_CONTEXT extends Context> {
  tools?: TOOLS;
  toolApproval?: ToolApprovalConfiguration<TOOLS, RUNTIME_CONTEXT>;
  prepareStep?: PrepareStepFunction<NoInfer<TOOLS>, RUNTIME_CONTEXT>;
  onLanguageModelCallEnd?: (event: LanguageModelCallEndEvent<TOOLS>) => unknown;
  experimental_onLanguageModelCallEnd?: (event: LanguageModelCallEndEvent<TOOLS>) => unknown;
}

type Ask = (call: Omit<ApprovalCall, "reason">, status: ToolApprovalStatus, messages: readonly ModelMessage[]) => Promise<ToolApprovalStatus>;

/**
 * The approval setting, with every status the AI SDK would have used passed through `ask`. Given
 * a generic function, a generic function; otherwise one function per tool, since a per-tool
 * entry replaces the tool's own `needsApproval`, which is therefore consulted here.
 */
function approvals<TOOLS extends ToolSet, RUNTIME_CONTEXT extends Context>(
  tools: TOOLS | undefined,
  setting: ToolApprovalConfiguration<TOOLS, RUNTIME_CONTEXT> | undefined,
  ask: Ask,
): ToolApprovalConfiguration<TOOLS, RUNTIME_CONTEXT> | undefined {
  if (typeof setting === "function") {
    const generic: GenericToolApprovalFunction<TOOLS, never, RUNTIME_CONTEXT> = async (o) => {
      const { toolName, toolCallId, input } = o.toolCall;
      return ask({ toolName, toolCallId, input }, await setting(o as Parameters<typeof setting>[0]), o.messages);
    };
    return generic as ToolApprovalConfiguration<TOOLS, RUNTIME_CONTEXT>;
  }
  if (!tools) return setting;
  type Entry = ToolApprovalStatus | SingleToolApprovalFunction<unknown, unknown, RUNTIME_CONTEXT>;
  const perTool: Record<string, SingleToolApprovalFunction<unknown, unknown, RUNTIME_CONTEXT>> = {};
  for (const [toolName, tool] of Object.entries(tools)) {
    const own = setting && Object.hasOwn(setting, toolName) ? (setting as Record<string, Entry>)[toolName] : undefined;
    perTool[toolName] = async (input, o) => {
      let status: ToolApprovalStatus;
      if (own !== undefined && own !== null) status = typeof own === "function" ? await own(input, o) : own;
      else if (typeof tool.needsApproval === "function") {
        const needed = await tool.needsApproval(input as never, { toolCallId: o.toolCallId, messages: o.messages, context: o.toolContext });
        status = needed ? "user-approval" : "not-applicable";
      } else status = tool.needsApproval ? "user-approval" : "not-applicable";
      return ask({ toolName, toolCallId: o.toolCallId, input }, status, o.messages);
    };
  }
  return perTool as ToolApprovalConfiguration<TOOLS, RUNTIME_CONTEXT>;
}

/** Whether an approval was already requested for this tool call, in the messages given to the call. */
function requested(messages: readonly ModelMessage[], toolCallId: string): boolean {
  return messages.some((m) => m.role === "assistant" && Array.isArray(m.content) && m.content.some((part) => part.type === "tool-approval-request" && part.toolCallId === toolCallId));
}

/** What a tool's `execute` produced: its value, or the last value of a stream of results. */
async function finalValue(value: unknown): Promise<unknown> {
  if (typeof value !== "object" || value === null || !(Symbol.asyncIterator in value)) return value;
  let last: unknown;
  for await (const item of value as AsyncIterable<unknown>) last = item;
  return last;
}
