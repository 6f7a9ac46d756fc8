// Shard ownership on Leases, several replicas against one in-memory Lease API on fake timers
// (lease-world.ts): they share the shards fairly, hand shards over without two writers at any
// moment, take a dead or cut-off replica's shards once it has stopped writing for them, and hand
// everything back on release. Safety (never two writers for a shard, a Lease handed over only once
// its holder has stopped writing) is checked at every request, every acquisition and every 100 ms
// of simulated time by the world itself; every test ends by asserting it saw no violation.
import fc from "fast-check";
import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import { EXPIRY_MARGIN_MS } from "../../../operator/controller/leader.ts";
import { assignShards } from "../../../operator/sharding/assignment.ts";
import { leaseGroup, memberLeaseName, shardLeaseName } from "../../../operator/sharding/shard-leases.ts";
import { CLIENT_DEFAULT_TIMEOUT_MS, ID, LEASE_LABELS, NAMESPACE, World, leaseDurationMs, renewDeadlineMs, retryPeriodMs, type Replica } from "./lease-world.ts";

const RUNS = Math.max(5, Math.floor(Number(process.env.PROPERTY_RUNS ?? 1000) / 10));

const range = (n: number) => Array.from({ length: n }, (_, i) => i);

beforeEach(() => {
  vi.useFakeTimers();
});
afterEach(() => {
  vi.useRealTimers();
});

/** When `replica` last wrote a Lease (its last successful renew, at zero latency). */
function lastWrite(w: World, replica: Replica, name?: string): number {
  const write = w.api.writes.filter((x) => x.by === replica.identity && (name === undefined || x.name === name)).at(-1);
  if (!write) throw new Error(`${replica.identity} never wrote${name ? ` ${name}` : ""}`);
  return write.at;
}

