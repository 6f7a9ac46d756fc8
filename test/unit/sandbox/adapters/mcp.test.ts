// The MCP adapter against the in-memory API (fake-api.ts) and a real MCP server on the SDK's
// in-memory transport: what a watched client's tool calls record, what a new attempt replays, and
// how the server's elicitation requests become approvals.
import { join } from "node:path";
import { tmpdir } from "node:os";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { InMemoryTransport } from "@modelcontextprotocol/sdk/inMemory.js";
import { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js";
import { ElicitRequestSchema, ErrorCode, McpError, type CallToolResult, type ElicitRequestFormParams } from "@modelcontextprotocol/sdk/types.js";
import { afterEach, describe, expect, it, vi } from "vitest";
import { z } from "zod";
import { createLogger } from "../../../../operator/log.ts";
import { IDEMPOTENCY_KEY_META, defaultElicitContent, watchdogClient, type McpAdapterOptions } from "../../../../operator/sandbox/adapters/mcp.ts";
import { ApprovalDeniedError, BudgetExhaustedError, EXIT_CODES, UnconfirmedSideEffectError } from "../../../../operator/sandbox/errors.ts";
import { runAgent } from "../../../../operator/sandbox/runner.ts";
import { Sandbox, type SandboxOptions } from "../../../../operator/sandbox/sandbox.ts";
import { FakeApi } from "../fake-api.ts";

let sandboxes: Sandbox[] = [];
let closers: (() => Promise<void>)[] = [];

afterEach(async () => {
  for (const close of closers) await close().catch(() => {});
  closers = [];
  for (const s of sandboxes) s.abandon();
  sandboxes = [];
  vi.useRealTimers();
});

const identity = (attempt = 1) => ({ runName: "r", namespace: "ns", attempt });

async function start(api: FakeApi, options: Partial<SandboxOptions> = {}): Promise<Sandbox> {
  const sandbox = await Sandbox.start({ client: api.client(), identity: identity(), logger: createLogger("silent"), exit: () => {}, heartbeatTimeoutMs: 60_000, ...options });
  sandboxes.push(sandbox);
  return sandbox;
}

/** A server with the tools `register` adds, and a watched client connected to it. */
async function connect(sandbox: Sandbox, register: (server: McpServer) => void, options: McpAdapterOptions = {}): Promise<Client> {
  const server = new McpServer({ name: "test-server", version: "1.0.0" });
  register(server);
  const [clientSide, serverSide] = InMemoryTransport.createLinkedPair();
  await server.connect(serverSide);
  const client = watchdogClient(sandbox, new Client({ name: "test-agent", version: "1.0.0" }), options);
  await client.connect(clientSide);
  closers.push(() => client.close(), () => server.close());
  return client;
}

/** Polls until `test` holds, or fails after a deadline. */
async function until(test: () => boolean, what: string, ms = 5000): Promise<void> {
  const deadline = Date.now() + ms;
  while (!test()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 5));
  }
}

const fact = (topic: string): CallToolResult => ({ content: [{ type: "text", text: `a fact about ${topic}` }], structuredContent: { fact: `a fact about ${topic}` } });

function lookup(server: McpServer, fn: (topic: string) => CallToolResult | Promise<CallToolResult> = fact, name = "lookup"): void {
  server.registerTool(name, { inputSchema: { topic: z.string() } }, ({ topic }) => fn(topic));
}

const textOf = (result: Awaited<ReturnType<Client["callTool"]>>) => (result.content as { text: string }[]).map((c) => c.text).join("\n");

