// The watchdog core: (run, its pods, now, install defaults) -> plan. No I/O, no clock, no memory
// between calls: everything it needs is in the objects, so any operator replica, restarted at any
// moment, decides the same.
//
// One decision, end to end:
//   1. read the run; resolve its settings; see its pods as rule 9 does (sandboxes.ts) and its
//      heartbeat on the server's clock (liveness.ts);
//   2. refuse answers that name no pending request (answers.ts);
//   3. run the policy of the phase: lifecycle.ts (resume, suspend, clean-up), queued.ts,
//      running.ts (with awaiting.ts and failure.ts); each returns an Outcome, applied in order;
//   4. delete pods that are not the current attempt's; derive conditions and transitions; cut
//      everything to the CRD's limits; diff against what is stored.
import { ACTIVE_PHASES, TERMINAL_PHASES, type AgentRunStatus, type Phase } from "../api/agentrun.ts";
import { ANNOTATIONS } from "../api/annotations.ts";
import { resolveWatchdog, toSettings, type InstallDefaults } from "../api/defaults.ts";
import { readAnswers } from "./answers.ts";
import { withinLimits } from "./bounds.ts";
import { findCondition } from "./conditions.ts";
import { believe, type LivenessMemory } from "./liveness.ts";
import { mergePatchDiff } from "./merge-patch.ts";
import { HEARTBEAT_FIELD, hasWork, podView, readRun, serverWriteTime, type NodeView } from "./observe.ts";
import { event, type Outcome, type OperatorStatus } from "./outcome.ts";
import { OPERATOR_STATUS_FIELDS, type AnnotationPatch, type MetricSignal, type Plan, type PlannedEvent, type PodDeletion, type StatusPatch } from "./plan.ts";
import { cleanUp, resumption, suspension } from "./policy/lifecycle.ts";
import { queued, retryAfterOf } from "./policy/queued.ts";
import { released } from "./policy/awaiting.ts";
import { running } from "./policy/running.ts";
import { REASONS } from "./reasons.ts";
import { currentPod, isoSeconds, type RunView } from "./run-view.ts";
import { DEFAULT_SANDBOX_IDENTITY, identityObjects, type SandboxIdentity } from "./sandbox-identity.ts";
import { sandboxPod } from "./sandbox-pod.ts";
import { entryFor, sandboxes, vanishedEntry } from "./sandboxes.ts";
import { conditionsFor } from "./status-conditions.ts";
import { withTransitions, type Step } from "./transitions.ts";

export interface DecideInput {
  /** The AgentRun as read from the API server (raw JSON or a client-node object). */
  run: unknown;
  /** The pods labelled with this run's name (only those its uid owns count). */
  pods: readonly unknown[];
  /** The time now, in ms since the epoch. */
  now: number;
  /** The install's watchdog defaults (operator configuration). */
  defaults?: InstallDefaults;
  /** How sandboxes identify themselves to the API server. */
  sandbox?: SandboxIdentity;
  /** Final states of this run's pods whose objects were seen disappearing (watch DELETED events). */
  deletedPods?: readonly unknown[];
  /** The nodes its pods are bound to, with their kubelets' last contact; undefined when unknown. */
  nodes?: ReadonlyMap<string, NodeView>;
  /** When this operator saw the current heartbeat value appear, if it did (its own observation). */
  heartbeatSeenAt?: number;
  /** When the API server accepted the heartbeat, if the caller read it already (a trimmed cache). */
  heartbeatAcceptedAt?: number;
  /** What the operator last believed about the current attempt's liveness (see LivenessMemory). */
  liveness?: LivenessMemory;
}

function pickOperatorStatus(status: AgentRunStatus): OperatorStatus {
  const out: Record<string, unknown> = {};
  for (const field of OPERATOR_STATUS_FIELDS) {
    if (status[field] !== undefined) out[field] = status[field];
  }
  return structuredClone(out) as OperatorStatus;
}

const quiet = (phase: Phase, summary: string): Plan => ({ deletePods: [], events: [], metrics: [], phase, summary });