describe("ShardLeases", () => {
  it("names and labels one Lease per shard and one per replica, found by one label", async () => {
    const w = new World(3);
    const r = w.start();
    // The first round only joins; the second takes the shards.
    await w.advance(retryPeriodMs + 1, 1);
    expect([...w.api.leases.keys()].sort()).toEqual([memberLeaseName(ID, r.identity), ...range(3).map((s) => shardLeaseName(ID, s))].sort());
    for (const [name, lease] of w.api.leases) {
      const labels = (lease.metadata as { labels: Record<string, string> }).labels;
      expect(labels[LEASE_LABELS.group]).toBe(leaseGroup(ID));
      expect(labels[LEASE_LABELS.role]).toBe(name === memberLeaseName(ID, r.identity) ? "member" : "shard");
    }
    const list = r.sent.find((x) => x.method === "GET");
    expect(list?.path).toBe(`/apis/coordination.k8s.io/v1/namespaces/${NAMESPACE}/leases`);
    expect(list?.labelSelector).toBe(`${LEASE_LABELS.group}=${leaseGroup(ID)}`);
    expect(w.violations).toEqual([]);
  });

  it("three replicas converge to two shards each within a retry period, every final holder acquiring its shards once, and stay put", async () => {
    const w = new World(6);
    const replicas = [w.start(), w.start(), w.start()];
    const took = await w.until(() => w.settled(), 5 * retryPeriodMs);
    expect(w.settled()).toBe(true);
    // Started together, each only joins at its first round and takes its share at its second.
    expect(took).toBeLessThanOrEqual(2 * retryPeriodMs);
    const want = assignShards(
      replicas.map((r) => r.identity),
      6,
    );
    for (const r of replicas) {
      expect(r.writable()).toEqual(want.get(r.identity));
      expect(r.writable()).toHaveLength(2);
      expect(r.leases.holds()).toEqual(r.writable());
      // the final holder of each of its shards acquired it exactly once
      for (const shard of r.writable()) expect(r.acquisitions(shard)).toBe(1);
    }
    // at most one acquisition per shard beyond the final ones: the first replica's early grab
    const total = replicas.reduce((n, r) => n + r.acquisitions(), 0);
    expect(total).toBeLessThanOrEqual(6 + 4);
    for (const shard of range(6)) expect(w.api.holderOf(shard)).toBe(w.holders()[shard]);
    const events = replicas.map((r) => r.events.length);
    await w.advance(10 * retryPeriodMs);
    expect(replicas.map((r) => r.events.length)).toEqual(events);
    expect(w.settled()).toBe(true);
    expect(w.violations).toEqual([]);
  });

  it("gives a replica that joins later its fair share: the others stop writing and call lost before handing back", async () => {
    const w = new World(6);
    const [a, b] = [w.start(), w.start()];
    await w.until(() => w.settled(), 5 * retryPeriodMs);
    await w.advance(3 * retryPeriodMs + 700);
    const before = w.holders();
    const c = w.start();
    const joinedAt = Date.now();
    // One round for the others to see its membership and hand back, one for it to take.
    const took = await w.until(() => w.settled(), 5 * retryPeriodMs);
    expect(took).toBeLessThanOrEqual(2 * retryPeriodMs);
    for (const r of [a, b, c]) expect(r.writable()).toHaveLength(2);
    const after = w.holders();
    const moved = range(6).filter((s) => before[s] !== after[s]);
    expect(moved.length).toBeGreaterThanOrEqual(2);
    for (const shard of moved) {
      const from = [a, b].find((r) => r.identity === before[shard])!;
      const lost = from.events.find((e) => e.kind === "lost" && e.shard === shard && e.at >= joinedAt)!;
      expect(lost.why).toBe("another replica should hold it now");
      const handBack = w.api.writes.find((x) => x.name === shardLeaseName(ID, shard) && x.by === from.identity && x.holder === "" && x.at >= joinedAt)!;
      const taken = w.api.writes.find((x) => x.name === shardLeaseName(ID, shard) && x.holder === after[shard] && x.at >= joinedAt)!;
      // lost (and canWrite false, checked by the world at the write) before the Lease went back,
      // which was before its next holder wrote it
      expect(lost.at).toBeLessThanOrEqual(handBack.at);
      expect(handBack.at).toBeLessThanOrEqual(taken.at);
      // a handed-back Lease is taken at once, not a lease duration later
      expect(taken.at - handBack.at).toBeLessThanOrEqual(retryPeriodMs);
    }
    expect(w.violations).toEqual([]);
  });

  // A replica just started has seen every membership Lease change "now", so for a lease duration
  // it counts a dead replica as alive, and wants fewer shards than the others think it should hold.
  // Were they to hand it a shard on their own view, no replica would hold that shard until its view
  // caught up (13 s in a soak). A shard is handed only to a replica that says it wants it.
  it("hands a shard to a replica just started only once that replica wants it, so no shard goes without a holder", async () => {
    const w = new World(6);
    const [a, b, victim] = [w.start(), w.start(), w.start()];
    await w.until(() => w.settled(), 5 * retryPeriodMs);
    await w.advance(2 * retryPeriodMs + 300);
    victim.link = "dead";
    await w.until(() => w.settled(), 3 * leaseDurationMs);
    expect(w.settled()).toBe(true);
    const c = w.start();
    const unheldSince = new Map<number, number>();
    let longest = 0;
    const took = await w.until(() => {
      const holders = w.holders();
      for (const shard of range(6)) {
        if (holders[shard] !== undefined) unheldSince.delete(shard);
        else if (!unheldSince.has(shard)) unheldSince.set(shard, Date.now());
        else longest = Math.max(longest, Date.now() - unheldSince.get(shard)!);
      }
      return w.settled();
    }, 3 * leaseDurationMs);
    expect(w.settled()).toBe(true);
    for (const r of [a, b, c]) expect(r.writable()).toHaveLength(2);
    // a hand-back is taken at the new holder's next round
    expect(longest, "ms a shard went without a holder").toBeLessThanOrEqual(retryPeriodMs);
    // c's view drops the dead replica a lease duration after its start; then it takes its share
    expect(took).toBeLessThanOrEqual(leaseDurationMs + 3 * retryPeriodMs);
    expect(w.violations).toEqual([]);
  });

  // The killed replica's replacement starts before its Leases expire: it counts the dead one as
  // alive, and may take a Lease only once it has seen it unchanged for a lease duration from its
  // own start. The survivors, who think it should hold some of the dead one's shards, take those
  // themselves meanwhile (a retry period after the Leases expire), and hand them on later.
  it("has a killed replica's shards held within a lease duration and two retry periods of the kill, however soon a replacement joins", async () => {
    const took: Record<number, number> = {};
    for (const joinAfterMs of [1_000, 5_000, 8_000, 12_000]) {
      vi.useRealTimers();
      vi.useFakeTimers();
      const w = new World(6);
      const victim = w.start();
      const survivors = [w.start(), w.start()];
      await w.until(() => w.settled(), 5 * retryPeriodMs);
      await w.advance(2 * retryPeriodMs + 300);
      const its = victim.writable();
      expect(its).toHaveLength(2);
      victim.link = "dead";
      const killedAt = Date.now();
      await w.advance(joinAfterMs, 10);
      const replacement = w.start();
      await w.until(() => its.every((s) => w.writers(s).some((r) => r !== victim)), 4 * leaseDurationMs);
      took[joinAfterMs] = Date.now() - killedAt;
      // and in the end the replacement holds its share
      await w.until(() => w.settled(), 3 * leaseDurationMs);
      expect(w.settled()).toBe(true);
      for (const r of [...survivors, replacement]) expect(r.writable()).toHaveLength(2);
      expect(w.violations).toEqual([]);
    }
    // The survivors see the victim's last renew up to a retry period late, and wait one more.
    const bound = leaseDurationMs + 2 * retryPeriodMs + EXPIRY_MARGIN_MS;
    expect(Math.max(...Object.values(took)), `ms from the kill to its shards held, by ms from the kill to the replacement's start: ${JSON.stringify(took)}`).toBeLessThanOrEqual(bound);
  });

  it("refuses writes by its clock once a renew deadline has passed, before its timer fires", async () => {
    const w = new World(2);
    const a = w.start();
    await w.until(() => w.settled(), retryPeriodMs);
    a.link = "partitioned";
    const renewed = lastWrite(w, a, shardLeaseName(ID, 0));
    await w.advance(renewDeadlineMs - 100 - (Date.now() - renewed), 1);
    expect(a.leases.canWrite(0)).toBe(true);
    w.lateMs = 100; // the clock has reached the deadline; the deadline timer has not fired
    expect(a.leases.canWrite(0)).toBe(false);
    expect(a.holding.has(0)).toBe(true);
    expect(w.violations).toEqual([]);
  });

  // Worst case: the victim renews just after the survivors list, so they see its last renew
  // almost a retry period late. A dead replica's membership and shard Leases expire, by a
  // survivor's clock, a lease duration after it saw them change, at most a retry period after the
  // victim last wrote; the survivor should take the shards then (the elector does, and the code
  // says so: "tried the moment its holder's Lease expires").
  it("has a killed replica's shards taken by the survivors within lease duration + retry period of the kill", async () => {
    let worst = 0;
    const took: Record<number, number> = {};
    for (const phaseMs of [1, 200, 600, 1_000, 1_500]) {
      vi.useRealTimers();
      vi.useFakeTimers();
      const w = new World(6);
      const victim = w.start();
      await w.advance(retryPeriodMs - 10, retryPeriodMs - 10);
      const survivors = [w.start(), w.start()];
      await w.until(() => w.settled(), 5 * retryPeriodMs);
      await w.advance(4 * retryPeriodMs);
      // kill it phaseMs after its last renew
      await w.until(() => Date.now() - lastWrite(w, victim) === phaseMs, retryPeriodMs, 1);
      const its = victim.writable();
      expect(its).toHaveLength(2);
      victim.link = "dead";
      took[phaseMs] = await w.until(() => its.every((s) => survivors.some((r) => r.leases.canWrite(s))), 3 * leaseDurationMs);
      worst = Math.max(worst, took[phaseMs]);
      // A shard moving between the survivors as well waits for the one that should hold it to say
      // it wants it: at most two more rounds.
      await w.until(() => w.settled(), 2 * retryPeriodMs);
      expect(w.settled()).toBe(true);
      expect(w.violations).toEqual([]);
    }
    expect(worst, `ms from the kill to the takeover, by ms from the victim's last renew to the kill: ${JSON.stringify(took)}`).toBeLessThanOrEqual(leaseDurationMs + retryPeriodMs + EXPIRY_MARGIN_MS);
  });

  it("stops a partitioned replica writing for each of its shards before any other may, and takes it back in without two writers", async () => {
    const w = new World(6);
    const replicas = [w.start(), w.start(), w.start()];
    const [cut, ...others] = replicas as [Replica, Replica, Replica];
    await w.until(() => w.settled(), 5 * retryPeriodMs);
    await w.advance(3 * retryPeriodMs + 900);
    const its = cut.writable();
    const cutAt = Date.now();
    cut.link = "partitioned";
    const stopped = new Map<number, number>();
    const taken = new Map<number, number>();
    while (taken.size < its.length && Date.now() - cutAt < 3 * leaseDurationMs) {
      await w.advance(10, 10);
      for (const shard of its) {
        if (!stopped.has(shard) && !cut.leases.canWrite(shard)) stopped.set(shard, Date.now());
        if (!taken.has(shard) && others.some((r) => r.leases.canWrite(shard))) taken.set(shard, Date.now());
      }
    }
    for (const shard of its) {
      const renewed = lastWrite(w, cut, shardLeaseName(ID, shard));
      expect(renewed).toBeLessThanOrEqual(cutAt);
      // it stops at its renew deadline, by its own timer, whatever its hung requests do
      expect(stopped.get(shard)! - renewed).toBe(renewDeadlineMs);
      expect(cut.events.find((e) => e.kind === "lost" && e.shard === shard)?.why).toBe("could not renew its lease within the renew deadline");
      // another takes it only a lease duration after it last changed: 5 s after it stopped
      expect(taken.get(shard)).toBeDefined();
      expect(taken.get(shard)! - stopped.get(shard)!).toBeGreaterThanOrEqual(leaseDurationMs - renewDeadlineMs);
    }
    expect(cut.hanging).toBeGreaterThan(0);
    await w.until(() => w.settled(), 2 * retryPeriodMs);
    expect(w.settled()).toBe(true); // the two others share the six
    // Heal: its hung request is aborted within half a renew deadline, then it rejoins.
    await w.advance(5_000);
    cut.link = "up";
    const rejoined = await w.until(() => w.settled(), 10 * retryPeriodMs);
    expect(w.settled()).toBe(true);
    expect(rejoined).toBeLessThanOrEqual(renewDeadlineMs / 2 + 2 * retryPeriodMs);
    for (const r of replicas) expect(r.writable()).toHaveLength(2);
    expect(cut.hanging).toBe(0);
    expect(w.violations).toEqual([]);
  });

  it("hands everything back on release, refusing writes at once; the others take its shards within a retry period and the request time", async () => {
    const latencyMs = 40;
    const w = new World(6);
    const replicas = [w.start({ latencyMs }), w.start({ latencyMs }), w.start({ latencyMs })];
    const [leaving, ...staying] = replicas as [Replica, Replica, Replica];
    await w.until(() => w.settled(), 5 * retryPeriodMs);
    await w.advance(2 * retryPeriodMs + 300);
    const its = leaving.writable();
    expect(its).toHaveLength(2);
    const releasedAt = Date.now();
    const release = leaving.release(); // the world checks that it refuses every write at once
    for (const shard of range(6)) expect(leaving.leases.canWrite(shard)).toBe(false);
    let done = false;
    void release.then(() => (done = true));
    // its own list and hand-backs, then the others' next round: a list, a membership write, the takes
    const took = await w.until(() => done && its.every((s) => staying.some((r) => r.leases.canWrite(s))), 5 * retryPeriodMs, 5);
    expect(done).toBe(true);
    expect(took).toBeLessThanOrEqual(retryPeriodMs + 5 * latencyMs);
    for (const lease of w.api.leases.values()) expect((lease.spec as { holderIdentity: string }).holderIdentity).not.toBe(leaving.identity);
    // Settled as assignShards has it for the two left. That may move a shard between the two as
    // well (it does here: shard 4), which takes two more rounds: the one that should hold it says
    // it wants it, the holder hands it back, then the first takes it.
    const settled = await w.until(() => w.settled(), 5 * retryPeriodMs, 5);
    expect(took + settled).toBeLessThanOrEqual(3 * retryPeriodMs + 10 * latencyMs);
    const want = assignShards(
      staying.map((r) => r.identity),
      6,
    );
    for (const r of staying) expect(r.writable()).toEqual(want.get(r.identity));
    expect(leaving.events.filter((e) => e.at >= releasedAt)).toEqual([]);
    // nothing more from it
    const sent = leaving.sent.length;
    await w.advance(5 * retryPeriodMs);
    expect(leaving.sent.length).toBe(sent);
    expect(w.violations).toEqual([]);
  });

  // One request on a dead connection: the hand-back of a shard another replica should now hold.
  // The round bounds its attempt to half the renew deadline so that such a request "still leaves
  // time for another round before any held shard's deadline"; the hand-back's request carries no
  // signal, so the round waits for the client's own 30 s timeout and the replica renews nothing
  // meanwhile.
  it("keeps renewing the shards it keeps while one hand-back hangs on a dead connection", async () => {
    const w = new World(4);
    const a = w.start();
    await w.until(() => w.settled(), retryPeriodMs);
    a.hangNext.push((method, body) => method === "PUT" && (body?.spec as { holderIdentity?: string } | undefined)?.holderIdentity === "");
    w.start();
    await w.until(() => a.writable().length === 2, 2 * retryPeriodMs);
    const kept = a.writable();
    expect(a.hanging).toBe(1);
    await w.advance(CLIENT_DEFAULT_TIMEOUT_MS);
    for (const shard of kept) expect(a.events.filter((e) => e.kind === "lost" && e.shard === shard)).toEqual([]);
    expect(kept.every((s) => a.leases.canWrite(s))).toBe(true);
    expect(w.violations).toEqual([]);
  });
});

