// The LangChain.js / LangGraph.js adapter: LangChain tools run under the sandbox's tool protocol,
// a callback handler reports what the models say, and runGraph turns LangGraph's interrupts into
// approval requests.
//
//   const tools = watchdogTools(sandbox, [search, sendEmail], { idempotent: ["search"] });
//   const graph = new StateGraph(MessagesAnnotation)...addNode("tools", new ToolNode(tools))
//     .compile({ checkpointer: new MemorySaver() });
//   await runGraph(sandbox, graph, { messages: [{ role: "user", content: sandbox.goal }] });
//
// Tools are wrapped where LangChain runs their body (StructuredTool._call, after it has parsed the
// arguments), so callbacks, ToolMessage formatting and ToolNode's error handling stay LangChain's:
// a failed call reaches the model as ToolNode's error message. What must stop the agent instead
// (an unconfirmed side effect, fencing) cannot get past ToolNode, which turns every error into a
// message; so the adapter aborts the graph and runGraph rethrows it.
//
// Usage. The callback handler reports each model call's tokens (the messages' usage_metadata, else
// llmOutput.tokenUsage) with sandbox.recordUsage(), under the model's name (ls_model_name), and
// refuses to start a model call once the run's budget is exhausted: BudgetExhaustedError, which
// runGraph rethrows as it does any error that must stop the agent. Each model call is also a
// GenAI `chat <model>` span under the attempt (when the agent registered an OpenTelemetry SDK).
import { BaseCallbackHandler } from "@langchain/core/callbacks/base";
import type { CallbackManagerForToolRun, Callbacks } from "@langchain/core/callbacks/manager";
import type { ChatModelStreamEvent } from "@langchain/core/language_models/event";
import type { ChatGeneration, LLMResult } from "@langchain/core/outputs";
import type { RunnableConfig, RunnableToolLike } from "@langchain/core/runnables";
import type { DynamicTool, StructuredToolInterface } from "@langchain/core/tools";
import { Command, INTERRUPT, isInterrupted, type Interrupt, type StateSnapshot } from "@langchain/langgraph";
import type { Sandbox, StreamHandle } from "../sandbox.ts";
import type { ToolContext } from "../tool-runner.ts";
import { callTool, mustStop, reportUsage, tokensOf, type AdapterOptions, type Tokens, type UsageOptions } from "./common.ts";
import { recordModelCall } from "../tracing.ts";

export type { AdapterOptions } from "./common.ts";

/** The tools ToolNode and createReactAgent run. */
export type LangChainTool = StructuredToolInterface | DynamicTool | RunnableToolLike;

/** Where a wrapped tool finds its ToolContext in the config LangChain hands it (see toolContext). */
const CONTEXT_KEY = "agent-watchdog/tool";

// Per sandbox, aborted with the error once a tool call has hit one that must stop the agent. The
// graph runs on its signal, and the callback handler refuses to start anything more after it.
const stops = new WeakMap<Sandbox, AbortController>();

function stopper(sandbox: Sandbox): AbortController {
  let stop = stops.get(sandbox);
  if (!stop) stops.set(sandbox, (stop = new AbortController()));
  return stop;
}

// ---------------------------------------------------------------------------------------------
// tools

/**
 * The idempotency key and the rest of the SDK's ToolContext, inside a wrapped tool:
 * `tool(async (args, config) => { const ctx = toolContext(config); ... })`.
 */
export function toolContext(config: RunnableConfig | undefined): ToolContext | undefined {
  return config?.configurable?.[CONTEXT_KEY] as ToolContext | undefined;
}

/**
 * The tools, each running through the sandbox's tool protocol: Started is recorded before the
 * tool's body runs, then Succeeded with its result or Failed with its error; a call an earlier
 * attempt already made returns the saved result without running. Results are saved as JSON.
 */
export function watchdogTools<T extends readonly LangChainTool[]>(sandbox: Sandbox, tools: T, options: AdapterOptions = {}): T {
  return tools.map((t) => watchdogTool(sandbox, t, options)) as unknown as T;
}

