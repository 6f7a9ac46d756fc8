// The soak's faults: what each does, and when. Each is logged with its time (and its end, when it
// lasts) so that the analysis can tell a promise broken from a fault survived.
import { readFileSync } from "node:fs";
import { join } from "node:path";
import type { Json } from "../../operator/kube/client.ts";
import { paths } from "../../operator/kube/client.ts";
import { runScript } from "../../harness/cluster.ts";
import { nodePause, nodeResume } from "../../harness/real-node.ts";
import type { Observer } from "./observer.ts";
import type { FaultKind, FaultRecord } from "./record.ts";
import { LEASE_NAME, type Replica, type SoakWorld } from "./world.ts";

/** A seeded random source, so that a soak can be played again with --seed. */
export function random(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

export interface Planned {
  kind: FaultKind;
  /** ms after the soak's start. */
  at: number;
  /** How long it lasts, for those that do. */
  forMs?: number;
}

/** The fault schedule over `durationMs`: the periodic ones on their period, the rest once every five minutes. */
export function schedule(durationMs: number, node: "kubelet" | "kwok", rand: () => number): Planned[] {
  const out: Planned[] = [];
  const S = 1000;
  // The leading replica is lost every 30 s: SIGKILL three times in four, a graceful rollout the fourth.
  for (let t = 30 * S, n = 1; t < durationMs; t += 30 * S, n++) out.push({ kind: n % 4 === 0 ? "leader-rollout" : "leader-sigkill", at: t });
  for (let t = 20 * S; t < durationMs; t += 45 * S) out.push({ kind: "watch-cut", at: t });
  for (let t = 25 * S; t < durationMs; t += 40 * S) out.push({ kind: "sandbox-kill", at: t });
  for (let period = 0; period < durationMs; period += 300 * S) {
    const within = (offset: number, kind: FaultKind, forMs?: number) => {
      if (period + offset < durationMs) out.push({ kind, at: period + offset, ...(forMs ? { forMs } : {}) });
    };
    within(50 * S, "conflict-storm", 15 * S);
    within(80 * S, "watch-stall", 20 * S);
    within(100 * S, "apiserver-restart");
    if (node === "kubelet") within(140 * S, "node-pause", (30 + Math.floor(rand() * 61)) * S);
    within(160 * S, "postgres-stop", 60 * S);
    within(190 * S, "etcd-restart");
    within(220 * S, "conflict-storm", 15 * S);
  }
  return out.sort((a, b) => a.at - b.at);
}

export interface FaultContext {
  world: SoakWorld;
  observer: Observer;
  rand: () => number;
  log: (line: string) => void;
  /** Names of the runs whose behaviour survives a sandbox killed from outside with one restart. */
  killable: ReadonlySet<string>;
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

const alive = (r: Replica) => r.child.exitCode === null && r.child.signalCode === null;

/**
 * The replica whose loss costs the runs their supervisor: the leader; sharded, one of the replicas
 * holding shards, drawn at random (with what it holds, for the record).
 */
async function leader(world: SoakWorld, rand: () => number): Promise<{ replica: Replica; shards?: number[] } | undefined> {
  try {
    if (world.sharding.shards > 1) {
      const list = await world.client.get<{ items: Json[] }>(`/apis/coordination.k8s.io/v1/namespaces/${world.namespace}/leases`, { labelSelector: world.leases.selector ?? "" });
      const held = new Map<string, number[]>();
      for (const lease of list.items) {
        const shard = world.sharding.leases.indexOf((lease.metadata as { name: string }).name);
        const holder = (lease.spec as { holderIdentity?: string } | undefined)?.holderIdentity ?? "";
        if (shard >= 0 && holder) held.set(holder, [...(held.get(holder) ?? []), shard].sort((a, b) => a - b));
      }
      const holders = [...world.replicas.values()].filter((r) => alive(r) && held.has(r.identity));
      const replica = holders[Math.floor(rand() * holders.length)];
      return replica ? { replica, shards: held.get(replica.identity) as number[] } : undefined;
    }
    const lease = await world.client.get<Json>(`/apis/coordination.k8s.io/v1/namespaces/${world.namespace}/leases/${LEASE_NAME}`);
    const holder = (lease.spec as { holderIdentity?: string } | undefined)?.holderIdentity;
    const replica = [...world.replicas.values()].find((r) => r.identity === holder && alive(r));
    return replica ? { replica } : undefined;
  } catch {
    return undefined;
  }
}

const holding = (shards: number[] | undefined) => (shards ? ` (holding shard${shards.length === 1 ? "" : "s"} ${shards.join(", ")})` : "");

/** Signals a replica (the soak's doing, not a crash), waits for it to exit and starts it again. */
async function replace(ctx: FaultContext, replica: Replica, signal: NodeJS.Signals): Promise<void> {
  replica.signalledBySoak = true;
  const exited = new Promise((resolve) => replica.child.once("exit", resolve));
  replica.child.kill(signal);
  const timer = setTimeout(() => replica.child.kill("SIGKILL"), 15_000);
  await exited;
  clearTimeout(timer);
  await ctx.world.startReplica(replica.name);
}

function componentPid(world: SoakWorld, name: string): number | undefined {
  try {
    // control-plane.sh records "<pid> <binary>"
    return Number(readFileSync(join(world.state, "control-plane/pids", name), "utf8").trim().split(/\s+/)[0]) || undefined;
  } catch {
    return undefined;
  }
}

/** Starts again what `up` finds stopped (here: the killed component). */
async function controlPlaneUp(world: SoakWorld): Promise<void> {
  for (let i = 0; i < 3; i++) {
    const { code } = await runScript("control-plane.sh", ["up", world.node === "kubelet" ? "--kubelet" : "--nodes"], { quiet: true, env: { AGENT_WATCHDOG_STATE: world.state } });
    if (code === 0) return;
  }
  throw new Error("hack/control-plane.sh up could not restart the control plane");
}

async function killComponent(ctx: FaultContext, name: string): Promise<string> {
  const pid = componentPid(ctx.world, name);
  if (!pid) return `no pid for ${name}`;
  process.kill(pid, "SIGKILL");
  await controlPlaneUp(ctx.world);
  return `SIGKILL ${name} (pid ${pid}), started again by control-plane.sh up`;
}

async function conflictStorm(ctx: FaultContext, forMs: number): Promise<string> {
  const { client, namespace } = ctx.world;
  const until = Date.now() + forMs;
  let writes = 0;
  let n = 0;
  while (Date.now() < until) {
    let runs: Json[];
    try {
      runs = (await client.get<{ items: Json[] }>(paths.runs(namespace))).items;
    } catch {
      await sleep(200);
      continue;
    }
    // Full updates with the resourceVersion just read: each makes the operator's next precondition
    // (or its cached copy) stale, as another controller or a GitOps tool would.
    await Promise.all(
      runs.map(async (run) => {
        const meta = run.metadata as { name: string; annotations?: Record<string, string>; labels?: Record<string, string> };
        meta.annotations = { ...meta.annotations, "soak.watchdog.dev/touched": String(++n) };
        meta.labels = { ...meta.labels, "soak.watchdog.dev/touched": String(n % 7) };
        try {
          await client.request("PUT", paths.run(namespace, meta.name), { body: run });
          writes++;
        } catch {
          // a conflict is what the storm is for
        }
      }),
    );
  }
  return `${writes} writes to runs' metadata in ${forMs / 1000} s`;
}

/** Applies one fault; returns its record (started at `at`, with its end when it lasts). */
export async function apply(ctx: FaultContext, planned: Planned): Promise<FaultRecord> {
  const { world, observer, rand } = ctx;
  const at = Date.now();
  const record: FaultRecord = { kind: planned.kind, at, detail: "" };
  switch (planned.kind) {
    case "leader-sigkill":
    case "leader-rollout": {
      const current = await leader(world, rand);
      if (!current) {
        record.skipped = world.sharding.shards > 1 ? "no replica holds a shard right now" : "no replica leads right now";
        break;
      }
      record.replica = current.replica.identity;
      const signal = planned.kind === "leader-sigkill" ? "SIGKILL" : "SIGTERM";
      record.detail = `${signal} ${current.replica.identity}${holding(current.shards)}`;
      await replace(ctx, current.replica, signal);
      break;
    }
    case "apiserver-restart":
      record.detail = await killComponent(ctx, "kube-apiserver");
      record.until = Date.now();
      break;
    case "etcd-restart":
      record.detail = await killComponent(ctx, "etcd");
      record.until = Date.now();
      break;
    case "watch-cut": {
      for (const replica of world.replicas.values()) replica.proxy.cut();
      record.detail = "every operator connection dropped";
      break;
    }
    case "watch-stall": {
      const current = await leader(world, rand);
      const replica = current?.replica ?? [...world.replicas.values()][0];
      if (!replica) {
        record.skipped = "no replica";
        break;
      }
      record.replica = replica.identity;
      record.leader = current !== undefined;
      replica.proxy.stall();
      await sleep(planned.forMs ?? 20_000);
      replica.proxy.resume();
      record.until = Date.now();
      record.detail = `${replica.identity}${holding(current?.shards)}'s connections stalled silently for ${(planned.forMs ?? 20_000) / 1000} s`;
      break;
    }
    case "node-pause": {
      // Pods whose start the kubelet has not reported yet count too: their agent may end unseen.
      for (const run of observer.runsWithLivePods()) observer.faulted(run, "node-pause");
      await nodePause(world.state);
      await sleep(planned.forMs ?? 30_000);
      await nodeResume(world.state);
      record.until = Date.now();
      record.detail = `kubelet paused for ${(planned.forMs ?? 30_000) / 1000} s`;
      break;
    }
    case "sandbox-kill": {
      const pids = await world.sandboxPids();
      const candidates = observer.activeRuns().filter((a) => ctx.killable.has(a.run) && pids.has(a.pod));
      const victim = candidates[Math.floor(rand() * candidates.length)];
      if (!victim) {
        record.skipped = "no running sandbox of a run that survives it";
        break;
      }
      observer.faulted(victim.run, "sandbox-kill");
      process.kill(pids.get(victim.pod) as number, "SIGKILL");
      record.detail = `SIGKILL the agent process of ${victim.pod}`;
      break;
    }
    case "conflict-storm":
      record.detail = await conflictStorm(ctx, planned.forMs ?? 15_000);
      record.until = Date.now();
      break;
    case "postgres-stop": {
      await runScript("postgres.sh", ["stop"], { quiet: true });
      await sleep(planned.forMs ?? 60_000);
      const { code } = await runScript("postgres.sh", ["start"], { quiet: true });
      record.until = Date.now();
      record.detail = `PostgreSQL stopped for ${(planned.forMs ?? 60_000) / 1000} s${code === 0 ? "" : " (start failed)"}`;
      break;
    }
    case "clock-skew":
      record.detail = "a sandbox clock 10 minutes off";
      break;
  }
  return record;
}
