// What the benches share: the local control plane, a fresh namespace, the operator as a child
// process under an identity of its own (so the API server's audit log can tell its requests from
// the Job controller's), percentiles, and a bounded pool of concurrent requests.
import { execFileSync, spawn, type ChildProcess } from "node:child_process";
import { randomBytes } from "node:crypto";
import { closeSync, cpSync, openSync, readFileSync, readSync, rmSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { KubeConfig } from "@kubernetes/client-node";
import { freePort } from "../../harness/free-port.ts";
import { LABELS } from "../../operator/api/annotations.ts";
import { isAlreadyExists, KubeClient, paths, type Json } from "../../operator/kube/client.ts";

export const root = fileURLToPath(new URL("../..", import.meta.url));

export const log = (bench: string, message: string) => process.stderr.write(`[${bench} ${new Date().toISOString().slice(11, 19)}] ${message}\n`);

/** Runs `fn` over items with at most `limit` in flight. */
export async function pool<T, R>(items: readonly T[], limit: number, fn: (item: T, index: number) => Promise<R>): Promise<R[]> {
  const results: R[] = new Array(items.length);
  let next = 0;
  await Promise.all(
    Array.from({ length: Math.min(limit, items.length) }, async () => {
      while (next < items.length) {
        const i = next++;
        results[i] = await fn(items[i] as T, i);
      }
    }),
  );
  return results;
}

/**
 * Keeps a watch going until `stopped()`: however it ends (an error, or the server closing it), it
 * starts again, a second later if it cannot start. A watch with no resourceVersion begins with
 * every object there is, so only what came and went in between is missed. (A clean end was not
 * restarted before; one run of bench:vs-job waited five minutes for pods the operator had made
 * and killed, and failed.)
 */
export async function keepWatching(watch: (onEnd: () => void) => Promise<AbortController>, stopped: () => boolean, onStart: (abort: AbortController) => void): Promise<void> {
  const again = (): void => {
    if (stopped()) return;
    watch(again).then(onStart, () => setTimeout(again, 1000));
  };
  onStart(await watch(again));
}

export async function until(description: string, probe: () => boolean | Promise<boolean>, timeoutMs = 300_000, everyMs = 200): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await probe())) {
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${description}`);
    await new Promise((r) => setTimeout(r, everyMs));
  }
}

/**
 * Waits until count() reaches target, failing only when the count has not grown for stallMs: how
 * long thousands of objects take to come depends on the machine (30,000 pods on kwok came at 7 a
 * second on two cores once 20,000 existed), so a total limit fails a slow machine that is still
 * progressing, while a stall is what a bench must not wait out.
 */
export async function untilCounted(description: string, count: () => number, target: number, stallMs = 300_000, everyMs = 1000): Promise<void> {
  let best = count();
  let grewAt = Date.now();
  while (best < target) {
    await new Promise((r) => setTimeout(r, everyMs));
    const now = count();
    if (now > best) [best, grewAt] = [now, Date.now()];
    else if (Date.now() - grewAt > stallMs) throw new Error(`waiting for ${description}: stuck at ${best} of ${target} for ${stallMs} ms`);
  }
}

/** The nearest-rank percentile of an ascending list. */
export const percentile = (sorted: readonly number[], p: number): number =>
  sorted.length ? (sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1))] as number) : NaN;

export function summary(values: readonly number[]): { n: number; p50: number; p99: number; max: number } {
  const sorted = [...values].sort((a, b) => a - b);
  return { n: sorted.length, p50: percentile(sorted, 50), p99: percentile(sorted, 99), max: sorted.at(-1) ?? NaN };
}

export const round = (value: number, digits = 2) => Math.round(value * 10 ** digits) / 10 ** digits;

/** Starts (or finds) the local control plane with the given node kind; returns its kubeconfig path. */
export function controlPlaneUp(...flags: string[]): string {
  const up = execFileSync("bash", [`${root}hack/control-plane.sh`, "up", ...flags], { encoding: "utf8", stdio: ["ignore", "pipe", "inherit"] });
  const kubeconfig = /export KUBECONFIG=(\S+)/.exec(up)?.[1];
  if (!kubeconfig) throw new Error("control-plane.sh up printed no KUBECONFIG");
  execFileSync("kubectl", ["apply", "--server-side", "--force-conflicts", "-f", `${root}crds/`], { env: { ...process.env, KUBECONFIG: kubeconfig }, stdio: "ignore" });
  return kubeconfig;
}

export function clientFor(kubeconfig: string): KubeClient {
  const kc = new KubeConfig();
  kc.loadFromFile(kubeconfig);
  return new KubeClient(kc);
}

/**
 * A new namespace `<prefix>-<random>`, once earlier ones of the prefix are gone: their objects'
 * deletion keeps the API server busy for a while, which would be measured as ours.
 */
export async function freshNamespace(client: KubeClient, prefix: string, bench: string): Promise<string> {
  const earlier = async () =>
    (await client.get<{ items: { metadata: { name: string } }[] }>("/api/v1/namespaces")).items.map((n) => n.metadata.name).filter((n) => n.startsWith(`${prefix}-`));
  const pending = await earlier();
  if (pending.length > 0) {
    log(bench, `waiting for earlier namespaces to be deleted: ${pending.join(", ")}`);
    // No operator of theirs runs any more (benches run one at a time): their runs' finalizers go too.
    for (const ns of pending) await deleteNamespaceWithoutOperator(client, ns);
    await until("earlier bench namespaces deleted", async () => (await earlier()).length === 0, 900_000, 1000);
  }
  const ns = `${prefix}-${randomBytes(3).toString("hex")}`;
  await client.create("/api/v1/namespaces", { apiVersion: "v1", kind: "Namespace", metadata: { name: ns } });
  await until("the namespace's default ServiceAccount", () => client.get(`/api/v1/namespaces/${ns}/serviceaccounts/default`).then(() => true, () => false));
  return ns;
}

/**
 * Deletes a bench's namespace once no operator is left: its runs carry the operator's finalizer,
 * which only an operator takes off, so they are dropped here; otherwise the namespace stays
 * Terminating for ever and the bench's next run waits for it. Resolves to how many were dropped.
 */
export async function deleteNamespaceWithoutOperator(client: KubeClient, ns: string, concurrency = 16): Promise<number> {
  await client.delete(`/api/v1/namespaces/${ns}`).catch(() => {});
  const left = await client.get<{ items: Json[] }>(paths.runs(ns)).catch(() => ({ items: [] as Json[] }));
  const finalized = left.items.filter((r) => ((r.metadata as { finalizers?: string[] }).finalizers ?? []).length > 0).map((r) => (r.metadata as { name: string }).name);
  await pool(finalized, concurrency, (name) => client.mergePatch(paths.run(ns, name), { metadata: { finalizers: null } }).catch(() => {}));
  return finalized.length;
}

/** The namespace whose service accounts the control plane's audit policy records. */
export const AUDITED_NAMESPACE = "agent-watchdog-bench";
const OPERATOR_ACCOUNT = "operator";
export const OPERATOR_USER = `system:serviceaccount:${AUDITED_NAMESPACE}:${OPERATOR_ACCOUNT}`;
export const JOB_CONTROLLER_USER = "system:serviceaccount:kube-system:job-controller";

/** The audit log's user name of service account `account` of the audited namespace. */
export const auditedUser = (account: string) => `system:serviceaccount:${AUDITED_NAMESPACE}:${account}`;

/**
 * A kubeconfig for a cluster-admin service account of the audited namespace (`operator`, or one
 * per replica when a test must tell replicas apart in the audit log).
 */
export async function operatorKubeconfig(client: KubeClient, adminKubeconfig: string, account = OPERATOR_ACCOUNT, namespace = AUDITED_NAMESPACE): Promise<string> {
  await ensure(client, "/api/v1/namespaces", { apiVersion: "v1", kind: "Namespace", metadata: { name: namespace } });
  await ensure(client, `/api/v1/namespaces/${namespace}/serviceaccounts`, { apiVersion: "v1", kind: "ServiceAccount", metadata: { name: account } });
  await ensure(client, "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings", {
    apiVersion: "rbac.authorization.k8s.io/v1",
    kind: "ClusterRoleBinding",
    metadata: { name: `${namespace}-${account}` },
    roleRef: { apiGroup: "rbac.authorization.k8s.io", kind: "ClusterRole", name: "cluster-admin" },
    subjects: [{ kind: "ServiceAccount", name: account, namespace }],
  });
  const path = join(tmpdir(), `agent-watchdog-bench-${randomBytes(4).toString("hex")}.kubeconfig`);
  writeFileSync(path, (await serviceAccountConfig(client, adminKubeconfig, namespace, account)).exportConfig(), { mode: 0o600 });
  return path;
}

/** Creates the object unless one of its name exists. */
async function ensure(client: KubeClient, path: string, object: unknown): Promise<void> {
  try {
    await client.create(path, object);
  } catch (err) {
    if (!isAlreadyExists(err)) throw err;
  }
}

/** A token of a day of service account `account` of `namespace` (an existing one), in a client configuration (tokenConfig). */
async function serviceAccountConfig(client: KubeClient, adminKubeconfig: string, namespace: string, account: string): Promise<KubeConfig> {
  const request = await client.create<{ status: { token: string } }>(`/api/v1/namespaces/${namespace}/serviceaccounts/${account}/token`, {
    apiVersion: "authentication.k8s.io/v1",
    kind: "TokenRequest",
    spec: { expirationSeconds: 24 * 3600 },
  });
  return tokenConfig(adminKubeconfig, account, request.status.token);
}

/**
 * A client configuration that presents `token` to the admin kubeconfig's cluster: what a pod of
 * that service account would present, so that the API server's authorization and its API Priority
 * and Fairness treat the requests as they would in a cluster.
 */
export function tokenConfig(adminKubeconfig: string, user: string, token: string): KubeConfig {
  const admin = new KubeConfig();
  admin.loadFromFile(adminKubeconfig);
  const cluster = admin.getCurrentCluster();
  if (!cluster) throw new Error("no current cluster in the kubeconfig");
  const kc = new KubeConfig();
  kc.loadFromOptions({
    clusters: [{ name: "bench", server: cluster.server, caFile: cluster.caFile, caData: cluster.caData, skipTLSVerify: false }],
    users: [{ name: user, token }],
    contexts: [{ name: "bench", cluster: "bench", user }],
    currentContext: "bench",
  });
  return kc;
}

export interface OperatorChild {
  child: ChildProcess;
  /** When the process was spawned (ms since epoch). */
  spawnedAt: number;
  metrics(): Promise<string>;
  /** Whether /readyz answers 200: every informer cache has listed what exists. */
  ready(): Promise<boolean>;
  rssBytes(): number;
  stop(): Promise<void>;
}

/** The benches' option to run the operator from its TypeScript sources rather than as the image does. */
export const FROM_SOURCES_OPTION = { "from-sources": { type: "boolean", default: false } } as const;

/**
 * The operator's entry point. By default its sources as JavaScript, made here with the image's own
 * translation (hack/image/to-javascript.mjs) under .cache/, so that memory figures are those of
 * what the image runs: loading TypeScript costs an idle operator about 30 MiB. The copy sits in the
 * clone so that it finds the clone's node_modules.
 */
export function operatorMain(fromSources: boolean): string {
  if (fromSources) return `${root}operator/cli/operator.ts`;
  const out = join(root, ".cache", "bench-operator");
  rmSync(out, { recursive: true, force: true });
  cpSync(join(root, "operator"), join(out, "operator"), { recursive: true, filter: (path) => !path.includes(`${join("console", "ui")}`) });
  execFileSync(process.execPath, ["--no-warnings", join(root, "hack", "image", "to-javascript.mjs"), join(out, "operator")], { stdio: "inherit" });
  return join(out, "operator", "cli", "operator.js");
}

/** Starts the operator (`main`, see operatorMain) for the namespaces; resolves once its metrics answer. */
export async function startOperator(
  main: string,
  kubeconfig: string,
  namespaces: string[],
  args: string[] = [],
  nodeArgs: string[] = [],
  env: Record<string, string> = {},
): Promise<OperatorChild> {
  return spawnOperator(main, kubeconfig, namespaces, { args, nodeArgs, env: { ...env, POD_NAME: undefined }, logLevel: "warn", what: "the operator" });
}

interface SpawnOptions {
  args: string[];
  nodeArgs: string[];
  env: Record<string, string | undefined>;
  logLevel: "warn" | "info";
  /** Its name in errors. */
  what: string;
  /** Called with each line the process writes to stdout (unread when absent). */
  onStdout?: (text: string) => void;
}

/** The one way the benches start an operator process: on free loopback ports, waited on until its metrics answer. */
async function spawnOperator(main: string, kubeconfig: string, namespaces: string[], options: SpawnOptions): Promise<OperatorChild & { exited: Promise<void> }> {
  const metricsPort = await freePort();
  const healthPort = await freePort();
  const spawnedAt = Date.now();
  const child = spawn(
    process.execPath,
    [
      ...options.nodeArgs,
      main,
      `--namespaces=${namespaces.join(",")}`,
      `--metrics-bind-address=127.0.0.1:${metricsPort}`,
      `--health-probe-bind-address=127.0.0.1:${healthPort}`,
      `--log-level=${options.logLevel}`,
      // The benches measure the operator's own cost on kwok: no per-run identity (a bench that
      // wants one passes the flag, which wins).
      "--sandbox-service-account=none",
      ...options.args,
    ],
    { env: { ...process.env, ...options.env, KUBECONFIG: kubeconfig }, stdio: ["ignore", options.onStdout ? "pipe" : "ignore", "inherit"] },
  );
  if (options.onStdout) {
    child.stdout?.setEncoding("utf8");
    child.stdout?.on("data", options.onStdout);
  }
  const exited = new Promise<void>((resolve) => child.once("exit", () => resolve()));
  const metrics = () => fetch(`http://127.0.0.1:${metricsPort}/metrics`).then((r) => r.text());
  await until(
    `${options.what}'s metrics`,
    () => {
      if (child.exitCode !== null) throw new Error(`${options.what} exited with ${child.exitCode}`);
      return metrics().then(() => true, () => false);
    },
    60_000,
  );
  return {
    child,
    spawnedAt,
    exited,
    metrics,
    ready: () => fetch(`http://127.0.0.1:${healthPort}/readyz`).then((r) => r.ok, () => false),
    rssBytes: () => rssOf(child.pid),
    async stop() {
      if (child.exitCode === null && child.signalCode === null) child.kill("SIGTERM");
      await exited;
    },
  };
}