/** One tool of watchdogTools. The original is left as it is; the copy inherits everything else. */
export function watchdogTool<T extends LangChainTool>(sandbox: Sandbox, tool: T, options: AdapterOptions = {}): T {
  const wrapped = Object.create(tool) as T;
  if (hasBody(tool)) {
    const body = tool._call.bind(tool);
    (wrapped as unknown as ToolBody)._call = (args, runManager, config) =>
      runTool(sandbox, tool.name, args, options, runManager, (ctx) => body(args, runManager, withContext(config, ctx)));
    return wrapped;
  }
  if (typeof tool.invoke !== "function") throw new TypeError(`watchdogTool: ${String(tool.name)} is not a LangChain tool`);
  // RunnableToolLike (runnable.asTool()) has no body of its own to wrap: its invoke is the call.
  const invoke = tool.invoke.bind(tool) as (input: unknown, config?: RunnableConfig) => Promise<unknown>;
  (wrapped as { invoke: unknown }).invoke = (input: unknown, config?: RunnableConfig) =>
    runTool(sandbox, tool.name, isToolCall(input) ? input.args : input, options, undefined, (ctx) => invoke(input, withContext(config, ctx)));
  return wrapped;
}

interface ToolBody {
  _call(args: unknown, runManager?: CallbackManagerForToolRun, config?: RunnableConfig): Promise<unknown>;
}

function hasBody(tool: unknown): tool is ToolBody & { name: string } {
  return typeof (tool as Partial<ToolBody>)._call === "function";
}

function isToolCall(input: unknown): input is { type: "tool_call"; args: unknown } {
  return typeof input === "object" && input !== null && (input as { type?: unknown }).type === "tool_call";
}

function withContext(config: RunnableConfig | undefined, ctx: ToolContext): RunnableConfig {
  return { ...config, configurable: { ...config?.configurable, [CONTEXT_KEY]: ctx } };
}

async function runTool(
  sandbox: Sandbox,
  name: string,
  args: unknown,
  options: AdapterOptions,
  runManager: CallbackManagerForToolRun | undefined,
  body: (ctx: ToolContext) => Promise<unknown>,
): Promise<unknown> {
  const stop = stopper(sandbox);
  stop.signal.throwIfAborted();
  let bubbled: unknown;
  try {
    return await callTool(
      sandbox,
      name,
      args,
      async (_args, ctx) => {
        try {
          const value = await body(ctx);
          return isAsyncGenerator(value) ? await drain(value, runManager, ctx) : value;
        } catch (err) {
          // interrupt() inside the tool: LangGraph's control flow, not the tool's failure. The call
          // is recorded Failed (it did not finish) and runs again, under a new key, on resume.
          if (isBubbleUp(err)) {
            bubbled = err;
            throw new Error(`paused by LangGraph (${(err as Error).name}); the tool runs again when the graph resumes`, { cause: err });
          }
          throw err;
        }
      },
      options,
    );
  } catch (err) {
    if (bubbled !== undefined) throw bubbled;
    if (mustStop(err)) stop.abort(err);
    throw err;
  }
}

function isBubbleUp(err: unknown): boolean {
  return typeof err === "object" && err !== null && (err as { is_bubble_up?: unknown }).is_bubble_up === true;
}

function isAsyncGenerator(value: unknown): value is AsyncGenerator<unknown, unknown> {
  return typeof value === "object" && value !== null && typeof (value as AsyncGenerator)[Symbol.asyncIterator] === "function" && typeof (value as AsyncGenerator).next === "function";
}

/** A streaming tool: its events go to the callbacks as LangChain would send them, its return value is the result. */
async function drain(gen: AsyncGenerator<unknown, unknown>, runManager: CallbackManagerForToolRun | undefined, ctx: ToolContext): Promise<unknown> {
  for (;;) {
    const step = await gen.next();
    if (step.done) return step.value;
    ctx.progress();
    await runManager?.handleToolEvent(step.value);
  }
}

