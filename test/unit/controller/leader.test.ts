// The elector against an in-memory Lease API on fake timers: the renew deadline is kept by a timer
// of its own, whatever the requests in flight do.
import { pino } from "pino";
import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import { LEADER_DEFAULTS, LeaderElector, RELEASE_TIMEOUT_MS } from "../../../operator/controller/leader.ts";
import { ApiError, type Json, type KubeClient, type RequestOptions } from "../../../operator/kube/client.ts";

const log = pino({ level: "silent" });
const { leaseDurationMs, renewDeadlineMs, retryPeriodMs } = LEADER_DEFAULTS;

/** One Lease with optimistic concurrency; `hang` makes every request wait until it is aborted. */
class LeaseApi {
  lease?: Json;
  private version = 0;
  hang = false;
  /** Requests never settle, not even when aborted (a client stuck before its request is sent). */
  deaf = false;
  /** Hung requests not yet aborted. */
  pending = 0;
  readonly sent: { method: string; signal?: AbortSignal; body?: unknown }[] = [];

  async request(method: string, path: string, options: RequestOptions = {}): Promise<Json> {
    this.sent.push({ method, signal: options.signal, body: options.body });
    if (this.deaf) return new Promise(() => {});
    if (this.hang) {
      this.pending++;
      return new Promise((_, reject) =>
        options.signal?.addEventListener("abort", () => {
          this.pending--;
          reject(options.signal?.reason);
        }),
      );
    }
    const body = options.body as Json | undefined;
    if (method === "GET") {
      if (!this.lease) throw new ApiError(method, path, 404, { reason: "NotFound" });
      return structuredClone(this.lease);
    }
    if (method === "POST" && this.lease) throw new ApiError(method, path, 409, { reason: "AlreadyExists" });
    if (method === "PUT" && (body?.metadata as Json | undefined)?.resourceVersion !== (this.lease?.metadata as Json).resourceVersion) {
      throw new ApiError(method, path, 409, { reason: "Conflict" });
    }
    this.lease = { ...structuredClone(body), metadata: { ...(body?.metadata as Json), resourceVersion: String(++this.version) } };
    return structuredClone(this.lease);
  }

  get spec(): { holderIdentity?: string; leaseDurationSeconds?: number; renewTime?: string } {
    return (this.lease?.spec ?? {}) as never;
  }

  /** Another replica's record, as if it had just written it. */
  holdFor(identity: string, renewTime = new Date(0).toISOString()): void {
    this.lease = {
      apiVersion: "coordination.k8s.io/v1",
      kind: "Lease",
      metadata: { name: "lease", namespace: "ns", resourceVersion: String(++this.version) },
      spec: { holderIdentity: identity, leaseDurationSeconds: 15, renewTime },
    };
  }
}

/** A monotonic clock that can run ahead of the timers, as a loaded event loop makes it. */
let lateTimersMs = 0;
const clock = { monotonic: () => Date.now() + lateTimersMs, wall: () => Date.now() };

function elector(api: LeaseApi, identity = "me"): LeaderElector {
  return new LeaderElector(api as unknown as KubeClient, { namespace: "ns", name: "lease", identity, ...LEADER_DEFAULTS }, log, clock);
}

function campaign(e: LeaderElector) {
  const seen = { started: 0, stopped: 0 };
  e.run(
    () => seen.started++,
    () => seen.stopped++,
  );
  return seen;
}

beforeEach(() => {
  vi.useFakeTimers();
  lateTimersMs = 0;
});
afterEach(() => vi.useRealTimers());

