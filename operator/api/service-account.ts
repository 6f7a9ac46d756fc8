// How a process in a pod reaches the API server as its service account, the way client-go's
// in-cluster config does: the address from the environment the kubelet sets, the cluster's CA and
// a token from the mounted files. Shared by the operator and the sandbox SDK, so that neither loads
// @kubernetes/client-node (most of a sandbox's start-up CPU) only to read three values.
import { existsSync, readFileSync } from "node:fs";
import { homedir } from "node:os";
import { join } from "node:path";

export interface Connection {
  /** https://host:port, without a trailing slash. */
  server: string;
  ca?: Buffer;
  cert?: Buffer;
  key?: Buffer;
  insecure?: boolean;
  servername?: string;
  /** The Authorization header, read again for every request that needs one (tokens rotate). */
  authorization?: (refresh: boolean) => Promise<string | undefined>;
}

/** A Connection's TLS material, as node:https's and undici's agents both take it. */
export function tlsOptions(connection: Connection): { ca?: Buffer; cert?: Buffer; key?: Buffer; servername?: string; rejectUnauthorized: boolean } {
  return {
    ...(connection.ca ? { ca: connection.ca } : {}),
    ...(connection.cert ? { cert: connection.cert } : {}),
    ...(connection.key ? { key: connection.key } : {}),
    ...(connection.servername ? { servername: connection.servername } : {}),
    rejectUnauthorized: !connection.insecure,
  };
}

/** Where the kubelet mounts a pod's service account token, its namespace and the cluster's CA. */
export const SERVICE_ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount";

/** A token that is read from its file again after a 401 or a minute, as client-go does: the kubelet rotates it. */
export function tokenFromFile(path: string): Connection["authorization"] {
  let token: { value: string; at: number } | undefined;
  return async (refresh) => {
    if (refresh || !token || Date.now() - token.at > 60_000) token = { value: readFileSync(path, "utf8").trim(), at: Date.now() };
    return `Bearer ${token.value}`;
  };
}

/** The connection of the pod's own service account. */
export function inCluster(env: NodeJS.ProcessEnv = process.env, dir = SERVICE_ACCOUNT_DIR): Connection {
  const host = env.KUBERNETES_SERVICE_HOST;
  const port = env.KUBERNETES_SERVICE_PORT ?? "443";
  if (!host) throw new Error("no kubeconfig ($KUBECONFIG, ~/.kube/config) and not in a pod (KUBERNETES_SERVICE_HOST is not set)");
  return {
    server: `https://${host.includes(":") ? `[${host}]` : host}:${port}`,
    ca: readFileSync(join(dir, "ca.crt")),
    authorization: tokenFromFile(join(dir, "token")),
  };
}

/**
 * The kubeconfig file to read, in kubectl's order ($KUBECONFIG's first file, else
 * ~/.kube/config), or undefined when there is none and the pod's service account is what is left.
 */
export function kubeconfigPath(env: NodeJS.ProcessEnv = process.env): string | undefined {
  const first = env.KUBECONFIG?.split(":").find(Boolean);
  if (first) return first;
  const home = join(env.HOME ?? homedir(), ".kube", "config");
  return existsSync(home) ? home : undefined;
}
