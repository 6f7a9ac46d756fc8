// The OpenAI Agents SDK adapter against the in-memory API (../fake-api.ts) and the SDK's own
// scripted model: what each tool call records and when, replays in a new attempt, streaming,
// approvals, and the errors that must stop the agent instead of reaching the model.
import { Agent, Usage, tool as sdkTool, type MCPServer } from "@openai/agents";
import { ScriptedModel, assistantMessage, functionCall, modelResponder, modelStream, type RecordedModelCall } from "@openai/agents/testing";
import { mkdtemp, readFile, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, describe, expect, it, vi } from "vitest";
import { z } from "zod";
import { createLogger } from "../../../../operator/log.ts";
import { run, tool, toolContext, watchdogAgent } from "../../../../operator/sandbox/adapters/openai-agents.ts";
import { ApprovalDeniedError, BudgetExhaustedError, UnconfirmedSideEffectError } from "../../../../operator/sandbox/errors.ts";
import { runAgent } from "../../../../operator/sandbox/runner.ts";
import type { ToolContext } from "../../../../operator/sandbox/tool-runner.ts";
import { FakeApi } from "../fake-api.ts";
import { abandonSandboxes, secondAttempt, startSandbox as start, until } from "./support.ts";

afterEach(abandonSandboxes);

/** The text of the tool results the model was given in this call. */
function toolResults(call: RecordedModelCall): string[] {
  const input = Array.isArray(call.request.input) ? call.request.input : [];
  return input.flatMap((item) => {
    if (item.type !== "function_call_result") return [];
    // A string, one text part, or a list of parts (MCP tools)
    const output = item.output as unknown;
    const parts = (Array.isArray(output) ? output : [output]) as ({ text?: string } | string)[];
    return [parts.map((part) => (typeof part === "string" ? part : part.text ?? JSON.stringify(part))).join("")];
  });
}

/** A model that calls lookup once and then answers with what the tool returned. */
function lookupModel(topic = "tides") {
  return new ScriptedModel([
    [functionCall("lookup", { topic }, { callId: "call_1" })],
    modelResponder((call) => [assistantMessage(`Found: ${toolResults(call).at(-1)}`)]),
  ]);
}

const params = z.object({ topic: z.string() });
const lookupTool = (execute: (args: { topic: string }, ctx: unknown, details: unknown) => unknown, extra: { needsApproval?: boolean } = {}) =>
  tool({ name: "lookup", description: "Looks a topic up.", parameters: params, execute, ...extra });
const agentWith = (model: ScriptedModel, ...tools: ReturnType<typeof lookupTool>[]) => new Agent({ name: "researcher", instructions: "Look it up.", model, tools });

