// The shard policy against the real API server: the chart's MutatingAdmissionPolicy and its
// binding, rendered with a shard count and applied (bound, through watchNamespaces, to a namespace
// of the test's own, so that nothing else on the control plane is touched). Every run it admits
// carries the label the operator's shardOf computes; the label cannot be moved or removed
// afterwards; a run made with generateName is left to the operator; status writes never reach it.
import { randomBytes } from "node:crypto";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { LABELS } from "../../operator/api/annotations.ts";
import { paths, type KubeClient } from "../../operator/kube/client.ts";
import { shardOf } from "../../operator/sharding/shard-of.ts";
import { createRun, deleteNamespace, getRun, kube, newNamespace, runManifest } from "../support/cluster.ts";
import { waitFor } from "../support/wait.ts";
import { find, kubectl, ok, render, writeValues } from "./support.ts";

const ADMISSION = "/apis/admissionregistration.k8s.io/v1";

let admin: KubeClient;

beforeAll(() => {
  admin = kube();
});

/** Run names of every shape a run may have: one to 63 characters, digits, dashes and dots. */
function runNames(count: number): string[] {
  const names = ["a", "z", "0", "9", "ab", "ba", "a-b", "a.b", "run-1", "run-2", "run-10", "x".repeat(63), `${"9".repeat(31)}.${"a".repeat(31)}`];
  const alnum = "abcdefghijklmnopqrstuvwxyz0123456789";
  let seed = 20240531;
  const next = (n: number) => {
    seed = (seed * 1103515245 + 12345) % 2147483648;
    return seed % n;
  };
  const label = (length: number) => {
    let s = alnum[next(alnum.length)]!;
    for (let i = 1; i < length - 1; i++) s += next(5) === 0 ? "-" : alnum[next(alnum.length)]!;
    return length > 1 ? s + alnum[next(alnum.length)]! : s;
  };
  while (names.length < count) {
    const parts = Array.from({ length: 1 + next(3) }, () => label(1 + next(20)));
    const name = parts.join(".").slice(0, 63).replace(/[-.]+$/, "");
    if (!names.includes(name)) names.push(name);
  }
  return names;
}

/** How often the API server has evaluated the policy (its alpha metric, summed over error types). */
async function evaluations(policy: string): Promise<number> {
  const text = await admin.request<string>("GET", "/metrics", { text: true });
  let total = 0;
  for (const line of text.split("\n")) {
    if (!line.startsWith("apiserver_mutating_admission_policy_check_total{")) continue;
    if (!line.includes(`policy="${policy}"`)) continue;
    total += Number(line.slice(line.lastIndexOf(" ") + 1));
  }
  return total;
}

const shardLabel = (run: { metadata?: any }): string | undefined => run.metadata?.labels?.[LABELS.shard];

