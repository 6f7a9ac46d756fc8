// The sandbox's spans against an in-memory exporter: each tool call that runs is an execute_tool
// span under the attempt's span from TRACEPARENT (or under the framework's span when one is
// active), with its outcome, and the idempotency key only as a hash; the agent's own spans nest
// under the attempt; and a malformed TRACEPARENT is ignored.
import { tmpdir } from "node:os";
import { join } from "node:path";
import { context, trace } from "@opentelemetry/api";
import { AsyncLocalStorageContextManager } from "@opentelemetry/context-async-hooks";
import { InMemorySpanExporter, SimpleSpanProcessor, TracerProvider } from "@opentelemetry/sdk-trace";
import { FakeListChatModel } from "@langchain/core/utils/testing";
import { MockLanguageModelV4 } from "ai/test";
import { afterAll, beforeAll, beforeEach, describe, expect, it, vi } from "vitest";
import { generateText } from "../../../operator/sandbox/adapters/ai.ts";
import { watchdogCallbacks } from "../../../operator/sandbox/adapters/langchain.ts";
import { createLogger } from "../../../operator/log.ts";
import { ToolError } from "../../../operator/sandbox/errors.ts";
import { runAgent } from "../../../operator/sandbox/runner.ts";
import { attemptContext, idempotencyKeyHash } from "../../../operator/sandbox/tracing.ts";
import { FakeApi } from "./fake-api.ts";

const TRACE = "4bf92f3577b34da6a3ce929d0e0e4736";
const ATTEMPT_SPAN = "00f067aa0ba902b7";
const exporter = new InMemorySpanExporter();
const provider = new TracerProvider({ spanProcessors: [new SimpleSpanProcessor({ exporter })] });
const contexts = new AsyncLocalStorageContextManager();

beforeAll(() => {
  context.setGlobalContextManager(contexts.enable());
  trace.setGlobalTracerProvider(provider);
});

afterAll(() => {
  trace.disable();
  context.disable();
});

beforeEach(() => {
  exporter.reset();
  vi.stubEnv("TRACEPARENT", `00-${TRACE}-${ATTEMPT_SPAN}-01`);
  return () => vi.unstubAllEnvs();
});

/** Runs `main` as the agent of attempt 1; the spans are exported (runAgent flushes them) when it resolves. */
const run = (api: FakeApi, main: Parameters<typeof runAgent>[0]) =>
  runAgent(main, { client: api.client(), identity: { runName: "r", namespace: "ns", attempt: 1 }, logger: createLogger("silent"), exit: vi.fn(), terminationLogPath: join(tmpdir(), "none", "x") });