type Step =
  | { kind: "advance"; ms: number }
  | { kind: "partition"; who: number }
  | { kind: "heal"; who: number }
  | { kind: "kill"; who: number }
  | { kind: "start"; latencyMs: number }
  | { kind: "release"; who: number }
  | { kind: "late"; ms: number };

const latency = fc.constantFrom(0, 0, 30, 250);
const who = fc.nat({ max: 5 });
const step: fc.Arbitrary<Step> = fc.oneof(
  { weight: 4, arbitrary: fc.record({ kind: fc.constant("advance" as const), ms: fc.integer({ min: 1, max: 9_000 }) }) },
  { weight: 2, arbitrary: fc.record({ kind: fc.constant("partition" as const), who }) },
  { weight: 2, arbitrary: fc.record({ kind: fc.constant("heal" as const), who }) },
  { weight: 1, arbitrary: fc.record({ kind: fc.constant("kill" as const), who }) },
  { weight: 1, arbitrary: fc.record({ kind: fc.constant("start" as const), latencyMs: latency }) },
  { weight: 1, arbitrary: fc.record({ kind: fc.constant("release" as const), who }) },
  { weight: 1, arbitrary: fc.record({ kind: fc.constant("late" as const), ms: fc.integer({ min: 1, max: 400 }) }) },
);
const scenario = fc.record({
  shards: fc.integer({ min: 1, max: 8 }),
  replicas: fc.array(latency, { minLength: 2, maxLength: 4 }),
  steps: fc.array(step, { minLength: 1, maxLength: 10 }),
});

