// Leader election on a coordination.k8s.io Lease, with controller-runtime's timings: a 15 s
// lease, a 10 s renew deadline and a 2 s retry period. Expiry is judged by the local time at which
// this replica last saw the lease change (as client-go does), never by the holder's clock.
//
// Leadership must never overlap. Another replica may take the lease 15 s after it last saw it
// change; this one stops leading 10 s after its last successful renew was sent, by a timer of its
// own that no hung request can hold up. The 5 s between the two absorb timer lateness and the time
// the record took to reach the other replica. Durations are measured on a monotonic clock, so a
// step of the wall clock neither shortens nor extends a lease.
import type { Logger } from "pino";
import { isConflict, isNotFound, paths, type Json, type KubeClient } from "../kube/client.ts";

export interface LeaderOptions {
  namespace: string;
  name: string;
  identity: string;
  leaseDurationMs: number;
  renewDeadlineMs: number;
  retryPeriodMs: number;
}

/** How long after another's lease has expired, by this replica's clock, it tries to take it. */
export const EXPIRY_MARGIN_MS = 20;

export const LEADER_DEFAULTS = { leaseDurationMs: 15_000, renewDeadlineMs: 10_000, retryPeriodMs: 2_000 };

/** How long handing the lease back may take: the other replica takes over at its next retry. */
export const RELEASE_TIMEOUT_MS = 1_000;

/** The clocks the elector reads; tests replace them. */
export interface LeaderClock {
  /** Monotonic milliseconds, for every duration. */
  monotonic(): number;
  /** Wall-clock milliseconds, only for the times written into the record. */
  wall(): number;
}

export const systemClock: LeaderClock = { monotonic: () => performance.now(), wall: () => Date.now() };

export interface LeaseSpec {
  holderIdentity?: string;
  leaseDurationSeconds?: number;
  acquireTime?: string;
  renewTime?: string;
  leaseTransitions?: number;
}

export const microTime = (ms: number) => new Date(ms).toISOString().replace(/\.(\d{3})Z$/, ".$1000Z");

/** Why an attempt on the lease was abandoned (the reason of its AbortSignal). */
export class LeaseAttemptAborted extends Error {
  constructor(why: string) {
    super(why);
    this.name = "LeaseAttemptAborted";
  }
}

/** The spec of a Lease `identity` holds as of `now`, taking it over from `previous` or renewing it. */
export function heldLeaseSpec(identity: string, leaseDurationMs: number, now: number, previous?: LeaseSpec): LeaseSpec {
  const keep = previous?.holderIdentity === identity;
  return {
    holderIdentity: identity,
    leaseDurationSeconds: Math.round(leaseDurationMs / 1000),
    acquireTime: keep && previous?.acquireTime ? previous.acquireTime : microTime(now),
    renewTime: microTime(now),
    leaseTransitions: keep ? (previous?.leaseTransitions ?? 0) : (previous?.leaseTransitions ?? -1) + 1,
  };
}

export class LeaderElector {
  private readonly client: KubeClient;
  private readonly options: LeaderOptions;
  private readonly log: Logger;
  private readonly clock: LeaderClock;
  private leading = false;
  /** Set once leadership is lost or released: this elector never campaigns again. */
  private stopped = false;
  private retryTimer?: NodeJS.Timeout;
  private deadlineTimer?: NodeJS.Timeout;
  /** The attempt on the lease now in flight, aborted when the deadline passes or on release. */
  private attempt?: AbortController;
  /** Monotonic time at which the last successful renew was sent (not when its answer came). */
  private lastRenew = 0;
  private observed?: { record: string; at: number; holder: string; durationMs: number };
  private onStarted: () => void = () => {};
  private onStopped: () => void = () => {};

  constructor(client: KubeClient, options: LeaderOptions, log: Logger, clock: LeaderClock = systemClock) {
    this.client = client;
    this.options = options;
    this.clock = clock;
    this.log = log.child({ lease: `${options.namespace}/${options.name}`, identity: options.identity });
  }

