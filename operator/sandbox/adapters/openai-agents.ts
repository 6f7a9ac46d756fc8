// The OpenAI Agents SDK (@openai/agents) under the sandbox protocol.
//
//   import { run, tool } from "@agent-watchdog/sandbox/openai-agents";
//   await runAgent(async (sandbox) => {
//     await run(sandbox, agent, sandbox.goal ?? "", { idempotent: ["lookup"], stream: true });
//   });
//
// Tools. The SDK's lifecycle hooks (agent_tool_start / agent_tool_end) only observe: they cannot
// hold a call until Started is committed, nor hand back a saved result instead of running it. So
// the adapter replaces each function tool's invoke(), which is what the runner calls, with one
// that goes through callTool. A tool made with the SDK's tool() turns a thrown error into a fixed
// text for the model before anything outside it sees the error; this module's tool() is the same
// function with errorFunction defaulting to null, so the error reaches callTool (recorded Failed)
// and the adapter hands the model its message. The hooks serve as progress for the heartbeat.
//
// Approvals. A tool with needsApproval ends the SDK's run with interruptions; run() asks
// sandbox.awaitApproval for each, approves it in the RunState and runs again from that state.
//
// Usage. The runner adds each model response's usage into the run context's Usage, which the
// agent hooks are handed: what it grew by since the adapter last looked is reported with
// sandbox.recordUsage() at every hook (a model call is followed by its tool calls, a handoff or
// the agent's end), before every model call and when the run ends. run() also refuses each model
// call (callModelInputFilter, called just before it) once the run's budget is exhausted, with
// BudgetExhaustedError.
import {
  Agent,
  Handoff,
  RunContext,
  Runner,
  tool as sdkTool,
  type AgentInputItem,
  type CallModelInputFilter,
  type FunctionTool,
  type NonStreamRunOptions,
  type RunConfig,
  type RunResult,
  type RunState,
  type RunToolApprovalItem,
  type StreamedRunResult,
  type Tool,
} from "@openai/agents";
import { ToolError } from "../errors.ts";
import type { Sandbox, StreamHandle } from "../sandbox.ts";
import type { ToolContext } from "../tool-runner.ts";
import { callTool, mustStop, reportUsage, tokensOf, type AdapterOptions, type Tokens, type UsageOptions } from "./common.ts";

export type { AdapterOptions, IdempotentTools, UsageOptions } from "./common.ts";

/**
 * The SDK's tool(), except that errorFunction defaults to null: an error the tool throws then
 * reaches the watchdog, which records the call Failed and hands the model the error's message.
 * Pass your own errorFunction to turn errors into results yourself (the call is then Succeeded).
 */
export const tool: typeof sdkTool = (options) => sdkTool({ errorFunction: null, ...options } as typeof options);

const contexts = new WeakMap<object, ToolContext>();

/**
 * The protocol's view of the call a tool's execute() is running in (idempotency key, rerun,
 * signal), from the `details` the SDK passes as its third argument.
 */
export function toolContext(details: unknown): ToolContext | undefined {
  return typeof details === "object" && details !== null ? contexts.get(details) : undefined;
}

const HOOK_EVENTS = ["agent_start", "agent_end", "agent_handoff", "agent_tool_start", "agent_tool_end"] as const;
type Emitter = { on(type: string, listener: (...args: unknown[]) => void): unknown; emit(type: string, ...args: unknown[]): boolean };
// The SDK's own signatures take agents and tools of any context and output.
/* eslint-disable @typescript-eslint/no-explicit-any */
type AnyAgent = Agent<any, any>;
type AnyTool = Tool<any>;
type AnyHandoff = Handoff<any, any>;
type AnyFunctionTool = FunctionTool<any, any, any>;
/* eslint-enable @typescript-eslint/no-explicit-any */

