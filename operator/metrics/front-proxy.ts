// Callers the API server vouches for. When the API server proxies a request to an aggregated API
// (the run history at /apis/history.watchdog.dev/...), it has already authenticated the user and
// says who they are in request headers (X-Remote-User, X-Remote-Group, X-Remote-Extra-*), over a
// TLS connection on which it shows its front-proxy client certificate. Those headers are believed
// only on such a connection: a certificate that chains to the request-header CA and, when the
// cluster names them, carries one of the allowed common names. On any other connection the
// headers are ignored, so nobody can claim to be someone by setting them.
//
// What to trust is read where every aggregated API server reads it: the ConfigMap
// kube-system/extension-apiserver-authentication, which the API server writes from its own
// --requestheader-* flags.
import type { TLSSocket } from "node:tls";
import type { KubeClient } from "../kube/client.ts";
import type { AccessRequest, Caller } from "./access.ts";

export interface FrontProxyTrust {
  /** PEM of the CA the front-proxy client certificate must chain to. */
  clientCa: string;
  /** Common names the certificate may carry; empty means any certificate of that CA. */
  allowedNames: string[];
  usernameHeaders: string[];
  groupHeaders: string[];
  extraHeaderPrefixes: string[];
}

export const AUTHENTICATION_CONFIGMAP = { namespace: "kube-system", name: "extension-apiserver-authentication" };

/** The lists in the ConfigMap are JSON arrays of strings; anything else counts as none. */
function stringList(text: string | undefined): string[] {
  if (!text) return [];
  try {
    const value: unknown = JSON.parse(text);
    return Array.isArray(value) ? value.filter((v): v is string => typeof v === "string" && v !== "") : [];
  } catch {
    return [];
  }
}

/** The trust the ConfigMap's data describes, or undefined when it names no request-header CA. */
export function frontProxyTrust(data: Record<string, string> | undefined): FrontProxyTrust | undefined {
  const clientCa = data?.["requestheader-client-ca-file"];
  if (!clientCa?.includes("BEGIN CERTIFICATE")) return undefined;
  return {
    clientCa,
    allowedNames: stringList(data?.["requestheader-allowed-names"]),
    usernameHeaders: stringList(data?.["requestheader-username-headers"]),
    groupHeaders: stringList(data?.["requestheader-group-headers"]),
    extraHeaderPrefixes: stringList(data?.["requestheader-extra-headers-prefix"]),
  };
}

/** Reads the trust from the cluster; undefined (and the reason) when it cannot be read. */
export async function readFrontProxyTrust(client: Pick<KubeClient, "get">): Promise<{ trust?: FrontProxyTrust; problem?: string }> {
  const { namespace, name } = AUTHENTICATION_CONFIGMAP;
  try {
    const cm = await client.get<{ data?: Record<string, string> }>(`/api/v1/namespaces/${namespace}/configmaps/${name}`);
    const trust = frontProxyTrust(cm.data);
    return trust ? { trust } : { problem: `${namespace}/${name} names no request-header CA: the API server runs without --requestheader-client-ca-file` };
  } catch (err) {
    return { problem: `cannot read ${namespace}/${name}: ${err instanceof Error ? err.message : String(err)}` };
  }
}

function headerValues(req: AccessRequest, name: string): string[] {
  const value = req.headers[name.toLowerCase()];
  if (value === undefined) return [];
  return (Array.isArray(value) ? value : [value]).flatMap((v) => v.split(",")).map((v) => v.trim()).filter(Boolean);
}

/**
 * Whether the connection shows a front-proxy certificate: chained to the CA the TLS server was
 * given for client certificates, and with an allowed common name.
 */
export function fromFrontProxy(req: AccessRequest, trust: FrontProxyTrust): boolean {
  const socket = req.socket as Partial<TLSSocket> | undefined;
  if (!socket) return false;
  if (socket.authorized !== true || typeof socket.getPeerCertificate !== "function") return false;
  const cn = socket.getPeerCertificate().subject?.CN;
  const name = Array.isArray(cn) ? cn[0] : cn;
  return trust.allowedNames.length === 0 || (name !== undefined && trust.allowedNames.includes(name));
}

/**
 * The user the API server vouches for, or undefined when the request is not from the front proxy
 * (then its headers mean nothing) or names no user.
 */
export function frontProxyCaller(req: AccessRequest, trust: FrontProxyTrust): Caller | undefined {
  if (!fromFrontProxy(req, trust)) return undefined;
  const username = trust.usernameHeaders.map((h) => headerValues(req, h)[0]).find((v) => v !== undefined);
  if (!username) return undefined;
  const groups = trust.groupHeaders.flatMap((h) => headerValues(req, h));
  const extra: Record<string, string[]> = {};
  for (const [header, value] of Object.entries(req.headers)) {
    const prefix = trust.extraHeaderPrefixes.find((p) => header.startsWith(p.toLowerCase()));
    if (!prefix || value === undefined) continue;
    // Extra keys are sent percent-encoded and lower-cased, as the API server sends them.
    let key: string;
    try {
      key = decodeURIComponent(header.slice(prefix.length));
    } catch {
      continue;
    }
    extra[key] = [...(extra[key] ?? []), ...headerValues(req, header)];
  }
  return { username, groups, ...(Object.keys(extra).length ? { extra } : {}) };
}
