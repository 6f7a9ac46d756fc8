// bench:traces — what tracing costs the operator: the same workload with traces off and on, side
// by side on the kwok node, alternating which goes first.
//
// Each batch creates --runs AgentRuns; the bench plays their sandboxes: attempt 1's pod fails
// (exit 1), and after a one-second backoff attempt 2's pod exits 0. So every run makes four
// spans (the run, two attempts, the backoff) out of six transitions. The operator's CPU time
// (/proc) is taken from its start to when every run has completed and, with traces on, every span
// has reached the collector: a stand-in OTLP/HTTP receiver in this process that only counts, so
// that nothing else on the two cores competes with the operator.
//
// Usage: npm run bench:traces -- [--runs 1000] [--rounds 2] [--from-sources]
import { createServer } from "node:http";
import { parseArgs } from "node:util";
import { LABELS } from "../../operator/api/annotations.ts";
import { paths, type Json, type KubeClient } from "../../operator/kube/client.ts";
import {
  FROM_SOURCES_OPTION,
  benchRun,
  clientFor,
  controlPlaneUp,
  cpuSecondsOf,
  freshNamespace,
  keepWatching,
  log as logAs,
  operatorMain,
  pool,
  round,
  startOperator,
  until,
} from "./lib.ts";

const HELP = `usage: npm run bench:traces -- [--runs 1000] [--rounds 2] [--from-sources]

  --runs N        runs per batch (default 1000); each fails once and then completes
  --rounds N      rounds; each runs a batch with traces off and one with traces on, alternating
                  which goes first (default 2)
  --from-sources  run the operator from its TypeScript sources, not as the image runs it
`;

const { values } = parseArgs({
  options: { runs: { type: "string", default: "1000" }, rounds: { type: "string", default: "2" }, help: { type: "boolean" }, ...FROM_SOURCES_OPTION },
});
if (values.help) {
  process.stdout.write(HELP);
  process.exit(0);
}
const N = Number(values.runs);
const ROUNDS = Number(values.rounds);
const SPANS_PER_RUN = 4;
const log = (message: string) => logAs("bench:traces", message);

