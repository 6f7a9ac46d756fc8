// Which pods are the run's, and which of them may still be running (rule 9).
//
// A pod belongs to the run whose uid its controller owner reference names, never by name or label
// alone: a run re-created under the same name never adopts, counts or is confirmed by an earlier
// run's pod. Once the run has created a pod, it tracks it by uid (status.podUID, then its
// terminating entry) until the pod is confirmed gone, whatever happens to its labels or owner
// references meanwhile: a pod quarantined for debugging (its label or owner reference removed)
// still runs, so it is still the run's.
//
// A deleted pod is confirmed gone only when the kubelet has stopped its containers: the pod
// reached a terminal phase, or its object disappeared with a final state that shows it (the
// kubelet's own final delete), or it never had a node. A pod that disappeared while it could still
// be running (force-deleted on a node cut off from the API server) is confirmed once its node has
// been in contact since, for longer than the longest grace its kubelet may use, or is shut down
// (out-of-service), or is gone. That grace is the longer of the deletion's and the pod's own
// terminationGracePeriodSeconds: a kubelet that saw the deletion uses the deletion's; one that
// finds the pod gone without having seen it (a relist after a long partition, or a restart) kills
// with the pod's own, which its containers carry as a label; and never less than the kubelet's
// floor of 2 s. Until then no replacement starts; after unconfirmedAfter the run says so
// (SandboxUnconfirmed).
import { MAX_TERMINATING, type TerminatingPod } from "../api/agentrun.ts";
import type { WatchdogSettings } from "../api/defaults.ts";
import { isLive, type NodeView, type PodView } from "./observe.ts";
import { REASONS } from "./reasons.ts";
import { isoSeconds, toMillis } from "../api/timestamp.ts";

/**
 * After the node is heard from again, how long its kubelet gets beyond the pod's grace to kill
 * it: its Lease is renewed by a goroutine of its own, before its pod watch has resumed or relisted
 * (about 15 s, two renewals); then each container gets up to 2 s beyond the grace (the kubelet's
 * floor applies after a preStop hook, and whole seconds are truncated), and a few seconds go to
 * SIGKILL, reaping and the sandbox's own stop.
 */
export const CONTACT_MARGIN_MS = 15_000 + 2_000 + 5_000;
/** The kubelet never gives a container less than this to stop (minimumGracePeriodInSeconds). */
export const KUBELET_MIN_GRACE_SECONDS = 2;
/** A pod's terminationGracePeriodSeconds when its spec does not say. */
export const DEFAULT_POD_GRACE_SECONDS = 30;

/** The longest grace the kubelet may give a terminating pod's containers, in ms (see above). */
export function longestGraceMs(entry: Pick<TerminatingPod, "gracePeriodSeconds" | "podGracePeriodSeconds">): number {
  const deletion = entry.gracePeriodSeconds ?? DEFAULT_POD_GRACE_SECONDS;
  const own = entry.podGracePeriodSeconds ?? DEFAULT_POD_GRACE_SECONDS;
  return Math.max(deletion, own, KUBELET_MIN_GRACE_SECONDS) * 1000;
}
/** How often a vanished pod's node is looked at again while it has not been heard from. */
export const CONTACT_POLL_MS = 10_000;


export interface Unconfirmed {
  entry: TerminatingPod;
  /** The pod's object, while it exists. */
  pod?: PodView;
  node?: NodeView;
  /** Past unconfirmedAfter: SandboxUnconfirmed is True because of it. */
  overdue: boolean;
  reason: typeof REASONS.nodeUnreachable | typeof REASONS.terminationPending;
}

export interface Sandboxes {
  /** Pods whose controller owner is this run. */
  owned: PodView[];
  /** The terminating list after this decision's confirmations (new deletions are added later). */
  terminating: TerminatingPod[];
  unconfirmed: Unconfirmed[];
  /** Pods confirmed gone in this decision. */
  confirmed: TerminatingPod[];
  /** Whether a pod of the run may still run, so that no new one may start. */
  busy: boolean;
  wakeAt: number[];
}

