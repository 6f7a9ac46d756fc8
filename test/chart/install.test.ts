// The chart against a real API server with a scheduler and a (kwok) node: a server-side dry run of
// every object with every feature on, then a real helm install into a namespace that enforces the
// restricted Pod Security Standard, and a helm uninstall.
import { randomBytes } from "node:crypto";
import { request as httpsRequest } from "node:https";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { isNotFound, type Json, type KubeClient } from "../../operator/kube/client.ts";
import { kube } from "../support/cluster.ts";
import { waitFor } from "../support/wait.ts";
import { allFeatures, featureChart, helm, kubectl, ok, parseManifests, refusal, requestToken, restrictedNamespace, template, testCluster, writeValues } from "./support.ts";

const CRD = "agentruns.watchdog.dev";

let client: KubeClient;
const namespaces: string[] = [];

beforeAll(() => {
  client = kube();
});

afterAll(async () => {
  for (const ns of namespaces) await client.delete(`/api/v1/namespaces/${ns}`).catch(() => {});
});

/** Which FlowSchema and priority level the API server put a request in (from its answer's headers). */
function classify(token: string, method: string, path: string): Promise<{ schema: string | undefined; level: string | undefined }> {
  const { server, caData } = testCluster();
  return new Promise((resolve, reject) => {
    const body = method === "PATCH" ? "{}" : undefined;
    const req = httpsRequest(
      new URL(path, server),
      {
        method,
        ...(caData ? { ca: Buffer.from(caData, "base64") } : {}),
        headers: { Authorization: `Bearer ${token}`, ...(body ? { "Content-Type": "application/merge-patch+json" } : {}) },
      },
      (res) => {
        res.resume();
        res.once("end", () => {
          const header = (name: string) => res.headers[name] as string | undefined;
          resolve({ schema: header("x-kubernetes-pf-flowschema-uid"), level: header("x-kubernetes-pf-prioritylevel-uid") });
        });
      },
    );
    req.once("error", reject);
    req.end(body);
  });
}

/** Where each kind of object the chart renders lives in the API. */
function pathOf(object: Json): string {
  const meta = object.metadata as { name: string; namespace?: string };
  const [group, version] = String(object.apiVersion).includes("/") ? String(object.apiVersion).split("/") : ["", String(object.apiVersion)];
  const plural: Record<string, string> = {
    APIService: "apiservices",
    ClusterRole: "clusterroles",
    ClusterRoleBinding: "clusterrolebindings",
    ConfigMap: "configmaps",
    CustomResourceDefinition: "customresourcedefinitions",
    Deployment: "deployments",
    FlowSchema: "flowschemas",
    MutatingAdmissionPolicy: "mutatingadmissionpolicies",
    MutatingAdmissionPolicyBinding: "mutatingadmissionpolicybindings",
    NetworkPolicy: "networkpolicies",
    PodDisruptionBudget: "poddisruptionbudgets",
    PriorityLevelConfiguration: "prioritylevelconfigurations",
    Role: "roles",
    RoleBinding: "rolebindings",
    Secret: "secrets",
    Service: "services",
    ServiceAccount: "serviceaccounts",
    ValidatingAdmissionPolicy: "validatingadmissionpolicies",
    ValidatingAdmissionPolicyBinding: "validatingadmissionpolicybindings",
  };
  const resource = plural[object.kind as string];
  if (!resource) throw new Error(`no path known for ${String(object.kind)}`);
  const base = group ? `/apis/${group}/${version}` : `/api/${version}`;
  return meta.namespace ? `${base}/namespaces/${meta.namespace}/${resource}/${meta.name}` : `${base}/${resource}/${meta.name}`;
}

async function exists(path: string): Promise<boolean> {
  try {
    await client.get(path);
    return true;
  } catch (err) {
    if (isNotFound(err)) return false;
    throw err;
  }
}

