// A defensive list-then-watch for one browser's stream, made with the user's own credentials: it
// lists, reports the whole set, then watches from the list's resourceVersion; a watch that ends is
// resumed from the last version seen, one the server has compacted past (410 Gone) is relisted,
// and a failure is reported as a sentence and retried with backoff. It ends only when the browser
// goes away (the signal), so a restarted API server or a lost connection heals by itself.
import { ApiError, WatchError, type Json, type KubeClient } from "../kube/client.ts";

export interface ListWatchHandlers {
  /** The complete set, after every (re)list. */
  snapshot(items: Json[]): void;
  upsert(item: Json): void;
  remove(item: Json): void;
  /** Something failed; it is retried. */
  problem(err: unknown): void;
}

const BACKOFF_MS = [500, 1000, 2000, 5000, 10_000];

export async function listWatch(client: KubeClient, path: string, query: Record<string, string>, handlers: ListWatchHandlers, signal: AbortSignal): Promise<void> {
  let failures = 0;
  let version: string | undefined;
  const pause = (ms: number) =>
    new Promise<void>((resolve) => {
      const timer = setTimeout(resolve, ms);
      signal.addEventListener("abort", () => (clearTimeout(timer), resolve()), { once: true });
    });
  while (!signal.aborted) {
    try {
      if (version === undefined) {
        const list = await client.get<{ metadata?: { resourceVersion?: string }; items?: Json[] }>(path, query);
        version = list.metadata?.resourceVersion ?? "0";
        handlers.snapshot(list.items ?? []);
      }
      const started = Date.now();
      const ended = await watchOnce(client, path, query, version, handlers, signal, (rv) => (version = rv));
      failures = 0;
      if (ended === "gone") version = undefined;
      // A watch that ends at once, again and again, must not spin.
      else if (Date.now() - started < 1000) await pause(500);
    } catch (err) {
      if (signal.aborted) return;
      if (err instanceof ApiError && err.code === 410) {
        version = undefined;
        continue;
      }
      handlers.problem(err);
      await pause(BACKOFF_MS[Math.min(failures++, BACKOFF_MS.length - 1)]!);
    }
  }
}

/** One watch until it ends: "ended" to resume from the last version, "gone" to relist. */
async function watchOnce(
  client: KubeClient,
  path: string,
  query: Record<string, string>,
  from: string,
  handlers: ListWatchHandlers,
  signal: AbortSignal,
  seen: (rv: string) => void,
): Promise<"ended" | "gone"> {
  return new Promise((resolve, reject) => {
    let outcome: "ended" | "gone" = "ended";
    let controller: AbortController | undefined;
    const stop = () => controller?.abort();
    signal.addEventListener("abort", stop, { once: true });
    const done = (err: unknown) => {
      signal.removeEventListener("abort", stop);
      // A quiet watch times out and a closed one ends: both resume from the last version.
      if (err && !signal.aborted && !(err instanceof WatchError)) reject(err);
      else resolve(outcome);
    };
    client
      .watch(
        path,
        { ...query, resourceVersion: from, allowWatchBookmarks: true, timeoutSeconds: 300 },
        (type, object) => {
          const rv = (object.metadata as { resourceVersion?: string } | undefined)?.resourceVersion;
          if (type === "ERROR") {
            if ((object as { code?: number }).code === 410) outcome = "gone";
            controller?.abort();
            return;
          }
          if (rv) seen(rv);
          if (type === "ADDED" || type === "MODIFIED") handlers.upsert(object);
          else if (type === "DELETED") handlers.remove(object);
        },
        done,
      )
      .then((c) => {
        controller = c;
        if (signal.aborted) c.abort();
      }, done);
  });
}
