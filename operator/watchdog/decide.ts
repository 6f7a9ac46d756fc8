// The watchdog core: (run, its pods, now, install defaults) -> plan. No I/O, no clock, no memory
// between calls: everything it needs is in the objects, so any operator replica, restarted at
// any moment, decides the same.
import {
  ACTIVE_PHASES,
  MAX_TRANSITIONS,
  TERMINAL_PHASES,
  type AgentRun,
  type AgentRunStatus,
  type Condition,
  type FailureRecord,
  type Heartbeat,
  type Phase,
  type Transition,
} from "../api/agentrun.ts";
import { ANNOTATIONS } from "../api/annotations.ts";
import { resolveWatchdog, toSettings, type InstallDefaults, type WatchdogSettings } from "../api/defaults.ts";
import { formatDuration } from "../api/duration.ts";
import { backoffDelay, rateLimitDelay } from "./backoff.ts";
import { findCondition, setCondition } from "./conditions.ts";
import { isLive, podView, readRun, toMillis, type PodView } from "./observe.ts";
import {
  OPERATOR_STATUS_FIELDS,
  type AnnotationPatch,
  type MetricSignal,
  type Plan,
  type PlannedEvent,
  type PodDeletion,
  type StatusPatch,
} from "./plan.ts";
import { mergePatchDiff } from "./merge-patch.ts";
import { REASONS, type InterventionReason, type RestartReason } from "./reasons.ts";
import { DEFAULT_SANDBOX_IDENTITY, identityObjects, type SandboxIdentity } from "./sandbox-identity.ts";
import { sandboxPod, sandboxPodName, type SandboxPodManifest } from "./sandbox-pod.ts";
import { DISARMED, stepStall } from "./stall.ts";
import { detectLoop, isRateLimited, newestCurrentCall, unconfirmedCall } from "./tool-calls.ts";

/** A heartbeat further in the future than this is a broken clock or garbage, not a sign of life. */
export const MAX_CLOCK_SKEW_MS = 60_000;
/**
 * Activity older than its pod (allowing for the pod's creation time being kept in whole seconds
 * and a little clock drift) belongs to an earlier attempt.
 */
const ACTIVITY_SKEW_MS = 2_000;

export interface DecideInput {
  /** The AgentRun as read from the API server (raw JSON or a client-node object). */
  run: unknown;
  /** The pods labelled with this run's name. */
  pods: readonly unknown[];
  /** The time now, in ms since the epoch. */
  now: number;
  /** The install's watchdog defaults (operator configuration). */
  defaults?: InstallDefaults;
  /** How sandboxes identify themselves to the API server. */
  sandbox?: SandboxIdentity;
}

type OperatorStatus = Pick<AgentRunStatus, (typeof OPERATOR_STATUS_FIELDS)[number]>;

const isoSeconds = (ms: number) => new Date(Math.floor(ms / 1000) * 1000).toISOString().replace(".000Z", "Z");
/** Rounded up, so that a wait recorded in whole seconds is never shorter than decided. */
const isoCeilSeconds = (ms: number) => new Date(Math.ceil(ms / 1000) * 1000).toISOString().replace(".000Z", "Z");

/** The working state of one decision. */
class Decision {
  readonly next: OperatorStatus;
  readonly events: PlannedEvent[] = [];
  readonly metrics: MetricSignal[] = [];
  readonly deletions: PodDeletion[] = [];
  createPod?: SandboxPodManifest;
  prerequisites?: Record<string, unknown>[];
  wakeAt?: number;
  summary = "no change";
  /** User annotations the plan consumes (approve, reject). */
  readonly consumedAnnotations = new Set<string>();
  readonly problems: string[];
  readonly run: AgentRun;
  readonly pods: readonly PodView[];
  readonly now: number;
  readonly settings: WatchdogSettings;
  readonly identity: SandboxIdentity;

