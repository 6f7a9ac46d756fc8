// What the operator serves is served only to whom the API server says may have it: the run
// history to a caller who may `get` that AgentRun, /metrics (with --metrics-secure) to a caller
// who may `get` the non-resource URL /metrics, over HTTPS with the certificate it is given.
// Callers are real ServiceAccounts with real tokens, judged by the real API server's
// TokenReview and SubjectAccessReview.
import { execFileSync } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { readFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Agent, fetch as undiciFetch } from "undici";
import { afterAll, beforeAll, describe, expect, inject, it } from "vitest";
import type { KubeClient } from "../../operator/kube/client.ts";
import { createDatabase, type TestDatabase } from "../ledger/support.ts";
import { createRun, deleteNamespace, getRun, kube, newNamespace, runManifest } from "../support/cluster.ts";
import { startOperator, type OperatorProcess } from "../support/operator-process.ts";
import { waitFor } from "../support/wait.ts";

const RBAC = "/apis/rbac.authorization.k8s.io/v1";

async function serviceAccountToken(client: KubeClient, namespace: string, name: string): Promise<string> {
  await client.create(`/api/v1/namespaces/${namespace}/serviceaccounts`, { apiVersion: "v1", kind: "ServiceAccount", metadata: { name } });
  const issued = await client.create<{ status: { token: string } }>(`/api/v1/namespaces/${namespace}/serviceaccounts/${name}/token`, {
    apiVersion: "authentication.k8s.io/v1",
    kind: "TokenRequest",
    spec: { expirationSeconds: 3600 },
  });
  return issued.status.token;
}

