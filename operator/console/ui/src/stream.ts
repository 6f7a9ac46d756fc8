// A Server-Sent Events stream of the console's server, with what the page must know about it:
// whether it is live (the header's Live indicator), and, when it is not, why (in a sentence).
// Live means the server is watching the cluster for this page: the stream is open and its last
// word was data, not a `problem` (an API server that cannot be reached, a forbidden list).
//
// EventSource reconnects by itself after a dropped connection, but gives up for good when the
// server answers an error status (401, 403, 404, 5xx) and does not say which: then the stream
// asks the same URL with fetch to learn why, and opens again after a backoff (not after a 401:
// only the session link helps then).
import { diagnose } from "./api.ts";

export interface StreamState {
  open: boolean;
  /** Why the stream is not open, when known. */
  error?: string;
  /** The HTTP status that closed it, when it was one (404: the thing streamed is not there). */
  status?: number;
}

type Handlers = Record<string, (data: unknown) => void>;

// Every open stream of the page, for the Live indicator: live while all of them are open.
const streams = new Map<Stream, boolean>();
const liveListeners = new Set<() => void>();
function setLive(stream: Stream, open: boolean | undefined): void {
  if (open === undefined) streams.delete(stream);
  else streams.set(stream, open);
  for (const listener of liveListeners) listener();
}
export function isLive(): boolean {
  if (streams.size === 0) return false;
  for (const open of streams.values()) if (!open) return false;
  return true;
}
export function onLiveChange(listener: () => void): () => void {
  liveListeners.add(listener);
  return () => liveListeners.delete(listener);
}

const MAX_BACKOFF_MS = 15_000;

export class Stream {
  private source: EventSource | undefined;
  private closed = false;
  private retry: ReturnType<typeof setTimeout> | undefined;
  private backoff = 1000;
  private diagnosing = false;
  state: StreamState = { open: false };

  private readonly url: string;
  private readonly handlers: Handlers;
  private readonly onState: (state: StreamState) => void;

  constructor(url: string, handlers: Handlers, onState: (state: StreamState) => void) {
    this.url = url;
    this.handlers = handlers;
    this.onState = onState;
    setLive(this, false);
    this.connect();
  }

  close(): void {
    this.closed = true;
    if (this.retry !== undefined) clearTimeout(this.retry);
    this.source?.close();
    this.source = undefined;
    setLive(this, undefined);
  }

  private set(state: StreamState): void {
    this.state = state;
    setLive(this, state.open);
    this.onState(state);
  }

  private connect(): void {
    if (this.closed) return;
    const source = new EventSource(this.url);
    this.source = source;
    source.onopen = () => {
      if (this.source !== source) return;
      this.backoff = 1000;
    };
    for (const [event, handle] of Object.entries(this.handlers)) {
      source.addEventListener(event, (e) => {
        if (this.source !== source) return;
        let data: unknown;
        try {
          data = JSON.parse((e as MessageEvent<string>).data);
        } catch {
          console.warn(`console: ignoring a ${event} event that is not JSON`);
          return;
        }
        if (event === "problem") {
          const message = (data as { message?: unknown } | null)?.message;
          this.set({ open: false, ...(typeof message === "string" ? { error: message } : {}) });
        } else if (!this.state.open) {
          this.set({ open: true });
        }
        handle(data);
      });
    }
    source.onerror = () => {
      if (this.source !== source || this.closed) return;
      if (source.readyState === EventSource.CLOSED) {
        // Given up: find out why, say so, and open again later.
        this.source = undefined;
        this.set({ open: false, ...(this.state.error ? { error: this.state.error } : {}) });
        void diagnose(this.url).then((d) => {
          if (this.closed) return;
          this.set({ open: false, ...(d.message ? { error: d.message } : {}), ...(d.status ? { status: d.status } : {}) });
          if (d.status === 401) return;
          this.retry = setTimeout(() => this.connect(), this.backoff);
          this.backoff = Math.min(this.backoff * 2, MAX_BACKOFF_MS);
        });
        return;
      }
      // Reconnecting by itself: keep what was shown, learn whether the server is there at all.
      this.set({ open: false, ...(this.state.error ? { error: this.state.error } : {}) });
      if (this.diagnosing) return;
      this.diagnosing = true;
      void diagnose("./api/session").then((d) => {
        this.diagnosing = false;
        if (this.closed || this.state.open) return;
        if (d.message) this.set({ open: false, error: d.message, ...(d.status ? { status: d.status } : {}) });
      });
    };
  }
}
