// Runs without a shard label (created before the admission policy was installed, or with
// generateName, which leaves the policy no name to hash): the replica that holds the shard the
// run hashes to labels it, its pods first, so that the shard's watches see the run with its pods.
// Until then no shard's holder sees the run, so nobody acts on it twice.
import type { Logger } from "pino";
import { LABELS } from "../api/annotations.ts";
import { paths, type Json, type KubeClient } from "../kube/client.ts";
import { Informer } from "../controller/informer.ts";
import { shardOf } from "./shard-of.ts";

/** How soon a label that could not be written is tried again. */
const RETRY_MS = 5_000;

export interface UnlabelledOptions {
  namespaces: string[];
  shards: number;
  resyncMs: number;
  silenceMs: number;
  /** Whether this replica holds the shard now (and so may write for it). */
  canWrite: (shard: number) => boolean;
  log: Logger;
}

const trimMeta = (run: Json): Json => {
  const meta = run.metadata as Json;
  return { metadata: { name: meta.name, namespace: meta.namespace, uid: meta.uid, resourceVersion: meta.resourceVersion } };
};

export class UnlabelledRuns {
  readonly informers: Informer[];
  private readonly client: KubeClient;
  private readonly options: UnlabelledOptions;
  private readonly inFlight = new Set<string>();
  private stopped = false;

  constructor(client: KubeClient, options: UnlabelledOptions) {
    this.client = client;
    this.options = options;
    const scopes = options.namespaces.length ? options.namespaces : [undefined];
    this.informers = scopes.map(
      (namespace) =>
        new Informer(client, {
          name: `agentruns${namespace ? `/${namespace}` : ""}#unlabelled`,
          path: paths.runs(namespace),
          labelSelector: `!${LABELS.shard}`,
          resyncMs: options.resyncMs,
          silenceMs: options.silenceMs,
          log: options.log,
          transform: trimMeta,
        }),
    );
    for (const informer of this.informers) informer.on((event, run) => event !== "delete" && this.offer(run));
  }

  start(): void {
    this.stopped = false;
    for (const informer of this.informers) informer.start();
  }

  stop(): void {
    this.stopped = true;
    for (const informer of this.informers) informer.stop();
  }

  /** Offers every unlabelled run again: this replica has just come to hold another shard. */
  recheck(): void {
    for (const informer of this.informers) for (const run of informer.list()) this.offer(run);
  }

  private offer(run: Json): void {
    const meta = run.metadata as { namespace: string; name: string; uid: string };
    const shard = shardOf(meta.namespace, meta.name, this.options.shards);
    const key = `${meta.namespace}/${meta.name}`;
    if (this.stopped || this.inFlight.has(key) || !this.options.canWrite(shard)) return;
    this.inFlight.add(key);
    this.label(meta, shard)
      .catch((err: unknown) => {
        this.options.log.warn({ err: String(err), namespace: meta.namespace, name: meta.name, shard }, "could not label a run with its shard; trying again");
        setTimeout(() => {
          const cached = this.informers.map((i) => i.get(meta.namespace, meta.name)).find(Boolean);
          if (cached) this.offer(cached);
        }, RETRY_MS).unref();
      })
      .finally(() => this.inFlight.delete(key));
  }

  private async label(meta: { namespace: string; name: string; uid: string }, shard: number): Promise<void> {
    const labels = { [LABELS.shard]: String(shard) };
    const pods = await this.client.get<{ items: Json[] }>(paths.pods(meta.namespace), { labelSelector: `${LABELS.run}=${meta.name},!${LABELS.shard}` });
    for (const pod of pods.items) {
      const podMeta = pod.metadata as { name: string; ownerReferences?: { uid: string }[] };
      if (!podMeta.ownerReferences?.some((o) => o.uid === meta.uid)) continue;
      if (!this.options.canWrite(shard)) return;
      await this.client.mergePatch(paths.pod(meta.namespace, podMeta.name), { metadata: { labels } });
    }
    if (!this.options.canWrite(shard)) return;
    // The uid precondition: a run deleted and made again under the same name is not labelled by mistake for its pods.
    await this.client.mergePatch(paths.run(meta.namespace, meta.name), { metadata: { uid: meta.uid, labels } });
    this.options.log.info({ namespace: meta.namespace, name: meta.name, shard }, "labelled a run with its shard");
  }
}
