// The AgentRun controller, as wiring: informers feed the run index (run-index.ts) and a work queue;
// a pool of workers (workers.ts) hands each run to one reconcile (reconciler.ts), which decides
// from the cache (plan-run.ts) and executes plans that write anything with preconditions that
// refuse them when the cache was stale; the handler turns each plan's next deadline into a wake-up.
// A heartbeat-only update therefore costs one in-memory decision and moves a timer, and nothing
// else.
import type { Logger } from "pino";
import { LABELS } from "../api/annotations.ts";
import type { InstallDefaults } from "../api/defaults.ts";
import { paths, type Json, type KubeClient } from "../kube/client.ts";
import type { Metrics } from "../metrics/metrics.ts";
import type { SandboxIdentity } from "../watchdog/sandbox-identity.ts";
import { census, type Census } from "./census.ts";
import type { EventRecorder } from "./events.ts";
import { Informer, type InformerEvent } from "./informer.ts";
import { NodeCache } from "./nodes.ts";
import { WorkQueue } from "./queue.ts";
import { Reconciler, type RunObserver } from "./reconciler.ts";
import { RunIndex, runKey } from "./run-index.ts";
import { TermStart } from "./term-start.ts";
import { trimPod, trimRun } from "./trim.ts";
import { Wakeups } from "./wakeups.ts";
import { WorkerPool } from "./workers.ts";

export interface ControllerOptions {
  /** Namespaces to watch; empty means all. */
  namespaces: string[];
  concurrency: number;
  resyncMs: number;
  /** A watch with no sign of life for this long is restarted, and /healthz fails. */
  watchSilenceMs: number;
  /** A reconcile running longer than this means the work loop is stuck. */
  stuckReconcileMs: number;
  defaults: InstallDefaults;
  sandbox: SandboxIdentity;
  /**
   * Whether this replica may write now (it leads): every write of the controller (pod creates and
   * deletes, status and annotation patches) asks it first, so that a replica that lost the lease
   * stops writing at once. Always true without leader election.
   */
  canWrite?: () => boolean;
  /**
   * The one shard this controller supervises: it watches only the runs and pods labelled with it.
   * Without one it watches every run.
   */
  shard?: number;
  /** The node caches, when they are shared with other controllers (one per shard); else its own. */
  nodes?: NodeCache;
}

export class Controller {
  readonly queue: WorkQueue;
  private readonly wakeups: Wakeups;
  private readonly runInformers: Informer[] = [];
  private readonly podInformers: Informer[] = [];
  private readonly index: RunIndex;
  private readonly reconciler: Reconciler;
  private readonly pool: WorkerPool;
  private readonly termStart: TermStart;
  private readonly nodeCache: NodeCache;
  private stopping = false;
  private readonly options: ControllerOptions;

  constructor(client: KubeClient, metrics: Metrics, recorder: EventRecorder, log: Logger, options: ControllerOptions) {
    this.options = options;
    this.queue = new WorkQueue(metrics.queueMetrics(options.shard === undefined ? undefined : `agentrun-shard-${options.shard}`));
    // A wake-up is a deadline come (a hung sandbox's kill among them): it goes before the
    // reconciles that watch events (heartbeats) queue.
    this.wakeups = new Wakeups((key) => this.queue.addDue(key), () => client.clock.now());
    this.index = new RunIndex();
    this.nodeCache = options.nodes ?? new NodeCache(client, { resyncMs: options.resyncMs, silenceMs: options.watchSilenceMs, log });
    this.reconciler = new Reconciler(client, this.index, recorder, metrics, {
      defaults: options.defaults,
      sandbox: options.sandbox,
      canWrite: options.canWrite ?? (() => true),
      cachedRun: (key) => this.cachedRun(key),
      cacheCurrent: () => this.cacheCurrent(),
      waiting: () => this.queue.length,
      nodes: this.nodeCache,
      log,
    });
    this.pool = new WorkerPool(this.queue, this.wakeups, (key, context, podCreated) => this.reconciler.reconcile(key, context, podCreated), metrics, log, {
      concurrency: options.concurrency,
      stuckReconcileMs: options.stuckReconcileMs,
    });

    const scopes = options.namespaces.length ? options.namespaces : [undefined];
    const shard = options.shard === undefined ? undefined : `${LABELS.shard}=${options.shard}`;
    const suffix = options.shard === undefined ? "" : `#shard-${options.shard}`;
    for (const namespace of scopes) {
      const common = { resyncMs: options.resyncMs, silenceMs: options.watchSilenceMs, log };
      const runs = new Informer(client, {
        ...common,
        name: `agentruns${namespace ? `/${namespace}` : ""}${suffix}`,
        path: paths.runs(namespace),
        ...(shard ? { labelSelector: shard } : {}),
        transform: trimRun,
      });
      const pods = new Informer(client, {
        ...common,
        name: `pods${namespace ? `/${namespace}` : ""}${suffix}`,
        path: paths.pods(namespace),
        labelSelector: shard ? `${LABELS.run},${shard}` : LABELS.run,
        transform: trimPod,
      });
      runs.on((event, run, previous) => this.onRun(event, run, previous));
      pods.on((event, pod) => this.onPod(event, pod));
      this.runInformers.push(runs);
      this.podInformers.push(pods);
    }
    this.termStart = new TermStart(client, [...this.runInformers, ...this.podInformers], log);
  }

