// What the watchdog core hands to the controller: everything to write, delete, create and emit
// for one run, and when to look at the run again. The controller executes plans; it never decides.
import type { AgentRunStatus, BudgetLimit, Phase } from "../api/agentrun.ts";
import type { SandboxPodManifest } from "./sandbox-pod.ts";

/** The operator-owned status fields. A plan never names a sandbox-owned field. */
export const OPERATOR_STATUS_FIELDS = [
  "phase",
  "reason",
  "message",
  "attempt",
  "restarts",
  "rateLimitRequeues",
  "podName",
  "podUID",
  "nodeName",
  "podGracePeriodSeconds",
  "terminating",
  "retryAfter",
  "startTime",
  "completionTime",
  "observedGeneration",
  "observedResume",
  "toolCallsResetAfter",
  "lastFailure",
  "conditions",
  "stall",
  "approval",
  "transitions",
  "watchdog",
  "budget",
  "spent",
  "budgetWarnings",
  "timeoutsChangedAt",
] as const;
export type OperatorStatusField = (typeof OPERATOR_STATUS_FIELDS)[number];

/**
 * A JSON merge patch of operator-owned status fields: nested objects merge, null removes. It names
 * a sandbox-owned field only to clear it, and only when the sandbox filled its status past the
 * protocol's bound and left the object no room for the operator's write (rule 12).
 */
export type StatusPatch = { [K in OperatorStatusField]?: Partial<NonNullable<AgentRunStatus[K]>> | AgentRunStatus[K] | null } & {
  checkpoint?: null;
  toolCalls?: null;
};

/** A JSON merge patch of operator-owned annotations; null removes an annotation. */
export type AnnotationPatch = Record<string, string | null>;

export interface PlannedEvent {
  type: "Normal" | "Warning";
  reason: string;
  action: string;
  note: string;
}

/** What the metrics should count when the plan has been carried out. */
export type MetricSignal =
  | { kind: "hungKilled"; deadline: number }
  | { kind: "requeue"; reason: string }
  | { kind: "needsHuman"; reason: string }
  | { kind: "nudge" }
  | { kind: "budgetExhausted"; limit: BudgetLimit };

export interface PodDeletion {
  name: string;
  /** The pod's uid, used as a delete precondition so a newer pod of the same name is never hit. */
  uid?: string;
  /**
   * Seconds its containers get to stop: killGracePeriod when the watchdog kills a sandbox;
   * undefined leaves the pod's own terminationGracePeriodSeconds. Never 0: a pod is never
   * force-deleted, since a node cut off from the API server would keep its containers running.
   */
  gracePeriodSeconds?: number;
}

export interface Plan {
  /** Status fields to merge, or undefined when status is already right. */
  status?: StatusPatch;
  /** Operator annotations to merge, or undefined when they are already right. */
  annotations?: AnnotationPatch;
  /** Sandbox pods to delete, gracefully. */
  deletePods: PodDeletion[];
  /**
   * A sandbox pod to create. The core only asks for one when no pod of the run may still run
   * (rule 9); the controller confirms that against the API server before creating it, and puts the
   * new pod's uid into status.podUID with the status write that names it.
   */
  createPod?: SandboxPodManifest;
  /** Objects the new pod needs (its ServiceAccount and RBAC), created first if missing. */
  prerequisites?: Record<string, unknown>[];
  /**
   * The run's finalizer (FINALIZER): added before its first pod is created, so that a deleted run
   * stays until its sandbox is confirmed gone; removed once no sandbox of it may run.
   */
  finalizer?: "add" | "remove";
  events: PlannedEvent[];
  metrics: MetricSignal[];
  /** When to reconcile this run again if nothing else happens (ms since epoch). */
  wakeAt?: number;
  /** The phase after the plan, for logs and the ledger. */
  phase: Phase;
  /** One line saying what was decided and why, for logs. */
  summary: string;
}

/** True when executing the plan writes nothing to the API server. */
export function isQuiet(plan: Plan): boolean {
  return (
    plan.status === undefined &&
    plan.annotations === undefined &&
    plan.deletePods.length === 0 &&
    plan.createPod === undefined &&
    plan.finalizer === undefined &&
    plan.events.length === 0
  );
}
