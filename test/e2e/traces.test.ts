// One run, one trace, read back from a real trace backend: the operator and the example agent
// export over OTLP to Jaeger (built by hack/ from its Go module), and the test reads the trace
// through Jaeger's query API. The run has three attempts (two rate-limited, each followed by a
// rate-limit wait) and an approval: the trace must hold one root span, three linked attempt spans,
// every tool call as an execute_tool span under its own attempt, and the waits as spans; nothing
// for heartbeats, and never an idempotency key in the clear.
import { mkdtempSync, rmSync } from "node:fs";
import { createServer, type Server } from "node:http";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { renderTrace, startJaeger, tag, type Jaeger, type JaegerSpan } from "../../harness/jaeger.ts";
import { DEMO_WATCHDOG, EXAMPLE_ENV, manifestFor } from "../../harness/scenario.ts";
import { ANNOTATIONS } from "../../operator/api/annotations.ts";
import { paths, type KubeClient } from "../../operator/kube/client.ts";
import { idempotencyKeyHash } from "../../operator/sandbox/tracing.ts";
import { attemptSpanId, runSpanId, runTraceId } from "../../operator/watchdog/trace-context.ts";
import { deleteNamespace, getRun, kube, newNamespace } from "../support/cluster.ts";
import { startOperator, type OperatorProcess } from "../support/operator-process.ts";
import { waitFor } from "../support/wait.ts";
import { startRunner, type RunnerHandle } from "./support.ts";

let client: KubeClient;
let ns: string;
let jaeger: Jaeger;
let operator: OperatorProcess;
let sandboxes: RunnerHandle;
/** The operator exports through this: it counts every span id it passes on to Jaeger. */
let relay: Server;
const exported = new Map<string, number>();
const dir = mkdtempSync(join(tmpdir(), "traces-"));

beforeAll(async () => {
  client = kube();
  ns = await newNamespace(client, "e2e-traces");
  jaeger = await startJaeger(dir);
  // Jaeger drops a span sent twice with the same content, so double exports are counted on the
  // way to it.
  relay = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on("data", (c: Buffer) => chunks.push(c));
    req.on("end", () => {
      const body = Buffer.concat(chunks);
      const sent = JSON.parse(body.toString()) as { resourceSpans: { scopeSpans: { spans: { spanId: string }[] }[] }[] };
      for (const resource of sent.resourceSpans) for (const scope of resource.scopeSpans) for (const span of scope.spans) exported.set(span.spanId, (exported.get(span.spanId) ?? 0) + 1);
      fetch(`${jaeger.otlpEndpoint}${req.url}`, { method: "POST", headers: { "content-type": req.headers["content-type"] ?? "application/json" }, body }).then(
        async (answer) => res.writeHead(answer.status, { "content-type": "application/json" }).end(await answer.text()),
        () => res.writeHead(502).end(),
      );
    });
  });
  await new Promise<void>((resolve) => relay.listen(0, "127.0.0.1", resolve));
  operator = await startOperator(ns, [], otlp(`http://127.0.0.1:${(relay.address() as { port: number }).port}`));
  sandboxes = await startRunner(ns, { env: { ...EXAMPLE_ENV, EXAMPLE_RETRY_AFTER_SECONDS: "1", ...otlp() } });
});

afterAll(async () => {
  await sandboxes?.stop();
  await operator?.stop();
  relay?.close();
  await jaeger?.stop();
  await deleteNamespace(client, ns);
  rmSync(dir, { recursive: true, force: true });
});

const otlp = (endpoint = jaeger.otlpEndpoint) => ({ OTEL_EXPORTER_OTLP_ENDPOINT: endpoint, OTEL_BSP_SCHEDULE_DELAY: "200" });
const parentOf = (span: JaegerSpan) => span.references.find((r) => r.refType === "CHILD_OF")?.spanID;
const named = (spans: JaegerSpan[], name: string) => spans.filter((s) => s.operationName === name);

/**
 * Creates a run that is rate-limited on its first two attempts and then asks for approval, and
 * resolves with it once its approval request is pending (in its third attempt).
 */