export interface SandboxInputs {
  runUid: string | undefined;
  /** Uids of pods the run's status tracks (its current pod, its terminating ones): the run's, whatever their owner references say. */
  tracked?: ReadonlySet<string>;
  pods: readonly PodView[];
  /** Final states of pods of this run whose objects were seen disappearing, by uid. */
  tombstones: ReadonlyMap<string, PodView>;
  /** Nodes by name, or undefined when the operator cannot see nodes (then none confirms). */
  nodes: ReadonlyMap<string, NodeView> | undefined;
  terminating: readonly TerminatingPod[];
  now: number;
  settings: WatchdogSettings;
}

/** The run's pods: those its uid controls, and those its status tracks by uid. */
export function ownedPods(runUid: string | undefined, pods: readonly PodView[], tracked: ReadonlySet<string> = new Set()): PodView[] {
  if (runUid === undefined) return [];
  return pods.filter((p) => p.ownerUid === runUid || (p.uid !== undefined && tracked.has(p.uid)));
}

type Check = { confirmed: true } | { confirmed: false; entry: TerminatingPod; wakeAt?: number };

/** Whether one terminating pod is gone, with what has been learnt about it on the way. */
function check(entry: TerminatingPod, input: SandboxInputs, pod: PodView | undefined): Check {
  if (pod) {
    if (!isLive(pod)) return { confirmed: true };
    return { confirmed: false, entry: pod.nodeName && !entry.nodeName ? { ...entry, nodeName: pod.nodeName } : entry };
  }
  const tomb = input.tombstones.get(entry.uid);
  // Its last state shows the kubelet stopped every container (it deletes the object itself after).
  if (tomb && (!isLive(tomb) || tomb.stopped || !tomb.nodeName)) return { confirmed: true };
  if (tomb) return checkOnNode(entry, input, tomb.nodeName as string);
  // No final state was seen (the operator was not watching): the node it was last known on, or,
  // with none recorded, any node, since the status records a pod's node lazily.
  return entry.nodeName ? checkOnNode(entry, input, entry.nodeName) : checkAnywhere(entry, input);
}

/** A pod that disappeared while bound to `nodeName`: gone once that node's kubelet has had time to stop it. */
function checkOnNode(entry: TerminatingPod, input: SandboxInputs, nodeName: string): Check {
  let next: TerminatingPod = { ...entry, nodeName };
  if (!next.vanishedAt) next = { ...next, vanishedAt: isoSeconds(input.now) };
  const node = input.nodes?.get(nodeName);
  if (input.nodes && !node) return { confirmed: true }; // the node itself is gone
  if (node?.outOfService) return { confirmed: true }; // declared shut down: the pod GC's to clear
  const vanishedAt = toMillis(next.vanishedAt) as number;
  const grace = longestGraceMs(next);
  const contactAt = toMillis(next.contactAt);
  if (contactAt !== undefined) {
    const done = contactAt + grace + CONTACT_MARGIN_MS;
    return input.now >= done ? { confirmed: true } : { confirmed: false, entry: next, wakeAt: done };
  }
  if (node?.lastContact !== undefined && node.lastContact > vanishedAt) {
    next = { ...next, contactAt: isoSeconds(node.lastContact) };
    const done = (toMillis(next.contactAt) as number) + grace + CONTACT_MARGIN_MS;
    return input.now >= done ? { confirmed: true } : { confirmed: false, entry: next, wakeAt: done };
  }
  return { confirmed: false, entry: next, wakeAt: input.now + CONTACT_POLL_MS };
}

/**
 * A pod that disappeared unseen with no node on record: it may have been bound to any node, so it
 * is gone once every node (the caller passes them all) has been heard from since, or is shut
 * down, and its grace has passed. A pod that was never bound waits for that too: nothing on record
 * tells the two apart.
 */
