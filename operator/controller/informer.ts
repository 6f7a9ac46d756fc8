// A defensive list-and-watch cache. The client library's own informer stops for good after any
// error other than 410 and can stall without a word, so this one:
// - restarts after any error, with exponential backoff and jitter;
// - relists on 410 Gone, and emits deletes for objects that vanished meanwhile;
// - asks for bookmarks and closes idle connections, so a quiet watch still shows signs of life;
// - restarts itself when it has been silent past its limit, and reports that to /healthz;
// - resyncs: periodically hands every cached object to the handler again.
import type { Logger } from "pino";
import { ApiError, type Json, type KubeClient } from "../kube/client.ts";

export type InformerEvent = "add" | "update" | "delete" | "resync";
/** `previous` is the cached object an update replaces. */
export type InformerHandler = (event: InformerEvent, object: Json, previous?: Json) => void;

export interface InformerOptions {
  name: string;
  /** Collection path, e.g. /api/v1/pods. */
  path: string;
  labelSelector?: string;
  /** Every object is handed to the handler again this often. */
  resyncMs: number;
  /** With no sign of life for this long the watch is restarted (and /healthz complains). */
  silenceMs: number;
  log: Logger;
  /**
   * What of each object the cache keeps (as controller-runtime's cache transforms do): it must
   * keep metadata.name, namespace and resourceVersion.
   */
  transform?: (object: Json) => Json;
}

/** Objects a list page holds, as client-go's reflector asks. */
const LIST_PAGE = 500;

const key = (o: Json) => {
  const meta = o.metadata as { namespace?: string; name?: string };
  return `${meta.namespace ?? ""}/${meta.name ?? ""}`;
};
const rv = (o: Json) => (o.metadata as { resourceVersion?: string }).resourceVersion;

export class Informer {
  private readonly objects = new Map<string, Json>();
  private readonly handlers: InformerHandler[] = [];
  private resourceVersion = "";
  private request?: AbortController;
  private stopped = true;
  private failures = 0;
  private generation = 0;
  private resyncTimer?: NodeJS.Timeout;
  private silenceTimer?: NodeJS.Timeout;
  private retryTimer?: NodeJS.Timeout;
  /** When the informer last heard anything from the server (ms since epoch). */
  lastActivity = 0;
  synced = false;
  restarts = 0;
  readonly options: InformerOptions;
  private readonly client: KubeClient;

  constructor(client: KubeClient, options: InformerOptions) {
    this.client = client;
    this.options = options;
  }

  on(handler: InformerHandler): void {
    this.handlers.push(handler);
  }

  /** The resourceVersion the cache has caught up to ("" before the first list). */
  get version(): string {
    return this.resourceVersion;
  }

  get(namespace: string, name: string): Json | undefined {
    return this.objects.get(`${namespace}/${name}`);
  }

  list(): Json[] {
    return [...this.objects.values()];
  }

  /** Silent for longer than allowed: the informer restarts itself, and health checks fail. */
  isSilent(now = Date.now()): boolean {
    return !this.stopped && now - this.lastActivity > this.options.silenceMs;
  }

  start(): void {
    if (!this.stopped) return;
    this.stopped = false;
    this.lastActivity = Date.now();
    this.resyncTimer = setInterval(() => this.resync(), this.options.resyncMs);
    this.resyncTimer.unref?.();
    this.silenceTimer = setInterval(() => {
      if (this.isSilent()) {
        this.options.log.warn({ informer: this.options.name, silentMs: Date.now() - this.lastActivity }, "watch silent; restarting");
        this.restart(new Error("watch silent"));
      }
    }, Math.max(1000, Math.floor(this.options.silenceMs / 4)));
    this.silenceTimer.unref?.();
    void this.run(this.generation);
  }

  stop(): void {
    this.stopped = true;
    this.generation++;
    clearInterval(this.resyncTimer);
    clearInterval(this.silenceTimer);
    clearTimeout(this.retryTimer);
    this.request?.abort();
    this.request = undefined;
  }

  private emit(event: InformerEvent, object: Json, previous?: Json): void {
    for (const handler of this.handlers) {
      try {
        handler(event, object, previous);
      } catch (err) {
        this.options.log.error({ err, informer: this.options.name }, "informer handler failed");
      }
    }
  }

  private resync(): void {
    for (const object of this.objects.values()) this.emit("resync", object);
  }

  /**
   * Lists again now and watches from there, so that the cache's version reaches where the API
   * server stands even when no event of its objects comes (a namespace with none of them yet).
   */
  refresh(): void {
    if (this.stopped) return;
    this.generation++;
    this.request?.abort();
    this.request = undefined;
    clearTimeout(this.retryTimer);
    this.resourceVersion = "";
    void this.run(this.generation);
  }