describe("the sandbox's spans", () => {
  it("makes each tool call that runs an execute_tool span under the attempt, with its outcome, and never the raw key", async () => {
    const api = new FakeApi();
    let key = "";
    await run(api, async (s) => {
      const ok = await s.tool("lookup", { q: 1 }, () => "found", { idempotent: true });
      key = ok.idempotencyKey;
      await s.tool("call_model", { q: 2 }, () => {
        throw new ToolError("429 Too Many Requests", { httpStatus: 429, retryAfterSeconds: 3 });
      });
    });
    const spans = exporter.getFinishedSpans();
    expect(spans.map((s) => s.name)).toEqual(["execute_tool lookup", "execute_tool call_model"]);
    for (const span of spans) {
      expect(span.spanContext().traceId).toBe(TRACE);
      expect(span.parentSpanContext?.spanId).toBe(ATTEMPT_SPAN);
    }
    const [lookup, model] = spans;
    expect(lookup!.attributes).toMatchObject({
      "gen_ai.operation.name": "execute_tool",
      "gen_ai.tool.name": "lookup",
      "gen_ai.tool.call.id": "a1-1",
      "watchdog.attempt": 1,
      "watchdog.tool.idempotency_key_hash": idempotencyKeyHash(key),
    });
    expect(JSON.stringify(lookup!.attributes)).not.toContain(key);
    expect(lookup!.status.code).toBe(0);
    expect(model!.status).toMatchObject({ code: 2, message: expect.stringContaining("429") });
    expect(model!.attributes).toMatchObject({ "error.type": "429", "watchdog.tool.retry_after_seconds": 3 });
  });

  it("nests the agent's own spans under the attempt, and a tool call under the agent's active span", async () => {
    const api = new FakeApi();
    await run(api, async (s) => {
      await trace.getTracer("framework").startActiveSpan("chat model", async (step) => {
        await s.tool("lookup", { q: 1 }, () => "found", { idempotent: true });
        step.end();
      });
    });
    const [tool, step] = exporter.getFinishedSpans();
    expect(step!.name).toBe("chat model");
    expect(step!.parentSpanContext?.spanId).toBe(ATTEMPT_SPAN);
    expect(tool!.parentSpanContext?.spanId).toBe(step!.spanContext().spanId);
  });

  it("ignores a TRACEPARENT it cannot read: a tool call's span then starts a trace of its own", async () => {
    for (const bad of ["", "garbage", `01-${TRACE}-${ATTEMPT_SPAN}-01`, `00-${"0".repeat(32)}-${ATTEMPT_SPAN}-01`, `00-${TRACE}-${"0".repeat(16)}-01`, `00-${TRACE.toUpperCase()}-${ATTEMPT_SPAN}-01`]) {
      expect(attemptContext({ TRACEPARENT: bad }), bad).toBeUndefined();
    }
    vi.stubEnv("TRACEPARENT", "not a traceparent");
    await run(new FakeApi(), async (s) => void (await s.tool("lookup", { q: 1 }, () => "found", { idempotent: true })));
    const [span] = exporter.getFinishedSpans();
    // A trace of its own: no parent it could not have been given.
    expect(span!.parentSpanContext).toBeUndefined();
  });

  it("makes each model call through the AI SDK adapter a chat span under the attempt, with its model and usage", async () => {
    const usage = { inputTokens: { total: 1200, noCache: 1200, cacheRead: 0, cacheWrite: 0 }, outputTokens: { total: 80, text: 80, reasoning: 0 } };
    const model = new MockLanguageModelV4({ doGenerate: async () => ({ content: [{ type: "text", text: "done" }], finishReason: { unified: "stop", raw: undefined }, usage, warnings: [] }) });
    await run(new FakeApi(), async (s) => void (await generateText(s, { model, prompt: "go" })));
    const [chat] = exporter.getFinishedSpans().filter((span) => span.name.startsWith("chat"));
    expect(chat!.name).toBe("chat mock-model-id");
    expect(chat!.parentSpanContext?.spanId).toBe(ATTEMPT_SPAN);
    expect(chat!.attributes).toMatchObject({
      "gen_ai.operation.name": "chat",
      "gen_ai.request.model": "mock-model-id",
      "gen_ai.provider.name": "mock-provider",
      "gen_ai.usage.input_tokens": 1200,
      "gen_ai.usage.output_tokens": 80,
      "gen_ai.response.finish_reasons": ["stop"],
    });
  });

  it("makes each model call a LangChain callback sees a chat span under the attempt", async () => {
    const model = new FakeListChatModel({ responses: ["first", "second"] });
    await run(new FakeApi(), async (s) => {
      const callbacks = [watchdogCallbacks(s, { stream: false })];
      await model.invoke("one", { callbacks });
      await model.invoke("two", { callbacks });
    });
    const chats = exporter.getFinishedSpans().filter((span) => span.name.startsWith("chat"));
    expect(chats).toHaveLength(2);
    for (const chat of chats) {
      expect(chat.parentSpanContext?.spanId).toBe(ATTEMPT_SPAN);
      expect(chat.attributes["gen_ai.operation.name"]).toBe("chat");
    }
  });
});
