// Leader election on a coordination.k8s.io Lease, with controller-runtime's timings: a 15 s
// lease, a 10 s renew deadline and a 2 s retry period. Expiry is judged by the local time at which
// this replica last saw the lease change (as client-go does), never by the holder's clock.
import type { Logger } from "pino";
import { ApiError, isConflict, isNotFound, paths, type Json, type KubeClient } from "../kube/client.ts";

export interface LeaderOptions {
  namespace: string;
  name: string;
  identity: string;
  leaseDurationMs: number;
  renewDeadlineMs: number;
  retryPeriodMs: number;
}

export const LEADER_DEFAULTS = { leaseDurationMs: 15_000, renewDeadlineMs: 10_000, retryPeriodMs: 2_000 };

interface LeaseSpec {
  holderIdentity?: string;
  leaseDurationSeconds?: number;
  acquireTime?: string;
  renewTime?: string;
  leaseTransitions?: number;
}

const microTime = (ms: number) => new Date(ms).toISOString().replace(/\.(\d{3})Z$/, ".$1000Z");

export class LeaderElector {
  private readonly client: KubeClient;
  private readonly options: LeaderOptions;
  private readonly log: Logger;
  private leading = false;
  private stopped = false;
  private timer?: NodeJS.Timeout;
  private lastRenew = 0;
  private observed?: { record: string; at: number };
  private onStarted: () => void = () => {};
  private onStopped: () => void = () => {};

  constructor(client: KubeClient, options: LeaderOptions, log: Logger) {
    this.client = client;
    this.options = options;
    this.log = log.child({ lease: `${options.namespace}/${options.name}`, identity: options.identity });
  }

  get isLeader(): boolean {
    return this.leading;
  }

  /** Runs the election loop; `started` is called on gaining the lease, `stopped` on losing it. */
  run(started: () => void, stopped: () => void): void {
    this.onStarted = started;
    this.onStopped = stopped;
    void this.tick();
  }

  private schedule(): void {
    if (this.stopped) return;
    this.timer = setTimeout(() => void this.tick(), this.options.retryPeriodMs);
  }

  private async tick(): Promise<void> {
    try {
      const ok = await this.tryAcquireOrRenew();
      if (ok) {
        this.lastRenew = Date.now();
        if (!this.leading) {
          this.leading = true;
          this.log.info("acquired the lease; leading");
          this.onStarted();
        }
      } else if (this.leading && Date.now() - this.lastRenew > this.options.renewDeadlineMs) {
        this.lose("could not renew the lease within the renew deadline");
        return;
      }
    } catch (err) {
      this.log.warn({ err: String(err) }, "lease update failed");
      if (this.leading && Date.now() - this.lastRenew > this.options.renewDeadlineMs) {
        this.lose("could not renew the lease within the renew deadline");
        return;
      }
    }
    this.schedule();
  }

  private lose(why: string): void {
    this.leading = false;
    this.log.error(why);
    this.onStopped();
  }

  private spec(now: number, previous?: LeaseSpec): LeaseSpec {
    const keep = previous?.holderIdentity === this.options.identity;
    return {
      holderIdentity: this.options.identity,
      leaseDurationSeconds: Math.round(this.options.leaseDurationMs / 1000),
      acquireTime: keep && previous?.acquireTime ? previous.acquireTime : microTime(now),
      renewTime: microTime(now),
      leaseTransitions: keep ? (previous?.leaseTransitions ?? 0) : (previous?.leaseTransitions ?? -1) + 1,
    };
  }

  private async tryAcquireOrRenew(): Promise<boolean> {
    const now = Date.now();
    let lease: Json;
    try {
      lease = await this.client.get(paths.lease(this.options.namespace, this.options.name));
    } catch (err) {
      if (!isNotFound(err)) throw err;
      try {
        const created = await this.client.create(paths.leases(this.options.namespace), {
          apiVersion: "coordination.k8s.io/v1",
          kind: "Lease",
          metadata: { name: this.options.name, namespace: this.options.namespace },
          spec: this.spec(now),
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
      const durationMs = (spec.leaseDurationSeconds ?? 15) * 1000;
      if (this.observed && now - this.observed.at < durationMs) return false; // someone else holds it
    }
    try {
      const updated = await this.client.request<Json>("PUT", paths.lease(this.options.namespace, this.options.name), {
        body: { ...lease, spec: this.spec(now, spec) },
      });
      this.remember(updated);
      return true;
    } catch (err) {
      if (isConflict(err)) return false; // another replica wrote first
      throw err;
    }
  }

  /** Notes when the lease record last changed, by this replica's clock. */
  private remember(lease: Json): void {
    const spec = JSON.stringify(lease.spec ?? {});
    if (!this.observed || this.observed.record !== spec) this.observed = { record: spec, at: Date.now() };
  }

  /** Stops the loop and, when leading, hands the lease back so that another replica takes over at once. */
  async release(): Promise<void> {
    this.stopped = true;
    clearTimeout(this.timer);
    if (!this.leading) return;
    this.leading = false;
    try {
      const lease = await this.client.get(paths.lease(this.options.namespace, this.options.name));
      const spec = (lease.spec ?? {}) as LeaseSpec;
      if (spec.holderIdentity !== this.options.identity) return;
      await this.client.request("PUT", paths.lease(this.options.namespace, this.options.name), {
        body: { ...lease, spec: { ...spec, holderIdentity: "", leaseDurationSeconds: 1, renewTime: microTime(Date.now()) } },
      });
      this.log.info("released the lease");
    } catch (err) {
      if (!(err instanceof ApiError)) throw err;
      this.log.warn({ err: String(err) }, "could not release the lease");
    }
  }
}
