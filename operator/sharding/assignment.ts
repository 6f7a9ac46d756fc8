// Which replica should hold which shard, from the replicas alive: every replica computes this from
// the same membership Leases and so wants the same answer, and a Lease, not this answer, decides
// who holds a shard (a replica that sees a different membership for a while only waits or hands
// a shard back early). Fair to within one shard: each replica's quota is the floor or the ceiling
// of shards / replicas. Within the quotas each shard goes to the replica that ranks highest for
// it (rendezvous hashing), so a replica joining or leaving moves few shards.
import { createHash } from "node:crypto";

function rank(member: string, what: string): bigint {
  return createHash("sha256").update(`${member}\n${what}`).digest().readBigUInt64BE(0);
}

/** Replica identity -> the shards it should hold (every replica named, shards in order). */
export function assignShards(members: Iterable<string>, shards: number): Map<string, number[]> {
  const replicas = [...new Set(members)].sort();
  const assignment = new Map<string, number[]>(replicas.map((m) => [m, []]));
  if (replicas.length === 0) return assignment;
  const base = Math.floor(shards / replicas.length);
  // Which replicas take one shard more is itself decided by rank, not by name order, so that the
  // same replica is not always the busiest.
  const extra = new Set([...replicas].sort((a, b) => compare(rank(b, "extra"), rank(a, "extra"))).slice(0, shards % replicas.length));
  const quota = new Map(replicas.map((m) => [m, base + (extra.has(m) ? 1 : 0)]));
  for (let shard = 0; shard < shards; shard++) {
    // Each rank hashed once, not in every comparison: every replica runs this every retry period.
    const ranks = new Map(replicas.map((m) => [m, rank(m, String(shard))]));
    const byRank = [...replicas].sort((a, b) => compare(ranks.get(b) as bigint, ranks.get(a) as bigint));
    const owner = byRank.find((m) => (quota.get(m) ?? 0) > 0) as string;
    quota.set(owner, (quota.get(owner) ?? 0) - 1);
    assignment.get(owner)?.push(shard);
  }
  return assignment;
}

function compare(a: bigint, b: bigint): number {
  return a < b ? -1 : a > b ? 1 : 0;
}
