// The sandbox side of the AgentRun protocol as pure functions: when to heartbeat, what a replayed
// tool call does, whether a checkpoint fits, which nudge is new, when this sandbox must fence
// itself, how an approval request is recognised across attempts, whether a give-up was a rate
// limit. The modules around them only do I/O.
import type { ApprovalStatus, Checkpoint, StallStatus, ToolCall } from "../api/agentrun.ts";
import { APPROVAL_REQUEST_KEY, SANDBOX_ENV } from "../api/annotations.ts";
import { BUILTIN_DEFAULTS } from "../api/defaults.ts";
import { parseDuration } from "../api/duration.ts";
import { MAX_CHECKPOINT_BYTES, MAX_SANDBOX_STATUS_BYTES, jsonBytes } from "../api/limits.ts";
import { CheckpointTooLargeError, SandboxConfigError } from "./errors.ts";

// ---------------------------------------------------------------------------------------------
// configuration

export interface SandboxIdentity {
  runName: string;
  namespace: string;
  attempt: number;
}

/** The run, namespace and attempt a sandbox pod serves, from the env vars the operator sets. */
export function identityFromEnv(env: Record<string, string | undefined>): SandboxIdentity {
  const runName = env[SANDBOX_ENV.runName];
  const namespace = env[SANDBOX_ENV.runNamespace];
  const attemptText = env[SANDBOX_ENV.attempt];
  const missing = [
    !runName && SANDBOX_ENV.runName,
    !namespace && SANDBOX_ENV.runNamespace,
    !attemptText && SANDBOX_ENV.attempt,
  ].filter(Boolean);
  if (missing.length) throw new SandboxConfigError(`not in a sandbox pod: ${missing.join(", ")} not set`);
  const attempt = Number(attemptText);
  if (!Number.isInteger(attempt) || attempt < 1) throw new SandboxConfigError(`${SANDBOX_ENV.attempt}=${attemptText} is not a positive integer`);
  return { runName: runName as string, namespace: namespace as string, attempt };
}

// ---------------------------------------------------------------------------------------------
// heartbeats

/** Heartbeat-only writes are spaced a quarter of the timeout apart (up to the ceiling below). */
export const HEARTBEATS_PER_TIMEOUT = 4;
/** Floor of the heartbeat interval, so that a tiny timeout cannot turn into a write storm. */
export const MIN_HEARTBEAT_INTERVAL_MS = 100;
/**
 * Ceiling of the heartbeat interval: the built-in timeout's quarter (75 s), so no run heartbeats
 * less often than one with the default timeout. A longer timeout makes the watchdog more patient,
 * not the sandbox quieter: the heartbeat's age stays a live sign for people (kubectl's Heartbeat
 * column), and a huge timeout ("100000h") never becomes a wait that a timer cannot hold.
 */
export const MAX_HEARTBEAT_INTERVAL_MS = Math.floor(parseDuration(BUILTIN_DEFAULTS.heartbeatTimeout) / HEARTBEATS_PER_TIMEOUT);

export function heartbeatIntervalMs(timeoutMs: number): number {
  const quarter = Math.floor(timeoutMs / HEARTBEATS_PER_TIMEOUT);
  if (!(quarter < MAX_HEARTBEAT_INTERVAL_MS)) return MAX_HEARTBEAT_INTERVAL_MS; // NaN and Infinity too
  return Math.max(MIN_HEARTBEAT_INTERVAL_MS, quarter);
}

/** The parts of a run the heartbeat timeout is read from. */
export interface RunLike {
  spec?: { watchdog?: { heartbeatTimeout?: string } };
  status?: { watchdog?: { heartbeatTimeout?: string } };
}

/**
 * The heartbeat timeout the watchdog applies to this run: the effective value the operator
 * publishes in status.watchdog (it includes the install's defaults), else the run's own spec,
 * else the built-in default.
 */
export function effectiveHeartbeatTimeoutMs(run: RunLike | undefined): number {
  for (const text of [run?.status?.watchdog?.heartbeatTimeout, run?.spec?.watchdog?.heartbeatTimeout]) {
    if (!text) continue;
    try {
      return parseDuration(text);
    } catch {
      // not ours to judge: fall through to the next source
    }
  }
  return parseDuration(BUILTIN_DEFAULTS.heartbeatTimeout);
}

export interface HeartbeatClock {
  now: number;
  /** When the last status write of any kind was acknowledged (every write carries a heartbeat). */
  lastWriteAt: number;
  intervalMs: number;
  /** The agent's last sign of progress (an SDK call, a streamed chunk, an explicit progress()). */
  lastProgressAt: number;
  /** Longer than this without progress and the agent counts as wedged. */
  progressTimeoutMs: number;
  /** The agent waits on the SDK for input (an approval, a nudge): not wedged, the SDK is what waits. */
  waitingForInput: boolean;
}

