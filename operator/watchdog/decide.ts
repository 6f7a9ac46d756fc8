// The watchdog core: (run, its pods, now, install defaults) -> plan. No I/O, no clock, no memory
// between calls: everything it needs is in the objects, so any operator replica, restarted at any
// moment, decides the same.
//
// One decision, end to end:
//   1. read the run; resolve its settings; see its pods as rule 9 does (sandboxes.ts) and its
//      heartbeat on the server's clock (liveness.ts);
//   2. refuse answers that name no pending request (answers.ts);
//   3. run the guard chain (GUARDS below): the first guard with an answer decides; a hand-over to
//      Queued (a resume, an unsuspend, an approval) runs the chain once more, so that a later
//      guard (spec.suspend) still wins over it;
//   4. delete pods that are not the current attempt's; fold ended attempts' usage into
//      status.spent and watch the budget (policy/budget.ts); end a request the run no longer waits
//      on; keep the finalizer while a sandbox may run; derive conditions and transitions; cut
//      everything to the CRD's limits; diff against what is stored.
//
// RULES: the design's watchdog rules, where the code cites them, and the module that holds each.
//    1  Queued, retry-after passed, not suspended: create the sandbox pod    policy/queued.ts
//    2  Hung: no heartbeat for heartbeatTimeout, on the server's clock       liveness.ts, policy/running.ts
//    3  Crashed: the agent exited non-zero, the pod failed or vanished        policy/running.ts, policy/failure.ts
//    4  Rate limited: requeue on rateLimitBackoff, no restart spent          tool-calls.ts, policy/failure.ts
//    5  Restart allowance spent: NeedsHumanIntervention, no pod              policy/failure.ts
//    6  Tool loop: the same failing call maxConsecutiveToolFailures times    tool-calls.ts, policy/running.ts
//    7  Stall: nudge after stall.timeout of silence, then a person           stall.ts, policy/running.ts
//    8  Resume: a new watchdog.dev/resume starts a fresh attempt             policy/lifecycle.ts
//    9  Never two sandboxes: a pod is confirmed gone before a replacement    sandboxes.ts, policy/queued.ts
//   10  Idempotent side effects: an unknown non-idempotent outcome stops     policy/failure.ts (and the SDKs)
//   11  Approvals: answers bind to the pending request; never hung           answers.ts, policy/awaiting.ts
//   12  No input wedges a kill: everything written fits the CRD's limits     bounds.ts, observe.ts
import { ACTIVE_PHASES, type AgentRunStatus, type Phase } from "../api/agentrun.ts";
import { ANNOTATIONS, FINALIZER } from "../api/annotations.ts";
import { effectiveBudget, resolveBudget, resolveWatchdog, toSettings, type InstallDefaults } from "../api/defaults.ts";
import { cutToCodePoints, jsonBytes, MAX_SANDBOX_STATUS_BYTES } from "../api/limits.ts";
import { readAnswers } from "./answers.ts";
import { withinLimits } from "./bounds.ts";
import { findCondition } from "./conditions.ts";
import { agentStartOnServer, believe, type LivenessMemory } from "./liveness.ts";
import { mergePatchDiff } from "./merge-patch.ts";
import { hasWork, podView, readRun, type NodeView } from "./observe.ts";
import { event, type Outcome, type OperatorStatus } from "./outcome.ts";
import { OPERATOR_STATUS_FIELDS, type AnnotationPatch, type MetricSignal, type Plan, type PlannedEvent, type PodDeletion, type StatusPatch } from "./plan.ts";
import { GUARDS, HAND_OVERS } from "./guards.ts";
import { budgetWatch, foldSpent } from "./policy/budget.ts";
import { newResumeToken } from "./policy/lifecycle.ts";
import { retryAfterOf } from "./policy/queued.ts";
import { REASONS } from "./reasons.ts";
import { currentPod, type RunView } from "./run-view.ts";
import { DEFAULT_SANDBOX_IDENTITY, identityObjects, type SandboxIdentity } from "./sandbox-identity.ts";
import { sandboxPod } from "./sandbox-pod.ts";
import { entryFor, sandboxes, vanishedEntry } from "./sandboxes.ts";
import { conditionsFor } from "./status-conditions.ts";
import { withTransitions, type Step } from "./transitions.ts";
import { HEARTBEAT_FIELD, serverWriteTime } from "../api/managed-fields.ts";
import { isoSeconds } from "../api/timestamp.ts";

