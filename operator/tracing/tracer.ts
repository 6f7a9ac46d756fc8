// The operator's traces: one per run, exported over OTLP/HTTP with the OpenTelemetry JS SDK. Off
// unless an OTLP endpoint is set (OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT;
// OTEL_SDK_DISABLED=true or OTEL_TRACES_EXPORTER=none turn it off again); the exporter reads the
// other standard OTEL_EXPORTER_OTLP_* variables (headers, timeout, certificates) itself.
//
// It listens to the reconciler like the ledger: after each reconcile it folds the run's status in
// (run-spans.ts, pure) and exports the spans that ended. Only transitions this process wrote end
// spans: the first time it sees a run, what the run already held is replayed to rebuild the open
// spans, and exported by whoever wrote it. Span and trace ids come from the run's uid, so the
// trace continues across restarts and failovers. A span ended but not yet exported when the
// process dies is lost (at most OTEL_BSP_SCHEDULE_DELAY, default 1 s, of spans): traces are
// evidence, never state, and nothing waits on them.
import { ROOT_CONTEXT, SpanKind, SpanStatusCode, TraceFlags, trace, type Context, type Tracer } from "@opentelemetry/api";
import type { AgentRunStatus } from "../api/agentrun.ts";
import type { Json } from "../kube/client.ts";
import type { Logger } from "../log.ts";
import { runTraceId } from "../watchdog/trace-context.ts";
import { initialTraceState, runSpans, type RunIdentity, type RunTraceState, type SpanRecord } from "./run-spans.ts";

const DEFAULT_EXPORT_DELAY_MS = 1_000;
const SHUTDOWN_FLUSH_MS = 5_000;

/** Whether the environment asks for traces. */
export function tracingRequested(env: NodeJS.ProcessEnv): boolean {
  if (env.OTEL_SDK_DISABLED?.trim().toLowerCase() === "true") return false;
  if (env.OTEL_TRACES_EXPORTER?.split(",").map((e) => e.trim()).includes("none")) return false;
  return Boolean(env.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT?.trim() || env.OTEL_EXPORTER_OTLP_ENDPOINT?.trim());
}

/** Hands the SDK the ids of the span being started: they are derived, never random. */
class DerivedIds {
  traceId = "";
  spanId = "";
  generateTraceId = () => this.traceId;
  generateSpanId = () => this.spanId;
}

interface Exporting {
  forceFlush(): Promise<void>;
  shutdown(): Promise<void>;
}

export class RunTracer {
  private readonly states = new Map<string, RunTraceState>();
  private readonly tracer: Tracer;
  private readonly ids: DerivedIds;
  private readonly provider: Exporting;
  private readonly log: Logger;
  exported = 0;

  private constructor(tracer: Tracer, ids: DerivedIds, provider: Exporting, log: Logger) {
    this.tracer = tracer;
    this.ids = ids;
    this.provider = provider;
    this.log = log;
  }

  /** A tracer exporting over OTLP/HTTP, or undefined when the environment asks for no traces. */
  static async start(log: Logger, env: NodeJS.ProcessEnv = process.env): Promise<RunTracer | undefined> {
    if (!tracingRequested(env)) return undefined;
    // Loaded only when asked for: an operator without traces carries none of the SDK.
    const [{ TracerProvider, BatchSpanProcessor }, { OTLPTraceExporter }, { detectResources, envDetector, resourceFromAttributes }] = await Promise.all([
      import("@opentelemetry/sdk-trace"),
      import("@opentelemetry/exporter-trace-otlp-http"),
      import("@opentelemetry/resources"),
    ]);
    const ids = new DerivedIds();
    const delay = Number(env.OTEL_BSP_SCHEDULE_DELAY);
    const provider = new TracerProvider({
      idGenerator: ids,
      // OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES, read by the SDK's own detector, over the default name.
      resource: resourceFromAttributes({ "service.name": "agent-watchdog" }).merge(detectResources({ detectors: [envDetector] })),
      spanProcessors: [new BatchSpanProcessor({ exporter: new OTLPTraceExporter(), scheduledDelayMillis: Number.isFinite(delay) && delay > 0 ? delay : DEFAULT_EXPORT_DELAY_MS })],
    });
    log.info({ endpoint: env.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT || env.OTEL_EXPORTER_OTLP_ENDPOINT }, "tracing runs over OTLP");
    return new RunTracer(provider.getTracer("agent-watchdog"), ids, provider, log);
  }

  /**
   * The reconciler's observer: `run` as it is after the reconcile, `before` as the reconcile found
   * it (the same object when nothing was written). The first write seen for a run first replays
   * what `before` held, which this process did not write.
   */
  observe(run: Json, before: Json): void {
    // Spans end only at what this process writes: a reconcile that wrote nothing (a heartbeat's,
    // above all) hands back the object it found, and costs nothing here.
    if (run === before) return;
    const metadata = (run.metadata ?? {}) as { uid?: string; name?: string; namespace?: string; creationTimestamp?: string };
    if (!metadata.uid || !metadata.name || !metadata.namespace) return;
    const identity: RunIdentity = {
      uid: metadata.uid,
      name: metadata.name,
      namespace: metadata.namespace,
      createdAt: Date.parse(metadata.creationTimestamp ?? "") || 0,
    };
    const key = `${metadata.namespace}/${metadata.name}`;
    let state = this.states.get(key);
    if (!state || (before.metadata as { uid?: string } | undefined)?.uid !== metadata.uid) {
      state = initialTraceState();
      runSpans(identity, before.status as AgentRunStatus | undefined, state);
      this.states.set(key, state);
    }
    for (const span of runSpans(identity, run.status as AgentRunStatus | undefined, state)) this.export(identity, span);
    if (state.ended) this.states.delete(key);
  }

  /** Forgets a run whose object is gone. */
  forget(key: string): void {
    this.states.delete(key);
  }

  /** Exports what has ended and stops. */
  async shutdown(ms = SHUTDOWN_FLUSH_MS): Promise<void> {
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([this.provider.shutdown().catch((err: unknown) => this.log.warn({ err }, "exporting the last spans failed")), new Promise((resolve) => (timer = setTimeout(resolve, ms)))]);
    clearTimeout(timer);
  }

  private export(run: RunIdentity, record: SpanRecord): void {
    const traceId = runTraceId(run.uid);
    const sampled = (spanId: string) => ({ traceId, spanId, traceFlags: TraceFlags.SAMPLED, isRemote: true });
    const parent: Context = record.parentSpanId ? trace.setSpanContext(ROOT_CONTEXT, sampled(record.parentSpanId)) : ROOT_CONTEXT;
    this.ids.traceId = traceId;
    this.ids.spanId = record.spanId;
    const span = this.tracer.startSpan(
      record.name,
      {
        kind: SpanKind.INTERNAL,
        startTime: record.start,
        attributes: record.attributes,
        links: record.links.map((link) => ({ context: sampled(link.spanId), attributes: link.attributes })),
      },
      parent,
    );
    for (const event of record.events) span.addEvent(event.name, event.attributes, event.time);
    if (record.status.code === "ok") span.setStatus({ code: SpanStatusCode.OK });
    else if (record.status.code === "error") span.setStatus({ code: SpanStatusCode.ERROR, message: record.status.message });
    span.end(Math.max(record.start, record.end));
    this.exported++;
  }
}
