// Pods a run's status tracks by uid (its current pod, its terminating ones) that the label-selected
// pod cache no longer shows without proof that they are gone (rule 9: a pod is the run's until it
// is confirmed gone, whatever happens to its labels). A pod whose `watchdog.dev/run` label was
// removed (quarantined for debugging) drops out of the cache exactly as a deleted one does, and a
// pod that vanished while the operator was not watching leaves no trace in it at all; both are
// looked up by name, their uid compared, and a pod found still there is polled while it is
// tracked. A pod the API server no longer has is remembered as absent: uids are never reused.
//
// Only the uncertain cases cost a request: a pod whose final state shows the kubelet stopped it,
// or that was being deleted when its object went (the core then waits for its node and its grace
// anyway), is not looked up.
import { isNotFound, paths, type Json, type KubeClient } from "../kube/client.ts";
import { isLive, podView } from "../watchdog/observe.ts";
import { trimPod } from "./trim.ts";

/** How often a tracked pod that the cache does not show is read again. */
export const TRACKED_POLL_MS = 5_000;
/** How long an absent uid, or a tracked pod's last state, is remembered. */
const FORGET_AFTER_MS = 10 * 60_000;

interface Found {
  pod: Json;
  at: number;
}

export interface TrackedLookup {
  /** Tracked pods found by name that the cache does not show, for the run to decide with. */
  detached: Json[];
  /** Last states of tracked pods the API server turned out not to have, to be taken as tombstones. */
  vanished: Json[];
  /** Whether any tracked pod is polled: the run must be looked at again within TRACKED_POLL_MS. */
  polling: boolean;
}

/** The uids and names a run's status tracks. */
export function trackedBy(run: Json): { uid: string; name: string }[] {
  const status = (run.status ?? {}) as { podUID?: unknown; podName?: unknown; terminating?: { uid?: unknown; name?: unknown }[] };
  const out: { uid: string; name: string }[] = [];
  if (typeof status.podUID === "string" && typeof status.podName === "string") out.push({ uid: status.podUID, name: status.podName });
  for (const entry of Array.isArray(status.terminating) ? status.terminating : []) {
    if (typeof entry?.uid === "string" && typeof entry.name === "string" && entry.uid) out.push({ uid: entry.uid, name: entry.name });
  }
  return out;
}

export class TrackedPods {
  private readonly client: KubeClient;
  /** run key -> pod uid -> the pod as last read. */
  private readonly found = new Map<string, Map<string, Found>>();
  /** Pod uids the API server has been seen not to have, with when. */
  private readonly absent = new Map<string, number>();

  constructor(client: KubeClient) {
    this.client = client;
  }

  /** What is known now, without asking the API server (for a decision made again after a conflict). */
  known(key: string): Json[] {
    return [...(this.found.get(key)?.values() ?? [])].map((f) => f.pod);
  }

  /**
   * Looks up the run's tracked pods that neither `pods` (the cache, with this operator's own
   * writes) nor a conclusive tombstone accounts for.
   */
  async lookup(key: string, namespace: string, run: Json, pods: readonly Json[], tombstones: readonly Json[], now = Date.now()): Promise<TrackedLookup> {
    const result: TrackedLookup = { detached: [], vanished: [], polling: false };
    const shown = new Set(pods.map((p) => (p.metadata as { uid?: string }).uid));
    const tombs = new Map(tombstones.map((p) => [(p.metadata as { uid?: string }).uid, p] as const));
    const mine = this.found.get(key) ?? new Map<string, Found>();
    const wanted = new Set<string>();
    for (const { uid, name } of trackedBy(run)) {
      wanted.add(uid);
      if (shown.has(uid) || this.absent.has(uid) || conclusive(tombs.get(uid))) {
        mine.delete(uid);
        continue;
      }
      let found = mine.get(uid);
      if (!found || now - found.at >= TRACKED_POLL_MS) {
        try {
          const pod = await this.client.get<Json>(paths.pod(namespace, name));
          if ((pod.metadata as { uid?: string }).uid === uid) found = { pod: trimPod(pod), at: now };
          else found = this.gone(uid, found, result, now);
        } catch (err) {
          if (!isNotFound(err)) throw err;
          found = this.gone(uid, found, result, now);
        }
      }
      if (found) {
        mine.set(uid, found);
        result.detached.push(found.pod);
        result.polling = true;
      } else mine.delete(uid);
    }
    for (const uid of mine.keys()) if (!wanted.has(uid)) mine.delete(uid);
    if (mine.size) this.found.set(key, mine);
    else this.found.delete(key);
    for (const [uid, at] of this.absent) if (now - at > FORGET_AFTER_MS) this.absent.delete(uid);
    return result;
  }

  private gone(uid: string, last: Found | undefined, result: TrackedLookup, now: number): undefined {
    this.absent.set(uid, now);
    if (last) result.vanished.push(last.pod);
    return undefined;
  }

  forget(key: string): void {
    this.found.delete(key);
  }
}

/**
 * A final state that settles the question: the kubelet reported the pod stopped, or the pod was
 * being deleted when its object went (its node and grace are waited for anyway). Without a
 * deletion on it, an object that left the cache may only have lost its label.
 */
function conclusive(tomb: Json | undefined): boolean {
  if (!tomb) return false;
  const view = podView(tomb);
  return !isLive(view) || view.stopped || view.deleting;
}