export interface DecideInput {
  /** The AgentRun as read from the API server (raw JSON or a client-node object). */
  run: unknown;
  /** The pods labelled with the run's name (only those its uid owns, or its status tracks, count). */
  pods: readonly unknown[];
  /** Pods the run's status tracks by uid that no longer carry its label (looked up by name). */
  detachedPods?: readonly unknown[];
  /** The time now, in ms since the epoch, on the API server's clock (never ahead of it). */
  now: number;
  /** The install's watchdog defaults (operator configuration). */
  defaults?: InstallDefaults;
  /** How sandboxes identify themselves to the API server. */
  sandbox?: SandboxIdentity;
  /** Final states of this run's pods whose objects were seen disappearing (watch DELETED events). */
  deletedPods?: readonly unknown[];
  /** The nodes its pods are bound to, with their kubelets' last contact; undefined when unknown. */
  nodes?: ReadonlyMap<string, NodeView>;
  /** When this operator saw the current heartbeat value appear, if it did (its own observation, on the server's clock). */
  heartbeatSeenAt?: number;
  /** When the API server accepted the heartbeat, if the caller read it already (a trimmed cache). */
  heartbeatAcceptedAt?: number;
  /** What the operator last believed about the current attempt's liveness (see LivenessMemory). */
  liveness?: LivenessMemory;
  /** When this operator first saw each container running, by pod uid and container name (server's clock). */
  containerStartsSeen?: ReadonlyMap<string, ReadonlyMap<string, number>>;
  /**
   * The API server refused this run's last status write for what it held (not a conflict, not an
   * outage): the run stops for a person with a write small enough to be taken (rule 12).
   */
  refusedWrite?: { message: string; tooLarge: boolean };
}

function pickOperatorStatus(status: AgentRunStatus): OperatorStatus {
  const out: Record<string, unknown> = {};
  for (const field of OPERATOR_STATUS_FIELDS) {
    if (status[field] !== undefined) out[field] = status[field];
  }
  return structuredClone(out) as OperatorStatus;
}

const quiet = (phase: Phase, summary: string): Plan => ({ deletePods: [], events: [], metrics: [], phase, summary });

/** The sandbox's part of status, as the API server stores it. */
const sandboxBytes = (status: Record<string, unknown> | undefined) => jsonBytes({ heartbeat: status?.heartbeat, toolCalls: status?.toolCalls, checkpoint: status?.checkpoint });

/** What a write the API server refused may still hold: the record of the stop, and nothing it might have refused. */
const REFUSAL_FIELDS: ReadonlySet<string> = new Set(["phase", "reason", "message", "attempt", "restarts", "podName", "podUID", "nodeName", "podGracePeriodSeconds", "terminating", "conditions", "spent"]);

