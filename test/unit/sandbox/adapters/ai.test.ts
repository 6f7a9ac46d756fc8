// The Vercel AI SDK adapter against the in-memory API (fake-api.ts) and the AI SDK's own mock
// model: what generateText and streamText record in status, what the model is given, and where
// an error that must stop the agent goes.
import { generateText as aiGenerateText, jsonSchema, stepCountIs, tool, type ModelMessage, type ToolSet } from "ai";
import { MockLanguageModelV4 } from "ai/test";
import { afterEach, describe, expect, it, vi } from "vitest";
import { generateText, streamText, watchdogTools } from "../../../../operator/sandbox/adapters/ai.ts";
import { ApprovalDeniedError, BudgetExhaustedError, UnconfirmedSideEffectError } from "../../../../operator/sandbox/errors.ts";
import { FakeApi } from "../fake-api.ts";
import { abandonSandboxes, secondAttempt, startSandbox as start, until } from "./support.ts";

afterEach(abandonSandboxes);

/** The promise's value, or a failure when it has not settled within `ms`. */
async function within<T>(what: string, p: PromiseLike<T>, ms = 5000): Promise<T> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const late = new Promise<never>((_, reject) => (timer = setTimeout(() => reject(new Error(`timed out waiting for ${what}`)), ms)));
  try {
    return await Promise.race([p, late]);
  } finally {
    clearTimeout(timer);
  }
}

/** A model call's usage in the provider specification's shape. */
const usageOf = (input: number, output: number) => ({ inputTokens: { total: input, noCache: input, cacheRead: 0, cacheWrite: 0 }, outputTokens: { total: output, text: output, reasoning: 0 } });
type Prompt = MockLanguageModelV4["doGenerateCalls"][number]["prompt"];

/** What the model was given for its tool call, as text: the result's JSON, or the error. */
function toolOutput(prompt: Prompt): string | undefined {
  const last = prompt.at(-1);
  if (last?.role !== "tool") return undefined;
  const part = last.content.find((p) => p.type === "tool-result");
  if (!part || part.type !== "tool-result") return undefined;
  const { output } = part;
  return output.type === "json" ? JSON.stringify(output.value) : output.type === "error-text" || output.type === "text" ? `error: ${output.value}` : output.type;
}

/** Calls lookup {topic} once, then answers with what it was given. */
function scriptedModel(topic = "tides", usage = usageOf(1, 1)) {
  return new MockLanguageModelV4({
    doGenerate: async ({ prompt }) => {
      const given = toolOutput(prompt);
      if (given === undefined) {
        return { content: [{ type: "tool-call", toolCallId: "call-1", toolName: "lookup", input: JSON.stringify({ topic }) }], finishReason: { unified: "tool-calls", raw: undefined }, usage, warnings: [] };
      }
      return { content: [{ type: "text", text: `The tool said ${given}` }], finishReason: { unified: "stop", raw: undefined }, usage, warnings: [] };
    },
  });
}

/** The same script, streamed: the answer comes in three deltas. */
function streamingModel(topic = "tides", usage = usageOf(1, 1)) {
  return new MockLanguageModelV4({
    doStream: async ({ prompt }) => {
      const given = toolOutput(prompt);
      const parts =
        given === undefined
          ? [
              { type: "tool-call" as const, toolCallId: "call-1", toolName: "lookup", input: JSON.stringify({ topic }) },
              { type: "finish" as const, finishReason: { unified: "tool-calls" as const, raw: undefined }, usage },
            ]
          : [
              { type: "text-start" as const, id: "t" },
              ...["The tool ", "said ", given].map((delta) => ({ type: "text-delta" as const, id: "t", delta })),
              { type: "text-end" as const, id: "t" },
              { type: "finish" as const, finishReason: { unified: "stop" as const, raw: undefined }, usage },
            ];
      return {
        stream: new ReadableStream({
          start(controller) {
            for (const part of parts) controller.enqueue(part);
            controller.close();
          },
        }),
      };
    },
  });
}

const topicSchema = jsonSchema<{ topic: string }>({ type: "object", properties: { topic: { type: "string" } }, required: ["topic"] });
const lookupTool = (execute: (args: { topic: string }) => unknown, extra: Record<string, unknown> = {}) =>
  ({ lookup: tool({ inputSchema: topicSchema, execute: async (args: { topic: string }) => execute(args), ...extra }) }) as ToolSet;