/** A process's resident set size from /proc, in bytes (NaN when it cannot be read). */
export function rssOf(pid: number | undefined): number {
  try {
    return Number(/VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, "utf8"))?.[1]) * 1024;
  } catch {
    return NaN;
  }
}

/** A process's CPU time, user and system, in seconds, from /proc (NaN when it cannot be read). */
export function cpuSecondsOf(pid: number | undefined): number {
  try {
    // Fields after the command (which may hold spaces), 1-based: utime is 14, stime 15, in ticks of 1/100 s.
    const fields = readFileSync(`/proc/${pid}/stat`, "utf8").replace(/^.*\) /s, "").split(" ");
    return (Number(fields[11]) + Number(fields[12])) / 100;
  } catch {
    return NaN;
  }
}

/** The pid of one of the local control plane's components (kube-apiserver, etcd, ...), from its state ("PID PATH"). */
export function componentPid(kubeconfig: string, component: string): number | undefined {
  try {
    return Number(readFileSync(join(kubeconfig, "..", "pids", component), "utf8").trim().split(/\s+/)[0]);
  } catch {
    return undefined;
  }
}

/** The value of one sample of a Prometheus text exposition (the first line that starts with it). */
export function sample(metrics: string, prefix: string): number {
  const line = metrics.split("\n").find((l) => l.startsWith(prefix));
  return line ? Number(line.slice(line.lastIndexOf(" ") + 1)) : NaN;
}

