// The chart installed for real, with the image built here: two operator replicas Running and Ready
// under the kubelet's real probes, one of them leading; /metrics served; the samples and a longer
// run ending as they should while the leader's pod is deleted and the other replica takes over;
// helm uninstall keeping the CRD.
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, inject, it } from "vitest";
import { parse as parseYaml } from "yaml";
import { RESTRICTED_NAMESPACE } from "../../harness/cluster.ts";
import { installOperator, type InstalledOperator, type RealNode } from "../../harness/real-node.ts";
import { paths, type Json, type KubeClient } from "../../operator/kube/client.ts";
import { deleteNamespace, kube, kubeconfigPath, newNamespace } from "../support/cluster.ts";
import { waitFor } from "../support/wait.ts";
import { longRun } from "./support.ts";
import { kubectl, ok, refusal, requestToken, root, tokenClient } from "../chart/support.ts";

const CRD = "agentruns.watchdog.dev";

let client: KubeClient;
let system: string;
let runs: string;
let operator: InstalledOperator;
let installed = false;

beforeAll(async () => {
  client = kube();
  [system, runs] = await Promise.all([newNamespace(client, "aw-system", RESTRICTED_NAMESPACE), newNamespace(client, "aw-runs", RESTRICTED_NAMESPACE)]);
  const node: RealNode = { state: inject("nodeState"), kubeconfig: kubeconfigPath(), image: inject("image"), helm: inject("helm"), kubectl: inject("kubectl") };
  // The release installs the CRD too, over the one the suite applied: mark it as the release's
  // so that helm may adopt it, as the chart's README explains.
  ok(await kubectl(["label", "--overwrite", "crd", CRD, "app.kubernetes.io/managed-by=Helm"]), "kubectl label");
  ok(await kubectl(["annotate", "--overwrite", "crd", CRD, "meta.helm.sh/release-name=it", `meta.helm.sh/release-namespace=${system}`]), "kubectl annotate");
  operator = await installOperator({ node, client, release: "it", namespace: system, watchNamespaces: [runs], values: { crds: { enabled: true, keep: true } } });
  installed = true;
});

afterAll(async () => {
  if (installed) await operator.uninstall().catch(() => {});
  await Promise.all([deleteNamespace(client, runs), deleteNamespace(client, system)]);
  // Hand the CRD back as the suite found it: applied with kubectl, owned by no release.
  await kubectl(["annotate", "crd", CRD, "meta.helm.sh/release-name-", "meta.helm.sh/release-namespace-", "helm.sh/resource-policy-"]);
  await kubectl(["label", "crd", CRD, "app.kubernetes.io/managed-by-", "app.kubernetes.io/instance-", "app.kubernetes.io/version-", "app.kubernetes.io/part-of-", "helm.sh/chart-"]);
});

/** /metrics of one replica, over HTTPS verified with the chart's CA (the chart's default). */
async function metricsOf(ip: string): Promise<string> {
  const res = await operator.fetch("/metrics", {}, ip);
  expect(res.status).toBe(200);
  return res.text();
}

const leaderGauge = (text: string) => Number(/^leader_election_master_status\{[^}]*\} (\d+)/m.exec(text)?.[1]);

function sample(file: string): Json {
  return parseYaml(readFileSync(join(root, "test/manifests/samples", file), "utf8")) as Json;
}

