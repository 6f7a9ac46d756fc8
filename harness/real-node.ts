// The cluster with the real node (hack/control-plane.sh up --kubelet) as the demo, the soak and
// the real-node suite use it: its own state root beside the kwok cluster's, so both stay warm;
// the project image built and imported into the node; and the operator installed from that image
// with the chart, as users install it.
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { spawn } from "node:child_process";
import { Agent, fetch as undiciFetch } from "undici";
import { stringify } from "yaml";
import { isNotFound, paths, type Json, type KubeClient } from "../operator/kube/client.ts";
import { stateRoot } from "./sandbox-runner.ts";
import { exported, pollUntil, runScript } from "./cluster.ts";

const root = fileURLToPath(new URL("..", import.meta.url));

/** Names which cluster owns the machine's one real node (written by hack/lib/node.sh). */
export const REAL_NODE_OWNER_FILE = "/run/agent-watchdog-real-node";
export const REAL_NODE_NAME = "kubelet-node-0";
/** Where pods reach servers of this machine that `node-expose` made reachable. */
export const NODE_HOST_ADDRESS = "10.244.0.1";

/**
 * The state root of the real-node cluster: the one that holds the machine's real node if one
 * runs (a developer's own `up --kubelet`, say), else `<state root>/real-node`.
 */
export function realNodeStateRoot(): string {
  if (existsSync(REAL_NODE_OWNER_FILE)) {
    const stateDir = readFileSync(REAL_NODE_OWNER_FILE, "utf8").trim();
    if (stateDir.endsWith("/control-plane")) return stateDir.slice(0, -"/control-plane".length);
  }
  return join(stateRoot(), "real-node");
}

const inRealNode = (state: string) => ({ AGENT_WATCHDOG_STATE: state });

async function realNodeScript(state: string, script: string, args: string[], what: string): Promise<string> {
  const { code, stdout } = await runScript(script, args, { env: inRealNode(state) });
  if (code !== 0) throw new Error(`${what}: hack/${script} ${args.join(" ")} failed (exit ${code})`);
  return stdout;
}

export interface RealNode {
  state: string;
  kubeconfig: string;
  /** The project image, built from the Dockerfile and imported into the node. */
  image: string;
  /** The pinned helm and kubectl. */
  helm: string;
  kubectl: string;
}

/** Starts (or reuses) the real-node cluster and puts the project image on its node. */
export async function realNodeUp(state = realNodeStateRoot()): Promise<RealNode> {
  const up = await realNodeScript(state, "control-plane.sh", ["up", "--kubelet"], "the real node");
  const kubeconfig = exported(up, "KUBECONFIG");
  if (!kubeconfig) throw new Error("hack/control-plane.sh up --kubelet printed no KUBECONFIG");
  const image = (await realNodeScript(state, "images.sh", [], "the project image")).trim().split("\n").at(-1) ?? "";
  if (!image.includes(":")) throw new Error(`hack/images.sh printed no image reference: ${image}`);
  const helm = (await realNodeScript(state, "control-plane.sh", ["bin", "helm"], "helm")).trim();
  const kubectl = (await realNodeScript(state, "control-plane.sh", ["bin", "kubectl"], "kubectl")).trim();
  return { state, kubeconfig, image, helm, kubectl };
}

/** Lets the node's pods reach 127.0.0.1:port of this machine at NODE_HOST_ADDRESS:port. */
export async function nodeExpose(state: string, port: number): Promise<string> {
  const out = await realNodeScript(state, "control-plane.sh", ["node-expose", String(port)], "node-expose");
  return exported(out, "NODE_HOST_ADDRESS") ?? NODE_HOST_ADDRESS;
}

/** Pausing and resuming the kubelet: the node is cut off from the API server, its containers run on. */
export const nodePause = (state: string) => realNodeScript(state, "control-plane.sh", ["node-pause"], "node-pause");
export const nodeResume = (state: string) => realNodeScript(state, "control-plane.sh", ["node-resume"], "node-resume");

/** Runs a command to completion and returns its output; fails with its stderr otherwise. */
export function command(file: string, args: string[], options: { env?: NodeJS.ProcessEnv; input?: string } = {}): Promise<string> {
  return new Promise((resolve, reject) => {
    const child = spawn(file, args, { env: { ...process.env, ...options.env }, stdio: ["pipe", "pipe", "pipe"] });
    let stdout = "";
    let stderr = "";
    child.stdout.on("data", (c: Buffer) => (stdout += c.toString()));
    child.stderr.on("data", (c: Buffer) => (stderr += c.toString()));
    child.once("error", reject);
    child.once("close", (code) => (code === 0 ? resolve(stdout) : reject(new Error(`${file} ${args.join(" ")} exited ${code}: ${stderr.trim()}`))));
    child.stdin.end(options.input ?? "");
  });
}

// ---------------------------------------------------------------------------------------------
// the operator from the image, installed with the chart

export interface OperatorInstall {
  node: RealNode;
  client: KubeClient;
  release: string;
  /** The release's namespace (the operator's pods and Lease live there). */
  namespace: string;
  /** Namespaces whose runs it watches. */
  watchNamespaces: string[];
  replicas?: number;
  /** PostgreSQL URL of the ledger, as the operator's pods reach it. */
  databaseUrl?: string;
  /** More chart values, merged over the ones above. */
  values?: Json;
}

