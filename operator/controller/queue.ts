// A rate-limited, de-duplicating work queue in the manner of client-go's workqueue:
// - a key waiting in the queue is queued once, however often it is added;
// - a key being processed is never handed to a second worker; if it is added meanwhile, it is
//   queued again when the first worker is done;
// - failed keys come back after max(per-key exponential backoff, overall token bucket);
// - keys added "when idle" are handed out only when no other key waits, so that work which may
//   trail (a run's mirror annotations) takes only the workers' idle time; a plain add makes such a
//   key urgent again;
// - keys whose deadline has come (addDue: a hung sandbox's kill, a backoff's end) are handed out
//   before any other: under a flood of watch events (heartbeats) a kill waits for a free worker,
//   never behind the flood; and a worker may ask for due keys only (get(true)), so that some
//   workers are free for a kill even while every other one is busy with routine writes.

import type { QueueMetrics } from "../metrics/metrics.ts";

const noMetrics: QueueMetrics = { depth() {}, add() {}, retry() {}, latency() {}, workDuration() {} };

/** Per-key exponential backoff: base * 2^failures, capped (client-go: 5 ms to 1000 s). */
export class ItemBackoff {
  private readonly failures = new Map<string, number>();
  private readonly baseMs: number;
  private readonly maxMs: number;
  constructor(baseMs = 5, maxMs = 1_000_000) {
    this.baseMs = baseMs;
    this.maxMs = maxMs;
  }
  when(key: string): number {
    const n = this.failures.get(key) ?? 0;
    this.failures.set(key, n + 1);
    return Math.min(this.maxMs, this.baseMs * Math.pow(2, n));
  }
  retries(key: string): number {
    return this.failures.get(key) ?? 0;
  }
  forget(key: string): void {
    this.failures.delete(key);
  }
}

/** An overall token bucket (client-go: 10 per second, burst 100): returns how long to wait. */
export class TokenBucket {
  private tokens: number;
  private last: number;
  private readonly qps: number;
  private readonly burst: number;
  private readonly clock: () => number;
  constructor(qps = 10, burst = 100, clock: () => number = Date.now) {
    this.qps = qps;
    this.burst = burst;
    this.clock = clock;
    this.tokens = burst;
    this.last = clock();
  }
  reserve(): number {
    const now = this.clock();
    this.tokens = Math.min(this.burst, this.tokens + ((now - this.last) / 1000) * this.qps);
    this.last = now;
    this.tokens -= 1;
    return this.tokens >= 0 ? 0 : (-this.tokens / this.qps) * 1000;
  }
}

export class WorkQueue {
  /** Keys waiting at due priority, oldest first (also in `dirty`). */
  private readonly dueQueue = new Set<string>();
  /** Dirty keys with a deadline that has come: handed out first. */
  private readonly due = new Set<string>();
  /** Keys waiting at normal priority, oldest first (also in `dirty`). */
  private readonly queue = new Set<string>();
  /** Keys waiting at idle priority, oldest first (also in `dirty`). */
  private readonly idleQueue = new Set<string>();
  /** Dirty keys whose pending work is idle work only. */
  private readonly idle = new Set<string>();
  private readonly dirty = new Set<string>();
  private readonly processing = new Set<string>();
  private readonly addedAt = new Map<string, number>();
  private readonly startedAt = new Map<string, number>();
  private readonly delayed = new Map<string, { at: number; timer: NodeJS.Timeout }>();
  /** Workers waiting for any key, and workers waiting for a due key only. */
  private readonly waiters: ((key: string | undefined) => void)[] = [];
  private readonly dueOnlyWaiters: ((key: string | undefined) => void)[] = [];
  private readonly backoff = new ItemBackoff();
  private readonly bucket = new TokenBucket();
  private shuttingDown = false;
  private readonly metrics: QueueMetrics;

  constructor(metrics: QueueMetrics = noMetrics) {
    this.metrics = metrics;
  }

  add(key: string): void {
    if (this.shuttingDown) return;
    this.metrics.add();
    if (this.dirty.has(key)) {
      // Waiting at idle priority: it is urgent now.
      if (this.idle.delete(key) && this.idleQueue.delete(key)) this.push(key);
      return;
    }
    this.dirty.add(key);
    this.addedAt.set(key, performance.now());
    if (this.processing.has(key)) return; // re-queued by done()
    this.push(key);
  }