/** The operator's own API writes so far, from its rest_client_requests_total. */
export function operatorWrites(metrics: string): number {
  let total = 0;
  for (const line of metrics.split("\n")) {
    if (line.startsWith("rest_client_requests_total{") && /method="(POST|PUT|PATCH|DELETE)"/.test(line)) total += Number(line.slice(line.lastIndexOf(" ") + 1));
  }
  return total;
}

export interface AuditedRequest {
  user: string;
  userAgent: string;
  verb: string;
  /** resource[/subresource] */
  resource: string;
  namespace: string;
  /** The object's name, when the request named one. */
  name: string;
  /** When the API server received it (ms since epoch). */
  at: number;
  code: number;
}

/**
 * Reads the control plane's audit log from where it stood when created: each completed request
 * of an audited identity, once.
 */
export class AuditLog {
  private offset: number;
  private readonly path: string;
  private rest = "";

  constructor(adminKubeconfig: string) {
    this.path = join(adminKubeconfig, "..", "logs", "audit.log");
    try {
      this.offset = statSync(this.path).size;
    } catch {
      throw new Error(`no audit log at ${this.path}: restart the control plane (hack/control-plane.sh down, then up) so that its API server writes one`);
    }
  }

  /** The requests logged since the last call. */
  read(): AuditedRequest[] {
    const size = statSync(this.path).size;
    if (size < this.offset) this.offset = 0; // rotated
    if (size === this.offset) return [];
    const fd = openSync(this.path, "r");
    const buffer = Buffer.alloc(size - this.offset);
    try {
      readSync(fd, buffer, 0, buffer.length, this.offset);
    } finally {
      closeSync(fd);
    }
    this.offset = size;
    const text = this.rest + buffer.toString("utf8");
    const lines = text.split("\n");
    this.rest = lines.pop() ?? "";
    const out: AuditedRequest[] = [];
    for (const line of lines) {
      if (!line) continue;
      const event = JSON.parse(line) as {
        stage: string;
        verb: string;
        user: { username: string };
        userAgent?: string;
        objectRef?: { resource?: string; subresource?: string; namespace?: string; name?: string };
        requestReceivedTimestamp: string;
        responseStatus?: { code?: number };
      };
      if (event.stage !== "ResponseComplete" && event.stage !== "Panic") continue;
      const ref = event.objectRef ?? {};
      out.push({
        user: event.user.username,
        userAgent: event.userAgent ?? "",
        verb: event.verb,
        resource: `${ref.resource ?? ""}${ref.subresource ? `/${ref.subresource}` : ""}`,
        namespace: ref.namespace ?? "",
        name: ref.name ?? "",
        at: Date.parse(event.requestReceivedTimestamp),
        code: event.responseStatus?.code ?? 0,
      });
    }
    return out;
  }
}

