// bench:detect — how fast the watchdog notices a hung sandbox, and what heartbeats cost it.
//
// Starts N runs against the local control plane and a real operator process, heartbeats them the
// way the sandbox SDK does, then stops each run's heartbeats at a known time. It prints:
// - deadline -> pod deletion request latency (p50, p99, max), observed from a watch on the pods,
//   from the sandbox's own time of its last heartbeat and from the API server's answer to it;
// - the operator's API writes per heartbeat, from its own rest_client_requests_total;
// - the operator's RSS.
//
// With --flood RATE, other runs (--flood-runs, default 200) heartbeat RATE times a second in all
// while the kills happen, from when the first heartbeat stops until every hung pod is deleted (at
// most 64 writes in flight, so the flood is bounded in count and time): what a crowd of busy
// sandboxes does to the kill path. The achieved rate and the flood's own latency are printed.
//
// By default the operator and the heartbeats use the admin's credentials, which API Priority and
// Fairness exempts from all queueing. With --identities they authenticate as in a cluster: the
// operator as a service account of its own, each heartbeat as one of 64 sandbox service accounts
// (the flood's runs as 64 others), so all of them share the built-in workload-low level; with
// --api-priority (implies --identities) the chart's FlowSchemas and priority levels are installed
// too, as the chart renders them, and removed at the end (--sandbox-shares sets the sandboxes'
// level's share instead of the chart's default).
//
// Usage: npm run bench:detect -- [--runs 200] [--timeout 10s] [--spread 20s] [--concurrency N]
//                                [--flood RATE] [--flood-runs N] [--identities] [--api-priority]
//                                [--sandbox-shares N]
//                                [--from-sources]
// (--concurrency defaults to the operator's own default; --from-sources runs the operator's
// TypeScript instead of the JavaScript the image runs).
import { spawn } from "node:child_process";
import { readFileSync } from "node:fs";
import { freePort } from "../../harness/free-port.ts";
import { parseArgs } from "node:util";
import { parseDuration } from "../../operator/api/duration.ts";
import { LABELS } from "../../operator/api/annotations.ts";
import { paths, type Json } from "../../operator/kube/client.ts";
import { installApiPriority, renderApiPriority } from "./api-priority.ts";
import { serviceAccountToken } from "../../harness/service-account.ts";
import { ApiError, KubeClient } from "../../operator/kube/client.ts";
import { benchRun, clientFor, componentPid, controlPlaneUp, cpuSecondsOf, freshNamespace, keepWatching, FROM_SOURCES_OPTION, histogram, operatorMain, operatorKubeconfig, operatorWrites as writes, percentile, pool, quantile, since, tokenConfig, until } from "./lib.ts";

const { values } = parseArgs({
  options: {
    runs: { type: "string", default: "200" },
    timeout: { type: "string", default: "10s" },
    spread: { type: "string", default: "20s" },
    concurrency: { type: "string" },
    "heartbeat-interval": { type: "string" },
    flood: { type: "string", default: "0" },
    "flood-runs": { type: "string", default: "200" },
    identities: { type: "boolean", default: false },
    "api-priority": { type: "boolean", default: false },
    "sandbox-shares": { type: "string" },
    ...FROM_SOURCES_OPTION,
  },
});
const N = Number(values.runs);
const timeoutMs = parseDuration(values.timeout as string);
const spreadMs = parseDuration(values.spread as string);
const heartbeatEveryMs = values["heartbeat-interval"] ? parseDuration(values["heartbeat-interval"]) : timeoutMs / 4;
const floodRate = Number(values.flood);
const floodRuns = floodRate > 0 ? Number(values["flood-runs"]) : 0;
/** Flood writes in flight at most: beyond it the flood waits, so it never piles up unbounded. */
const FLOOD_IN_FLIGHT = 64;
const apiPriority = values["api-priority"] === true;
const identities = apiPriority || values.identities === true;
/** Sandbox service accounts of the measured runs, and as many again for the flood's. */
const SANDBOX_IDENTITIES = 64;
/** Where the operator's service account lives (not audited by the control plane: no cost of ours). */
const OPERATOR_NAMESPACE = "agent-watchdog-detect";