  /** Adds a key whose deadline has come: handed out before every other waiting key. */
  addDue(key: string): void {
    if (this.shuttingDown) return;
    this.metrics.add();
    this.due.add(key);
    this.idle.delete(key);
    if (this.dirty.has(key)) {
      // Waiting already, at another priority: it moves to the front.
      if (this.queue.delete(key) || this.idleQueue.delete(key)) this.push(key);
      return;
    }
    this.dirty.add(key);
    this.addedAt.set(key, performance.now());
    if (this.processing.has(key)) return; // re-queued by done(), still due
    this.push(key);
  }

  /** Adds the key at idle priority: handed out only when no other key waits. */
  addWhenIdle(key: string): void {
    if (this.shuttingDown) return;
    this.metrics.add();
    if (this.dirty.has(key)) return; // queued already, at either priority
    this.dirty.add(key);
    this.idle.add(key);
    this.addedAt.set(key, performance.now());
    if (this.processing.has(key)) return; // re-queued by done()
    this.push(key);
  }

  /** Adds the key after `ms`; an earlier pending delay for the same key wins. */
  addAfter(key: string, ms: number): void {
    if (this.shuttingDown) return;
    if (ms <= 0) return this.add(key);
    const at = Date.now() + ms;
    const pending = this.delayed.get(key);
    if (pending && pending.at <= at) return;
    if (pending) clearTimeout(pending.timer);
    const timer = setTimeout(() => {
      this.delayed.delete(key);
      this.add(key);
    }, ms);
    timer.unref?.();
    this.delayed.set(key, { at, timer });
  }

  /** Adds a failed key back after its backoff. */
  addRateLimited(key: string): void {
    this.metrics.retry();
    this.addAfter(key, Math.max(this.backoff.when(key), this.bucket.reserve()));
  }

  /** Clears a key's failure history once it succeeds. */
  forget(key: string): void {
    this.backoff.forget(key);
  }

  retries(key: string): number {
    return this.backoff.retries(key);
  }

  /** The next key to process (with `dueOnly`, the next due one), or undefined once the queue is shut down. */
  get(dueOnly = false): Promise<string | undefined> {
    const key = first(this.dueQueue) ?? (dueOnly ? undefined : (first(this.queue) ?? first(this.idleQueue)));
    if (key !== undefined) return Promise.resolve(this.take(key));
    if (this.shuttingDown) return Promise.resolve(undefined);
    return new Promise((resolve) => (dueOnly ? this.dueOnlyWaiters : this.waiters).push(resolve));
  }

  done(key: string): void {
    this.processing.delete(key);
    const started = this.startedAt.get(key);
    if (started !== undefined) this.metrics.workDuration((performance.now() - started) / 1000);
    this.startedAt.delete(key);
    if (this.dirty.has(key)) this.push(key);
  }

  get length(): number {
    return this.dueQueue.size + this.queue.size + this.idleQueue.size;
  }

  /** How long the oldest key being processed has been at it (ms), 0 when idle. */
  longestRunningMs(now = performance.now()): number {
    let longest = 0;
    for (const started of this.startedAt.values()) longest = Math.max(longest, now - started);
    return longest;
  }

  shutDown(): void {
    this.shuttingDown = true;
    for (const { timer } of this.delayed.values()) clearTimeout(timer);
    this.delayed.clear();
    for (const waiter of [...this.waiters.splice(0), ...this.dueOnlyWaiters.splice(0)]) waiter(undefined);
    // Nothing left here will be worked on (a shard handed back is another replica's to work now).
    this.metrics.depth(0);
  }

  private push(key: string): void {
    // A due key goes to a due-only worker first, keeping the others for routine work; any other
    // key only to a worker that takes every kind.
    const due = this.due.has(key);
    const waiter = (due ? this.dueOnlyWaiters.shift() : undefined) ?? this.waiters.shift();
    if (waiter) {
      waiter(this.take(key));
      return;
    }
    if (due) this.dueQueue.add(key);
    else if (this.idle.has(key)) this.idleQueue.add(key);
    else this.queue.add(key);
    this.metrics.depth(this.length);
  }

  private take(key: string): string {
    this.dirty.delete(key);
    this.idle.delete(key);
    this.due.delete(key);
    this.processing.add(key);
    const added = this.addedAt.get(key);
    if (added !== undefined) this.metrics.latency((performance.now() - added) / 1000);
    this.addedAt.delete(key);
    this.startedAt.set(key, performance.now());
    this.metrics.depth(this.length);
    return key;
  }
}

/** Takes the oldest key of a set, in insertion order. */
function first(keys: Set<string>): string | undefined {
  const key = keys.values().next().value;
  if (key !== undefined) keys.delete(key);
  return key;
}
