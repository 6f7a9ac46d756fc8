// assignShards: which replica should hold which shard, fair to within one shard, the same answer
// on every replica whatever order it lists the members in, and few shards moving when one joins
// or leaves.
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { assignShards } from "../../../operator/sharding/assignment.ts";

// assignShards hashes every (member, shard) pair several times over: keep the sizes modest.
const RUNS = Math.max(1, Math.floor(Number(process.env.PROPERTY_RUNS ?? 1000) / 4));

/** Replica identities as the operator has them (pod names), and a few odd ones. */
const identity = fc.oneof(
  fc.stringMatching(/^agent-watchdog-[0-9a-f]{6}-[a-z0-9]{5}$/),
  fc.string({ minLength: 1, maxLength: 12 }),
);
const members = fc.uniqueArray(identity, { minLength: 1, maxLength: 9 });
const shards = fc.integer({ min: 1, max: 40 });

type Assignment = Map<string, number[]>;

const owners = (a: Assignment) => new Map([...a].flatMap(([member, held]) => held.map((shard) => [shard, member] as const)));

/** How many shards have a different owner in `b` than in `a`. */
function moved(a: Assignment, b: Assignment, shardCount: number): number {
  const [oa, ob] = [owners(a), owners(b)];
  let n = 0;
  for (let shard = 0; shard < shardCount; shard++) if (oa.get(shard) !== ob.get(shard)) n++;
  return n;
}

/**
 * A lower bound on the shards any assignment fair to within one must move from `before` to the
 * members `after`: every moved shard leaves one member and comes to another, and at least this
 * many must leave (all of a leaver's, and what a staying member holds beyond ceil(S / |after|))
 * and at least this many must come (what a member holds short of floor(S / |after|)).
 */
function fewestMoves(before: Assignment, after: string[], shardCount: number): number {
  const [least, most] = [Math.floor(shardCount / after.length), Math.ceil(shardCount / after.length)];
  let leave = 0;
  for (const [member, held] of before) leave += after.includes(member) ? Math.max(0, held.length - most) : held.length;
  let come = 0;
  for (const member of after) come += Math.max(0, least - (before.get(member)?.length ?? 0));
  return Math.max(leave, come);
}

function expectFair(a: Assignment, who: string[], shardCount: number): void {
  const unique = [...new Set(who)].sort();
  expect([...a.keys()].sort()).toEqual(unique);
  const all = [...a.values()].flat().sort((x, y) => x - y);
  expect(all).toEqual(Array.from({ length: shardCount }, (_, i) => i));
  for (const held of a.values()) expect(held).toEqual([...held].sort((x, y) => x - y));
  const loads = [...a.values()].map((held) => held.length);
  expect(Math.max(...loads) - Math.min(...loads)).toBeLessThanOrEqual(1);
  for (const load of loads) expect([Math.floor(shardCount / unique.length), Math.ceil(shardCount / unique.length)]).toContain(load);
}

