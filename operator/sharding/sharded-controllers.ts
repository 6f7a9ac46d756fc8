// A replica's supervision when runs are sharded: one controller per shard it holds, each with its
// own label-selected watches, queue and workers, made when the shard's Lease is acquired and
// stopped (its runs forgotten) when it is lost or handed back. The node caches are shared, and
// runs without a shard label are labelled (unlabelled.ts). Seen from the operator's entry point it
// answers as the one controller of an unsharded replica does.
import type { Logger } from "pino";
import { Controller, silentWatches, type ControllerOptions } from "../controller/controller.ts";
import { census, type Census } from "../controller/census.ts";
import type { EventRecorder } from "../controller/events.ts";
import type { Informer } from "../controller/informer.ts";
import { NodeCache } from "../controller/nodes.ts";
import type { RunObserver } from "../controller/reconciler.ts";
import type { Json, KubeClient } from "../kube/client.ts";
import type { Metrics } from "../metrics/metrics.ts";
import { UnlabelledRuns } from "./unlabelled.ts";

export interface ShardedOptions extends Omit<ControllerOptions, "canWrite" | "shard" | "nodes"> {
  shards: number;
  /** Whether this replica holds the shard's Lease within its renew deadline. */
  canWrite: (shard: number) => boolean;
  /** Called once a shard's caches have synced and its workers run. */
  synced?: (shard: number) => void;
}

export class ShardedControllers {
  private readonly controllers = new Map<number, Controller>();
  private readonly observers: [RunObserver, ((key: string) => void) | undefined][] = [];
  private readonly nodes: NodeCache;
  private readonly unlabelled: UnlabelledRuns;
  private readonly client: KubeClient;
  private readonly metrics: Metrics;
  private readonly recorder: EventRecorder;
  private readonly log: Logger;
  private readonly options: ShardedOptions;
  private stopping = false;

  constructor(client: KubeClient, metrics: Metrics, recorder: EventRecorder, log: Logger, options: ShardedOptions) {
    this.client = client;
    this.metrics = metrics;
    this.recorder = recorder;
    this.log = log;
    this.options = options;
    this.nodes = new NodeCache(client, { resyncMs: options.resyncMs, silenceMs: options.watchSilenceMs, log });
    this.unlabelled = new UnlabelledRuns(client, { ...options, silenceMs: options.watchSilenceMs, log });
  }

  observe(observer: RunObserver, forget?: (key: string) => void): void {
    this.observers.push([observer, forget]);
    for (const controller of this.controllers.values()) controller.observe(observer, forget);
  }

  /** Starts what every replica watches whatever it holds: the nodes, and the runs still without a shard. */
  startInformers(): void {
    this.nodes.start();
    this.unlabelled.start();
  }

  /** Starts supervising a shard this replica has just come to hold. */
  acquire(shard: number): void {
    if (this.stopping || this.controllers.has(shard)) return;
    const controller = new Controller(this.client, this.metrics, this.recorder, this.log.child({ shard }), {
      ...this.options,
      shard,
      nodes: this.nodes,
      canWrite: () => this.options.canWrite(shard),
    });
    for (const [observer, forget] of this.observers) controller.observe(observer, forget);
    this.controllers.set(shard, controller);
    controller.startInformers();
    void controller.startWorkers().then(
      () => {
        this.log.info({ shard }, "shard caches synced; reconciling");
        this.options.synced?.(shard);
      },
      (err: unknown) => this.log.warn({ err: String(err), shard }, "a shard's workers did not start"),
    );
    this.unlabelled.recheck();
  }

  /** Stops supervising a shard this replica no longer holds (its writes are refused already). */
  async release(shard: number): Promise<void> {
    const controller = this.controllers.get(shard);
    if (!controller) return;
    this.controllers.delete(shard);
    await controller.stopAndForget();
  }

  async stop(): Promise<void> {
    this.stopping = true;
    this.unlabelled.stop();
    this.nodes.stop();
    await Promise.all([...this.controllers.values()].map((c) => c.stop()));
  }

  get synced(): boolean {
    return this.nodes.informers.every((i) => i.synced) && [...this.controllers.values()].every((c) => c.synced);
  }

  /** Every run of the shards held, or undefined while a shard's caches are still filling. */
  listRuns(): Json[] | undefined {
    const lists = [...this.controllers.values()].map((c) => c.listRuns());
    return lists.every((l) => l !== undefined) ? lists.flat() : undefined;
  }

  get informers(): Informer[] {
    return [...this.nodes.informers, ...this.unlabelled.informers, ...[...this.controllers.values()].flatMap((c) => c.ownInformers)];
  }

  healthProblems(): string[] {
    return [...silentWatches([...this.nodes.informers, ...this.unlabelled.informers]), ...[...this.controllers.values()].flatMap((c) => c.healthProblems(c.synced))];
  }

  /** The shards' runs counted together: summed over replicas, every run once. */
  census(now = Date.now()): Census {
    return census(
      [...this.controllers.values()].flatMap((c) => c.listRuns() ?? []),
      this.options.defaults,
      now,
    );
  }

  longestRunningMs(): number {
    return Math.max(0, ...[...this.controllers.values()].map((c) => c.longestRunningMs()));
  }
}