/** "verb resource" -> count, most frequent first. */
export function breakdown(requests: readonly AuditedRequest[]): Record<string, number> {
  const counts = new Map<string, number>();
  for (const r of requests) counts.set(`${r.verb} ${r.resource}`, (counts.get(`${r.verb} ${r.resource}`) ?? 0) + 1);
  return Object.fromEntries([...counts].sort((a, b) => b[1] - a[1]));
}

/** Cumulative bucket counts (le -> count) of a histogram, summed over the series `match` accepts. */
export function histogram(metrics: string, name: string, match: (labels: string) => boolean = () => true): Map<number, number> {
  const buckets = new Map<number, number>();
  const prefix = `${name}_bucket{`;
  for (const line of metrics.split("\n")) {
    if (!line.startsWith(prefix)) continue;
    const labels = line.slice(prefix.length, line.indexOf("}"));
    if (!match(labels)) continue;
    const le = /le="([^"]+)"/.exec(labels)?.[1];
    if (le === undefined) continue;
    const bound = le === "+Inf" ? Infinity : Number(le);
    buckets.set(bound, (buckets.get(bound) ?? 0) + Number(line.slice(line.lastIndexOf(" ") + 1)));
  }
  return buckets;
}

/** What a histogram counted between two scrapes. */
export function since(after: Map<number, number>, before: Map<number, number>): Map<number, number> {
  return new Map([...after].map(([le, count]) => [le, count - (before.get(le) ?? 0)]));
}