describe("tool calls", () => {
  it("are recorded Started before the request reaches the server, then Succeeded with the result the caller gets", async () => {
    const api = new FakeApi();
    const sandbox = await start(api);
    const atServer: { calls: unknown; key: unknown }[] = [];
    const client = await connect(sandbox, (server) =>
      server.registerTool("lookup", { inputSchema: { topic: z.string() } }, ({ topic }, extra) => {
        atServer.push({ calls: structuredClone(api.status.toolCalls), key: extra._meta?.[IDEMPOTENCY_KEY_META] });
        return fact(topic);
      }), { idempotent: ["lookup"] });

    const result = await client.callTool({ name: "lookup", arguments: { topic: "tides" } });

    expect(atServer).toHaveLength(1);
    expect(atServer[0]!.calls).toEqual([expect.objectContaining({ name: "lookup", state: "Started", attempt: 1, idempotent: true })]);
    expect(result.structuredContent).toEqual({ fact: "a fact about tides" });
    const [call] = api.status.toolCalls;
    expect(call).toMatchObject({ name: "lookup", state: "Succeeded" });
    expect(JSON.parse(call.result)).toEqual(result);
    // The server can recognise a repeated request by the call's idempotency key.
    expect(atServer[0]!.key).toBe(call.idempotencyKey);
  });

  it("records a tool that throws as Failed and hands its error result to the caller, and the run goes on", async () => {
    const api = new FakeApi();
    const sandbox = await start(api);
    const client = await connect(sandbox, (server) => {
      lookup(server, () => {
        throw new Error("the archive is closed");
      });
      lookup(server, fact, "other");
    });

    const failed = await client.callTool({ name: "lookup", arguments: { topic: "tides" } });
    expect(failed.isError).toBe(true);
    expect(textOf(failed)).toContain("the archive is closed");
    expect(api.status.toolCalls).toEqual([expect.objectContaining({ name: "lookup", state: "Failed", error: { message: "the archive is closed" } })]);

    const next = await client.callTool({ name: "other", arguments: { topic: "tides" } });
    expect(next.isError).toBeFalsy();
    expect(api.status.toolCalls.map((c: any) => [c.name, c.state])).toEqual([
      ["lookup", "Failed"],
      ["other", "Succeeded"],
    ]);
  });

  it("records a request the SDK gives up on as Failed and throws the SDK's own error", async () => {
    const api = new FakeApi();
    const sandbox = await start(api);
    const client = await connect(sandbox, (server) => lookup(server, () => new Promise(() => {})));
    const err: unknown = await client.callTool({ name: "lookup", arguments: { topic: "tides" } }, undefined, { timeout: 50 }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(McpError);
    expect((err as McpError).code).toBe(ErrorCode.RequestTimeout);
    expect(api.status.toolCalls).toEqual([expect.objectContaining({ state: "Failed", error: { message: (err as McpError).message } })]);
  });

  it("counts the server's progress notifications as progress for the heartbeat", async () => {
    vi.useFakeTimers({ now: Date.parse("2026-11-30T12:00:00Z") });
    const T0 = Date.now();
    const api = new FakeApi();
    const sandbox = await start(api, { heartbeatTimeoutMs: 4000 }); // a heartbeat a second, none after 4 s without progress
    const client = await connect(sandbox, (server) =>
      server.registerTool("slow", { inputSchema: { steps: z.number() } }, async ({ steps }, extra) => {
        for (let i = 1; i <= steps; i++) {
          await new Promise((r) => setTimeout(r, 1000));
          await extra.sendNotification({ method: "notifications/progress", params: { progressToken: extra._meta!.progressToken!, progress: i, total: steps } });
        }
        return { content: [{ type: "text", text: "done" }] };
      }));
    const progress = vi.fn();
    const call = client.callTool({ name: "slow", arguments: { steps: 10 } }, undefined, { onprogress: progress });
    await vi.advanceTimersByTimeAsync(9_500);
    // Without progress the heartbeats would have stopped at 4 s.
    expect(Date.parse(api.status.heartbeat.time) - T0).toBeGreaterThanOrEqual(8_000);
    expect(api.status.toolCalls).toEqual([expect.objectContaining({ state: "Started" })]);
    await vi.advanceTimersByTimeAsync(1_000);
    await expect(call).resolves.toMatchObject({ content: [{ text: "done" }] });
    expect(progress).toHaveBeenCalledTimes(10);
  });
});

describe("a new attempt", () => {
  async function secondAttempt(api: FakeApi, first: (s: Sandbox) => Promise<void>): Promise<Sandbox> {
    const one = await start(api);
    await first(one);
    one.abandon();
    api.operator({ attempt: 2, phase: "Starting" });
    return start(api, { identity: identity(2) });
  }

  it("returns the saved result of a call that succeeded, without sending the request", async () => {
    const api = new FakeApi();
    let first: unknown;
    const two = await secondAttempt(api, async (s) => {
      const client = await connect(s, (server) => lookup(server), { idempotent: ["lookup"] });
      first = await client.callTool({ name: "lookup", arguments: { topic: "tides" } });
    });
    const atServer = vi.fn(fact);
    const client = await connect(two, (server) => lookup(server, atServer), { idempotent: ["lookup"] });
    const replayed = await client.callTool({ name: "lookup", arguments: { topic: "tides" } });
    expect(atServer).not.toHaveBeenCalled();
    expect(replayed).toEqual(first);
    expect(api.status.toolCalls).toEqual([expect.objectContaining({ attempt: 1, state: "Succeeded" })]);
  });

  it("stops with UnconfirmedSideEffectError on a non-idempotent call the last attempt left Started", async () => {
    const api = new FakeApi();
    const two = await secondAttempt(api, async (s) => {
      let reached = false;
      const client = await connect(s, (server) =>
        lookup(server, () => {
          reached = true;
          return new Promise(() => {}); // the process dies while the server works
        }, "charge"));
      void client.callTool({ name: "charge", arguments: { topic: "card" } }).catch(() => {});
      await until(() => reached, "the request to reach the server");
    });
    expect(api.status.toolCalls).toEqual([expect.objectContaining({ name: "charge", state: "Started", attempt: 1, idempotent: false })]);
    const atServer = vi.fn(fact);
    const client = await connect(two, (server) => lookup(server, atServer, "charge"));
    await expect(client.callTool({ name: "charge", arguments: { topic: "card" } })).rejects.toThrow(UnconfirmedSideEffectError);
    expect(atServer).not.toHaveBeenCalled();

    // A person who has seen the record resumes the run: the caller is told, and still nothing is sent.
    two.abandon();
    api.operator({ attempt: 3, phase: "Starting", toolCallsResetAfter: "a1-1" });
    const three = await start(api, { identity: identity(3) });
    const resumed = await connect(three, (server) => lookup(server, atServer, "charge"));
    const told = await resumed.callTool({ name: "charge", arguments: { topic: "card" } });
    expect(told.isError).toBe(true);
    expect(textOf(told)).toContain("its outcome is unknown");
    expect(atServer).not.toHaveBeenCalled();
  });
});

describe("elicitation as approvals", () => {
  const now = () => new Date().toISOString();

  function deploy(server: McpServer, answers: unknown[], form: Omit<ElicitRequestFormParams, "message"> = { requestedSchema: { type: "object", properties: { answer: { type: "string" } }, required: ["answer"] } }): void {
    server.registerTool("deploy", { inputSchema: { version: z.string() } }, async ({ version }) => {
      const answer = await server.server.elicitInput({ ...form, message: `Deploy ${version}?` });
      answers.push(answer);
      return { content: [{ type: "text", text: `answer: ${JSON.stringify(answer)}` }] };
    });
  }

  it("asks a person through awaitApproval and hands the server the approved answer", async () => {
    const api = new FakeApi({ phase: "Planning" });
    const sandbox = await start(api);
    const answers: unknown[] = [];
    const client = await connect(sandbox, (server) => deploy(server, answers));

    const result = client.callTool({ name: "deploy", arguments: { version: "v2" } });
    await until(() => api.status.heartbeat?.state === "AwaitingReply", "AwaitingReply");
    expect(api.status.checkpoint.data["watchdog.dev/approval-request"]).toMatchObject({ question: "Deploy v2?" });
    expect(api.status.toolCalls).toEqual([expect.objectContaining({ name: "deploy", state: "Started" })]);
    expect(answers).toEqual([]);

    api.operator({ phase: "AwaitingReply", approval: { state: "Pending", requestedAt: now() } });
    api.operator({ approval: { state: "Approved", answer: "go", decidedAt: now() } });
    expect(textOf(await result)).toBe('answer: {"action":"accept","content":{"answer":"go"}}');
    expect(answers).toEqual([{ action: "accept", content: { answer: "go" } }]);
    expect(api.status.toolCalls).toEqual([expect.objectContaining({ name: "deploy", state: "Succeeded" })]);
    expect(api.status.heartbeat.state).toBe("Planning");
  });

  it("declines a rejected request and stops the agent with the rejection", async () => {
    const api = new FakeApi({ phase: "Planning" });
    const answers: unknown[] = [];
    let error: unknown;
    const code = await runAgent(
      async (sandbox) => {
        sandboxes.push(sandbox);
        const client = await connect(sandbox, (server) => deploy(server, answers));
        const result = client.callTool({ name: "deploy", arguments: { version: "v2" } });
        await until(() => api.status.heartbeat?.state === "AwaitingReply", "AwaitingReply");
        api.operator({ phase: "Failed", approval: { state: "Rejected", requestedAt: now(), reason: "not today", decidedAt: now() } });
        await result.catch((e: unknown) => {
          error = e;
          throw e;
        });
      },
      { client: api.client(), identity: identity(), logger: createLogger("silent"), exit: () => {}, heartbeatTimeoutMs: 60_000, terminationLogPath: join(tmpdir(), "none", "x") },
    );
    expect(error).toBeInstanceOf(ApprovalDeniedError);
    expect(code).toBe(EXIT_CODES.approvalDenied);
    await until(() => answers.length > 0, "the server to get the answer");
    expect(answers).toEqual([{ action: "decline" }]);
  });

  it("needs the client before it connects, and leaves a handler of the user's own alone", async () => {
    const api = new FakeApi();
    const sandbox = await start(api);
    const connected = await connect(sandbox, () => {}, { approvals: false });
    expect(() => watchdogClient(sandbox, connected)).toThrow("already watched");
    const [clientSide, serverSide] = InMemoryTransport.createLinkedPair();
    const server = new McpServer({ name: "s", version: "1.0.0" });
    await server.connect(serverSide);
    const other = new Client({ name: "c", version: "1.0.0" });
    await other.connect(clientSide);
    closers.push(() => other.close(), () => server.close());
    expect(() => watchdogClient(sandbox, other)).toThrow("before client.connect()");
    const own = new Client({ name: "c", version: "1.0.0" }, { capabilities: { elicitation: {} } });
    own.setRequestHandler(ElicitRequestSchema, () => ({ action: "cancel" }));
    expect(() => watchdogClient(sandbox, own)).toThrow("already exists");
    // The client is left as it was: watching it without approvals still works.
    expect(watchdogClient(sandbox, own, { approvals: false })).toBe(own);
  });

  it("maps an answer to the form's fields", () => {
    const form = (properties: Record<string, any>): ElicitRequestFormParams => ({ message: "?", requestedSchema: { type: "object", properties } });
    expect(defaultElicitContent("ok", form({}))).toBeUndefined();
    expect(defaultElicitContent(" 3 ", form({ count: { type: "integer" } }))).toEqual({ count: 3 });
    expect(defaultElicitContent("no", form({ confirm: { type: "boolean" } }))).toEqual({ confirm: false });
    expect(defaultElicitContent("go", form({ confirm: { type: "boolean" } }))).toEqual({ confirm: true });
    expect(defaultElicitContent("a, b", form({ tags: { type: "array", items: { type: "string", enum: ["a", "b"] } } }))).toEqual({ tags: ["a", "b"] });
    const two = form({ env: { type: "string" }, replicas: { type: "number" } });
    expect(defaultElicitContent('{"env":"prod","replicas":2}', two)).toEqual({ env: "prod", replicas: 2 });
    expect(() => defaultElicitContent("prod", two)).toThrow("not a JSON object with the fields env, replicas");
  });
});

describe("usage and the run's budget", () => {
  it("counts each tool call sent (failed ones too) in the attempt's usage, and a saved result not at all", async () => {
    const api = new FakeApi();
    const one = await start(api);
    const client = await connect(one, (server) => {
      lookup(server);
      lookup(server, () => ({ content: [{ type: "text", text: "no such topic" }], isError: true }), "broken");
    });
    await client.callTool({ name: "lookup", arguments: { topic: "tides" } });
    await client.callTool({ name: "broken", arguments: { topic: "x" } });
    expect(api.status.heartbeat.usage).toMatchObject({ toolCalls: 2 });

    one.abandon();
    api.operator({ attempt: 2, phase: "Starting", spent: { inputTokens: 0, outputTokens: 0, cost: "0", toolCalls: 2, throughAttempt: 1 } });
    const two = await start(api, { identity: identity(2) });
    const again = await connect(two, (server) => lookup(server));
    expect(textOf(await again.callTool({ name: "lookup", arguments: { topic: "tides" } }))).toBe("a fact about tides"); // the saved result
    expect(two.usage).toMatchObject({ toolCalls: 0 });
    expect(two.spending()).toMatchObject({ toolCalls: 2 });
  });

  it("refuses a tool call once the run's tool-call budget is spent, without sending it", async () => {
    const api = new FakeApi({}, { budget: { toolCalls: 1 } });
    const sandbox = await start(api);
    const fn = vi.fn(fact);
    const client = await connect(sandbox, (server) => lookup(server, fn));
    await client.callTool({ name: "lookup", arguments: { topic: "tides" } });
    await expect(client.callTool({ name: "lookup", arguments: { topic: "waves" } })).rejects.toThrow(BudgetExhaustedError);
    expect(fn).toHaveBeenCalledTimes(1);
    expect(api.status.toolCalls).toHaveLength(1);
    expect(api.status.heartbeat.usage).toMatchObject({ toolCalls: 1 });
  });
});