/** Decides what to do with one run. */
export function decide(input: DecideInput): Plan {
  const read = readRun(input.run);
  if (!read.ok) return quiet("Queued", `cannot read run: ${read.error}`);
  const run = read.run;
  const status = run.status ?? {};
  const rawStatus = (input.run as { status?: Record<string, unknown> }).status;
  const effective = resolveWatchdog(run.spec.watchdog, input.defaults);
  const settings = toSettings(effective);
  const budget = resolveBudget(run.spec.budget, input.defaults?.budget);
  const now = input.now;
  const deleting = Boolean(run.metadata.deletionTimestamp);

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
    budget,
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
    // Never two sandboxes: nothing starts in a decision that is still removing one, nor for a run
    // that is suspended or being deleted, whatever a policy asked for.
    if (outcome.createPod) {
      if (deletions.length > 0) summaries.push("waiting for the pods this decision deletes to be gone");
      else if (run.spec.suspend === true || deleting) summaries.push("no sandbox starts while the run is suspended or being deleted");
      else createPod = true;
    }
    events.push(...(outcome.events ?? []));
    metrics.push(...(outcome.metrics ?? []));
    for (const w of outcome.wakeAt ?? []) if (w !== undefined) wakes.push(w);
    for (const key of outcome.consume ?? []) consumed.add(key);
    then = outcome.then;
  };

  if (next.phase === undefined) apply({ summary: "", phase: { phase: "Queued", reason: REASONS.created, message: "waiting for its first sandbox" }, set: { attempt: 1, restarts: 0 } });
  next.observedGeneration = run.metadata.generation;
  // A shorter timeout counts from when it changed (rule 2): the sandbox must have time to learn it.
  if (status.watchdog && (status.watchdog.heartbeatTimeout !== effective.heartbeatTimeout || status.watchdog.startTimeout !== effective.startTimeout)) {
    next.timeoutsChangedAt = isoSeconds(now);
  }
  next.watchdog = effective;
  next.budget = effectiveBudget(budget);

  // The run's pods as rule 9 sees them: those it owns, and those its status tracks by uid whatever
  // their labels and owners now say. A current pod that vanished is tracked like a deleted one.
  const tracked = new Set([next.podUID, ...(next.terminating ?? []).map((e) => e.uid)].filter((u): u is string => Boolean(u)));
  const labelled = new Set(input.pods.map((p) => (p as { metadata?: { uid?: unknown } }).metadata?.uid));
  const detached = (input.detachedPods ?? []).filter((p) => !labelled.has((p as { metadata?: { uid?: unknown } }).metadata?.uid));
  const pods = [...input.pods, ...detached].map((p) => {
    const pod = podView(p, settings.agentContainer);
    const seen = pod.uid && pod.agent.name !== undefined ? input.containerStartsSeen?.get(pod.uid)?.get(pod.agent.name) : undefined;
    const startSeenAt = agentStartOnServer(p, pod, seen);
    if (startSeenAt !== undefined) pod.agent.startSeenAt = startSeenAt;
    return pod;
  });
  const tombstones = new Map((input.deletedPods ?? []).map((p) => podView(p, settings.agentContainer)).filter((p) => p.uid).map((p) => [p.uid as string, p] as const));
  const terminating = [...(next.terminating ?? [])];
  const expectsPod = ACTIVE_PHASES.includes(next.phase as Phase) && next.podName !== undefined;
  if (expectsPod && next.podUID && !pods.some((p) => p.uid === next.podUID) && !terminating.some((e) => e.uid === next.podUID)) {
    // Its final state, when the watch saw it go, says where it ran and with what grace; otherwise
    // the grace it was created with (its kubelet, having seen no deletion, uses the pod's own).
    const tomb = tombstones.get(next.podUID);
    terminating.push(tomb ? entryFor(tomb, now) : vanishedEntry(next.podName as string, next.podUID, next.nodeName, now, next.podGracePeriodSeconds));
  }
  view.sandboxes = sandboxes({ runUid: run.metadata.uid, tracked, pods, tombstones, nodes: input.nodes, terminating, now, settings });
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
  // A status the sandbox filled past the protocol's bound would leave the operator no room to write.
  const written = sandboxBytes(rawStatus);
  if (written > MAX_SANDBOX_STATUS_BYTES) {
    view.oversizeReport = `the sandbox's part of status (heartbeat, toolCalls, checkpoint) is ${written} bytes, over the sandbox protocol's limit of ${MAX_SANDBOX_STATUS_BYTES}`;
    problems.push(view.oversizeReport);
  }
  if (input.refusedWrite) view.refusedWrite = input.refusedWrite.message;
  const answers = readAnswers(run, next.approval);
  if (answers.answer) view.answer = answers.answer;
  apply(answers.refused);
  // A new resume token is recorded in any phase, so that it cannot fire later by surprise.
  const token = newResumeToken(view, next);
  if (token !== undefined && next.phase !== "NeedsHumanIntervention") next.observedResume = token;

  // The guard chain: the first answer decides; a hand-over runs it once more.
  for (let round = 0; round <= HAND_OVERS; round++) {
    then = undefined;
    for (const guard of GUARDS) {
      const outcome = guard(view, next);
      if (!outcome) continue;
      apply(outcome);
      break;
    }
    if (then !== "queued") break;
  }

  // Pods of the run that are not the current attempt's must not run beside it.
  const current = currentPod(view, next);
  const strays = view.sandboxes.owned.filter((p) => hasWork(p) && !p.deleting && p !== current);
  if (strays.length) apply({ summary: "", deletions: strays.map((pod) => ({ pod, kill: false })) });

  // Spending: an attempt that ended is folded into status.spent once; a run still going is warned,
  // and woken at its wall-clock deadline.
  apply(foldSpent(view, next));
  apply(budgetWatch(view, next));

  // A request ends when the run leaves the wait: an answer naming it is refused from now on, and
  // never approves whatever the agent asks next (rule 11).
  if (next.approval?.state === "Pending" && next.phase !== "AwaitingReply") {
    const id = next.approval.id ?? "";
    next = { ...next, approval: { ...next.approval, state: "Withdrawn", decidedAt: isoSeconds(now) } };
    events.push(event("Normal", REASONS.approvalWithdrawn, "WithdrawRequest", `request ${id} was withdrawn: the run left the wait (${next.phase}) without an answer`));
  }

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
    ...(view.oversizeReport ? { problemReason: REASONS.sandboxReportTooLarge } : {}),
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
  let statusPatch = mergePatchDiff(stored, json(next)) as StatusPatch | undefined;
  if (statusPatch && input.refusedWrite) statusPatch = refusalPatch(statusPatch, input.refusedWrite.tooLarge, rawStatus);
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
  const finalizer = finalizerChange(view, run.metadata.finalizers ?? [], { deleting, phase, createPod, deletes: deletions.length > 0, podNamed: next.podName !== undefined });
  if (finalizer) plan.finalizer = finalizer;
  // Suspended: no timer fires, but pods still being confirmed gone are looked at.
  const wakeAt = phase === "Suspended" || deleting ? view.sandboxes.wakeAt : wakes;
  if (wakeAt.length) plan.wakeAt = Math.min(...wakeAt);
  return plan;
}