  constructor(run: AgentRun, pods: readonly PodView[], now: number, settings: WatchdogSettings, problems: string[], identity: SandboxIdentity) {
    this.identity = identity;
    this.run = run;
    this.pods = pods;
    this.now = now;
    this.settings = settings;
    this.problems = problems;
    this.next = structuredClone(pickOperatorStatus(run.status ?? {}));
  }

  get status(): AgentRunStatus {
    return this.run.status ?? {};
  }
  get attempt(): number {
    return this.next.attempt ?? 0;
  }
  get phase(): Phase {
    return this.next.phase ?? "Queued";
  }
  get nowIso(): string {
    return isoSeconds(this.now);
  }

  wake(at: number | undefined): void {
    if (at === undefined) return;
    this.wakeAt = this.wakeAt === undefined ? at : Math.min(this.wakeAt, at);
  }

  event(type: PlannedEvent["type"], reason: string, action: string, note: string): void {
    this.events.push({ type, reason, action, note });
  }

  /** Phases this decision passed through, in order (one decision may go NHI -> Queued -> Starting). */
  readonly steps: { phase: Phase; reason?: string; message?: string }[] = [];

  setPhase(phase: Phase, reason?: string, message?: string): void {
    if (phase !== this.next.phase) this.steps.push({ phase, reason, message });
    this.next.phase = phase;
    this.next.reason = reason;
    this.next.message = message;
  }

  /** Deletes every live pod of the run except `keep`, unless a deletion is already under way. */
  deleteLivePods(keep?: PodView): void {
    for (const pod of this.pods) {
      if (pod === keep || !isLive(pod) || pod.deleting) continue;
      if (this.deletions.some((d) => d.name === pod.name)) continue;
      this.deletions.push(pod.uid ? { name: pod.name, uid: pod.uid } : { name: pod.name });
    }
  }
}

function pickOperatorStatus(status: AgentRunStatus): OperatorStatus {
  const out: Record<string, unknown> = {};
  for (const field of OPERATOR_STATUS_FIELDS) {
    if (status[field] !== undefined) out[field] = status[field];
  }
  return out as OperatorStatus;
}

/** The current attempt's heartbeat, if it is one the watchdog may believe. */
function currentHeartbeat(d: Decision): Heartbeat | undefined {
  const hb = d.status.heartbeat;
  if (!hb) return undefined;
  if (hb.attempt !== d.attempt) {
    if (hb.attempt > d.attempt) d.problems.push(`status.heartbeat.attempt ${hb.attempt} is ahead of the run's attempt ${d.attempt}`);
    return undefined; // a stale attempt's heartbeat is ignored
  }
  const time = toMillis(hb.time);
  if (time === undefined || time > d.now + MAX_CLOCK_SKEW_MS) {
    d.problems.push("status.heartbeat.time is in the future; the heartbeat is ignored");
    return undefined;
  }
  return hb;
}

function retryAfterOf(d: Decision): number | undefined {
  // The status copy and the annotation are written by the same plan; honour the later of the two
  // so that neither a lost annotation write nor a hand-edited status starts a sandbox early.
  const fromStatus = toMillis(d.next.retryAfter);
  const fromAnnotation = toMillis(d.run.metadata.annotations?.[ANNOTATIONS.retryAfter]);
  const candidates = [fromStatus, fromAnnotation].filter((v): v is number => v !== undefined);
  return candidates.length ? Math.max(...candidates) : undefined;
}

function failureRecord(d: Decision, reason: string, message: string, hb: Heartbeat | undefined): FailureRecord {
  const record: FailureRecord = { reason, message, time: d.nowIso, attempt: d.attempt };
  if (hb) record.state = hb.state;
  const call = newestCurrentCall(d.status.toolCalls, hb, d.attempt);
  if (call) record.tool = { name: call.name, argsHash: call.argsHash, state: call.state };
  return record;
}

/** Leaves the current attempt behind: the next sandbox is a new attempt with fresh stall state. */
function endAttempt(d: Decision): void {
  d.next.attempt = d.attempt + 1;
  d.next.podName = undefined;
  d.next.stall = { ...DISARMED };
}

