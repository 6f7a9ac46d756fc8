// The LangChain / LangGraph adapter against the in-memory API (fake-api.ts): LangGraph graphs with
// LangChain's own fake chat model, and a scripted one where the model must call tools.
import type { CallbackManagerForLLMRun } from "@langchain/core/callbacks/manager";
import { BaseChatModel } from "@langchain/core/language_models/chat_models";
import { AIMessage, AIMessageChunk, ToolMessage, type BaseMessage } from "@langchain/core/messages";
import { ChatGenerationChunk, type ChatResult } from "@langchain/core/outputs";
import { tool } from "@langchain/core/tools";
import { FakeListChatModel } from "@langchain/core/utils/testing";
import { END, MemorySaver, MessagesAnnotation, START, StateGraph, interrupt } from "@langchain/langgraph";
import { ToolNode, toolsCondition } from "@langchain/langgraph/prebuilt";
import { afterEach, describe, expect, it, vi } from "vitest";
import { z } from "zod";
import { runGraph, toolContext, watchdogCallbacks, watchdogTools, type LangChainTool } from "../../../../operator/sandbox/adapters/langchain.ts";
import { BudgetExhaustedError, UnconfirmedSideEffectError } from "../../../../operator/sandbox/errors.ts";
import type { Sandbox } from "../../../../operator/sandbox/sandbox.ts";
import { FakeApi } from "../fake-api.ts";
import { abandonSandboxes, nextAttempt as secondAttempt, startSandbox as start, until } from "./support.ts";

afterEach(abandonSandboxes);

/** The activity kinds the sandbox wrote, in order. */
const activities = (api: FakeApi) => api.patches.map((p: any) => p.status?.heartbeat?.activity?.kind).filter(Boolean);
const agentTexts = (sandbox: Sandbox) => sandbox.transcript.filter((e) => e.role === "agent" && e.kind === "text").map((e) => e.text);
const now = () => new Date().toISOString();

/**
 * None of LangChain's fake chat models calls tools in turn, so this one is scripted: it makes the
 * given tool calls, and once their results are in, answers with them (streamed word by word).
 */
class ScriptedModel extends BaseChatModel {
  readonly turns: BaseMessage[][] = [];
  private readonly calls: { name: string; args: Record<string, unknown> }[];
  /** Each turn's usage, as a provider reports it in usage_metadata; none by default. */
  private readonly tokens: { input: number; output: number } | undefined;

  constructor(calls: { name: string; args: Record<string, unknown> }[], tokens?: { input: number; output: number }) {
    super({});
    this.calls = calls;
    this.tokens = tokens;
  }

  _llmType(): string {
    return "scripted";
  }

  override getLsParams(options: this["ParsedCallOptions"]) {
    return { ...super.getLsParams(options), ls_model_name: "scripted-1" };
  }

  private get usage_metadata() {
    return this.tokens && { input_tokens: this.tokens.input, output_tokens: this.tokens.output, total_tokens: this.tokens.input + this.tokens.output };
  }

  /** What the model was handed as tool results in its `turn`th turn (0-based). */
  toolResults(turn: number): ToolMessage[] {
    return (this.turns[turn] ?? []).filter((m) => ToolMessage.isInstance(m));
  }

  private reply(messages: BaseMessage[]): AIMessage {
    this.turns.push(messages);
    const results = messages.filter((m) => ToolMessage.isInstance(m));
    const { usage_metadata } = this;
    if (results.length === 0) {
      return new AIMessage({ content: "", tool_calls: this.calls.map((c, i) => ({ ...c, id: `call-${i}`, type: "tool_call" as const })), usage_metadata });
    }
    return new AIMessage({ content: `answer: ${results.map((m) => String(m.content)).join(" | ")}`, usage_metadata });
  }

  async _generate(messages: BaseMessage[]): Promise<ChatResult> {
    const message = this.reply(messages);
    return { generations: [{ text: message.text, message }] };
  }

