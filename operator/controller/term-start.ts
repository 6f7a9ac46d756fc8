// Where the API server stood when this replica began to lead, per cache. Pods are created only by
// the leader: every pod an earlier leader created is older than this, and every pod this one
// creates is in `written` until the watch shows it. So once the caches have caught up to it, they
// miss no pod that may still run, and a pod create needs no live list first (as the Job
// controller trusts its informers and expectations). Until then, or if the read fails, it lists.
import type { Logger } from "pino";
import type { KubeClient } from "../kube/client.ts";
import type { Informer } from "./informer.ts";

/** How long a cache gets to catch up with the leadership's start by itself. */
const CATCH_UP_MS = 5_000;

export class TermStart {
  /** informer -> the resourceVersion of its collection when this replica began to lead. */
  private readonly versions = new Map<Informer, string>();
  private readonly client: KubeClient;
  private readonly informers: readonly Informer[];
  private readonly log: Logger;
  private stopped = false;

  constructor(client: KubeClient, informers: readonly Informer[], log: Logger) {
    this.client = client;
    this.informers = informers;
    this.log = log;
  }

  /** Reads where each cache's collection stands now; called once, as this replica begins to lead. */
  async mark(): Promise<void> {
    for (const informer of this.informers) {
      try {
        const list = await this.client.get<{ metadata: { resourceVersion: string } }>(informer.options.path, { limit: 1, labelSelector: informer.options.labelSelector });
        this.versions.set(informer, list.metadata.resourceVersion);
        // A cache catches up with the next event of its objects (or a bookmark); until then every
        // pod create lists first. One still behind after a while (a quiet namespace) lists again
        // once instead.
        const timer = setTimeout(() => {
          if (!this.stopped && !this.caughtUp(informer)) informer.refresh();
        }, CATCH_UP_MS);
        timer.unref?.();
      } catch (err) {
        this.log.warn({ err: String(err), informer: informer.options.name }, "could not read where the API server stands; pod creates list live pods first");
      }
    }
  }

  stop(): void {
    this.stopped = true;
  }

  /** Whether every cache (or `only`) has caught up to where the API server stood at the leadership's start. */
  caughtUp(only?: Informer): boolean {
    return (only ? [only] : this.informers).every((informer) => {
      // Resource versions are etcd revisions; one that is not a number proves nothing.
      const start = this.versions.get(informer);
      const now = informer.version;
      return start !== undefined && /^\d+$/.test(start) && /^\d+$/.test(now) && BigInt(now) >= BigInt(start);
    });
  }
}