/** Decides what to do with one run. */
export function decide(input: DecideInput): Plan {
  const read = readRun(input.run);
  if (!read.ok) return quiet("Queued", `cannot read run: ${read.error}`);
  const run = read.run;
  const status = run.status ?? {};
  if (run.metadata.deletionTimestamp) return quiet(status.phase ?? "Queued", "run is being deleted");
  const effective = resolveWatchdog(run.spec.watchdog, input.defaults);
  const settings = toSettings(effective);
  const now = input.now;

  let next = pickOperatorStatus(status);
  const steps: Step[] = [];
  const deletions: PodDeletion[] = [];
  const events: PlannedEvent[] = [];
  const metrics: MetricSignal[] = [];
  const wakes: number[] = [];
  const consumed = new Set<string>();
  const summaries: string[] = [];
  let createPod = false;
  let then: Outcome["then"];

  const view: RunView = {
    run,
    status,
    settings,
    now,
    identity: input.sandbox ?? DEFAULT_SANDBOX_IDENTITY,
    // filled in below, once the attempt is known
    sandboxes: { owned: [], terminating: [], unconfirmed: [], confirmed: [], busy: false, wakeAt: [] },
  };
  const apply = (outcome: Outcome | undefined): void => {
    if (!outcome) return;
    if (outcome.summary) summaries.push(outcome.summary);
    if (outcome.set) next = { ...next, ...outcome.set };
    if (outcome.phase) {
      if (outcome.phase.phase !== next.phase) steps.push({ ...outcome.phase });
      next = { ...next, phase: outcome.phase.phase, reason: outcome.phase.reason, message: outcome.phase.message };
    }
    for (const d of outcome.deletions ?? []) {
      const grace = d.kill ? settings.killGracePeriodSeconds : undefined;
      // Already going: a kill may only shorten a longer grace, never start another deletion.
      if (d.pod.deleting && !(d.kill && d.pod.gracePeriodSeconds > settings.killGracePeriodSeconds)) continue;
      if (deletions.some((x) => x.name === d.pod.name)) continue;
      deletions.push({ name: d.pod.name, ...(d.pod.uid ? { uid: d.pod.uid } : {}), ...(grace !== undefined ? { gracePeriodSeconds: grace } : {}) });
      if (d.pod.uid && !(next.terminating ?? []).some((e) => e.uid === d.pod.uid)) {
        next = { ...next, terminating: [...(next.terminating ?? []), entryFor(d.pod, now, grace)] };
      }
    }
    // Never two sandboxes: nothing starts in a decision that is still removing one.
    if (outcome.createPod) {
      if (deletions.length === 0) createPod = true;
      else summaries.push("waiting for the pods this decision deletes to be gone");
    }
    events.push(...(outcome.events ?? []));
    metrics.push(...(outcome.metrics ?? []));
    for (const w of outcome.wakeAt ?? []) if (w !== undefined) wakes.push(w);
    for (const key of outcome.consume ?? []) consumed.add(key);
    then = outcome.then;
  };

  if (next.phase === undefined) apply({ summary: "", phase: { phase: "Queued", reason: REASONS.created, message: "waiting for its first sandbox" }, set: { attempt: 1, restarts: 0 } });
  next.observedGeneration = run.metadata.generation;
  next.watchdog = effective;

  // The run's pods as rule 9 sees them. A current pod that vanished is tracked like a deleted one.
  const pods = input.pods.map((p) => podView(p, settings.agentContainer));
  const tombstones = new Map((input.deletedPods ?? []).map((p) => podView(p, settings.agentContainer)).filter((p) => p.uid).map((p) => [p.uid as string, p] as const));
  const terminating = [...(next.terminating ?? [])];
  const expectsPod = ACTIVE_PHASES.includes(next.phase as Phase) && next.podName !== undefined;
  if (expectsPod && next.podUID && !pods.some((p) => p.uid === next.podUID && p.ownerUid === run.metadata.uid) && !terminating.some((e) => e.uid === next.podUID)) {
    // Its final state, when the watch saw it go, says where it ran and with what grace.
    const tomb = tombstones.get(next.podUID);
    // A kubelet that finds the pod gone kills it with the pod's own grace, whatever the deletion said.
    terminating.push(tomb ? entryFor(tomb, now, Math.max(tomb.gracePeriodSeconds, tomb.podGracePeriodSeconds)) : vanishedEntry(next.podName as string, next.podUID, next.nodeName, now));
  }
  view.sandboxes = sandboxes({ runUid: run.metadata.uid, pods, tombstones, nodes: input.nodes, terminating, now, settings });
  next.terminating = view.sandboxes.terminating.length ? view.sandboxes.terminating : undefined;
  wakes.push(...view.sandboxes.wakeAt);

  const accepted = input.heartbeatAcceptedAt ?? serverWriteTime(input.run, HEARTBEAT_FIELD);
  const belief = believe({ runUid: run.metadata.uid ?? "", attempt: next.attempt ?? 0, heartbeat: status.heartbeat, serverTime: accepted, seenAt: input.heartbeatSeenAt }, input.liveness);
  if (belief.heartbeat) view.heartbeat = belief.heartbeat;
  if (belief.erasedAt !== undefined) view.heartbeatErasedAt = belief.erasedAt;
  const problems = [...read.problems];
  if (status.heartbeat && status.heartbeat.attempt > (next.attempt ?? 0)) {
    problems.push(`status.heartbeat.attempt ${status.heartbeat.attempt} is ahead of the run's attempt ${next.attempt ?? 0}`);
  }
  const answers = readAnswers(run, next.approval);
  if (answers.answer) view.answer = answers.answer;
  apply(answers.refused);

  if (TERMINAL_PHASES.includes(next.phase as Phase)) {
    // Absorbing: nothing restarts a finished run. A live pod left behind is only cleaned up.
    apply(cleanUp(view, `${next.phase}`));
  } else {
    apply(resumption(view, next));
    if (then === undefined) {
      if (next.phase === "NeedsHumanIntervention") apply(cleanUp(view, "waiting for a person"));
      else apply(suspension(view, next) ?? byPhase(view, next));
    }
    if (then === "queued") apply(queued(view, next));
  }

  // Pods of the run that are not the current attempt's must not run beside it.
  const current = currentPod(view, next);
  const strays = view.sandboxes.owned.filter((p) => hasWork(p) && !p.deleting && p !== current);
  if (strays.length) apply({ summary: "", deletions: strays.map((pod) => ({ pod, kill: false })) });

  next.transitions = withTransitions(next, status.phase, steps, now);
  const phase = next.phase as Phase;
  const overdue = view.sandboxes.unconfirmed.filter((u) => u.overdue);
  const wasUnconfirmed = findCondition(next.conditions, "SandboxUnconfirmed")?.status === "True";
  next.conditions = conditionsFor({
    phase,
    next,
    nowIso: isoSeconds(now),
    generation: run.metadata.generation,
    backingOff: phase === "Queued" && (retryAfterOf(view, next) ?? 0) > now,
    problems,
    overdue,
  });
  if (overdue.length > 0 && !wasUnconfirmed) {
    const condition = findCondition(next.conditions, "SandboxUnconfirmed");
    events.push(event("Warning", "SandboxUnconfirmed", "AwaitTermination", condition?.message ?? "a deleted sandbox pod is not confirmed gone"));
  }
  next = withinLimits(next);

  const plan: Plan = {
    deletePods: deletions,
    events,
    metrics,
    phase,
    summary: summaries.filter(Boolean).join("; ") || "no change",
  };
  const stored = json(pickOperatorStatus(status));
  const statusPatch = mergePatchDiff(stored, json(next)) as StatusPatch | undefined;
  // The node a pod is bound to goes with the next write that is made anyway (the first heartbeat's
  // phase, or a kill, which records it in the terminating entry): a write of its own would cost a
  // request per run. Until then a pod that vanishes unseen is checked against every node.
  if (statusPatch && mergePatchDiff(stored, json({ ...next, nodeName: status.nodeName })) !== undefined) plan.status = statusPatch;
  const annotations = diffAnnotations(run.metadata.annotations ?? {}, next, consumed);
  if (annotations) plan.annotations = annotations;
  if (createPod) {
    plan.createPod = sandboxPod(run, next.attempt ?? 1, view.identity);
    const prerequisites = identityObjects(run, view.identity);
    if (prerequisites.length) plan.prerequisites = prerequisites;
  }
  // Suspended: no timer fires, but pods still being confirmed gone are looked at.
  const wakeAt = phase === "Suspended" ? view.sandboxes.wakeAt : wakes;
  if (wakeAt.length) plan.wakeAt = Math.min(...wakeAt);
  return plan;
}

function byPhase(view: RunView, next: OperatorStatus): Outcome {
  if (next.phase === "Queued") return queued(view, next);
  if (next.phase === "AwaitingReply" && next.podName === undefined) return released(view, next);
  return running(view, next);
}

// Compared as JSON, so that key order and undefined members never cause a write.
const json = (v: unknown) => JSON.parse(JSON.stringify(v)) as unknown;

function diffAnnotations(current: Record<string, string>, next: OperatorStatus, consumed: ReadonlySet<string>): AnnotationPatch | undefined {
  const desired: Record<string, string | undefined> = {
    [ANNOTATIONS.attempt]: String(next.attempt ?? 0),
    [ANNOTATIONS.retryAfter]: next.retryAfter,
    [ANNOTATIONS.backoffReason]: next.retryAfter !== undefined ? next.lastFailure?.reason : undefined,
  };
  const patch: AnnotationPatch = {};
  for (const key of consumed) if (current[key] !== undefined) patch[key] = null;
  for (const [key, value] of Object.entries(desired)) {
    if (value === undefined && current[key] !== undefined) patch[key] = null;
    else if (value !== undefined && current[key] !== value) patch[key] = value;
  }
  return Object.keys(patch).length ? patch : undefined;
}