// ---------------------------------------------------------------------------------------------
// callbacks

export interface CallbackOptions extends UsageOptions {
  /**
   * Ask chat models to stream, as LangGraph's "messages" stream mode does, so that a long
   * generation shows progress and is reported as a stream. Default true.
   */
  stream?: boolean;
}

/**
 * Reports what the models of a run say: a streamed generation as one stream (one `delta` write,
 * then its final text), a generation that was not streamed as its text, a turn with only tool
 * calls as nothing (its tool records say it). Every callback counts as progress for heartbeats.
 * Each model call's usage is reported to the sandbox, and a model call is refused with
 * BudgetExhaustedError once the run's budget is exhausted. Its errors are raised, so that fencing
 * and the refusal stop the run; pass it in `callbacks` or use runGraph.
 */
export class WatchdogCallbackHandler extends BaseCallbackHandler {
  name = "agent-watchdog";
  readonly lc_prefer_streaming: boolean;
  private readonly sandbox: Sandbox;
  private readonly options: CallbackOptions;
  private readonly streams = new Map<string, StreamHandle>();
  /** The model name of each model call under way, from its metadata (ls_model_name). */
  private readonly models = new Map<string, string>();
  /** When each model call under way started, for its span. */
  private readonly modelStarts = new Map<string, number>();

  constructor(sandbox: Sandbox, options: CallbackOptions = {}) {
    // Awaited, so reports are written in order and before the run's promise settles.
    super({ raiseError: true, _awaitHandler: true });
    this.sandbox = sandbox;
    this.options = options;
    this.lc_prefer_streaming = options.stream ?? true;
  }

  /** LangChain copies handlers it inherits; this one's state belongs to its sandbox, so it stays one. */
  override copy(): this {
    return this;
  }

  override handleChainStart(): void {
    this.starting();
  }
  override handleToolStart(): void {
    this.starting();
  }
  override handleLLMStart(_llm: unknown, _prompts: unknown, runId: string, _parent?: string, _extra?: unknown, _tags?: unknown, metadata?: Record<string, unknown>): void {
    this.modelStarting(runId, metadata);
  }
  override handleChatModelStart(_llm: unknown, _messages: unknown, runId: string, _parent?: string, _extra?: unknown, _tags?: unknown, metadata?: Record<string, unknown>): void {
    this.modelStarting(runId, metadata);
  }

  override handleLLMNewToken(token: string, _idx: unknown, runId: string): void {
    this.token(token, runId);
  }

  override handleChatModelStreamEvent(event: ChatModelStreamEvent, runId: string): void {
    this.token(event.event === "content-block-delta" && event.delta.type === "text-delta" ? event.delta.text : "", runId);
  }

  override async handleLLMEnd(output: LLMResult, runId: string): Promise<void> {
    this.sandbox.progress();
    this.usage(output, runId);
    const generation = output.generations[0]?.[0];
    const message = generation && "message" in generation ? (generation as ChatGeneration).message : undefined;
    const text = message ? message.text : (generation?.text ?? "");
    const stream = this.streams.get(runId);
    this.streams.delete(runId);
    if (stream) return stream.end(text);
    const toolCalls = (message as { tool_calls?: unknown[] } | undefined)?.tool_calls ?? [];
    if (text.trim() === "" && toolCalls.length > 0) return; // a turn of tool calls, not an empty reply
    await this.sandbox.say(text);
  }

  override handleLLMError(err: unknown, runId: string): void {
    // A failed generation's partial text is not the agent's final text.
    this.streams.delete(runId);
    recordModelCall({ model: this.models.get(runId), startedAt: this.modelStarts.get(runId) ?? Date.now(), error: err instanceof Error ? err.message : String(err) });
    this.modelStarts.delete(runId);
    this.models.delete(runId);
    this.sandbox.progress();
  }

