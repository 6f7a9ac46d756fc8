// The decision's input beyond the run and its pods (cert-manager's input gatherer, as a pure
// function): what this operator saw itself (run-index.ts), the nodes the run's pods are bound to,
// pods its status tracks outside the cache, and a refused write. No I/O: every source is passed in.
import type { Json } from "../kube/client.ts";
import type { DecideInput } from "../watchdog/decide.ts";
import type { LivenessMemory } from "../watchdog/liveness.ts";
import type { NodeView } from "../watchdog/observe.ts";

/** What this operator saw of one run, on its own clock. */
export interface Sightings {
  /** Final states of the run's pods seen deleted (or found gone). */
  deletedPods: Json[];
  /** When the run's current heartbeat value was seen to appear, if it was. */
  heartbeatSeenAt?: number;
  /** When each container of a pod was first seen running, by pod uid. */
  containersSeenRunning: (uid: string) => ReadonlyMap<string, number> | undefined;
  liveness?: LivenessMemory;
  /** Pods the run's status tracks that no longer carry its label. */
  detachedPods: Json[];
  /** The API server's refusal of the run's last status write, for what it held. */
  refusedWrite?: { message: string; tooLarge: boolean };
}

/** The nodes as the node cache knows them; undefined while it cannot say. */
export interface NodeSource {
  all(): ReadonlyMap<string, NodeView> | undefined;
  views(names: Iterable<string>): ReadonlyMap<string, NodeView> | undefined;
}

/**
 * Builds what the core needs beyond the run and its pods. `upper` moves a time of this operator's
 * clock onto the API server's (its latest possible value there).
 */
export function decisionInputs(run: Json, pods: readonly Json[], sightings: Sightings, nodes: NodeSource, upper: (ms: number) => number): Partial<DecideInput> {
  const { deletedPods } = sightings;
  const status = (run.status ?? {}) as { podUID?: string; nodeName?: string; terminating?: { uid?: string; nodeName?: string }[] };
  const names = new Set<string>();
  const seenPods = new Set<string>();
  for (const pod of [...pods, ...deletedPods]) {
    const node = (pod.spec as { nodeName?: string } | undefined)?.nodeName;
    if (node) names.add(node);
    const uid = (pod.metadata as { uid?: string } | undefined)?.uid;
    if (uid) seenPods.add(uid);
  }
  if (status.nodeName) names.add(status.nodeName);
  for (const entry of status.terminating ?? []) if (entry.nodeName) names.add(entry.nodeName);
  // A pod gone unseen with no node on record may have run on any node: the core checks them all.
  const unplaced =
    (status.podUID !== undefined && !status.nodeName && !seenPods.has(status.podUID)) ||
    (status.terminating ?? []).some((entry) => !entry.nodeName && entry.uid !== undefined && !seenPods.has(entry.uid));
  const inputs: Partial<DecideInput> = { deletedPods };
  const known = unplaced ? nodes.all() : nodes.views(names);
  if (known) inputs.nodes = known;
  if (sightings.heartbeatSeenAt !== undefined) inputs.heartbeatSeenAt = upper(sightings.heartbeatSeenAt);
  const starts = new Map<string, Map<string, number>>();
  for (const pod of pods) {
    const uid = (pod.metadata as { uid?: string } | undefined)?.uid;
    const local = uid ? sightings.containersSeenRunning(uid) : undefined;
    if (uid && local) starts.set(uid, new Map([...local].map(([name, at]) => [name, upper(at)])));
  }
  if (starts.size) inputs.containerStartsSeen = starts;
  if (sightings.detachedPods.length) inputs.detachedPods = sightings.detachedPods;
  if (sightings.refusedWrite) inputs.refusedWrite = sightings.refusedWrite;
  if (sightings.liveness) inputs.liveness = sightings.liveness;
  return inputs;
}
