// The sandbox's spans, under the attempt's span the operator names in TRACEPARENT (W3C Trace
// Context): an `execute_tool <name>` span per tool call that runs, in the OpenTelemetry GenAI
// conventions, and the agent's own work (the framework's spans) inside the attempt's context.
//
// Only the OpenTelemetry API is used here, as a library should: without an SDK registered by the
// agent (a TracerProvider and, for nesting across awaits, a context manager) every call is a
// no-op. The idempotency key is never recorded: only its hash, which tells calls apart without
// handing anyone the key a service would honour.
import { createHash } from "node:crypto";
import { ROOT_CONTEXT, SpanKind, SpanStatusCode, context, trace, type Context, type Span } from "@opentelemetry/api";
import { SANDBOX_ENV } from "../api/annotations.ts";
import type { ToolFailure } from "./errors.ts";

const TRACER = "@agent-watchdog/sandbox";
const TRACEPARENT = /^00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$/;

/** The attempt's span context from TRACEPARENT, or undefined when there is none (or it is malformed). */
export function attemptContext(env: NodeJS.ProcessEnv = process.env): Context | undefined {
  const match = TRACEPARENT.exec(env[SANDBOX_ENV.traceparent]?.trim() ?? "");
  if (!match) return undefined;
  const [, traceId, spanId, flags] = match as unknown as [string, string, string, string];
  if (/^0+$/.test(traceId) || /^0+$/.test(spanId)) return undefined;
  return trace.setSpanContext(ROOT_CONTEXT, { traceId, spanId, traceFlags: Number.parseInt(flags, 16) & 1, isRemote: true });
}

/** Runs `work` inside the attempt's context, so that spans it starts nest under the attempt. */
export function inAttempt<T>(work: () => T, env: NodeJS.ProcessEnv = process.env): T {
  const attempt = attemptContext(env);
  return attempt ? context.with(attempt, work) : work();
}

/** The first 16 hex characters of the key's sha256: enough to tell calls apart, nothing to replay. */
export const idempotencyKeyHash = (key: string): string => createHash("sha256").update(key).digest("hex").slice(0, 16);

export interface ToolSpanFacts {
  name: string;
  callId: string;
  idempotencyKey: string;
  attempt: number;
  rerun: boolean;
}

/**
 * Starts the span of a tool call that runs: under the active span if the agent's framework has one
 * (its own tool or step span), else under the attempt.
 */
export function startToolSpan(facts: ToolSpanFacts): Span {
  const active = context.active();
  const parent = trace.getSpan(active) ? active : (attemptContext() ?? active);
  return trace.getTracer(TRACER).startSpan(
    `execute_tool ${facts.name}`,
    {
      kind: SpanKind.INTERNAL,
      attributes: {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": facts.name,
        "gen_ai.tool.call.id": facts.callId,
        "watchdog.attempt": facts.attempt,
        "watchdog.tool.idempotency_key_hash": idempotencyKeyHash(facts.idempotencyKey),
        "watchdog.tool.rerun": facts.rerun,
      },
    },
    parent,
  );
}

/** Ends a tool call's span with its outcome. */
export function endToolSpan(span: Span, failure?: ToolFailure): void {
  if (failure) {
    span.setStatus({ code: SpanStatusCode.ERROR, message: failure.message });
    span.setAttribute("error.type", failure.httpStatus !== undefined ? String(failure.httpStatus) : failure.kind);
    if (failure.retryAfterSeconds !== undefined) span.setAttribute("watchdog.tool.retry_after_seconds", failure.retryAfterSeconds);
  }
  span.end();
}

export interface ModelCallFacts {
  /** The model asked for, as the framework names it. */
  model?: string;
  /** The provider, as the GenAI conventions name it (openai, anthropic, ...). */
  provider?: string;
  /** When the call started (ms since the epoch) and when it ended (default: now). */
  startedAt: number;
  endedAt?: number;
  tokens?: { inputTokens: number; outputTokens: number };
  finishReason?: string;
  responseId?: string;
  /** The call failed: why. */
  error?: string;
}

/**
 * Records one model call, once it has ended, as a GenAI `chat <model>` span under the active span
 * or the attempt: what the adapters learn from their framework's hooks, for frameworks that make
 * no OpenTelemetry spans of their own (or none without an integration).
 */
export function recordModelCall(facts: ModelCallFacts): void {
  const active = context.active();
  const parent = trace.getSpan(active) ? active : (attemptContext() ?? active);
  const attributes: Record<string, string | number | string[]> = { "gen_ai.operation.name": "chat" };
  if (facts.model) attributes["gen_ai.request.model"] = facts.model;
  if (facts.provider) attributes["gen_ai.provider.name"] = facts.provider;
  if (facts.tokens) {
    attributes["gen_ai.usage.input_tokens"] = facts.tokens.inputTokens;
    attributes["gen_ai.usage.output_tokens"] = facts.tokens.outputTokens;
  }
  if (facts.finishReason) attributes["gen_ai.response.finish_reasons"] = [facts.finishReason];
  if (facts.responseId) attributes["gen_ai.response.id"] = facts.responseId;
  const span = trace.getTracer(TRACER).startSpan(facts.model ? `chat ${facts.model}` : "chat", { kind: SpanKind.CLIENT, startTime: facts.startedAt, attributes }, parent);
  if (facts.error !== undefined) {
    span.setStatus({ code: SpanStatusCode.ERROR, message: facts.error });
    span.setAttribute("error.type", "model_call_failed");
  }
  span.end(Math.max(facts.startedAt, facts.endedAt ?? Date.now()));
}

/** Exports what the agent's tracer provider holds, if it has one, before the process ends. */
export async function flushTraces(ms: number): Promise<void> {
  const provider = trace.getTracerProvider() as { getDelegate?: () => unknown };
  const delegate = (provider.getDelegate?.() ?? provider) as { forceFlush?: () => Promise<void> };
  if (typeof delegate.forceFlush !== "function") return;
  let timer: NodeJS.Timeout | undefined;
  await Promise.race([delegate.forceFlush().catch(() => undefined), new Promise((resolve) => (timer = setTimeout(resolve, ms)))]);
  clearTimeout(timer);
}