function checkAnywhere(entry: TerminatingPod, input: SandboxInputs): Check {
  const next: TerminatingPod = entry.vanishedAt ? entry : { ...entry, vanishedAt: isoSeconds(input.now) };
  const grace = longestGraceMs(next);
  const recorded = toMillis(next.contactAt);
  if (recorded !== undefined) {
    const done = recorded + grace + CONTACT_MARGIN_MS;
    return input.now >= done ? { confirmed: true } : { confirmed: false, entry: next, wakeAt: done };
  }
  const poll: Check = { confirmed: false, entry: next, wakeAt: input.now + CONTACT_POLL_MS };
  if (!input.nodes) return poll;
  const vanishedAt = toMillis(next.vanishedAt) as number;
  let heardAll = vanishedAt;
  for (const node of input.nodes.values()) {
    if (node.outOfService) continue;
    if (node.lastContact === undefined || node.lastContact <= vanishedAt) return poll;
    heardAll = Math.max(heardAll, node.lastContact);
  }
  const contacted: TerminatingPod = { ...next, contactAt: isoSeconds(heardAll) };
  const done = (toMillis(contacted.contactAt) as number) + grace + CONTACT_MARGIN_MS;
  return input.now >= done ? { confirmed: true } : { confirmed: false, entry: contacted, wakeAt: done };
}

/** Classifies the run's pods and confirms what can be confirmed of those being deleted. */
export function sandboxes(input: SandboxInputs): Sandboxes {
  const owned = ownedPods(input.runUid, input.pods, input.tracked);
  const terminating: TerminatingPod[] = [];
  const unconfirmed: Unconfirmed[] = [];
  const confirmed: TerminatingPod[] = [];
  const wakeAt: number[] = [];
  const listed = new Set<string>();

  // Pods being deleted by anyone are tracked as terminating, whoever asked.
  const entries = [...input.terminating];
  for (const pod of owned) {
    if (pod.deleting && pod.uid && isLive(pod) && !entries.some((e) => e.uid === pod.uid)) entries.push(entryFor(pod, input.now));
  }
  for (const entry of entries) {
    if (listed.has(entry.uid)) continue;
    listed.add(entry.uid);
    const pod = owned.find((p) => p.uid === entry.uid);
    const result = check(entry, input, pod);
    if (result.confirmed) {
      confirmed.push(entry);
      continue;
    }
    terminating.push(result.entry);
    if (result.wakeAt !== undefined) wakeAt.push(result.wakeAt);
    const since = toMillis(result.entry.since) ?? input.now;
    const overdueAt = since + input.settings.unconfirmedAfterMs;
    if (input.now < overdueAt) wakeAt.push(overdueAt);
    const node = result.entry.nodeName ? input.nodes?.get(result.entry.nodeName) : undefined;
    unconfirmed.push({
      entry: result.entry,
      ...(pod ? { pod } : {}),
      ...(node ? { node } : {}),
      overdue: input.now >= overdueAt,
      reason: node && node.ready === "True" ? REASONS.terminationPending : REASONS.nodeUnreachable,
    });
  }
  const busy = unconfirmed.length > 0 || owned.some((p) => isLive(p) && !listed.has(p.uid ?? ""));
  return { owned, terminating: terminating.slice(-MAX_TERMINATING), unconfirmed, confirmed, busy, wakeAt };
}

/**
 * The terminating record of a pod the run is deleting (or saw deleted) now: the deletion's grace
 * (`gracePeriodSeconds` when this decision deletes it, else the one on the object) and the pod's own.
 */
export function entryFor(pod: PodView, now: number, gracePeriodSeconds?: number): TerminatingPod {
  const entry: TerminatingPod = {
    name: pod.name,
    uid: pod.uid ?? "",
    since: isoSeconds(pod.deleting && pod.deletionRequestedAt !== undefined ? Math.min(pod.deletionRequestedAt, now) : now),
    gracePeriodSeconds: Math.max(0, Math.ceil(gracePeriodSeconds ?? pod.gracePeriodSeconds)),
    podGracePeriodSeconds: Math.max(0, Math.ceil(pod.podGracePeriodSeconds)),
  };
  if (pod.nodeName) entry.nodeName = pod.nodeName;
  return entry;
}

/**
 * A pod that vanished before anyone asked for its deletion (or while nobody watched): tracked like
 * a deleted one, with the grace the run recorded when it created the pod (its kubelet will use the
 * pod's own, having seen no deletion).
 */
export function vanishedEntry(name: string, uid: string, nodeName: string | undefined, now: number, podGracePeriodSeconds = DEFAULT_POD_GRACE_SECONDS): TerminatingPod {
  const entry: TerminatingPod = { name, uid, since: isoSeconds(now), gracePeriodSeconds: podGracePeriodSeconds, podGracePeriodSeconds };
  if (nodeName) entry.nodeName = nodeName;
  return entry;
}
