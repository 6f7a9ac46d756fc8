// shardOf: the run's shard, computed identically by the operator and by the admission policy's CEL.
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { SHARD_ALPHABET, shardExpression, shardOf } from "../../../operator/sharding/shard-of.ts";

const RUNS = Number(process.env.PROPERTY_RUNS ?? 1000);

/** Counts per shard of `names` (namespace, name) over `shards`. */
function counts(names: Iterable<[string, string]>, shards: number): number[] {
  const out = new Array<number>(shards).fill(0);
  for (const [namespace, name] of names) out[shardOf(namespace, name, shards)]!++;
  return out;
}

/** A small deterministic generator (mulberry32), so the sample is the same on every run. */
function random(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** Names as generateName makes them: a prefix and five random characters of [a-z0-9]. */
function generatedNames(n: number, seed: number): [string, string][] {
  const next = random(seed);
  const chars = "bcdfghjklmnpqrstvwxz2456789"; // the apiserver's generateName alphabet
  return Array.from({ length: n }, () => ["default", `agent-run-${Array.from({ length: 5 }, () => chars[Math.floor(next() * chars.length)]).join("")}`]);
}

/** A namespace or a run's name: the characters of DNS subdomains (not checked for their form). */
const dnsName = fc.string({ unit: fc.constantFrom(..."abcdefghijklmnopqrstuvwxyz0123456789-."), minLength: 1, maxLength: 63 });

/** Any text at all: upper case, spaces, any code point, lone surrogates. */
const anyText = (maxLength: number) => fc.array(fc.integer({ min: 0, max: 0x10ffff }), { maxLength }).map((points) => String.fromCodePoint(...points));

const sequential = (n: number): [string, string][] => Array.from({ length: n }, (_, i) => ["st1", `run-${String(i).padStart(5, "0")}`]);

/**
 * Every count within `sigmas` standard deviations of even, for a sample of `n` names: a shard's
 * count is binomial(n, 1/shards) when the hash spreads names like a random function would.
 */
function expectEven(c: number[], n: number, sigmas: number): void {
  const p = 1 / c.length;
  const bound = sigmas * Math.sqrt(n * p * (1 - p));
  for (const [shard, count] of c.entries()) expect(Math.abs(count - n * p), `shard ${shard} of ${c.length}: ${count} of ${n}`).toBeLessThanOrEqual(bound);
}

describe("shardOf", () => {
  it("gives the values the API server's CEL gives", () => {
    expect(shardOf("st1", "a", 3)).toBe(0);
    expect(shardOf("st1", "run-00001", 3)).toBe(1);
    expect(shardOf("st1", "run-00002", 3)).toBe(2);
    expect(shardOf("st1", "hello-world", 3)).toBe(1);
  });

  it("is a function of its arguments alone", () => {
    fc.assert(
      fc.property(fc.string(), fc.string(), fc.integer({ min: 1, max: 256 }), (namespace, name, shards) => {
        const first = shardOf(namespace, name, shards);
        shardOf(`${name}x`, namespace, shards + 1); // nothing carried over from one call to the next
        expect(shardOf(namespace, name, shards)).toBe(first);
      }),
      { numRuns: RUNS },
    );
  });

  it("always answers a whole number in [0, shards), whatever the characters", () => {
    fc.assert(
      fc.property(fc.oneof(dnsName, anyText(64)), fc.oneof(dnsName, anyText(300)), fc.integer({ min: 1, max: 256 }), (namespace, name, shards) => {
        const shard = shardOf(namespace, name, shards);
        return Number.isInteger(shard) && shard >= 0 && shard < shards;
      }),
      { numRuns: RUNS },
    );
  });

  it("puts everything in shard 0 of 1", () => {
    fc.assert(
      fc.property(fc.string(), fc.string(), (namespace, name) => {
        expect(shardOf(namespace, name, 1)).toBe(0);
      }),
    );
  });

  it("spreads 30,000 sequential names evenly over 3 and 8 shards", () => {
    const names = sequential(30_000);
    for (const shards of [3, 8]) {
      const c = counts(names, shards);
      expect(c.reduce((a, b) => a + b, 0)).toBe(30_000);
      // within 3 % of even (the hash is linear in each character, so sequential names cycle)
      for (const count of c) expect(Math.abs(count - 30_000 / shards) / (30_000 / shards)).toBeLessThanOrEqual(0.03);
    }
  });

  it("spreads 30,000 generated names over 2 to 16 shards as a random function would (within 5 standard deviations)", () => {
    const names = generatedNames(30_000, 1);
    for (const shards of [2, 3, 4, 5, 6, 7, 8, 11, 12, 16]) expectEven(counts(names, shards), names.length, 5);
  });

  it("does not keep neighbouring names together", () => {
    // Neighbours (run-00001, run-00002) share a shard less often than twice in `shards` times.
    for (const shards of [3, 8]) {
      const names = sequential(10_000);
      let same = 0;
      for (let i = 1; i < names.length; i++) if (shardOf(...names[i - 1]!, shards) === shardOf(...names[i]!, shards)) same++;
      expect(same / (names.length - 1)).toBeLessThan(2 / shards);
    }
  });
});

describe("shardExpression", () => {
  // The CEL expression read as JavaScript: lists.range(n).map(i, e).sum() is a sum over i < n, and
  // size, charAt and indexOf mean what JavaScript's length, charAt and indexOf mean on ASCII.
  function evaluate(expression: string, namespace: string, name: string): number {
    const key = "request.namespace + '/' + object.metadata.name";
    const shape = /^string\(lists\.range\(size\((.+?)\)\)\.map\(i, (.+)\)\.sum\(\) % (\d+)\)$/.exec(expression);
    expect(shape, expression).not.toBeNull();
    const [, sized, body, modulus] = shape!;
    expect(sized).toBe(key);
    const term = new Function("i", "k", `return ${body!.split(`(${key})`).join("k")};`) as (i: number, k: string) => number;
    const k = `${namespace}/${name}`;
    let sum = 0;
    for (let i = 0; i < k.length; i++) sum += term(i, k);
    return sum % Number(modulus);
  }

  it("computes what shardOf computes", () => {
    expect(shardExpression(3)).toContain(`'${SHARD_ALPHABET}'`);
    expect(evaluate(shardExpression(3), "st1", "hello-world")).toBe(1);
    fc.assert(
      fc.property(dnsName, dnsName, fc.integer({ min: 1, max: 256 }), (namespace, name, shards) => {
        expect(evaluate(shardExpression(shards), namespace, name)).toBe(shardOf(namespace, name, shards));
      }),
      { numRuns: Math.max(1, Math.floor(RUNS / 4)) },
    );
  });

  it("stays below 2^53 for the longest namespace and name, so JavaScript and CEL's int64 agree", () => {
    // a 63-character namespace, '/', a 253-character name, every character the last of the alphabet
    const longest = "/".repeat(63 + 1 + 253);
    let max = 0;
    for (let i = 0; i < longest.length; i++) max += 1_048_572 * SHARD_ALPHABET.length;
    expect(max).toBeLessThan(Number.MAX_SAFE_INTEGER);
    expect(317 * 2_654_435_761 + 40_503).toBeLessThan(Number.MAX_SAFE_INTEGER);
  });
});
