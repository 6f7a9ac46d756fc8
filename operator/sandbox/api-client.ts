// The SDK's own client for the Kubernetes API. A sandbox talks to one object, its AgentRun: it
// reads it, merge-patches its status and watches it. Plain JSON in and out, and an error that
// carries the HTTP status and the Status reason, which is what the SDK decides by.
//
// Credentials come from $KUBECONFIG or ~/.kube/config, read by @kubernetes/client-node's
// KubeConfig, else from the pod's service account (a projected token that the kubelet rotates,
// read again as it does). In a pod, client-node is never loaded: importing it costs about a
// second of CPU, most of a sandbox's start, and a node starting many sandboxes at once pays it
// for each before any of them can send its first heartbeat.
import { createRequire } from "node:module";
import type * as ClientNode from "@kubernetes/client-node";
import type { KubeConfig } from "@kubernetes/client-node";
import { Agent, fetch, type Dispatcher, type Response } from "undici";
import { GROUP, PLURAL, VERSION } from "../api/agentrun.ts";
import { inCluster, kubeconfigPath, SERVICE_ACCOUNT_DIR, tlsOptions, type Connection } from "../api/service-account.ts";
import { ApiError } from "../api/api-error.ts";
import { timerDelayMs } from "./timers.ts";

export type Json = Record<string, unknown>;
export type Query = Record<string, string | number | boolean | undefined>;

/** What the SDK needs of an API client. The operator's KubeClient fits too (tests hand it one). */
export interface SandboxApi {
  get<T = Json>(path: string, query?: Query): Promise<T>;
  mergePatch<T = Json>(path: string, patch: unknown, query?: Query): Promise<T>;
  /**
   * Calls `onEvent` per watch event; `onDone` gets null when the server closes the watch and the
   * error otherwise. A watch that carries nothing for `inactivityTimeoutMs` counts as broken.
   */
  watch(
    path: string,
    query: Query,
    onEvent: (type: string, object: Json) => void,
    onDone: (err: unknown) => void,
    inactivityTimeoutMs?: number,
  ): Promise<AbortController>;
}

export { ApiError };

/**
 * The HTTP status of an API error, or undefined for anything else (a network error has none).
 * Recognised by shape, as zod errors are: an error from another client with the same fields counts.
 */
export function apiErrorCode(err: unknown): number | undefined {
  if (err instanceof ApiError) return err.code;
  const e = err as { name?: unknown; code?: unknown } | null;
  return typeof e === "object" && e !== null && e.name === "ApiError" && typeof e.code === "number" ? e.code : undefined;
}

export const isNotFound = (err: unknown) => apiErrorCode(err) === 404;

/** What the server said, from its Status object, else the error's own message. */
function serverMessage(err: unknown): string {
  const body = (err as { body?: { message?: unknown } } | null)?.body;
  if (typeof body?.message === "string") return body.message;
  return err instanceof Error ? err.message : "";
}

/**
 * The storage's size limit: etcd refuses a request over its limit ("etcdserver: request is too
 * large"), which the API server passes on as a 500. The same request would fail again.
 */
export const isTooLarge = (err: unknown) => /too large/i.test(serverMessage(err));

/**
 * Errors worth retrying: the server or the network may recover. No status at all is the network;
 * 401 is a token the kubelet is about to rotate (the client has already read it afresh once);
 * 408, 409 and 429 pass; a 5xx is the server's trouble, unless it is a size limit. Anything else
 * is the server refusing this request, and it would refuse it again.
 */
export function isTransient(err: unknown): boolean {
  const code = apiErrorCode(err);
  if (code === undefined || code === 0 || code === 401 || code === 408 || code === 409 || code === 429) return true;
  return code >= 500 && !isTooLarge(err);
}

/** The wait a server asked for with its refusal (Retry-After), in ms, if it asked. */
export function retryAfterMs(err: unknown): number | undefined {
  const seconds = (err as { retryAfterSeconds?: unknown } | null)?.retryAfterSeconds;
  return typeof seconds === "number" && Number.isFinite(seconds) && seconds >= 0 ? seconds * 1000 : undefined;
}

/** Backoff of retried reads and writes: 200 ms doubling to 5 s. */
export const RETRY = { firstMs: 200, maxMs: 5_000 } as const;

