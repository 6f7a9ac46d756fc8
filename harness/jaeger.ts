// A trace backend for tests and the demo: Jaeger (its `cmd/jaeger`, built by hack/ from its pinned
// Go module), started on loopback with traces in memory. It takes OTLP over HTTP and answers trace
// queries (its HTTP query API); its UI assets are not in the published module, so it serves none.
import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { stringify as stringifyYaml } from "yaml";
import { freePort } from "./free-port.ts";
import { startTool, stopTool, toolBinary, toolReady } from "./tool-process.ts";

/** A span as Jaeger's query API returns it. */
export interface JaegerSpan {
  traceID: string;
  spanID: string;
  operationName: string;
  references: { refType: "CHILD_OF" | "FOLLOWS_FROM"; traceID: string; spanID: string }[];
  startTime: number;
  duration: number;
  tags: { key: string; type: string; value: unknown }[];
  logs: { timestamp: number; fields: { key: string; value: unknown }[] }[];
  processID: string;
  /** The service that exported it (from the response's processes). */
  service: string;
}

export interface Jaeger {
  /** Where OTLP/HTTP goes: OTEL_EXPORTER_OTLP_ENDPOINT. */
  otlpEndpoint: string;
  /** The query API's base (and where its UI would be). */
  queryUrl: string;
  /** The spans of trace `traceId`, or [] while Jaeger has none. */
  trace(traceId: string): Promise<JaegerSpan[]>;
  stop(): Promise<void>;
}

/** A span's tag value, by key. */
export const tag = (span: JaegerSpan, key: string): unknown => span.tags.find((t) => t.key === key)?.value;

export async function startJaeger(dir: string): Promise<Jaeger> {
  const bin = await toolBinary("jaeger");
  mkdirSync(dir, { recursive: true });
  const [otlpPort, queryPort, queryGrpcPort, healthPort] = [await freePort(), await freePort(), await freePort(), await freePort()];
  const config = join(dir, "jaeger.yaml");
  writeFileSync(
    config,
    stringifyYaml({
      service: {
        extensions: ["jaeger_storage", "jaeger_query", "healthcheckv2"],
        pipelines: { traces: { receivers: ["otlp"], processors: ["batch"], exporters: ["jaeger_storage_exporter"] } },
        // Its own metrics would take a fixed port (8888); nothing here reads them.
        telemetry: { metrics: { level: "none" }, logs: { level: "warn" } },
      },
      extensions: {
        jaeger_query: { storage: { traces: "memory" }, http: { endpoint: `127.0.0.1:${queryPort}` }, grpc: { endpoint: `127.0.0.1:${queryGrpcPort}` } },
        jaeger_storage: { backends: { memory: { memory: { max_traces: 100_000 } } } },
        healthcheckv2: { use_v2: true, http: { endpoint: `127.0.0.1:${healthPort}` } },
      },
      receivers: { otlp: { protocols: { http: { endpoint: `127.0.0.1:${otlpPort}` } } } },
      processors: { batch: { timeout: "200ms" } },
      exporters: { jaeger_storage_exporter: { trace_storage: "memory" } },
    }),
  );
  // Jaeger traces its own queries to an OTLP endpoint on a fixed port unless told not to.
  const jaeger = startTool(bin, [`--config=${config}`], join(dir, "jaeger.log"), { OTEL_SDK_DISABLED: "true", OTEL_TRACES_SAMPLER: "always_off" });
  const queryUrl = `http://127.0.0.1:${queryPort}`;
  try {
    await toolReady("Jaeger", `http://127.0.0.1:${healthPort}/status`, jaeger);
    await toolReady("Jaeger's query API", `${queryUrl}/api/services`, jaeger);
  } catch (err) {
    await stopTool(jaeger);
    throw err;
  }
  return {
    otlpEndpoint: `http://127.0.0.1:${otlpPort}`,
    queryUrl,
    async trace(traceId) {
      const res = await fetch(`${queryUrl}/api/traces/${traceId}`);
      if (res.status === 404) return [];
      if (!res.ok) throw new Error(`Jaeger answered ${res.status} for trace ${traceId}: ${await res.text()}`);
      const body = (await res.json()) as { data?: { spans: Omit<JaegerSpan, "service">[]; processes: Record<string, { serviceName: string }> }[] };
      const [found] = body.data ?? [];
      // Process ids are numbered per response: a span's service is resolved within the same one.
      return (found?.spans ?? []).map((span) => ({ ...span, service: found?.processes[span.processID]?.serviceName ?? span.processID }));
    },
    stop: () => stopTool(jaeger),
  };
}

/**
 * A trace as indented text, one span a line in start order under its parent: its start offset from
 * the trace's first span, its duration, its name, its service, and its events.
 */
export function renderTrace(spans: JaegerSpan[]): string {
  const ids = new Set(spans.map((s) => s.spanID));
  const parentOf = (s: JaegerSpan) => s.references.find((r) => r.refType === "CHILD_OF" && ids.has(r.spanID))?.spanID;
  const children = new Map<string | undefined, JaegerSpan[]>();
  for (const span of spans) {
    const parent = parentOf(span);
    children.set(parent, [...(children.get(parent) ?? []), span]);
  }
  const origin = Math.min(...spans.map((s) => s.startTime));
  const seconds = (us: number) => `${(us / 1e6).toFixed(2)}s`;
  const lines: string[] = [];
  const walk = (parent: string | undefined, depth: number) => {
    for (const span of (children.get(parent) ?? []).sort((a, b) => a.startTime - b.startTime)) {
      const events = span.logs.map((l) => l.fields.find((f) => f.key === "event")?.value).filter(Boolean);
      const linked = span.references.filter((r) => r.refType === "FOLLOWS_FROM").length;
      lines.push(
        `${"  ".repeat(depth)}+${seconds(span.startTime - origin).padStart(7)} ${seconds(span.duration).padStart(7)}  ${span.operationName}  [${span.service}]` +
          (linked ? `  (linked to ${linked})` : "") +
          (events.length ? `  events: ${events.join(", ")}` : ""),
      );
      walk(span.spanID, depth + 1);
    }
  };
  walk(undefined, 0);
  return lines.join("\n");
}