  get isLeader(): boolean {
    return this.leading;
  }

  /**
   * Whether this replica may write now: it leads and its renew deadline has not passed. This reads
   * the clock, so it turns false at the deadline even when the timer that ends leadership is late.
   */
  canWrite(): boolean {
    return this.leading && this.clock.monotonic() < this.lastRenew + this.options.renewDeadlineMs;
  }

  /**
   * Runs the election loop; `started` is called on gaining the lease, `stopped` on losing it (after
   * which the elector does nothing more: the process is expected to exit, as controller-runtime's).
   */
  run(started: () => void, stopped: () => void): void {
    this.onStarted = started;
    this.onStopped = stopped;
    void this.tick();
  }

  /**
   * How long one attempt (a get and a put) may take. Half the renew deadline, so that a request
   * stuck on a dead connection still leaves time for a second attempt on a new one; and never past
   * the deadline itself, where the attempt could no longer keep leadership anyway.
   */
  private attemptBudget(startedAt: number): number {
    const budget = this.options.renewDeadlineMs / 2;
    return this.leading ? Math.min(budget, this.lastRenew + this.options.renewDeadlineMs - startedAt) : budget;
  }

  private async tick(): Promise<void> {
    if (this.stopped) return;
    const startedAt = this.clock.monotonic();
    const attempt = new AbortController();
    this.attempt = attempt;
    const timeout = setTimeout(() => attempt.abort(new LeaseAttemptAborted("the lease request timed out")), this.attemptBudget(startedAt));
    let renewed = false;
    try {
      renewed = await this.tryAcquireOrRenew(this.clock.wall(), attempt.signal);
    } catch (err) {
      if (!this.stopped) this.log.warn({ err: String(err) }, "lease update failed");
    } finally {
      clearTimeout(timeout);
      if (this.attempt === attempt) this.attempt = undefined;
    }
    // Lost or released while the attempt was in flight: what it returned no longer counts.
    if (this.stopped) return;
    if (renewed) this.renewed(startedAt);
    else this.checkDeadline();
    if (this.stopped) return;
    // Attempts start one retry period apart; one that took longer is followed at once. A replica
    // waiting for another's lease tries again the moment it expires, not up to a period later, so
    // that a dead leader is replaced within the lease duration of when this replica saw it renew.
    let wait = Math.max(0, startedAt + this.options.retryPeriodMs - this.clock.monotonic());
    const other = this.observed && this.observed.holder !== "" && this.observed.holder !== this.options.identity ? this.observed : undefined;
    if (!this.leading && other) wait = Math.min(wait, Math.max(0, other.at + other.durationMs + EXPIRY_MARGIN_MS - this.clock.monotonic()));
    this.retryTimer = setTimeout(() => void this.tick(), wait);
  }

  private renewed(sentAt: number): void {
    this.lastRenew = sentAt;
    if (!this.leading) {
      this.leading = true;
      this.log.info("acquired the lease; leading");
      this.onStarted();
    }
    this.armDeadline();
  }

  /** Ends leadership when the renew deadline passes, whatever the request in flight is doing. */
  private armDeadline(): void {
    clearTimeout(this.deadlineTimer);
    const left = this.lastRenew + this.options.renewDeadlineMs - this.clock.monotonic();
    this.deadlineTimer = setTimeout(() => this.checkDeadline(), Math.max(0, left));
  }

  private checkDeadline(): void {
    if (!this.leading || this.stopped) return;
    if (this.canWrite()) this.armDeadline(); // a timer that fired a moment early
    else this.lose("could not renew the lease within the renew deadline");
  }

  private lose(why: string): void {
    this.leading = false;
    this.stopped = true;
    clearTimeout(this.retryTimer);
    clearTimeout(this.deadlineTimer);
    this.attempt?.abort(new LeaseAttemptAborted(why));
    this.log.error(why);
    this.onStopped();
  }