describe.each([3, 5])("the shard policy with %i shards", (shards) => {
  const release = `shard-${randomBytes(3).toString("hex")}`;
  let ns: string;
  let policy: any;
  let binding: any;

  beforeAll(async () => {
    ns = await newNamespace(admin, `aw-shard-${shards}`, { "watchdog.dev/test": "chart" });
    const objects = await render({ sharding: { shards }, watchNamespaces: [ns] }, { release });
    policy = find(objects, "MutatingAdmissionPolicy");
    binding = find(objects, "MutatingAdmissionPolicyBinding");
    expect(binding.spec.matchResources.namespaceSelector.matchExpressions).toEqual([{ key: "kubernetes.io/metadata.name", operator: "In", values: [ns] }]);
    await admin.create(`${ADMISSION}/mutatingadmissionpolicies`, policy);
    await admin.create(`${ADMISSION}/mutatingadmissionpolicybindings`, binding);
    // The API server takes a new policy into force a moment after it is created: until then runs
    // are admitted unlabelled. Probe with new runs until one is labelled.
    let n = 0;
    await waitFor(
      "the shard policy to be in force",
      async () => {
        const probe = await createRun(admin, ns, runManifest(`probe-${++n}`));
        return shardLabel(probe) !== undefined;
      },
      { timeoutMs: 60_000, intervalMs: 250 },
    );
  }, 120_000);

  afterAll(async () => {
    if (binding) await admin.delete(`${ADMISSION}/mutatingadmissionpolicybindings/${binding.metadata.name}`).catch(() => {});
    if (policy) await admin.delete(`${ADMISSION}/mutatingadmissionpolicies/${policy.metadata.name}`).catch(() => {});
    if (ns) await deleteNamespace(admin, ns);
  });

  it("labels each run with the operator's shardOf of its namespace and name", async () => {
    const names = runNames(100);
    const labels = new Map<string, string | undefined>();
    for (let i = 0; i < names.length; i += 10) {
      await Promise.all(
        names.slice(i, i + 10).map(async (name) => {
          const created = await createRun(admin, ns, runManifest(name));
          labels.set(name, shardLabel(created));
        }),
      );
    }
    const wrong = names.filter((name) => labels.get(name) !== String(shardOf(ns, name, shards))).map((name) => `${name}: ${labels.get(name)} != ${shardOf(ns, name, shards)}`);
    expect(wrong).toEqual([]);
    // And what was admitted is what is stored (the probes made before the policy was in force
    // aside: they are the operator's to label).
    const stored = (await admin.get<{ items: any[] }>(paths.runs(ns))).items.filter((run) => names.includes(run.metadata.name));
    expect(stored).toHaveLength(names.length);
    for (const run of stored) expect(shardLabel(run), run.metadata.name).toBe(String(shardOf(ns, run.metadata.name, shards)));
    // Every shard gets runs.
    expect(new Set(labels.values())).toEqual(new Set(Array.from({ length: shards }, (_, i) => String(i))));
  });

  it("overrides a shard the creator chose, and keeps the creator's other labels", async () => {
    const own = String(shardOf(ns, "chosen", shards));
    const manifest: any = runManifest("chosen");
    manifest.metadata.labels = { [LABELS.shard]: String((Number(own) + 1) % shards), team: "a" };
    const created: any = await createRun(admin, ns, manifest);
    expect(created.metadata.labels).toEqual({ [LABELS.shard]: own, team: "a" });
  });

  it("leaves a run made with generateName to the operator, and labels it on its first update", async () => {
    const manifest: any = runManifest("");
    manifest.metadata = { generateName: "gen-" };
    const created: any = await createRun(admin, ns, manifest);
    expect(created.metadata.name).toMatch(/^gen-/);
    expect(created.metadata.labels?.[LABELS.shard]).toBeUndefined();
    expect(shardLabel(await getRun(admin, ns, created.metadata.name))).toBeUndefined();
    // Once it has a name, an update of it (the operator's patch, or anyone's) gets the label.
    const updated = await admin.mergePatch(paths.run(ns, created.metadata.name), { metadata: { annotations: { touched: "yes" } } });
    expect(shardLabel(updated)).toBe(String(shardOf(ns, created.metadata.name, shards)));
  });

  it("keeps the label through kubectl label --overwrite, its removal, an update and an apply without it", async () => {
    const name = "pinned";
    const own = String(shardOf(ns, name, shards));
    const other = String((Number(own) + 1) % shards);
    const created = await createRun(admin, ns, runManifest(name));
    expect(shardLabel(created)).toBe(own);
    const current = async () => shardLabel(await getRun(admin, ns, name));

    // kubectl label: accepted (the request is valid), but the policy puts the old value back.
    ok(await kubectl(["label", "--overwrite", "-n", ns, `agentruns.watchdog.dev/${name}`, `${LABELS.shard}=${other}`]), "kubectl label --overwrite");
    expect(await current()).toBe(own);
    ok(await kubectl(["label", "-n", ns, `agentruns.watchdog.dev/${name}`, `${LABELS.shard}-`]), "kubectl label (remove)");
    expect(await current()).toBe(own);

    // A merge patch that drops every label, and a whole update without labels.
    expect(shardLabel(await admin.mergePatch(paths.run(ns, name), { metadata: { labels: null } }))).toBe(own);
    const run: any = await getRun(admin, ns, name);
    delete run.metadata.labels;
    const replaced = await admin.request<any>("PUT", paths.run(ns, name), { body: run });
    expect(shardLabel(replaced)).toBe(own);
    expect(await current()).toBe(own);

    // Server-side apply: a manifest that names another shard, then one without the label.
    const applied: any = runManifest(name);
    applied.metadata.labels = { [LABELS.shard]: other };
    ok(await kubectl(["apply", "--server-side", "--force-conflicts", "--field-manager=user", "-n", ns, "-f", writeValues(applied)]), "kubectl apply --server-side");
    expect(await current()).toBe(own);
    delete applied.metadata.labels;
    ok(await kubectl(["apply", "--server-side", "--force-conflicts", "--field-manager=user", "-n", ns, "-f", writeValues(applied)]), "kubectl apply --server-side");
    expect(await current()).toBe(own);
  });

  it("is never evaluated for status writes (heartbeats), which go through unchanged", async () => {
    // Only agentruns, never agentruns/status, is matched.
    expect(policy.spec.matchConstraints.resourceRules.flatMap((r: any) => r.resources)).toEqual(["agentruns"]);
    const name = "beating";
    await createRun(admin, ns, runManifest(name));
    const before = await evaluations(policy.metadata.name);
    const time = new Date().toISOString();
    const patched: any = await admin.mergePatch(paths.runStatus(ns, name), { status: { heartbeat: { time, attempt: 1, state: "Planning" } } });
    expect(patched.status.heartbeat).toMatchObject({ attempt: 1, state: "Planning" });
    expect(shardLabel(patched)).toBe(String(shardOf(ns, name, shards)));
    expect(await evaluations(policy.metadata.name)).toBe(before);
    // The count does move for a write to the run itself: the metric is the policy's.
    await admin.mergePatch(paths.run(ns, name), { metadata: { annotations: { touched: "yes" } } });
    await waitFor("the policy's evaluation to be counted", async () => (await evaluations(policy.metadata.name)) > before, { timeoutMs: 10_000 });
  });
});

