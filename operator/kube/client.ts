// A small JSON client for the Kubernetes API on node:https: plain JSON in and out (no Date
// conversion), exact content types for merge patches, a watch that streams events, and one hook
// that sees every request so the operator can count its API writes. Credentials come from
// connection.ts, or from a client-node KubeConfig handed over by the CLI and the tests.
import { Agent, request as httpsRequest, type RequestOptions as HttpsRequestOptions } from "node:https";
import type { IncomingMessage } from "node:http";
import type { KubeConfig } from "@kubernetes/client-node";
import { ApiError } from "../api/api-error.ts";
import { tlsOptions } from "../api/service-account.ts";
import { fromKubeConfig, loadConnection, type Connection } from "./connection.ts";
import { ServerClock } from "./server-clock.ts";

export type Json = Record<string, unknown>;

export { ApiError, isAlreadyExists, isConflict, isNotFound } from "../api/api-error.ts";

const headerText = (value: string | string[] | undefined) => (Array.isArray(value) ? value[0] : value);

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

/**
 * How long an Authorization header is reused before it is asked for again: a token file is read
 * again, an exec plugin asked again; at once after a 401.
 */
const CREDENTIALS_TTL_MS = 60_000;

/** How the API server's audit log and metrics name this client. */
export const USER_AGENT = "agent-watchdog";

const isKubeConfig = (source: unknown): source is KubeConfig => typeof (source as KubeConfig | undefined)?.getCurrentCluster === "function";

/** An error that ends a watch: the HTTP status (statusCode) when the server refused it. */
export class WatchError extends Error {
  readonly statusCode?: number;
  constructor(message: string, statusCode?: number, name = "WatchError") {
    super(message);
    this.name = name;
    if (statusCode !== undefined) this.statusCode = statusCode;
  }
}

export class KubeClient {
  readonly server: string;
  /** The API server's clock, learnt from the Date header of every response. */
  readonly clock = new ServerClock();
  private readonly connection: Connection;
  private readonly agent: Agent;
  private readonly observers: RequestObserver[] = [];
  private authorization?: { header: string | undefined; at: number };

  /** With no argument: $KUBECONFIG, ~/.kube/config or the pod's service account. */
  constructor(source?: KubeConfig | Connection) {
    this.connection = source === undefined ? loadConnection() : isKubeConfig(source) ? fromKubeConfig(source) : source;
    this.server = this.connection.server;
    // One pool of kept-alive connections for every request and watch.
    this.agent = new Agent({ keepAlive: true, ...tlsOptions(this.connection) });
  }

  onRequest(observer: RequestObserver): void {
    this.observers.push(observer);
  }

  private async authorize(refresh: boolean): Promise<Record<string, string>> {
    if (!this.connection.authorization) return {};
    if (refresh || !this.authorization || Date.now() - this.authorization.at > CREDENTIALS_TTL_MS) {
      this.authorization = { header: await this.connection.authorization(refresh), at: Date.now() };
    }
    return this.authorization.header ? { Authorization: this.authorization.header } : {};
  }

  private url(path: string, query: Record<string, string | number | boolean | undefined> = {}): URL {
    const url = new URL(this.server + path);
    for (const [key, value] of Object.entries(query)) if (value !== undefined) url.searchParams.set(key, String(value));
    return url;
  }

  /** Sends one request; resolves with the response once its headers have arrived. */
  private send(method: string, url: URL, headers: Record<string, string>, body: string | undefined, signal: AbortSignal): Promise<IncomingMessage> {
    const options: HttpsRequestOptions = { method, agent: this.agent, headers: body === undefined ? headers : { ...headers, "Content-Length": String(Buffer.byteLength(body)) }, signal };
    return new Promise((resolve, reject) => {
      const req = httpsRequest(url, options, resolve);
      req.once("error", reject);
      req.end(body);
    });
  }

