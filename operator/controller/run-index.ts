// What the watches have shown about each run beyond its cached object, filed by run: its pods (by
// the run label), the final states of its pods seen deleted, the heartbeat value this operator saw
// appear and when, what it believes of the current attempt's liveness, and when it first saw each
// container run. Fed by informer events, in order; read by the decision's input (inputs.ts).
// Times here are this operator's own clock: inputs.ts moves them onto the API server's.
import { LABELS } from "../api/annotations.ts";
import type { Json } from "../kube/client.ts";
import type { InformerEvent } from "./informer.ts";
import { believe, livenessFacts, type LivenessMemory } from "../watchdog/liveness.ts";

/** How long the final state of a deleted pod is kept for the run it belonged to. */
const TOMBSTONE_TTL_MS = 10 * 60_000;

export const runKey = (namespace: string, name: string) => `${namespace}/${name}`;

/** What identifies one heartbeat value: a new one is a sign of life, whatever its clock says. */
export function heartbeatKey(run: Json | undefined): string | undefined {
  const hb = (run?.status as { heartbeat?: { time?: unknown; attempt?: unknown; state?: unknown } } | undefined)?.heartbeat;
  return hb ? JSON.stringify([hb.time, hb.attempt, hb.state]) : undefined;
}

const attemptOf = (run: Json | undefined) => (run?.status as { attempt?: unknown } | undefined)?.attempt;

export class RunIndex {
  /** run key -> pod name -> pod, so a reconcile never scans every pod. */
  private readonly podsByRun = new Map<string, Map<string, Json>>();
  /** pod uid -> the run key its pod is filed under (a label can change). */
  private readonly podKeys = new Map<string, string>();
  /** run key -> pod uid -> the pod's final state as its deletion was seen (rule 9). */
  private readonly tombstones = new Map<string, Map<string, { pod: Json; at: number }>>();
  /** run key -> the heartbeat value this operator saw appear, and when. */
  private readonly heartbeatsSeen = new Map<string, { key: string; at: number }>();
  /** run key -> what was last believed about its current attempt's liveness, from every event seen. */
  private readonly livenessMemory = new Map<string, LivenessMemory>();
  /** pod uid -> container name -> when this operator first saw it running. */
  private readonly containerStarts = new Map<string, Map<string, number>>();
  private readonly clock: () => number;

  constructor(clock: () => number = Date.now) {
    this.clock = clock;
  }

  /** Files a run's add or update event (a delete goes to forgetRun). */
  runChanged(event: Exclude<InformerEvent, "delete">, run: Json, previous?: Json): void {
    const meta = run.metadata as { namespace: string; name: string };
    const key = runKey(meta.namespace, meta.name);
    // A heartbeat value that changed while this operator watched is a sign of life it saw itself
    // (the server's record of it, in managedFields, is what survives a restart).
    const hb = heartbeatKey(run);
    if (event === "update" && hb !== undefined && hb !== heartbeatKey(previous)) this.heartbeatsSeen.set(key, { key: hb, at: this.clock() });
    // Each event that changes the heartbeat or the attempt is looked at, so that a current
    // heartbeat replaced by a late write of an earlier attempt before the next reconcile is still
    // remembered. Other events (the operator's own writes, mostly) cannot change what is believed.
    if (event === "update" && hb === heartbeatKey(previous) && attemptOf(run) === attemptOf(previous)) return;
    const seen = this.heartbeatsSeen.get(key);
    const facts = livenessFacts(run, seen && seen.key === hb ? seen.at : undefined);
    const memory = facts ? believe(facts, this.livenessMemory.get(key)).memory : undefined;
    if (memory) this.livenessMemory.set(key, memory);
    else this.livenessMemory.delete(key);
  }

  forgetRun(key: string): void {
    this.heartbeatsSeen.delete(key);
    this.livenessMemory.delete(key);
    this.tombstones.delete(key);
  }

