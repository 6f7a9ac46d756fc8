// An agent built on LangGraph.js, reporting to its AgentRun through the LangChain adapter. The
// model is a scripted fake so the example runs without a network: it asks for one `lookup`, then
// answers with what the tool found, streaming its answer word by word.
//
// In a project the imports are "@agent-watchdog/sandbox" and "@agent-watchdog/sandbox/langchain".
import { appendFile } from "node:fs/promises";
import type { CallbackManagerForLLMRun } from "@langchain/core/callbacks/manager";
import { BaseChatModel } from "@langchain/core/language_models/chat_models";
import { AIMessage, AIMessageChunk, ToolMessage, type BaseMessage } from "@langchain/core/messages";
import { ChatGenerationChunk, type ChatResult } from "@langchain/core/outputs";
import { tool } from "@langchain/core/tools";
import { END, MemorySaver, MessagesAnnotation, START, StateGraph } from "@langchain/langgraph";
import { ToolNode, toolsCondition } from "@langchain/langgraph/prebuilt";
import { z } from "zod";
import { runGraph, watchdogTools } from "../adapters/langchain.ts";
import { runAgent } from "../index.ts";

/** What each turn says it used, as providers report it: the adapter adds it to the attempt's usage. */
const usage_metadata = { input_tokens: 120, output_tokens: 30, total_tokens: 150 };

/** Calls `lookup` once, then answers with the fact the tool returned. */
class ScriptedModel extends BaseChatModel {
  private readonly topic: string;

  constructor(topic: string) {
    super({});
    this.topic = topic;
  }

  _llmType(): string {
    return "scripted";
  }

  // The script ignores the tool definitions a real model would be given.
  override bindTools(): this {
    return this;
  }

  private reply(messages: BaseMessage[]): AIMessage {
    const last = messages.at(-1);
    if (!ToolMessage.isInstance(last)) {
      return new AIMessage({ content: "", tool_calls: [{ id: "call-1", name: "lookup", args: { topic: this.topic }, type: "tool_call" }], usage_metadata });
    }
    const content = String(last.content);
    let fact = content;
    try {
      fact = (JSON.parse(content) as { fact: string }).fact;
    } catch {
      // the tool failed: its error text is what there is to say
    }
    return new AIMessage({ content: `Here is what I found: ${fact}.`, usage_metadata });
  }

  async _generate(messages: BaseMessage[]): Promise<ChatResult> {
    const message = this.reply(messages);
    return { generations: [{ text: message.text, message }] };
  }

  override async *_streamResponseChunks(messages: BaseMessage[], _options: this["ParsedCallOptions"], runManager?: CallbackManagerForLLMRun): AsyncGenerator<ChatGenerationChunk> {
    const message = this.reply(messages);
    if (message.tool_calls?.length) {
      yield new ChatGenerationChunk({ text: "", message: new AIMessageChunk({ content: "", tool_calls: message.tool_calls, usage_metadata }) });
      return;
    }
    const words = message.text.split(/(?<= )/);
    for (const [i, word] of words.entries()) {
      // The usage comes with the last chunk, as providers stream it.
      const chunk = new ChatGenerationChunk({ text: word, message: new AIMessageChunk({ content: word, ...(i === words.length - 1 ? { usage_metadata } : {}) }) });
      yield chunk;
      await runManager?.handleLLMNewToken(word, undefined, undefined, undefined, undefined, { chunk });
    }
  }
}

await runAgent(async (sandbox) => {
  const topic = sandbox.goal ?? "the weather";

  const lookup = tool(
    async ({ topic }: { topic: string }) => {
      if (process.env.SIDE_EFFECTS_FILE) await appendFile(process.env.SIDE_EFFECTS_FILE, `lookup ${topic}\n`);
      return { fact: "a fact about " + topic };
    },
    { name: "lookup", description: "Looks up a fact about a topic.", schema: z.object({ topic: z.string() }) },
  );
  // Every call of these tools is recorded in the run's status, and replayed on a later attempt.
  const tools = watchdogTools(sandbox, [lookup], { idempotent: ["lookup"] });

  // A real model goes here, e.g. new ChatAnthropic({ model: "claude-sonnet-4-5" }).bindTools(tools).
  const model = new ScriptedModel(topic).bindTools();

  const graph = new StateGraph(MessagesAnnotation)
    .addNode("agent", async (state) => ({ messages: [await model.invoke(state.messages)] }))
    .addNode("tools", new ToolNode(tools))
    .addEdge(START, "agent")
    .addConditionalEdges("agent", toolsCondition, ["tools", END])
    .addEdge("tools", "agent")
    // The checkpointer lets runGraph resume the graph after an interrupt() has been answered.
    .compile({ checkpointer: new MemorySaver() });

  // The model's answer reaches the run's status through the adapter's callback handler.
  await runGraph(sandbox, graph, { messages: [{ role: "user", content: `Tell me about ${topic}.` }] });
});