/** A quantile of cumulative buckets, interpolated within a bucket as histogram_quantile does. */
export function quantile(buckets: Map<number, number>, q: number): number {
  const sorted = [...buckets].sort((a, b) => a[0] - b[0]);
  const total = sorted.at(-1)?.[1] ?? 0;
  if (total === 0) return NaN;
  const rank = q * total;
  let lowerBound = 0;
  let lowerCount = 0;
  for (const [le, count] of sorted) {
    if (count >= rank) {
      if (le === Infinity) return lowerBound;
      return lowerBound + ((le - lowerBound) * (rank - lowerCount)) / Math.max(1, count - lowerCount);
    }
    lowerBound = le;
    lowerCount = count;
  }
  return lowerBound;
}

/** A bench run: one agent container kwok "runs" (nothing runs), with the watchdog settings given. */
export function benchRun(name: string, watchdog: Json): Json {
  return {
    apiVersion: "watchdog.dev/v1alpha1",
    kind: "AgentRun",
    metadata: { name },
    spec: { template: { spec: { containers: [{ name: "agent", image: "agent-watchdog:bench" }] } }, watchdog },
  };
}

/** One line of an operator's log (pino's JSON): when it was written, its level, message and fields. */
export interface LogLine {
  at: number;
  level: string;
  msg: string;
  fields: Record<string, unknown>;
}