describe("tool calls", () => {
  it("records Started before the tool runs and Succeeded with its result after; the model gets the result", async () => {
    const api = new FakeApi();
    const sandbox = await start(api);
    const seenWhileRunning: unknown[] = [];
    const model = lookupModel();
    const agent = agentWith(model, lookupTool(({ topic }) => {
      seenWhileRunning.push(structuredClone(api.status.toolCalls));
      return { fact: `a fact about ${topic}` };
    }));

    const result = await run(sandbox, agent, "Tell me about tides.", { idempotent: ["lookup"] });

    expect(seenWhileRunning).toEqual([[expect.objectContaining({ name: "lookup", state: "Started", attempt: 1, idempotent: true })]]);
    expect(api.status.toolCalls).toEqual([expect.objectContaining({ name: "lookup", state: "Succeeded", result: JSON.stringify({ fact: "a fact about tides" }) })]);
    expect(toolResults(model.calls[1]!)).toEqual([JSON.stringify({ fact: "a fact about tides" })]);
    expect(result.finalOutput).toBe('Found: {"fact":"a fact about tides"}');
    // The final text reaches status as the agent's text, written once.
    expect(api.status.heartbeat.activity.kind).toBe("text");
    expect(sandbox.transcript.filter((e) => e.kind === "text").map((e) => e.text)).toEqual([result.finalOutput]);
  });

  it("records a throwing tool Failed and hands the error to the model, and the run goes on", async () => {
    const api = new FakeApi();
    const sandbox = await start(api);
    const model = lookupModel();
    const agent = agentWith(model, lookupTool(() => {
      throw Object.assign(new Error("upstream is down"), { status: 503 });
    }));

    const result = await run(sandbox, agent, "Tell me about tides.");

    expect(api.status.toolCalls).toEqual([expect.objectContaining({ name: "lookup", state: "Failed", error: { message: "upstream is down", httpStatus: 503 } })]);
    expect(toolResults(model.calls[1]!)).toEqual(["Error running tool lookup: upstream is down"]);
    expect(result.finalOutput).toBe("Found: Error running tool lookup: upstream is down");
  });

  it("records a tool made with the SDK's own tool() too (its errorFunction turns errors into results)", async () => {
    const api = new FakeApi();
    const sandbox = await start(api);
    const plain = sdkTool({ name: "lookup", description: "Looks a topic up.", parameters: params, execute: ({ topic }) => `${topic} rise and fall` });
    await run(sandbox, agentWith(lookupModel(), plain), "Tell me about tides.");
    expect(api.status.toolCalls).toEqual([expect.objectContaining({ name: "lookup", state: "Succeeded", result: JSON.stringify("tides rise and fall") })]);
  });

  it("runs the tools of an agent it hands off to under the protocol", async () => {
    const api = new FakeApi();
    const sandbox = await start(api);
    const executed = vi.fn(() => "a fact");
    const lookup = lookupTool(executed);
    const specialist = new Agent({ name: "specialist", instructions: "Look it up.", model: lookupModel(), tools: [lookup] });
    const triageModel = new ScriptedModel([[functionCall("transfer_to_specialist", {}, { callId: "h1" })]]);
    const triage = new Agent({ name: "triage", instructions: "Hand off.", model: triageModel, handoffs: [specialist] });

    const result = await run(sandbox, triage, "Tell me about tides.");

    expect(executed).toHaveBeenCalledTimes(1);
    expect(api.status.toolCalls).toEqual([expect.objectContaining({ name: "lookup", state: "Succeeded" })]);
    expect(result.finalOutput).toBe("Found: a fact");
    // The user's agents are left as they were; the copies hold the wrapped tools.
    expect(specialist.tools[0]).toBe(lookup);
    expect(triage.handoffs[0]).toBe(specialist);
    expect(watchdogAgent(sandbox, specialist).tools[0]).not.toBe(lookup);
  });

  it("runs the tools of the agent's MCP servers under the protocol", async () => {
    const api = new FakeApi();
    const sandbox = await start(api);
    const callTool = vi.fn(async () => {
      expect(api.status.toolCalls).toEqual([expect.objectContaining({ name: "lookup", state: "Started" })]);
      return [{ type: "text", text: "tides rise and fall" }];
    });
    const server: MCPServer = {
      name: "facts",
      cacheToolsList: false,
      connect: async () => {},
      close: async () => {},
      invalidateToolsCache: async () => {},
      listTools: async () => [{ name: "lookup", description: "Looks a topic up.", inputSchema: { type: "object", properties: { topic: { type: "string" } }, required: ["topic"], additionalProperties: false } }],
      callTool,
    };
    const model = lookupModel();
    const agent = new Agent({ name: "researcher", instructions: "Look it up.", model, mcpServers: [server] });

    const result = await run(sandbox, agent, "Tell me about tides.");

    expect(callTool).toHaveBeenCalledTimes(1);
    expect(api.status.toolCalls).toEqual([expect.objectContaining({ name: "lookup", state: "Succeeded" })]);
    expect(result.finalOutput).toContain("tides rise and fall");
  });
});

