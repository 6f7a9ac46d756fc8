// Where the API server is and how to prove who we are, read the way kubectl and client-go read it:
// $KUBECONFIG (its first file), else ~/.kube/config, else the pod's service account. The
// operator reads this itself because @kubernetes/client-node's KubeConfig loads every generated
// API model with it, some 80 MiB of resident memory that an idle operator would carry for nothing.
// Credentials that need a plugin (exec, auth-provider) still go through client-node, loaded only
// then.
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { join } from "node:path";
import type { KubeConfig } from "@kubernetes/client-node";
import type * as Yaml from "yaml";
import { inCluster, kubeconfigPath, tokenFromFile, type Connection } from "../api/service-account.ts";

export type { Connection } from "../api/service-account.ts";

/** The YAML parser (some 13 MiB resident), loaded only to read a kubeconfig, never in a pod. */
export const parseYaml = (text: string): unknown => (createRequire(import.meta.url)("yaml") as typeof Yaml).parse(text);

type Named<T> = { name: string } & T;
interface ClusterEntry {
  server?: string;
  "certificate-authority"?: string;
  "certificate-authority-data"?: string;
  "insecure-skip-tls-verify"?: boolean;
  "tls-server-name"?: string;
}
interface UserEntry {
  "client-certificate"?: string;
  "client-certificate-data"?: string;
  "client-key"?: string;
  "client-key-data"?: string;
  token?: string;
  tokenFile?: string;
  exec?: unknown;
  "auth-provider"?: unknown;
}
interface KubeconfigFile {
  "current-context"?: string;
  contexts?: Named<{ context: { cluster: string; user: string } }>[];
  clusters?: Named<{ cluster: ClusterEntry }>[];
  users?: Named<{ user: UserEntry }>[];
}

const fileOrData = (file: string | undefined, data: string | undefined, dir: string): Buffer | undefined =>
  data ? Buffer.from(data, "base64") : file ? readFileSync(file.startsWith("/") ? file : join(dir, file)) : undefined;

/** Authorization by client-node's own code, for plugins (exec, auth-provider) and whatever a KubeConfig holds. */
function viaClientNode(load: () => Promise<KubeConfig>, server: string): Connection["authorization"] {
  return async () => {
    const [kc, { RequestContext }] = await Promise.all([load(), import("@kubernetes/client-node")]);
    const ctx = new RequestContext(server, "GET" as never);
    await kc.applySecurityAuthentication(ctx);
    const headers = ctx.getHeaders() as Record<string, string>;
    return headers.Authorization ?? headers.authorization;
  };
}

/** The connection of a kubeconfig file's current context. */
export function fromKubeconfigFile(path: string): Connection {
  const config = (parseYaml(readFileSync(path, "utf8")) ?? {}) as KubeconfigFile;
  const dir = join(path, "..");
  const context = config.contexts?.find((c) => c.name === config["current-context"])?.context;
  if (!context) throw new Error(`${path}: no current context`);
  const cluster = config.clusters?.find((c) => c.name === context.cluster)?.cluster;
  if (!cluster?.server) throw new Error(`${path}: the current context's cluster has no server`);
  const user = config.users?.find((u) => u.name === context.user)?.user ?? {};
  const server = cluster.server.replace(/\/$/, "");
  const connection: Connection = { server };
  const ca = fileOrData(cluster["certificate-authority"], cluster["certificate-authority-data"], dir);
  if (ca) connection.ca = ca;
  if (cluster["insecure-skip-tls-verify"]) connection.insecure = true;
  if (cluster["tls-server-name"]) connection.servername = cluster["tls-server-name"];
  const cert = fileOrData(user["client-certificate"], user["client-certificate-data"], dir);
  const key = fileOrData(user["client-key"], user["client-key-data"], dir);
  if (cert) connection.cert = cert;
  if (key) connection.key = key;
  if (user.exec || user["auth-provider"]) {
    connection.authorization = viaClientNode(async () => {
      const { KubeConfig } = await import("@kubernetes/client-node");
      const kc = new KubeConfig();
      kc.loadFromFile(path);
      return kc;
    }, server);
  } else if (user.token) {
    const header = `Bearer ${user.token}`;
    connection.authorization = async () => header;
  } else if (user.tokenFile) {
    connection.authorization = tokenFromFile(user.tokenFile.startsWith("/") ? user.tokenFile : join(dir, user.tokenFile));
  }
  return connection;
}

/** $KUBECONFIG (its first file), else ~/.kube/config, else the pod's service account. */
export function loadConnection(env: NodeJS.ProcessEnv = process.env): Connection {
  const path = kubeconfigPath(env);
  return path ? fromKubeconfigFile(path) : inCluster(env);
}

/** The connection of a client-node KubeConfig (the CLI and the tests hand one over). */
export function fromKubeConfig(kc: KubeConfig): Connection {
  const cluster = kc.getCurrentCluster();
  if (!cluster) throw new Error("no current cluster in the kubeconfig");
  const user = kc.getCurrentUser();
  const server = cluster.server.replace(/\/$/, "");
  const connection: Connection = { server, authorization: viaClientNode(async () => kc, server) };
  const ca = fileOrData(cluster.caFile, cluster.caData, ".");
  if (ca) connection.ca = ca;
  if (cluster.skipTLSVerify) connection.insecure = true;
  if (cluster.tlsServerName) connection.servername = cluster.tlsServerName;
  const cert = fileOrData(user?.certFile, user?.certData, ".");
  const key = fileOrData(user?.keyFile, user?.keyData, ".");
  if (cert) connection.cert = cert;
  if (key) connection.key = key;
  return connection;
}