export interface InstalledOperator {
  release: string;
  namespace: string;
  /** The operator's pods that are running, with their addresses. */
  pods(): Promise<{ name: string; ip: string; ready: boolean }[]>;
  /** The pod holding the leader Lease, if any. */
  leader(): Promise<string | undefined>;
  /** The leader's (or the first pod's) base URL: /metrics and /history. */
  baseUrl(): Promise<string>;
  /**
   * A request to the operator's metrics port (the leader's, or the pod at `ip`), over HTTPS
   * trusted through the chart's CA when metrics.tls is on, as the API server and Prometheus
   * reach it.
   */
  fetch(path: string, init?: { headers?: Record<string, string> }, ip?: string): Promise<Response>;
  uninstall(): Promise<void>;
}

const helmEnv = (node: RealNode) => ({
  KUBECONFIG: node.kubeconfig,
  HELM_CACHE_HOME: join(node.state, "helm", "cache"),
  HELM_CONFIG_HOME: join(node.state, "helm", "config"),
  HELM_DATA_HOME: join(node.state, "helm", "data"),
});

/** The image reference as the chart's repository and tag. */
export function imageValues(image: string): { repository: string; tag: string; pullPolicy: string } {
  const at = image.lastIndexOf(":");
  return { repository: image.slice(0, at), tag: image.slice(at + 1), pullPolicy: "IfNotPresent" };
}

/** `helm install` of the chart with the node's image; waits until every replica is Ready. */
export async function installOperator(options: OperatorInstall): Promise<InstalledOperator> {
  const { node, client, release, namespace } = options;
  const fullname = `${release}-agent-watchdog`;
  if (options.databaseUrl) {
    await client.create(`/api/v1/namespaces/${namespace}/secrets`, {
      apiVersion: "v1",
      kind: "Secret",
      metadata: { name: `${release}-ledger` },
      stringData: { DATABASE_URL: options.databaseUrl },
    });
  }
  const values: Json = {
    image: imageValues(node.image),
    replicaCount: options.replicas ?? 2,
    watchNamespaces: options.watchNamespaces,
    // The CRD is applied beforehand (kubectl apply --server-side -f crds/), as the README says
    // for clusters where it is managed apart from the release.
    crds: { enabled: false },
    ...(options.databaseUrl ? { ledger: { databaseUrlSecret: { name: `${release}-ledger`, key: "DATABASE_URL" } } } : {}),
    ...options.values,
  };
  await command(node.helm, ["install", release, join(root, "charts/agent-watchdog"), "--namespace", namespace, "--values", "-", "--wait", "--timeout", "180s"], {
    env: helmEnv(node),
    input: stringify(values),
  });
  const selector = `app.kubernetes.io/instance=${release},app.kubernetes.io/name=agent-watchdog`;
  const pods = async () => {
    const list = await client.get<{ items: Json[] }>(paths.pods(namespace), { labelSelector: selector });
    return list.items
      .map((p) => p as { metadata: { name: string; deletionTimestamp?: string }; status?: { podIP?: string; phase?: string; conditions?: { type: string; status: string }[] } })
      .filter((p) => p.status?.phase === "Running" && p.status.podIP && !p.metadata.deletionTimestamp)
      .map((p) => ({ name: p.metadata.name, ip: p.status?.podIP as string, ready: p.status?.conditions?.some((c) => c.type === "Ready" && c.status === "True") ?? false }));
  };
  // The chart serves the metrics port over HTTPS unless told otherwise; its certificate names the
  // Service, so the pod's address is dialled with the Service's name as the one to verify.
  const tls = (values.metrics as { tls?: { enabled?: boolean } } | undefined)?.tls?.enabled !== false;
  let dispatcher: Agent | undefined;
  const trusted = async () => {
    if (!dispatcher) {
      const secret = await client.get<{ data: Record<string, string> }>(`/api/v1/namespaces/${namespace}/secrets/${fullname}-metrics-tls`);
      dispatcher = new Agent({ connect: { ca: Buffer.from(secret.data["ca.crt"] ?? "", "base64").toString(), servername: `${fullname}-metrics.${namespace}.svc` } });
    }
    return dispatcher;
  };
  const scheme = tls ? "https" : "http";
  const leader = async () => {
    try {
      const lease = await client.get<{ spec?: { holderIdentity?: string } }>(paths.lease(namespace, `${fullname}.watchdog.dev`));
      return lease.spec?.holderIdentity || undefined;
    } catch (err) {
      if (isNotFound(err)) return undefined;
      throw err;
    }
  };
  const baseUrl = async () => {
    let url = "";
    await pollUntil("an operator pod to serve metrics", 60_000, async () => {
      const [running, holder] = await Promise.all([pods(), leader()]);
      const pod = running.find((p) => p.name === holder) ?? running[0];
      url = pod ? `${scheme}://${pod.ip}:8080` : "";
      return url !== "";
    });
    return url;
  };
  return {
    release,
    namespace,
    pods,
    leader,
    baseUrl,
    async fetch(path, init = {}, ip) {
      const base = ip ? `${scheme}://${ip}:8080` : await baseUrl();
      const res = await undiciFetch(`${base}${path}`, { headers: init.headers ?? {}, ...(tls ? { dispatcher: await trusted() } : {}) });
      return res as unknown as Response;
    },
    async uninstall() {
      await dispatcher?.close();
      await command(node.helm, ["uninstall", release, "--namespace", namespace, "--wait", "--timeout", "120s"], { env: helmEnv(node) });
    },
  };
}