function needsHuman(d: Decision, reason: InterventionReason, message: string, hb: Heartbeat | undefined, cause?: string): void {
  d.setPhase("NeedsHumanIntervention", reason, message);
  d.next.podName = undefined;
  d.next.lastFailure = failureRecord(d, cause ?? reason, message, hb);
  d.deleteLivePods();
  d.event("Warning", reason, "Escalate", `${message}; the run needs a person (annotate ${ANNOTATIONS.resume} to resume)`);
  d.metrics.push({ kind: "needsHuman", reason });
  d.summary = `needs human intervention: ${reason}`;
}

/**
 * A hung or crashed sandbox (rules 2-5): requeue with backoff, or with the rate-limit backoff when
 * the newest call was throttled, or stop for a person when the allowance is spent.
 */
function sandboxFailed(d: Decision, cause: RestartReason, message: string, hb: Heartbeat | undefined, pod: PodView | undefined, deadline?: number): void {
  if (pod && isLive(pod) && !pod.deleting) d.deletions.push(pod.uid ? { name: pod.name, uid: pod.uid } : { name: pod.name });
  d.deleteLivePods(pod);
  if (cause === REASONS.heartbeatTimeout && deadline !== undefined) d.metrics.push({ kind: "hungKilled", deadline });

  const unconfirmed = unconfirmedCall(d.status.toolCalls, hb, d.attempt);
  if (unconfirmed) {
    // Rule 10: the call may or may not have had its effect, and running it again is not safe.
    needsHuman(
      d,
      REASONS.unconfirmedSideEffect,
      `${message}; the non-idempotent call ${unconfirmed.name} (${unconfirmed.id}) was started and its outcome is unknown`,
      hb,
      cause,
    );
    return;
  }
  const newest = newestCurrentCall(d.status.toolCalls, hb, d.attempt);
  if (isRateLimited(newest)) {
    const n = (d.next.rateLimitRequeues ?? 0) + 1;
    const delay = rateLimitDelay(d.settings.rateLimitBackoff, n, newest.error?.retryAfterSeconds);
    const detail = `${message}; the last call to ${newest.name} was rate limited (HTTP 429)`;
    requeue(d, REASONS.rateLimited, detail, delay, hb);
    d.next.rateLimitRequeues = n;
    return;
  }

  const restarts = (d.next.restarts ?? 0) + 1;
  if (restarts > d.settings.maxRestarts) {
    needsHuman(
      d,
      REASONS.recoveryBudgetExhausted,
      `${message}; the recovery allowance of ${d.settings.maxRestarts} restart${d.settings.maxRestarts === 1 ? "" : "s"} is spent`,
      hb,
      cause,
    );
    return;
  }
  requeue(d, cause, message, backoffDelay(d.settings.backoff, restarts), hb);
  d.next.restarts = restarts;
  d.next.rateLimitRequeues = 0;
}

function requeue(d: Decision, reason: string, message: string, delayMs: number, hb: Heartbeat | undefined): void {
  const failedAttempt = d.attempt;
  d.next.lastFailure = failureRecord(d, reason, message, hb);
  endAttempt(d);
  const retryAt = d.now + delayMs;
  d.next.retryAfter = isoCeilSeconds(retryAt);
  d.setPhase("Queued", reason, `${message}; attempt ${d.attempt} starts after ${d.next.retryAfter}`);
  d.event(
    "Warning",
    reason,
    "Requeue",
    `attempt ${failedAttempt}: ${message}; attempt ${d.attempt} starts in ${formatDuration(delayMs)}`,
  );
  d.metrics.push({ kind: "requeue", reason });
  d.wake(toMillis(d.next.retryAfter));
  d.summary = `requeued (${reason}) for ${formatDuration(delayMs)}`;
}

// ---------------------------------------------------------------------------------------------
// the phases