async function startTour(name: string): Promise<any> {
  const watchdog = { ...DEMO_WATCHDOG, stall: { timeout: "60s", maxNudges: 2 }, rateLimitBackoff: { initial: "1s", factor: 2, max: "2s" }, releaseAwaitingAfter: "5m" };
  await client.create(paths.runs(ns), manifestFor({ name, behaviour: "rate-limited-approval", watchdog, expected: "Completed on attempt 3" }));
  return waitFor("the approval request", async () => {
    const run = await getRun(client, ns, name);
    return run.status?.approval?.state === "Pending" ? run : undefined;
  }, { timeoutMs: 120_000 });
}

describe("a run as one trace", () => {
  it("holds the run, its three attempts, every tool call under its attempt, and the waits", async () => {
    const asking = await startTour("tour");
    await client.mergePatch(paths.run(ns, "tour"), { metadata: { annotations: { [ANNOTATIONS.approve]: "ship it", [ANNOTATIONS.approvalId]: asking.status.approval.id } } });
    const run = await waitFor("the run to complete", async () => {
      const current = await getRun(client, ns, "tour");
      return current.status?.phase === "Completed" ? current : undefined;
    }, { timeoutMs: 120_000 });
    expect(run.status).toMatchObject({ attempt: 3, restarts: 0 });

    const uid = run.metadata.uid as string;
    const traceId = runTraceId(uid);
    const calls = run.status.toolCalls as { id: string; name: string; attempt: number; idempotencyKey: string }[];
    expect(calls.map((c) => [c.attempt, c.name])).toEqual([
      [1, "call_model"],
      [2, "call_model"],
      [3, "call_model"],
      [3, "prepare_release"],
      [3, "deploy"],
    ]);
    // 1 run + 3 attempts + 2 rate-limit waits + 1 approval wait + 5 tool calls.
    const spans = await waitFor("the whole trace in Jaeger", async () => {
      const found = await jaeger.trace(traceId);
      return found.length >= 12 ? found : undefined;
    }, { timeoutMs: 30_000, intervalMs: 250 });
    console.log(`the trace of run ${ns}/tour (${traceId}):\n${renderTrace(spans)}`);

    expect(spans).toHaveLength(12);
    expect(new Set(spans.map((s) => s.traceID))).toEqual(new Set([traceId]));
    const [root] = named(spans, "agentrun tour");
    expect(root).toBeDefined();
    expect(root!.spanID).toBe(runSpanId(uid));
    expect(parentOf(root!)).toBeUndefined();
    expect(root!.service).toBe("agent-watchdog");

    const attempts = named(spans, "invoke_agent tour").sort((a, b) => a.startTime - b.startTime);
    expect(attempts.map((a) => [tag(a, "watchdog.attempt"), tag(a, "watchdog.outcome"), tag(a, "gen_ai.operation.name"), tag(a, "gen_ai.agent.id")])).toEqual([
      [1, "RateLimited", "invoke_agent", uid],
      [2, "RateLimited", "invoke_agent", uid],
      [3, "Completed", "invoke_agent", uid],
    ]);
    for (const [i, attempt] of attempts.entries()) {
      expect(attempt.spanID).toBe(attemptSpanId(uid, i + 1));
      expect(parentOf(attempt)).toBe(root!.spanID);
      // Each attempt is linked to the one before it.
      expect(attempt.references.filter((r) => r.refType === "FOLLOWS_FROM").map((r) => r.spanID)).toEqual(i === 0 ? [] : [attemptSpanId(uid, i)]);
    }

    const tools = spans.filter((s) => s.operationName.startsWith("execute_tool "));
    expect(tools.map((t) => [t.operationName, tag(t, "watchdog.attempt")]).sort()).toEqual(calls.map((c) => [`execute_tool ${c.name}`, c.attempt]).sort());
    for (const call of calls) {
      const span = tools.find((t) => tag(t, "gen_ai.tool.call.id") === call.id)!;
      expect(span, call.id).toBeDefined();
      expect(parentOf(span)).toBe(attemptSpanId(uid, call.attempt));
      expect(span.service).toBe("example-agent");
      expect(tag(span, "watchdog.tool.idempotency_key_hash")).toBe(idempotencyKeyHash(call.idempotencyKey));
      expect(JSON.stringify(span)).not.toContain(call.idempotencyKey);
    }
    const limited = tools.filter((t) => tag(t, "error.type") === "429");
    expect(limited).toHaveLength(2);

    const waits = named(spans, "wait rate_limit").sort((a, b) => a.startTime - b.startTime);
    expect(waits).toHaveLength(2);
    for (const [i, wait] of waits.entries()) {
      expect(parentOf(wait)).toBe(root!.spanID);
      // Between the attempt it followed and the one it held back.
      expect(wait.startTime).toBe(attempts[i]!.startTime + attempts[i]!.duration);
      expect(wait.startTime + wait.duration).toBe(attempts[i + 1]!.startTime);
    }
    const [approval] = named(spans, "wait approval");
    expect(approval).toBeDefined();
    expect(tag(approval!, "watchdog.approval.state")).toBe("Approved");
    // Asked during the third attempt. The request's time is the status's, whole seconds (Jaeger
    // counts microseconds), so it may read up to a second before the attempt's exact start.
    expect(approval!.startTime).toBeGreaterThanOrEqual(Math.floor(attempts[2]!.startTime / 1e6) * 1e6);
  });

  it("is continued by an operator started after the last one was killed, with the same ids and nothing twice", async () => {
    const asking = await startTour("relay");
    const uid = asking.metadata.uid as string;
    // What the first operator ended is exported (two attempts, two waits), and the third attempt's
    // span is open: its start is only in the run's transitions when the operator is killed.
    await waitFor("the first operator's spans in Jaeger", async () => (await jaeger.trace(runTraceId(uid))).filter((s) => s.service === "agent-watchdog").length === 4 || undefined, {
      timeoutMs: 30_000,
      intervalMs: 100,
    });
    await operator.stop("SIGKILL");
    operator = await startOperator(ns, [], otlp(`http://127.0.0.1:${(relay.address() as { port: number }).port}`));
    await client.mergePatch(paths.run(ns, "relay"), { metadata: { annotations: { [ANNOTATIONS.approve]: "go", [ANNOTATIONS.approvalId]: asking.status.approval.id } } });
    const run = await waitFor("the run to complete", async () => {
      const current = await getRun(client, ns, "relay");
      return current.status?.phase === "Completed" ? current : undefined;
    }, { timeoutMs: 120_000 });
    expect(run.status.attempt).toBe(3);
    const started = (run.status.transitions as { phase: string; attempt: number; time: string }[]).find((t) => t.phase === "Starting" && t.attempt === 3)!;
    const spans = await waitFor("the whole trace in Jaeger", async () => {
      const found = await jaeger.trace(runTraceId(uid));
      return found.some((s) => s.operationName === "agentrun relay") && found.length >= 12 ? found : undefined;
    }, { timeoutMs: 30_000, intervalMs: 250 });
    console.log(`the trace of run ${ns}/relay, across an operator's SIGKILL:\n${renderTrace(spans)}`);
    expect(spans).toHaveLength(12);
    // Each span exported once: none the first operator exported is exported again by the second.
    const operatorSpans = spans.filter((s) => s.service === "agent-watchdog").map((s) => s.spanID);
    expect(operatorSpans).toHaveLength(7);
    expect(operatorSpans.map((id) => [id, exported.get(id)])).toEqual(operatorSpans.map((id) => [id, 1]));
    const attempts = named(spans, "invoke_agent relay").sort((a, b) => a.startTime - b.startTime);
    expect(attempts.map((a) => a.spanID)).toEqual([1, 2, 3].map((n) => attemptSpanId(uid, n)));
    // Jaeger keeps microseconds: the start the first operator wrote, exported by the second.
    expect(attempts[2]!.startTime).toBe(Date.parse(started.time) * 1000);
    expect(attempts[2]!.references.filter((r) => r.refType === "FOLLOWS_FROM").map((r) => r.spanID)).toEqual([attemptSpanId(uid, 2)]);
    for (const tool of spans.filter((s) => s.operationName.startsWith("execute_tool ") && tag(s, "watchdog.attempt") === 3)) expect(parentOf(tool)).toBe(attempts[2]!.spanID);
    expect(named(spans, "wait rate_limit")).toHaveLength(2);
    expect(named(spans, "wait approval")).toHaveLength(1);
  });
});