export interface HeartbeatDecision {
  /** Write a heartbeat-only patch now. */
  write: boolean;
  /** The agent made no progress for longer than the progress timeout. */
  wedged: boolean;
  /** When to look again (ms since the epoch). */
  nextCheckAt: number;
}

/**
 * Whether to write a heartbeat now. A heartbeat is a claim that the agent is making progress, so
 * it is written only while progress is fresh: an agent wedged in an await that never settles
 * stops heartbeating, and the watchdog replaces it one timeout later.
 */
export function heartbeatDecision(c: HeartbeatClock): HeartbeatDecision {
  const wedged = !c.waitingForInput && c.now - c.lastProgressAt > c.progressTimeoutMs;
  const dueAt = c.lastWriteAt + c.intervalMs;
  if (c.now < dueAt) return { write: false, wedged, nextCheckAt: dueAt };
  // A wedged agent is looked at again every interval: if it recovers, heartbeats resume.
  return { write: !wedged, wedged, nextCheckAt: c.now + c.intervalMs };
}

// ---------------------------------------------------------------------------------------------
// tool calls

/** The CRD allows 64 records; keeping half leaves room and keeps every status write small. */
export const DEFAULT_MAX_TOOL_CALLS = 32;
/** The CRD's limit on a saved result. */
export const MAX_RESULT_CHARS = 8192;

export type ReplayDecision =
  /** No earlier record, or the last try failed: run the tool. */
  | { kind: "run"; previous?: ToolCall }
  /** It succeeded before: return the saved result, do not run it. */
  | { kind: "saved"; previous: ToolCall }
  /** Started, outcome unknown, but idempotent: run again with the same key. */
  | { kind: "rerun"; previous: ToolCall }
  /** Started, outcome unknown, not idempotent, and a person has since resumed the run: report
   *  the unknown outcome to the agent without running the tool. */
  | { kind: "unconfirmed"; previous: ToolCall }
  /** Started, outcome unknown, not idempotent: refuse, the run needs a person. */
  | { kind: "refuse"; previous: ToolCall };

/** The newest record of a call, found by its idempotency key. */
export function findCall(calls: readonly ToolCall[], key: string): ToolCall | undefined {
  for (let i = calls.length - 1; i >= 0; i--) {
    const call = calls[i] as ToolCall;
    if (call.idempotencyKey === key) return call;
  }
  return undefined;
}

/** Whether a person resumed the run after this call was recorded (status.toolCallsResetAfter). */
export function resumedAfter(calls: readonly ToolCall[], call: ToolCall, resetAfterId: string | undefined): boolean {
  if (resetAfterId === undefined) return false;
  const marker = calls.findIndex((c) => c.id === resetAfterId);
  const at = calls.indexOf(call);
  return marker >= 0 && at >= 0 && at <= marker;
}

/** What to do with a call the agent is about to make, given the records in status (rule 10). */
export function replayDecision(
  calls: readonly ToolCall[],
  key: string,
  idempotent: boolean,
  resetAfterId: string | undefined,
): ReplayDecision {
  const previous = findCall(calls, key);
  if (!previous) return { kind: "run" };
  if (previous.state === "Succeeded") return { kind: "saved", previous };
  if (previous.state === "Failed") return { kind: "run", previous };
  // Started and never finished: the process died while the tool ran. What the tool promised when
  // it was started counts, not what today's code says.
  if (previous.idempotent ?? idempotent) return { kind: "rerun", previous };
  // The operator stops the run for a person when it sees this (UnconfirmedSideEffect). A person who
  // resumed it has seen the record; the agent is told the outcome is unknown and decides, but the
  // tool is still never run twice under this key.
  if (resumedAfter(calls, previous, resetAfterId)) return { kind: "unconfirmed", previous };
  return { kind: "refuse", previous };
}

/** Appends or replaces a record (by id) and keeps the newest `max`, newest last. */
export function upsertCall(calls: readonly ToolCall[], call: ToolCall, max: number): ToolCall[] {
  const at = calls.findIndex((c) => c.id === call.id);
  const next = at >= 0 ? [...calls.slice(0, at), call, ...calls.slice(at + 1)] : [...calls, call];
  return next.slice(-max);
}

/**
 * A tool's result as the small JSON text saved in its record. A result too large for the record is
 * saved as `{"truncated": true, "length": n, "preview": "..."}`, still valid JSON, so a replay
 * returns something the agent can recognise instead of failing to parse.
 */