function decideQueued(d: Decision): void {
  const live = d.pods.filter(isLive);
  const own = live.find((p) => p.attempt === d.attempt && !p.deleting);
  if (own) {
    // The pod was created but the status write that should have followed it was lost: adopt it.
    d.setPhase("Starting");
    d.next.podName = own.name;
    d.next.startTime ??= d.nowIso;
    d.deleteLivePods(own);
    d.event("Normal", REASONS.sandboxCreated, "AdoptPod", `sandbox pod ${own.name} for attempt ${d.attempt} was created before a status write that was lost; adopted it`);
    d.summary = `adopted sandbox pod ${own.name}`;
    return;
  }
  if (live.length > 0) {
    // Never two sandboxes: wait until every earlier pod is confirmed gone.
    d.deleteLivePods();
    d.summary = `waiting for ${live.map((p) => p.name).join(", ")} to be gone`;
    return;
  }
  const retryAfter = retryAfterOf(d);
  if (retryAfter !== undefined && d.now < retryAfter) {
    d.wake(retryAfter);
    d.summary = `backing off until ${new Date(retryAfter).toISOString()}`;
    return;
  }
  d.createPod = sandboxPod(d.run, d.attempt, d.identity);
  const prerequisites = identityObjects(d.run, d.identity);
  if (prerequisites.length) d.prerequisites = prerequisites;
  d.setPhase("Starting");
  d.next.podName = d.createPod.metadata.name;
  d.next.startTime ??= d.nowIso;
  d.next.stall = { ...DISARMED };
  d.event("Normal", REASONS.sandboxCreated, "CreatePod", `created sandbox pod ${d.createPod.metadata.name} for attempt ${d.attempt}`);
  d.wake(d.now + d.settings.heartbeatTimeoutMs + 1);
  d.summary = `starting attempt ${d.attempt}`;
}

function podFailureMessage(pod: PodView): string {
  const parts = [`sandbox pod ${pod.name} failed`];
  if (pod.exit?.code !== undefined) parts.push(`exit code ${pod.exit.code}`);
  if (pod.exit?.reason) parts.push(pod.exit.reason);
  if (pod.exit?.message) parts.push(pod.exit.message.slice(0, 200));
  return parts.join(": ");
}