  override async *_streamResponseChunks(messages: BaseMessage[], _options: this["ParsedCallOptions"], runManager?: CallbackManagerForLLMRun): AsyncGenerator<ChatGenerationChunk> {
    const message = this.reply(messages);
    if (message.tool_calls?.length) {
      yield new ChatGenerationChunk({ text: "", message: new AIMessageChunk({ content: "", tool_calls: message.tool_calls, usage_metadata: message.usage_metadata }) });
      return;
    }
    const words = message.text.split(/(?<= )/);
    for (const [i, word] of words.entries()) {
      // The usage comes with the last chunk, as providers stream it.
      const chunk = new ChatGenerationChunk({ text: word, message: new AIMessageChunk({ content: word, usage_metadata: i === words.length - 1 ? message.usage_metadata : undefined }) });
      yield chunk;
      await runManager?.handleLLMNewToken(word, undefined, undefined, undefined, undefined, { chunk });
    }
  }
}

/** The usual agent loop: the model, then the tools it asked for, until it answers. */
function agentGraph(model: BaseChatModel, tools: LangChainTool[]) {
  return new StateGraph(MessagesAnnotation)
    .addNode("agent", async (state) => ({ messages: [await model.invoke(state.messages)] }))
    .addNode("tools", new ToolNode(tools))
    .addEdge(START, "agent")
    .addConditionalEdges("agent", toolsCondition, ["tools", END])
    .addEdge("tools", "agent")
    .compile({ checkpointer: new MemorySaver() });
}

const ask = (text: string) => ({ messages: [{ role: "user", content: text }] });

function lookupTool(fn: (topic: string) => unknown) {
  return tool(async ({ topic }: { topic: string }) => fn(topic), { name: "lookup", description: "Looks up a fact.", schema: z.object({ topic: z.string() }) });
}

describe("tool calls", () => {
  it("are recorded Started before the tool runs, then Succeeded with the result the model gets", async () => {
    const api = new FakeApi();
    const sandbox = await start(api);
    let recordsWhileRunning: unknown;
    let keySeen: string | undefined;
    const lookup = tool(
      async ({ topic }: { topic: string }, config) => {
        recordsWhileRunning = structuredClone(api.status.toolCalls);
        keySeen = toolContext(config)?.idempotencyKey;
        return { fact: `a fact about ${topic}` };
      },
      { name: "lookup", description: "Looks up a fact.", schema: z.object({ topic: z.string() }) },
    );
    const model = new ScriptedModel([{ name: "lookup", args: { topic: "tides" } }]);

    const final = await runGraph(sandbox, agentGraph(model, watchdogTools(sandbox, [lookup], { idempotent: ["lookup"] })), ask("tides?"));

    expect(recordsWhileRunning).toEqual([expect.objectContaining({ name: "lookup", state: "Started", idempotent: true, attempt: 1 })]);
    const result = JSON.stringify({ fact: "a fact about tides" });
    expect(api.status.toolCalls).toEqual([expect.objectContaining({ name: "lookup", state: "Succeeded", result })]);
    expect(keySeen).toBe(api.status.toolCalls[0].idempotencyKey);
    expect(model.toolResults(1).map((m) => [m.status, m.content])).toEqual([["success", result]]);
    expect(final.messages.at(-1)?.text).toBe(`answer: ${result}`);
    // The tool-call turn is no reply; the answer is one stream and its text.
    expect(activities(api)).toEqual(["toolResult", "delta", "text"]);
    expect(agentTexts(sandbox)).toEqual([`answer: ${result}`]);
  });

  it("records a throwing tool Failed and hands the error to the model, and the run goes on", async () => {
    const api = new FakeApi();
    const sandbox = await start(api);
    const lookup = lookupTool(() => {
      throw new Error("the service is down");
    });
    const model = new ScriptedModel([{ name: "lookup", args: { topic: "tides" } }]);

    const final = await runGraph(sandbox, agentGraph(model, watchdogTools(sandbox, [lookup])), ask("tides?"));

    expect(api.status.toolCalls).toEqual([expect.objectContaining({ name: "lookup", state: "Failed", error: { message: "the service is down" } })]);
    const [result] = model.toolResults(1);
    expect(result?.status).toBe("error");
    expect(result?.content).toContain("the service is down");
    expect(final.messages.at(-1)?.text).toContain("the service is down");
    expect(api.status.heartbeat.activity.kind).toBe("text");
  });

  it("in a second attempt, returns the saved result without running the tool again", async () => {
    const api = new FakeApi();
    const one = await start(api);
    const first = vi.fn((topic: string) => ({ fact: `a fact about ${topic}` }));
    await runGraph(one, agentGraph(new ScriptedModel([{ name: "lookup", args: { topic: "tides" } }]), watchdogTools(one, [lookupTool(first)], { idempotent: ["lookup"] })), ask("tides?"));
    expect(first).toHaveBeenCalledTimes(1);

    const two = await secondAttempt(api, one);
    const again = vi.fn((topic: string) => ({ fact: `another fact about ${topic}` }));
    const model = new ScriptedModel([{ name: "lookup", args: { topic: "tides" } }]);
    const final = await runGraph(two, agentGraph(model, watchdogTools(two, [lookupTool(again)], { idempotent: ["lookup"] })), ask("tides?"));

    expect(again).not.toHaveBeenCalled();
    const saved = JSON.stringify({ fact: "a fact about tides" });
    expect(model.toolResults(1).map((m) => m.content)).toEqual([saved]);
    expect(final.messages.at(-1)?.text).toBe(`answer: ${saved}`);
    expect(api.status.toolCalls).toEqual([expect.objectContaining({ attempt: 1, state: "Succeeded", result: saved })]);
  });

  it("stops a second attempt with UnconfirmedSideEffectError at a non-idempotent call left Started, without telling the model", async () => {
    const api = new FakeApi();
    const one = await start(api);
    const charge = (fn: () => unknown) =>
      tool(async () => fn(), { name: "charge", description: "Charges a card.", schema: z.object({ cents: z.number() }) });
    const hung = runGraph(one, agentGraph(new ScriptedModel([{ name: "charge", args: { cents: 100 } }]), watchdogTools(one, [charge(() => new Promise(() => {}))])), ask("pay")).catch((err: unknown) => err);
    await until("the charge to be recorded Started", () => api.status.toolCalls?.[0]?.state === "Started");

    const two = await secondAttempt(api, one);
    expect(await hung).toBeInstanceOf(Error); // attempt 1's graph was aborted with its sandbox
    const again = vi.fn(() => "charged");
    const model = new ScriptedModel([{ name: "charge", args: { cents: 100 } }]);
    await expect(runGraph(two, agentGraph(model, watchdogTools(two, [charge(again)])), ask("pay"))).rejects.toThrow(UnconfirmedSideEffectError);

    expect(again).not.toHaveBeenCalled();
    expect(model.turns).toHaveLength(1); // the model never saw the refusal
    expect(api.status.toolCalls).toEqual([expect.objectContaining({ attempt: 1, state: "Started", idempotent: false })]);
  });
});