export function encodeResult(value: unknown, max = MAX_RESULT_CHARS): string | undefined {
  if (value === undefined) return undefined;
  let json: string | undefined;
  try {
    json = JSON.stringify(value);
  } catch (err) {
    json = JSON.stringify({ unserializable: true, error: (err as Error).message });
  }
  if (json === undefined) return undefined;
  if (json.length <= max) return json;
  // The preview is escaped once more inside the envelope, by up to six characters per character,
  // so search for the longest prefix that fits rather than guess.
  const envelope = (keep: number) => JSON.stringify({ truncated: true, length: json.length, preview: json.slice(0, keep) });
  let fits = 0;
  let tooLong = max;
  while (tooLong - fits > 1) {
    const mid = Math.floor((fits + tooLong) / 2);
    if (envelope(mid).length <= max) fits = mid;
    else tooLong = mid;
  }
  return envelope(fits);
}

export function decodeResult(text: string | undefined): unknown {
  if (text === undefined) return undefined;
  try {
    return JSON.parse(text) as unknown;
  } catch {
    return text; // written by someone else as plain text: hand it over as is
  }
}

/**
 * Whether the agent's newest tool call of this attempt failed with HTTP 429. An agent that gives
 * up its attempt right after one gave up because of the rate limit (rule 4): its exit says so.
 */
export function newestCallRateLimited(calls: readonly ToolCall[], attempt: number): boolean {
  for (let i = calls.length - 1; i >= 0; i--) {
    const call = calls[i] as ToolCall;
    if (call.attempt === attempt) return call.state === "Failed" && call.error?.httpStatus === 429;
  }
  return false;
}

// ---------------------------------------------------------------------------------------------
// checkpoints

/** The sandbox's part of status as a write leaves it: what MAX_SANDBOX_STATUS_BYTES bounds. */
export interface SandboxStatusPart {
  heartbeat: unknown;
  toolCalls?: readonly ToolCall[];
  checkpoint: Checkpoint;
}

/**
 * Why a checkpoint cannot be written, or undefined when it fits: status.checkpoint as JSON (with
 * whatever the SDK wraps around it) at most MAX_CHECKPOINT_BYTES, and the sandbox's whole part of
 * status at most MAX_SANDBOX_STATUS_BYTES. Throws what JSON.stringify throws (a BigInt, a cycle):
 * such data cannot be written either.
 */
export function checkpointRefusal(part: SandboxStatusPart): CheckpointTooLargeError | undefined {
  const { step } = part.checkpoint;
  const bytes = jsonBytes(part.checkpoint);
  if (bytes > MAX_CHECKPOINT_BYTES) return new CheckpointTooLargeError(step, "checkpoint", bytes, MAX_CHECKPOINT_BYTES);
  const total = jsonBytes(part);
  if (total > MAX_SANDBOX_STATUS_BYTES) return new CheckpointTooLargeError(step, "sandbox status", total, MAX_SANDBOX_STATUS_BYTES);
  return undefined;
}

// ---------------------------------------------------------------------------------------------
// nudges

export interface Nudge {
  time: string;
  message: string;
  /** How many nudges the operator has sent since the stall watchdog was last disarmed. */
  count: number;
}

/**
 * The nudge in `stall` if it is newer than the last one handled. The sandbox seeds `lastSeen`
 * with whatever nudge stood in status when it started, so only nudges made during this attempt
 * reach the agent, each exactly once, however often the watch shows the same status.
 */
export function newNudge(stall: StallStatus | undefined, lastSeen: string | undefined): Nudge | undefined {
  const nudge = stall?.lastNudge;
  if (!nudge) return undefined;
  if (lastSeen !== undefined) {
    const at = Date.parse(nudge.time);
    const seen = Date.parse(lastSeen);
    if (nudge.time === lastSeen || (!Number.isNaN(at) && !Number.isNaN(seen) && at <= seen)) return undefined;
  }
  return { time: nudge.time, message: nudge.message, count: stall?.nudges ?? 0 };
}

// ---------------------------------------------------------------------------------------------
// fencing

/** Phases in which the operator has stopped the current attempt without starting another. */
const STOPPED_PHASES = new Set(["NeedsHumanIntervention", "Suspended", "Completed", "Failed"]);

/**
 * Why this sandbox must stop, if it must: a newer attempt has taken over, or the operator has
 * stopped the run. An attempt number behind ours is the operator catching up (it creates the pod
 * before it writes the status naming it), not a reason to stop.
 */
