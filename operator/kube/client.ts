// A small JSON client for the Kubernetes API, on the credentials of @kubernetes/client-node.
// Plain JSON in and out (no Date conversion), exact content types for merge patches, and one
// hook that sees every request so the operator can count its API writes.
import { KubeConfig, RequestContext, Watch, type HttpMethod } from "@kubernetes/client-node";
import { fetch, type Dispatcher } from "undici";

export type Json = Record<string, unknown>;

export class ApiError extends Error {
  readonly code: number;
  readonly reason: string;
  readonly body: unknown;
  constructor(method: string, path: string, code: number, body: unknown) {
    const status = body as { message?: string; reason?: string } | undefined;
    super(`${method} ${path}: ${code} ${status?.reason ?? ""} ${status?.message ?? ""}`.trim());
    this.name = "ApiError";
    this.code = code;
    this.reason = status?.reason ?? "";
    this.body = body;
  }
}

export const isNotFound = (e: unknown) => e instanceof ApiError && e.code === 404;
export const isConflict = (e: unknown) => e instanceof ApiError && e.code === 409;
export const isAlreadyExists = (e: unknown) => isConflict(e) && (e as ApiError).reason === "AlreadyExists";

export const MERGE_PATCH = "application/merge-patch+json";
export const JSON_PATCH = "application/json-patch+json";
export const APPLY_PATCH = "application/apply-patch+yaml";

export interface RequestOptions {
  query?: Record<string, string | number | boolean | undefined>;
  body?: unknown;
  contentType?: string;
  signal?: AbortSignal;
  /** Return the body as text (pod logs) instead of parsing JSON. */
  text?: boolean;
}

/** Called after every request with its method and HTTP status (0 when it never got one). */
export type RequestObserver = (method: string, code: number, ms: number) => void;

export function loadKubeConfig(): KubeConfig {
  const kc = new KubeConfig();
  kc.loadFromDefault(); // $KUBECONFIG, ~/.kube/config, or the in-cluster service account
  return kc;
}

/**
 * How long credentials are reused before they are read again: client-node builds a new TLS agent
 * (and reads certificate files) on every call, which costs a TLS handshake per request; rotated
 * service-account tokens are still picked up within this time, and at once after a 401.
 */
const CREDENTIALS_TTL_MS = 60_000;

export class KubeClient {
  readonly kc: KubeConfig;
  private readonly observers: RequestObserver[] = [];
  private readonly server: string;
  private credentials?: { headers: Record<string, string>; dispatcher: Dispatcher | undefined; at: number };

  constructor(kc: KubeConfig = loadKubeConfig()) {
    this.kc = kc;
    const cluster = kc.getCurrentCluster();
    if (!cluster) throw new Error("no current cluster in the kubeconfig");
    this.server = cluster.server.replace(/\/$/, "");
  }

  onRequest(observer: RequestObserver): void {
    this.observers.push(observer);
  }

  async request<T = Json>(method: string, path: string, options: RequestOptions = {}): Promise<T> {
    const url = new URL(this.server + path);
    for (const [key, value] of Object.entries(options.query ?? {})) {
      if (value !== undefined) url.searchParams.set(key, String(value));
    }
    const started = performance.now();
    let code = 0;
    try {
      let response;
      for (let retry = 0; ; retry++) {
        const credentials = await this.credentialsFor(url, retry > 0);
        const headers: Record<string, string> = { Accept: "application/json", ...credentials.headers };
        if (options.body !== undefined) headers["Content-Type"] = options.contentType ?? "application/json";
        response = await fetch(url, {
          method,
          headers,
          body: options.body === undefined ? undefined : typeof options.body === "string" ? options.body : JSON.stringify(options.body),
          dispatcher: credentials.dispatcher,
          signal: options.signal ?? AbortSignal.timeout(30_000),
        });
        if (response.status !== 401 || retry > 0) break;
        await response.body?.cancel();
      }
      code = response.status;
      const text = await response.text();
      if (options.text && code >= 200 && code <= 299) return text as T;
      // Paths the server does not serve at all (an API group that is not installed) answer with
      // plain text, not a Status object; keep it as text so callers still get an ApiError.
      let body: unknown = text || undefined;
      if (text) {
        try {
          body = JSON.parse(text);
        } catch {
          if (code >= 200 && code <= 299) throw new Error(`${method} ${path}: response is not JSON`);
          body = { message: text.trim().slice(0, 200) };
        }
      }
      if (code < 200 || code > 299) throw new ApiError(method, path, code, body);
      return body as T;
    } finally {
      const ms = performance.now() - started;
      for (const observe of this.observers) observe(method, code, ms);
    }
  }