/** The `who`-th of the replicas `eligible` picks, if any. */
const pick = (w: World, eligible: (r: Replica) => boolean, n: number) => {
  const them = w.replicas.filter(eligible);
  return them.length ? them[n % them.length] : undefined;
};

async function play(w: World, s: Step): Promise<void> {
  switch (s.kind) {
    case "advance":
      return w.advance(s.ms);
    case "partition": {
      const r = pick(w, (r) => r.link === "up", s.who);
      if (r) r.link = "partitioned";
      return;
    }
    case "heal": {
      const r = pick(w, (r) => r.link === "partitioned", s.who);
      if (r) r.link = "up";
      return;
    }
    case "kill": {
      const r = pick(w, (r) => r.link !== "dead", s.who);
      if (r) r.link = "dead";
      return;
    }
    case "start":
      if (w.replicas.length < 7) w.start({ latencyMs: s.latencyMs });
      return;
    case "release": {
      const r = pick(w, (r) => r.link !== "dead" && !r.released, s.who);
      if (r) void r.release();
      return;
    }
    case "late":
      w.lateMs += s.ms;
      return;
  }
}

describe("ShardLeases under random partitions, deaths, arrivals and releases", () => {
  it("never lets two replicas write for a shard, and settles fairly once all is well", async () => {
    await fc.assert(
      fc.asyncProperty(scenario, async ({ shards, replicas, steps }) => {
        vi.useRealTimers();
        vi.useFakeTimers();
        const w = new World(shards);
        for (const latencyMs of replicas) w.start({ latencyMs });
        for (const [i, s] of steps.entries()) {
          await play(w, s);
          w.check(`step ${i}`);
          expect(w.violations, `after step ${i} ${JSON.stringify(s)}`).toEqual([]);
        }
        // All well for 40 s: the partitioned healed, someone alive.
        for (const r of w.replicas) if (r.link === "partitioned") r.link = "up";
        if (w.healthy().length === 0) w.start();
        await w.advance(40_000);
        expect(w.violations).toEqual([]);
        const healthy = w.healthy();
        const holders = w.holders();
        for (const shard of range(shards)) {
          expect(w.writers(shard).map((r) => r.identity)).toHaveLength(1);
          expect(healthy.map((r) => r.identity)).toContain(holders[shard]);
        }
        const loads = healthy.map((r) => r.writable().length);
        expect(Math.max(...loads) - Math.min(...loads)).toBeLessThanOrEqual(1);
        expect(w.settled()).toBe(true);
      }),
      { numRuns: RUNS },
    );
  });
});
