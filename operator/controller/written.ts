// What this operator wrote, kept until its watches show it. A reconcile decides from the cache;
// right after a write the cache still holds the object as it was, and a decision made from that
// would repeat the write (a second pod create, a second deletion) or, for a pod created a moment
// ago and not yet seen, take it for vanished. So the API server's answer to each write stands in
// for the cached object until the watch delivers that version or a newer one, as the Job
// controller's expectations hold its decisions until its own pod creations are observed.
import { reintroduced } from "../defects.ts";
import type { Json } from "../kube/client.ts";

/**
 * How long a written object may stand in for the cache if its watch event never comes: longer
 * than a silent watch takes to be restarted and relisted.
 */
export const WRITTEN_TTL_MS = 5 * 60_000;

const versionOf = (o: Json | undefined) => (o?.metadata as { resourceVersion?: string } | undefined)?.resourceVersion;
const nameOf = (o: Json) => (o.metadata as { name: string }).name;

/**
 * Whether `cached` already shows `written` or something newer. Resource versions are etcd
 * revisions, which only grow; one that is not a number (another storage) is trusted to be newer.
 */
export function caughtUp(cached: Json | undefined, written: Json): boolean {
  const a = versionOf(cached);
  const b = versionOf(written);
  if (a === undefined || b === undefined) return a !== undefined;
  if (a === b) return true;
  if (!/^\d+$/.test(a) || !/^\d+$/.test(b)) return true;
  return BigInt(a) >= BigInt(b);
}

interface Entry {
  object: Json;
  at: number;
}

export class Written {
  private readonly runs = new Map<string, Entry>();
  /** run key -> pod name -> the pod as the API server answered a create or a delete. */
  private readonly pods = new Map<string, Map<string, Entry>>();

  /** Remembers a run as a write returned it. */
  run(key: string, run: Json, now = Date.now()): void {
    this.runs.set(key, { object: run, at: now });
  }

  /**
   * Pods whose deletion the watch has shown, by uid: the answer to a write can arrive after the
   * watch event that ends the pod (a pod with no node goes at once), and must not bring it back.
   */
  private readonly gone = new Map<string, number>();

  /** Remembers a pod as a create or delete returned it. */
  pod(key: string, pod: Json, now = Date.now()): void {
    const uid = (pod.metadata as { uid?: string }).uid;
    if (uid && this.gone.has(uid) && !reintroduced("resurrected-pod")) return;
    let pods = this.pods.get(key);
    if (!pods) this.pods.set(key, (pods = new Map()));
    pods.set(nameOf(pod), { object: pod, at: now });
  }

  /** The run to decide from: the cached one, unless this operator wrote a newer one. */
  currentRun(key: string, cached: Json | undefined, now = Date.now()): Json | undefined {
    const entry = this.runs.get(key);
    if (!entry) return cached;
    if (!cached || caughtUp(cached, entry.object) || now - entry.at > WRITTEN_TTL_MS) {
      this.runs.delete(key);
      return cached;
    }
    return entry.object;
  }

  /** The pods to decide from: the cached ones, with what this operator wrote since in their place. */
  currentPods(key: string, cached: readonly Json[], now = Date.now()): Json[] {
    const entries = this.pods.get(key);
    if (!entries) return [...cached];
    const out: Json[] = [];
    const byName = new Map(cached.map((p) => [nameOf(p), p] as const));
    for (const [name, entry] of entries) {
      const seen = byName.get(name);
      if ((seen && caughtUp(seen, entry.object)) || now - entry.at > WRITTEN_TTL_MS) entries.delete(name);
    }
    if (entries.size === 0) this.pods.delete(key);
    for (const pod of cached) {
      const entry = entries.get(nameOf(pod));
      out.push(entry ? entry.object : pod);
    }
    for (const [name, entry] of entries) if (!byName.has(name)) out.push(entry.object);
    return out;
  }

  /** A pod's deletion was seen: a stand-in for it (the same uid) would bring it back. */
  podGone(key: string, pod: Json, now = Date.now()): void {
    const uid = (o: Json) => (o.metadata as { uid?: string }).uid;
    const goneUid = uid(pod);
    if (goneUid) {
      this.gone.set(goneUid, now);
      for (const [u, at] of this.gone) if (now - at > WRITTEN_TTL_MS) this.gone.delete(u);
    }
    const entries = this.pods.get(key);
    const entry = entries?.get(nameOf(pod));
    if (entry && uid(entry.object) === goneUid) entries?.delete(nameOf(pod));
    if (entries?.size === 0) this.pods.delete(key);
  }

  forget(key: string): void {
    this.runs.delete(key);
    this.pods.delete(key);
  }
}