/** An OTLP/HTTP (JSON) receiver that counts the spans it is sent. */
async function spanCounter(): Promise<{ url: string; spans: () => number; close: () => void }> {
  let spans = 0;
  const server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on("data", (c: Buffer) => chunks.push(c));
    req.on("end", () => {
      const body = JSON.parse(Buffer.concat(chunks).toString() || "{}") as { resourceSpans?: { scopeSpans?: { spans?: unknown[] }[] }[] };
      for (const resource of body.resourceSpans ?? []) for (const scope of resource.scopeSpans ?? []) spans += scope.spans?.length ?? 0;
      res.writeHead(200, { "content-type": "application/json" }).end("{}");
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  return { url: `http://127.0.0.1:${(server.address() as { port: number }).port}`, spans: () => spans, close: () => server.close() };
}

/** Plays each run's sandbox: attempt 1 fails once kwok runs it, attempt 2 exits 0. */
function playSandboxes(client: KubeClient, ns: string): () => void {
  const ended = new Set<string>();
  let closed = false;
  let abort: AbortController | undefined;
  void keepWatching(
    (onEnd) =>
      client.watch(
        paths.pods(ns),
        {},
        (type, pod) => {
          const meta = pod.metadata as { name: string; labels?: Record<string, string>; deletionTimestamp?: string };
          const phase = (pod.status as { phase?: string } | undefined)?.phase;
          if (type === "DELETED" || meta.deletionTimestamp || phase !== "Running" || ended.has(meta.name)) return;
          ended.add(meta.name);
          const exitCode = meta.labels?.[LABELS.attempt] === "1" ? 1 : 0;
          const now = new Date().toISOString();
          const state = { terminated: { exitCode, reason: exitCode ? "Error" : "Completed", startedAt: now, finishedAt: now } };
          void client
            .mergePatch(paths.podStatus(ns, meta.name), {
              status: { phase: exitCode ? "Failed" : "Succeeded", containerStatuses: [{ name: "agent", image: "agent-watchdog:bench", imageID: "", ready: false, restartCount: 0, state }] },
            })
            .catch(() => ended.delete(meta.name));
        },
        onEnd,
        600_000,
      ),
    () => closed,
    (a) => (abort = a),
  );
  return () => {
    closed = true;
    abort?.abort();
  };
}

interface Batch {
  traces: boolean;
  cpuSeconds: number;
  seconds: number;
  spans: number;
}

async function batch(client: KubeClient, kubeconfig: string, main: string, traces: boolean, collector: { url: string; spans: () => number }): Promise<Batch> {
  const ns = await freshNamespace(client, "bench-traces", "bench:traces");
  const stopSandboxes = playSandboxes(client, ns);
  const spansBefore = collector.spans();
  const env: Record<string, string> = traces ? { OTEL_EXPORTER_OTLP_ENDPOINT: collector.url } : {};
  const started = Date.now();
  const operator = await startOperator(main, kubeconfig, [ns], [], [], env);
  try {
    await until("the operator's caches", () => operator.ready(), 60_000);
    const names = Array.from({ length: N }, (_, i) => `r${i}`);
    const watchdog = { heartbeatTimeout: "1h", maxRestarts: 2, backoff: { initial: "1s", factor: 1, max: "1s" }, stall: { enabled: false } };
    await pool(names, 16, (name) => client.create(paths.runs(ns), benchRun(name, watchdog)));
    await until(
      `${N} runs completed`,
      async () => (await client.get<{ items: Json[] }>(paths.runs(ns))).items.filter((r) => (r.status as { phase?: string } | undefined)?.phase === "Completed").length === N,
      1_800_000,
      2_000,
    );
    if (traces) await until(`${SPANS_PER_RUN * N} spans at the collector`, () => collector.spans() - spansBefore >= SPANS_PER_RUN * N, 120_000, 100);
    const cpuSeconds = cpuSecondsOf(operator.child.pid);
    const result = { traces, cpuSeconds: round(cpuSeconds, 2), seconds: round((Date.now() - started) / 1000, 1), spans: collector.spans() - spansBefore };
    log(`traces ${traces ? "on " : "off"}: ${JSON.stringify(result)}`);
    return result;
  } finally {
    await operator.stop();
    stopSandboxes();
    await client.delete(`/api/v1/namespaces/${ns}`).catch(() => {});
  }
}

async function main(): Promise<void> {
  const kubeconfig = controlPlaneUp("--nodes");
  const client = clientFor(kubeconfig);
  const main = operatorMain(values["from-sources"]);
  const collector = await spanCounter();
  const batches: Batch[] = [];
  try {
    for (let r = 0; r < ROUNDS; r++) {
      const order = r % 2 === 0 ? [false, true] : [true, false];
      for (const traces of order) batches.push(await batch(client, kubeconfig, main, traces, collector));
    }
  } finally {
    collector.close();
  }
  const mean = (on: boolean) => batches.filter((b) => b.traces === on).reduce((sum, b) => sum + b.cpuSeconds, 0) / ROUNDS;
  const [off, on] = [mean(false), mean(true)];
  const result = { runs: N, rounds: ROUNDS, spansPerRun: SPANS_PER_RUN, batches, meanCpuSeconds: { off: round(off, 2), on: round(on, 2) }, overheadPercent: round(((on - off) / off) * 100, 1) };
  process.stdout.write(
    [
      `runs per batch                ${N} (each fails once, backs off 1 s and completes: ${SPANS_PER_RUN} spans)`,
      ...batches.map((b, i) => `batch ${i + 1}, traces ${b.traces ? "on " : "off"}       operator CPU ${b.cpuSeconds} s over ${b.seconds} s${b.traces ? `, ${b.spans} spans exported` : ""}`),
      `operator CPU, mean            off ${result.meanCpuSeconds.off} s, on ${result.meanCpuSeconds.on} s: ${result.overheadPercent >= 0 ? "+" : ""}${result.overheadPercent}% with traces`,
      JSON.stringify(result),
      "",
    ].join("\n"),
  );
}

await main();
