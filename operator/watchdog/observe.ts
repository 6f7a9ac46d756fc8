// Turning API objects into what the core reasons about. A sandbox can write anything its RBAC
// lets it write; a field that does not parse is dropped and reported, never thrown.
import { LABELS } from "../api/annotations.ts";
import { toMillis } from "../api/timestamp.ts";
import { serverWriteTime } from "../api/managed-fields.ts";

type Json = Record<string, unknown>;

export interface ContainerEnd {
  code?: number;
  reason?: string;
  message?: string;
}

export interface PodView {
  name: string;
  uid?: string;
  /** The uid of the pod's controller owner: a pod belongs to the run whose uid this is. */
  ownerUid?: string;
  /** The attempt label; undefined when missing or not a number. */
  attempt?: number;
  phase: "Pending" | "Running" | "Succeeded" | "Failed" | "Unknown";
  createdAt: number;
  deleting: boolean;
  /** When the deletion was asked for, if it was (deletionTimestamp minus the grace). */
  deletionRequestedAt?: number;
  nodeName?: string;
  /** The grace its containers get on deletion: the deletion's own, else the pod's. */
  gracePeriodSeconds: number;
  /** The pod's own terminationGracePeriodSeconds (30 when unset). */
  podGracePeriodSeconds: number;
  /** How the pod ended, when it has. */
  exit?: ContainerEnd;
  /**
   * The agent container (watchdog.agentContainer, else the first): when it started and how it
   * ended. `startedAt` is the node's own clock (the kubelet's record), shown to people but never
   * used for a deadline; `startSeenAt` is when its start was known on the API server's clock (see
   * agentStartOnServer), filled in by the core.
   */
  agent: { name?: string; startedAt?: number; startSeenAt?: number; ended?: ContainerEnd };
  /** Every container has terminated: the kubelet is about to report the pod's final phase. */
  stopped: boolean;
  /** How many container states the pod reports (none before the kubelet has looked at it). */
  containerStates: number;
}

function terminated(cs: Json | undefined): ContainerEnd | undefined {
  const t = ((cs?.state as Json | undefined)?.terminated ?? (cs?.lastState as Json | undefined)?.terminated) as Json | undefined;
  if (!t) return undefined;
  return {
    code: typeof t.exitCode === "number" ? t.exitCode : undefined,
    reason: typeof t.reason === "string" ? t.reason : undefined,
    message: typeof t.message === "string" ? t.message : undefined,
  };
}

function terminatedState(pod: Json): PodView["exit"] {
  const status = (pod.status ?? {}) as Json;
  const statuses = [...((status.containerStatuses as Json[] | undefined) ?? [])];
  // The first container that failed says most about why the sandbox died.
  let found: PodView["exit"];
  for (const cs of statuses) {
    const exit = terminated(cs);
    if (!exit) continue;
    if (!found || (exit.code ?? 0) !== 0) found = exit;
    if ((exit.code ?? 0) !== 0) break;
  }
  const podReason = typeof status.reason === "string" ? status.reason : undefined; // e.g. Evicted
  const podMessage = typeof status.message === "string" ? status.message : undefined;
  if (!found && !podReason) return undefined;
  return { ...found, reason: podReason ?? found?.reason, message: podMessage ?? found?.message };
}

function agentState(pod: Json, agentContainer: string | undefined): PodView["agent"] {
  const spec = (pod.spec ?? {}) as Json;
  const name = agentContainer ?? ((spec.containers as Json[] | undefined)?.[0]?.name as string | undefined);
  const statuses = ((pod.status as Json | undefined)?.containerStatuses as Json[] | undefined) ?? [];
  const cs = name === undefined ? undefined : statuses.find((c) => c.name === name);
  const state = (cs?.state ?? {}) as Json;
  const running = state.running as Json | undefined;
  const ended = state.terminated ? terminated(cs) : undefined;
  const startedAt = toMillis(running?.startedAt ?? (state.terminated as Json | undefined)?.startedAt);
  const agent: PodView["agent"] = {};
  if (name !== undefined) agent.name = name;
  // A container that never ran has a terminated state with a zero start time (1970): not a start.
  if (startedAt !== undefined && startedAt > 0) agent.startedAt = startedAt;
  if (ended) agent.ended = ended;
  return agent;
}

/**
 * A pod as the core sees it. Accepts client-node objects (Date timestamps) and plain JSON.
 * `agentContainer` names the container whose exit decides the attempt (default: the first).
 */
