// Where the soak runs: the real node (sandboxes in real pods of the project image) or the kwok
// node (the local sandbox runner plays the kubelet, running the example agent as processes). In
// both, the operator replicas (two by default) run as local processes with leader election, or
// sharing the runs' shards, each reaching the API server through a TCP proxy of its own that the
// soak can cut or stall, as a ServiceAccount of its own, so that the API server's audit log tells
// their writes apart.
import { spawn, type ChildProcess } from "node:child_process";
import { closeSync, mkdirSync, openSync, readFileSync, rmSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { pino } from "pino";
import { Outbox, serveOutbox } from "../../operator/example-agent/outbox.ts";
import { paths, type KubeClient } from "../../operator/kube/client.ts";
import { RESTRICTED_NAMESPACE, applyCrds, clientFor, exported, freshNamespace, pollUntil, runScript, scriptOk } from "../../harness/cluster.ts";
import { nodeExpose, realNodeStateRoot, realNodeUp } from "../../harness/real-node.ts";
import { EXAMPLE_ENV } from "../../harness/scenario.ts";
import { freePort } from "../../harness/free-port.ts";
import { startApiProxy, type TcpProxy } from "../../harness/tcp-proxy.ts";
import { SandboxRunner, stateRoot } from "../../harness/sandbox-runner.ts";
import { LEASE_LABELS, leaseGroup, shardLeaseName } from "../../operator/sharding/shard-leases.ts";
import { AUDITED_NAMESPACE, auditedUser, operatorKubeconfig } from "../bench/lib.ts";
import { auditLogOf } from "./audit.ts";
import { ContainerdView } from "./node-view.ts";
import type { NodeEvents, NodeView, WatchedLeases } from "./observer.ts";
import type { OperatorExit, ReplicaRecord, ShardingRecord } from "./record.ts";

const root = fileURLToPath(new URL("../..", import.meta.url));

export const LEASE_NAME = "agent-watchdog-soak";

export interface Replica {
  name: string;
  /** The identity it holds the Lease under (new on every start). */
  identity: string;
  /** The audit log's user name of its ServiceAccount (the same on every start). */
  user: string;
  child: ChildProcess;
  proxy: TcpProxy;
  metricsUrl: string;
  /** Set when the soak signalled it, so that its exit is not counted as a crash. */
  signalledBySoak: boolean;
}

export interface SoakWorld {
  node: "kubelet" | "kwok";
  /** AGENT_WATCHDOG_STATE of the cluster, for control-plane.sh. */
  state: string;
  kubeconfig: string;
  client: KubeClient;
  namespace: string;
  databaseUrl: string;
  outboxDir: string;
  /** The sandbox container's image and environment. */
  image: string;
  sandboxEnv: Record<string, string>;
  nodeView: NodeView;
  /** containerd's task events, on the real node. */
  nodeEvents?: NodeEvents;
  /** Pids of sandbox processes (the agent containers' or the runner's), by pod name. */
  sandboxPids(): Promise<Map<string, number>>;
  replicas: Map<string, Replica>;
  /** Every process of every replica the soak started, in order. */
  replicaStarts: ReplicaRecord[];
  operatorExits: OperatorExit[];
  /** How the replicas share the runs, and the Leases the observer watches for it. */
  sharding: ShardingRecord;
  leases: WatchedLeases;
  /** The control plane's audit log, and the replicas' users in it. */
  auditLog: string;
  users: string[];
  /** Starts every replica, one after another, each once the one before is live. */
  startReplicas(): Promise<void>;
  startReplica(name: string): Promise<Replica>;
  teardown(): Promise<void>;
}

export interface WorldOptions {
  node: "kubelet" | "kwok";
  namespace: string;
  dir: string;
  log: (line: string) => void;
  /** How many operator replicas run at once (default 2). */
  replicas?: number;
  /** Shards of the runs (default 1: one leader supervises every run). */
  shards?: number;
}

/** The names of the replicas: a, b, c, ... */
export const replicaNames = (count: number) => Array.from({ length: count }, (_, i) => String.fromCharCode(97 + i));
/** The ServiceAccount (of the audited namespace) a replica runs as. */
const accountOf = (name: string) => `soak-${name}`;

async function postgresUp(): Promise<string> {
  const url = exported(await scriptOk("postgres.sh", ["up"]), "DATABASE_URL");
  if (!url) throw new Error("hack/postgres.sh up printed no DATABASE_URL");
  return url;
}

/** Builds what the soak needs; startReplicas() then starts the operator replicas. */
export async function soakWorld(options: WorldOptions): Promise<SoakWorld> {
  const { namespace, dir, log } = options;
  const names = replicaNames(options.replicas ?? 2);
  const shards = options.shards ?? 1;
  mkdirSync(dir, { recursive: true });
  const cleanups: (() => Promise<unknown>)[] = [];
  let state: string;
  let kubeconfig: string;
  let image = "agent-watchdog:0.1.0";
  let nodeView: NodeView;
  let nodeEvents: NodeEvents | undefined;
  let sandboxPids: SoakWorld["sandboxPids"];
  const outboxDir = join(dir, "outbox");
  const sandboxEnv: Record<string, string> = { ...EXAMPLE_ENV, EXAMPLE_STEPS: "8", EXAMPLE_STEP_DELAY_MS: "2000" };
  if (options.node === "kubelet") {
    log("the real node (kubelet, containerd, runc) and the project image");
    const node = await realNodeUp(realNodeStateRoot());
    state = node.state;
    kubeconfig = node.kubeconfig;
    image = node.image;
    const containerd = new ContainerdView(join(state, "control-plane/node/containerd/containerd.sock"));
    nodeView = () => containerd.running();
    nodeEvents = containerd;
    sandboxPids = async () => new Map((await containerd.running()).filter((c) => c.namespace === namespace).map((c) => [c.pod, c.pid]));
  } else {
    log("the control plane with a kwok node");
    state = stateRoot();
    const up = await runScript("control-plane.sh", ["up", "--nodes"], { quiet: true });
    if (up.code !== 0) throw new Error("hack/control-plane.sh up --nodes failed");
    kubeconfig = exported(up.stdout, "KUBECONFIG") ?? "";
    const logDir = join(dir, "sandboxes");
    mkdirSync(logDir, { recursive: true });
    const runner = new SandboxRunner({
      kubeconfig,
      namespaces: [namespace],
      env: { ...sandboxEnv, EXAMPLE_OUTBOX_DIR: outboxDir },
      logDir,
      log: pino({ name: "sandbox-runner", level: "info" }, pino.destination({ dest: join(dir, "runner.log"), sync: false })),
    });
    nodeView = async () => runner.running().map((p) => ({ pod: p.pod, namespace: p.namespace }));
    sandboxPids = async () => new Map(runner.running().filter((p) => p.namespace === namespace).map((p) => [p.pod, p.pid]));
    cleanups.push(() => runner.stop());
    await runner.start();
  }
  const client = clientFor(kubeconfig);
  await applyCrds(client);
  log("PostgreSQL for the ledger");
  const databaseUrl = await postgresUp();
  log(`namespace ${namespace}`);
  await freshNamespace(client, namespace, undefined, options.node === "kubelet" ? RESTRICTED_NAMESPACE : {});

  if (options.node === "kubelet") {
    // The e-mail service is a server of this machine, which the pods reach through the node.
    const port = await freePort();
    const server = await serveOutbox(new Outbox(outboxDir), "127.0.0.1", port);
    cleanups.push(() => new Promise((resolve) => server.close(resolve)));
    const host = await nodeExpose(state, port);
    sandboxEnv.EXAMPLE_OUTBOX_URL = `http://${host}:${port}`;
  }

  // Each replica as a cluster-admin ServiceAccount of its own, in the namespace whose requests the
  // control plane's audit policy records: its writes are told from the other replicas' there.
  log(`a ServiceAccount for each of ${names.length} operator replicas`);
  const auditLog = auditLogOf(kubeconfig);
  const accountKubeconfigs = new Map<string, string>();
  cleanups.push(async () => {
    for (const [name, file] of accountKubeconfigs) {
      rmSync(file, { force: true }); // it holds the account's token
      await client.delete(`/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/${AUDITED_NAMESPACE}-${accountOf(name)}`).catch(() => undefined);
      await client.delete(`/api/v1/namespaces/${AUDITED_NAMESPACE}/serviceaccounts/${accountOf(name)}`).catch(() => undefined);
    }
  });
  for (const name of names) accountKubeconfigs.set(name, await operatorKubeconfig(client, kubeconfig, accountOf(name)));
  const sharding: ShardingRecord = {
    namespace,
    replicas: names.length,
    shards,
    leases: shards > 1 ? Array.from({ length: shards }, (_, shard) => shardLeaseName(LEASE_NAME, shard)) : [LEASE_NAME],
  };
  const leases: WatchedLeases = { namespace, name: LEASE_NAME, ...(shards > 1 ? { selector: `${LEASE_LABELS.group}=${leaseGroup(LEASE_NAME)},${LEASE_LABELS.role}=shard` } : {}) };

  const replicas = new Map<string, Replica>();
  const replicaStarts: ReplicaRecord[] = [];
  let tearingDown = false;
  let tornDown: Promise<void> | undefined;
  const operatorExits: OperatorExit[] = [];
  let generation = 0;
  const startReplica = async (name: string): Promise<Replica> => {
    const proxy = await startApiProxy(accountKubeconfigs.get(name) as string);
    const metricsPort = await freePort();
    const healthPort = await freePort();
    const identity = `soak-${name}-${++generation}`;
    const user = auditedUser(accountOf(name));
    const logFile = join(dir, `operator-${name}.log`);
    const fd = openSync(logFile, "a");
    // The ledger's URL in the environment: on the command line ps would show its password.
    const env: NodeJS.ProcessEnv = { ...process.env, KUBECONFIG: proxy.kubeconfig, POD_NAME: identity, DATABASE_URL: databaseUrl };
    replicaStarts.push({ identity, user, startedAt: Date.now() });
    const child = spawn(
      process.execPath,
      [
        join(root, "operator/cli/operator.ts"),
        `--namespaces=${namespace}`,
        "--leader-elect",
        `--leader-election-namespace=${namespace}`,
        `--leader-election-id=${LEASE_NAME}`,
        ...(shards > 1 ? [`--shards=${shards}`] : []),
        `--metrics-bind-address=127.0.0.1:${metricsPort}`,
        `--health-probe-bind-address=127.0.0.1:${healthPort}`,
        // Real pods get their own fenced identity; kwok's run nothing that would use one.
        `--sandbox-service-account=${options.node === "kubelet" ? "run" : "none"}`,
        "--log-level=info",
      ],
      { env, stdio: ["ignore", fd, fd], detached: true },
    );
    closeSync(fd);
    const replica: Replica = { name, identity, user, child, proxy, metricsUrl: `http://127.0.0.1:${metricsPort}/metrics`, signalledBySoak: false };
    replicas.set(name, replica);
    child.once("exit", (code, signal) => {
      operatorExits.push({ replica: identity, at: Date.now(), code, signal, bySoak: replica.signalledBySoak });
      void proxy.close();
      // A replica that ended by itself is started again a second later, as the kubelet restarts
      // a Deployment's container; one the soak signalled is the soak's to start.
      if (!replica.signalledBySoak && !tearingDown) {
        setTimeout(() => void startReplica(name).catch((err: unknown) => log(`restarting replica ${name} failed: ${String(err)}`)), 1000);
      }
    });
    await pollUntil(`operator replica ${name} to be live`, 60_000, async () => {
      if (child.exitCode !== null) throw new Error(`operator replica ${name} exited with ${child.exitCode}; see ${logFile}:\n${readFileSync(logFile, "utf8").slice(-2000)}`);
      const res = await fetch(`http://127.0.0.1:${healthPort}/healthz`).catch(() => undefined);
      return res?.ok === true;
    });
    return replica;
  };
  const startReplicas = async () => {
    log(`${names.length} operator replica${names.length === 1 ? "" : "s"}${shards > 1 ? ` sharing ${shards} shards` : " with leader election"}, each behind a TCP proxy`);
    for (const name of names) await startReplica(name);
  };

  return {
    node: options.node,
    state,
    kubeconfig,
    client,
    namespace,
    databaseUrl,
    outboxDir,
    image,
    sandboxEnv,
    nodeView,
    ...(nodeEvents ? { nodeEvents } : {}),
    sandboxPids,
    replicas,
    replicaStarts,
    operatorExits,
    sharding,
    leases,
    auditLog,
    users: names.map((name) => auditedUser(accountOf(name))),
    startReplicas,
    startReplica,
    // Once, whoever asks first: the end of the soak, or a signal that stops it early.
    teardown() {
      return (tornDown ??= tearDown());
    },
  };
  async function tearDown(): Promise<void> {
    tearingDown = true;
    // The namespace goes while the replicas still run: a run that had not ended (a soak that did
    // not settle) carries the finalizer only the operator takes off once its sandbox is gone.
    // Deleted after them, it stayed, and the next soak waited for it in vain.
    const gone = await deleteNamespace(60_000);
    for (const replica of replicas.values()) {
      replica.signalledBySoak = true;
      if (replica.child.exitCode === null && replica.child.signalCode === null) {
        const exited = new Promise((resolve) => replica.child.once("exit", resolve));
        replica.child.kill("SIGTERM");
        const timer = setTimeout(() => replica.child.kill("SIGKILL"), 10_000);
        await exited;
        clearTimeout(timer);
      }
    }
    for (const cleanup of cleanups.reverse()) await cleanup().catch(() => undefined);
    if (gone) return;
    // Not gone in time: every sandbox the soak started is stopped by now, so nothing the
    // finalizer guards can still run. Take it off what is left, as a person cleaning up would.
    try {
      const left = await client.get<{ items: { metadata: { name: string } }[] }>(paths.runs(namespace));
      for (const run of left.items) {
        await client.mergePatch(paths.run(namespace, run.metadata.name), { metadata: { finalizers: null } }).catch(() => undefined);
      }
    } catch {
      // gone already, or the cluster is
    }
  }

  /** Deletes the soak's namespace and waits up to `ms` for it to be gone; says whether it went. */
  async function deleteNamespace(ms: number): Promise<boolean> {
    try {
      await client.delete(`/api/v1/namespaces/${namespace}`);
      await pollUntil(`namespace ${namespace} deleted`, ms, () => client.get(`/api/v1/namespaces/${namespace}`).then(() => false, () => true));
      return true;
    } catch {
      return false; // still there, or the cluster is gone
    }
  }
}