describe("serving: history and metrics only to callers the API server allows", () => {
  let client: KubeClient;
  let ns: string;
  let db: TestDatabase;
  let operator: OperatorProcess;
  let certDir: string;
  let base: string;
  let dispatcher: Agent;
  const tokens: Record<"reader" | "stranger" | "scraper", string> = { reader: "", stranger: "", scraper: "" };
  const scraperBinding = `aw-test-metrics-${process.pid}-${Date.now().toString(36)}`;

  beforeAll(async () => {
    client = kube();
    ns = await newNamespace(client, "serving");
    db = await createDatabase(inject("databaseUrl"), "serving-access");

    // A serving certificate for 127.0.0.1, as the chart's Secret or cert-manager would provide.
    certDir = mkdtempSync(join(tmpdir(), "aw-serving-"));
    execFileSync("openssl", ["req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-days", "1", "-subj", "/CN=agent-watchdog-metrics", "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", join(certDir, "tls.key"), "-out", join(certDir, "tls.crt")], { stdio: "ignore" });
    dispatcher = new Agent({ connect: { ca: readFileSync(join(certDir, "tls.crt")) } });

    // reader may get one run; stranger may get nothing; scraper may get /metrics.
    tokens.reader = await serviceAccountToken(client, ns, "reader");
    tokens.stranger = await serviceAccountToken(client, ns, "stranger");
    tokens.scraper = await serviceAccountToken(client, ns, "scraper");
    await client.create(`${RBAC}/namespaces/${ns}/roles`, { apiVersion: "rbac.authorization.k8s.io/v1", kind: "Role", metadata: { name: "read-one-run" }, rules: [{ apiGroups: ["watchdog.dev"], resources: ["agentruns"], resourceNames: ["readable"], verbs: ["get"] }] });
    await client.create(`${RBAC}/namespaces/${ns}/rolebindings`, { apiVersion: "rbac.authorization.k8s.io/v1", kind: "RoleBinding", metadata: { name: "reader" }, roleRef: { apiGroup: "rbac.authorization.k8s.io", kind: "Role", name: "read-one-run" }, subjects: [{ kind: "ServiceAccount", name: "reader", namespace: ns }] });
    await client.create(`${RBAC}/clusterroles`, { apiVersion: "rbac.authorization.k8s.io/v1", kind: "ClusterRole", metadata: { name: scraperBinding }, rules: [{ nonResourceURLs: ["/metrics"], verbs: ["get"] }] });
    await client.create(`${RBAC}/clusterrolebindings`, { apiVersion: "rbac.authorization.k8s.io/v1", kind: "ClusterRoleBinding", metadata: { name: scraperBinding }, roleRef: { apiGroup: "rbac.authorization.k8s.io", kind: "ClusterRole", name: scraperBinding }, subjects: [{ kind: "ServiceAccount", name: "scraper", namespace: ns }] });

    operator = await startOperator(ns, ["--metrics-secure", `--tls-cert-file=${join(certDir, "tls.crt")}`, `--tls-private-key-file=${join(certDir, "tls.key")}`], { DATABASE_URL: db.url });
    base = operator.metricsUrl.replace(/^http:/, "https:").replace(/\/metrics$/, "");
    await createRun(client, ns, runManifest("readable"));
    await createRun(client, ns, runManifest("secret"));
    await waitFor("both runs to start", async () => (await Promise.all(["readable", "secret"].map(async (n) => (await getRun(client, ns, n)).status?.phase))).every((p) => p === "Starting"), { timeoutMs: 60_000 });
  }, 180_000);

  afterAll(async () => {
    await operator?.stop();
    await dispatcher?.close();
    await client?.delete(`${RBAC}/clusterrolebindings/${scraperBinding}`).catch(() => undefined);
    await client?.delete(`${RBAC}/clusterroles/${scraperBinding}`).catch(() => undefined);
    if (client && ns) await deleteNamespace(client, ns);
    await db?.drop();
    if (certDir) rmSync(certDir, { recursive: true, force: true });
  });

  const get = (path: string, token?: string) => undiciFetch(`${base}${path}`, { dispatcher, headers: token ? { authorization: `Bearer ${token}` } : {} });

  it("serves a run's history only to a caller who may get that run", async () => {
    const anonymous = await get(`/history/${ns}/readable`);
    expect(anonymous.status).toBe(401);
    expect(anonymous.headers.get("www-authenticate")).toMatch(/^Bearer/);
    expect((await get(`/history/${ns}/readable`, "not-a-token")).status).toBe(401);

    const stranger = await get(`/history/${ns}/readable`, tokens.stranger);
    expect(stranger.status).toBe(403);
    expect(((await stranger.json()) as { error: string }).error).toContain(`system:serviceaccount:${ns}:stranger may not get agentruns.watchdog.dev "readable" in namespace "${ns}"`);
    expect((await get(`/history/${ns}/secret`, tokens.reader)).status).toBe(403);
    // Another namespace's run is refused the same way, whatever the ledger holds.
    expect((await get(`/history/kube-system/readable`, tokens.reader)).status).toBe(403);

    const history = await waitFor("the ledger to hold the readable run's start", async () => {
      const res = await get(`/history/${ns}/readable`, tokens.reader);
      if (res.status !== 200) return undefined;
      const body = (await res.json()) as { namespace: string; name: string; transitions: { phase: string }[] };
      return body.transitions.some((t) => t.phase === "Starting") ? body : undefined;
    }, { timeoutMs: 30_000 });
    expect(history).toMatchObject({ namespace: ns, name: "readable" });

    // A uid names one run of that name; the uid of a run the caller may not read is not found.
    const secretUid = (await getRun(client, ns, "secret")).metadata.uid as string;
    const readableUid = (await getRun(client, ns, "readable")).metadata.uid as string;
    expect((await get(`/history/${ns}/readable?uid=${readableUid}`, tokens.reader)).status).toBe(200);
    const crossed = await get(`/history/${ns}/readable?uid=${secretUid}`, tokens.reader);
    expect(crossed.status).toBe(404);
    expect(await crossed.text()).not.toContain('"secret"');
  });

  it("serves /metrics only to a caller who may get /metrics, with --metrics-secure", async () => {
    expect((await get("/metrics")).status).toBe(401);
    const reader = await get("/metrics", tokens.reader);
    expect(reader.status).toBe(403);
    expect(await reader.text()).toContain("may not get /metrics");
    const scraped = await waitFor("the scraper's binding to take effect", async () => {
      const res = await get("/metrics", tokens.scraper);
      return res.status === 200 ? res.text() : undefined;
    }, { timeoutMs: 20_000 });
    expect(scraped).toMatch(/^controller_runtime_reconcile_total\{/m);
  });

  it("speaks only TLS on that port, with the certificate it was given", async () => {
    await expect(fetch(`${base.replace(/^https:/, "http:")}/metrics`)).rejects.toThrow();
    await expect(fetch(`${base}/metrics`)).rejects.toThrow(); // not trusted without the CA
    expect((await get("/metrics", tokens.scraper)).status).toBe(200);
  });
});