describe("the chart with the image built here, on the real node", () => {
  it("runs two replicas, Running and Ready under the kubelet's probes, one of them leading", async () => {
    const pods = await waitFor("two ready operator pods", async () => {
      const list = await operator.pods();
      return list.length === 2 && list.every((p) => p.ready) ? list : undefined;
    }, { timeoutMs: 120_000 });
    for (const p of pods) {
      const pod = await client.get<any>(paths.pod(system, p.name));
      expect(pod.spec.nodeName).toBe("kubelet-node-0");
      expect(pod.status.containerStatuses[0]).toMatchObject({ ready: true, restartCount: 0, state: { running: expect.anything() } });
      expect(pod.spec.containers[0].readinessProbe.httpGet.path).toBe("/readyz");
    }
    const holder = await waitFor("a leader", () => operator.leader(), { timeoutMs: 60_000 });
    expect(pods.map((p) => p.name)).toContain(holder);
    const gauges = Object.fromEntries(await Promise.all(pods.map(async (p) => [p.name, leaderGauge(await metricsOf(p.ip))] as const)));
    expect(Object.values(gauges).sort()).toEqual([0, 1]);
    expect(gauges[holder]).toBe(1);
  });

  it("serves /metrics with the controller's series", async () => {
    const [pod] = await operator.pods();
    const text = await metricsOf(pod!.ip);
    for (const name of ["controller_runtime_reconcile_total", "workqueue_depth", "watchdog_agentruns", "leader_election_master_status"]) {
      expect(text).toContain(name);
    }
  });

  it("serves the run history through the API server, which reaches the operator's pods", async () => {
    const apiService = await waitFor("the history's APIService to be Available", async () => {
      const svc = await client.get<any>("/apis/apiregistration.k8s.io/v1/apiservices/v1alpha1.history.watchdog.dev");
      return svc.status?.conditions?.some((c: any) => c.type === "Available" && c.status === "True") ? svc : undefined;
    }, { timeoutMs: 60_000 });
    expect(apiService.spec.service).toEqual({ namespace: system, name: "it-agent-watchdog-metrics", port: 8080 });
    const resources = await client.get<any>("/apis/history.watchdog.dev/v1alpha1");
    expect(resources.resources.map((r: any) => r.name)).toEqual(["agentrunhistories"]);
    await client.create(paths.runs(runs), { ...sample("minimal.yaml"), metadata: { name: "asked-about" } });
    // The API server authenticated the caller and proxied with its front-proxy certificate; the
    // operator checked get on the run, then found it has no ledger in this release: its answer.
    const history = `/apis/history.watchdog.dev/v1alpha1/namespaces/${runs}/agentrunhistories/asked-about`;
    const noLedger = await refusal(client.get(history));
    expect(noLedger.code).toBe(404);
    expect((noLedger.body as { message?: string }).message).toBe("this operator runs without a ledger: no history is recorded");
    // A caller who may get histories but not the run is refused by the operator's own review.
    await client.create(`/api/v1/namespaces/${runs}/serviceaccounts`, { apiVersion: "v1", kind: "ServiceAccount", metadata: { name: "history-only" } });
    await client.create(`/apis/rbac.authorization.k8s.io/v1/namespaces/${runs}/roles`, { apiVersion: "rbac.authorization.k8s.io/v1", kind: "Role", metadata: { name: "history-only" }, rules: [{ apiGroups: ["history.watchdog.dev"], resources: ["agentrunhistories"], verbs: ["get"] }] });
    await client.create(`/apis/rbac.authorization.k8s.io/v1/namespaces/${runs}/rolebindings`, { apiVersion: "rbac.authorization.k8s.io/v1", kind: "RoleBinding", metadata: { name: "history-only" }, roleRef: { apiGroup: "rbac.authorization.k8s.io", kind: "Role", name: "history-only" }, subjects: [{ kind: "ServiceAccount", name: "history-only", namespace: runs }] });
    const historyOnly = tokenClient(await requestToken(client, runs, "history-only"));
    const forbidden = await waitFor("the binding to take effect and the operator to refuse", async () => {
      const err = await refusal(historyOnly.get(history));
      return err.code === 403 && String((err.body as { message?: string }).message).includes("may not get agentruns.watchdog.dev") ? err : undefined;
    }, { timeoutMs: 20_000 });
    expect((forbidden.body as { message?: string }).message).toContain(`system:serviceaccount:${runs}:history-only may not get agentruns.watchdog.dev "asked-about"`);
  });

  it("completes the samples and a longer run while the leader's pod is deleted and the other replica takes over", async () => {
    for (const manifest of [sample("minimal.yaml"), sample("full.yaml"), longRun("long")]) await client.create(paths.runs(runs), manifest);
    // The long run is working (its sandbox heartbeats) before the leader goes.
    await waitFor("the long run to be planning", async () => {
      const run = await client.get<any>(paths.run(runs, "long"));
      return ["Planning", "ExecutingTool"].includes(run.status?.phase);
    }, { timeoutMs: 60_000 });
    const before = (await operator.leader()) as string;
    const deletedAt = Date.now();
    await client.delete(paths.pod(system, before));
    const after = await waitFor("another replica to lead", async () => {
      const holder = await operator.leader();
      return holder && holder !== before ? holder : undefined;
    }, { timeoutMs: 60_000 });
    const takeoverMs = Date.now() - deletedAt;
    // A graceful shutdown hands the Lease back: far quicker than waiting for it to expire.
    expect(takeoverMs).toBeLessThan(17_000);
    expect(after).not.toBe(before);

    for (const name of ["minimal", "full", "long"]) {
      const run = await waitFor(`${name} to complete`, async () => {
        const r = await client.get<any>(paths.run(runs, name));
        if (["Failed", "NeedsHumanIntervention"].includes(r.status?.phase)) throw new Error(`${name} ended ${r.status.phase}: ${r.status.message}`);
        return r.status?.phase === "Completed" ? r : undefined;
      }, { timeoutMs: 180_000 });
      // Nothing was mistaken for a failure across the handover.
      expect(run.status).toMatchObject({ attempt: 1, restarts: 0 });
    }
    // Exits come from the kubelet: the agent container terminated with 0.
    const long = await client.get<any>(paths.run(runs, "long"));
    const pod = await client.get<any>(paths.pod(runs, long.status.podName));
    expect(pod.status.containerStatuses[0].state.terminated).toMatchObject({ exitCode: 0, reason: "Completed" });
  });

  it("is removed by helm uninstall, except the CRD", async () => {
    await operator.uninstall();
    installed = false;
    await waitFor("the operator's pods to go", async () => (await operator.pods()).length === 0, { timeoutMs: 120_000 });
    const crd = await client.get<any>(`/apis/apiextensions.k8s.io/v1/customresourcedefinitions/${CRD}`);
    expect(crd.metadata.annotations).toMatchObject({ "helm.sh/resource-policy": "keep", "meta.helm.sh/release-name": "it" });
    await expect(client.get(`/apis/apps/v1/namespaces/${system}/deployments/it-agent-watchdog`)).rejects.toMatchObject({ code: 404 });
  });
});
