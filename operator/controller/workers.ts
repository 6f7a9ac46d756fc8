// The worker pool and the one handler of reconciles (controller-runtime's reconcileHandler): each
// worker takes a run from the queue, reconciles it, and maps what came back, or was thrown, onto
// the wake-ups, the queue and the reconcile metrics.
import type { Logger } from "pino";
import { isConflict } from "../kube/client.ts";
import { CONTROLLER, type Metrics } from "../metrics/metrics.ts";
import type { WorkQueue } from "./queue.ts";
import type { ReconcileContext } from "./executor.ts";
import type { ReconcileResult } from "./reconciler.ts";
import type { Wakeups } from "./wakeups.ts";

/** One reconcile: `podCreated` says the worker may go on while the writes after a pod create finish. */
export type Reconcile = (key: string, context: ReconcileContext, podCreated: () => void) => Promise<ReconcileResult>;

export interface WorkerPoolOptions {
  concurrency: number;
  /** Past half of this a reconcile writes nothing more; still running at it, it is stuck (health). */
  stuckReconcileMs: number;
}

/**
 * How many of `concurrency` workers take only runs whose deadline has come (a kill, a backoff's
 * end): a quarter, at least one once there are two. Under a load of routine reconciles whose writes
 * the API server answers slowly, every other worker can be held for seconds; these are free for
 * the next kill as soon as they finish the last one.
 */
export function dueOnlyWorkers(concurrency: number): number {
  return concurrency < 2 ? 0 : Math.max(1, Math.floor(concurrency / 4));
}

export class WorkerPool {
  private readonly queue: WorkQueue;
  private readonly wakeups: Wakeups;
  private readonly reconcile: Reconcile;
  private readonly metrics: Metrics;
  private readonly log: Logger;
  private readonly options: WorkerPoolOptions;
  /** Aborted at stop: reconciles under way write nothing more. */
  private readonly stopped = new AbortController();
  /** Workers running their loop. */
  private workers = 0;
  /** Trailing writes of runs whose worker went on after the pod create (see worker). */
  private trailing = 0;
  /** Reconciles under way, trailing ones included. */
  private processing = 0;
  private started = false;

  constructor(queue: WorkQueue, wakeups: Wakeups, reconcile: Reconcile, metrics: Metrics, log: Logger, options: WorkerPoolOptions) {
    this.queue = queue;
    this.wakeups = wakeups;
    this.reconcile = reconcile;
    this.metrics = metrics;
    this.log = log;
    this.options = options;
    metrics.maxConcurrentReconciles.set({ controller: CONTROLLER }, options.concurrency);
    metrics.activeWorkers.set({ controller: CONTROLLER }, 0);
  }

  start(): void {
    this.started = true;
    const dueOnly = dueOnlyWorkers(this.options.concurrency);
    for (let i = 0; i < this.options.concurrency; i++) void this.worker(i < dueOnly);
  }

  /** Aborts the reconciles under way and waits up to `ms` for them (the queue is shut down by the caller). */
  async stop(ms = 10_000): Promise<void> {
    this.stopped.abort(new Error("the operator is stopping"));
    const deadline = Date.now() + ms;
    while ((this.workers > 0 || this.processing > 0) && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
  }

  /** Workers that have stopped although the pool runs (empty before it starts and after it stops). */
  stoppedWorkers(): number {
    return this.started && !this.stopped.signal.aborted ? this.options.concurrency - this.workers : 0;
  }

  /**
   * A worker takes one run at a time. A new run waits only for its pod create: the status and
   * annotation writes after it need not hold the worker, which goes on to the next run while they
   * finish (at most `concurrency` such trailing writes at once), so that a burst of new runs gets
   * its pods first. The run stays in processing until its writes are done: no other worker takes
   * it meanwhile, and its events wait for them.
   */
  private async worker(dueOnly: boolean): Promise<void> {
    this.workers++;
    try {
      for (;;) {
        const key = await this.queue.get(dueOnly);
        if (key === undefined) return;
        let handOff = () => {};
        const handedOff = new Promise<void>((resolve) => (handOff = resolve));
        const processed = this.process(key, () => {
          if (this.trailing >= this.options.concurrency) return false;
          handOff();
          return true;
        });
        await Promise.race([processed, handedOff]);
        // A reconcile that writes nothing never leaves the microtask queue, so a resync of 10,000
        // runs would hold the event loop until all were decided: no watch event, timer, probe or
        // scrape in between. Yield to them after each one.
        await new Promise((resolve) => setImmediate(resolve));
      }
    } finally {
      this.workers--;
    }
  }

  /**
   * The one handler: runs one reconcile and maps its result, or its error, onto the wake-ups, the
   * queue and the reconcile metrics. An error of any kind, a conflict included, is retried after
   * the run's backoff. Never throws.
   */
  private async process(key: string, mayHandOff: () => boolean): Promise<void> {
    this.processing++;
    let trailing = false;
    this.metrics.activeWorkers.inc({ controller: CONTROLLER });
    const timer = this.metrics.reconcileTime.startTimer({ controller: CONTROLLER });
    // Past its deadline a reconcile writes nothing more; one still running at the stuck limit
    // (an await that never returns) fails /healthz instead.
    const context = { signal: this.stopped.signal, deadline: Date.now() + Math.floor(this.options.stuckReconcileMs / 2) };
    try {
      const result = await this.reconcile(key, context, () => {
        if (trailing || !mayHandOff()) return;
        // The worker is free again: what remains is a trailing write, not a worker's.
        trailing = true;
        this.trailing++;
        this.metrics.activeWorkers.dec({ controller: CONTROLLER });
      });
      this.queue.forget(key);
      this.wakeups.set(key, result.wakeAt);
      if (result.requeueWhenIdle) this.queue.addWhenIdle(key);
      if (result.requeueAfterMs !== undefined) this.queue.addAfter(key, result.requeueAfterMs);
      const requeued = result.wakeAt !== undefined || result.requeueAfterMs !== undefined || result.requeueWhenIdle === true;
      this.metrics.reconcileTotal.inc({ controller: CONTROLLER, result: requeued ? "requeue_after" : "success" });
    } catch (err) {
      this.metrics.reconcileTotal.inc({ controller: CONTROLLER, result: "error" });
      this.metrics.reconcileErrors.inc({ controller: CONTROLLER });
      // A conflict is routine (a heartbeat landed after the plan was made): the cache has the newer run by the retry.
      if (isConflict(err)) this.log.debug({ err: String(err), key }, "conflict; deciding again after backoff");
      else this.log.error({ err: String(err), key }, "reconcile failed; retrying with backoff");
      this.queue.addRateLimited(key);
    } finally {
      timer();
      if (trailing) this.trailing--;
      else this.metrics.activeWorkers.dec({ controller: CONTROLLER });
      this.queue.done(key);
      this.processing--;
    }
  }
}