/** A copy with the same prototype, getters and symbol-keyed properties, and some overridden. */
function copyOf<T extends object>(value: T, overrides: Partial<T>): T {
  return Object.assign(Object.create(Object.getPrototypeOf(value) as object, Object.getOwnPropertyDescriptors(value)) as T, overrides);
}

function parseArgs(input: string): unknown {
  try {
    return JSON.parse(input) as unknown;
  } catch {
    return input; // the SDK's own parsing reports it to the model
  }
}

/**
 * Follows the Usage objects the runner accumulates in run contexts: the first sight of one is its
 * baseline (what a resumed RunState spent before, in this attempt or an earlier one, was reported
 * then), and each later look reports what it grew by. The runner shows a context to the hooks
 * before its first model call (agent_start), and to run() before it resumes a state.
 */
class UsageFollower {
  private readonly seen = new WeakMap<object, Tokens>();
  private current: object | undefined;
  private model: string | undefined;
  private readonly sandbox: Sandbox;
  private readonly options: UsageOptions;
  defaultModel: string | undefined;

  constructor(sandbox: Sandbox, options: UsageOptions) {
    this.sandbox = sandbox;
    this.options = options;
  }

  /** Looks at a run context (or anything with the runner's `usage`), and the agent it runs, if known. */
  look(context: unknown, agent?: AnyAgent): void {
    if (agent) this.model = modelOf(agent) ?? this.defaultModel;
    const usage = typeof context === "object" && context !== null ? (context as { usage?: unknown }).usage : undefined;
    if (typeof usage !== "object" || usage === null) return;
    this.current = usage;
    this.report(usage);
  }

  /** Looks again at the context seen last: before a model call, whose filter is not handed it. */
  again(agent?: AnyAgent): void {
    if (agent) this.model = modelOf(agent) ?? this.defaultModel;
    if (this.current) this.report(this.current);
  }

  private report(usage: object): void {
    const now = tokensOf(usage) ?? { inputTokens: 0, outputTokens: 0 };
    const before = this.seen.get(usage);
    this.seen.set(usage, now);
    if (!before) return;
    const grown = { inputTokens: Math.max(0, now.inputTokens - before.inputTokens), outputTokens: Math.max(0, now.outputTokens - before.outputTokens) };
    reportUsage(this.sandbox, grown, this.model ?? this.defaultModel, this.options);
  }
}

/** The model an agent names, when it names one. */
function modelOf(agent: AnyAgent): string | undefined {
  return typeof agent.model === "string" && agent.model !== "" ? agent.model : undefined;
}

function wrapper(sandbox: Sandbox, options: AdapterOptions & UsageOptions, usage = new UsageFollower(sandbox, options)) {
  const tools = new WeakMap<object, AnyTool>();
  const agents = new WeakMap<object, AnyAgent>();

  function wrapFunctionTool(t: AnyFunctionTool): AnyFunctionTool {
    const invoke: AnyFunctionTool["invoke"] = async (runContext, input, details) => {
      try {
        return await callTool(sandbox, t.name, parseArgs(input), (_args, ctx) => {
          const inner = details ? copyOf(details, {}) : {};
          contexts.set(inner, ctx);
          return t.invoke(runContext, input, inner);
        }, options);
      } catch (err) {
        // A failed call goes to the model as the tool's output and the run goes on; anything
        // else (an unconfirmed side effect, fencing, a status write that failed) ends the run.
        if (err instanceof ToolError) return `Error running tool ${t.name}: ${err.message}`;
        throw err;
      }
    };
    return copyOf(t, { invoke });
  }

  function wrapTool(t: AnyTool): AnyTool {
    if (t.type !== "function") return t; // hosted and built-in tools: see the doc page
    let wrapped = tools.get(t);
    if (!wrapped) tools.set(t, (wrapped = wrapFunctionTool(t)));
    return wrapped;
  }

  function wrapAgent(agent: AnyAgent): AnyAgent {
    const known = agents.get(agent);
    if (known) return known;
    const wrapped = agent.clone({});
    agents.set(agent, wrapped); // before the handoffs: they may lead back here
    wrapped.tools = agent.tools.map(wrapTool);
    wrapped.handoffs = agent.handoffs.map((h) => (h instanceof Agent ? wrapAgent(h) : h instanceof Handoff ? wrapHandoff(h) : h));
    const getMcpTools = wrapped.getMcpTools.bind(wrapped);
    wrapped.getMcpTools = async (...args) => (await getMcpTools(...args)).map(wrapTool);
    // The runner emits agent hooks on the agent it runs, this copy: count them as progress, look
    // at the usage in the run context they are handed, and pass them on to listeners of the original.
    for (const event of HOOK_EVENTS) {
      (wrapped as unknown as Emitter).on(event, (...args) => {
        sandbox.progress();
        usage.look(args[0], agent);
        (agent as unknown as Emitter).emit(event, ...args);
      });
    }
    return wrapped;
  }

  function wrapHandoff(h: AnyHandoff): AnyHandoff {
    return copyOf(h, {
      agent: wrapAgent(h.agent),
      onInvokeHandoff: async (context, args) => wrapAgent(await h.onInvokeHandoff(context, args)),
    });
  }

  return { wrapAgent, wrapTool };
}