describe("a new attempt", () => {
  it("returns the saved result of a call the last attempt made, without running the tool; the model gets it", async () => {
    const api = new FakeApi();
    const two = await secondAttempt(api, async (one) => {
      await run(one, agentWith(lookupModel(), lookupTool(({ topic }) => ({ fact: `a fact about ${topic}` }))), "Tell me about tides.", { idempotent: ["lookup"] });
    });
    const execute = vi.fn(() => ({ fact: "a different fact" }));
    const model = lookupModel();

    const result = await run(two, agentWith(model, lookupTool(execute)), "Tell me about tides.", { idempotent: ["lookup"] });

    expect(execute).not.toHaveBeenCalled();
    expect(toolResults(model.calls[1]!)).toEqual([JSON.stringify({ fact: "a fact about tides" })]);
    expect(result.finalOutput).toBe('Found: {"fact":"a fact about tides"}');
    expect(api.status.toolCalls).toEqual([expect.objectContaining({ attempt: 1, state: "Succeeded" })]);
  });

  it("runs an unfinished idempotent call again with the same key, which the tool can read", async () => {
    const api = new FakeApi();
    const contexts: (ToolContext | undefined)[] = [];
    const two = await secondAttempt(api, async (one) => {
      const hung = lookupTool((_args, _ctx, details) => {
        contexts.push(toolContext(details));
        return new Promise(() => {}); // the process dies while the tool runs
      });
      void run(one, agentWith(lookupModel(), hung), "Tell me about tides.", { idempotent: ["lookup"] }).catch(() => {});
      await until("the call to start", () => api.status.toolCalls?.[0]?.state === "Started");
    });
    const result = await run(two, agentWith(lookupModel(), lookupTool((_args, _ctx, details) => {
      contexts.push(toolContext(details));
      return "found";
    })), "Tell me about tides.", { idempotent: ["lookup"] });

    expect(contexts.map((c) => [c?.attempt, c?.rerun])).toEqual([[1, false], [2, true]]);
    expect(contexts[1]!.idempotencyKey).toBe(contexts[0]!.idempotencyKey);
    expect(result.finalOutput).toBe("Found: found");
  });

  it.each([false, true])("stops with UnconfirmedSideEffectError for a non-idempotent call the last attempt left Started, without asking the model (stream: %s)", async (stream) => {
    const api = new FakeApi();
    const two = await secondAttempt(api, async (one) => {
      void run(one, agentWith(lookupModel(), lookupTool(() => new Promise(() => {}))), "Tell me about tides.").catch(() => {});
      await until("the call to start", () => api.status.toolCalls?.[0]?.state === "Started");
    });
    const execute = vi.fn(() => "charged again");
    const model = lookupModel();

    await expect(run(two, agentWith(model, lookupTool(execute)), "Tell me about tides.", { stream })).rejects.toBeInstanceOf(UnconfirmedSideEffectError);
    expect(execute).not.toHaveBeenCalled();
    expect(model.calls).toHaveLength(1); // the refusal never reached the model
    expect(model.remainingSteps).toBe(1);
  });
});

describe("streaming", () => {
  it("reports one delta for the stream and its final text, however many chunks", async () => {
    const api = new FakeApi();
    const sandbox = await start(api);
    const usage = { inputTokens: 1, outputTokens: 3, totalTokens: 4 };
    const model = new ScriptedModel([
      [functionCall("lookup", { topic: "tides" }, { callId: "call_1" })],
      modelStream([
        { type: "response_started" },
        { type: "output_text_delta", delta: "Tides " },
        { type: "output_text_delta", delta: "rise " },
        { type: "output_text_delta", delta: "and fall." },
        { type: "response_done", response: { id: "r2", usage, output: [assistantMessage("Tides rise and fall.")] } },
      ]),
    ]);

    const result = await run(sandbox, agentWith(model, lookupTool(() => "they rise")), "Tell me about tides.", { stream: true });

    expect(result.finalOutput).toBe("Tides rise and fall.");
    expect(model.calls.map((c) => c.streamed)).toEqual([true, true]);
    const activities = api.patches.map((p: any) => p.status.heartbeat?.activity?.kind).filter(Boolean);
    expect(activities.filter((k) => k === "delta")).toHaveLength(1);
    expect(activities.at(-1)).toBe("text");
    expect(activities.indexOf("delta")).toBeGreaterThan(activities.indexOf("toolResult"));
    expect(sandbox.transcript.filter((e) => e.kind === "text").map((e) => e.text)).toEqual(["Tides rise and fall."]);
  });
});