describe("generateText", () => {
  it("records a tool call Started before it runs and Succeeded after, gives the model the result, and reports the final text", async () => {
    const api = new FakeApi();
    const sandbox = await start(api);
    let seen: any[] = [];
    const fn = vi.fn(({ topic }: { topic: string }) => {
      seen = structuredClone(api.status.toolCalls);
      return { fact: `a fact about ${topic}` };
    });
    const model = scriptedModel();
    const result = await generateText(sandbox, { model, tools: lookupTool(fn), prompt: "go", stopWhen: stepCountIs(5) }, { idempotent: ["lookup"] });

    expect(fn).toHaveBeenCalledTimes(1);
    expect(seen).toEqual([expect.objectContaining({ name: "lookup", state: "Started", idempotent: true, attempt: 1 })]);
    expect(api.status.toolCalls).toEqual([expect.objectContaining({ name: "lookup", state: "Succeeded", result: JSON.stringify({ fact: "a fact about tides" }) })]);
    expect(toolOutput(model.doGenerateCalls[1]!.prompt)).toBe(JSON.stringify({ fact: "a fact about tides" }));
    expect(result.text).toBe('The tool said {"fact":"a fact about tides"}');
    expect(api.status.heartbeat.activity.kind).toBe("text");
    expect(sandbox.transcript.at(-1)).toMatchObject({ kind: "text", text: result.text });
  });

  it("records a throwing tool Failed and hands the error to the model, which goes on", async () => {
    const api = new FakeApi();
    const sandbox = await start(api);
    const model = scriptedModel();
    const result = await generateText(sandbox, {
      model,
      tools: lookupTool(() => {
        throw Object.assign(new Error("the archive is down"), { status: 503 });
      }),
      prompt: "go",
      stopWhen: stepCountIs(5),
    });
    expect(api.status.toolCalls).toEqual([expect.objectContaining({ name: "lookup", state: "Failed", error: { message: "the archive is down", httpStatus: 503 } })]);
    // The AI SDK gives the model the error's toString(): the sandbox's ToolError with the message.
    expect(toolOutput(model.doGenerateCalls[1]!.prompt)).toBe("error: ToolError: the archive is down");
    expect(result.text).toBe("The tool said error: ToolError: the archive is down");
    expect(api.status.heartbeat.activity.kind).toBe("text");
  });

  it("in a new attempt, gives the model the saved result without running the tool again", async () => {
    const api = new FakeApi();
    const first = vi.fn(({ topic }: { topic: string }) => ({ fact: `a fact about ${topic}` }));
    const two = await secondAttempt(api, async (one) => {
      await generateText(one, { model: scriptedModel(), tools: lookupTool(first), prompt: "go", stopWhen: stepCountIs(5) }, { idempotent: ["lookup"] });
    });
    expect(first).toHaveBeenCalledTimes(1);

    const again = vi.fn(() => ({ fact: "a different fact" }));
    const model = scriptedModel();
    const result = await generateText(two, { model, tools: lookupTool(again), prompt: "go", stopWhen: stepCountIs(5) }, { idempotent: ["lookup"] });
    expect(again).not.toHaveBeenCalled();
    expect(toolOutput(model.doGenerateCalls[1]!.prompt)).toBe(JSON.stringify({ fact: "a fact about tides" }));
    expect(result.text).toContain("a fact about tides");
    expect(two.transcript.some((e) => e.kind === "replayed")).toBe(true);
  });

  it("stops with UnconfirmedSideEffectError for a non-idempotent call attempt 1 left Started, without telling the model", async () => {
    const api = new FakeApi();
    const two = await secondAttempt(api, async (one) => {
      // The process dies while the tool runs.
      void generateText(one, { model: scriptedModel(), tools: lookupTool(() => new Promise(() => {})), prompt: "go", stopWhen: stepCountIs(5) }).catch(() => {});
      await until("the Started record", () => api.status.toolCalls?.[0]?.state === "Started");
    });
    const fn = vi.fn();
    const model = scriptedModel();
    const outcome = generateText(two, { model, tools: lookupTool(fn), prompt: "go", stopWhen: stepCountIs(5) });
    await expect(within("the refusal", outcome)).rejects.toThrow(UnconfirmedSideEffectError);
    expect(fn).not.toHaveBeenCalled();
    expect(model.doGenerateCalls).toHaveLength(1); // never asked again with the error as the tool's result
    expect(api.status.heartbeat.activity?.kind).not.toBe("text");
  });

  it("stops with UnconfirmedSideEffectError even when that call ends the last step", async () => {
    const api = new FakeApi();
    const two = await secondAttempt(api, async (one) => {
      void generateText(one, { model: scriptedModel(), tools: lookupTool(() => new Promise(() => {})), prompt: "go" }).catch(() => {});
      await until("the Started record", () => api.status.toolCalls?.[0]?.state === "Started");
    });
    await expect(within("the refusal", generateText(two, { model: scriptedModel(), tools: lookupTool(vi.fn()), prompt: "go" }))).rejects.toThrow(UnconfirmedSideEffectError);
  });
});