/** The tools with every function tool's calls run under the protocol; others as they are. */
export function watchdogTools<T extends AnyTool>(sandbox: Sandbox, tools: readonly T[], options: AdapterOptions = {}): T[] {
  const { wrapTool } = wrapper(sandbox, options);
  return tools.map((t) => wrapTool(t) as T);
}

/**
 * A copy of the agent whose function tools (its own, its MCP servers' and those of the agents it
 * hands off to) run under the protocol, and whose lifecycle hooks count as progress and report
 * the usage the runner has added up so far. To refuse model calls once the run's budget is
 * exhausted under your own Runner, pass watchdogInputFilter(sandbox) as callModelInputFilter;
 * run() does both.
 */
export function watchdogAgent<TAgent extends AnyAgent>(sandbox: Sandbox, agent: TAgent, options: AdapterOptions & UsageOptions = {}): TAgent {
  return wrapper(sandbox, options).wrapAgent(agent) as TAgent;
}

/**
 * A callModelInputFilter that refuses each model call with BudgetExhaustedError once the run's
 * budget is exhausted, and otherwise hands the input to `filter` (or on, unchanged).
 */
export function watchdogInputFilter(sandbox: Pick<Sandbox, "assertWithinBudget">, filter?: CallModelInputFilter, before?: (agent: AnyAgent) => void): CallModelInputFilter {
  const refusing = async (args: Parameters<CallModelInputFilter>[0]) => {
    before?.(args.agent);
    sandbox.assertWithinBudget();
    return filter ? filter(args) : args.modelData;
  };
  // Without a filter of its own, the input is passed on as it is: its items need not be copies.
  return Object.assign(refusing, { preserveInputIdentity: filter ? filter.preserveInputIdentity : true });
}

export interface RunOptions<TContext = undefined> extends AdapterOptions, UsageOptions, Omit<NonStreamRunOptions<TContext>, "stream"> {
  /** Stream the model's output: one `delta` activity for the run, then its final text. */
  stream?: boolean;
  /** Runner to use as it is. Default: a Runner of `runConfig`. */
  runner?: Runner;
  /** Config of the default Runner; tracing is off unless this turns it on. */
  runConfig?: Partial<RunConfig>;
  /** The question a tool's approval request asks a person. */
  question?: (item: RunToolApprovalItem) => string;
}

export type AgentRunResult<TContext, TAgent extends AnyAgent> = RunResult<TContext, TAgent> | StreamedRunResult<TContext, TAgent>;

const defaultQuestion = (item: RunToolApprovalItem) => `Allow ${item.agent.name} to call ${item.name ?? "a tool"} with ${item.arguments ?? "no arguments"}?`;