describe("approvals", () => {
  async function awaitingReply(api: FakeApi): Promise<void> {
    await until("the question", () => api.status.heartbeat?.state === "AwaitingReply");
    api.operator({ phase: "AwaitingReply", approval: { state: "Pending", requestedAt: new Date().toISOString() } });
  }

  it("turns a tool's approval request into awaitApproval and resumes the run once approved", async () => {
    const api = new FakeApi();
    const sandbox = await start(api);
    const execute = vi.fn(() => "sent");
    const model = lookupModel();
    const running = run(sandbox, agentWith(model, lookupTool(execute, { needsApproval: true })), "Tell me about tides.");

    await awaitingReply(api);
    expect(api.status.checkpoint.data["watchdog.dev/approval-request"].question).toBe('Allow researcher to call lookup with {"topic":"tides"}?');
    expect(execute).not.toHaveBeenCalled();
    expect(api.status.toolCalls).toBeUndefined();
    api.operator({ approval: { state: "Approved", answer: "go", decidedAt: new Date().toISOString() } });

    const result = await running;
    expect(execute).toHaveBeenCalledTimes(1);
    expect(api.status.toolCalls).toEqual([expect.objectContaining({ name: "lookup", state: "Succeeded" })]);
    expect(result.finalOutput).toBe("Found: sent");
  });

  it("in a new attempt, takes the answer to the question the last attempt asked without asking again", async () => {
    const api = new FakeApi();
    const execute = vi.fn(() => "sent");
    const agent = () => agentWith(lookupModel(), lookupTool(execute, { needsApproval: true }));
    const one = await start(api);
    void run(one, agent(), "Tell me about tides.").catch(() => {});
    await awaitingReply(api);
    one.abandon(); // the operator releases the pod while the question waits
    api.operator({ attempt: 2, phase: "Starting", approval: { state: "Approved", answer: "go", decidedAt: new Date().toISOString() } });
    const two = await start(api, 2);
    const writesBefore = api.patches.length;

    const result = await run(two, agent(), "Tell me about tides.");

    expect(result.finalOutput).toBe("Found: sent");
    expect(execute).toHaveBeenCalledTimes(1);
    expect(api.patches.slice(writesBefore).some((p: any) => p.status.heartbeat?.state === "AwaitingReply")).toBe(false);
  });

  it("throws ApprovalDeniedError when the request is rejected, and the tool never runs", async () => {
    const api = new FakeApi();
    const sandbox = await start(api);
    const execute = vi.fn(() => "sent");
    const running = run(sandbox, agentWith(lookupModel(), lookupTool(execute, { needsApproval: true })), "Tell me about tides.", {
      question: (item) => `Send ${item.arguments}?`,
    });
    await awaitingReply(api);
    expect(api.status.checkpoint.data["watchdog.dev/approval-request"].question).toBe('Send {"topic":"tides"}?');
    api.operator({ phase: "Failed", approval: { state: "Rejected", reason: "not today", decidedAt: new Date().toISOString() } });

    await expect(running).rejects.toBeInstanceOf(ApprovalDeniedError);
    expect(execute).not.toHaveBeenCalled();
  });
});