export function fenceReason(status: { attempt?: number; phase?: string } | undefined, ownAttempt: number): string | undefined {
  const current = status?.attempt;
  if (current !== undefined && current > ownAttempt) return `attempt ${ownAttempt} was superseded by attempt ${current}`;
  if (current === ownAttempt && status?.phase !== undefined && STOPPED_PHASES.has(status.phase)) return `the run is ${status.phase}`;
  return undefined;
}

// ---------------------------------------------------------------------------------------------
// approvals

/**
 * While the agent awaits a reply, its checkpoint carries the request under this key, beside the
 * agent's own data. A new attempt that finds it knows the agent was waiting and for what.
 */
export { APPROVAL_REQUEST_KEY };
/** Random bytes in a request's key (hex: 32 characters; the protocol allows 64). */
export const APPROVAL_KEY_BYTES = 16;
export const MAX_APPROVAL_KEY_CHARS = 64;

export interface ApprovalRequest {
  question: string;
  askedAt: string;
  /**
   * New and random for every question. The operator copies it into status.approval.requestKey
   * when it opens the request: that is how the sandbox knows the request, and its answer, as its
   * own. Requests of older SDKs have none, and are never matched.
   */
  key?: string;
}

/**
 * The request a sandbox waits on: its key, and the id of the request the operator opened for it,
 * once seen. Only a decision of that id counts.
 */
export interface RequestRef {
  key: string | undefined;
  id?: string;
}

export function wrapApprovalCheckpoint(step: number, data: unknown, request: ApprovalRequest): Checkpoint {
  return { step, data: { [APPROVAL_REQUEST_KEY]: request, data } };
}

const isKey = (value: unknown): value is string => typeof value === "string" && value !== "" && value.length <= MAX_APPROVAL_KEY_CHARS;

/**
 * Splits a checkpoint into the agent's own data and a pending approval request, if any. Status is
 * anyone's to write: the request is read field by field, and a key that is not one is left out.
 */
export function unwrapCheckpoint(checkpoint: Checkpoint | undefined): { checkpoint?: Checkpoint; request?: ApprovalRequest } {
  if (!checkpoint) return {};
  const data = checkpoint.data as Record<string, unknown> | undefined;
  const found = data && typeof data === "object" && !Array.isArray(data) ? (data[APPROVAL_REQUEST_KEY] as Partial<Record<keyof ApprovalRequest, unknown>> | undefined) : undefined;
  if (!found || typeof found !== "object" || typeof found.question !== "string") return { checkpoint };
  const request: ApprovalRequest = { question: found.question, askedAt: typeof found.askedAt === "string" ? found.askedAt : "" };
  if (isKey(found.key)) request.key = found.key;
  const inner: Checkpoint = { step: checkpoint.step };
  if (data?.data !== undefined) inner.data = data.data;
  return { checkpoint: inner, request };
}

export type ApprovalOutcome =
  | { state: "Pending" }
  | { state: "Approved"; answer: string }
  | { state: "Rejected"; reason?: string }
  | { state: "TimedOut" }
  /** The run left the wait before an answer came: this request is never answered. */
  | { state: "Withdrawn" };

/** Whether status.approval is the request the sandbox asked with this key. */
const isOwn = (approval: ApprovalStatus | undefined, request: RequestRef): approval is ApprovalStatus =>
  approval !== undefined && request.key !== undefined && approval.requestKey === request.key;

/**
 * The id of the request the operator opened for this key, when status.approval shows it open:
 * the sandbox holds on to it, so that no other request's decision is taken for this one's.
 */
export function openedRequestId(approval: ApprovalStatus | undefined, request: RequestRef): string | undefined {
  return isOwn(approval, request) && approval.state === "Pending" && typeof approval.id === "string" ? approval.id : undefined;
}

/**
 * Where the request stands, by status.approval: its decision if the approval carries its key (and
 * the id it was opened with, once known), else Pending, for a request not yet opened or one whose
 * decision has not come. A state this SDK does not know is no decision.
 */
export function approvalOutcome(approval: ApprovalStatus | undefined, request: RequestRef): ApprovalOutcome {
  if (!isOwn(approval, request)) return { state: "Pending" };
  if (request.id !== undefined && approval.id !== request.id) return { state: "Pending" };
  switch (approval.state) {
    case "Approved":
      return { state: "Approved", answer: typeof approval.answer === "string" ? approval.answer : "" };
    case "Rejected":
      return typeof approval.reason === "string" ? { state: "Rejected", reason: approval.reason } : { state: "Rejected" };
    case "TimedOut":
      return { state: "TimedOut" };
    case "Withdrawn":
      return { state: "Withdrawn" };
    default:
      return { state: "Pending" };
  }
}
