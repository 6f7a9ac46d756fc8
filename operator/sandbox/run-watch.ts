// The sandbox's view of its own AgentRun: a list of that one object (by field selector), then a
// watch from the list's resourceVersion, both redone whenever the watch ends. Nudges, approvals and
// fencing all arrive through it, so it must never silently stop: every close or error leads to a
// reconnect with backoff until stop().
//
// The watch starts from the list's resourceVersion, not the object's: the object may not have
// changed for a long time, and after the API server rebuilds its watch cache (a CRD update does
// that) a watch from such an old version is refused as too old, again and again, until the object
// next changes. The list's version is always current.
import { runPaths, type Json, type SandboxApi } from "./api-client.ts";
import type { SandboxLogger } from "./log.ts";

export interface RunWatchHandlers {
  onRun(run: Json): void;
  onDeleted(): void;
}

const MIN_BACKOFF_MS = 500;
const MAX_BACKOFF_MS = 10_000;
/** The server ends each watch after this long; a clean close is then just a reconnect. */
const SERVER_TIMEOUT_SECONDS = 300;
/** Longer than the server's own timeout, so the client only gives up on a connection truly gone. */
const INACTIVITY_TIMEOUT_MS = (SERVER_TIMEOUT_SECONDS + 30) * 1000;

export class RunWatch {
  private readonly client: SandboxApi;
  private readonly namespace: string;
  private readonly name: string;
  private readonly handlers: RunWatchHandlers;
  private readonly log: SandboxLogger;
  private abort?: AbortController;
  private timer?: ReturnType<typeof setTimeout>;
  private backoffMs = MIN_BACKOFF_MS;
  private stopped = false;
  /** How many times the watch was re-established. */
  restarts = 0;

  constructor(client: SandboxApi, namespace: string, name: string, handlers: RunWatchHandlers, log: SandboxLogger) {
    this.client = client;
    this.namespace = namespace;
    this.name = name;
    this.handlers = handlers;
    this.log = log;
  }

  start(): void {
    void this.connect();
  }

  stop(): void {
    this.stopped = true;
    if (this.timer) clearTimeout(this.timer);
    this.abort?.abort();
  }

  private async connect(): Promise<void> {
    if (this.stopped) return;
    const fieldSelector = `metadata.name=${this.name}`;
    let list: { metadata?: { resourceVersion?: string }; items?: Json[] };
    try {
      list = await this.client.get(runPaths.runs(this.namespace), { fieldSelector });
    } catch (err) {
      this.ended(err);
      return;
    }
    if (this.stopped) return;
    const run = list.items?.[0];
    if (!run) {
      this.handlers.onDeleted();
      return;
    }
    this.handlers.onRun(run);
    const query = {
      fieldSelector,
      resourceVersion: list.metadata?.resourceVersion,
      allowWatchBookmarks: true,
      timeoutSeconds: SERVER_TIMEOUT_SECONDS,
    };
    try {
      const abort = await this.client.watch(
        runPaths.runs(this.namespace),
        query,
        (type, object) => this.onEvent(type, object),
        (err) => this.ended(err),
        INACTIVITY_TIMEOUT_MS,
      );
      if (this.stopped) abort.abort();
      else this.abort = abort;
    } catch (err) {
      this.ended(err);
    }
  }

  private onEvent(type: string, object: Json): void {
    if (this.stopped) return;
    // ERROR (e.g. 410 Gone) is followed by the server closing the stream, and the reconnect lists
    // afresh; it is no sign that the watch works, so it keeps the backoff growing.
    if (type === "ERROR") {
      this.log.debug({ status: object }, "watch of the run reported an error");
      return;
    }
    this.backoffMs = MIN_BACKOFF_MS;
    if (type === "ADDED" || type === "MODIFIED") this.handlers.onRun(object);
    else if (type === "DELETED") this.handlers.onDeleted();
  }

  private ended(err: unknown): void {
    if (this.stopped) return;
    if (err) this.log.debug({ err: String(err) }, "watch of the run ended; reconnecting");
    const delay = this.backoffMs;
    this.backoffMs = Math.min(MAX_BACKOFF_MS, this.backoffMs * 2);
    this.timer = setTimeout(() => {
      this.restarts++;
      void this.connect();
    }, delay);
  }
}