describe("assignShards", () => {
  it("gives every shard to exactly one member, every member named, loads within one of each other", () => {
    fc.assert(
      fc.property(members, shards, (who, shardCount) => {
        expectFair(assignShards(who, shardCount), who, shardCount);
      }),
      { numRuns: RUNS },
    );
  });

  it("gives the same answer whatever the order of the members and with duplicates", () => {
    const scrambled = members.chain((who) => fc.tuple(fc.constant(who), fc.shuffledSubarray(who, { minLength: who.length }), fc.array(fc.constantFrom(...who), { maxLength: 5 })));
    fc.assert(
      fc.property(scrambled, shards, ([who, shuffled, duplicates], shardCount) => {
        const a = assignShards(who, shardCount);
        const b = assignShards(new Set([...shuffled, ...duplicates, ...shuffled]), shardCount);
        expect([...b].sort(([x], [y]) => x.localeCompare(y))).toEqual([...a].sort(([x], [y]) => x.localeCompare(y)));
      }),
      { numRuns: RUNS },
    );
  });

  it("assigns nothing without members, and nothing to anyone without shards", () => {
    expect(assignShards([], 8).size).toBe(0);
    expect(assignShards([], 0).size).toBe(0);
    expect([...assignShards(["a", "b"], 0)]).toEqual([
      ["a", []],
      ["b", []],
    ]);
  });

  it("leaves some members idle when there are fewer shards than members", () => {
    const a = assignShards(["a", "b", "c", "d", "e"], 3);
    expectFair(a, ["a", "b", "c", "d", "e"], 3);
    expect([...a.values()].filter((held) => held.length === 0)).toHaveLength(2);
  });

  // Rendezvous hashing alone moves exactly the shards the joiner ranks first for, or the
  // leaver's: the fewest. Within quotas, a shard whose first choice is full goes to its next, so a
  // change of membership can also change which member fills up first, and with it the owner of
  // shards neither the joiner nor the leaver is involved in. There is no tight closed form for
  // that; the bounds asserted are the fewest (which no fair assignment can beat), and the fewest
  // plus one share plus one shard per member, which held with room to spare on every one of
  // 50,000 random cases (up to 10 members, 40 shards). On average it moves about 1.5 times the
  // fewest; in the worst cases far more (3 -> 4 replicas over 6 shards: 4 shards move where 1 or
  // 2 must; 11 -> 12 over 10 shards: 8 move where none must).
  it("moves at least the joiner's share, and at most a share and a shard per member more, when a member joins", () => {
    fc.assert(
      fc.property(members, identity, shards, (who, joiner, shardCount) => {
        fc.pre(!who.includes(joiner));
        const joined = [...who, joiner];
        const before = assignShards(who, shardCount);
        const after = assignShards(joined, shardCount);
        expectFair(after, joined, shardCount);
        const n = moved(before, after, shardCount);
        const fewest = fewestMoves(before, joined, shardCount);
        expect(n).toBeGreaterThanOrEqual(after.get(joiner)!.length);
        expect(n).toBeGreaterThanOrEqual(fewest);
        expect(n).toBeLessThanOrEqual(fewest + Math.ceil(shardCount / joined.length) + joined.length);
      }),
      { numRuns: RUNS },
    );
  });

  it("moves at least the leaver's shards, and at most a share and a shard per member more, when a member leaves", () => {
    fc.assert(
      fc.property(members, fc.nat(), shards, (who, pick, shardCount) => {
        fc.pre(who.length >= 2);
        const leaver = who[pick % who.length]!;
        const staying = who.filter((m) => m !== leaver);
        const before = assignShards(who, shardCount);
        const after = assignShards(staying, shardCount);
        expectFair(after, staying, shardCount);
        const n = moved(before, after, shardCount);
        const fewest = fewestMoves(before, staying, shardCount);
        expect(n).toBeGreaterThanOrEqual(before.get(leaver)!.length);
        expect(n).toBeGreaterThanOrEqual(fewest);
        expect(n).toBeLessThanOrEqual(fewest + Math.ceil(shardCount / staying.length) + who.length);
      }),
      { numRuns: RUNS },
    );
  });

  it("moves on average less than 1.6 times the fewest shards a fair assignment could, over 300 joins", () => {
    let next = 1;
    const random = () => (next = (next * 48_271) % 2_147_483_647) / 2_147_483_647;
    const name = () => `agent-watchdog-6d5f8c-${Math.floor(random() * 36 ** 5).toString(36)}`;
    let total = 0;
    let fewest = 0;
    for (let i = 0; i < 300; i++) {
      const who = Array.from({ length: 1 + Math.floor(random() * 8) }, name);
      const shardCount = 1 + Math.floor(random() * 32);
      const joined = [...who, name()];
      const before = assignShards(who, shardCount);
      total += moved(before, assignShards(joined, shardCount), shardCount);
      fewest += fewestMoves(before, joined, shardCount);
    }
    expect(total / fewest).toBeLessThan(1.6);
  });

  // The simplest case the operator meets: three replicas and six shards, one leaves. Two shards
  // must move; a third moves between the two that stay (see the release test of shard-leases).
  it("moves a shard between the two replicas that stay when the third of three leaves six shards", () => {
    const three = assignShards(["replica-0", "replica-1", "replica-2"], 6);
    const two = assignShards(["replica-1", "replica-2"], 6);
    expect(fewestMoves(three, ["replica-1", "replica-2"], 6)).toBe(2);
    expect(moved(three, two, 6)).toBe(3);
  });
});
