// Replicas of ShardLeases against one in-memory Lease API, on vitest's fake timers. The API keeps
// many Leases with optimistic concurrency (a list by label, AlreadyExists on a second create, a
// Conflict on a stale resourceVersion). Each replica talks to it through a link of its own that
// can be slow, partitioned (its requests hang until aborted, as on a dead connection) or dead (its
// requests never settle: the process is gone). Safety is watched all along: at every request the
// API answers, at every acquisition, whenever a test asks, no shard may be writable by two
// replicas, a Lease may change hands only once its last holder has stopped writing for it, and a
// replica hands a shard back only after it has stopped writing for it.
import { pino } from "pino";
import { vi } from "vitest";
import { LEADER_DEFAULTS } from "../../../operator/controller/leader.ts";
import { ApiError, type Json, type KubeClient, type RequestOptions } from "../../../operator/kube/client.ts";
import { assignShards } from "../../../operator/sharding/assignment.ts";
import { LEASE_LABELS, ShardLeases } from "../../../operator/sharding/shard-leases.ts";

export const { leaseDurationMs, renewDeadlineMs, retryPeriodMs } = LEADER_DEFAULTS;
export const NAMESPACE = "watchdog-system";
export const ID = "agent-watchdog";
/** How long the real client lets a request without a signal of its own run. */
export const CLIENT_DEFAULT_TIMEOUT_MS = 30_000;

const log = pino({ level: "silent" });
const LEASE_PATH = /^\/apis\/coordination\.k8s\.io\/v1\/namespaces\/([^/]+)\/leases(?:\/([^/]+))?$/;
const SHARD_NAME = new RegExp(`^${ID}-shard-(\\d+)$`);

interface Spec {
  holderIdentity?: string;
  leaseDurationSeconds?: number;
}
const specOf = (lease: Json | undefined) => (lease?.spec ?? {}) as Spec;
const metaOf = (lease: Json | undefined) => (lease?.metadata ?? {}) as { name?: string; resourceVersion?: string; labels?: Record<string, string> };

/** A write the API accepted: when, by whom, and who holds the Lease since. */
export interface Write {
  at: number;
  by: string;
  name: string;
  holder: string;
}

/** The API server: every Lease of the namespace. */
export class LeaseApi {
  readonly leases = new Map<string, Json>();
  readonly writes: Write[] = [];
  private version = 0;
  private readonly world: World;

  constructor(world: World) {
    this.world = world;
  }

  handle(from: Replica, method: string, path: string, options: RequestOptions): Json {
    const match = LEASE_PATH.exec(path);
    if (!match) throw new ApiError(method, path, 404, { reason: "NotFound" });
    const [, , name] = match;
    const body = options.body as Json | undefined;
    if (method === "GET" && name === undefined) {
      const wanted = parseSelector(String(options.query?.labelSelector ?? ""));
      const items = [...this.leases.values()].filter((lease) => Object.entries(wanted).every(([k, v]) => metaOf(lease).labels?.[k] === v));
      return { kind: "LeaseList", items: structuredClone(items) };
    }
    if (method === "GET") {
      const lease = this.leases.get(name!);
      if (!lease) throw new ApiError(method, path, 404, { reason: "NotFound" });
      return structuredClone(lease);
    }
    if (method === "POST" && name === undefined) {
      const created = metaOf(body).name!;
      if (this.leases.has(created)) throw new ApiError(method, path, 409, { reason: "AlreadyExists" });
      return this.store(from, created, body!);
    }
    if (method === "PUT" && name !== undefined) {
      const current = this.leases.get(name);
      if (!current) throw new ApiError(method, path, 404, { reason: "NotFound" });
      if (metaOf(body).name !== name) throw new ApiError(method, path, 400, { reason: "BadRequest" });
      if (metaOf(body).resourceVersion !== metaOf(current).resourceVersion) throw new ApiError(method, path, 409, { reason: "Conflict" });
      return this.store(from, name, body!);
    }
    throw new ApiError(method, path, 405, { reason: "MethodNotAllowed" });
  }

  private store(from: Replica, name: string, body: Json): Json {
    const previous = specOf(this.leases.get(name)).holderIdentity ?? "";
    const holder = specOf(body).holderIdentity ?? "";
    const shard = SHARD_NAME.exec(name);
    if (shard) this.world.checkHandOver(from, Number(shard[1]), previous, holder);
    const lease = { ...structuredClone(body), metadata: { ...metaOf(body), resourceVersion: String(++this.version) } };
    this.leases.set(name, lease);
    this.writes.push({ at: Date.now(), by: from.identity, name, holder });
    return structuredClone(lease);
  }

  /** The holder a shard's Lease names now ("" when released or never made). */
  holderOf(shard: number): string {
    return specOf(this.leases.get(`${ID}-shard-${shard}`)).holderIdentity ?? "";
  }
}