  /**
   * Files a pod's event under its run. Returns the run's key (none for a pod without the label),
   * and the run it was filed under before when a relabel moved it (that run still tracks it by uid).
   */
  podChanged(event: InformerEvent, pod: Json): { key: string; movedFrom?: string } | undefined {
    const meta = pod.metadata as { namespace: string; name: string; uid?: string; labels?: Record<string, string> };
    const runName = meta.labels?.[LABELS.run];
    if (!runName) return undefined;
    const key = runKey(meta.namespace, runName);
    const uid = meta.uid;
    const touched: { key: string; movedFrom?: string } = { key };
    if (event === "delete") {
      this.unfile(key, meta.name);
      if (uid) {
        this.podKeys.delete(uid);
        this.containerStarts.delete(uid);
        // Its final state says whether the kubelet stopped its containers (rule 9).
        this.tombstone(key, pod);
      }
      return touched;
    }
    const filed = uid ? this.podKeys.get(uid) : undefined;
    if (uid && filed !== undefined && filed !== key) {
      this.unfile(filed, meta.name);
      touched.movedFrom = filed;
    }
    if (uid) this.podKeys.set(uid, key);
    let pods = this.podsByRun.get(key);
    if (!pods) this.podsByRun.set(key, (pods = new Map()));
    pods.set(meta.name, pod);
    if (uid) this.noteContainerStarts(uid, pod);
    return touched;
  }

  /** Keeps a pod's final state for its run (a deletion seen, or a tracked pod found gone). */
  tombstone(key: string, pod: Json): void {
    const uid = (pod.metadata as { uid?: string }).uid;
    if (!uid) return;
    let tombs = this.tombstones.get(key);
    if (!tombs) this.tombstones.set(key, (tombs = new Map()));
    tombs.set(uid, { pod, at: this.clock() });
  }

  /** The run's pods as the cache shows them. */
  pods(key: string): Json[] {
    return [...(this.podsByRun.get(key)?.values() ?? [])];
  }

  /** The final states of the run's pods seen deleted, within their time to live (older ones are dropped). */
  deletedPods(key: string): Json[] {
    const tombs = this.tombstones.get(key);
    if (!tombs) return [];
    const now = this.clock();
    const pods: Json[] = [];
    for (const [uid, tomb] of tombs) {
      if (now - tomb.at > TOMBSTONE_TTL_MS) tombs.delete(uid);
      else pods.push(tomb.pod);
    }
    if (tombs.size === 0) this.tombstones.delete(key);
    return pods;
  }

  /** When this operator saw the run's current heartbeat value appear, if it did. */
  heartbeatSeenAt(key: string, run: Json): number | undefined {
    const seen = this.heartbeatsSeen.get(key);
    return seen && seen.key === heartbeatKey(run) ? seen.at : undefined;
  }

  liveness(key: string): LivenessMemory | undefined {
    return this.livenessMemory.get(key);
  }

  /** When this operator first saw each container of a pod running, by container name. */
  containersSeenRunning(uid: string): ReadonlyMap<string, number> | undefined {
    return this.containerStarts.get(uid);
  }

  /** When each container was first seen running, on this operator's own clock (rule 2: never the node's). */
  private noteContainerStarts(uid: string, pod: Json): void {
    const statuses = (pod.status as { containerStatuses?: { name?: string; state?: { running?: unknown } }[] } | undefined)?.containerStatuses ?? [];
    for (const cs of statuses) {
      if (!cs.state?.running || typeof cs.name !== "string") continue;
      let seen = this.containerStarts.get(uid);
      if (!seen) this.containerStarts.set(uid, (seen = new Map()));
      if (!seen.has(cs.name)) seen.set(cs.name, this.clock());
    }
  }

  private unfile(key: string, name: string): void {
    const pods = this.podsByRun.get(key);
    pods?.delete(name);
    if (pods?.size === 0) this.podsByRun.delete(key);
  }
}