  private spec(now: number, previous?: LeaseSpec): LeaseSpec {
    return heldLeaseSpec(this.options.identity, this.options.leaseDurationMs, now, previous);
  }

  private get path(): string {
    return paths.lease(this.options.namespace, this.options.name);
  }

  private async tryAcquireOrRenew(now: number, signal: AbortSignal): Promise<boolean> {
    let lease: Json;
    try {
      lease = await this.client.request<Json>("GET", this.path, { signal });
    } catch (err) {
      if (!isNotFound(err)) throw err;
      try {
        const created = await this.client.request<Json>("POST", paths.leases(this.options.namespace), {
          signal,
          body: {
            apiVersion: "coordination.k8s.io/v1",
            kind: "Lease",
            metadata: { name: this.options.name, namespace: this.options.namespace },
            spec: this.spec(now),
          },
        });
        this.remember(created);
        return true;
      } catch (createErr) {
        if (isConflict(createErr)) return false;
        throw createErr;
      }
    }
    const spec = (lease.spec ?? {}) as LeaseSpec;
    this.remember(lease);
    const holder = spec.holderIdentity ?? "";
    if (holder !== this.options.identity && holder !== "") {
      if (this.observed && this.clock.monotonic() - this.observed.at < this.observed.durationMs) return false; // someone else holds it
    }
    try {
      const updated = await this.client.request<Json>("PUT", this.path, { signal, body: { ...lease, spec: this.spec(now, spec) } });
      this.remember(updated);
      return true;
    } catch (err) {
      if (isConflict(err)) return false; // another replica wrote first
      throw err;
    }
  }

  /** Notes when the lease record last changed, by this replica's clock. */
  private remember(lease: Json): void {
    const spec = (lease.spec ?? {}) as LeaseSpec;
    const record = JSON.stringify(spec);
    if (!this.observed || this.observed.record !== record) {
      this.observed = { record, at: this.clock.monotonic(), holder: spec.holderIdentity ?? "", durationMs: (spec.leaseDurationSeconds ?? 15) * 1000 };
    }
  }

  /**
   * Stops the loop and, when leading, hands the lease back so that another replica takes over at
   * its next retry. Writes are refused from the moment this is called, before the lease goes back.
   * Gives up after `timeoutMs`: the lease then expires as if this replica had died.
   */
  async release(timeoutMs = RELEASE_TIMEOUT_MS): Promise<void> {
    // An attempt in flight may have taken the lease without this replica knowing yet.
    const mayHold = this.leading || this.attempt !== undefined;
    this.stopped = true;
    this.leading = false;
    clearTimeout(this.retryTimer);
    clearTimeout(this.deadlineTimer);
    this.attempt?.abort(new LeaseAttemptAborted("releasing the lease"));
    if (!mayHold) return;
    const abort = new AbortController();
    const timer = setTimeout(() => abort.abort(new LeaseAttemptAborted("releasing the lease timed out")), timeoutMs);
    try {
      for (;;) {
        const lease = await this.client.request<Json>("GET", this.path, { signal: abort.signal });
        const spec = (lease.spec ?? {}) as LeaseSpec;
        if (spec.holderIdentity !== this.options.identity) return;
        try {
          await this.client.request("PUT", this.path, {
            signal: abort.signal,
            body: { ...lease, spec: { ...spec, holderIdentity: "", leaseDurationSeconds: 1, renewTime: microTime(this.clock.wall()) } },
          });
          this.log.info("released the lease");
          return;
        } catch (err) {
          // The aborted attempt landed after our read: read again and hand back what it wrote.
          if (!isConflict(err)) throw err;
        }
      }
    } catch (err) {
      this.log.warn({ err: String(err) }, "could not release the lease; it expires instead");
    } finally {
      clearTimeout(timer);
    }
  }
}
