// bench:scale — what the operator costs as runs pile up, on the kwok node.
//
// Creates runs in steps (1,000, 5,000, then --runs), each with its sandbox pod running on kwok
// and one heartbeat in its status, and at 0 and after each step measures the operator's RSS and
// V8 heap once it has gone quiet and a full garbage collection has run (SIGUSR2, --expose-gc).
// With every run in place it then measures:
// - operator writes per heartbeat while a sample of the runs heartbeats;
// - queue wait p99 over that window (workqueue_queue_duration_seconds);
// - start-up: a new operator process to synced caches, and to its first pass over every run;
// - a full resync: every run handed to the queue again, to the queue drained;
// - beside them, the API server's own request latency and both processes' CPU time, so that each
//   side's share is visible.
//
// Usage: npm run bench:scale -- [--runs 10000] [--heartbeat-sample 1000]
import { parseArgs } from "node:util";
import { paths, type KubeClient } from "../../operator/kube/client.ts";
import {
  benchRun,
  clientFor,
  controlPlaneUp,
  freshNamespace,
  histogram,
  log as logAs,
  operatorWrites,
  pool,
  quantile,
  round,
  sample,
  since,
  startOperator,
  FROM_SOURCES_OPTION,
  operatorMain,
  until,
  untilCounted,
  type OperatorChild,
  PodCensus,
  heartbeat,
  deleteNamespaceWithoutOperator,
} from "./lib.ts";

const HELP = `usage: npm run bench:scale -- [--runs 10000] [--heartbeat-sample 1000]

  --runs N               runs at the last step (default 10000); the steps are 1,000 and 5,000
                         runs below it, then N
  --heartbeat-sample N   runs that heartbeat every 10 s for a minute once all are in place
                         (default 1000, at most --runs)
  --concurrency N        the operator's --concurrency (default: its own default)
  --from-sources         run the operator from its TypeScript sources, not as the image runs it
                         (as JavaScript); its memory then includes the type stripper's

Needs the local control plane with a kwok node (started if it is not running). Prints a table and
one JSON line.
`;

const { values } = parseArgs({
  options: {
    runs: { type: "string", default: "10000" },
    "heartbeat-sample": { type: "string", default: "1000" },
    concurrency: { type: "string" },
    ...FROM_SOURCES_OPTION,
    help: { type: "boolean", default: false },
  },
});
if (values.help) {
  process.stdout.write(HELP);
  process.exit(0);
}
const N = Number(values.runs);
const SAMPLE = Math.min(N, Number(values["heartbeat-sample"]));
const STEPS = [...new Set([1000, 5000, N].filter((n) => n <= N))];
const HEARTBEAT_EVERY_MS = 10_000;
const HEARTBEAT_WINDOW_MS = 60_000;
const RESYNC = "1m";
const log = (message: string) => logAs("bench:scale", message);
const MiB = (bytes: number) => round(bytes / 1024 / 1024, 1);
const operatorEntry = operatorMain(values["from-sources"]);
const operatorArgs = values.concurrency ? [`--concurrency=${values.concurrency}`] : [];

/** Waits until the operator has written nothing for five seconds and its queue is empty. */
async function quiet(operator: OperatorChild, timeoutMs = 900_000): Promise<void> {
  let last = -1;
  await until(
    "the operator to go quiet",
    async () => {
      const m = await operator.metrics();
      const writes = operatorWrites(m);
      const idle = writes === last && sample(m, "workqueue_depth") === 0 && sample(m, "controller_runtime_active_workers") === 0;
      last = writes;
      return idle;
    },
    timeoutMs,
    5_000,
  );
}

/** The operator's memory once a full collection has run (it is started with --expose-gc). */
async function memory(operator: OperatorChild): Promise<{ rssMiB: number; heapUsedMiB: number }> {
  operator.child.kill("SIGUSR2");
  await new Promise((r) => setTimeout(r, 2_000));
  const m = await operator.metrics();
  return { rssMiB: MiB(operator.rssBytes()), heapUsedMiB: MiB(sample(m, "nodejs_heap_size_used_bytes ")) };
}

async function apiserverMetrics(client: KubeClient): Promise<string> {
  return client.request<string>("GET", "/metrics", { text: true });
}

