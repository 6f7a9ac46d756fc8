// The Model Context Protocol adapter: an MCP client whose tool calls the sandbox records, and whose
// elicitation requests a person answers through the run's approvals.
//
//   const client = watchdogClient(sandbox, new Client({ name: "agent", version: "1.0.0" }), { idempotent: ["lookup"] });
//   await client.connect(transport);
//   const result = await client.callTool({ name: "lookup", arguments: { topic: "tides" } });
//
// MCP has no model and no final text: the agent's own loop decides what to call, and reports its
// final text with sandbox.say() (or a stream with sandbox.beginStream()).
import type { Client } from "@modelcontextprotocol/sdk/client/index.js";
import type { RequestOptions } from "@modelcontextprotocol/sdk/shared/protocol.js";
import { ElicitRequestSchema, ErrorCode, McpError, type ElicitRequest, type ElicitRequestFormParams, type ElicitResult, type PrimitiveSchemaDefinition } from "@modelcontextprotocol/sdk/types.js";
import { ApprovalDeniedError, ToolError } from "../errors.ts";
import type { Sandbox } from "../sandbox.ts";
import type { ToolContext } from "../tool-runner.ts";
import { callTool, mustStop, type AdapterOptions } from "./common.ts";

type CallTool = Client["callTool"];
type CallToolOutput = Awaited<ReturnType<CallTool>>;

/** The `_meta` key under which each tools/call request carries the call's idempotency key. */
export const IDEMPOTENCY_KEY_META = "watchdog.dev/idempotency-key";

export interface McpAdapterOptions extends AdapterOptions {
  /**
   * Answer the server's elicitation requests (elicitation/create) with sandbox.awaitApproval().
   * Declares the elicitation capability, so it needs a client that is not connected yet.
   * Default true; false leaves elicitation to the client's own handler.
   */
  approvals?: boolean;
  /** How a person's answer becomes the content of an accepted form. Default: elicitContent. */
  elicitContent?: (answer: string, form: ElicitRequestFormParams) => ElicitResult["content"];
}

const watched = new WeakSet<object>();

/**
 * Watches an MCP client: each `client.callTool()` from then on is recorded in the run's status
 * (Started before the request is sent, then Succeeded with the result, or Failed when the server
 * answers an error or a result with `isError: true`), a call an earlier attempt already completed
 * returns its saved result without sending the request, and the server's progress notifications
 * keep the heartbeat going. Returns the same client. Call it before `client.connect()`.
 */
export function watchdogClient<C extends Client>(sandbox: Sandbox, client: C, options: McpAdapterOptions = {}): C {
  if (watched.has(client)) throw new Error("watchdogClient(): this MCP client is already watched");
  // A rejected approval fails the run: the agent must stop with the rejection, not carry on.
  let denied: ApprovalDeniedError | undefined;
  const asking = new Set<Promise<ElicitResult>>();

  if (options.approvals ?? true) {
    if (client.transport) throw new Error("watchdogClient(): call it before client.connect() so the client can declare elicitation, or pass approvals: false");
    client.assertCanSetRequestHandler("elicitation/create"); // never replace the user's own handler unasked
    client.registerCapabilities({ elicitation: { form: {}, url: {} } });
    const elicitContent = options.elicitContent ?? defaultElicitContent;

    const answer = async (params: ElicitRequest["params"]): Promise<ElicitResult> => {
      // URL mode: the person does what the page asks, then approves; the server learns "accept".
      const question = params.mode === "url" ? `${params.message}\n\nOpen ${params.url}, then approve.` : formQuestion(params);
      try {
        const reply = await sandbox.awaitApproval(question);
        const content = params.mode === "url" ? undefined : elicitContent(reply, params);
        return content === undefined ? { action: "accept" } : { action: "accept", content };
      } catch (err) {
        if (!(err instanceof ApprovalDeniedError)) throw err;
        denied ??= err;
        // Rejected is a person's "no"; timed out is no choice at all.
        return { action: err.state === "Rejected" ? "decline" : "cancel" };
      }
    };
    client.setRequestHandler(ElicitRequestSchema, (request) => {
      const answering = answer(request.params);
      asking.add(answering);
      const done = () => asking.delete(answering);
      answering.then(done, done);
      return answering;
    });
  }

  const original = client.callTool.bind(client);
  const watchedCallTool: CallTool = async (params, resultSchema, requestOptions) => {
    if (denied) throw denied;
    let errorResult: CallToolOutput | undefined;
    let thrown: { error: unknown } | undefined;
    const send = async (_args: unknown, ctx: ToolContext): Promise<CallToolOutput> => {
      const request = { ...params, _meta: { ...params._meta, [IDEMPOTENCY_KEY_META]: ctx.idempotencyKey } };
      let result: CallToolOutput;
      try {
        result = await original(request, resultSchema, withProgress(requestOptions, ctx));
      } catch (err) {
        thrown = { error: err };
        throw err;
      }
      if (result.isError === true) {
        errorResult = result;
        throw new ToolError(errorText(result, params.name));
      }
      return result;
    };

    let result: CallToolOutput;
    try {
      result = asCallToolResult(await callTool(sandbox, params.name, params.arguments ?? {}, send, options));
    } catch (err) {
      // A rejection fences the sandbox too, and the fence may arrive first: the rejection is the cause.
      if (err instanceof Error && err.name === "FencedError") await Promise.allSettled([...asking]);
      if (denied) throw denied;
      if (mustStop(err) || !(err instanceof ToolError)) throw err;
      // Failed: the caller sees what it would have seen without the watchdog.
      if (errorResult) return errorResult;
      if (thrown) throw thrown.error;
      // Not sent at all (an earlier attempt's call of unknown outcome): an error result to read.
      return { content: [{ type: "text", text: err.message }], isError: true };
    }
    if (denied) throw denied;
    return result;
  };
  client.callTool = watchedCallTool;
  watched.add(client);
  return client;
}