function decideActive(d: Decision): void {
  const expected = d.next.podName ?? sandboxPodName(d.run.metadata.name as string, d.attempt);
  const pod = d.pods.find((p) => p.name === expected && (p.attempt === undefined || p.attempt === d.attempt));
  d.deleteLivePods(pod); // pods of earlier attempts, or strays, must not run beside this one
  const hb = currentHeartbeat(d);

  if (!pod || pod.deleting) {
    sandboxFailed(d, REASONS.podFailed, `sandbox pod ${expected} was deleted or vanished`, hb, pod);
    return;
  }
  if (pod.phase === "Succeeded") {
    d.setPhase("Completed", REASONS.completed, `sandbox pod ${pod.name} exited 0`);
    d.next.completionTime = d.nowIso;
    d.next.retryAfter = undefined;
    d.event("Normal", REASONS.completed, "Complete", `attempt ${d.attempt} completed`);
    d.summary = "completed";
    return;
  }
  if (pod.phase === "Failed") {
    sandboxFailed(d, REASONS.podFailed, podFailureMessage(pod), hb, pod);
    return;
  }

  const loop = detectLoop(d.status.toolCalls, d.next.toolCallsResetAfter, hb, d.attempt, d.settings.maxConsecutiveToolFailures);
  if (loop) {
    needsHuman(
      d,
      REASONS.toolLoop,
      `tool ${loop.name} failed ${d.settings.maxConsecutiveToolFailures} times in a row with the same arguments (${loop.argsHash})`,
      hb,
    );
    return;
  }

  // In an active phase the phase mirrors what the sandbox reports; reasons belong to the phases
  // that explain why no sandbox runs.
  const phase: Phase = hb ? hb.state : "Starting";
  if (phase !== d.phase || d.next.reason !== undefined || d.next.message !== undefined) d.setPhase(phase);

  if (phase === "AwaitingReply" && decideAwaiting(d, pod)) return;

  if (phase !== "AwaitingReply") {
    // Hung: no heartbeat for longer than the timeout. Before the first heartbeat the pod's
    // creation is the last sign of life.
    const lastAlive = Math.max(pod.createdAt, hb ? (toMillis(hb.time) ?? 0) : 0);
    const deadline = lastAlive + d.settings.heartbeatTimeoutMs;
    if (d.now > deadline) {
      const since = hb ? `the last heartbeat at ${hb.time}` : `the pod was created at ${new Date(pod.createdAt).toISOString()}`;
      sandboxFailed(
        d,
        REASONS.heartbeatTimeout,
        `no heartbeat for ${formatDuration(d.now - lastAlive)} (timeout ${formatDuration(d.settings.heartbeatTimeoutMs)}) since ${since}`,
        hb,
        pod,
        deadline,
      );
      return;
    }
    d.wake(deadline + 1);
  }

  if (hb) {
    // A merge patch keeps members it does not name, so a new attempt's first heartbeat may still
    // carry the last attempt's activity: only activity since this pod was created counts.
    const activityAt = toMillis(hb.activity?.time);
    const activity = activityAt !== undefined && activityAt >= pod.createdAt - ACTIVITY_SKEW_MS ? hb.activity : undefined;
    const step = stepStall(d.next.stall, activity, d.now, d.settings.stall, phase === "AwaitingReply");
    d.next.stall = step.stall;
    if (step.escalate) {
      needsHuman(d, REASONS.stallUnresolved, `the agent stayed stalled after ${d.settings.stall.maxNudges} nudge${d.settings.stall.maxNudges === 1 ? "" : "s"}`, hb);
      return;
    }
    if (step.nudge) {
      d.event("Normal", REASONS.stallDetected, "Nudge", `stall detected; nudge ${step.stall.nudges} of ${d.settings.stall.maxNudges} recorded`);
      d.metrics.push({ kind: "nudge" });
      d.summary = `nudged (${step.stall.nudges}/${d.settings.stall.maxNudges})`;
    }
    d.wake(step.wakeAt);

    // A call that got through ends a streak of rate limits.
    const newest = newestCurrentCall(d.status.toolCalls, hb, d.attempt);
    if (newest?.state === "Succeeded" && (d.next.rateLimitRequeues ?? 0) > 0) d.next.rateLimitRequeues = 0;
  }
}

// ---------------------------------------------------------------------------------------------
// approval waits: AwaitingReply is never hung; after releaseAwaitingAfter the pod is freed, and
// the answer (watchdog.dev/approve or watchdog.dev/reject) decides what happens next.

type Answer = { kind: "approve"; answer: string } | { kind: "reject"; reason: string };

function answerOf(d: Decision): Answer | undefined {
  const annotations = d.run.metadata.annotations ?? {};
  if (annotations[ANNOTATIONS.reject] !== undefined) return { kind: "reject", reason: annotations[ANNOTATIONS.reject] || "rejected" };
  if (annotations[ANNOTATIONS.approve] !== undefined) return { kind: "approve", answer: annotations[ANNOTATIONS.approve] || "approved" };
  return undefined;
}

function fail(d: Decision, reason: string, message: string): void {
  d.setPhase("Failed", reason, message);
  d.next.completionTime = d.nowIso;
  d.next.podName = undefined;
  d.deleteLivePods();
  d.event("Warning", reason, "Fail", message);
  d.summary = `failed: ${reason}`;
}