describe("model text", () => {
  const chat = () =>
    new StateGraph(MessagesAnnotation)
      .addNode("agent", async (state) => ({ messages: [await new FakeListChatModel({ responses: ["Hello from the stream"] }).invoke(state.messages)] }))
      .addEdge(START, "agent")
      .addEdge("agent", END)
      .compile();

  it("reports a streamed generation as one delta write and its final text", async () => {
    const api = new FakeApi();
    const sandbox = await start(api);
    await runGraph(sandbox, chat(), ask("hi"));
    expect(activities(api)).toEqual(["delta", "text"]);
    expect(agentTexts(sandbox)).toEqual(["Hello from the stream"]);
  });

  it("reports a generation that was not streamed as its text", async () => {
    const api = new FakeApi();
    const sandbox = await start(api);
    await runGraph(sandbox, chat(), ask("hi"), undefined, { stream: false });
    expect(activities(api)).toEqual(["text"]);
    expect(agentTexts(sandbox)).toEqual(["Hello from the stream"]);
  });
});

describe("usage and the run's budget", () => {
  it.each([true, false])("reports each model call's usage_metadata under ls_model_name (streamed: %s), and counts the tool call", async (stream) => {
    const api = new FakeApi();
    const sandbox = await start(api);
    const model = new ScriptedModel([{ name: "lookup", args: { topic: "tides" } }], { input: 700, output: 30 });
    await runGraph(sandbox, agentGraph(model, watchdogTools(sandbox, [lookupTool(() => "a fact")])), ask("tides?"), undefined, { stream });
    expect(model.turns).toHaveLength(2);
    expect(api.status.heartbeat.usage).toEqual({ inputTokens: 1400, outputTokens: 60, toolCalls: 1, model: "scripted-1" });
  });

  it("reads llmOutput.tokenUsage when the messages carry no usage_metadata", async () => {
    const sandbox = await start(new FakeApi());
    await watchdogCallbacks(sandbox).handleLLMEnd({ generations: [[{ text: "hi" }]], llmOutput: { tokenUsage: { promptTokens: 12, completionTokens: 3, totalTokens: 15 } } }, "run-1");
    expect(sandbox.usage).toMatchObject({ inputTokens: 12, outputTokens: 3 });
  });

  it("refuses the next model call once the run's budget is exhausted, and runGraph ends with BudgetExhaustedError", async () => {
    const api = new FakeApi({}, { budget: { outputTokens: 30 } });
    const sandbox = await start(api);
    const fn = vi.fn(() => "a fact");
    const model = new ScriptedModel([{ name: "lookup", args: { topic: "tides" } }], { input: 700, output: 30 });
    const error = vi.spyOn(console, "error").mockImplementation(() => {}); // LangChain logs what a handler raises
    try {
      await expect(runGraph(sandbox, agentGraph(model, watchdogTools(sandbox, [lookupTool(fn)])), ask("tides?"))).rejects.toThrow(BudgetExhaustedError);
    } finally {
      error.mockRestore();
    }
    // The first call reached the limit: its tool is not run, and the model is not called again.
    expect(model.turns).toHaveLength(1);
    expect(fn).not.toHaveBeenCalled();
    expect(api.status.heartbeat.usage).toMatchObject({ inputTokens: 700, outputTokens: 30 });
  });

  it("refuses the first model call when ended attempts spent the budget", async () => {
    const api = new FakeApi({ attempt: 2, spent: { inputTokens: 5000, outputTokens: 0, cost: "0", toolCalls: 0, throughAttempt: 1 } }, { budget: { inputTokens: 5000 } });
    const sandbox = await start(api, 2);
    const model = new ScriptedModel([]);
    const error = vi.spyOn(console, "error").mockImplementation(() => {});
    try {
      await expect(runGraph(sandbox, agentGraph(model, []), ask("hi"), undefined, { stream: false })).rejects.toThrow(/input token budget: 5000 of 5000/);
    } finally {
      error.mockRestore();
    }
    expect(model.turns).toHaveLength(0);
  });
});