export const MERGE_PATCH = "application/merge-patch+json";

const base = (namespace: string) => `/apis/${GROUP}/${VERSION}/namespaces/${namespace}/${PLURAL}`;
export const runPaths = {
  runs: base,
  run: (namespace: string, name: string) => `${base(namespace)}/${name}`,
  status: (namespace: string, name: string) => `${base(namespace)}/${name}/status`,
};

const REQUEST_TIMEOUT_MS = 30_000;
/** client-node's own default: a watch silent this long is taken as a dead connection. */
const WATCH_INACTIVITY_MS = 30_000;
/**
 * How long credentials are reused before they are read again: client-node builds a new TLS agent
 * (and reads certificate files) on every call, which costs a TLS handshake per request; rotated
 * service-account tokens are still picked up within this time, and at once after a 401.
 */
const CREDENTIALS_TTL_MS = 60_000;

interface Credentials {
  headers: Record<string, string>;
  dispatcher: Dispatcher | undefined;
  at: number;
}

/** $KUBECONFIG or ~/.kube/config through client-node (loaded only then), else the pod's service account. */
export function defaultSource(env: NodeJS.ProcessEnv = process.env, serviceAccountDir = SERVICE_ACCOUNT_DIR): KubeConfig | Connection {
  if (kubeconfigPath(env) === undefined && env.KUBERNETES_SERVICE_HOST) return inCluster(env, serviceAccountDir);
  const { KubeConfig } = createRequire(import.meta.url)("@kubernetes/client-node") as typeof ClientNode;
  const kc = new KubeConfig();
  kc.loadFromDefault();
  return kc;
}

const isConnection = (source: KubeConfig | Connection): source is Connection => typeof (source as Connection).server === "string";

export class ApiClient implements SandboxApi {
  private readonly source: KubeConfig | Connection;
  private readonly server: string;
  private credentials: Credentials | undefined;

  /** By default from $KUBECONFIG, ~/.kube/config or the pod's service account. */
  constructor(source: KubeConfig | Connection = defaultSource()) {
    this.source = source;
    if (isConnection(source)) {
      this.server = source.server.replace(/\/$/, "");
      return;
    }
    const cluster = source.getCurrentCluster();
    if (!cluster) throw new Error("no current cluster in the kubeconfig");
    this.server = cluster.server.replace(/\/$/, "");
  }

  async get<T = Json>(path: string, query?: Query): Promise<T> {
    return this.json<T>("GET", path, query);
  }

  async mergePatch<T = Json>(path: string, patch: unknown, query?: Query): Promise<T> {
    return this.json<T>("PATCH", path, query, JSON.stringify(patch), MERGE_PATCH);
  }

  async watch(
    path: string,
    query: Query,
    onEvent: (type: string, object: Json) => void,
    onDone: (err: unknown) => void,
    inactivityTimeoutMs = WATCH_INACTIVITY_MS,
  ): Promise<AbortController> {
    const abort = new AbortController();
    let finished = false;
    let idle: ReturnType<typeof setTimeout> | undefined;
    const done = (err: unknown) => {
      if (finished) return;
      finished = true;
      clearTimeout(idle);
      abort.abort();
      onDone(err);
    };
    // Unreferenced: the watch alone must not keep a process alive whose agent has finished.
    const stillAlive = () => {
      clearTimeout(idle);
      idle = setTimeout(() => done(new Error(`watch of ${path}: nothing received for ${inactivityTimeoutMs} ms`)), timerDelayMs(inactivityTimeoutMs));
      idle.unref?.();
    };
    stillAlive();
    void (async () => {
      const response = await this.send("GET", path, { ...query, watch: true }, undefined, undefined, abort.signal);
      if (response.status !== 200) throw new ApiError("GET", path, response.status, parseBody(await response.text()), response.headers.get("retry-after"));
      if (!response.body) throw new Error(`watch of ${path}: no body`);
      const decoder = new TextDecoder();
      let buffered = "";
      for await (const chunk of response.body) {
        stillAlive();
        buffered += decoder.decode(chunk as Uint8Array, { stream: true });
        for (let newline = buffered.indexOf("\n"); newline >= 0; newline = buffered.indexOf("\n")) {
          const line = buffered.slice(0, newline).trim();
          buffered = buffered.slice(newline + 1);
          if (!line) continue;
          // A line that is not an event, or a handler that throws, does not end the watch, as
          // with client-node's Watch: ending it would relist and hand the same event over again.
          try {
            const event = JSON.parse(line) as { type?: unknown; object?: unknown };
            if (typeof event.type === "string") onEvent(event.type, (event.object ?? {}) as Json);
          } catch {
            // skipped
          }
        }
      }
      done(null);
    })().catch(done);
    return abort;
  }

