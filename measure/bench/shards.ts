// bench:shards — what sharding the runs across replicas costs and buys, on the kwok node.
//
// Creates --runs runs in a fresh namespace, each with its sandbox pod running on kwok and one
// heartbeat in its status, as bench:scale makes them (a plain operator, stopped afterwards,
// creates the pods). Each run is created with its shard label already set, to
// String(shardOf(namespace, name, shards)), as the chart's admission policy would stamp it: the
// bench's control plane has no such policy, and without the label the replica holding the run's
// shard would label the run itself; set here, the bench measures supervision, not labelling.
//
// Then, with every run in place:
// - baseline: ONE replica with --shards=N --leader-elect, holding every shard: start-up to every
//   shard's caches synced and every run decided, its CPU time from start to quiet, and its RSS and
//   V8 heap once quiet and a full garbage collection has run (SIGUSR2, --expose-gc); stopped
//   gracefully;
// - --replicas replicas (POD_NAME replica-0, replica-1, ...) started together: until every shard
//   is held (the Leases' holders) fairly, to within one, and each replica has synced the caches
//   of what it holds; then each replica's shards, runs, CPU time to quiet and memory, and whether
//   every run was decided (the replicas' first passes summed, each replica's at least the runs of
//   its shards, and every shard that has runs held);
// - a handoff after SIGKILL of one replica: from the kill to every one of its shards held by
//   another replica (the Leases' acquireTime), to the new holder's "shard caches synced;
//   reconciling" log line for each, and to the moved shards' runs decided; the bound is the lease
//   duration plus 2 s;
// - a handoff after SIGTERM of another replica: the same; the bound is 3 s;
// - beside them, the API server's and etcd's CPU time in each phase.
//
// The replicas re-check every run every 30 minutes (--resync-period) rather than every 5: a resync
// would hand every run to the queue again in the middle of a measure.
//
// Usage: npm run bench:shards -- --replicas 3 --runs 30000 [--shards N]
import { availableParallelism } from "node:os";
import { parseArgs } from "node:util";
import { LABELS } from "../../operator/api/annotations.ts";
import { LEADER_DEFAULTS } from "../../operator/controller/leader.ts";
import { paths, type Json, type KubeClient } from "../../operator/kube/client.ts";
import { shardOf } from "../../operator/sharding/shard-of.ts";
import { LEASE_LABELS, leaseGroup, shardLeaseName } from "../../operator/sharding/shard-leases.ts";
import {
  benchRun,
  clientFor,
  componentPid,
  controlPlaneUp,
  cpuSecondsOf,
  freshNamespace,
  log as logAs,
  pool,
  round,
  sample,
  startOperator,
  startReplica,
  FROM_SOURCES_OPTION,
  operatorMain,
  until,
  untilCounted,
  type OperatorChild,
  type ReplicaChild,
  PodCensus,
  heartbeat,
  deleteNamespaceWithoutOperator,
} from "./lib.ts";

const HELP = `usage: npm run bench:shards -- [--replicas 3] [--runs 10000] [--shards N]

  --replicas N      replicas started together after the baseline (default 3, at least 3 for both
                    handoffs: one is killed, another stopped)
  --runs N          runs, each with its sandbox pod running on kwok (default 10000)
  --shards N        the operator's --shards (default 3 x replicas)
  --concurrency N   the operator's --concurrency (default: its own default)
  --from-sources    run the operator from its TypeScript sources, not as the image runs it
                    (as JavaScript); its memory then includes the type stripper's

Needs the local control plane with a kwok node (started if it is not running). Prints a table and
one JSON line.
`;

const { values } = parseArgs({
  options: {
    replicas: { type: "string", default: "3" },
    runs: { type: "string", default: "10000" },
    shards: { type: "string" },
    concurrency: { type: "string" },
    ...FROM_SOURCES_OPTION,
    help: { type: "boolean", default: false },
  },
});
if (values.help) {
  process.stdout.write(HELP);
  process.exit(0);
}
const BENCH = "bench:shards";
const REPLICAS = Number(values.replicas);
const N = Number(values.runs);
const SHARDS = values.shards ? Number(values.shards) : 3 * REPLICAS;
if (!(Number.isInteger(REPLICAS) && REPLICAS >= 1 && Number.isInteger(N) && N >= 1 && Number.isInteger(SHARDS) && SHARDS >= 2 && SHARDS <= 256)) {
  process.stderr.write(`${BENCH}: --replicas and --runs must be whole numbers of at least 1, --shards one from 2 to 256\n${HELP}`);
  process.exit(2);
}
const CREATE_CONCURRENCY = 32;
const RESYNC = "30m";
const SYNCED = "shard caches synced; reconciling";
const KILL_BOUND_MS = LEADER_DEFAULTS.leaseDurationMs + 2_000;
const TERM_BOUND_MS = 3_000;
const log = (message: string) => logAs(BENCH, message);
const MiB = (bytes: number) => round(bytes / 1024 / 1024, 1);
const seconds = (ms: number) => round(ms / 1000, 1);
const operatorEntry = operatorMain(values["from-sources"]);
const operatorArgs = [`--resync-period=${RESYNC}`, ...(values.concurrency ? [`--concurrency=${values.concurrency}`] : [])];