describe("interrupts", () => {
  /** Plays the operator: the request is opened, then approved with `answer`. */
  async function approve(api: FakeApi, question: string, answer: string): Promise<void> {
    await until("the sandbox to await a reply", () => api.status.heartbeat?.state === "AwaitingReply");
    expect(api.status.checkpoint).toMatchObject({ data: { "watchdog.dev/approval-request": { question } } });
    api.operator({ phase: "AwaitingReply", approval: { state: "Pending", requestedAt: now() } });
    api.operator({ phase: "Planning", approval: { state: "Approved", answer, decidedAt: now() } });
  }

  it("asks interrupt()'s question as an approval and resumes the graph with the answer", async () => {
    const api = new FakeApi();
    const sandbox = await start(api);
    const graph = new StateGraph(MessagesAnnotation)
      .addNode("confirm", () => ({ messages: [new AIMessage(`deploying: ${interrupt<string, string>("Deploy to production?")}`)] }))
      .addEdge(START, "confirm")
      .addEdge("confirm", END)
      .compile({ checkpointer: new MemorySaver() });

    const done = runGraph(sandbox, graph, ask("deploy"));
    await approve(api, "Deploy to production?", "go");
    const final = await done;

    expect(final.messages.at(-1)?.text).toBe("deploying: go");
    expect(api.status.heartbeat.state).toBe("Planning");
  });

  it("asks for an interrupt() inside a tool, then runs the tool with the answer", async () => {
    const api = new FakeApi();
    const sandbox = await start(api);
    const sent: string[] = [];
    const send = tool(
      async ({ to }: { to: string }) => {
        const answer = interrupt<string, string>(`Send the report to ${to}?`);
        sent.push(`${to}: ${answer}`);
        return "sent";
      },
      { name: "send", description: "Sends the report.", schema: z.object({ to: z.string() }) },
    );
    const model = new ScriptedModel([{ name: "send", args: { to: "bob" } }]);

    const done = runGraph(sandbox, agentGraph(model, watchdogTools(sandbox, [send])), ask("send it"));
    await approve(api, "Send the report to bob?", "yes");
    const final = await done;

    expect(sent).toEqual(["bob: yes"]);
    expect(final.messages.at(-1)?.text).toBe("answer: sent");
    // The paused call did not finish; the one after the answer did.
    expect(api.status.toolCalls.map((c: any) => c.state)).toEqual(["Failed", "Succeeded"]);
    expect(api.status.toolCalls[1].result).toBe('"sent"');
  });
});
