// The chart installed with three replicas and three shards, with the image built here, on the real
// node: each replica holds one shard's Lease; the chart's MutatingAdmissionPolicy stamps every run
// with its shard at admission and the operator copies it to the pods; the samples and two longer
// runs complete while the replica holding a long run's shard is deleted and another takes it over.
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { afterAll, beforeAll, expect, inject, it } from "vitest";
import { parse as parseYaml } from "yaml";
import { RESTRICTED_NAMESPACE } from "../../harness/cluster.ts";
import { installOperator, type InstalledOperator, type RealNode } from "../../harness/real-node.ts";
import { LABELS } from "../../operator/api/annotations.ts";
import { paths, type Json, type KubeClient } from "../../operator/kube/client.ts";
import { shardOf } from "../../operator/sharding/shard-of.ts";
import { shardLeaseName } from "../../operator/sharding/shard-leases.ts";
import { deleteNamespace, kube, kubeconfigPath, newNamespace } from "../support/cluster.ts";
import { waitFor } from "../support/wait.ts";
import { longRun } from "./support.ts";
import { root } from "../chart/support.ts";

const SHARDS = 3;
const RELEASE = "sharded";
const LEASE_ID = `${RELEASE}-agent-watchdog.watchdog.dev`;

let client: KubeClient;
let system: string;
let runs: string;
let operator: InstalledOperator;
let installed = false;

beforeAll(async () => {
  client = kube();
  [system, runs] = await Promise.all([newNamespace(client, "aw-sharded", RESTRICTED_NAMESPACE), newNamespace(client, "aw-sharded-runs", RESTRICTED_NAMESPACE)]);
  const node: RealNode = { state: inject("nodeState"), kubeconfig: kubeconfigPath(), image: inject("image"), helm: inject("helm"), kubectl: inject("kubectl") };
  operator = await installOperator({ node, client, release: RELEASE, namespace: system, watchNamespaces: [runs], replicas: 3, values: { sharding: { shards: SHARDS } } });
  installed = true;
});

afterAll(async () => {
  if (installed) await operator.uninstall().catch(() => {});
  await Promise.all([deleteNamespace(client, runs), deleteNamespace(client, system)]);
});

function sample(file: string, name: string): Json {
  const manifest = parseYaml(readFileSync(join(root, "test/manifests/samples", file), "utf8")) as Json;
  return { ...manifest, metadata: { ...(manifest.metadata as Json), name } };
}

/** Shard -> the replica holding its Lease, once every shard is held by a different replica. */
async function holders(): Promise<Map<number, string>> {
  return waitFor(
    "each of the three replicas to hold one shard",
    async () => {
      const held = new Map<number, string>();
      for (let shard = 0; shard < SHARDS; shard++) {
        const lease = await client.get<{ spec?: { holderIdentity?: string } }>(paths.lease(system, shardLeaseName(LEASE_ID, shard))).catch(() => undefined);
        const holder = lease?.spec?.holderIdentity;
        if (!holder) return undefined;
        held.set(shard, holder);
      }
      const pods = new Set((await operator.pods()).map((p) => p.name));
      return new Set(held.values()).size === SHARDS && [...held.values()].every((h) => pods.has(h)) ? held : undefined;
    },
    { timeoutMs: 90_000, intervalMs: 500 },
  );
}

it("runs three replicas that share the shards, and completes the samples while a shard's holder is deleted", async () => {
  await waitFor("three ready operator pods", async () => {
    const list = await operator.pods();
    return list.length === 3 && list.every((p) => p.ready) ? list : undefined;
  }, { timeoutMs: 120_000 });
  const held = await holders();

  const manifests = [sample("minimal.yaml", "minimal"), sample("full.yaml", "full"), longRun("long-a"), longRun("long-b")];
  for (const manifest of manifests) await client.create(paths.runs(runs), manifest);
  const names = manifests.map((m) => (m.metadata as { name: string }).name);
  // Stamped at admission by the chart's policy, with the hash the operator computes.
  for (const name of names) {
    const run = await client.get<any>(paths.run(runs, name));
    expect(run.metadata.labels?.[LABELS.shard]).toBe(String(shardOf(runs, name, SHARDS)));
  }

  await waitFor("long-a to be working", async () => {
    const run = await client.get<any>(paths.run(runs, "long-a"));
    return ["Planning", "ExecutingTool"].includes(run.status?.phase);
  }, { timeoutMs: 60_000 });
  const shard = shardOf(runs, "long-a", SHARDS);
  const before = held.get(shard) as string;
  const deletedAt = Date.now();
  await client.delete(paths.pod(system, before));
  const after = await waitFor(`shard ${shard} to move from ${before}`, async () => {
    const lease = await client.get<{ spec?: { holderIdentity?: string } }>(paths.lease(system, shardLeaseName(LEASE_ID, shard)));
    const holder = lease.spec?.holderIdentity;
    return holder && holder !== before ? holder : undefined;
  }, { timeoutMs: 60_000, intervalMs: 200 });
  console.info(`shard ${shard}: ${before} deleted -> ${after} holds it after ${Date.now() - deletedAt} ms`);

  for (const name of names) {
    const run = await waitFor(`${name} to complete`, async () => {
      const r = await client.get<any>(paths.run(runs, name));
      if (["Failed", "NeedsHumanIntervention"].includes(r.status?.phase)) throw new Error(`${name} ended ${r.status.phase}: ${r.status.message}`);
      return r.status?.phase === "Completed" ? r : undefined;
    }, { timeoutMs: 180_000 });
    expect(run.status).toMatchObject({ attempt: 1, restarts: 0 });
    const pod = await client.get<any>(paths.pod(runs, run.status.podName));
    expect(pod.metadata.labels?.[LABELS.shard]).toBe(String(shardOf(runs, name, SHARDS)));
    expect(pod.status.containerStatuses[0].state.terminated).toMatchObject({ exitCode: 0, reason: "Completed" });
  }
  // The Deployment replaced the deleted replica, and the shards are shared by three again.
  await holders();
});