/** Applies an answer or a timeout to a pending request; true when the run left AwaitingReply. */
function settleApproval(d: Decision): { left: boolean; approved: boolean } {
  const approval = d.next.approval;
  if (!approval || approval.state !== "Pending") return { left: false, approved: false };
  const answer = answerOf(d);
  if (answer?.kind === "reject") {
    d.consumedAnnotations.add(ANNOTATIONS.reject);
    d.next.approval = { ...approval, state: "Rejected", reason: answer.reason, decidedAt: d.nowIso };
    fail(d, REASONS.rejected, `the request was rejected: ${answer.reason}`);
    return { left: true, approved: false };
  }
  if (answer?.kind === "approve") {
    d.consumedAnnotations.add(ANNOTATIONS.approve);
    d.next.approval = { ...approval, state: "Approved", answer: answer.answer, decidedAt: d.nowIso };
    d.event("Normal", REASONS.approved, "Approve", `the request was approved`);
    d.summary = "approved";
    return { left: false, approved: true };
  }
  const requested = toMillis(approval.requestedAt) ?? d.now;
  if (d.settings.approvalTimeoutMs !== undefined) {
    const timeoutAt = requested + d.settings.approvalTimeoutMs;
    if (d.now >= timeoutAt) {
      d.next.approval = { ...approval, state: "TimedOut", decidedAt: d.nowIso };
      fail(d, REASONS.approvalTimeout, `no reply within ${formatDuration(d.settings.approvalTimeoutMs)}`);
      return { left: true, approved: false };
    }
    d.wake(timeoutAt);
  }
  return { left: false, approved: false };
}

/** The sandbox is alive and awaiting a reply. True when the decision is complete. */
function decideAwaiting(d: Decision, pod: PodView): boolean {
  if (d.status.phase !== "AwaitingReply" || !d.next.approval) {
    d.next.approval = { state: "Pending", requestedAt: d.nowIso };
  }
  const settled = settleApproval(d);
  if (settled.left || settled.approved) return true; // an approved sandbox carries on by itself
  if (d.next.approval?.state !== "Pending") return false;
  const releaseAt = (toMillis(d.next.approval.requestedAt) ?? d.now) + d.settings.releaseAwaitingAfterMs;
  if (d.now < releaseAt) {
    d.wake(releaseAt);
    return false;
  }
  // Free the pod while a person thinks; the answer starts a new sandbox from the checkpoint.
  if (isLive(pod) && !pod.deleting) d.deletions.push(pod.uid ? { name: pod.name, uid: pod.uid } : { name: pod.name });
  endAttempt(d);
  d.setPhase("AwaitingReply", REASONS.sandboxReleased, `sandbox pod ${pod.name} released after ${formatDuration(d.settings.releaseAwaitingAfterMs)} awaiting a reply; approve to resume`);
  d.event("Normal", REASONS.sandboxReleased, "DeletePod", `released sandbox pod ${pod.name} while the run awaits a reply`);
  d.summary = "released the sandbox while awaiting a reply";
  return true;
}

/** Awaiting a reply with the pod released: nothing runs until the answer comes. */
function decideReleased(d: Decision): void {
  d.deleteLivePods();
  const settled = settleApproval(d);
  if (settled.approved) {
    d.setPhase("Queued", REASONS.approved, `approved; attempt ${d.attempt} resumes from the checkpoint`);
    d.next.retryAfter = undefined;
    decideQueued(d);
  }
}

function decideSuspend(d: Decision): boolean {
  const suspend = d.run.spec.suspend === true;
  if (suspend && d.phase !== "Suspended") {
    if (d.next.podName !== undefined) endAttempt(d); // the running attempt ends with its pod
    d.setPhase("Suspended", REASONS.suspended, "spec.suspend is true");
    d.deleteLivePods();
    d.event("Normal", REASONS.suspended, "Suspend", "run suspended; its sandbox pod is removed");
    d.summary = "suspended";
    return true;
  }
  if (suspend) {
    d.deleteLivePods();
    return true;
  }
  if (d.phase === "Suspended") {
    d.setPhase("Queued", REASONS.unsuspended, `attempt ${d.attempt} is queued`);
    d.event("Normal", REASONS.unsuspended, "Unsuspend", "run unsuspended");
    d.summary = "unsuspended";
    decideQueued(d);
    return true;
  }
  return false;
}