  /** Drops the current connection and starts over after a backoff. */
  private restart(err: unknown): void {
    if (this.stopped) return;
    this.generation++;
    this.request?.abort();
    this.request = undefined;
    this.failures++;
    this.restarts++;
    if (err instanceof ApiError && err.code === 410) this.resourceVersion = "";
    const base = Math.min(30_000, 500 * Math.pow(2, Math.min(this.failures - 1, 6)));
    const delay = base / 2 + Math.random() * (base / 2);
    const generation = this.generation;
    clearTimeout(this.retryTimer);
    this.retryTimer = setTimeout(() => void this.run(generation), delay);
    this.retryTimer.unref?.();
  }

  /**
   * Lists in pages of LIST_PAGE objects, as client-go's reflector does: each page is trimmed
   * before the next arrives, so 10,000 runs never sit in memory as one response. Every page is
   * of the first page's snapshot; an expired continue token lists again from the start.
   */
  private async listAll(): Promise<{ items: Json[]; resourceVersion: string }> {
    type Page = { items: Json[]; metadata: { resourceVersion: string; continue?: string } };
    const items: Json[] = [];
    let resourceVersion = "";
    let token: string | undefined;
    do {
      let page: Page;
      try {
        page = await this.client.get<Page>(this.options.path, { labelSelector: this.options.labelSelector, limit: LIST_PAGE, continue: token });
      } catch (err) {
        if (token && err instanceof ApiError && err.code === 410) return this.listAll();
        throw err;
      }
      for (const raw of page.items) items.push(this.options.transform ? this.options.transform(raw) : raw);
      resourceVersion ||= page.metadata.resourceVersion;
      token = page.metadata.continue || undefined;
    } while (token);
    return { items, resourceVersion };
  }

  private async relist(): Promise<void> {
    const list = await this.listAll();
    const seen = new Set<string>();
    for (const object of list.items) {
      const k = key(object);
      seen.add(k);
      const previous = this.objects.get(k);
      this.objects.set(k, object);
      if (!previous) this.emit("add", object);
      else if (rv(previous) !== rv(object)) this.emit("update", object, previous);
    }
    for (const [k, object] of this.objects) {
      if (!seen.has(k)) {
        this.objects.delete(k);
        this.emit("delete", object);
      }
    }
    this.resourceVersion = list.resourceVersion;
    this.synced = true;
  }

  private async run(generation: number): Promise<void> {
    if (this.stopped || generation !== this.generation) return;
    try {
      if (!this.resourceVersion) await this.relist();
      if (this.stopped || generation !== this.generation) return;
      this.lastActivity = Date.now();
      this.request = await this.client.watch(
        this.options.path,
        {
          resourceVersion: this.resourceVersion,
          allowWatchBookmarks: true,
          labelSelector: this.options.labelSelector,
          // The server ends each watch after half the silence limit, so a healthy but quiet watch
          // reconnects (a sign of life) well before it could be taken for a silent one.
          timeoutSeconds: Math.max(1, Math.floor(this.options.silenceMs / 2000)),
        },
        (type, object) => this.onEvent(generation, type, object),
        (err) => this.onDone(generation, err),
        Math.max(30_000, this.options.silenceMs),
      );
    } catch (err) {
      if (generation !== this.generation) return;
      this.options.log.warn({ err: String(err), informer: this.options.name }, "list or watch failed; retrying");
      this.restart(err);
    }
  }

  private onEvent(generation: number, type: string, raw: Json): void {
    if (generation !== this.generation) return;
    this.lastActivity = Date.now();
    this.failures = 0;
    if (type === "ERROR") {
      const code = (raw as { code?: number }).code;
      this.restart(new ApiError("WATCH", this.options.path, code ?? 500, raw));
      return;
    }
    const object = this.options.transform && type !== "BOOKMARK" ? this.options.transform(raw) : raw;
    const version = rv(object);
    if (version) this.resourceVersion = version;
    if (type === "BOOKMARK") return;
    const k = key(object);
    if (type === "DELETED") {
      if (this.objects.delete(k)) this.emit("delete", object);
      return;
    }
    const previous = this.objects.get(k);
    this.objects.set(k, object);
    if (!previous) this.emit("add", object);
    else if (rv(previous) !== version) this.emit("update", object, previous);
  }

  private onDone(generation: number, err: unknown): void {
    if (this.stopped || generation !== this.generation) return;
    const timeout = err instanceof Error && err.name === "TimeoutError";
    if (!err || timeout) {
      // A normal end of a watch: pick up where it left off at once.
      this.lastActivity = Date.now();
      this.generation++;
      void this.run(this.generation);
      return;
    }
    const status = (err as { statusCode?: number }).statusCode;
    this.options.log.warn({ err: String(err), status, informer: this.options.name }, "watch ended with an error; restarting");
    this.restart(status ? new ApiError("WATCH", this.options.path, status, undefined) : err);
  }
}