const log = (message: string) => process.stderr.write(`[bench] ${message}\n`);

async function main(): Promise<void> {
  const kubeconfig = controlPlaneUp();
  const client = clientFor(kubeconfig);
  // An earlier bench's namespace is deleted first: its hundreds of runs, pods and Events keep the
  // API server busy for a minute or more, which would be measured as ours.
  const ns = await freshNamespace(client, "bench-detect", "bench:detect");

  // Sandboxes may write their run's status and nothing else, as the chart's sandbox role allows.
  const sandboxClients = new Map<string, KubeClient>();
  const heartbeatClient = (name: string): KubeClient => {
    if (!identities) return client;
    const flood = name.startsWith("flood");
    const account = `${flood ? "flood" : "sandbox"}-${Number(name.replace(/^\D+/, "")) % SANDBOX_IDENTITIES}`;
    return sandboxClients.get(account) as KubeClient;
  };
  let removeApiPriority = async () => {};
  let operatorConfig = kubeconfig;
  if (identities) {
    log(`identities: the operator as a service account, heartbeats as ${SANDBOX_IDENTITIES} sandbox accounts (and ${SANDBOX_IDENTITIES} for the flood)`);
    const rules = [{ apiGroups: ["watchdog.dev"], resources: ["agentruns/status"], verbs: ["get", "patch"] }];
    const accounts = Array.from({ length: SANDBOX_IDENTITIES }, (_, k) => [`sandbox-${k}`, `flood-${k}`]).flat();
    await pool(accounts, 8, async (account) => {
      sandboxClients.set(account, new KubeClient(tokenConfig(kubeconfig, account, await serviceAccountToken(client, ns, account, rules))));
    });
    operatorConfig = await operatorKubeconfig(client, kubeconfig, "operator", OPERATOR_NAMESPACE);
  }
  if (apiPriority) {
    const shares = values["sandbox-shares"];
    const objects = renderApiPriority(OPERATOR_NAMESPACE, "operator", shares ? [`apiPriority.sandboxes.nominalConcurrencyShares=${shares}`] : []);
    log(`API priority: installing the chart's ${objects.map((o) => `${o.kind} ${(o.metadata as { name: string }).name}`).join(", ")}`);
    removeApiPriority = await installApiPriority(client, objects);
  }

  const metricsPort = await freePort();
  const operator = spawn(
    process.execPath,
    [
      operatorMain(values["from-sources"]),
      `--namespaces=${ns}`,
      ...(values.concurrency ? [`--concurrency=${values.concurrency}`] : []),
      `--metrics-bind-address=127.0.0.1:${metricsPort}`,
      "--health-probe-bind-address=0",
      "--log-level=warn",
    ],
    { env: { ...process.env, KUBECONFIG: operatorConfig }, stdio: ["ignore", "ignore", "inherit"] },
  );
  // However this bench ends, its operator does not outlive it (left running, it kept supervising
  // the bench's namespace and the next bench waited for that namespace's deletion).
  process.once("exit", () => operator.kill("SIGKILL"));
  const metrics = () => fetch(`http://127.0.0.1:${metricsPort}/metrics`).then((r) => r.text());
  try {
    await until("operator metrics", () => metrics().then(() => true, () => false), 30_000);
    log(`namespace ${ns}: creating ${N} runs (heartbeatTimeout ${values.timeout}, heartbeat every ${heartbeatEveryMs} ms)`);
    const names = Array.from({ length: N }, (_, i) => `r${i}`);
    const heartbeatOnce = (name: string) =>
      heartbeatClient(name).mergePatch<Json>(paths.runStatus(ns, name), { status: { heartbeat: { time: new Date().toISOString(), attempt: 1, state: "Planning" } } });
    // As the SDK does: a heartbeat the API server's queues refused (429) is sent again after the
    // Retry-After it names, with a new time.
    const heartbeat = async (name: string): Promise<Json> => {
      for (;;) {
        try {
          return await heartbeatOnce(name);
        } catch (err) {
          if (!(err instanceof ApiError) || err.code !== 429) throw err;
          refusedHeartbeats++;
          await new Promise((r) => setTimeout(r, (err.retryAfterSeconds ?? 1) * 1000));
        }
      }
    };
    let refusedHeartbeats = 0;

    // Each run heartbeats from its creation, as its sandbox would, until its stop time is set and
    // reached; the time of its last acknowledged heartbeat plus the timeout is its deadline.
    const stopAt = new Map<string, number>();
    const deadlines = new Map<string, number>();
    // The same deadline counted from the API server's answer to the last heartbeat: the server
    // accepted it between the sandbox's time and then, so the difference is the write's own delay.
    const answeredDeadlines = new Map<string, number>();
    let heartbeats = 0;
    const heartbeatLoop = async (name: string, i: number) => {
      await new Promise((r) => setTimeout(r, (i / N) * heartbeatEveryMs));
      for (;;) {
        const last = await heartbeat(name);
        const answeredAt = Date.now();
        heartbeats++;
        const next = Date.now() + heartbeatEveryMs;
        if (next >= (stopAt.get(name) ?? Infinity)) {
          deadlines.set(`${name}-1`, Date.parse(((last.status as Json).heartbeat as { time: string }).time) + timeoutMs);
          answeredDeadlines.set(`${name}-1`, answeredAt + timeoutMs);
          return;
        }
        await new Promise((r) => setTimeout(r, next - Date.now()));
      }
    };
    const loops: Promise<void>[] = [];
    await pool(names, 16, async (name, i) => {
      await client.create(paths.runs(ns), benchRun(name, { heartbeatTimeout: values.timeout, maxRestarts: 5, backoff: { initial: "10m", max: "10m" }, stall: { enabled: false } }));
      loops.push(heartbeatLoop(name, i));
    });
    // The flood's runs: alive and well, they only heartbeat (once now, then in the flood).
    const floodNames = Array.from({ length: floodRuns }, (_, i) => `flood${i}`);
    await pool(floodNames, 16, async (name) => {
      await client.create(paths.runs(ns), benchRun(name, { heartbeatTimeout: "1h", stall: { enabled: false } }));
    });
    await until("every run's pod", async () => (await client.get<{ items: unknown[] }>(paths.pods(ns))).items.length === N + floodRuns);
    await pool(floodNames, 16, (name) => heartbeat(name));
    await until("every run Planning", async () => {
      const list = await client.get<{ items: { status?: { phase?: string } }[] }>(paths.runs(ns));
      return list.items.filter((r) => r.status?.phase === "Planning").length === N + floodRuns;
    });

    // Steady state: heartbeats only. The operator should write nothing.
    const steadyMs = Math.max(3 * heartbeatEveryMs, 10_000);
    log(`steady state for ${steadyMs} ms`);
    const writesBefore = writes(await metrics());
    const heartbeatsBefore = heartbeats;
    await new Promise((r) => setTimeout(r, steadyMs));
    const writesDuring = writes(await metrics()) - writesBefore;
    const steadyHeartbeats = heartbeats - heartbeatsBefore;

    // Stop each run's heartbeats at a known time, spread over `spread`; record deletions by watch.
    const deletedAt = new Map<string, number>();
    const podKey = (pod: Json) => {
      // Keyed by run and attempt: a sandbox pod's name also carries part of its run's uid.
      const labels = (pod.metadata as { labels?: Record<string, string> }).labels ?? {};
      return `${labels[LABELS.run]}-${labels[LABELS.attempt]}`;
    };
    // The watch is started again whenever it ends (the API server may close it under load). A pod
    // deleted and gone while no watch ran is found missing by a list, counted, and given the
    // list's time (later than its deletion: such kills are measured late, never early).
    let watchStopped = false;
    let watchRestarts = 0;
    let deletedUnwatched = 0;
    let podWatch: AbortController | undefined;
    await keepWatching(
      (onEnd) =>
        client.watch(
          paths.pods(ns),
          {},
          (type, pod) => {
            // The deletion request is what the watchdog controls; how long the node takes to stop
            // the containers after it is the kubelet's.
            const deleting = type === "DELETED" || Boolean((pod.metadata as { deletionTimestamp?: string }).deletionTimestamp);
            const key = podKey(pod);
            if (deleting && !deletedAt.has(key)) deletedAt.set(key, Date.now());
          },
          onEnd,
          600_000,
        ),
      () => watchStopped,
      (abort) => {
        if (podWatch) {
          watchRestarts++;
          void client.get<{ items: Json[] }>(paths.pods(ns)).then((list) => {
            const present = new Set(list.items.map(podKey));
            for (const [name, at] of stopAt) {
              const key = `${name}-1`;
              if (at <= Date.now() && !present.has(key) && !deletedAt.has(key)) {
                deletedAt.set(key, Date.now());
                deletedUnwatched++;
              }
            }
          });
        }
        podWatch = abort;
      },
    );
    // What the kills cost on each side: the operator's request latency and the API server's CPU.
    const beforeKills = await metrics();
    const apiserverPid = componentPid(kubeconfig, "kube-apiserver");
    const apiserverCpuBefore = cpuSecondsOf(apiserverPid);
    const operatorCpuBefore = cpuSecondsOf(operator.pid);
    const killsFrom = Date.now();
    // Where a kill waits inside the operator: its event loop's worst delay and its queue's depth,
    // sampled each second (the loop-delay figure covers the second since the last sample).
    const inside = { loopLagMaxMs: 0, depthMax: 0, sampling: true };
    const sampling = (async () => {
      while (inside.sampling) {
        const text = await metrics().catch(() => "");
        const value = (name: string) => Number(text.split("\n").find((l) => l.startsWith(name))?.split(" ").at(-1) ?? 0);
        inside.loopLagMaxMs = Math.max(inside.loopLagMaxMs, Math.round(value("nodejs_eventloop_lag_max_seconds ") * 1000));
        inside.depthMax = Math.max(inside.depthMax, value("workqueue_depth{"));
        await new Promise((r) => setTimeout(r, 1000));
      }
    })();
    const stopStart = Date.now() + 1000;
    log(`stopping heartbeats of ${N} runs over ${values.spread}`);
    names.forEach((name, i) => stopAt.set(name, stopStart + (i / N) * spreadMs));
    const flood = { sent: 0, latencies: [] as number[], failed: 0, from: 0, to: 0, stop: false };
    const flooding = (async () => {
      if (floodRate <= 0) return;
      await new Promise((r) => setTimeout(r, Math.max(0, stopStart - Date.now())));
      flood.from = Date.now();
      let inFlight = 0;
      let next = 0;
      while (!flood.stop) {
        // Due by now at the rate, less what was sent; at most FLOOD_IN_FLIGHT outstanding.
        const due = Math.floor(((Date.now() - flood.from) / 1000) * floodRate) - flood.sent;
        for (let i = 0; i < due && inFlight < FLOOD_IN_FLIGHT; i++) {
          const name = floodNames[next++ % floodNames.length] as string;
          const sentAt = Date.now();
          flood.sent++;
          inFlight++;
          heartbeatOnce(name).then(
            () => flood.latencies.push(Date.now() - sentAt),
            () => flood.failed++,
          ).finally(() => inFlight--);
        }
        await new Promise((r) => setTimeout(r, 5));
      }
      flood.to = Date.now();
    })();
    await Promise.all(loops);
    await until("every hung pod deleted", async () => names.every((n) => deletedAt.has(`${n}-1`)), timeoutMs + spreadMs + 120_000).catch(async (err: unknown) => {
      // Say what was left: pods the operator did not delete, or deletions this bench did not see.
      const missing = names.filter((n) => !deletedAt.has(`${n}-1`));
      const pods = new Set((await client.get<{ items: Json[] }>(paths.pods(ns))).items.map(podKey));
      const runs = await client.get<{ items: { metadata: { name: string }; status?: { phase?: string; attempt?: number } }[] }>(paths.runs(ns));
      const phases = new Map(runs.items.map((r) => [r.metadata.name, `${r.status?.phase}/${r.status?.attempt}`]));
      log(`${missing.length} hung pods not seen deleted, ${missing.filter((n) => pods.has(`${n}-1`)).length} of them still there; e.g. ${missing.slice(0, 5).map((n) => `${n} (${phases.get(n)})`).join(", ")}; watch restarts ${watchRestarts}`);
      throw err;
    });
    flood.stop = true;
    await flooding;
    watchStopped = true;
    podWatch?.abort();
    const apiserverCores = (cpuSecondsOf(apiserverPid) - apiserverCpuBefore) / ((Date.now() - killsFrom) / 1000);
    const operatorCores = (cpuSecondsOf(operator.pid) - operatorCpuBefore) / ((Date.now() - killsFrom) / 1000);
    inside.sampling = false;
    await sampling;

    const latencies = [...deadlines].map(([pod, deadline]) => (deletedAt.get(pod) as number) - deadline).sort((a, b) => a - b);
    const fromAnswer = [...answeredDeadlines].map(([pod, deadline]) => (deletedAt.get(pod) as number) - deadline).sort((a, b) => a - b);
    const finalMetrics = await metrics();
    const rssLine = finalMetrics.split("\n").find((l) => l.startsWith("process_resident_memory_bytes "));
    let rss = rssLine ? Number(rssLine.split(" ")[1]) : NaN;
    try {
      rss = Number(/VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${operator.pid}/status`, "utf8"))?.[1]) * 1024;
    } catch {
      // not Linux: the metric is the same figure
    }
    const heapLine = finalMetrics.split("\n").find((l) => l.startsWith("nodejs_heap_size_used_bytes "));
    const heapMiB = heapLine ? Math.round((Number(heapLine.split(" ")[1]) / 1024 / 1024) * 10) / 10 : NaN;
    const concurrencyLine = finalMetrics.split("\n").find((l) => l.startsWith("controller_runtime_max_concurrent_reconciles{"));
    const concurrency = concurrencyLine ? Number(concurrencyLine.slice(concurrencyLine.lastIndexOf(" ") + 1)) : NaN;
    const early = latencies.filter((l) => l < 0).length;
    const ms = (seconds: number) => Math.round(seconds * 1000);
    const requestP99 = (verb: string) =>
      ms(quantile(since(histogram(finalMetrics, "rest_client_request_duration_seconds", (l) => l.includes(`verb="${verb}"`)), histogram(beforeKills, "rest_client_request_duration_seconds", (l) => l.includes(`verb="${verb}"`))), 0.99));
    const detection = since(histogram(finalMetrics, "watchdog_detection_latency_seconds"), histogram(beforeKills, "watchdog_detection_latency_seconds"));
    const result = {
      runs: N,
      heartbeatTimeout: values.timeout,
      concurrency,
      identities,
      apiPriority,
      heartbeats: steadyHeartbeats,
      operatorWritesDuringHeartbeats: writesDuring,
      operatorWritesPerHeartbeat: steadyHeartbeats ? writesDuring / steadyHeartbeats : 0,
      deadlineToDeletionMs: { p50: percentile(latencies, 50), p99: percentile(latencies, 99), max: latencies.at(-1), min: latencies[0] },
      answeredDeadlineToDeletionMs: { p50: percentile(fromAnswer, 50), p99: percentile(fromAnswer, 99), max: fromAnswer.at(-1), min: fromAnswer[0] },
      deletedBeforeDeadline: early,
      refusedHeartbeats,
      watchRestarts,
      deletedUnwatched,
      // The operator's own figure: its deadline (the server's record of the heartbeat) to its delete.
      operatorDetectionMs: { p50: ms(quantile(detection, 0.5)), p99: ms(quantile(detection, 0.99)) },
      operatorRequestP99Ms: { PATCH: requestP99("PATCH"), DELETE: requestP99("DELETE") },
      apiserverCores: Math.round(apiserverCores * 100) / 100,
      operatorCores: Math.round(operatorCores * 100) / 100,
      operatorQueueWaitP99Ms: ms(quantile(since(histogram(finalMetrics, "workqueue_queue_duration_seconds"), histogram(beforeKills, "workqueue_queue_duration_seconds")), 0.99)),
      operatorReconcileP99Ms: ms(quantile(since(histogram(finalMetrics, "workqueue_work_duration_seconds"), histogram(beforeKills, "workqueue_work_duration_seconds")), 0.99)),
      operatorLoopLagMaxMs: inside.loopLagMaxMs,
      operatorQueueDepthMax: inside.depthMax,
      flood: floodRate > 0
        ? {
            asked: floodRate,
            runs: floodRuns,
            achievedPerSecond: Math.round(flood.latencies.length / ((flood.to - flood.from) / 1000)),
            writes: flood.latencies.length,
            failed: flood.failed,
            p99Ms: percentile([...flood.latencies].sort((a, b) => a - b), 99),
          }
        : undefined,
      operatorRssMiB: Math.round((rss / 1024 / 1024) * 10) / 10,
      operatorHeapUsedMiB: heapMiB,
    };
    process.stdout.write(
      [
        `runs                          ${N}`,
        `heartbeat timeout             ${values.timeout} (a heartbeat every ${heartbeatEveryMs} ms per run)`,
        `operator concurrency          ${concurrency}`,
        `identities                    ${identities ? `operator and sandboxes as service accounts; ${apiPriority ? `the chart's API priority levels installed${values["sandbox-shares"] ? ` (sandboxes' share ${values["sandbox-shares"]})` : ""}` : "no API priority objects (all share workload-low)"}` : "the admin's (exempt from API Priority and Fairness)"}`,
        `deadline -> pod deletion      p50 ${result.deadlineToDeletionMs.p50} ms   p99 ${result.deadlineToDeletionMs.p99} ms   max ${result.deadlineToDeletionMs.max} ms`,
        `  from the heartbeat's answer p50 ${result.answeredDeadlineToDeletionMs.p50} ms   p99 ${result.answeredDeadlineToDeletionMs.p99} ms   max ${result.answeredDeadlineToDeletionMs.max} ms`,
        `  as the operator counts it   p50 ${result.operatorDetectionMs.p50} ms   p99 ${result.operatorDetectionMs.p99} ms (its histogram's buckets)`,
        `operator's requests, p99      status PATCH ${result.operatorRequestP99Ms.PATCH} ms, pod DELETE ${result.operatorRequestP99Ms.DELETE} ms; API server ${result.apiserverCores} cores busy`,
        `inside the operator           queue wait p99 ${result.operatorQueueWaitP99Ms} ms, reconcile p99 ${result.operatorReconcileP99Ms} ms, queue depth max ${result.operatorQueueDepthMax}, event-loop delay max ${result.operatorLoopLagMaxMs} ms; ${result.operatorCores} cores busy`,
        ...(result.flood
          ? [`heartbeat flood               ${result.flood.achievedPerSecond}/s achieved of ${floodRate}/s asked, over ${floodRuns} runs during the kills: ${result.flood.writes} writes (${result.flood.failed} failed), p99 ${result.flood.p99Ms} ms`]
          : []),
        `heartbeats refused (429)      ${refusedHeartbeats} of the measured runs' (each sent again after its Retry-After)`,
        `pod watch                     started again ${watchRestarts} times; ${deletedUnwatched} deletions found by a list instead (measured late)`,
        `deleted before the deadline   ${early}`,
        `operator writes / heartbeat   ${result.operatorWritesPerHeartbeat.toFixed(4)}  (${writesDuring} writes during ${steadyHeartbeats} heartbeats)`,
        `operator RSS                  ${result.operatorRssMiB} MiB (V8 heap in use ${heapMiB} MiB)`,
        `json ${JSON.stringify(result)}`,
        "",
      ].join("\n"),
    );
    if (early > 0) process.exitCode = 1;
  } finally {
    // The namespace goes while the operator still runs: its runs are Queued for their next
    // attempt and carry the finalizer, which only the operator takes off once their sandboxes are
    // gone. Stopped first, it left them (and the namespace) for ever, and the next bench waited.
    await client.delete(`/api/v1/namespaces/${ns}`).catch(() => {});
    await until(`namespace ${ns} deleted`, () => client.get(`/api/v1/namespaces/${ns}`).then(() => false, () => true), 180_000).catch((err: unknown) => log(String(err)));
    operator.kill("SIGTERM");
    await removeApiPriority().catch((err: unknown) => log(`removing the API priority objects: ${String(err)}`));
  }
}

main().catch((err: unknown) => {
  process.stderr.write(`bench:detect failed: ${err instanceof Error ? err.stack : String(err)}\n`);
  process.exit(1);
});