/** Asks the server for progress; each notification is progress for the heartbeat. Fencing cancels the request. */
function withProgress(options: RequestOptions | undefined, ctx: ToolContext): RequestOptions {
  return {
    ...options,
    onprogress: (progress) => {
      ctx.progress();
      options?.onprogress?.(progress);
    },
    signal: options?.signal ? AbortSignal.any([ctx.signal, options.signal]) : ctx.signal,
  };
}

function errorText(result: CallToolOutput, toolName: string): string {
  const content: unknown[] = Array.isArray(result.content) ? result.content : [];
  const text = content
    .filter((c): c is { type: "text"; text: string } => (c as { type?: unknown }).type === "text")
    .map((c) => c.text)
    .join("\n")
    .trim();
  return text || `${toolName} returned an error result`;
}

/** A saved result too large for status comes back as its truncation notice, as text. */
function asCallToolResult(value: unknown): CallToolOutput {
  if (typeof value === "object" && value !== null && (Array.isArray((value as { content?: unknown }).content) || "toolResult" in value)) return value as CallToolOutput;
  return { content: [{ type: "text", text: typeof value === "string" ? value : (JSON.stringify(value) ?? "") }] };
}

function formQuestion(form: ElicitRequestFormParams): string {
  const fields = Object.entries(form.requestedSchema.properties);
  if (fields.length <= 1) return form.message;
  return `${form.message}\n\nAnswer with a JSON object: ${fields.map(([name, schema]) => `${name} (${schema.type})`).join(", ")}`;
}

/**
 * The default mapping of a person's answer to a form's content: no fields, no content (a plain
 * confirmation); an answer that is a JSON object is the content; a form of one field gets the
 * answer in that field, as a number, a boolean (true unless the answer is no/false/0) or a
 * comma-separated list when the field says so. A form of several fields needs a JSON answer.
 */
export function defaultElicitContent(answer: string, form: ElicitRequestFormParams): ElicitResult["content"] {
  const fields = Object.entries(form.requestedSchema.properties);
  if (fields.length === 0) return undefined;
  const json = parseObject(answer);
  if (json) return json as ElicitResult["content"]; // the SDK checks the values, the server the schema
  const [only] = fields;
  if (fields.length === 1 && only) return { [only[0]]: coerce(answer, only[1]) };
  throw new McpError(ErrorCode.InvalidParams, `the answer is not a JSON object with the fields ${fields.map(([name]) => name).join(", ")}`);
}

function parseObject(text: string): Record<string, unknown> | undefined {
  try {
    const value: unknown = JSON.parse(text);
    return typeof value === "object" && value !== null && !Array.isArray(value) ? (value as Record<string, unknown>) : undefined;
  } catch {
    return undefined;
  }
}

function coerce(answer: string, schema: PrimitiveSchemaDefinition): string | number | boolean | string[] {
  const text = answer.trim();
  switch (schema.type) {
    case "number":
    case "integer": {
      const n = Number(text);
      return text !== "" && Number.isFinite(n) ? n : answer;
    }
    case "boolean":
      return !/^(no|n|false|0)$/i.test(text);
    case "array":
      return text.split(",").map((s) => s.trim()).filter((s) => s !== "");
    default:
      return answer;
  }
}