  override handleChainEnd(): void {
    this.sandbox.progress();
  }
  override handleChainError(): void {
    this.sandbox.progress();
  }
  override handleToolEnd(): void {
    this.sandbox.progress();
  }
  override handleToolError(): void {
    this.sandbox.progress();
  }
  override handleToolEvent(): void {
    this.sandbox.progress();
  }
  override handleRetrieverEnd(): void {
    this.sandbox.progress();
  }
  override handleCustomEvent(): void {
    this.sandbox.progress();
  }

  private starting(): void {
    stopper(this.sandbox).signal.throwIfAborted();
    this.sandbox.progress();
  }

  /** Before a model call: refused once the run's budget is exhausted, and the graph stopped with it. */
  private modelStarting(runId: string, metadata: Record<string, unknown> | undefined): void {
    this.starting();
    try {
      this.sandbox.assertWithinBudget();
    } catch (err) {
      stopper(this.sandbox).abort(err);
      throw err;
    }
    const model = metadata?.ls_model_name;
    if (typeof model === "string") this.models.set(runId, model);
    this.modelStarts.set(runId, Date.now());
  }

  /** A model call's usage: its messages' usage_metadata, else what the model put in llmOutput. */
  private usage(output: LLMResult, runId: string): void {
    const named = this.models.get(runId);
    this.models.delete(runId);
    let tokens: Tokens | undefined;
    let responseModel: unknown;
    for (const generation of output.generations.flat()) {
      const message = "message" in generation ? (generation as ChatGeneration).message : undefined;
      const found = tokensOf((message as { usage_metadata?: unknown } | undefined)?.usage_metadata);
      if (!found) continue;
      tokens = { inputTokens: (tokens?.inputTokens ?? 0) + found.inputTokens, outputTokens: (tokens?.outputTokens ?? 0) + found.outputTokens };
      const meta = message?.response_metadata as Record<string, unknown> | undefined;
      responseModel ??= meta?.model_name ?? meta?.model;
    }
    const llmOutput = output.llmOutput as Record<string, unknown> | undefined;
    tokens ??= tokensOf(llmOutput?.tokenUsage) ?? tokensOf(llmOutput?.usage) ?? tokensOf(llmOutput?.estimatedTokenUsage);
    const model = named ?? responseModel ?? llmOutput?.model_name ?? llmOutput?.model;
    reportUsage(this.sandbox, tokens, model, this.options);
    recordModelCall({ model: typeof model === "string" ? model : undefined, startedAt: this.modelStarts.get(runId) ?? Date.now(), tokens });
    this.modelStarts.delete(runId);
  }

  private token(token: string, runId: string): void {
    this.sandbox.progress();
    if (token === "") return; // tool-call deltas and the like: progress, not text
    let stream = this.streams.get(runId);
    if (!stream) this.streams.set(runId, (stream = this.sandbox.beginStream()));
    stream.chunk(token);
  }
}

/** The callback handler for a sandbox: `graph.invoke(input, { callbacks: [watchdogCallbacks(sandbox)] })`. */
export function watchdogCallbacks(sandbox: Sandbox, options: CallbackOptions = {}): WatchdogCallbackHandler {
  return new WatchdogCallbackHandler(sandbox, options);
}

function withHandler(callbacks: Callbacks | undefined, sandbox: Sandbox, options: CallbackOptions): Callbacks {
  const ours = (h: unknown) => h instanceof WatchdogCallbackHandler;
  if (callbacks === undefined) return [watchdogCallbacks(sandbox, options)];
  if (Array.isArray(callbacks)) return callbacks.some(ours) ? callbacks : [...callbacks, watchdogCallbacks(sandbox, options)];
  if (callbacks.handlers.some(ours)) return callbacks;
  const copy = callbacks.copy();
  copy.addHandler(watchdogCallbacks(sandbox, options), true);
  return copy;
}

// ---------------------------------------------------------------------------------------------
// graphs and interrupts