describe("LeaderElector", () => {
  it("creates a missing lease, leads, and renews every retry period", async () => {
    const api = new LeaseApi();
    const e = elector(api);
    const seen = campaign(e);
    await vi.advanceTimersByTimeAsync(0);
    expect(seen.started).toBe(1);
    expect(e.isLeader && e.canWrite()).toBe(true);
    expect(api.spec.holderIdentity).toBe("me");
    const puts = () => api.sent.filter((r) => r.method === "PUT").length;
    await vi.advanceTimersByTimeAsync(3 * retryPeriodMs);
    expect(puts()).toBe(3);
    expect(e.canWrite()).toBe(true);
    expect(seen.stopped).toBe(0);
  });

  it("stops leading at the renew deadline while its requests hang, and aborts them", async () => {
    const api = new LeaseApi();
    const e = elector(api);
    const seen = campaign(e);
    await vi.advanceTimersByTimeAsync(0);
    const lastRenew = Date.now();
    api.hang = true;
    await vi.advanceTimersByTimeAsync(renewDeadlineMs - 1);
    expect(e.isLeader).toBe(true);
    expect(e.canWrite()).toBe(true);
    await vi.advanceTimersByTimeAsync(1);
    expect(Date.now() - lastRenew).toBe(renewDeadlineMs);
    expect(e.isLeader).toBe(false);
    expect(e.canWrite()).toBe(false);
    expect(seen.stopped).toBe(1);
    // The request in flight at the deadline was aborted: none is left hanging.
    expect(api.sent.at(-1)?.signal?.aborted).toBe(true);
    expect(api.pending).toBe(0);
    // and it does not campaign again
    const before = api.sent.length;
    api.hang = false;
    await vi.advanceTimersByTimeAsync(leaseDurationMs * 2);
    expect(api.sent.length).toBe(before);
    expect(seen).toEqual({ started: 1, stopped: 1 });
  });

  it("stops leading at the renew deadline even when a request ignores its abort", async () => {
    const api = new LeaseApi();
    const e = elector(api);
    const seen = campaign(e);
    await vi.advanceTimersByTimeAsync(0);
    api.deaf = true;
    await vi.advanceTimersByTimeAsync(renewDeadlineMs - 1);
    expect(seen.stopped).toBe(0);
    await vi.advanceTimersByTimeAsync(1);
    expect(e.isLeader).toBe(false);
    expect(seen.stopped).toBe(1);
  });

  it("gives a hung attempt half the renew deadline, then tries again at once on a new request", async () => {
    const api = new LeaseApi();
    const e = elector(api);
    campaign(e);
    await vi.advanceTimersByTimeAsync(0);
    api.hang = true;
    await vi.advanceTimersByTimeAsync(retryPeriodMs); // the next renew starts, and hangs
    const hung = api.sent.at(-1)!;
    await vi.advanceTimersByTimeAsync(renewDeadlineMs / 2 - 1);
    expect(hung.signal?.aborted).toBe(false);
    api.hang = false;
    await vi.advanceTimersByTimeAsync(1);
    expect(hung.signal?.aborted).toBe(true);
    await vi.advanceTimersByTimeAsync(1); // no retry period in between (a 0 ms timer runs after 1 ms)
    expect(api.sent.at(-1)).not.toBe(hung);
    expect(api.sent.at(-1)?.method).toBe("PUT"); // renewed on the follow-up attempt
    expect(e.canWrite()).toBe(true);
  });

  it("refuses writes once the deadline has passed by its clock, before its timer has fired", async () => {
    const api = new LeaseApi();
    const e = elector(api);
    const seen = campaign(e);
    await vi.advanceTimersByTimeAsync(0);
    api.hang = true;
    await vi.advanceTimersByTimeAsync(renewDeadlineMs - 100);
    lateTimersMs = 100; // the clock has reached the deadline; the timer is still pending
    expect(e.isLeader).toBe(true);
    expect(e.canWrite()).toBe(false);
    expect(seen.stopped).toBe(0);
  });

  it("takes another holder's lease only a lease duration after it saw the record change, whatever its renewTime", async () => {
    const api = new LeaseApi();
    api.holdFor("other"); // a renewTime of 1970: by the holder's clock it expired long ago
    const e = elector(api);
    const seen = campaign(e);
    await vi.advanceTimersByTimeAsync(leaseDurationMs - 1);
    expect(seen.started).toBe(0);
    expect(api.spec.holderIdentity).toBe("other");
    // the moment it expires, not at the next of its attempts a retry period apart
    await vi.advanceTimersByTimeAsync(50);
    expect(seen.started).toBe(1);
    expect(api.spec.holderIdentity).toBe("me");
  });

  it("keeps waiting while the other holder keeps renewing", async () => {
    const api = new LeaseApi();
    api.holdFor("other");
    const e = elector(api);
    const seen = campaign(e);
    for (let t = 0; t < 3 * leaseDurationMs; t += retryPeriodMs) {
      api.holdFor("other", new Date(Date.now()).toISOString());
      await vi.advanceTimersByTimeAsync(retryPeriodMs);
    }
    expect(seen.started).toBe(0);
  });

  it("hands the lease back on release, refusing writes from the first moment", async () => {
    const api = new LeaseApi();
    const e = elector(api);
    campaign(e);
    await vi.advanceTimersByTimeAsync(0);
    const releasing = e.release();
    expect(e.canWrite()).toBe(false);
    await releasing;
    expect(api.spec).toMatchObject({ holderIdentity: "", leaseDurationSeconds: 1 });
    // a follower takes a released lease at its next attempt
    const next = elector(api, "next");
    const seen = campaign(next);
    await vi.advanceTimersByTimeAsync(0);
    expect(seen.started).toBe(1);
  });

  it("gives up releasing after its own short timeout", async () => {
    const api = new LeaseApi();
    const e = elector(api);
    campaign(e);
    await vi.advanceTimersByTimeAsync(0);
    api.hang = true;
    let done = false;
    void e.release().then(() => (done = true));
    await vi.advanceTimersByTimeAsync(RELEASE_TIMEOUT_MS - 1);
    expect(done).toBe(false);
    await vi.advanceTimersByTimeAsync(1);
    expect(done).toBe(true);
    expect(api.sent.at(-1)?.signal?.aborted).toBe(true);
  });
});