  async request<T = Json>(method: string, path: string, options: RequestOptions = {}): Promise<T> {
    const url = this.url(path, options.query);
    const body = options.body === undefined ? undefined : typeof options.body === "string" ? options.body : JSON.stringify(options.body);
    const signal = options.signal ?? AbortSignal.timeout(30_000);
    const started = performance.now();
    let code = 0;
    try {
      let response: IncomingMessage;
      for (let retry = 0; ; retry++) {
        const headers: Record<string, string> = { Accept: "application/json", "User-Agent": USER_AGENT, ...(await this.authorize(retry > 0)) };
        if (body !== undefined) headers["Content-Type"] = options.contentType ?? "application/json";
        const sentAt = Date.now();
        response = await this.send(method, url, headers, body, signal);
        this.clock.observe(response.headers.date, sentAt, Date.now());
        if (response.statusCode !== 401 || retry > 0 || !this.connection.authorization) break;
        response.resume();
      }
      code = response.statusCode ?? 0;
      let text = "";
      response.setEncoding("utf8");
      for await (const chunk of response) text += chunk as string;
      if (options.text && code >= 200 && code <= 299) return text as T;
      // Paths the server does not serve at all (an API group that is not installed) answer with
      // plain text, not a Status object; keep it as text so callers still get an ApiError.
      let parsed: unknown = text || undefined;
      if (text) {
        try {
          parsed = JSON.parse(text);
        } catch {
          if (code >= 200 && code <= 299) throw new Error(`${method} ${path}: response is not JSON`);
          parsed = { message: text.trim().slice(0, 200) };
        }
      }
      if (code < 200 || code > 299) throw new ApiError(method, path, code, parsed, headerText(response.headers["retry-after"]));
      return parsed as T;
    } finally {
      const ms = performance.now() - started;
      for (const observe of this.observers) observe(method, code, ms);
    }
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
   * error otherwise (a TimeoutError when nothing came for `inactivityTimeoutMs`, 30 s by default).
   * Resolves with the watch's abort controller once the server has accepted it; a server that
   * refuses it rejects with an ApiError (410 Gone among them).
   */
  async watch(
    path: string,
    query: Record<string, string | number | boolean | undefined>,
    onEvent: (type: string, object: Json) => void,
    onDone: (err: unknown) => void,
    inactivityTimeoutMs = 30_000,
  ): Promise<AbortController> {
    const controller = new AbortController();
    const url = this.url(path, { ...query, watch: true });
    let response: IncomingMessage;
    for (let retry = 0; ; retry++) {
      const headers = { Accept: "application/json", "User-Agent": USER_AGENT, ...(await this.authorize(retry > 0)) };
      const sentAt = Date.now();
      response = await this.send("GET", url, headers, undefined, controller.signal);
      this.clock.observe(response.headers.date, sentAt, Date.now());
      if (response.statusCode !== 401 || retry > 0 || !this.connection.authorization) break;
      response.resume();
    }
    const code = response.statusCode ?? 0;
    if (code !== 200) {
      let text = "";
      response.setEncoding("utf8");
      for await (const chunk of response) text += chunk as string;
      let status: unknown;
      try {
        status = JSON.parse(text);
      } catch {
        status = { message: text.trim().slice(0, 200) };
      }
      throw new ApiError("WATCH", path, code, status);
    }
    let finished = false;
    let idle: NodeJS.Timeout | undefined;
    const finish = (err: unknown) => {
      if (finished) return;
      finished = true;
      clearTimeout(idle);
      onDone(err);
    };
    const armIdle = () => {
      clearTimeout(idle);
      idle = setTimeout(() => {
        finish(new WatchError(`watch ${path}: nothing for ${inactivityTimeoutMs} ms`, undefined, "TimeoutError"));
        controller.abort();
      }, inactivityTimeoutMs);
      idle.unref?.();
    };
    armIdle();
    let buffered = "";
    response.setEncoding("utf8");
    response.on("data", (chunk: string) => {
      armIdle();
      buffered += chunk;
      let newline: number;
      while ((newline = buffered.indexOf("\n")) >= 0) {
        const line = buffered.slice(0, newline).trim();
        buffered = buffered.slice(newline + 1);
        if (!line) continue;
        let event: { type: string; object: Json };
        try {
          event = JSON.parse(line) as { type: string; object: Json };
        } catch (err) {
          finish(err);
          controller.abort();
          return;
        }
        onEvent(event.type, event.object);
      }
    });
    response.once("end", () => finish(null));
    response.once("error", (err) => finish(controller.signal.aborted && !finished ? null : err));
    response.once("close", () => finish(controller.signal.aborted ? null : new WatchError(`watch ${path}: connection closed`)));
    return controller;
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
