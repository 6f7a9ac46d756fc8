// The console's live views as Server-Sent Events: each browser page holds one stream, and the
// server holds one list-and-watch behind it, made with the user's credentials. EventSource
// reconnects by itself when the console restarts; the watch behind it heals on its own
// (list-watch.ts); failures reach the page as sentences (`problem`).
import type { ServerResponse } from "node:http";
import { explainFailure } from "../cli/plugin/cluster.ts";
import { paths, type Json, type KubeClient } from "../kube/client.ts";
import { listWatch } from "./list-watch.ts";
import { runForPage, runSummary } from "./summary.ts";

const KEEPALIVE_MS = 15_000;

/** An open event stream to one page; ends when the page goes away. */
export class EventStream {
  readonly closed: AbortSignal;
  private readonly res: ServerResponse;

  constructor(res: ServerResponse) {
    this.res = res;
    const controller = new AbortController();
    this.closed = controller.signal;
    res.writeHead(200, { "Content-Type": "text/event-stream; charset=utf-8", "Cache-Control": "no-store", "X-Accel-Buffering": "no" });
    // How long the browser waits before it reconnects.
    res.write("retry: 2000\n\n");
    const keepalive = setInterval(() => res.write(": keepalive\n\n"), KEEPALIVE_MS);
    res.once("close", () => {
      clearInterval(keepalive);
      controller.abort();
    });
  }

  send(event: string, data: unknown): void {
    if (this.closed.aborted) return;
    this.res.write(`event: ${event}\ndata: ${JSON.stringify(data)}\n\n`);
  }
}

const nameOf = (item: Json) => {
  const meta = (item.metadata ?? {}) as { namespace?: string; name?: string };
  return { namespace: meta.namespace ?? "", name: meta.name ?? "" };
};

/** Every run of a namespace (or of all) as summaries: a snapshot, then each change. */
export function streamRuns(client: KubeClient, namespace: string | undefined, stream: EventStream): Promise<void> {
  return listWatch(
    client,
    paths.runs(namespace),
    {},
    {
      snapshot: (items) => stream.send("snapshot", { runs: items.map(runSummary) }),
      upsert: (item) => stream.send("upsert", runSummary(item)),
      remove: (item) => stream.send("remove", nameOf(item)),
      problem: (err) => stream.send("problem", { message: explainFailure(err, client.server) }),
    },
    stream.closed,
  );
}

/**
 * One run, whole: each version as it changes, each followed by its `summary` (the figures the
 * server works out of it, such as its budget's, which the page cannot); `remove` when it is
 * deleted or not there.
 */
export function streamRun(client: KubeClient, namespace: string, name: string, stream: EventStream): Promise<void> {
  const send = (item: Json) => {
    stream.send("run", runForPage(item));
    stream.send("summary", runSummary(item));
  };
  return listWatch(
    client,
    paths.runs(namespace),
    { fieldSelector: `metadata.name=${name}` },
    {
      snapshot: (items) => (items[0] ? send(items[0]) : stream.send("remove", { namespace, name })),
      upsert: send,
      remove: () => stream.send("remove", { namespace, name }),
      problem: (err) => stream.send("problem", { message: explainFailure(err, client.server) }),
    },
    stream.closed,
  );
}