/** Phases in which the run waits for a person, or for nothing: no sandbox starts by itself. */
const AT_REST: ReadonlySet<Phase> = new Set(["NeedsHumanIntervention", "Suspended", "Completed", "Failed", "AwaitingReply"]);

/**
 * The finalizer keeps a run that is deleted until no sandbox of it may run (rule 9): added before
 * a pod is created (with the attempt annotation the start writes anyway), and on a run found with
 * a live pod and none; removed once the run is being deleted, or is at rest (finished, or waiting
 * for a person with its pods confirmed gone). So a run that no sandbox serves can always be
 * deleted, the operator running or not: a namespace never hangs on it.
 */
function finalizerChange(view: RunView, finalizers: readonly string[], d: { deleting: boolean; phase: Phase; createPod: boolean; deletes: boolean; podNamed: boolean }): Plan["finalizer"] {
  const has = finalizers.includes(FINALIZER);
  const mayRun = view.sandboxes.busy || d.deletes || d.createPod;
  const finished = d.phase === "Completed" || d.phase === "Failed";
  const idle = d.deleting || finished || (AT_REST.has(d.phase) && !d.podNamed && !d.createPod);
  if (idle) return has && !mayRun ? "remove" : undefined;
  return !has && mayRun ? "add" : undefined;
}

/**
 * The write that follows one the API server refused for what it held: only the record of the stop,
 * every text short; and, when the object had no room left because the sandbox filled its status past
 * the protocol's bound, without the sandbox's oversize checkpoint (the one sandbox field the
 * operator ever clears; the message says so).
 */
function refusalPatch(patch: StatusPatch, tooLarge: boolean, rawStatus: Record<string, unknown> | undefined): StatusPatch {
  const kept: Record<string, unknown> = {};
  for (const [field, value] of Object.entries(patch)) if (REFUSAL_FIELDS.has(field)) kept[field] = shorten(value);
  if (tooLarge && sandboxBytes(rawStatus) > MAX_SANDBOX_STATUS_BYTES) {
    kept.checkpoint = null;
    if (sandboxBytes({ ...rawStatus, checkpoint: undefined }) > MAX_SANDBOX_STATUS_BYTES) kept.toolCalls = null;
  }
  return kept as StatusPatch;
}

const shorten = (value: unknown): unknown => {
  if (typeof value === "string") return cutToCodePoints(value, 512);
  if (Array.isArray(value)) return value.map(shorten);
  if (value && typeof value === "object") return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, shorten(v)]));
  return value;
};

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
