// Three replicas with --shards=6 share the runs: each holds the Leases of two shards and watches
// only their runs and pods. Runs made without a shard label are labelled and supervised. A
// SIGKILLed replica's shards move within the lease duration plus 2 s, a SIGTERMed one's within
// 3 s, and the API server's audit log shows no run written by two replicas at once: every write
// of a replica falls inside its own tenure of the run's shard Lease, as the Leases' watch shows.
import { afterAll, beforeAll, expect, it } from "vitest";
import { LABELS } from "../../operator/api/annotations.ts";
import { LEADER_DEFAULTS } from "../../operator/controller/leader.ts";
import { paths, type Json, type KubeClient } from "../../operator/kube/client.ts";
import { shardOf } from "../../operator/sharding/shard-of.ts";
import { LEASE_LABELS, leaseGroup, shardLeaseName } from "../../operator/sharding/shard-leases.ts";
import { AuditLog, auditedUser, operatorKubeconfig, type AuditedRequest } from "../../measure/bench/lib.ts";
import { createRun, deleteNamespace, getRun, kube, kubeconfigPath, listPods, newNamespace, runManifest } from "../support/cluster.ts";
import { startOperator, type OperatorProcess } from "../support/operator-process.ts";
import { waitFor } from "../support/wait.ts";

const SHARDS = 6;
const ID = "agent-watchdog.watchdog.dev";
const REPLICAS = ["replica-a", "replica-b", "replica-c"];

let client: KubeClient;
let ns: string;
let audit: AuditLog;
const operators = new Map<string, OperatorProcess>();
/** Every change of every shard Lease, in the order the watch delivered them. */
const leaseHistory: { lease: string; holder: string; acquiredAt: number; seenAt: number }[] = [];
let stopWatch: AbortController | undefined;

beforeAll(async () => {
  client = kube();
  ns = await newNamespace(client, "shards");
  audit = new AuditLog(kubeconfigPath());
  stopWatch = await client.watch(
    paths.leases(ns),
    { labelSelector: `${LEASE_LABELS.group}=${leaseGroup(ID)},${LEASE_LABELS.role}=shard` },
    (_type, lease) => {
      const spec = (lease.spec ?? {}) as { holderIdentity?: string; acquireTime?: string; renewTime?: string };
      const name = (lease.metadata as { name: string }).name;
      const holder = spec.holderIdentity ?? "";
      const last = leaseHistory.findLast((h) => h.lease === name);
      if (last?.holder === holder) return;
      // A Lease handed back keeps its last acquireTime: it was given up when it was last renewed.
      const at = holder === "" ? spec.renewTime : spec.acquireTime;
      leaseHistory.push({ lease: name, holder, acquiredAt: Date.parse(at ?? "") || Date.now(), seenAt: Date.now() });
    },
    () => {},
    600_000,
  );
});

afterAll(async () => {
  stopWatch?.abort();
  for (const op of operators.values()) await op.stop("SIGKILL");
  await deleteNamespace(client, ns);
});

async function start(identity: string): Promise<OperatorProcess> {
  const kubeconfig = await operatorKubeconfig(client, kubeconfigPath(), identity);
  const op = await startOperator(ns, ["--leader-elect", `--leader-election-namespace=${ns}`, `--shards=${SHARDS}`], { POD_NAME: identity, KUBECONFIG: kubeconfig });
  operators.set(identity, op);
  return op;
}

async function holders(): Promise<Map<number, string>> {
  const list = await client.get<{ items: Json[] }>(paths.leases(ns), { labelSelector: `${LEASE_LABELS.role}=shard` });
  const out = new Map<number, string>();
  for (let shard = 0; shard < SHARDS; shard++) {
    const lease = list.items.find((l) => (l.metadata as { name: string }).name === shardLeaseName(ID, shard));
    const holder = ((lease?.spec ?? {}) as { holderIdentity?: string }).holderIdentity ?? "";
    if (holder) out.set(shard, holder);
  }
  return out;
}

/** Waits until every shard is held, by the given replicas only, two each (fair to within one). */
async function fairlyHeldBy(replicas: string[], timeoutMs: number): Promise<Map<number, string>> {
  return waitFor(
    `every shard held by ${replicas.join(", ")}`,
    async () => {
      const held = await holders();
      if (held.size !== SHARDS || [...held.values()].some((h) => !replicas.includes(h))) return undefined;
      const loads = replicas.map((r) => [...held.values()].filter((h) => h === r).length);
      return Math.max(...loads) - Math.min(...loads) <= 1 ? held : undefined;
    },
    { timeoutMs, intervalMs: 100 },
  );
}

const runOfPod = (pod: string) => /^(.*)-\d+-[a-z0-9]{1,5}$/.exec(pod)?.[1] ?? pod;

/** The run a write was about, when it was about one. */
function runWritten(request: AuditedRequest): string | undefined {
  if (!["create", "update", "patch", "delete"].includes(request.verb) || request.namespace !== ns || !request.name) return undefined;
  if (request.resource.startsWith("agentruns")) return request.name;
  if (request.resource === "pods") return runOfPod(request.name);
  return undefined;
}

/**
 * The writes made outside the writer's tenure of the run's shard: before it acquired the Lease,
 * or after another replica acquired it next. Empty when no two replicas acted on a run at once.
 */