function decideResume(d: Decision): void {
  const token = d.run.metadata.annotations?.[ANNOTATIONS.resume];
  if (token === undefined || token === d.next.observedResume) return;
  d.next.observedResume = token;
  if (d.phase !== "NeedsHumanIntervention") return; // recorded, so that it cannot fire later by surprise
  endAttempt(d);
  d.next.restarts = 0;
  d.next.rateLimitRequeues = 0;
  d.next.retryAfter = undefined;
  const newestCall = d.status.toolCalls?.at(-1);
  d.next.toolCallsResetAfter = newestCall?.id;
  d.setPhase("Queued", REASONS.resumed, `resumed by ${ANNOTATIONS.resume}=${token}; attempt ${d.attempt} is queued`);
  d.event("Normal", REASONS.resumed, "Resume", `resumed with fresh budgets; attempt ${d.attempt} is queued`);
  d.summary = "resumed";
}

// ---------------------------------------------------------------------------------------------
// conditions, annotations and the final diff

function conditionsFor(d: Decision): Condition[] {
  const gen = d.run.metadata.generation;
  const phase = d.phase;
  let conditions: Condition[] = [...(d.next.conditions ?? [])];
  const set = (type: Parameters<typeof setCondition>[1]["type"], status: "True" | "False" | "Unknown", reason: string, message: string) => {
    conditions = setCondition(conditions, { type, status, reason, message }, d.nowIso, gen);
  };
  const reason = d.next.reason ?? phase;
  const message = d.next.message ?? "";

  if (ACTIVE_PHASES.includes(phase)) set("Running", "True", REASONS.running, `attempt ${d.attempt} runs in pod ${d.next.podName ?? ""}`);
  else set("Running", "False", reason, message);

  const backingOff = phase === "Queued" && (retryAfterOf(d) ?? 0) > d.now;
  if (backingOff) set("BackingOff", "True", reason, message);
  else set("BackingOff", "False", phase === "Queued" ? "RetryDue" : reason, "");

  if (phase === "NeedsHumanIntervention") set("NeedsHumanIntervention", "True", reason, message);
  else {
    // Once False, the condition keeps the reason it got when it became False (e.g. Resumed).
    const previous = findCondition(conditions, "NeedsHumanIntervention");
    if (previous?.status === "True") set("NeedsHumanIntervention", "False", REASONS.resumed, message);
    else if (!previous) set("NeedsHumanIntervention", "False", "NoInterventionNeeded", "");
  }

  if (phase === "Completed") set("Succeeded", "True", REASONS.completed, message);
  else if (phase === "Failed") set("Succeeded", "False", reason, message);
  else set("Succeeded", "Unknown", REASONS.notFinished, "");

  if (d.problems.length > 0) set("SandboxReportValid", "False", REASONS.invalidSandboxReport, d.problems.join("; ").slice(0, 4096));
  else if (findCondition(conditions, "SandboxReportValid")) set("SandboxReportValid", "True", REASONS.validSandboxReport, "");
  return conditions;
}

/**
 * Appends the phases this decision passed through to the bounded transition history. Each gets its
 * own millisecond, the last one `now`, because a transition's time is unique per run (the ledger
 * keys on it).
 */
function recordTransition(d: Decision): void {
  const steps = d.steps.filter((step, i) => i > 0 || step.phase !== d.status.phase);
  if (steps.length === 0) return;
  const last = steps.at(-1) as (typeof steps)[number];
  if (last.phase === d.phase) {
    // the final phase's reason is what it ended with, after any clearing within the decision
    last.reason = d.next.reason;
    last.message = d.next.message;
  }
  let from = d.status.phase;
  const recorded = steps.map((step, i) => {
    const transition: Transition = { phase: step.phase, attempt: d.attempt, time: new Date(d.now - (steps.length - 1 - i)).toISOString() };
    if (from) transition.from = from;
    if (step.reason) transition.reason = step.reason;
    if (step.message) transition.message = step.message.slice(0, 1024);
    from = step.phase;
    return transition;
  });
  d.next.transitions = [...(d.next.transitions ?? []), ...recorded].slice(-MAX_TRANSITIONS);
}