describe("streamText", () => {
  it("reports one stream: one delta write, no write per chunk, and the final text", async () => {
    const api = new FakeApi();
    const sandbox = await start(api);
    const fn = vi.fn(({ topic }: { topic: string }) => ({ fact: `a fact about ${topic}` }));
    const userChunks = vi.fn();
    const userFinish = vi.fn();
    const result = streamText(
      sandbox,
      { model: streamingModel(), tools: lookupTool(fn), prompt: "go", stopWhen: stepCountIs(5), onChunk: userChunks, onFinish: userFinish },
      { idempotent: ["lookup"] },
    );
    const deltas: string[] = [];
    for await (const delta of result.textStream) deltas.push(delta);

    expect(deltas).toEqual(["The tool ", "said ", JSON.stringify({ fact: "a fact about tides" })]);
    expect(fn).toHaveBeenCalledTimes(1);
    expect(api.status.toolCalls).toEqual([expect.objectContaining({ name: "lookup", state: "Succeeded" })]);
    const activities = api.patches.map((p: any) => p.status.heartbeat?.activity?.kind).filter((k) => k !== undefined);
    expect(activities).toEqual(["toolResult", "delta", "text"]);
    expect(api.status.heartbeat.activity.kind).toBe("text");
    expect(sandbox.transcript.at(-1)).toMatchObject({ kind: "text", text: `The tool said ${JSON.stringify({ fact: "a fact about tides" })}` });
    expect(await result.text).toBe(`The tool said ${JSON.stringify({ fact: "a fact about tides" })}`);
    // The caller's own callbacks still run.
    expect(userChunks.mock.calls.filter(([e]) => e.chunk.type === "text-delta")).toHaveLength(3);
    expect(userFinish).toHaveBeenCalledWith(expect.objectContaining({ text: await result.text }));
  });

  it("rejects the result with UnconfirmedSideEffectError instead of handing it to the model", async () => {
    const api = new FakeApi();
    const two = await secondAttempt(api, async (one) => {
      void streamText(one, { model: streamingModel(), tools: lookupTool(() => new Promise(() => {})), prompt: "go", stopWhen: stepCountIs(5) })
        .consumeStream()
        .then(undefined, () => {});
      await until("the Started record", () => api.status.toolCalls?.[0]?.state === "Started");
    });
    const model = streamingModel();
    const result = streamText(two, { model, tools: lookupTool(vi.fn()), prompt: "go", stopWhen: stepCountIs(5) });
    await expect(within("the refusal", result.text)).rejects.toThrow(UnconfirmedSideEffectError);
    expect(model.doStreamCalls).toHaveLength(1);
  });
});