  /** Calls `observer` with each run after it has been reconciled, and `forget` once it is gone. */
  observe(observer: RunObserver, forget?: (key: string) => void): void {
    this.reconciler.observe(observer, forget);
  }

  /** Starts the informers; followers run them too, so that a new leader starts warm. */
  startInformers(): void {
    for (const informer of this.ownInformers) informer.start();
  }

  /**
   * Resolves once every cache has listed what exists, as the Job controller waits for its
   * informers before its workers start: a worker deciding from a half-filled pod cache would not
   * know of a pod that runs.
   */
  async waitForSync(signal?: AbortSignal): Promise<void> {
    while (!this.synced) {
      signal?.throwIfAborted();
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
  }

  /**
   * Starts the workers once the caches are synced; only the leader does this, once: a replica
   * that loses the lease exits.
   */
  async startWorkers(signal?: AbortSignal): Promise<void> {
    await this.waitForSync(signal);
    if (this.stopping) return;
    // Until it is known, pod creates list live pods first; the workers need not wait for it.
    void this.termStart.mark();
    for (const informer of this.runInformers) for (const run of informer.list()) this.queue.add(keyOfRun(run));
    this.pool.start();
  }

  async stop(): Promise<void> {
    this.stopping = true;
    this.termStart.stop();
    this.queue.shutDown();
    this.wakeups.clear();
    for (const informer of this.ownInformers) informer.stop();
    await this.pool.stop();
  }

  /**
   * Stops, and forgets every run it supervised (its observers too): the shard went to another
   * replica, which carries on from the objects.
   */
  async stopAndForget(): Promise<void> {
    const runs = this.runInformers.flatMap((i) => i.list());
    await this.stop();
    for (const run of runs) {
      const key = keyOfRun(run);
      this.index.forgetRun(key);
      this.reconciler.forgetRun(key);
    }
  }

  /** The informers this controller starts and stops: the node caches only when they are its own. */
  get ownInformers(): Informer[] {
    return this.options.nodes ? [...this.runInformers, ...this.podInformers] : this.informers;
  }

  /** Whether every run and pod cache has caught up to where the API server stood when this replica began to lead. */
  cacheCurrent(): boolean {
    return this.termStart.caughtUp();
  }

  get synced(): boolean {
    return this.informers.every((i) => i.synced);
  }

  /** Every cached run, or undefined until the caches are synced (the ledger catches up from it). */
  listRuns(): Json[] | undefined {
    return this.runInformers.every((i) => i.synced) ? this.runInformers.flatMap((i) => i.list()) : undefined;
  }

  get informers(): Informer[] {
    return [...this.runInformers, ...this.podInformers, ...this.nodeCache.informers];
  }

  /** Problems that should make Kubernetes restart the operator; empty when healthy. */
  healthProblems(expectWorkers: boolean): string[] {
    const problems = silentWatches(this.ownInformers);
    const longest = this.longestRunningMs();
    if (longest > this.options.stuckReconcileMs) problems.push(`a reconcile has been running for ${Math.round(longest / 1000)}s`);
    // Before the caches have synced the workers have not started yet; that is not a stop.
    const stopped = this.pool.stoppedWorkers();
    if (expectWorkers && stopped > 0) problems.push(`${stopped} of ${this.options.concurrency} workers have stopped`);
    return problems;
  }

  /** How long the oldest reconcile in flight has run (ms). */
  longestRunningMs(): number {
    return this.queue.longestRunningMs();
  }

  /** Counts runs by phase, stale heartbeats and unconfirmed sandboxes, for the gauges. */
  census(now = Date.now()): Census {
    return census(this.runInformers.flatMap((i) => i.list()), this.options.defaults, now);
  }

  private onRun(event: InformerEvent, run: Json, previous?: Json): void {
    const key = keyOfRun(run);
    if (event === "delete") {
      this.wakeups.set(key, undefined);
      this.index.forgetRun(key);
      this.reconciler.forgetRun(key);
      return;
    }
    this.index.runChanged(event, run, previous);
    this.queue.add(key);
  }

  private onPod(event: InformerEvent, pod: Json): void {
    const filed = this.index.podChanged(event, pod);
    if (!filed) return;
    if (event === "delete") this.reconciler.podGone(filed.key, pod);
    if (filed.movedFrom !== undefined) this.queue.add(filed.movedFrom);
    if (event !== "resync") this.queue.add(filed.key);
  }

  private cachedRun(key: string): Json | undefined {
    const [namespace, name] = key.split("/") as [string, string];
    for (const informer of this.runInformers) {
      const run = informer.get(namespace, name);
      if (run) return run;
    }
    return undefined;
  }
}

/** A problem for each watch silent past its limit. */
export function silentWatches(informers: readonly Informer[]): string[] {
  return informers.filter((i) => i.isSilent()).map((i) => `watch ${i.options.name} silent for ${Math.round((Date.now() - i.lastActivity) / 1000)}s`);
}

export function keyOfRun(run: Json): string {
  const meta = run.metadata as { namespace: string; name: string };
  return runKey(meta.namespace, meta.name);
}
