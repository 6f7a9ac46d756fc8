// The example agent's OpenTelemetry SDK: what an agent builder sets up for the sandbox SDK's spans
// (and their framework's) to be exported. Off unless an OTLP endpoint is set, as for the operator.
// The AsyncLocalStorage context manager is what lets spans started after an await still nest
// under the attempt's span; the sandbox SDK flushes the provider before the process exits.
import { context, trace } from "@opentelemetry/api";
import { AsyncLocalStorageContextManager } from "@opentelemetry/context-async-hooks";
import { OTLPTraceExporter } from "@opentelemetry/exporter-trace-otlp-http";
import { detectResources, envDetector, resourceFromAttributes } from "@opentelemetry/resources";
import { BatchSpanProcessor, TracerProvider } from "@opentelemetry/sdk-trace";
import { tracingRequested } from "../tracing/tracer.ts";

/** Registers a global tracer provider exporting over OTLP/HTTP; false when none is asked for. */
export function startAgentTracing(env: NodeJS.ProcessEnv = process.env): boolean {
  if (!tracingRequested(env)) return false;
  context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable());
  const provider = new TracerProvider({
    resource: resourceFromAttributes({ "service.name": "example-agent" }).merge(detectResources({ detectors: [envDetector] })),
    spanProcessors: [new BatchSpanProcessor({ exporter: new OTLPTraceExporter(), scheduledDelayMillis: 500 })],
  });
  trace.setGlobalTracerProvider(provider);
  return true;
}