describe("approvals", () => {
  const now = () => new Date().toISOString();

  it("asks a person for a call that needs approval, and runs it once Approved", async () => {
    const api = new FakeApi({ phase: "Planning" });
    const sandbox = await start(api);
    const fn = vi.fn(({ topic }: { topic: string }) => ({ fact: `a fact about ${topic}` }));
    const outcome = generateText(sandbox, { model: scriptedModel(), tools: lookupTool(fn), toolApproval: { lookup: "user-approval" }, prompt: "go", stopWhen: stepCountIs(5) });

    await until("AwaitingReply", () => api.status.heartbeat?.state === "AwaitingReply");
    expect(fn).not.toHaveBeenCalled();
    expect(api.status.checkpoint.data["watchdog.dev/approval-request"].question).toBe('Approve lookup {"topic":"tides"}?');
    api.operator({ phase: "AwaitingReply", approval: { state: "Pending", requestedAt: now() } });
    api.operator({ approval: { state: "Approved", answer: "go ahead", decidedAt: now() } });

    const result = await within("the approved call", outcome);
    expect(fn).toHaveBeenCalledTimes(1);
    expect(result.steps[0]!.content).toContainEqual(expect.objectContaining({ type: "tool-approval-response", approved: true, reason: "go ahead" }));
    expect(result.text).toContain("a fact about tides");
    expect(api.status.toolCalls).toEqual([expect.objectContaining({ name: "lookup", state: "Succeeded" })]);
  });

  it("asks for a tool's own needsApproval too, and leaves calls that need none alone", async () => {
    const api = new FakeApi({ phase: "Planning" });
    const sandbox = await start(api);
    const needs = vi.fn(async ({ topic }: { topic: string }) => topic === "secrets");
    const tools = lookupTool(({ topic }) => ({ fact: `a fact about ${topic}` }), { needsApproval: needs });

    await within("a call that needs no approval", generateText(sandbox, { model: scriptedModel("tides"), tools, prompt: "go", stopWhen: stepCountIs(5) }));
    expect(api.patches.some((p: any) => p.status.heartbeat?.state === "AwaitingReply")).toBe(false);

    const outcome = streamText(sandbox, { model: streamingModel("secrets"), tools, prompt: "go", stopWhen: stepCountIs(5) }).text;
    await until("AwaitingReply", () => api.status.heartbeat?.state === "AwaitingReply");
    expect(needs).toHaveBeenCalledTimes(2);
    api.operator({ phase: "AwaitingReply", approval: { state: "Pending", requestedAt: now() } });
    api.operator({ approval: { state: "Approved", answer: "ok", decidedAt: now() } });
    expect(await within("the approved call", outcome)).toContain("a fact about secrets");
  });

  it("honours an approval response sent in the messages without asking again", async () => {
    const api = new FakeApi({ phase: "Planning" });
    const sandbox = await start(api);
    const fn = vi.fn(({ topic }: { topic: string }) => ({ fact: `a fact about ${topic}` }));
    const tools = lookupTool(fn);
    // The AI SDK's own flow, without the adapter: the call stops with a request...
    const asked = await aiGenerateText({ model: scriptedModel(), tools, toolApproval: { lookup: "user-approval" }, prompt: "go" });
    const request = asked.content.find((part) => part.type === "tool-approval-request");
    expect(request).toBeDefined();
    // ...and the caller answers it in the next call's messages.
    const messages: ModelMessage[] = [
      { role: "user", content: "go" },
      ...asked.response.messages,
      { role: "tool", content: [{ type: "tool-approval-response", approvalId: request!.approvalId, approved: true }] },
    ];
    const result = await within("the approved call", generateText(sandbox, { model: scriptedModel(), tools, toolApproval: { lookup: "user-approval" }, messages, stopWhen: stepCountIs(5) }));
    expect(fn).toHaveBeenCalledTimes(1);
    expect(result.text).toContain("a fact about tides");
    expect(api.patches.some((p: any) => p.status.heartbeat?.state === "AwaitingReply")).toBe(false);
    expect(api.status.toolCalls).toEqual([expect.objectContaining({ name: "lookup", state: "Succeeded" })]);
  });

  it("stops with ApprovalDeniedError when the person rejects, without running the tool", async () => {
    const api = new FakeApi({ phase: "Planning" });
    const sandbox = await start(api);
    const fn = vi.fn();
    const model = streamingModel();
    const result = streamText(sandbox, { model, tools: lookupTool(fn), toolApproval: () => ({ type: "user-approval", reason: "it costs money" }), prompt: "go", stopWhen: stepCountIs(5) });
    const text = result.text;
    await until("AwaitingReply", () => api.status.heartbeat?.state === "AwaitingReply");
    expect(api.status.checkpoint.data["watchdog.dev/approval-request"].question).toBe('Approve lookup {"topic":"tides"}?\n\nit costs money');
    // A rejection fails the run: the same event fences the sandbox, and the rejection is the cause.
    api.operator({ phase: "Failed", approval: { state: "Rejected", requestedAt: now(), decidedAt: now(), reason: "not today" } });
    await expect(within("the rejection", text)).rejects.toThrow(ApprovalDeniedError);
    await expect(text).rejects.toThrow("approval rejected: not today");
    expect(fn).not.toHaveBeenCalled();
    expect(model.doStreamCalls).toHaveLength(1);
  });
});

describe("fencing", () => {
  it("ends a call waiting for approval with FencedError when a newer attempt takes over", async () => {
    const api = new FakeApi({ phase: "Planning" });
    const sandbox = await start(api);
    const fn = vi.fn();
    const outcome = generateText(sandbox, { model: scriptedModel(), tools: lookupTool(fn), toolApproval: { lookup: "user-approval" }, prompt: "go", stopWhen: stepCountIs(5) });
    await until("AwaitingReply", () => api.status.heartbeat?.state === "AwaitingReply");
    api.operator({ attempt: 2 });
    await expect(within("the fence", outcome)).rejects.toThrow(/sandbox fenced/);
    expect(fn).not.toHaveBeenCalled();
  });
});