describe("a server-side dry run", () => {
  // ServiceMonitor and PrometheusRule need the Prometheus Operator's CRDs. Where they are missing,
  // minimal stand-ins (any content accepted) let the dry run cover those objects too.
  const standIns: string[] = [];

  beforeAll(async () => {
    for (const [kind, plural] of [
      ["ServiceMonitor", "servicemonitors"],
      ["PrometheusRule", "prometheusrules"],
    ] as const) {
      const name = `${plural}.monitoring.coreos.com`;
      if (await exists(`/apis/apiextensions.k8s.io/v1/customresourcedefinitions/${name}`)) continue;
      await client.create("/apis/apiextensions.k8s.io/v1/customresourcedefinitions", {
        apiVersion: "apiextensions.k8s.io/v1",
        kind: "CustomResourceDefinition",
        metadata: { name, labels: { "watchdog.dev/test": "chart-stand-in" } },
        spec: {
          group: "monitoring.coreos.com",
          names: { kind, plural, listKind: `${kind}List`, singular: kind.toLowerCase() },
          scope: "Namespaced",
          versions: [{ name: "v1", served: true, storage: true, schema: { openAPIV3Schema: { type: "object", "x-kubernetes-preserve-unknown-fields": true } } }],
        },
      });
      standIns.push(name);
    }
    for (const name of standIns) {
      await waitFor(`CRD ${name} established`, async () => {
        const crd = await client.get<any>(`/apis/apiextensions.k8s.io/v1/customresourcedefinitions/${name}`);
        return crd.status?.conditions?.some((c: any) => c.type === "Established" && c.status === "True");
      });
    }
  });

  afterAll(async () => {
    for (const name of standIns) await client.delete(`/apis/apiextensions.k8s.io/v1/customresourcedefinitions/${name}`).catch(() => {});
  });

  it("accepts every object with every feature on, and the operator's pods pass restricted", async () => {
    const ns = await restrictedNamespace(client, "aw-dry");
    namespaces.push(ns);
    const manifests = ok(await template(allFeatures(ns), { chart: featureChart(), namespace: ns, release: `dry-${randomBytes(2).toString("hex")}` }), "helm template").stdout;
    const objects = parseManifests(manifests);
    expect(objects.map((o) => o.kind)).toEqual(expect.arrayContaining(["ServiceMonitor", "PrometheusRule", "NetworkPolicy", "ValidatingAdmissionPolicy", "CustomResourceDefinition"]));

    const result = await kubectl(["apply", "--server-side", "--force-conflicts", "--field-manager=chart-test", "--dry-run=server", "-f", "-"], manifests);
    expect(result.code, result.stderr).toBe(0);
    expect(result.stderr).not.toMatch(/would violate PodSecurity/);
    const checked = result.stdout.split("\n").filter((line) => line.endsWith("(server dry run)"));
    expect(checked).toHaveLength(objects.length);
  });

  it("would catch a pod template that restricted refuses", async () => {
    const ns = await restrictedNamespace(client, "aw-dry");
    namespaces.push(ns);
    const values = { podSecurityContext: { runAsNonRoot: false }, securityContext: { allowPrivilegeEscalation: true } };
    const manifests = ok(await template(values, { namespace: ns, release: "dry-insecure", args: ["--show-only", "templates/deployment.yaml"] }), "helm template").stdout;
    const result = await kubectl(["apply", "--server-side", "--field-manager=chart-test", "--dry-run=server", "-f", "-"], manifests);
    expect(result.stderr).toMatch(/would violate PodSecurity "restricted:latest"/);
  });
});

