// An example agent on the OpenAI Agents SDK: the agent, watched by the sandbox, calls the `lookup`
// tool and answers with what it found. The model is the SDK's scripted test model, so the example
// runs without network or API key.
//
// In a project the imports are "@agent-watchdog/sandbox" and "@agent-watchdog/sandbox/openai-agents".
import { appendFileSync } from "node:fs";
import { Agent, Usage } from "@openai/agents";
import { ScriptedModel, assistantMessage, functionCall, modelResponder, type RecordedModelCall } from "@openai/agents/testing";
import { z } from "zod";
import { runAgent } from "../index.ts";
import { run, tool } from "../adapters/openai-agents.ts";

// The adapter's tool() is the SDK's, except that an error the tool throws reaches the watchdog.
const lookup = tool({
  name: "lookup",
  description: "Looks up a fact about a topic",
  parameters: z.object({ topic: z.string() }),
  execute: ({ topic }) => {
    // Runs only when the call really runs: a replayed call returns the saved result instead.
    if (process.env.SIDE_EFFECTS_FILE) appendFileSync(process.env.SIDE_EFFECTS_FILE, `lookup ${topic}\n`);
    return { fact: "a fact about " + topic };
  },
});

/** The fact in the lookup result the model was handed (what a real model would read). */
function factIn(call: RecordedModelCall): string {
  const input = Array.isArray(call.request.input) ? call.request.input : [];
  const result = input.find((item) => item.type === "function_call_result");
  const output = result?.type === "function_call_result" ? (result.output as unknown) : undefined;
  const text = typeof output === "string" ? output : (output as { text?: string } | undefined)?.text;
  return (JSON.parse(text ?? "{}") as { fact?: string }).fact ?? "nothing";
}

await runAgent(async (sandbox) => {
  const topic = sandbox.goal ?? "the weather";
  // A real agent names its model instead, e.g. `model: "gpt-5.1"` with OPENAI_API_KEY set.
  // Each response says what it used, as the Responses API does: the adapter adds it to the
  // attempt's usage, which the run's budget counts.
  const usage = () => new Usage({ requests: 1, inputTokens: 120, outputTokens: 30, totalTokens: 150 });
  const model = new ScriptedModel([
    { usage: usage(), output: [functionCall("lookup", { topic }, { callId: "call_lookup" })] },
    modelResponder((call) => ({ usage: usage(), output: [assistantMessage(`Here is what I found: ${factIn(call)}.`)] })),
  ]);
  const agent = new Agent({ name: "researcher", instructions: "Look the topic up and report the fact you find.", model, tools: [lookup] });
  // Records the call, reports the final text to status (streamed with `stream: true`).
  await run(sandbox, agent, `Tell me about ${topic}.`, { idempotent: ["lookup"] });
});