  private async json<T>(method: string, path: string, query?: Query, body?: string, contentType?: string): Promise<T> {
    const response = await this.send(method, path, query, body, contentType, AbortSignal.timeout(REQUEST_TIMEOUT_MS));
    const text = await response.text();
    if (response.status < 200 || response.status > 299) throw new ApiError(method, path, response.status, parseBody(text), response.headers.get("retry-after"));
    try {
      return (text ? JSON.parse(text) : undefined) as T;
    } catch {
      throw new Error(`${method} ${path}: response is not JSON`);
    }
  }

  /** One request; a 401 is tried once more with credentials read afresh (a rotated token). */
  private async send(method: string, path: string, query: Query | undefined, body: string | undefined, contentType: string | undefined, signal: AbortSignal): Promise<Response> {
    const url = new URL(this.server + path);
    for (const [key, value] of Object.entries(query ?? {})) if (value !== undefined) url.searchParams.set(key, String(value));
    for (let retry = 0; ; retry++) {
      const credentials = await this.credentialsFor(url, retry > 0);
      const headers: Record<string, string> = { Accept: "application/json", ...credentials.headers };
      if (body !== undefined) headers["Content-Type"] = contentType ?? "application/json";
      const response = await fetch(url, { method, headers, body, dispatcher: credentials.dispatcher, signal });
      if (response.status !== 401 || retry > 0) return response;
      await response.body?.cancel();
    }
  }

  /** Auth headers and one shared connection pool, read again after a TTL or a 401. */
  private async credentialsFor(url: URL, refresh: boolean): Promise<Credentials> {
    if (!refresh && this.credentials && Date.now() - this.credentials.at < CREDENTIALS_TTL_MS) return this.credentials;
    const previous = this.credentials?.dispatcher;
    const read = isConnection(this.source) ? await connectionCredentials(this.source, refresh, previous) : await kubeConfigCredentials(this.source, url);
    // The TLS material does not change while the process runs; keeping the first pool keeps its
    // connections alive. Only the headers (bearer tokens) are refreshed.
    if (previous && read.dispatcher && read.dispatcher !== previous) void read.dispatcher.close().catch(() => {});
    this.credentials = { headers: read.headers, dispatcher: previous ?? read.dispatcher, at: Date.now() };
    return this.credentials;
  }
}

type Read = Omit<Credentials, "at">;

/** client-node's own code reads a KubeConfig's credentials (its plugins, its certificate files). */
async function kubeConfigCredentials(kc: KubeConfig, url: URL): Promise<Read> {
  const { RequestContext } = await import("@kubernetes/client-node");
  const ctx = new RequestContext(url.toString(), "GET" as never);
  await kc.applySecurityAuthentication(ctx);
  return { headers: { ...ctx.getHeaders() }, dispatcher: ctx.getDispatcher() as Dispatcher | undefined };
}

/** A Connection's token, and a pool with its TLS material (the one already built, if any). */
async function connectionCredentials(connection: Connection, refresh: boolean, pool: Dispatcher | undefined): Promise<Read> {
  const authorization = await connection.authorization?.(refresh);
  const headers: Record<string, string> = authorization ? { Authorization: authorization } : {};
  return { headers, dispatcher: pool ?? new Agent({ connect: tlsOptions(connection) }) };
}

/**
 * A response body as JSON. Paths the server does not serve at all answer with plain text, not a
 * Status object; that text becomes the message, so callers still get an ApiError that says why.
 */
function parseBody(text: string): unknown {
  if (!text) return undefined;
  try {
    return JSON.parse(text) as unknown;
  } catch {
    return { message: text.trim().slice(0, 200) };
  }
}