async function main(): Promise<void> {
  const kubeconfig = controlPlaneUp("--nodes");
  const client = clientFor(kubeconfig);
  const ns = await freshNamespace(client, "bench-scale", "bench:scale");
  const apiBefore = await apiserverMetrics(client);
  const census = new PodCensus(client, ns);
  await census.start();
  let operator = await startOperator(operatorEntry, kubeconfig, [ns], operatorArgs, ["--expose-gc"]);
  let operatorCpu = 0;
  const memoryAt: { runs: number; rssMiB: number; heapUsedMiB: number }[] = [];
  try {
    await until("the operator's caches", () => operator.ready(), 60_000);
    await quiet(operator);
    memoryAt.push({ runs: 0, ...(await memory(operator)) });
    log(`idle: ${JSON.stringify(memoryAt[0])}`);

    let created = 0;
    for (const step of STEPS) {
      const names = Array.from({ length: step - created }, (_, i) => `r${created + i}`);
      log(`creating runs ${created} to ${step - 1}`);
      await pool(names, 32, (name) => client.create(paths.runs(ns), benchRun(name, { heartbeatTimeout: "1h", maxRestarts: 0, stall: { enabled: false } })));
      created = step;
      await untilCounted(`${step} sandbox pods running`, () => census.running.size, step);
      log(`${step} pods running; one heartbeat each for the new runs`);
      await pool(names, 32, (name) => heartbeat(client, ns, name));
      await quiet(operator);
      memoryAt.push({ runs: step, ...(await memory(operator)) });
      log(`at ${step} runs: ${JSON.stringify(memoryAt.at(-1))}`);
    }

    // Steady state: a sample heartbeats; the operator should write nothing for it.
    log(`${SAMPLE} runs heartbeat every ${HEARTBEAT_EVERY_MS / 1000} s for ${HEARTBEAT_WINDOW_MS / 1000} s`);
    const before = await operator.metrics();
    const sampleNames = Array.from({ length: SAMPLE }, (_, i) => `r${Math.floor((i * N) / SAMPLE)}`);
    let heartbeats = 0;
    const windowEnd = Date.now() + HEARTBEAT_WINDOW_MS;
    while (Date.now() < windowEnd) {
      const tick = Date.now();
      await pool(sampleNames, 32, async (name) => {
        await heartbeat(client, ns, name);
        heartbeats++;
      });
      await new Promise((r) => setTimeout(r, Math.max(0, tick + HEARTBEAT_EVERY_MS - Date.now())));
    }
    const after = await operator.metrics();
    const writesPerHeartbeat = (operatorWrites(after) - operatorWrites(before)) / heartbeats;
    const queueWait = since(histogram(after, "workqueue_queue_duration_seconds"), histogram(before, "workqueue_queue_duration_seconds"));
    const queueWaitP99Ms = round(quantile(queueWait, 0.99) * 1000, 1);
    operatorCpu += sample(after, "process_cpu_seconds_total ");

    // Start-up with every run in place, then a full resync.
    log("restarting the operator");
    await operator.stop();
    operator = await startOperator(operatorEntry, kubeconfig, [ns], [...operatorArgs, `--resync-period=${RESYNC}`], ["--expose-gc"]);
    await until("the new operator's caches", () => operator.ready(), 600_000, 100);
    const syncedMs = Date.now() - operator.spawnedAt;
    await until(
      "the first pass over every run",
      async () => {
        const m = await operator.metrics();
        return sample(m, 'controller_runtime_reconcile_total{controller="agentrun",result="success"}') + sample(m, 'controller_runtime_reconcile_total{controller="agentrun",result="requeue_after"}') >= N && sample(m, "workqueue_depth") === 0;
      },
      600_000,
      100,
    );
    const firstPassMs = Date.now() - operator.spawnedAt;
    const afterStart = await memory(operator);
    log(`synced after ${syncedMs} ms, every run decided after ${firstPassMs} ms; waiting for the resync`);
    // The resync hands every run to the queue at once: from the first scrape that shows that, to
    // the first that shows every run decided again.
    const reconciles = (m: string) => sample(m, 'controller_runtime_reconcile_total{controller="agentrun",result="success"}') + sample(m, 'controller_runtime_reconcile_total{controller="agentrun",result="requeue_after"}');
    const beforeResync = await operator.metrics();
    const [addsBase, reconcilesBase] = [sample(beforeResync, "workqueue_adds_total"), reconciles(beforeResync)];
    let resyncStart = 0;
    let lastScrape = Date.now();
    await until(
      "the resync to start",
      async () => {
        const m = await operator.metrics();
        if (sample(m, "workqueue_adds_total") - addsBase >= N / 2) resyncStart = lastScrape;
        lastScrape = Date.now();
        return resyncStart > 0;
      },
      180_000,
      20,
    );
    await until("every run decided again", async () => {
      const m = await operator.metrics();
      return reconciles(m) - reconcilesBase >= N && sample(m, "workqueue_depth") === 0;
    }, 600_000, 20);
    const resyncMs = Date.now() - resyncStart;
    const final = await operator.metrics();
    operatorCpu += sample(final, "process_cpu_seconds_total ");

    const apiAfter = await apiserverMetrics(client);
    const apiCpu = sample(apiAfter, "process_cpu_seconds_total ") - sample(apiBefore, "process_cpu_seconds_total ");
    const apiLatency = (verb: string, resource: string, subresource = "") => {
      const match = (labels: string) => labels.includes(`verb="${verb}"`) && labels.includes(`resource="${resource}"`) && labels.includes(`subresource="${subresource}"`);
      const name = "apiserver_request_duration_seconds";
      return round(quantile(since(histogram(apiAfter, name, match), histogram(apiBefore, name, match)), 0.99) * 1000, 1);
    };
    // Of the first operator process, which created every pod and wrote every status.
    const operatorLatency = (verb: string) =>
      round(quantile(histogram(after, "rest_client_request_duration_seconds", (l) => l.includes(`verb="${verb}"`)), 0.99) * 1000, 1);

    const first = memoryAt[1] as { runs: number; rssMiB: number; heapUsedMiB: number };
    const last = memoryAt.at(-1) as { runs: number; rssMiB: number; heapUsedMiB: number };
    const span = Math.max(1, last.runs - (memoryAt.length > 2 ? first.runs : 0));
    const base = memoryAt.length > 2 ? first : (memoryAt[0] as typeof first);
    const kbPerRun = round(((last.rssMiB - base.rssMiB) * 1024) / span, 1);
    const heapKbPerRun = round(((last.heapUsedMiB - base.heapUsedMiB) * 1024) / span, 1);
    const result = {
      runs: N,
      memory: memoryAt,
      rssKbPerRun: kbPerRun,
      heapKbPerRun,
      afterRestart: afterStart,
      startupSyncedMs: syncedMs,
      startupFirstPassMs: firstPassMs,
      fullResyncMs: resyncMs,
      queueWaitP99Ms,
      heartbeats,
      operatorWritesPerHeartbeat: round(writesPerHeartbeat, 4),
      apiserver: {
        cpuSeconds: round(apiCpu, 1),
        p99Ms: { patchRunStatus: apiLatency("PATCH", "agentruns", "status"), createRun: apiLatency("POST", "agentruns"), createPod: apiLatency("POST", "pods"), listRuns: apiLatency("LIST", "agentruns") },
      },
      operator: { cpuSeconds: round(operatorCpu, 1), p99Ms: { PATCH: operatorLatency("PATCH"), POST: operatorLatency("POST"), GET: operatorLatency("GET") } },
    };
    const verdict = (ok: boolean) => (ok ? "met" : "missed");
    process.stdout.write(
      [
        `runs                          ${N} (sandbox pods running on kwok, one heartbeat each)`,
        ...memoryAt.map((m) => `operator at ${String(m.runs).padStart(6)} runs     RSS ${m.rssMiB} MiB, heap ${m.heapUsedMiB} MiB`),
        `per run                       ${kbPerRun} KB RSS, ${heapKbPerRun} KB heap (from ${base.runs} to ${last.runs} runs)`,
        `start-up with ${N} runs        caches synced in ${syncedMs} ms, every run decided in ${firstPassMs} ms (RSS ${afterStart.rssMiB} MiB)`,
        `full resync                   ${resyncMs} ms`,
        `queue wait p99                ${queueWaitP99Ms} ms (while ${SAMPLE} runs heartbeat)`,
        `operator writes / heartbeat   ${result.operatorWritesPerHeartbeat} (${heartbeats} heartbeats)`,
        `API server                    ${result.apiserver.cpuSeconds} s CPU; p99 ms ${JSON.stringify(result.apiserver.p99Ms)}`,
        `operator                      ${result.operator.cpuSeconds} s CPU; its requests' p99 ms ${JSON.stringify(result.operator.p99Ms)}`,
        `targets: idle RSS <= 100 MiB ${verdict((memoryAt[0]?.rssMiB ?? Infinity) <= 100)}; <= 25 KB a run ${verdict(kbPerRun <= 25)}; ` +
          `start-up <= 30 s ${verdict(firstPassMs <= 30_000)}; 0 writes per heartbeat ${verdict(writesPerHeartbeat === 0)}`,
        `json ${JSON.stringify(result)}`,
        "",
      ].join("\n"),
    );
  } finally {
    census.stop();
    await operator.stop();
    await deleteNamespaceWithoutOperator(client, ns);
  }
}

main().catch((err: unknown) => {
  process.stderr.write(`bench:scale failed: ${err instanceof Error ? err.stack : String(err)}\n`);
  process.exit(1);
});