describe("helm install and uninstall", () => {
  let ns: string;
  const release = `it-${randomBytes(3).toString("hex")}`;
  const fullname = `${release}-agent-watchdog`;
  let installed: Json[] = [];
  const values = {
    ...allFeatures("unused"),
    // Only kinds this cluster serves; the dry run above covers the monitoring ones.
    metrics: { serviceMonitor: { enabled: false }, prometheusRule: { enabled: false } },
    watchNamespaces: [],
  };

  beforeAll(async () => {
    ns = await restrictedNamespace(client, "aw-install");
    namespaces.push(ns);
    // The ledger's URL, as an administrator would provide it.
    await client.create(`/api/v1/namespaces/${ns}/secrets`, {
      apiVersion: "v1",
      kind: "Secret",
      metadata: { name: "ledger-db" },
      stringData: { url: "postgres://ledger@postgresql:5432/watchdog" },
    });
    // The CRD already exists (the suite applied crds/ as users do). A release only installs over
    // an object it may adopt, so mark the CRD as this release's, as the chart's README explains.
    ok(await kubectl(["label", "--overwrite", "crd", CRD, "app.kubernetes.io/managed-by=Helm"]), "kubectl label");
    ok(await kubectl(["annotate", "--overwrite", "crd", CRD, `meta.helm.sh/release-name=${release}`, `meta.helm.sh/release-namespace=${ns}`]), "kubectl annotate");
    ok(
      await helm(["install", release, featureChart(), "--namespace", ns, "--values", writeValues(values), "--wait", "--timeout", "180s"]),
      "helm install",
    );
    installed = parseManifests(ok(await helm(["get", "manifest", release, "--namespace", ns]), "helm get manifest").stdout);
  });

  afterAll(async () => {
    await helm(["uninstall", release, "--namespace", ns, "--wait", "--timeout", "120s"]);
    // Hand the shared CRD back as the suite found it: applied with kubectl, owned by no release.
    await kubectl(["annotate", "crd", CRD, "meta.helm.sh/release-name-", "meta.helm.sh/release-namespace-", "helm.sh/resource-policy-"]);
    await kubectl(["label", "crd", CRD, "app.kubernetes.io/managed-by-", "app.kubernetes.io/instance-", "app.kubernetes.io/version-", "app.kubernetes.io/part-of-", "helm.sh/chart-"]);
  });

  it("creates every object of the release", async () => {
    const kinds = installed.map((o) => o.kind);
    expect(kinds).toEqual(
      expect.arrayContaining([
        "CustomResourceDefinition",
        "Deployment",
        "ServiceAccount",
        "ClusterRole",
        "ClusterRoleBinding",
        "Role",
        "RoleBinding",
        "Service",
        "PodDisruptionBudget",
        "ConfigMap",
        "NetworkPolicy",
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding",
        "MutatingAdmissionPolicy",
        "MutatingAdmissionPolicyBinding",
        "APIService",
        "Secret",
        "FlowSchema",
        "PriorityLevelConfiguration",
      ]),
    );
    for (const object of installed) expect(await exists(pathOf(object)), `${String(object.kind)} ${(object.metadata as Json).name}`).toBe(true);
    const crd = await client.get<any>(`/apis/apiextensions.k8s.io/v1/customresourcedefinitions/${CRD}`);
    expect(crd.metadata.annotations).toMatchObject({ "helm.sh/resource-policy": "keep", "meta.helm.sh/release-name": release });
  });

  it("runs the operator's pods, admitted under restricted and scheduled onto a node", async () => {
    const namespace = await client.get<any>(`/api/v1/namespaces/${ns}`);
    expect(namespace.metadata.labels["pod-security.kubernetes.io/enforce"]).toBe("restricted");
    // Enforcement is on: a pod that breaks restricted is refused here.
    const denied = await refusal(
      client.create(`/api/v1/namespaces/${ns}/pods`, {
        apiVersion: "v1",
        kind: "Pod",
        metadata: { name: "privileged" },
        spec: { containers: [{ name: "c", image: "busybox", securityContext: { privileged: true } }] },
      }),
    );
    expect(denied.code).toBe(403);
    expect(denied.message).toContain('violates PodSecurity "restricted:latest"');

    const deployment = await client.get<any>(`/apis/apps/v1/namespaces/${ns}/deployments/${fullname}`);
    expect(deployment.status.readyReplicas).toBe(2);
    const selector = Object.entries(deployment.spec.selector.matchLabels as Record<string, string>)
      .map(([k, v]) => `${k}=${v}`)
      .join(",");
    const pods = await waitFor("two running operator pods", async () => {
      const list = await client.get<{ items: any[] }>(`/api/v1/namespaces/${ns}/pods`, { labelSelector: selector });
      const running = list.items.filter((p) => p.spec.nodeName && p.status.phase === "Running" && !p.metadata.deletionTimestamp);
      return running.length === 2 ? running : undefined;
    });
    for (const pod of pods) {
      expect(pod.spec.securityContext).toMatchObject({ runAsNonRoot: true, seccompProfile: { type: "RuntimeDefault" } });
      expect(pod.spec.containers[0].securityContext).toMatchObject({ allowPrivilegeEscalation: false, capabilities: { drop: ["ALL"] } });
      expect(pod.spec.containers[0].args).toContain("--leader-elect");
    }
  });

  it("installs a fencing policy that type-checks against the installed CRD", async () => {
    const name = `${fullname}-sandbox-fencing`;
    const policy = await waitFor("the policy's type check", async () => {
      const p = await client.get<any>(`/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies/${name}`);
      return p.status?.observedGeneration === p.metadata.generation && p.status?.typeChecking ? p : undefined;
    });
    expect(policy.status.typeChecking.expressionWarnings ?? []).toEqual([]);
    expect(policy.status.conditions ?? []).not.toContainEqual(expect.objectContaining({ status: "False" }));
  });

  it("puts the operator's requests, and sandboxes' writes to runs, into priority levels of their own", async () => {
    const flowcontrol = "/apis/flowcontrol.apiserver.k8s.io/v1";
    const uid = async (path: string) => (await client.get<any>(path)).metadata.uid as string;
    const operatorSchema = await uid(`${flowcontrol}/flowschemas/${fullname}-operator`);
    const operatorLevel = await uid(`${flowcontrol}/prioritylevelconfigurations/${fullname}-operator`);
    const sandboxSchema = await uid(`${flowcontrol}/flowschemas/${fullname}-sandboxes`);
    const sandboxLevel = await uid(`${flowcontrol}/prioritylevelconfigurations/${fullname}-sandboxes`);
    await client.create(`/api/v1/namespaces/${ns}/serviceaccounts`, { apiVersion: "v1", kind: "ServiceAccount", metadata: { name: "a-sandbox" } }).catch(() => undefined);
    const operatorToken = await requestToken(client, ns, fullname);
    const sandboxToken = await requestToken(client, ns, "a-sandbox");
    const runs = `/apis/watchdog.dev/v1alpha1/namespaces/${ns}/agentruns`;
    // The API server says in every answer which FlowSchema and priority level it put the request
    // in (whether or not the request is then allowed).
    const asOperator = await classify(operatorToken, "PATCH", `${runs}/some-run/status`);
    expect(asOperator).toEqual({ schema: operatorSchema, level: operatorLevel });
    expect(await classify(operatorToken, "DELETE", `/api/v1/namespaces/${ns}/pods/some-pod`)).toEqual(asOperator);
    expect(await classify(sandboxToken, "PATCH", `${runs}/some-run/status`)).toEqual({ schema: sandboxSchema, level: sandboxLevel });
    expect(await classify(sandboxToken, "GET", `${runs}/some-run`)).toEqual({ schema: sandboxSchema, level: sandboxLevel });
    // Anything else a service account does stays where it was (the built-in service-accounts).
    const other = await classify(sandboxToken, "GET", `/api/v1/namespaces/${ns}/configmaps`);
    expect([operatorSchema, sandboxSchema]).not.toContain(other.schema);
  });

  it("is removed by helm uninstall, except the CRD it keeps", async () => {
    ok(await helm(["uninstall", release, "--namespace", ns, "--wait", "--timeout", "120s"]), "helm uninstall");
    const crd = installed.find((o) => o.kind === "CustomResourceDefinition")!;
    for (const object of installed.filter((o) => o !== crd)) {
      await waitFor(`${String(object.kind)} ${(object.metadata as Json).name} to be deleted`, async () => !(await exists(pathOf(object))), { timeoutMs: 60_000 });
    }
    expect(await exists(pathOf(crd))).toBe(true);
  });
});
