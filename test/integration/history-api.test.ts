// The run history through the API server: the operator registered as an aggregated API (an
// APIService, as the chart makes it), reached with a user's own credentials and nothing else.
// The real API server authenticates the caller, authorizes `get agentrunhistories`, and proxies
// the request with its front-proxy certificate; the operator then asks it whether that caller
// may `get` the AgentRun before it reads the ledger. Each refusal is shown where it happens, and
// headers that claim a user are shown to count for nothing on a connection without the
// front-proxy certificate.
import { execFileSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { KubeConfig } from "@kubernetes/client-node";
import { Agent, fetch as undiciFetch } from "undici";
import { afterAll, beforeAll, describe, expect, inject, it } from "vitest";
import { ApiError, KubeClient } from "../../operator/kube/client.ts";
import { historyApiPath } from "../../operator/ledger/history-api.ts";
import { main } from "../../operator/cli/plugin/main.ts";
import { createDatabase, type TestDatabase } from "../ledger/support.ts";
import { createRun, deleteNamespace, getRun, kube, kubeconfigPath, newNamespace, runManifest } from "../support/cluster.ts";
import { startOperator, type OperatorProcess } from "../support/operator-process.ts";
import { waitFor } from "../support/wait.ts";

const RBAC = "/apis/rbac.authorization.k8s.io/v1";
const APISERVICE = "/apis/apiregistration.k8s.io/v1/apiservices/v1alpha1.history.watchdog.dev";

/** A kubeconfig for the test cluster that authenticates with `token`, or as nobody. */
function kubeconfigAs(dir: string, name: string, token?: string): string {
  const admin = new KubeConfig();
  admin.loadFromFile(kubeconfigPath());
  const cluster = admin.getCurrentCluster();
  if (!cluster) throw new Error("the test kubeconfig names no cluster");
  const kc = new KubeConfig();
  kc.loadFromOptions({
    clusters: [cluster],
    users: [{ name, ...(token ? { token } : {}) }],
    contexts: [{ name, cluster: cluster.name, user: name }],
    currentContext: name,
  });
  const file = join(dir, `${name}.kubeconfig`);
  writeFileSync(file, kc.exportConfig());
  return file;
}

function clientFor(file: string): KubeClient {
  const kc = new KubeConfig();
  kc.loadFromFile(file);
  return new KubeClient(kc);
}

async function refusal(what: Promise<unknown>): Promise<{ code: number; message: string }> {
  try {
    await what;
  } catch (err) {
    if (err instanceof ApiError) return { code: err.code, message: (err.body as { message?: string } | undefined)?.message ?? "" };
    throw err;
  }
  throw new Error("the request was not refused");
}

describe("the run history through the API server, with the user's own credentials", () => {
  let admin: KubeClient;
  let ns: string;
  let db: TestDatabase;
  let operator: OperatorProcess;
  let dir: string;
  const kubeconfigs: Record<"reader" | "historyOnly" | "stranger" | "anonymous", string> = { reader: "", historyOnly: "", stranger: "", anonymous: "" };

  beforeAll(async () => {
    admin = kube();
    ns = await newNamespace(admin, "history-api");
    db = await createDatabase(inject("databaseUrl"), "history-api");
    dir = mkdtempSync(join(tmpdir(), "aw-history-api-"));

    // The serving certificate names the Service, as the API server checks it (it dials the
    // Service's address but verifies <service>.<namespace>.svc).
    execFileSync("openssl", ["req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-days", "1", "-subj", "/CN=agent-watchdog-history", "-addext", `subjectAltName=DNS:history.${ns}.svc,IP:127.0.0.1`, "-keyout", join(dir, "tls.key"), "-out", join(dir, "tls.crt")], { stdio: "ignore" });

    // reader may get the run "readable" and its history; historyOnly may get histories but no
    // run; stranger may get nothing.
    const rules: Record<string, unknown[]> = {
      reader: [
        { apiGroups: ["watchdog.dev"], resources: ["agentruns"], resourceNames: ["readable"], verbs: ["get"] },
        { apiGroups: ["history.watchdog.dev"], resources: ["agentrunhistories"], verbs: ["get"] },
      ],
      historyOnly: [{ apiGroups: ["history.watchdog.dev"], resources: ["agentrunhistories"], verbs: ["get"] }],
    };
    for (const who of ["reader", "historyOnly", "stranger"] as const) {
      const sa = who.toLowerCase();
      await admin.create(`/api/v1/namespaces/${ns}/serviceaccounts`, { apiVersion: "v1", kind: "ServiceAccount", metadata: { name: sa } });
      const issued = await admin.create<{ status: { token: string } }>(`/api/v1/namespaces/${ns}/serviceaccounts/${sa}/token`, { apiVersion: "authentication.k8s.io/v1", kind: "TokenRequest", spec: { expirationSeconds: 3600 } });
      kubeconfigs[who] = kubeconfigAs(dir, sa, issued.status.token);
      const granted = rules[who];
      if (!granted) continue;
      await admin.create(`${RBAC}/namespaces/${ns}/roles`, { apiVersion: "rbac.authorization.k8s.io/v1", kind: "Role", metadata: { name: sa }, rules: granted });
      await admin.create(`${RBAC}/namespaces/${ns}/rolebindings`, { apiVersion: "rbac.authorization.k8s.io/v1", kind: "RoleBinding", metadata: { name: sa }, roleRef: { apiGroup: "rbac.authorization.k8s.io", kind: "Role", name: sa }, subjects: [{ kind: "ServiceAccount", name: sa, namespace: ns }] });
    }
    kubeconfigs.anonymous = kubeconfigAs(dir, "anonymous");

    operator = await startOperator(ns, [`--tls-cert-file=${join(dir, "tls.crt")}`, `--tls-private-key-file=${join(dir, "tls.key")}`], { DATABASE_URL: db.url });
    const port = Number(new URL(operator.metricsUrl).port);
    // The operator listens on loopback, where no Endpoints may point: an ExternalName Service
    // stands in for the chart's ClusterIP Service, and the API server dials it by name.
    await admin.create(`/api/v1/namespaces/${ns}/services`, { apiVersion: "v1", kind: "Service", metadata: { name: "history" }, spec: { type: "ExternalName", externalName: "localhost", ports: [{ name: "https", port }] } });
    await admin.create("/apis/apiregistration.k8s.io/v1/apiservices", {
      apiVersion: "apiregistration.k8s.io/v1",
      kind: "APIService",
      metadata: { name: "v1alpha1.history.watchdog.dev" },
      spec: { group: "history.watchdog.dev", version: "v1alpha1", groupPriorityMinimum: 1000, versionPriority: 15, service: { namespace: ns, name: "history", port }, caBundle: readFileSync(join(dir, "tls.crt")).toString("base64") },
    });
    await waitFor("the APIService to be Available", async () => {
      const svc = await admin.get<{ status?: { conditions?: { type: string; status: string }[] } }>(APISERVICE);
      return svc.status?.conditions?.some((c) => c.type === "Available" && c.status === "True");
    }, { timeoutMs: 60_000 });

    await createRun(admin, ns, runManifest("readable"));
    await createRun(admin, ns, runManifest("secret"));
    await waitFor("both runs to start", async () => (await Promise.all(["readable", "secret"].map(async (n) => (await getRun(admin, ns, n)).status?.phase))).every((p) => p === "Starting"), { timeoutMs: 60_000 });
  }, 240_000);

  afterAll(async () => {
    // The APIService goes first: one whose server is gone makes discovery fail for everyone.
    await admin?.delete(APISERVICE).catch(() => undefined);
    await operator?.stop();
    if (admin && ns) await deleteNamespace(admin, ns);
    await db?.drop();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  it("serves the history of a run to a caller who may get that run, through the API server", async () => {
    const reader = clientFor(kubeconfigs.reader);
    const doc = await waitFor("the ledger to hold the run's start, read through the API server", async () => {
      const got = await reader.get<{ kind: string; metadata: { name: string }; history: { namespace: string; transitions: { phase: string }[] } }>(historyApiPath(ns, "readable"));
      return got.history.transitions.some((t) => t.phase === "Starting") ? got : undefined;
    }, { timeoutMs: 30_000 });
    expect(doc).toMatchObject({ apiVersion: "history.watchdog.dev/v1alpha1", kind: "AgentRunHistory", metadata: { namespace: ns, name: "readable" }, history: { namespace: ns, name: "readable" } });
    // Discovery names the one resource and the one verb.
    const resources = await reader.get<{ resources: { name: string; verbs: string[] }[] }>("/apis/history.watchdog.dev/v1alpha1");
    expect(resources.resources).toEqual([expect.objectContaining({ name: "agentrunhistories", namespaced: true, verbs: ["get"] })]);
  });

  it("refuses, each where it must: no credentials, no get on histories, no get on the run", async () => {
    // Nobody: the API server refuses before anything reaches the operator.
    const anonymous = await refusal(clientFor(kubeconfigs.anonymous).get(historyApiPath(ns, "readable")));
    expect(anonymous.code).toBe(403);
    expect(anonymous.message).toContain('User "system:anonymous" cannot get resource "agentrunhistories"');
    // No RBAC for histories: refused by the API server's own authorization.
    const stranger = await refusal(clientFor(kubeconfigs.stranger).get(historyApiPath(ns, "readable")));
    expect(stranger).toMatchObject({ code: 403 });
    expect(stranger.message).toContain(`"system:serviceaccount:${ns}:stranger" cannot get resource "agentrunhistories"`);
    // May get histories but not the run: refused by the operator's SubjectAccessReview, so the
    // ledger is not read for a run the caller may not see.
    const historyOnly = await refusal(clientFor(kubeconfigs.historyOnly).get(historyApiPath(ns, "readable")));
    expect(historyOnly).toMatchObject({ code: 403 });
    expect(historyOnly.message).toContain(`system:serviceaccount:${ns}:historyonly may not get agentruns.watchdog.dev "readable" in namespace "${ns}"`);
    // The reader's grant is for one run only.
    const other = await refusal(clientFor(kubeconfigs.reader).get(historyApiPath(ns, "secret")));
    expect(other).toMatchObject({ code: 403 });
    expect(other.message).toContain('may not get agentruns.watchdog.dev "secret"');
    // Read only: no other verb reaches the ledger.
    expect((await refusal(clientFor(kubeconfigs.reader).request("DELETE", historyApiPath(ns, "readable")))).code).toBe(403);
  });

  it("believes the user headers only from the API server's front-proxy certificate", async () => {
    // Straight to the operator, claiming to be a cluster admin: no front-proxy certificate, so
    // the headers are ignored and the caller is as anonymous as they are.
    const dispatcher = new Agent({ connect: { ca: readFileSync(join(dir, "tls.crt")) } });
    try {
      const direct = await undiciFetch(`https://127.0.0.1:${new URL(operator.metricsUrl).port}${historyApiPath(ns, "secret")}`, {
        dispatcher,
        headers: { "x-remote-user": "system:admin", "x-remote-group": "system:masters" },
      });
      expect(direct.status).toBe(401);
      expect(await direct.text()).not.toContain('"transitions"');
    } finally {
      await dispatcher.close();
    }
  });

  it("kubectl agentrun history reads it with nothing but the user's kubeconfig", async () => {
    let stdout = "";
    let stderr = "";
    const env = { ...process.env, KUBECONFIG: kubeconfigs.reader, DATABASE_URL: undefined };
    const code = await main(["history", "readable", "-n", ns, "-o", "json"], env, { out: (t) => void (stdout += t), err: (t) => void (stderr += t) });
    expect({ code, stderr }).toEqual({ code: 0, stderr: "" });
    const history = JSON.parse(stdout) as { namespace: string; name: string; transitions: { phase: string }[] };
    expect(history).toMatchObject({ namespace: ns, name: "readable" });
    expect(history.transitions.map((t) => t.phase)).toContain("Starting");

    // Without get on the run, the plugin says what the operator refused and reads nothing else.
    let refusedOut = "";
    let refusedErr = "";
    const refusedCode = await main(["history", "readable", "-n", ns], { ...env, KUBECONFIG: kubeconfigs.historyOnly }, { out: (t) => void (refusedOut += t), err: (t) => void (refusedErr += t) });
    expect(refusedCode).toBe(1);
    expect(refusedOut).toBe("");
    expect(refusedErr).toContain("forbidden");
  });
});