  /** Auth headers and one shared connection pool, read again after a TTL or a 401. */
  private async credentialsFor(url: URL, refresh: boolean): Promise<NonNullable<KubeClient["credentials"]>> {
    if (!refresh && this.credentials && Date.now() - this.credentials.at < CREDENTIALS_TTL_MS) return this.credentials;
    const ctx = new RequestContext(url.toString(), "GET" as HttpMethod);
    await this.kc.applySecurityAuthentication(ctx);
    const previous = this.credentials?.dispatcher;
    const dispatcher = (previous ?? ctx.getDispatcher()) as Dispatcher | undefined;
    // The TLS material does not change while the process runs; keeping the first pool keeps its
    // connections alive. Only the headers (bearer tokens) are refreshed.
    if (previous && ctx.getDispatcher() !== previous) void (ctx.getDispatcher() as Dispatcher | undefined)?.close?.();
    this.credentials = { headers: { ...ctx.getHeaders() }, dispatcher, at: Date.now() };
    return this.credentials;
  }

  get<T = Json>(path: string, query?: RequestOptions["query"]): Promise<T> {
    return this.request<T>("GET", path, { query });
  }
  create<T = Json>(path: string, body: unknown, query?: RequestOptions["query"]): Promise<T> {
    return this.request<T>("POST", path, { body, query });
  }
  mergePatch<T = Json>(path: string, patch: unknown, query?: RequestOptions["query"]): Promise<T> {
    return this.request<T>("PATCH", path, { body: patch, contentType: MERGE_PATCH, query });
  }
  delete<T = Json>(path: string, body?: unknown): Promise<T> {
    return this.request<T>("DELETE", path, { body });
  }

  /**
   * Starts a watch and calls `onEvent` per event; `onDone` gets null on a normal close and the
   * error otherwise. Returns the abort controller of the request.
   */
  watch(
    path: string,
    query: Record<string, string | number | boolean | undefined>,
    onEvent: (type: string, object: Json) => void,
    onDone: (err: unknown) => void,
    inactivityTimeoutMs?: number,
  ): Promise<AbortController> {
    const watch = new Watch(this.kc);
    // The Watch aborts a connection that has carried nothing for this long (30 s by default); the
    // field is private in the typings but is the library's only knob for it.
    if (inactivityTimeoutMs !== undefined) (watch as unknown as { requestTimeoutMs: number }).requestTimeoutMs = inactivityTimeoutMs;
    const clean: Record<string, string> = {};
    for (const [k, v] of Object.entries(query)) if (v !== undefined) clean[k] = String(v);
    return watch.watch(path, clean, (type: string, object: Json) => onEvent(type, object), onDone);
  }
}

// --- paths -------------------------------------------------------------------------------------

export const paths = {
  runs: (namespace?: string) =>
    namespace ? `/apis/watchdog.dev/v1alpha1/namespaces/${namespace}/agentruns` : "/apis/watchdog.dev/v1alpha1/agentruns",
  run: (namespace: string, name: string) => `/apis/watchdog.dev/v1alpha1/namespaces/${namespace}/agentruns/${name}`,
  runStatus: (namespace: string, name: string) => `/apis/watchdog.dev/v1alpha1/namespaces/${namespace}/agentruns/${name}/status`,
  pods: (namespace?: string) => (namespace ? `/api/v1/namespaces/${namespace}/pods` : "/api/v1/pods"),
  pod: (namespace: string, name: string) => `/api/v1/namespaces/${namespace}/pods/${name}`,
  podStatus: (namespace: string, name: string) => `/api/v1/namespaces/${namespace}/pods/${name}/status`,
  events: (namespace: string) => `/apis/events.k8s.io/v1/namespaces/${namespace}/events`,
  leases: (namespace: string) => `/apis/coordination.k8s.io/v1/namespaces/${namespace}/leases`,
  lease: (namespace: string, name: string) => `/apis/coordination.k8s.io/v1/namespaces/${namespace}/leases/${name}`,
};
