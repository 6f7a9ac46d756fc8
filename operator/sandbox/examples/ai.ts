// An agent on the Vercel AI SDK, run under the watchdog: one tool, one model, the final answer in
// the run's status. In a project the imports are "@agent-watchdog/sandbox" and
// "@agent-watchdog/sandbox/ai"; here they are relative so the example runs from the repository.
//
//   WATCHDOG_RUN_NAME=... WATCHDOG_RUN_NAMESPACE=... WATCHDOG_ATTEMPT=1 node operator/sandbox/examples/ai.ts
import { appendFile } from "node:fs/promises";
import { stepCountIs, tool } from "ai";
import { MockLanguageModelV4 } from "ai/test";
import { z } from "zod";
import { generateText } from "../adapters/ai.ts";
import { runAgent } from "../index.ts";

// What each scripted model call says it used, as a provider reports it: the adapter adds it to the
// attempt's usage, which the run's budget counts.
const usage = { inputTokens: { total: 120, noCache: 120, cacheRead: 0, cacheWrite: 0 }, outputTokens: { total: 30, text: 30, reasoning: 0 } };

await runAgent(async (sandbox) => {
  const topic = sandbox.goal ?? "the weather";

  const lookup = tool({
    description: "Looks up a fact about a topic.",
    inputSchema: z.object({ topic: z.string() }),
    execute: async ({ topic }) => {
      // The side effect a replay must not repeat: a rerun attempt gets the saved result instead.
      if (process.env.SIDE_EFFECTS_FILE) await appendFile(process.env.SIDE_EFFECTS_FILE, `lookup ${topic}\n`);
      return { fact: `a fact about ${topic}` };
    },
  });

  // A real model goes here, e.g. `openai("gpt-5")` from @ai-sdk/openai. This scripted one calls
  // lookup once, then answers with the fact it was given.
  const model = new MockLanguageModelV4({
    doGenerate: async ({ prompt }) => {
      const result = prompt.flatMap((message) => (message.role === "tool" ? message.content : [])).find((part) => part.type === "tool-result");
      if (!result) {
        return {
          content: [{ type: "tool-call", toolCallId: "call-1", toolName: "lookup", input: JSON.stringify({ topic }) }],
          finishReason: { unified: "tool-calls", raw: undefined },
          usage,
          warnings: [],
        };
      }
      const output = result.type === "tool-result" ? result.output : undefined;
      const fact = output?.type === "json" ? (output.value as { fact?: string }).fact : undefined;
      return { content: [{ type: "text", text: `Here is what I found: ${fact ?? "nothing"}.` }], finishReason: { unified: "stop", raw: undefined }, usage, warnings: [] };
    },
  });

  // The final text reaches the run's status through the adapter (sandbox.say).
  await generateText(sandbox, { model, tools: { lookup }, prompt: `Find a fact about ${topic}.`, stopWhen: stepCountIs(3) }, { idempotent: ["lookup"] });
});