export interface ReplicaChild extends OperatorChild {
  /** Its POD_NAME: the identity it holds Leases under. */
  identity: string;
  /** Its log lines (info and above), in the order written. */
  logs: LogLine[];
  /** Resolves once the process has exited. */
  exited: Promise<void>;
}

/**
 * Starts one replica of the operator (`main`, see operatorMain) for the namespaces, as
 * startOperator does, but under the identity `identity` (POD_NAME, as the chart's Deployment sets
 * it) and logging at info level, whose lines it keeps; resolves once its metrics answer.
 */
export async function startReplica(main: string, kubeconfig: string, namespaces: string[], identity: string, args: string[] = [], nodeArgs: string[] = []): Promise<ReplicaChild> {
  const logs: LogLine[] = [];
  let rest = "";
  const onStdout = (chunk: string) => {
    const lines = (rest + chunk).split("\n");
    rest = lines.pop() ?? "";
    for (const line of lines) {
      try {
        const fields = JSON.parse(line) as Record<string, unknown>;
        logs.push({ at: Date.parse(String(fields.time)), level: String(fields.level), msg: String(fields.msg), fields });
      } catch {
        // Not a log line of the operator's (nothing else writes to its stdout).
      }
    }
  };
  const replica = await spawnOperator(main, kubeconfig, namespaces, { args, nodeArgs, env: { POD_NAME: identity }, logLevel: "info", what: `replica ${identity}`, onStdout });
  return { ...replica, identity, logs };
}

/**
 * One line of the audit log, read as AuditLog reads it: the request, when the line records one
 * completed (or ended in a panic); undefined for any other stage, and for a line that is not JSON.
 */
export function auditedRequest(line: string): AuditedRequest | undefined {
  let event: {
    stage?: string;
    verb?: string;
    user?: { username?: string };
    userAgent?: string;
    objectRef?: { resource?: string; subresource?: string; namespace?: string; name?: string };
    requestReceivedTimestamp?: string;
    responseStatus?: { code?: number };
  };
  try {
    event = JSON.parse(line) as typeof event;
  } catch {
    return undefined;
  }
  if (event.stage !== "ResponseComplete" && event.stage !== "Panic") return undefined;
  const ref = event.objectRef ?? {};
  return {
    user: event.user?.username ?? "",
    userAgent: event.userAgent ?? "",
    verb: event.verb ?? "",
    resource: `${ref.resource ?? ""}${ref.subresource ? `/${ref.subresource}` : ""}`,
    namespace: ref.namespace ?? "",
    name: ref.name ?? "",
    at: Date.parse(event.requestReceivedTimestamp ?? ""),
    code: event.responseStatus?.code ?? 0,
  };
}

/** Pods of the namespace the bench has seen running, by run name. */
export class PodCensus {
  readonly running = new Set<string>();
  private abort?: AbortController;
  private closed = false;
  private readonly client: KubeClient;
  private readonly ns: string;
  constructor(client: KubeClient, ns: string) {
    this.client = client;
    this.ns = ns;
  }
  async start(): Promise<void> {
    await keepWatching((onEnd) => this.client.watch(
      paths.pods(this.ns),
      {},
      (type, pod) => {
        const meta = pod.metadata as { labels?: Record<string, string>; deletionTimestamp?: string };
        const run = meta.labels?.[LABELS.run];
        if (!run) return;
        const phase = (pod.status as { phase?: string } | undefined)?.phase;
        if (type !== "DELETED" && !meta.deletionTimestamp && phase === "Running") this.running.add(run);
        else this.running.delete(run);
      },
      onEnd,
      600_000,
    ), () => this.closed, (abort) => (this.abort = abort));
  }
  stop(): void {
    this.closed = true;
    this.abort?.abort();
  }
}

/** One heartbeat of attempt 1, as a sandbox writes it. */
export async function heartbeat(client: KubeClient, ns: string, name: string): Promise<void> {
  await client.mergePatch(paths.runStatus(ns, name), {
    status: { heartbeat: { time: new Date().toISOString(), attempt: 1, state: "Planning", activity: { time: new Date().toISOString(), kind: "text" } } },
  });
}