describe("usage and the run's budget", () => {
  /** lookupModel, each response with this usage. */
  function spendingModel(input: number, output: number) {
    const usage = () => new Usage({ requests: 1, inputTokens: input, outputTokens: output, totalTokens: input + output });
    return new ScriptedModel([
      { usage: usage(), output: [functionCall("lookup", { topic: "tides" }, { callId: "call_1" })] },
      modelResponder((call) => ({ usage: usage(), output: [assistantMessage(`Found: ${toolResults(call).at(-1)}`)] })),
    ]);
  }

  it("reports each model response's usage once, and counts the tool call: the heartbeat carries them", async () => {
    const api = new FakeApi();
    const sandbox = await start(api);
    await run(sandbox, agentWith(spendingModel(900, 40), lookupTool(() => "a fact")), "Tell me about tides.", { model: "gpt-5" });
    expect(api.status.heartbeat.usage).toEqual({ inputTokens: 1800, outputTokens: 80, toolCalls: 1, model: "gpt-5" });
  });

  it("reports a streamed run's usage, under the agent's model name", async () => {
    const api = new FakeApi();
    const sandbox = await start(api);
    const usage = { inputTokens: 10, outputTokens: 30, totalTokens: 40 };
    const model = new ScriptedModel([
      { usage: new Usage(usage), output: [functionCall("lookup", { topic: "tides" }, { callId: "call_1" })] },
      modelStream([
        { type: "response_started" },
        { type: "output_text_delta", delta: "Tides." },
        { type: "response_done", response: { id: "r2", usage, output: [assistantMessage("Tides.")] } },
      ]),
    ]);
    // The runner resolves a model name through its provider; the agent names it.
    const agent = new Agent({ name: "researcher", instructions: "Look it up.", model: "gpt-5-mini", tools: [lookupTool(() => "a fact")] });
    const runner = new (await import("@openai/agents")).Runner({ tracingDisabled: true, modelProvider: { getModel: async () => model } });
    await run(sandbox, agent, "Tell me about tides.", { stream: true, runner });
    expect(api.status.heartbeat.usage).toEqual({ inputTokens: 20, outputTokens: 60, toolCalls: 1, model: "gpt-5-mini" });
  });

  it("counts a run resumed after an approval once, not the whole state again", async () => {
    const api = new FakeApi();
    const sandbox = await start(api);
    const running = run(sandbox, agentWith(spendingModel(100, 10), lookupTool(() => "sent", { needsApproval: true })), "Tell me about tides.");
    await until("the question", () => api.status.heartbeat?.state === "AwaitingReply");
    api.operator({ phase: "AwaitingReply", approval: { state: "Pending", requestedAt: new Date().toISOString() } });
    expect(sandbox.usage).toMatchObject({ inputTokens: 100, outputTokens: 10 });
    api.operator({ approval: { state: "Approved", answer: "go", decidedAt: new Date().toISOString() } });
    await running;
    expect(api.status.heartbeat.usage).toMatchObject({ inputTokens: 200, outputTokens: 20, toolCalls: 1 });
  });

  it("stops with BudgetExhaustedError once a response brings the run to a limit: no tool runs, no model call follows", async () => {
    const api = new FakeApi({}, { budget: { tokens: 900 } });
    const sandbox = await start(api);
    const execute = vi.fn(() => "a fact");
    const model = spendingModel(860, 40);
    await expect(run(sandbox, agentWith(model, lookupTool(execute)), "Tell me about tides.")).rejects.toBeInstanceOf(BudgetExhaustedError);
    expect(execute).not.toHaveBeenCalled();
    expect(model.calls).toHaveLength(1);
    expect(api.status.heartbeat.usage).toMatchObject({ inputTokens: 860, outputTokens: 40 });
  });

  it("refuses the first model call when ended attempts spent the budget, and the user's own input filter still runs after it", async () => {
    const api = new FakeApi({ attempt: 2, spent: { inputTokens: 0, outputTokens: 0, cost: "0", toolCalls: 7, throughAttempt: 1 } }, { budget: { toolCalls: 7 } });
    const sandbox = await start(api, 2);
    const model = spendingModel(1, 1);
    const filter = vi.fn(({ modelData }) => modelData);
    await expect(run(sandbox, agentWith(model, lookupTool(vi.fn())), "Tell me about tides.", { stream: true, callModelInputFilter: filter })).rejects.toThrow(/tool call budget: 7 of 7/);
    expect(model.calls).toHaveLength(0);
    expect(filter).not.toHaveBeenCalled();

    api.operator({ budget: { toolCalls: 9, warnAt: 0.8 } });
    const result = await run(sandbox, agentWith(spendingModel(1, 1), lookupTool(() => "a fact")), "Tell me about tides.", { callModelInputFilter: filter });
    expect(result.finalOutput).toBe("Found: a fact");
    expect(filter).toHaveBeenCalledTimes(2);
  });
});

describe("the example", () => {
  it("looks its goal up once, answers with the fact, and replays the call in a new attempt", async () => {
    const dir = await mkdtemp(join(tmpdir(), "openai-agents-example-"));
    const sideEffects = join(dir, "side-effects");
    vi.stubEnv("SIDE_EFFECTS_FILE", sideEffects);
    const api = new FakeApi({}, { goal: "tides" });
    const exits: number[] = [];
    // The example as runAgent would run it in a pod, on the FakeApi.
    const runExample = async (attempt: number) => {
      vi.resetModules();
      vi.doMock("../../../../operator/sandbox/index.ts", async (load) => ({
        ...(await load<object>()),
        runAgent: (main: Parameters<typeof runAgent>[0]) =>
          runAgent(main, { client: api.client(), identity: { runName: "r", namespace: "ns", attempt }, logger: createLogger("silent"), heartbeatTimeoutMs: 60_000, exit: (code) => exits.push(code) }),
      }));
      await import("../../../../operator/sandbox/examples/openai-agents.ts");
    };
    try {
      await runExample(1);
      expect(exits).toEqual([0]);
      expect(api.status.toolCalls).toEqual([expect.objectContaining({ name: "lookup", state: "Succeeded", idempotent: true, result: JSON.stringify({ fact: "a fact about tides" }) })]);
      expect(api.status.heartbeat.activity.kind).toBe("text");

      api.operator({ attempt: 2, phase: "Starting" });
      await runExample(2);
      expect(exits).toEqual([0, 0]);
      expect(await readFile(sideEffects, "utf8")).toBe("lookup tides\n");
    } finally {
      vi.doUnmock("../../../../operator/sandbox/index.ts");
      vi.unstubAllEnvs();
      await rm(dir, { recursive: true, force: true });
    }
  });
});
