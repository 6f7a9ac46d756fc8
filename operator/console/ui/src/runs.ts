// The runs the page holds, fed by ./api/stream/runs: one stream for the whole app (the Runs page,
// the Queue and the header's count all read it), reopened when the namespace filter changes.
import { useEffect, useState } from "preact/hooks";
import { query, runKey } from "./api.ts";
import type { RunSummary } from "./api.ts";
import { Stream } from "./stream.ts";
import type { StreamState } from "./stream.ts";

export interface RunsView {
  /** "" is every namespace. */
  namespace: string;
  /** Sorted: the runs that need a person first, then by namespace and name. */
  runs: readonly RunSummary[];
  /** How many runs need a person. */
  needPerson: number;
  /** Whether the stream has been opened (it waits for the session, which names the default namespace). */
  started: boolean;
  /** Whether the stream's first snapshot has come. */
  loaded: boolean;
  /** The server's problem sentence (forbidden, no cluster), until the next snapshot. */
  problem?: string;
  stream: StreamState;
  /** Every namespace seen so far, sorted. */
  namespaces: readonly string[];
}

/** 0: needs a person and NeedsHumanIntervention; 1: needs a person otherwise (AwaitingReply); 2: the rest. */
function rank(r: RunSummary): number {
  if (!r.needsPerson) return 2;
  return r.phase === "NeedsHumanIntervention" ? 0 : 1;
}

export function compareRuns(a: RunSummary, b: RunSummary): number {
  const d = rank(a) - rank(b);
  if (d !== 0) return d;
  if (a.namespace !== b.namespace) return a.namespace < b.namespace ? -1 : 1;
  if (a.name !== b.name) return a.name < b.name ? -1 : 1;
  return 0;
}

function isSummary(value: unknown): value is RunSummary {
  const r = value as RunSummary | null;
  return typeof r === "object" && r !== null && typeof r.namespace === "string" && typeof r.name === "string";
}

class RunsStore {
  private byKey = new Map<string, RunSummary>();
  private seen = new Set<string>();
  private stream: Stream | undefined;
  private flushTimer: ReturnType<typeof setTimeout> | undefined;
  private listeners = new Set<() => void>();
  view: RunsView = { namespace: "", runs: [], needPerson: 0, started: false, loaded: false, stream: { open: false }, namespaces: [] };
  private namespace = "";
  private loaded = false;
  private problem: string | undefined;
  private streamState: StreamState = { open: false };

  subscribe(listener: () => void): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  get started(): boolean {
    return this.stream !== undefined;
  }

  /** Opens the stream, or reopens it for another namespace ("" is every namespace). */
  open(namespace: string): void {
    if (this.stream && namespace === this.namespace) return;
    this.stream?.close();
    this.namespace = namespace;
    this.byKey = new Map();
    this.loaded = false;
    this.problem = undefined;
    this.streamState = { open: false };
    const url = `./api/stream/runs${query({ namespace })}`;
    this.stream = new Stream(
      url,
      {
        snapshot: (data) => {
          performance.mark("console:snapshot");
          const runs = (data as { runs?: unknown } | null)?.runs;
          this.byKey = new Map();
          if (Array.isArray(runs)) for (const r of runs) if (isSummary(r)) this.byKey.set(runKey(r), r);
          this.loaded = true;
          this.problem = undefined;
          this.flush();
        },
        upsert: (data) => {
          if (!isSummary(data)) return;
          this.byKey.set(runKey(data), data);
          this.later();
        },
        remove: (data) => {
          if (!isSummary(data)) return;
          this.byKey.delete(runKey(data));
          this.later();
        },
        problem: (data) => {
          const message = (data as { message?: unknown } | null)?.message;
          this.problem = typeof message === "string" ? message : "The console's server reported a problem.";
          this.flush();
        },
      },
      (state) => {
        this.streamState = state;
        this.flush();
      },
    );
    this.flush();
  }

  // Bursts of upserts (a relist, many heartbeats) render once.
  private later(): void {
    if (this.flushTimer === undefined) this.flushTimer = setTimeout(() => this.flush(), 50);
  }

  private flush(): void {
    if (this.flushTimer !== undefined) {
      clearTimeout(this.flushTimer);
      this.flushTimer = undefined;
    }
    const runs = [...this.byKey.values()].sort(compareRuns);
    let needPerson = 0;
    const before = this.seen.size;
    for (const r of runs) {
      if (r.needsPerson) needPerson++;
      this.seen.add(r.namespace);
    }
    if (this.namespace) this.seen.add(this.namespace);
    this.view = {
      namespace: this.namespace,
      runs,
      needPerson,
      started: this.stream !== undefined,
      loaded: this.loaded,
      ...(this.problem ? { problem: this.problem } : {}),
      stream: this.streamState,
      namespaces: this.seen.size === before && this.view.namespaces.length === before ? this.view.namespaces : [...this.seen].sort(),
    };
    for (const listener of this.listeners) listener();
  }

  /** Remembers a namespace for the filter (the session's default one). */
  addNamespace(namespace: string): void {
    if (!namespace || this.seen.has(namespace)) return;
    this.seen.add(namespace);
    this.view = { ...this.view, namespaces: [...this.seen].sort() };
    for (const listener of this.listeners) listener();
  }
}

export const runsStore = new RunsStore();

export function useRuns(): RunsView {
  const [view, setView] = useState(runsStore.view);
  useEffect(() => {
    setView(runsStore.view);
    return runsStore.subscribe(() => setView(runsStore.view));
  }, []);
  return view;
}