function parseSelector(selector: string): Record<string, string> {
  const wanted: Record<string, string> = {};
  for (const term of selector.split(",").filter(Boolean)) {
    const [key, value] = term.split(/==?/);
    wanted[key!.trim()] = (value ?? "").trim();
  }
  return wanted;
}

export type Link = "up" | "partitioned" | "dead";

/** One replica: its ShardLeases, its link to the API, and what its handlers were told. */
export class Replica {
  link: Link = "up";
  /** The time a request takes on the wire, half before the API applies it, half after. */
  latencyMs: number;
  /** Whether release() has been called: it writes no more. */
  released = false;
  readonly leases: ShardLeases;
  /** Shards acquired and not lost, as the handlers were told. */
  readonly holding = new Set<number>();
  readonly events: { at: number; kind: "acquired" | "lost"; shard: number; why?: string }[] = [];
  /** Requests made, by method. */
  readonly sent: { at: number; method: string; path: string; labelSelector?: string; signal: boolean }[] = [];
  /** Makes the next requests that match hang until aborted, once each (a single dead connection). */
  readonly hangNext: ((method: string, body: Json | undefined) => boolean)[] = [];
  /** Requests hanging on this replica's link now. */
  hanging = 0;

  private readonly world: World;
  readonly identity: string;

  constructor(world: World, identity: string, latencyMs: number) {
    this.world = world;
    this.identity = identity;
    this.latencyMs = latencyMs;
    const client = { request: (method: string, path: string, options?: RequestOptions) => this.request(method, path, options ?? {}) } as unknown as KubeClient;
    this.leases = new ShardLeases(client, { namespace: NAMESPACE, id: ID, identity, shards: world.shards, leaseDurationMs, renewDeadlineMs, retryPeriodMs }, log, world.clock);
  }

  run(): this {
    this.leases.run({
      acquired: (shard) => {
        if (this.holding.has(shard)) this.world.violation(`${this.identity} acquired shard ${shard} twice without losing it`);
        this.holding.add(shard);
        this.events.push({ at: Date.now(), kind: "acquired", shard });
        if (!this.leases.canWrite(shard)) this.world.violation(`${this.identity} was told it acquired shard ${shard} but may not write for it`);
        this.world.check(`${this.identity} acquired shard ${shard}`);
      },
      lost: (shard, why) => {
        if (!this.holding.has(shard)) this.world.violation(`${this.identity} lost shard ${shard} it was never told it held`);
        this.holding.delete(shard);
        this.events.push({ at: Date.now(), kind: "lost", shard, why });
        if (this.leases.canWrite(shard)) this.world.violation(`${this.identity} lost shard ${shard} but may still write for it`);
      },
    });
    return this;
  }

  /** The shards it may write for now. */
  writable(): number[] {
    return Array.from({ length: this.world.shards }, (_, shard) => shard).filter((shard) => this.leases.canWrite(shard));
  }

  acquisitions(shard?: number): number {
    return this.events.filter((e) => e.kind === "acquired" && (shard === undefined || e.shard === shard)).length;
  }

  async release(timeoutMs = 1_000): Promise<void> {
    this.released = true;
    const releasing = this.leases.release(timeoutMs);
    for (let shard = 0; shard < this.world.shards; shard++) if (this.leases.canWrite(shard)) this.world.violation(`${this.identity} may still write for shard ${shard} while releasing`);
    await releasing;
  }

  /** As KubeClient.request: a request without a signal is given the client's default timeout. */
  private async request(method: string, path: string, options: RequestOptions): Promise<Json> {
    const body = options.body as Json | undefined;
    const labelSelector = options.query?.labelSelector === undefined ? undefined : String(options.query.labelSelector);
    this.sent.push({ at: Date.now(), method, path, ...(labelSelector === undefined ? {} : { labelSelector }), signal: options.signal !== undefined });
    if (this.link === "dead") return new Promise<Json>(() => {});
    let timer: NodeJS.Timeout | undefined;
    let signal = options.signal;
    if (!signal) {
      const timeout = new AbortController();
      timer = setTimeout(() => timeout.abort(new DOMException("The operation was aborted due to timeout", "TimeoutError")), CLIENT_DEFAULT_TIMEOUT_MS);
      signal = timeout.signal;
    }
    try {
      const hang = this.hangNext.findIndex((matches) => matches(method, body));
      if (hang >= 0) {
        this.hangNext.splice(hang, 1);
        await this.hangUntilAborted(signal);
      }
      if (this.link === "partitioned") await this.hangUntilAborted(signal);
      await this.wire(signal);
      if (this.dead) return await new Promise<Json>(() => {});
      // On the server: applied whatever the client does from here on.
      const answer = (() => {
        try {
          return { ok: this.world.api.handle(this, method, path, options) };
        } catch (err) {
          return { err };
        } finally {
          this.world.check(`${this.identity} ${method} ${path}`);
        }
      })();
      await this.wire(signal);
      // The answer is lost on a link cut while the request was out.
      if (this.link === "partitioned") await this.hangUntilAborted(signal);
      if (this.dead) return await new Promise<Json>(() => {});
      if ("err" in answer) throw answer.err;
      return answer.ok;
    } finally {
      clearTimeout(timer);
    }
  }