/** An error the runner wrapped (ToolCallError.error, cause) that must stop the agent. */
function stopCause(err: unknown, depth = 0): unknown {
  if (mustStop(err)) return err;
  if (depth > 4 || typeof err !== "object" || err === null) return undefined;
  const e = err as { error?: unknown; cause?: unknown };
  return stopCause(e.error, depth + 1) ?? stopCause(e.cause, depth + 1);
}

/**
 * Runs the agent to its final output under the protocol: tool calls recorded (see
 * watchdogAgent), approvals asked through sandbox.awaitApproval, the final output reported as
 * the agent's text (streamed when `stream` is set), each model response's usage reported to the
 * sandbox, and each model call refused once the run's budget is exhausted. An approval that is
 * rejected or times out throws ApprovalDeniedError; an unconfirmed side effect, fencing and an
 * exhausted budget (BudgetExhaustedError) are thrown as they are.
 */
export async function run<TAgent extends AnyAgent, TContext = undefined>(
  sandbox: Sandbox,
  agent: TAgent,
  input: string | AgentInputItem[] | RunState<TContext, TAgent>,
  options: RunOptions<TContext> = {},
): Promise<AgentRunResult<TContext, TAgent>> {
  const { idempotent, stream = false, runner: given, runConfig, question = defaultQuestion, signal, reportUsage: report, model, ...rest } = options;
  const runner = given ?? new Runner({ tracingDisabled: true, ...runConfig });
  const usageOptions: UsageOptions = { ...(report === undefined ? {} : { reportUsage: report }), ...(model === undefined ? {} : { model }) };
  const usage = new UsageFollower(sandbox, usageOptions);
  usage.defaultModel = typeof runner.config.model === "string" && runner.config.model !== "" ? runner.config.model : undefined;
  const wrapped = wrapper(sandbox, { ...(idempotent === undefined ? {} : { idempotent }), ...usageOptions }, usage).wrapAgent(agent) as TAgent;
  const abort = signal ? AbortSignal.any([signal, sandbox.signal]) : sandbox.signal;
  const runOptions = {
    ...rest,
    callModelInputFilter: watchdogInputFilter(sandbox, rest.callModelInputFilter ?? runner.config.callModelInputFilter, (a) => usage.again(a)),
  };
  // What a resumed state (or a context handed in) spent before is its baseline, not this run's.
  if (isRunState(input)) usage.look({ usage: input.usage });
  if (rest.context instanceof RunContext) usage.look(rest.context);
  let handle: StreamHandle | undefined;
  let next = input;
  try {
    for (;;) {
      let result: AgentRunResult<TContext, TAgent>;
      if (stream) {
        const streamed = await runner.run(wrapped, next, { ...runOptions, signal: abort, stream: true });
        for await (const event of streamed) {
          sandbox.progress();
          if (event.type === "raw_model_stream_event" && event.data.type === "output_text_delta") {
            handle ??= sandbox.beginStream(); // once per run, at its first text
            handle.chunk(event.data.delta);
          }
        }
        await streamed.completed;
        result = streamed;
      } else {
        result = await runner.run(wrapped, next, { ...runOptions, signal: abort });
      }
      usage.look({ usage: result.state.usage }, result.lastAgent);

      if (result.interruptions.length === 0) {
        const out: unknown = result.finalOutput;
        const text = out === undefined ? "" : typeof out === "string" ? out : JSON.stringify(out);
        await (handle ? handle.end(text) : sandbox.say(text));
        return result;
      }
      // Rejected or timed out: awaitApproval throws and the operator fails the run.
      for (const item of result.interruptions) {
        await sandbox.awaitApproval(question(item));
        result.state.approve(item);
      }
      next = result.state;
    }
  } catch (err) {
    usage.again();
    throw stopCause(err) ?? err;
  }
}

function isRunState(input: unknown): input is RunState<unknown, AnyAgent> {
  return typeof input === "object" && input !== null && !Array.isArray(input) && "usage" in input && "_context" in input;
}