function writesOutsideTenure(requests: AuditedRequest[]): string[] {
  const problems: string[] = [];
  for (const request of requests) {
    const run = runWritten(request);
    const replica = REPLICAS.find((r) => auditedUser(r) === request.user);
    if (!run || !replica || request.code >= 400) continue;
    const lease = shardLeaseName(ID, shardOf(ns, run, SHARDS));
    const tenures = leaseHistory.filter((h) => h.lease === lease);
    const index = tenures.findLastIndex((t) => t.acquiredAt <= request.at);
    const tenure = tenures[index];
    const next = tenures.slice(index + 1).find((t) => t.holder !== "" && t.holder !== replica);
    if (!tenure || tenure.holder !== replica) problems.push(`${replica} ${request.verb} ${request.resource} ${request.name} at ${new Date(request.at).toISOString()}: ${lease} was ${tenure?.holder || "free"}`);
    else if (next && next.acquiredAt <= request.at) problems.push(`${replica} ${request.verb} ${request.name} after ${next.holder} took ${lease}`);
  }
  return problems;
}

it("shares the shards, labels unlabelled runs, moves a killed replica's shards within the bound, and never lets two replicas act on one run", async () => {
  const { leaseDurationMs } = LEADER_DEFAULTS;
  // Made before any replica runs, and with no admission policy installed here: no run has a label.
  const early = ["early-0", "early-1", "early-2", "early-3"];
  for (const name of early) await createRun(client, ns, runManifest(name, { heartbeatTimeout: "5m" }));
  for (const replica of REPLICAS) await start(replica);
  const held = await fairlyHeldBy(REPLICAS, 30_000);
  console.info(`shards held: ${[...held].map(([s, h]) => `${s}:${h}`).join(" ")}`);

  const names = [...early, ...Array.from({ length: 24 }, (_, i) => `run-${i}`)];
  for (const name of names.slice(early.length)) await createRun(client, ns, runManifest(name, { heartbeatTimeout: "5m" }));
  await waitFor(
    "every run labelled with its shard and started, its pod labelled too",
    async () => {
      for (const name of names) {
        const run = await getRun(client, ns, name);
        if (run.metadata.labels?.[LABELS.shard] !== String(shardOf(ns, name, SHARDS)) || run.status?.phase !== "Starting") return undefined;
        const pods = await listPods(client, ns, name);
        if (pods.length !== 1 || pods[0].metadata.labels?.[LABELS.shard] !== String(shardOf(ns, name, SHARDS))) return undefined;
      }
      return true;
    },
    { timeoutMs: 60_000, intervalMs: 250 },
  );

  // A replica killed: its shards go to the others once their Leases expire.
  const victim = REPLICAS[0] as string;
  const victimShards = [...held].filter(([, h]) => h === victim).map(([s]) => s);
  await operators.get(victim)?.stop("SIGKILL");
  const killedAt = Date.now();
  await fairlyHeldBy(REPLICAS.slice(1), leaseDurationMs + 15_000);
  const movedAfter = Math.max(...victimShards.map((s) => (leaseHistory.findLast((h) => h.lease === shardLeaseName(ID, s))?.acquiredAt ?? Infinity) - killedAt));
  console.info(`SIGKILL -> shards ${victimShards.join(",")} taken over after ${movedAfter} ms`);
  expect(movedAfter).toBeLessThanOrEqual(leaseDurationMs + 2_000);

  // The new holders supervise the victim's runs: a run of those shards made now gets its pod.
  const late = Array.from({ length: 40 }, (_, i) => `late-${i}`).find((n) => victimShards.includes(shardOf(ns, n, SHARDS))) as string;
  await createRun(client, ns, runManifest(late, { heartbeatTimeout: "5m" }));
  await waitFor(`${late} started by the new holder`, async () => (await getRun(client, ns, late)).status?.phase === "Starting", { timeoutMs: 20_000 });

  // A graceful stop hands its shards over within 3 s.
  const leaving = REPLICAS[1] as string;
  const signalledAt = Date.now();
  operators.get(leaving)?.child.kill("SIGTERM");
  await fairlyHeldBy(REPLICAS.slice(2), 10_000);
  const handover = Date.now() - signalledAt;
  console.info(`SIGTERM -> every shard held by the last replica after ${handover} ms`);
  expect(handover).toBeLessThan(3_000);
  expect(await operators.get(leaving)?.exited).toBe(0);

  // Every write of every replica, from the API server's audit log, inside its tenure.
  const requests = await waitFor(
    "the audit log to show the late run's pod",
    () => {
      const all = audit.read();
      return all.length > 0 ? all : undefined;
    },
    { timeoutMs: 10_000 },
  );
  const writes = requests.filter((r) => runWritten(r) !== undefined && REPLICAS.some((x) => auditedUser(x) === r.user));
  console.info(`${writes.length} writes of ${new Set(writes.map((w) => runWritten(w))).size} runs by ${new Set(writes.map((w) => w.user)).size} replicas checked against ${leaseHistory.length} lease changes`);
  expect(new Set(writes.map((w) => w.user)).size).toBe(3);
  expect(writesOutsideTenure(requests)).toEqual([]);
});
