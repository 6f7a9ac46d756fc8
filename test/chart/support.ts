// Helpers of the chart tests: running the pinned helm and kubectl, rendering the chart, and
// clients that act with a ServiceAccount token instead of the admin certificate.
import { execFile } from "node:child_process";
import { randomBytes } from "node:crypto";
import { cpSync, existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { KubeConfig } from "@kubernetes/client-node";
import { afterAll, inject } from "vitest";
import { parseAllDocuments, parse as parseYaml, stringify } from "yaml";
import { ApiError, KubeClient, type Json } from "../../operator/kube/client.ts";
import { newNamespace } from "../support/cluster.ts";

export const root = fileURLToPath(new URL("../..", import.meta.url));
export const chartDir = join(root, "charts/agent-watchdog");

// Rendered values, kubeconfigs with tokens, and helm's caches (rather than the user's home).
// Each test file loads this module afresh, so this hook belongs to the file that imported it.
const scratch = mkdtempSync(join(tmpdir(), "aw-chart-test-"));
afterAll(() => rmSync(scratch, { recursive: true, force: true }));

/** A new directory, removed after the test file. */
export function tempDir(prefix: string): string {
  return mkdtempSync(join(scratch, `${prefix}-`));
}

export interface Result {
  code: number;
  stdout: string;
  stderr: string;
}

/** Runs a command to completion; never throws on a non-zero exit (tests look at the result). */
export function run(command: string, args: string[], options: { input?: string; env?: NodeJS.ProcessEnv; timeoutMs?: number } = {}): Promise<Result> {
  return new Promise((resolve, reject) => {
    const child = execFile(
      command,
      args,
      { env: { ...process.env, ...options.env }, maxBuffer: 64 * 1024 * 1024, timeout: options.timeoutMs ?? 240_000, encoding: "utf8" },
      (err, stdout, stderr) => {
        if (err && typeof err.code !== "number") reject(new Error(`${command} ${args.join(" ")}: ${err.message}\n${stderr}`));
        else resolve({ code: err ? (err.code as number) : 0, stdout, stderr });
      },
    );
    child.stdin?.end(options.input ?? "");
  });
}

const toolEnv = (): NodeJS.ProcessEnv => ({
  KUBECONFIG: inject("kubeconfig"),
  HELM_CACHE_HOME: join(scratch, "helm-cache"),
  HELM_CONFIG_HOME: join(scratch, "helm-config"),
  HELM_DATA_HOME: join(scratch, "helm-data"),
});

export const helm = (args: string[], input?: string) => run(inject("helm"), args, { env: toolEnv(), input });
export const kubectl = (args: string[], input?: string) => run(inject("kubectl"), args, { env: toolEnv(), input });

/** Fails with the command's output unless it succeeded. */
export function ok(result: Result, what: string): Result {
  if (result.code !== 0) throw new Error(`${what} failed (exit ${result.code}):\n${result.stderr}\n${result.stdout}`.trim());
  return result;
}

export function writeValues(values: Json): string {
  const file = join(scratch, `values-${randomBytes(4).toString("hex")}.yaml`);
  writeFileSync(file, stringify(values));
  return file;
}

export interface RenderOptions {
  chart?: string;
  release?: string;
  namespace?: string;
  /** Extra helm arguments, e.g. ["--set-string", "replicaCount=two"]. */
  args?: string[];
}

/** `helm template` with the given values; the raw result, for tests of failures. */
export function template(values: Json = {}, options: RenderOptions = {}): Promise<Result> {
  return helm([
    "template",
    options.release ?? "agent-watchdog",
    options.chart ?? chartDir,
    "--namespace",
    options.namespace ?? "agent-watchdog-system",
    "--values",
    writeValues(values),
    ...(options.args ?? []),
  ]);
}

/** The objects `helm template` renders. */
export async function render(values: Json = {}, options: RenderOptions = {}): Promise<Json[]> {
  const result = ok(await template(values, options), "helm template");
  return parseManifests(result.stdout);
}

export function parseManifests(text: string): Json[] {
  return parseAllDocuments(text)
    .map((doc) => {
      if (doc.errors.length > 0) throw new Error(`rendered YAML does not parse: ${doc.errors[0]!.message}`);
      return doc.toJS() as Json | null;
    })
    .filter((o): o is Json => o !== null && typeof o === "object");
}

export function find(objects: Json[], kind: string, name?: string): any {
  return objects.find((o) => o.kind === kind && (name === undefined || (o.metadata as Json).name === name));
}
export function all(objects: Json[], kind: string): any[] {
  return objects.filter((o) => o.kind === kind);
}

// Minimal stand-ins for the two files another part of the project provides, used only while they
// are missing, so the switches that include them can be tested. The real files win when present.
const STAND_INS: Record<string, string> = {
  "files/prometheus-rules.yaml": "groups:\n  - name: stand-in\n    rules:\n      - alert: StandIn\n        expr: vector(0) > 0\n",
  "files/dashboard.json": JSON.stringify({ title: "agent-watchdog (stand-in)", panels: [] }),
};
let featureChartDir: string | undefined;

/** The chart with files/prometheus-rules.yaml and files/dashboard.json present. */
export function featureChart(): string {
  if (featureChartDir) return featureChartDir;
  const missing = Object.keys(STAND_INS).filter((file) => !existsSync(join(chartDir, file)));
  if (missing.length === 0) return (featureChartDir = chartDir);
  const dir = tempDir("chart");
  cpSync(chartDir, dir, { recursive: true });
  for (const file of missing) writeFileSync(join(dir, file), STAND_INS[file]!);
  console.warn(`chart tests: using stand-ins for ${missing.join(", ")} (not in the chart yet)`);
  return (featureChartDir = dir);
}

export function chartFile(chart: string, file: string): string {
  return readFileSync(join(chart, file), "utf8");
}

/** Values that turn every optional feature on. */
export function allFeatures(watchNamespace: string): Json {
  return {
    watchNamespaces: [watchNamespace],
    ledger: { databaseUrlSecret: { name: "ledger-db", key: "url" } },
    metrics: {
      serviceMonitor: { enabled: true, labels: { release: "prometheus" } },
      prometheusRule: { enabled: true, labels: { release: "prometheus" } },
    },
    grafana: { dashboard: { enabled: true, annotations: { grafana_folder: "Agents" } } },
    networkPolicy: {
      enabled: true,
      ingressFrom: [{ namespaceSelector: { matchLabels: { "kubernetes.io/metadata.name": "monitoring" } } }],
      egress: {
        apiServer: { to: [{ ipBlock: { cidr: "10.0.0.1/32" } }] },
        postgresql: { to: [{ podSelector: { matchLabels: { app: "postgresql" } } }] },
      },
    },
    admission: { fencing: { enabled: true } },
    watchdog: {
      defaults: {
        heartbeatTimeout: "90s",
        maxRestarts: 0,
        backoff: { initial: "30s", factor: 1.5, max: "5m" },
        rateLimitBackoff: { initial: "1s", factor: 3, max: "2m" },
        maxConsecutiveToolFailures: 5,
        stall: { enabled: false, timeout: "1m", maxNudges: 2, message: "Are you still there?" },
        releaseAwaitingAfter: "20m",
        approvalTimeout: "24h",
      },
    },
  };
}

// --- the cluster ------------------------------------------------------------------------------

export const RESTRICTED = {
  "pod-security.kubernetes.io/enforce": "restricted",
  "pod-security.kubernetes.io/enforce-version": "latest",
  // Workloads (Deployments) are only warned about, never refused: the warning is what shows that
  // their pod templates would be refused.
  "pod-security.kubernetes.io/warn": "restricted",
  "pod-security.kubernetes.io/warn-version": "latest",
};

/** A namespace that enforces the restricted Pod Security Standard, with its default ServiceAccount. */
export function restrictedNamespace(client: KubeClient, prefix: string): Promise<string> {
  return newNamespace(client, prefix, { "watchdog.dev/test": "chart", ...RESTRICTED });
}

interface KubeconfigFile {
  clusters: { name: string; cluster: { server: string; "certificate-authority-data"?: string } }[];
}

export function testCluster(): { server: string; caData?: string } {
  const file = parseYaml(readFileSync(inject("kubeconfig"), "utf8")) as KubeconfigFile;
  const cluster = file.clusters[0]!.cluster;
  return { server: cluster.server, caData: cluster["certificate-authority-data"] };
}

/** A client of the test cluster that authenticates with a bearer token only. */
export function tokenClient(token: string): KubeClient {
  const { server, caData } = testCluster();
  const kc = new KubeConfig();
  kc.loadFromOptions({
    clusters: [{ name: "test", server, caData, skipTLSVerify: false }],
    users: [{ name: "token", token }],
    contexts: [{ name: "test", cluster: "test", user: "token" }],
    currentContext: "test",
  });
  return new KubeClient(kc);
}

/** A kubeconfig file for the same, for kubectl and for operator processes. */
export function tokenKubeconfig(token: string): string {
  const { server, caData } = testCluster();
  const file = join(scratch, `kubeconfig-${randomBytes(4).toString("hex")}`);
  writeFileSync(
    file,
    stringify({
      apiVersion: "v1",
      kind: "Config",
      clusters: [{ name: "test", cluster: { server, "certificate-authority-data": caData } }],
      users: [{ name: "token", user: { token } }],
      contexts: [{ name: "test", context: { cluster: "test", user: "token" } }],
      "current-context": "test",
    }),
    { mode: 0o600 },
  );
  return file;
}

/** A token of the ServiceAccount, bound to the pod when one is given (what the kubelet mounts). */
export async function requestToken(client: KubeClient, namespace: string, serviceAccount: string, pod?: { name: string; uid: string }): Promise<string> {
  const review = await client.create<{ status: { token: string } }>(`/api/v1/namespaces/${namespace}/serviceaccounts/${serviceAccount}/token`, {
    apiVersion: "authentication.k8s.io/v1",
    kind: "TokenRequest",
    spec: {
      expirationSeconds: 3600,
      ...(pod ? { boundObjectRef: { apiVersion: "v1", kind: "Pod", name: pod.name, uid: pod.uid } } : {}),
    },
  });
  return review.status.token;
}

/** The API error a request fails with; fails the test when it succeeds instead. */
export async function refusal(request: Promise<unknown>): Promise<ApiError> {
  try {
    await request;
  } catch (err) {
    if (err instanceof ApiError) return err;
    throw err;
  }
  throw new Error("the request was accepted, but it must be refused");
}

/** Rules of `kubectl auth can-i --list`, one "resource verb" or "url verb" string each. */
export function parseCanIList(table: string): Set<string> {
  const lines = table.split("\n").filter((l) => l.trim() !== "");
  const header = lines[0] ?? "";
  const columns = ["Resources", "Non-Resource URLs", "Resource Names", "Verbs"].map((c) => header.indexOf(c));
  if (columns.some((c) => c < 0)) throw new Error(`unexpected kubectl auth can-i --list output:\n${table}`);
  const rules = new Set<string>();
  for (const line of lines.slice(1)) {
    const cell = (i: number) => line.slice(columns[i], i + 1 < columns.length ? columns[i + 1] : undefined).trim();
    const subject = cell(0) || cell(1);
    const names = cell(2) === "[]" ? "" : ` ${cell(2)}`;
    for (const verb of cell(3).replace(/^\[|\]$/g, "").split(/\s+/).filter(Boolean)) rules.add(`${subject}${names} ${verb}`);
  }
  return rules;
}