/** What runGraph needs of a compiled graph: StateGraph.compile(), createReactAgent(), entrypoint(). */
export interface Graph {
  invoke(input: never, config?: never): Promise<unknown>;
  getState(config: RunnableConfig): Promise<StateSnapshot>;
  checkpointer?: unknown;
}

export interface RunGraphOptions extends CallbackOptions {
  /** The question asked for an interrupt's value. Default: a string value, or its `question`, `description` or `message`, or its JSON. */
  question?: (value: unknown, interrupt: Interrupt) => string;
  /** What the graph is resumed with for an answer. Default: the answer's text. */
  resume?: (answer: string, interrupt: Interrupt) => unknown;
}

/**
 * Runs a LangGraph graph to its end with the watchdog callback handler. Each time the graph stops
 * on interrupt(), every pending interrupt becomes an approval request (sandbox.awaitApproval) and
 * the graph resumes with `new Command({ resume })`; a breakpoint (interruptBefore/After) is asked
 * as "Continue with <nodes>?" and resumed with null. Rejected or timed out: ApprovalDeniedError.
 * The graph needs a checkpointer to resume; the thread is one per attempt unless
 * config.configurable.thread_id names one.
 */
export async function runGraph<G extends Graph>(
  sandbox: Sandbox,
  graph: G,
  input: Parameters<G["invoke"]>[0],
  config?: Parameters<G["invoke"]>[1],
  options: RunGraphOptions = {},
): Promise<Awaited<ReturnType<G["invoke"]>>> {
  const given = (config ?? {}) as RunnableConfig;
  const stop = stopper(sandbox);
  stop.signal.throwIfAborted();
  const run: RunnableConfig = {
    ...given,
    configurable: { thread_id: `${sandbox.runName}-attempt-${sandbox.attempt}`, ...given.configurable },
    callbacks: withHandler(given.callbacks, sandbox, options),
    signal: AbortSignal.any([sandbox.signal, stop.signal, ...(given.signal ? [given.signal] : [])]),
  };
  const question = options.question ?? defaultQuestion;
  const resume = options.resume ?? ((answer: string) => answer);
  let next: unknown = input;
  for (;;) {
    let result: unknown;
    try {
      result = await graph.invoke(next as never, run as never);
    } catch (err) {
      // An aborted graph throws its own "Abort": say why it was stopped instead.
      stop.signal.throwIfAborted();
      if (sandbox.fenced) sandbox.signal.throwIfAborted();
      throw err;
    }
    stop.signal.throwIfAborted();
    const interrupts = isInterrupted(result) ? result[INTERRUPT] : undefined;
    if (interrupts === undefined) return result as Awaited<ReturnType<G["invoke"]>>;
    if (!graph.checkpointer) throw new Error("the graph stopped on an interrupt but has no checkpointer to resume from: compile it with { checkpointer: new MemorySaver() }");
    if (interrupts.length === 0) {
      const { next: nodes } = await graph.getState(run);
      if (nodes.length === 0) return result as Awaited<ReturnType<G["invoke"]>>;
      await sandbox.awaitApproval(`Continue with ${nodes.join(", ")}?`);
      next = null;
      continue;
    }
    const answers: [string | undefined, unknown][] = [];
    for (const interrupt of interrupts) {
      const answer = await sandbox.awaitApproval(question(interrupt.value, interrupt));
      answers.push([interrupt.id, resume(answer, interrupt)]);
    }
    // One interrupt takes its value; several take a map by interrupt id.
    next = new Command({ resume: answers.length === 1 ? answers[0]?.[1] : Object.fromEntries(answers) });
  }
}

function defaultQuestion(value: unknown): string {
  if (typeof value === "string") return value;
  if (typeof value === "object" && value !== null) {
    for (const key of ["question", "description", "message"]) {
      const text = (value as Record<string, unknown>)[key];
      if (typeof text === "string") return text;
    }
  }
  return JSON.stringify(value) ?? String(value);
}