  /** Read afresh: the link may have died while a request was out. */
  private get dead(): boolean {
    return this.link === "dead";
  }

  /** Half the request's latency; an abort on the way ends the request (its answer is lost). */
  private async wire(signal: AbortSignal): Promise<void> {
    signal.throwIfAborted();
    if (this.latencyMs <= 0) return;
    await new Promise<void>((resolve, reject) => {
      const timer = setTimeout(resolve, this.latencyMs / 2);
      signal.addEventListener("abort", () => {
        clearTimeout(timer);
        reject(signal.reason);
      });
    });
  }

  private hangUntilAborted(signal: AbortSignal): Promise<never> {
    this.hanging++;
    return new Promise<never>((_, reject) => {
      const abort = () => {
        this.hanging--;
        reject(signal.reason);
      };
      if (signal.aborted) abort();
      else signal.addEventListener("abort", abort, { once: true });
    });
  }
}

/** The API, the replicas, the shared clock and what went wrong. */
export class World {
  readonly api = new LeaseApi(this);
  readonly replicas: Replica[] = [];
  readonly violations: string[] = [];
  /** How far the monotonic clock has run ahead of the timers (an event loop running late). */
  lateMs = 0;
  readonly clock = { monotonic: () => Date.now() + this.lateMs, wall: () => Date.now() };
  private started = 0;
  readonly shards: number;

  constructor(shards: number) {
    this.shards = shards;
  }

  /** Starts a replica (named replica-0, replica-1, … unless named). */
  start(options: { identity?: string; latencyMs?: number } = {}): Replica {
    const replica = new Replica(this, options.identity ?? `replica-${this.started}`, options.latencyMs ?? 0);
    this.started++;
    this.replicas.push(replica);
    return replica.run();
  }

  /** The replicas up and running: neither dead, partitioned nor released. */
  healthy(): Replica[] {
    return this.replicas.filter((r) => r.link === "up" && !r.released);
  }

  /** The replicas that may write for `shard` now. */
  writers(shard: number): Replica[] {
    return this.replicas.filter((r) => r.leases.canWrite(shard));
  }

  violation(what: string): void {
    this.violations.push(`${new Date(Date.now()).toISOString()} (+${this.lateMs} ms late): ${what}`);
  }

  /** No shard writable by two replicas at once. */
  check(where: string): void {
    for (let shard = 0; shard < this.shards; shard++) {
      const writers = this.writers(shard);
      if (writers.length > 1) this.violation(`at ${where}: shard ${shard} writable by ${writers.map((r) => r.identity).join(" and ")}`);
    }
  }

  /** A shard's Lease is written: a takeover or a hand-back must come after its holder stopped writing. */
  checkHandOver(from: Replica, shard: number, previous: string, holder: string): void {
    const before = this.replicas.find((r) => r.identity === previous);
    if (previous !== "" && holder !== previous && before?.leases.canWrite(shard)) {
      this.violation(`${from.identity} wrote shard ${shard}'s Lease over to "${holder}" while ${previous} could still write for it`);
    }
    if (holder === "" && previous === from.identity && !from.released && from.holding.has(shard)) {
      this.violation(`${from.identity} handed shard ${shard} back before its lost handler was called`);
    }
  }

  /** Advances the fake timers, checking safety every `stepMs` of simulated time. */
  async advance(ms: number, stepMs = 100): Promise<void> {
    for (let left = ms; left > 0; left -= stepMs) {
      await vi.advanceTimersByTimeAsync(Math.min(stepMs, left));
      this.check(`a ${stepMs} ms step`);
    }
  }

  /** Advances until `done` holds (checked every `stepMs`), at most `limitMs`; the time it took. */
  async until(done: () => boolean, limitMs: number, stepMs = 10): Promise<number> {
    const from = Date.now();
    while (!done() && Date.now() - from < limitMs) await this.advance(stepMs, stepMs);
    return Date.now() - from;
  }

  /** Shard -> the identity of the one replica that may write for it, undefined when none or several. */
  holders(): (string | undefined)[] {
    return Array.from({ length: this.shards }, (_, shard) => {
      const writers = this.writers(shard);
      return writers.length === 1 ? writers[0]!.identity : undefined;
    });
  }

  /** Whether the healthy replicas hold exactly the shards assignShards gives them, every shard once. */
  settled(): boolean {
    const healthy = this.healthy();
    const want = assignShards(
      healthy.map((r) => r.identity),
      this.shards,
    );
    return healthy.length > 0 && healthy.every((r) => sameShards(r.writable(), want.get(r.identity) ?? [])) && this.holders().every((h) => h !== undefined);
  }
}

export const sameShards = (a: number[], b: number[]) => a.length === b.length && a.every((x, i) => x === b[i]);

export { LEASE_LABELS };