function desiredAnnotations(d: Decision): Record<string, string | undefined> {
  const retryAfter = d.next.retryAfter;
  return {
    [ANNOTATIONS.attempt]: String(d.attempt),
    [ANNOTATIONS.retryAfter]: retryAfter,
    [ANNOTATIONS.backoffReason]: retryAfter !== undefined ? d.next.lastFailure?.reason : undefined,
  };
}

function diffAnnotations(d: Decision): AnnotationPatch | undefined {
  const current = d.run.metadata.annotations ?? {};
  const patch: AnnotationPatch = {};
  for (const key of d.consumedAnnotations) if (current[key] !== undefined) patch[key] = null;
  for (const [key, value] of Object.entries(desiredAnnotations(d))) {
    if (value === undefined && current[key] !== undefined) patch[key] = null;
    else if (value !== undefined && current[key] !== value) patch[key] = value;
  }
  return Object.keys(patch).length ? patch : undefined;
}

function diffStatus(d: Decision): StatusPatch | undefined {
  // Compared as JSON, so that key order and undefined members never cause a write.
  const normal = (v: unknown) => JSON.parse(JSON.stringify(v)) as unknown;
  const patch = mergePatchDiff(normal(pickOperatorStatus(d.status)), normal(d.next));
  return patch as StatusPatch | undefined;
}

function toPlan(d: Decision): Plan {
  const plan: Plan = {
    deletePods: d.deletions,
    events: d.events,
    metrics: d.metrics,
    phase: d.phase,
    summary: d.summary,
  };
  const status = diffStatus(d);
  if (status) plan.status = status;
  const annotations = diffAnnotations(d);
  if (annotations) plan.annotations = annotations;
  if (d.createPod) plan.createPod = d.createPod;
  if (d.createPod && d.prerequisites) plan.prerequisites = d.prerequisites;
  if (d.wakeAt !== undefined) plan.wakeAt = d.wakeAt;
  return plan;
}

// ---------------------------------------------------------------------------------------------

/** Decides what to do with one run. */
export function decide(input: DecideInput): Plan {
  const read = readRun(input.run);
  if (!read.ok) {
    return { deletePods: [], events: [], metrics: [], phase: "Queued", summary: `cannot read run: ${read.error}` };
  }
  const run = read.run;
  const effective = resolveWatchdog(run.spec.watchdog, input.defaults);
  const settings = toSettings(effective);
  const pods = input.pods.map(podView);
  const d = new Decision(run, pods, input.now, settings, read.problems, input.sandbox ?? DEFAULT_SANDBOX_IDENTITY);

  if (run.metadata.deletionTimestamp) {
    return { deletePods: [], events: [], metrics: [], phase: d.phase, summary: "run is being deleted" };
  }

  if (d.next.phase === undefined) {
    d.setPhase("Queued", REASONS.created, "waiting for its first sandbox");
    d.next.attempt = 1;
    d.next.restarts = 0;
  }
  d.next.observedGeneration = run.metadata.generation;
  d.next.watchdog = effective;

  if (TERMINAL_PHASES.includes(d.phase)) {
    // Absorbing: nothing restarts a finished run. A live pod left behind is only cleaned up.
    if (d.phase === "Failed") d.deleteLivePods();
  } else {
    decideResume(d);
    if (d.phase === "NeedsHumanIntervention") {
      d.deleteLivePods();
    } else if (!decideSuspend(d)) {
      if (d.phase === "Queued") decideQueued(d);
      else if (d.phase === "AwaitingReply" && d.next.podName === undefined) decideReleased(d);
      else decideActive(d);
    }
  }

  recordTransition(d);
  d.next.conditions = conditionsFor(d);
  return toPlan(d);
}
