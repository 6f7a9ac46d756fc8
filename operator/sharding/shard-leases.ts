// Shard ownership on coordination.k8s.io Leases, as leadership works (leader.ts) but one Lease per
// shard, `<id>-shard-<i>`, plus one membership Lease per replica, `<id>-member-<hash>`. Every retry
// period a replica lists them all (one request, by label), works out which shards it should hold
// from the members alive (assignment.ts), renews its membership saying which shards it wants,
// renews those it holds, takes those it should hold once they are free or expired, and hands back
// those another should hold once that other says it wants them.
//
// Safety is the Lease's, never the assignment's: a replica writes for a shard only within the
// renew deadline of its last successful renew of that shard's Lease (canWrite), and takes a shard
// only when its Lease was released or has not changed for a whole lease duration by this
// replica's own monotonic clock, so the 5 s between deadline and duration separate two holders.
import { createHash } from "node:crypto";
import type { Logger } from "pino";
import { isAlreadyExists, isConflict, paths, type Json, type KubeClient } from "../kube/client.ts";
import { EXPIRY_MARGIN_MS, heldLeaseSpec, LeaseAttemptAborted, microTime, systemClock, type LeaderClock, type LeaseSpec } from "../controller/leader.ts";
import { assignShards } from "./assignment.ts";

export interface ShardLeaseOptions {
  namespace: string;
  /** The leader election id; the Leases are named after it. */
  id: string;
  identity: string;
  shards: number;
  leaseDurationMs: number;
  renewDeadlineMs: number;
  retryPeriodMs: number;
}

export interface ShardHandlers {
  /** This replica now holds the shard: start supervising its runs. */
  acquired(shard: number): void;
  /** This replica no longer holds the shard (writes for it are already refused): stop. */
  lost(shard: number, why: string): void;
}

/** The labels that find one install's Leases: which group, and whether a shard or a member. */
export const LEASE_LABELS = { group: "watchdog.dev/lease-group", role: "watchdog.dev/lease-role" } as const;

/**
 * On a membership Lease: the shards its replica wants, by its own view of the members ("0,3,5").
 * A holder hands a shard back only to a replica that wants it: one just started counts a dead
 * replica as alive until that replica's Lease has gone unchanged for a lease duration by its own
 * clock, and meanwhile wants fewer shards than the others think it should hold; handed one it does
 * not want, it would leave it without a holder until its view caught up.
 */
export const WANTED_SHARDS_ANNOTATION = "watchdog.dev/wanted-shards";

export const shardLeaseName = (id: string, shard: number) => `${id}-shard-${shard}`;
export const memberLeaseName = (id: string, identity: string) => `${id}-member-${createHash("sha256").update(identity).digest("hex").slice(0, 12)}`;