export function podView(pod: unknown, agentContainer?: string): PodView {
  const p = pod as Json;
  const meta = (p.metadata ?? {}) as Json;
  const spec = (p.spec ?? {}) as Json;
  const labels = (meta.labels ?? {}) as Record<string, string>;
  const attemptLabel = Number(labels[LABELS.attempt]);
  const rawPhase = (p.status as Json | undefined)?.phase;
  const phase: PodView["phase"] =
    rawPhase === "Pending" || rawPhase === "Running" || rawPhase === "Succeeded" || rawPhase === "Failed"
      ? rawPhase
      : rawPhase === undefined
        ? "Pending"
        : "Unknown";
  const statuses = ((p.status as Json | undefined)?.containerStatuses as Json[] | undefined) ?? [];
  const deletionAt = toMillis(meta.deletionTimestamp);
  const deletionGrace = typeof meta.deletionGracePeriodSeconds === "number" ? meta.deletionGracePeriodSeconds : undefined;
  const podGrace = typeof spec.terminationGracePeriodSeconds === "number" ? spec.terminationGracePeriodSeconds : 30;
  const view: PodView = {
    name: String(meta.name),
    phase,
    createdAt: toMillis(meta.creationTimestamp) ?? 0,
    deleting: meta.deletionTimestamp !== undefined && meta.deletionTimestamp !== null,
    gracePeriodSeconds: deletionGrace ?? podGrace,
    podGracePeriodSeconds: podGrace,
    agent: agentState(p, agentContainer),
    stopped: statuses.length > 0 && statuses.every((cs) => (cs.state as Json | undefined)?.terminated !== undefined),
    containerStates: statuses.length,
  };
  if (typeof meta.uid === "string") view.uid = meta.uid;
  const owner = ((meta.ownerReferences as Json[] | undefined) ?? []).find((o) => o.controller === true);
  if (owner && typeof owner.uid === "string") view.ownerUid = owner.uid;
  if (Number.isInteger(attemptLabel) && attemptLabel > 0) view.attempt = attemptLabel;
  if (typeof spec.nodeName === "string" && spec.nodeName) view.nodeName = spec.nodeName;
  if (deletionAt !== undefined) view.deletionRequestedAt = deletionAt - (deletionGrace ?? 0) * 1000;
  if (phase === "Failed" || phase === "Succeeded") {
    const exit = terminatedState(p);
    if (exit) view.exit = exit;
  }
  return view;
}

/**
 * A pod whose containers may still run: anything that has not reached a final phase with every
 * container stopped. The kubelet reports a final phase only once its containers have stopped; the
 * pod garbage collector marks a pod Failed before it force-deletes it from a node it takes for
 * gone, with its containers still shown running, and that proves nothing.
 */
export function isLive(pod: PodView): boolean {
  if (pod.phase !== "Succeeded" && pod.phase !== "Failed") return true;
  return pod.containerStates > 0 && !pod.stopped;
}

/**
 * A pod with something to stop: live, and not merely waiting for the kubelet to report the final
 * phase of containers that have all terminated. Clean-ups delete these only, so that a finished
 * pod keeps its logs. (Rule 9 still waits for the final phase: isLive.)
 */
export function hasWork(pod: PodView): boolean {
  return isLive(pod) && !pod.stopped;
}

/** What the core needs to know of a node: whether its kubelet is in contact, and since when. */
export interface NodeView {
  name: string;
  /** The Ready condition: True, False or Unknown (the node controller's verdict). */
  ready: "True" | "False" | "Unknown";
  /** The node was declared shut down (node.kubernetes.io/out-of-service): its pods are the pod GC's. */
  outOfService: boolean;
  /** When the kubelet last renewed its Lease, on the API server's clock (ms), if known. */
  lastContact?: number;
}

export const OUT_OF_SERVICE_TAINT = "node.kubernetes.io/out-of-service";

/** A Node (and its kube-node-lease Lease, when known) as the core sees it. */
export function nodeView(node: unknown, lease?: unknown): NodeView {
  const n = node as Json;
  const meta = (n.metadata ?? {}) as Json;
  const conditions = ((n.status as Json | undefined)?.conditions as Json[] | undefined) ?? [];
  const ready = conditions.find((c) => c.type === "Ready")?.status;
  const taints = ((n.spec as Json | undefined)?.taints as Json[] | undefined) ?? [];
  const view: NodeView = {
    name: String(meta.name),
    ready: ready === "True" || ready === "False" ? ready : "Unknown",
    outOfService: taints.some((t) => t.key === OUT_OF_SERVICE_TAINT),
  };
  const contact = lease ? serverWriteTime(lease, ["f:spec", "f:renewTime"]) : undefined;
  if (contact !== undefined) view.lastContact = contact;
  return view;
}


export { readRun, type ReadRun } from "../api/read-run.ts";