/** A sample that may not exist yet (a counter not yet incremented): 0 then. */
const counter = (metrics: string, prefix: string) => {
  const value = sample(metrics, prefix);
  return Number.isNaN(value) ? 0 : value;
};

/** Every series of a metric summed (one work queue per shard held, say). */
function total(metrics: string, name: string): number {
  let sum = 0;
  for (const line of metrics.split("\n")) if (line.startsWith(`${name}{`) || line.startsWith(`${name} `)) sum += Number(line.slice(line.lastIndexOf(" ") + 1));
  return sum;
}

/** The shards whose Lease the operator holds now, by its leader_election_master_status. */
function heldNow(metrics: string): Set<string> {
  const held = new Set<string>();
  for (const line of metrics.split("\n")) {
    const match = /^leader_election_master_status\{name="[^"]*-shard-(\d+)"\} 1$/.exec(line);
    if (match?.[1]) held.add(match[1]);
  }
  return held;
}

/**
 * Runs waiting in the operator's queues: the one queue of a plain operator, or those of the shards
 * it holds now. Not those of shards it has handed back: their queues were shut down, and their
 * workqueue_depth series stay at whatever they showed then (see staleQueues).
 */
function queued(metrics: string): number {
  const held = heldNow(metrics);
  let sum = 0;
  for (const line of metrics.split("\n")) {
    const match = /^workqueue_depth\{name="agentrun(?:-shard-(\d+))?"/.exec(line);
    if (match && (match[1] === undefined || held.has(match[1]))) sum += Number(line.slice(line.lastIndexOf(" ") + 1));
  }
  return sum;
}

/** workqueue_depth series above 0 of shards the operator no longer holds: "shard: depth". */
function staleQueues(metrics: string): string[] {
  const held = heldNow(metrics);
  const stale: string[] = [];
  for (const line of metrics.split("\n")) {
    const match = /^workqueue_depth\{name="agentrun-shard-(\d+)"/.exec(line);
    const depth = Number(line.slice(line.lastIndexOf(" ") + 1));
    if (match?.[1] && !held.has(match[1]) && depth > 0) stale.push(`${match[1]}: ${depth}`);
  }
  return stale;
}

/** Runs decided: reconciles that ended in a decision, as bench:scale counts a first pass. */
const decided = (metrics: string) =>
  counter(metrics, 'controller_runtime_reconcile_total{controller="agentrun",result="success"}') + counter(metrics, 'controller_runtime_reconcile_total{controller="agentrun",result="requeue_after"}');
const reconcileErrors = (metrics: string) => counter(metrics, 'controller_runtime_reconcile_total{controller="agentrun",result="error"}');

/**
 * The operator's writes for its runs, from its rest_client_requests_total: POST, PATCH and DELETE.
 * Not PUT: the operator PUTs only Leases, which a replica renews every retry period, so they would
 * never let it look quiet.
 */
function runWrites(metrics: string): number {
  let sum = 0;
  for (const line of metrics.split("\n")) {
    if (line.startsWith("rest_client_requests_total{") && /method="(POST|PATCH|DELETE)"/.test(line)) sum += Number(line.slice(line.lastIndexOf(" ") + 1));
  }
  return sum;
}

/** The lowest controller_runtime_active_workers seen (below 0 means the gauge went wrong). */
let lowestActiveWorkers = 0;

/** Waits until no operator has written or decided anything for five seconds and every queue is empty. */
async function quiet(operators: OperatorChild[], timeoutMs = 900_000): Promise<void> {
  let last = "";
  await until(
    "the operators to go quiet",
    async () => {
      const scraped = await Promise.all(operators.map((o) => o.metrics()));
      const state = JSON.stringify(scraped.map((m) => [runWrites(m), decided(m), reconcileErrors(m)]));
      for (const m of scraped) lowestActiveWorkers = Math.min(lowestActiveWorkers, total(m, "controller_runtime_active_workers"));
      const idle = state === last && scraped.every((m) => queued(m) === 0 && total(m, "controller_runtime_active_workers") <= 0);
      last = state;
      return idle;
    },
    timeoutMs,
    5_000,
  );
}

/** The operators' memory once a full collection has run in each (they are started with --expose-gc). */
async function memory(operators: OperatorChild[]): Promise<{ rssMiB: number; heapUsedMiB: number; heapTotalMiB: number }[]> {
  for (const o of operators) o.child.kill("SIGUSR2");
  await new Promise((r) => setTimeout(r, 2_000));
  return Promise.all(
    operators.map(async (o) => {
      const m = await o.metrics();
      return { rssMiB: MiB(o.rssBytes()), heapUsedMiB: MiB(sample(m, "nodejs_heap_size_used_bytes ")), heapTotalMiB: MiB(sample(m, "nodejs_heap_size_total_bytes ")) };
    }),
  );
}

interface ShardLease {
  holder: string;
  /** The holder's acquireTime (ms since epoch). */
  acquiredAt: number;
}

/** Shard -> its Lease's holder (an empty holder when handed back; absent when never created). */
async function shardLeases(client: KubeClient, ns: string, id: string): Promise<Map<number, ShardLease>> {
  const list = await client.get<{ items: Json[] }>(paths.leases(ns), { labelSelector: `${LEASE_LABELS.group}=${leaseGroup(id)},${LEASE_LABELS.role}=shard` });
  const out = new Map<number, ShardLease>();
  for (let shard = 0; shard < SHARDS; shard++) {
    const lease = list.items.find((l) => (l.metadata as { name: string }).name === shardLeaseName(id, shard));
    if (!lease) continue;
    const spec = (lease.spec ?? {}) as { holderIdentity?: string; acquireTime?: string };
    out.set(shard, { holder: spec.holderIdentity ?? "", acquiredAt: Date.parse(spec.acquireTime ?? "") });
  }
  return out;
}

const heldBy = (holders: Map<number, ShardLease>, identity: string) => [...holders].filter(([, l]) => l.holder === identity).map(([s]) => s);

/** What a replica's log says of the shards it holds: when it acquired each, and when it synced its caches. */
function shardStates(replica: ReplicaChild): Map<number, { acquiredAt: number; syncedAt?: number }> {
  const states = new Map<number, { acquiredAt: number; syncedAt?: number }>();
  for (const line of replica.logs) {
    const shard = line.fields.shard;
    if (typeof shard !== "number") continue;
    if (line.msg === "acquired a shard") states.set(shard, { acquiredAt: line.at });
    else if (line.msg === SYNCED) {
      const state = states.get(shard);
      if (state) state.syncedAt = line.at;
    } else if (line.msg === "handing a shard back" || line.msg === "stopped supervising a shard") states.delete(shard);
  }
  return states;
}

/** Every shard held by the replicas, fairly (to within one). */
function fairlyHeld(holders: Map<number, ShardLease>, replicas: ReplicaChild[]): boolean {
  const ids = replicas.map((r) => r.identity);
  if (holders.size !== SHARDS || [...holders.values()].some((l) => !ids.includes(l.holder))) return false;
  const loads = ids.map((id) => heldBy(holders, id).length);
  return Math.max(...loads) - Math.min(...loads) <= 1;
}

/** Every shard held fairly, each replica synced on exactly what it holds. */
function settledOn(holders: Map<number, ShardLease>, replicas: ReplicaChild[]): boolean {
  if (!fairlyHeld(holders, replicas)) return false;
  return replicas.every((r) => {
    const states = shardStates(r);
    const held = heldBy(holders, r.identity);
    return states.size === held.length && held.every((s) => states.get(s)?.syncedAt !== undefined);
  });
}

/**
 * Waits until the replicas have settled (settledOn) and stayed so for two retry periods; returns
 * when that state was first seen, when the shards were first held as they are then, and the holders.
 */
async function settle(client: KubeClient, ns: string, id: string, replicas: ReplicaChild[], timeoutMs = 600_000): Promise<{ at: number; heldAt: number; holders: Map<number, ShardLease> }> {
  let since = 0;
  let heldSince = 0;
  let holders = new Map<number, ShardLease>();
  let signature = "";
  await until(
    `every shard held fairly by ${replicas.map((r) => r.identity).join(", ")}, caches synced`,
    async () => {
      const now = Date.now();
      holders = await shardLeases(client, ns, id);
      const current = JSON.stringify([...holders].map(([s, l]) => [s, l.holder]));
      if (!fairlyHeld(holders, replicas)) heldSince = 0;
      else if (heldSince === 0 || current !== signature) heldSince = now;
      if (!settledOn(holders, replicas)) since = 0;
      else if (since === 0 || current !== signature) since = now;
      signature = current;
      return since > 0 && Date.now() - since >= 2 * LEADER_DEFAULTS.retryPeriodMs;
    },
    timeoutMs,
    250,
  );
  return { at: since, heldAt: heldSince, holders };
}

interface CpuMark {
  at: number;
  apiserver: number;
  etcd: number;
}

async function markCpu(client: KubeClient, kubeconfig: string): Promise<CpuMark> {
  const metrics = await client.request<string>("GET", "/metrics", { text: true });
  return { at: Date.now(), apiserver: sample(metrics, "process_cpu_seconds_total "), etcd: cpuSecondsOf(componentPid(kubeconfig, "etcd")) };
}

interface ReplicaFigures {
  identity: string;
  shards: number[];
  runs: number;
  syncedS: number;
  decided: number;
  errors: number;
  cpuS: number;
  rssMiB: number;
  heapUsedMiB: number;
  heapTotalMiB: number;
}

interface Handoff {
  signal: "SIGKILL" | "SIGTERM";
  replica: string;
  shards: number[];
  runs: number;
  /** Shard -> its new holder. */
  newHolders: Record<number, string>;
  /** Other shards that changed holder meanwhile (between the survivors, to stay fair). */
  alsoMoved: number[];
  /** From the signal to every one of its shards acquired by another (the Leases' acquireTime). */
  heldMs: number;
  /** The same, as the bench's 100 ms poll of the Leases saw it. */
  seenMs: number;
  /** From the signal to the last of the new holders' "shard caches synced; reconciling" lines. */
  syncedMs: number;
  /** From the signal to the runs of every shard that changed holder decided again by their new holders. */
  decidedMs: number;
  /** From the signal to the process's exit. */
  exitMs: number;
  boundMs: number;
}

async function handoff(
  client: KubeClient,
  ns: string,
  id: string,
  victim: ReplicaChild,
  survivors: ReplicaChild[],
  signal: "SIGKILL" | "SIGTERM",
  boundMs: number,
  runsOf: (shards: number[]) => number,
): Promise<Handoff> {
  const before = await shardLeases(client, ns, id);
  const shards = heldBy(before, victim.identity);
  const decidedBase = (await Promise.all(survivors.map((r) => r.metrics()))).reduce((sum, m) => sum + decided(m), 0);
  // The survivors' decisions over time, to tell when the moved shards' runs were decided again.
  const series: [number, number][] = [];
  let sampling = true;
  const sampler = (async () => {
    while (sampling) {
      const scraped = await Promise.all(survivors.map((r) => r.metrics().catch(() => "")));
      series.push([Date.now(), scraped.reduce((sum, m) => sum + decided(m), 0) - decidedBase]);
      await new Promise((r) => setTimeout(r, 250));
    }
  })();
  log(`${signal} ${victim.identity}, which holds shards ${shards.join(", ")}`);
  const signalledAt = Date.now();
  victim.child.kill(signal);
  let exitedAt = 0;
  void victim.exited.then(() => (exitedAt = Date.now()));
  let seenAt = 0;
  let taken = new Map<number, ShardLease>();
  const ids = survivors.map((r) => r.identity);
  await until(
    `${victim.identity}'s shards held by another replica`,
    async () => {
      taken = await shardLeases(client, ns, id);
      seenAt = Date.now();
      return shards.every((s) => ids.includes(taken.get(s)?.holder ?? ""));
    },
    120_000,
    100,
  );
  const heldAt = Math.max(...shards.map((s) => taken.get(s)?.acquiredAt ?? NaN));
  const settled = await settle(client, ns, id, survivors);
  await victim.exited;
  const moved = [...settled.holders].filter(([s, l]) => before.get(s)?.holder !== l.holder).map(([s]) => s);
  const syncedAt = (shard: number) => {
    const holder = survivors.find((r) => r.identity === settled.holders.get(shard)?.holder);
    return holder?.logs.find((l) => l.msg === SYNCED && l.fields.shard === shard && l.at >= signalledAt)?.at ?? NaN;
  };
  const movedRuns = runsOf(moved);
  await until("the moved shards' runs decided again", () => (series.at(-1)?.[1] ?? 0) >= movedRuns, 600_000, 250);
  sampling = false;
  await sampler;
  const decidedAt = series.find(([, n]) => n >= movedRuns)?.[0] ?? NaN;
  await quiet(survivors);
  return {
    signal,
    replica: victim.identity,
    shards,
    runs: runsOf(shards),
    newHolders: Object.fromEntries(shards.map((s) => [s, settled.holders.get(s)?.holder ?? ""])),
    alsoMoved: moved.filter((s) => !shards.includes(s)),
    heldMs: heldAt - signalledAt,
    seenMs: seenAt - signalledAt,
    syncedMs: Math.max(...shards.map(syncedAt)) - signalledAt,
    decidedMs: decidedAt - signalledAt,
    exitMs: exitedAt - signalledAt,
    boundMs,
  };
}

/** Every operator process the bench started. */
const started: OperatorChild[] = [];

// Interrupted, the bench takes its operators with it (their log pipes would break under them).
for (const signal of ["SIGINT", "SIGTERM"] as const) {
  process.once(signal, () => {
    for (const o of started) o.child.kill("SIGKILL");
    process.stderr.write(`${BENCH}: interrupted; its namespace is left behind (bench-shards-*: delete it, and drop its runs' finalizers)\n`);
    process.exit(130);
  });
}

async function main(): Promise<void> {
  const kubeconfig = controlPlaneUp("--nodes");
  const client = clientFor(kubeconfig);
  const ns = await freshNamespace(client, "bench-shards", BENCH);
  const census = new PodCensus(client, ns);
  await census.start();
  const names = Array.from({ length: N }, (_, i) => `r${i}`);
  const shardOfRun = names.map((name) => shardOf(ns, name, SHARDS));
  const perShard = Array.from({ length: SHARDS }, (_, s) => shardOfRun.filter((x) => x === s).length);
  const runsOf = (shards: number[]) => shards.reduce((sum, s) => sum + (perShard[s] ?? 0), 0);
  const leaseArgs = (id: string) => [`--shards=${SHARDS}`, "--leader-elect", `--leader-election-namespace=${ns}`, `--leader-election-id=${id}`, ...operatorArgs];
  const phases: { phase: string; from: CpuMark; to: CpuMark }[] = [];
  let mark = await markCpu(client, kubeconfig);
  const phaseEnds = async (phase: string) => {
    const to = await markCpu(client, kubeconfig);
    phases.push({ phase, from: mark, to });
    mark = to;
  };
  try {
    // 1. The runs, with their pods running and one heartbeat each, made by a plain operator.
    log(`creating ${N} runs in ${ns} (${SHARDS} shards: ${perShard.join(" ")} runs)`);
    const setup = await startOperator(operatorEntry, kubeconfig, [ns], operatorArgs);
    started.push(setup);
    await until("the setup operator's caches", () => setup.ready(), 60_000);
    const createStart = Date.now();
    let created = 0;
    await pool(names, CREATE_CONCURRENCY, async (name, i) => {
      const run = benchRun(name, { heartbeatTimeout: "1h", maxRestarts: 0, stall: { enabled: false } });
      (run.metadata as Json).labels = { [LABELS.shard]: String(shardOfRun[i]) };
      await client.create(paths.runs(ns), run);
      if (++created % 5000 === 0) log(`${created} runs created, ${census.running.size} pods running`);
    });
    const createdMs = Date.now() - createStart;
    log(`${N} runs created in ${seconds(createdMs)} s; waiting for their pods`);
    await untilCounted(`${N} sandbox pods running`, () => census.running.size, N);
    const podsMs = Date.now() - createStart;
    log(`${N} pods running after ${seconds(podsMs)} s; one heartbeat each`);
    await pool(names, CREATE_CONCURRENCY, (name) => heartbeat(client, ns, name));
    await quiet([setup]);
    const setupMs = Date.now() - createStart;
    await setup.stop();
    await phaseEnds(`create ${N} runs, their pods and heartbeats (a plain operator)`);

    // 2. Baseline: one replica holding every shard.
    log(`baseline: one replica, --shards=${SHARDS}`);
    const baseline = await startReplica(operatorEntry, kubeconfig, [ns], "baseline", leaseArgs("bench-baseline"), ["--expose-gc"]);
    started.push(baseline);
    const base = await settle(client, ns, "bench-baseline", [baseline]);
    const baseSyncedMs = Math.max(...[...shardStates(baseline).values()].map((s) => s.syncedAt ?? NaN)) - baseline.spawnedAt;
    await until("the baseline's first pass over every run", async () => {
      const m = await baseline.metrics();
      return decided(m) >= N && queued(m) === 0;
    }, 900_000, 100);
    const baseDecidedMs = Date.now() - baseline.spawnedAt;
    await quiet([baseline]);
    const baseCpu = cpuSecondsOf(baseline.child.pid);
    const [baseMemory] = await memory([baseline]);
    const baseMetrics = await baseline.metrics();
    const baselineFigures: ReplicaFigures = {
      identity: "baseline",
      shards: heldBy(base.holders, "baseline"),
      runs: runsOf(heldBy(base.holders, "baseline")),
      syncedS: seconds(baseSyncedMs),
      decided: decided(baseMetrics),
      errors: reconcileErrors(baseMetrics),
      cpuS: round(baseCpu, 1),
      rssMiB: baseMemory?.rssMiB ?? NaN,
      heapUsedMiB: baseMemory?.heapUsedMiB ?? NaN,
      heapTotalMiB: baseMemory?.heapTotalMiB ?? NaN,
    };
    log(`baseline: ${JSON.stringify(baselineFigures)}; stopping it`);
    await baseline.stop();
    await phaseEnds("baseline: 1 replica, start-up to quiet");

    // 3. The replicas, started together.
    const ID = "bench-shards";
    log(`${REPLICAS} replicas`);
    const replicas = await Promise.all(Array.from({ length: REPLICAS }, (_, i) => startReplica(operatorEntry, kubeconfig, [ns], `replica-${i}`, leaseArgs(ID), ["--expose-gc"])));
    started.push(...replicas);
    const spawnedAt = Math.min(...replicas.map((r) => r.spawnedAt));
    const fair = await settle(client, ns, ID, replicas);
    const fairMs = fair.heldAt - spawnedAt;
    const settledMs = fair.at - spawnedAt;
    const handBacks = replicas.reduce((sum, r) => sum + r.logs.filter((l) => l.msg === "handing a shard back").length, 0);
    log(`every shard held fairly after ${seconds(fairMs)} s, caches synced after ${seconds(settledMs)} s (${handBacks} handed back on the way); waiting for every run decided`);
    const holders = fair.holders;
    await until("every run decided by the replicas", async () => {
      const scraped = await Promise.all(replicas.map((r) => r.metrics()));
      return (
        scraped.reduce((sum, m) => sum + decided(m), 0) >= N &&
        replicas.every((r, i) => decided(scraped[i] ?? "") >= runsOf(heldBy(holders, r.identity))) &&
        scraped.every((m) => queued(m) === 0)
      );
    }, 900_000, 100);
    const allDecidedMs = Date.now() - spawnedAt;
    await quiet(replicas);
    const cpus = replicas.map((r) => cpuSecondsOf(r.child.pid));
    const memories = await memory(replicas);
    const replicaMetrics = await Promise.all(replicas.map((r) => r.metrics()));
    const replicaFigures: ReplicaFigures[] = replicas.map((r, i) => {
      const shards = heldBy(holders, r.identity);
      const states = shardStates(r);
      return {
        identity: r.identity,
        shards,
        runs: runsOf(shards),
        syncedS: seconds(Math.max(...shards.map((s) => states.get(s)?.syncedAt ?? NaN)) - r.spawnedAt),
        decided: decided(replicaMetrics[i] ?? ""),
        errors: reconcileErrors(replicaMetrics[i] ?? ""),
        cpuS: round(cpus[i] ?? NaN, 1),
        rssMiB: memories[i]?.rssMiB ?? NaN,
        heapUsedMiB: memories[i]?.heapUsedMiB ?? NaN,
        heapTotalMiB: memories[i]?.heapTotalMiB ?? NaN,
      };
    });
    const decidedSum = replicaFigures.reduce((sum, r) => sum + r.decided, 0);
    const unheld = perShard.map((n, s) => [n, s] as const).filter(([n, s]) => n > 0 && !holders.get(s)?.holder).map(([, s]) => s);
    const everyRunDecided = decidedSum >= N && unheld.length === 0 && replicaFigures.every((r) => r.decided >= r.runs);
    const staleAfterStartup = replicas.map((r, i) => `${r.identity} ${staleQueues(replicaMetrics[i] ?? "").join(", ") || "none"}`);
    log(`replicas: ${JSON.stringify(replicaFigures)}`);
    await phaseEnds(`${REPLICAS} replicas, start-up to quiet`);

    // 4 and 5. Handoffs.
    const handoffs: Handoff[] = [];
    if (REPLICAS >= 2) {
      handoffs.push(await handoff(client, ns, ID, replicas[0] as ReplicaChild, replicas.slice(1), "SIGKILL", KILL_BOUND_MS, runsOf));
      log(`after SIGKILL: ${JSON.stringify(handoffs.at(-1))}`);
      await phaseEnds(`SIGKILL of ${replicas[0]?.identity}: handoff, to quiet`);
    }
    if (REPLICAS >= 3) {
      handoffs.push(await handoff(client, ns, ID, replicas[1] as ReplicaChild, replicas.slice(2), "SIGTERM", TERM_BOUND_MS, runsOf));
      log(`after SIGTERM: ${JSON.stringify(handoffs.at(-1))}`);
      await phaseEnds(`SIGTERM of ${replicas[1]?.identity}: handoff, to quiet`);
    }
    const survivors = replicas.slice(Math.min(2, REPLICAS - 1));
    const finalHolders = await shardLeases(client, ns, ID);
    const survivorMemory = await memory(survivors);
    const staleAfterHandoffs = await Promise.all(survivors.map(async (r) => `${r.identity} ${staleQueues(await r.metrics()).join(", ") || "none"}`));

    // 6. The table.
    const cores = availableParallelism();
    const pad = (value: unknown, width: number) => String(value).padEnd(width);
    const padLeft = (value: unknown, width: number) => String(value).padStart(width);
    const row = (label: string, r: ReplicaFigures) =>
      `  ${pad(label, 12)}${pad(`${r.shards.length} [${r.shards.join(",")}]`, 24)}${padLeft(r.runs, 7)}${padLeft(r.syncedS, 10)}${padLeft(r.decided, 10)}${padLeft(r.errors, 8)}${padLeft(r.cpuS, 10)}${padLeft(r.rssMiB, 9)}${padLeft(r.heapUsedMiB, 10)}`;
    const header = `  ${pad("replica", 12)}${pad("shards held", 24)}${padLeft("runs", 7)}${padLeft("synced s", 10)}${padLeft("decided", 10)}${padLeft("errors", 8)}${padLeft("CPU s", 10)}${padLeft("RSS MiB", 9)}${padLeft("heap MiB", 10)}`;
    const sum = (f: (r: ReplicaFigures) => number) => round(replicaFigures.reduce((s, r) => s + f(r), 0), 1);
    const loads = replicaFigures.map((r) => r.shards.length);
    const verdict = (ms: number, bound: number) => (ms <= bound ? "within" : "OVER");
    const handoffRow = (h: Handoff) =>
      `  ${pad(`${h.signal} ${h.replica}`, 20)}${pad(`[${h.shards.join(",")}] ${h.runs} runs`, 22)}${padLeft(seconds(h.heldMs), 8)}${padLeft(seconds(h.seenMs), 8)}${padLeft(seconds(h.syncedMs), 9)}${padLeft(seconds(h.decidedMs), 10)}${padLeft(seconds(h.exitMs), 7)}   ${seconds(h.boundMs)} s: ${verdict(h.heldMs, h.boundMs)}` +
      `  (to ${Object.entries(h.newHolders).map(([s, holder]) => `${s}->${holder}`).join(" ")}${h.alsoMoved.length ? `; also moved between survivors: ${h.alsoMoved.join(",")}` : ""})`;
    const result = {
      runs: N,
      shards: SHARDS,
      replicas: REPLICAS,
      runsPerShard: perShard,
      cores,
      setup: { createdS: seconds(createdMs), podsRunningS: seconds(podsMs), quietS: seconds(setupMs) },
      baseline: { ...baselineFigures, decidedMs: baseDecidedMs },
      replicaStartup: { fairMs, settledMs, handBacks, allDecidedMs, everyRunDecided, decidedSum, unheld, figures: replicaFigures },
      handoffs,
      staleQueues: { afterStartup: staleAfterStartup, afterHandoffs: staleAfterHandoffs },
      lowestActiveWorkers,
      afterHandoffs: survivors.map((r, i) => ({ identity: r.identity, shards: heldBy(finalHolders, r.identity), ...survivorMemory[i] })),
      phases: phases.map((p) => ({ phase: p.phase, wallS: seconds(p.to.at - p.from.at), apiserverCpuS: round(p.to.apiserver - p.from.apiserver, 1), etcdCpuS: round(p.to.etcd - p.from.etcd, 1) })),
    };
    process.stdout.write(
      [
        `bench:shards: ${N} runs (sandbox pods running on kwok, one heartbeat each, shard label set at creation), ${SHARDS} shards, ${REPLICAS} replicas`,
        `runs per shard                ${perShard.join(" ")}`,
        `setup                         runs created in ${result.setup.createdS} s, pods running after ${result.setup.podsRunningS} s, heartbeats written and quiet after ${result.setup.quietS} s`,
        `note                          on this ${cores}-core machine the API server, etcd, kwok and the replicas share the cores: the figures are`,
        `                              of replicas competing with the control plane (and with each other), not of replicas on nodes of their own`,
        "",
        `start-up with every run in place (synced: start to the last of its shards' caches synced; decided: its first pass's reconciles; CPU: start to quiet; memory: quiet, after a full GC)`,
        header,
        row("baseline", baselineFigures),
        `  baseline: every run decided ${baselineFigures.decided >= N ? "yes" : "NO"} (${baselineFigures.decided} >= ${N}) after ${seconds(baseDecidedMs)} s`,
        ...replicaFigures.map((r) => row(r.identity, r)),
        `  ${pad(`${REPLICAS} replicas`, 36)}${padLeft(sum((r) => r.runs), 7)}${padLeft("", 10)}${padLeft(decidedSum, 10)}${padLeft(sum((r) => r.errors), 8)}${padLeft(sum((r) => r.cpuS), 10)}${padLeft(sum((r) => r.rssMiB), 9)}${padLeft(sum((r) => r.heapUsedMiB), 10)}`,
        `  ${REPLICAS} replicas: every shard held after ${seconds(fairMs)} s, ${loads.join("/")} shards (${Math.max(...loads) - Math.min(...loads) <= 1 ? "fair to within one" : "NOT fair"}), ${handBacks} handed back on the way, ` +
          `every replica's shards' caches synced after ${seconds(settledMs)} s; ` +
          `every run decided ${everyRunDecided ? "yes" : "NO"} (sum ${decidedSum} >= ${N}, each replica >= its shards' runs, shards with runs unheld: ${unheld.length ? unheld.join(",") : "none"}) after ${seconds(allDecidedMs)} s`,
        "",
        `handoffs (seconds from the signal; held: the new holders' Lease acquireTime; seen: the bench's 100 ms poll of the Leases; synced: the new holder's "${SYNCED}"; decided: the moved shards' runs decided again; exit: the process's)`,
        `  ${pad("signal", 20)}${pad("its shards", 22)}${padLeft("held", 8)}${padLeft("seen", 8)}${padLeft("synced", 9)}${padLeft("decided", 10)}${padLeft("exit", 7)}   bound on held`,
        ...(handoffs.length ? handoffs.map(handoffRow) : ["  (none: needs at least 2 replicas)"]),
        `  after the handoffs: ${result.afterHandoffs.map((r) => `${r.identity} holds ${r.shards.length} shards, RSS ${r.rssMiB} MiB, heap ${r.heapUsedMiB} MiB`).join("; ")}`,
        `queues of shards handed back still reporting a depth (shard: depth): after start-up ${staleAfterStartup.join("; ")}; after the handoffs ${staleAfterHandoffs.join("; ")}`,
        ...(lowestActiveWorkers < 0 ? [`controller_runtime_active_workers went below 0 (${lowestActiveWorkers}): the gauge is shared by the shards' worker pools`] : []),
        "",
        `CPU by phase (the control plane is shared: anything else using it in a phase is counted too)`,
        `  ${pad("phase", 62)}${padLeft("wall s", 8)}${padLeft("API server CPU s", 18)}${padLeft("(cores)", 9)}${padLeft("etcd CPU s", 12)}`,
        ...result.phases.map((p) => `  ${pad(p.phase, 62)}${padLeft(p.wallS, 8)}${padLeft(p.apiserverCpuS, 18)}${padLeft(`(${round(p.apiserverCpuS / Math.max(0.1, p.wallS), 2)})`, 9)}${padLeft(p.etcdCpuS, 12)}`),
        `json ${JSON.stringify(result)}`,
        "",
      ].join("\n"),
    );
  } finally {
    census.stop();
    // Whatever still runs is stopped gracefully (its Leases handed back), and killed if it takes longer than 15 s.
    await Promise.all(
      started.map(async (o) => {
        const kill = setTimeout(() => o.child.kill("SIGKILL"), 15_000);
        await o.stop();
        clearTimeout(kill);
      }),
    );
    log(`deleting ${ns} and dropping its runs' finalizers`);
    log(`${await deleteNamespaceWithoutOperator(client, ns, CREATE_CONCURRENCY)} finalizers dropped`);
  }
}

main().catch((err: unknown) => {
  process.stderr.write(`${BENCH} failed: ${err instanceof Error ? err.stack : String(err)}\n`);
  process.exit(1);
});