/** The group label's value: the id itself when it is a valid label value, else a hash of it. */
export function leaseGroup(id: string): string {
  return /^[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$/.test(id) ? id : createHash("sha256").update(id).digest("hex").slice(0, 32);
}

interface Observed {
  record: string;
  /** Monotonic time at which this replica saw the record change. */
  at: number;
  holder: string;
  durationMs: number;
}

const metaOf = (lease: Json) => lease.metadata as { name: string; labels?: Record<string, string>; annotations?: Record<string, string> };
const specOf = (lease: Json) => (lease.spec ?? {}) as LeaseSpec;

export class ShardLeases {
  private readonly client: KubeClient;
  private readonly options: ShardLeaseOptions;
  private readonly log: Logger;
  private readonly clock: LeaderClock;
  /** shard -> monotonic time at which its last successful renew was sent. */
  private readonly held = new Map<number, number>();
  private readonly observed = new Map<string, Observed>();
  private handlers: ShardHandlers = { acquired: () => {}, lost: () => {} };
  private stopped = false;
  private retryTimer?: NodeJS.Timeout;
  private deadlineTimer?: NodeJS.Timeout;
  private attempt?: AbortController;
  /** When a shard this replica should hold, held by another, expires (monotonic), if any. */
  private nextExpiry = Infinity;
  /** The replicas alive at the last round, this one included. */
  members: string[] = [];
  private joined = false;

  constructor(client: KubeClient, options: ShardLeaseOptions, log: Logger, clock: LeaderClock = systemClock) {
    this.client = client;
    this.options = options;
    this.clock = clock;
    this.log = log.child({ leases: `${options.namespace}/${options.id}-shard-*`, identity: options.identity });
  }

  /** Whether this replica may write for `shard` now: it holds the Lease within its renew deadline. */
  canWrite(shard: number): boolean {
    const sent = this.held.get(shard);
    return sent !== undefined && this.clock.monotonic() < sent + this.options.renewDeadlineMs;
  }

  /** The shards this replica holds. */
  holds(): number[] {
    return [...this.held.keys()].sort((a, b) => a - b);
  }

  run(handlers: ShardHandlers): void {
    this.handlers = handlers;
    void this.tick();
  }

  private get group(): string {
    return leaseGroup(this.options.id);
  }

  private async tick(): Promise<void> {
    if (this.stopped) return;
    const startedAt = this.clock.monotonic();
    const attempt = new AbortController();
    this.attempt = attempt;
    // As the elector's: half the renew deadline, so a request stuck on a dead connection still
    // leaves time for another round before any held shard's deadline.
    const timeout = setTimeout(() => attempt.abort(new LeaseAttemptAborted("the lease requests timed out")), this.options.renewDeadlineMs / 2);
    try {
      await this.round(attempt.signal);
    } catch (err) {
      if (!this.stopped) this.log.warn({ err: String(err) }, "shard lease round failed");
    } finally {
      clearTimeout(timeout);
      if (this.attempt === attempt) this.attempt = undefined;
    }
    if (this.stopped) return;
    this.checkDeadlines();
    // A shard this replica should hold is tried the moment its holder's Lease expires.
    const now = this.clock.monotonic();
    const wait = Math.min(Math.max(0, startedAt + this.options.retryPeriodMs - now), Math.max(0, this.nextExpiry - now));
    this.retryTimer = setTimeout(() => void this.tick(), wait);
  }

  private async round(signal: AbortSignal): Promise<void> {
    const list = await this.client.request<{ items: Json[] }>("GET", paths.leases(this.options.namespace), {
      signal,
      query: { labelSelector: `${LEASE_LABELS.group}=${this.group}` },
    });
    const byName = new Map(list.items.map((lease) => [metaOf(lease).name, lease]));
    for (const name of this.observed.keys()) if (!byName.has(name)) this.observed.delete(name);
    for (const lease of list.items) this.remember(lease);

    this.nextExpiry = Infinity;
    this.members = this.liveMembers(list.items);
    const assignment = assignShards(this.members, this.options.shards);
    const mine = assignment.get(this.options.identity) ?? [];
    const memberName = memberLeaseName(this.options.id, this.options.identity);
    await this.write(memberName, "member", byName.get(memberName), signal, { [WANTED_SHARDS_ANNOTATION]: mine.join(",") }).catch((err: unknown) => {
      this.log.warn({ err: String(err) }, "could not renew this replica's membership");
    });
    // The first round only makes this replica a member: replicas started within a retry period of
    // each other see each other at their second round, instead of the first one to list taking
    // every shard and handing most back (a rollout's churn). A lone replica starts 2 s later.
    const joining = !this.joined;
    this.joined = true;
    if (joining) return;
    const wantedBy = wantedShards(list.items);
    const ownerOf = new Map([...assignment].flatMap(([member, shards]) => shards.map((shard) => [shard, member] as const)));
    const shards = Array.from({ length: this.options.shards }, (_, shard) => shard);
    await Promise.all(
      shards.map((shard) => {
        const next = ownerOf.get(shard) ?? "";
        const ready = wantedBy.get(next)?.has(shard) ?? false;
        return this.tend(shard, next === this.options.identity, ready, byName.get(shardLeaseName(this.options.id, shard)), signal);
      }),
    );
  }

  /**
   * Renews, takes or hands back one shard's Lease. `ready`: the replica that should hold it says it
   * wants it (WANTED_SHARDS_ANNOTATION); until then a holder that should not keeps it. A shard whose
   * Lease is still expired (or handed back) a retry period after it expired, when the one that
   * should hold it would have taken it, is taken by any replica rather than left without a holder:
   * a replica just started may take another's Lease only a lease duration after its own start.
   * Not sooner: the replicas' views of who is alive differ by up to a retry period, and a shard
   * taken at once would often move twice.
   */
  private async tend(shard: number, wanted: boolean, ready: boolean, lease: Json | undefined, signal: AbortSignal): Promise<void> {
    const holding = this.held.has(shard);
    const holder = lease ? (specOf(lease).holderIdentity ?? "") : "";
    if (holding && holder !== "" && holder !== this.options.identity) {
      // Never expected (the deadline ends a hold well before another may take it), and never overwritten.
      this.held.delete(shard);
      this.handlers.lost(shard, `its lease is held by ${holder}`);
      return;
    }
    if (!wanted && holding && ready) return this.handBack(shard, lease, "another replica should hold it now", signal);
    if (!wanted && !holding && (!lease || !this.expired(lease, this.options.retryPeriodMs))) return;
    // Wanted, or held (or taken) until the replica that should hold it wants it.
    if (wanted && !holding && lease && !this.takeable(lease)) return;
    const sentAt = this.clock.monotonic();
    let written: boolean;
    try {
      written = await this.write(shardLeaseName(this.options.id, shard), "shard", lease, signal);
    } catch (err) {
      if (!this.stopped) this.log.warn({ err: String(err), shard }, "shard lease update failed");
      return;
    }
    // Lost (past its deadline) or released while the request was in flight: that stands.
    if (!written || this.stopped || (holding && !this.held.has(shard))) return;
    this.held.set(shard, sentAt);
    if (!holding) {
      this.log.info({ shard, ...(wanted ? {} : { until: "the replica that should hold it wants it" }) }, "acquired a shard");
      this.handlers.acquired(shard);
    }
  }

  /** Whether another's Lease may be taken: released, ours, or unchanged for its whole duration. */
  private takeable(lease: Json): boolean {
    const holder = specOf(lease).holderIdentity ?? "";
    return holder === "" || holder === this.options.identity || this.expired(lease);
  }

  /** Whether a Lease has not changed for its whole duration (one second for one handed back), and `laterMs`. */
  private expired(lease: Json, laterMs = 0): boolean {
    const seen = this.observed.get(metaOf(lease).name);
    if (!seen) return false;
    const expiresAt = seen.at + seen.durationMs + EXPIRY_MARGIN_MS + laterMs;
    if (this.clock.monotonic() >= expiresAt) return true;
    this.nextExpiry = Math.min(this.nextExpiry, expiresAt);
    return false;
  }

  /** Creates or renews a Lease as held by this replica; false when another wrote first. */
  private async write(name: string, role: "shard" | "member", lease: Json | undefined, signal: AbortSignal, annotations: Record<string, string> = {}): Promise<boolean> {
    const now = this.clock.wall();
    const labels = { [LEASE_LABELS.group]: this.group, [LEASE_LABELS.role]: role };
    try {
      const written = lease
        ? await this.client.request<Json>("PUT", paths.lease(this.options.namespace, name), {
            signal,
            body: {
              ...lease,
              metadata: { ...metaOf(lease), labels: { ...metaOf(lease).labels, ...labels }, annotations: { ...metaOf(lease).annotations, ...annotations } },
              spec: heldLeaseSpec(this.options.identity, this.options.leaseDurationMs, now, specOf(lease)),
            },
          })
        : await this.client.request<Json>("POST", paths.leases(this.options.namespace), {
            signal,
            body: {
              apiVersion: "coordination.k8s.io/v1",
              kind: "Lease",
              metadata: { name, namespace: this.options.namespace, labels, annotations },
              spec: heldLeaseSpec(this.options.identity, this.options.leaseDurationMs, now),
            },
          });
      this.remember(written);
      return true;
    } catch (err) {
      if (isConflict(err) || isAlreadyExists(err)) return false;
      throw err;
    }
  }

  /** Stops writing for the shard at once, then hands its Lease back so its next holder need not wait. */
  private async handBack(shard: number, lease: Json | undefined, why: string, signal: AbortSignal): Promise<void> {
    this.held.delete(shard);
    this.log.info({ shard, why }, "handing a shard back");
    this.handlers.lost(shard, why);
    if (!lease || specOf(lease).holderIdentity !== this.options.identity) return;
    try {
      // Within the round's budget: a hand-back hung on a dead connection must not hold up the renewals.
      await this.client.request("PUT", paths.lease(this.options.namespace, metaOf(lease).name), { signal, body: released(lease, this.clock.wall()) });
    } catch (err) {
      this.log.warn({ err: String(err), shard }, "could not hand a shard back; it expires instead");
    }
  }

  /**
   * The replicas whose membership Lease is held and has changed within its duration, and this one.
   * The next round comes when the first of the others' expires: its shards are then to be shared.
   */
  private liveMembers(leases: Json[]): string[] {
    const alive = new Set<string>(this.stopped ? [] : [this.options.identity]);
    const now = this.clock.monotonic();
    for (const lease of leases) {
      if (metaOf(lease).labels?.[LEASE_LABELS.role] !== "member") continue;
      const seen = this.observed.get(metaOf(lease).name);
      if (!seen || seen.holder === "" || now - seen.at >= seen.durationMs) continue;
      alive.add(seen.holder);
      if (seen.holder !== this.options.identity) this.nextExpiry = Math.min(this.nextExpiry, seen.at + seen.durationMs);
    }
    return [...alive].sort();
  }

  private checkDeadlines(): void {
    clearTimeout(this.deadlineTimer);
    let next = Infinity;
    for (const [shard, sent] of [...this.held]) {
      if (this.canWrite(shard)) next = Math.min(next, sent + this.options.renewDeadlineMs);
      else {
        this.held.delete(shard);
        this.log.error({ shard }, "could not renew a shard's lease within the renew deadline");
        this.handlers.lost(shard, "could not renew its lease within the renew deadline");
      }
    }
    if (next !== Infinity) this.deadlineTimer = setTimeout(() => this.checkDeadlines(), Math.max(0, next - this.clock.monotonic()));
  }

  private remember(lease: Json): void {
    const spec = specOf(lease);
    const record = JSON.stringify(spec);
    const name = metaOf(lease).name;
    const seen = this.observed.get(name);
    if (!seen || seen.record !== record) {
      this.observed.set(name, { record, at: this.clock.monotonic(), holder: spec.holderIdentity ?? "", durationMs: (spec.leaseDurationSeconds ?? 15) * 1000 });
    }
  }

  /**
   * Stops, refuses every write at once, and hands back every Lease this replica holds (its
   * membership among them), including one an attempt in flight may have taken unknown to it.
   * Gives up after `timeoutMs`: what is left expires as if this replica had died.
   */
  async release(timeoutMs: number): Promise<void> {
    this.stopped = true;
    this.held.clear();
    clearTimeout(this.retryTimer);
    clearTimeout(this.deadlineTimer);
    this.attempt?.abort(new LeaseAttemptAborted("releasing the shards"));
    const abort = new AbortController();
    const timer = setTimeout(() => abort.abort(new LeaseAttemptAborted("releasing the shards timed out")), timeoutMs);
    try {
      const list = await this.client.request<{ items: Json[] }>("GET", paths.leases(this.options.namespace), {
        signal: abort.signal,
        query: { labelSelector: `${LEASE_LABELS.group}=${this.group}` },
      });
      const mine = list.items.filter((lease) => specOf(lease).holderIdentity === this.options.identity);
      await Promise.all(mine.map((lease) => this.client.request("PUT", paths.lease(this.options.namespace, metaOf(lease).name), { signal: abort.signal, body: released(lease, this.clock.wall()) })));
      this.log.info({ leases: mine.length }, "released the shards");
    } catch (err) {
      this.log.warn({ err: String(err) }, "could not release every shard; they expire instead");
    } finally {
      clearTimeout(timer);
    }
  }
}

/** Replica identity -> the shards it says it wants, from the membership Leases held. */
function wantedShards(leases: Json[]): Map<string, Set<number>> {
  const wanted = new Map<string, Set<number>>();
  for (const lease of leases) {
    const holder = specOf(lease).holderIdentity ?? "";
    if (metaOf(lease).labels?.[LEASE_LABELS.role] !== "member" || holder === "") continue;
    const listed = metaOf(lease).annotations?.[WANTED_SHARDS_ANNOTATION] ?? "";
    wanted.set(holder, new Set(listed.split(",").filter((s) => /^\d+$/.test(s)).map(Number)));
  }
  return wanted;
}

/** A Lease handed back: no holder, a one-second duration, so that the next replica takes it at once. */
function released(lease: Json, now: number): Json {
  return { ...lease, spec: { ...specOf(lease), holderIdentity: "", leaseDurationSeconds: 1, renewTime: microTime(now) } };
}