describe("watchdogTools", () => {
  it("aborts the given controller with an error that must stop the agent", async () => {
    const api = new FakeApi();
    const two = await secondAttempt(api, async (one) => {
      const tools = watchdogTools(one, lookupTool(() => new Promise(() => {})), { stop: new AbortController() });
      void (tools.lookup!.execute as any)({ topic: "x" }, { toolCallId: "c", messages: [], context: {} }).catch(() => {});
      await until("the Started record", () => api.status.toolCalls?.[0]?.state === "Started");
    });
    const stop = new AbortController();
    const tools = watchdogTools(two, lookupTool(vi.fn()), { stop });
    await expect((tools.lookup!.execute as any)({ topic: "x" }, { toolCallId: "c", messages: [], context: {} })).rejects.toThrow(UnconfirmedSideEffectError);
    expect(stop.signal.reason).toBeInstanceOf(UnconfirmedSideEffectError);
  });
});

describe("usage and the run's budget", () => {
  it("reports each model call's usage under the model's id, and counts the tool call: the heartbeat carries them", async () => {
    const api = new FakeApi();
    const sandbox = await start(api);
    const onCallEnd = vi.fn();
    await generateText(sandbox, { model: scriptedModel("tides", usageOf(1200, 80)), tools: lookupTool(() => "a fact"), prompt: "go", stopWhen: stepCountIs(5), onLanguageModelCallEnd: onCallEnd });
    // Two model calls (the tool call, then the answer), one tool call; the final text's write carries it all.
    expect(api.status.heartbeat.usage).toEqual({ inputTokens: 2400, outputTokens: 160, toolCalls: 1, model: "mock-model-id" });
    expect(onCallEnd).toHaveBeenCalledTimes(2);
  });

  it("reports a stream's usage too, and under the name the budget prices when one is given", async () => {
    const api = new FakeApi();
    const sandbox = await start(api);
    const result = streamText(sandbox, { model: streamingModel("tides", usageOf(300, 30)), tools: lookupTool(() => "a fact"), prompt: "go", stopWhen: stepCountIs(5) }, { model: "gpt-5-mini" });
    await result.consumeStream();
    await result.text;
    await until("the usage in status", () => api.status.heartbeat.usage.inputTokens === 600);
    expect(api.status.heartbeat.usage).toEqual({ inputTokens: 600, outputTokens: 60, toolCalls: 1, model: "gpt-5-mini" });
  });

  it("counts nothing itself when told the agent reports usage", async () => {
    const api = new FakeApi();
    const sandbox = await start(api);
    await generateText(sandbox, { model: scriptedModel("tides", usageOf(1200, 80)), tools: lookupTool(() => "a fact"), prompt: "go", stopWhen: stepCountIs(5) }, { reportUsage: false });
    expect(api.status.heartbeat.usage).toEqual({ inputTokens: 0, outputTokens: 0, toolCalls: 1 });
  });

  it("refuses the next step once a model call has brought the run to a limit: the report is written at once, and the call ends with BudgetExhaustedError", async () => {
    const api = new FakeApi({}, { budget: { tokens: 1000 } });
    const sandbox = await start(api);
    const fn = vi.fn(() => "a fact");
    const model = scriptedModel("tides", usageOf(990, 10));
    await expect(within("the refusal", generateText(sandbox, { model, tools: lookupTool(fn), prompt: "go", stopWhen: stepCountIs(5) }))).rejects.toThrow(BudgetExhaustedError);
    expect(model.doGenerateCalls).toHaveLength(1);
    // The tool the model asked for is not run either: the run may spend no more.
    expect(fn).not.toHaveBeenCalled();
    expect(api.status.toolCalls ?? []).toEqual([]);
    expect(api.status.heartbeat.usage).toMatchObject({ inputTokens: 990, outputTokens: 10 });
  });

  it("refuses before the first model call when ended attempts spent the budget, streamed or not", async () => {
    const api = new FakeApi({ attempt: 2, spent: { inputTokens: 0, outputTokens: 0, cost: "2.50", toolCalls: 0, throughAttempt: 1 } }, { budget: { cost: { amount: "2.50", currency: "EUR" } } });
    const sandbox = await start(api, 2);
    const model = scriptedModel();
    const refused = generateText(sandbox, { model, prompt: "go" });
    await expect(within("the refusal", refused)).rejects.toThrow(/cost budget: 2\.5 of 2\.50 EUR spent/);
    expect(model.doGenerateCalls).toHaveLength(0);

    const streaming = streamingModel();
    const result = streamText(sandbox, { model: streaming, prompt: "go" });
    await expect(within("the refusal", result.text)).rejects.toThrow(BudgetExhaustedError);
    expect(streaming.doStreamCalls).toHaveLength(0);
  });
});