describe("the shard policy of a release that watches some namespaces", () => {
  const release = `shard-${randomBytes(3).toString("hex")}`;
  const shards = 4;
  let watched: string;
  let other: string;
  let policy: any;
  let binding: any;

  const inForce = (ns: string) => {
    let n = 0;
    return waitFor(`the shard policy to be in force in ${ns}`, async () => shardLabel(await createRun(admin, ns, runManifest(`probe-${++n}`))) !== undefined, {
      timeoutMs: 60_000,
      intervalMs: 250,
    });
  };

  beforeAll(async () => {
    watched = await newNamespace(admin, "aw-shard-watched", { "watchdog.dev/test": "chart" });
    other = await newNamespace(admin, "aw-shard-other", { "watchdog.dev/test": "chart" });
    const objects = await render({ sharding: { shards }, watchNamespaces: [watched] }, { release });
    policy = find(objects, "MutatingAdmissionPolicy");
    binding = find(objects, "MutatingAdmissionPolicyBinding");
    await admin.create(`${ADMISSION}/mutatingadmissionpolicies`, policy);
    await admin.create(`${ADMISSION}/mutatingadmissionpolicybindings`, binding);
    await inForce(watched);
  }, 120_000);

  afterAll(async () => {
    if (binding) await admin.delete(`${ADMISSION}/mutatingadmissionpolicybindings/${binding.metadata.name}`).catch(() => {});
    if (policy) await admin.delete(`${ADMISSION}/mutatingadmissionpolicies/${policy.metadata.name}`).catch(() => {});
    for (const ns of [watched, other]) if (ns) await deleteNamespace(admin, ns);
  });

  it("leaves the runs of the other namespaces alone", async () => {
    const outside = await createRun(admin, other, runManifest("outside"));
    expect(shardLabel(outside)).toBeUndefined();
    const inside = await createRun(admin, watched, runManifest("inside"));
    expect(shardLabel(inside)).toBe(String(shardOf(watched, "inside", shards)));
  });

  it("keeps a label a run had before the policy applied to it, even one it would not compute", async () => {
    // A run labelled while no policy applied (as under another shard count): its label stays.
    const computed = shardOf(other, "earlier", shards);
    const had = String((computed + 1) % shards);
    const manifest: any = runManifest("earlier");
    manifest.metadata.labels = { [LABELS.shard]: had };
    expect(shardLabel(await createRun(admin, other, manifest))).toBe(had);
    await admin.mergePatch(`${ADMISSION}/mutatingadmissionpolicybindings/${binding.metadata.name}`, {
      spec: { matchResources: { namespaceSelector: { matchExpressions: [{ key: "kubernetes.io/metadata.name", operator: "In", values: [watched, other] }] } } },
    });
    await inForce(other);

    ok(await kubectl(["label", "--overwrite", "-n", other, "agentruns.watchdog.dev/earlier", `${LABELS.shard}=${(computed + 2) % shards}`]), "kubectl label --overwrite");
    expect(shardLabel(await getRun(admin, other, "earlier"))).toBe(had);
    expect(shardLabel(await admin.mergePatch(paths.run(other, "earlier"), { metadata: { labels: null } }))).toBe(had);
  });
});
