// The sandbox SDK: what agent code running in a sandbox pod uses to speak the AgentRun protocol.
//
// Writes. Everything the sandbox reports is a JSON merge patch on its own run's status
// subresource naming only sandbox-owned fields (heartbeat, toolCalls, checkpoint). Writes go out
// one at a time, each carrying the newest state, so a slow write can never land after a newer one
// and undo it (merge patch replaces arrays whole: toolCalls is always the full list we hold).
// Every write carries the heartbeat with this sandbox's attempt, so every write is a sign of life
// and admission can fence stale attempts by looking at one field.
//
// Heartbeats. A heartbeat-only write goes out at most once per heartbeatTimeout/4; anything that
// matters to the watchdog (a state change, a tool record, activity, a checkpoint) goes out at
// once and moves the heartbeat with it. A heartbeat must mean "the agent is making progress", so:
//  - the loop is a timer on the agent's own event loop: if the process dies or a synchronous
//    loop blocks the event loop, no heartbeat is written;
//  - it is written only while the agent shows progress (any SDK call, a streamed chunk,
//    progress()); after progressTimeout (default: the heartbeat timeout) without any, the agent
//    is wedged, heartbeats stop, and the watchdog replaces the sandbox one timeout later. Waiting
//    on the SDK itself (for an approval or a nudge) is not being wedged;
//  - it stops when the agent's work settles (runAgent then exits) or when this sandbox is
//    fenced; the timer is deliberately kept referenced, so a pending agent can never let the
//    process drain its event loop and exit 0, which would read as "Completed".
//
// Fencing. The SDK watches its own run. When status.attempt moves past this sandbox's attempt
// (the watchdog has replaced it) or the operator stops the run, the SDK aborts the agent (signal
// and callbacks) and writes nothing more.
import { open, type FileHandle } from "node:fs/promises";
import type { Logger } from "pino";
import type {
  Activity,
  ActivityKind,
  AgentRun,
  AgentRunStatus,
  ApprovalStatus,
  Checkpoint,
  FailureRecord,
  SandboxState,
  ToolCall,
} from "../api/agentrun.ts";
import { NOT_CURRENT_SANDBOX, SANDBOX_FIELD_MANAGER } from "../api/annotations.ts";
import { ApiError, KubeClient, isNotFound, paths, type Json } from "../kube/client.ts";
import { createLogger } from "../log.ts";
import { readRun } from "../watchdog/observe.ts";
import { RunWatch } from "./run-watch.ts";
import {
  ApprovalDeniedError,
  FencedError,
  UnconfirmedSideEffectError,
  EXIT_CODES,
  describeFailure,
  isValidationError,
  validationFailure,
  type ToolFailure,
} from "./errors.ts";
import { argsHash, idempotencyKey } from "./keys.ts";
import {
  DEFAULT_MAX_TOOL_CALLS,
  approvalFingerprint,
  approvalOutcome,
  decodeResult,
  effectiveHeartbeatTimeoutMs,
  encodeResult,
  fenceReason,
  heartbeatDecision,
  heartbeatIntervalMs,
  identityFromEnv,
  newNudge,
  replayDecision,
  unwrapCheckpoint,
  upsertCall,
  wrapApprovalCheckpoint,
  type ApprovalOutcome,
  type ApprovalRequest,
  type Nudge,
  type RunLike,
  type SandboxIdentity,
} from "./protocol.ts";

export interface SandboxOptions {
  /** API client; by default from $KUBECONFIG, ~/.kube/config or the pod's service account. */
  client?: KubeClient;
  /** Where WATCHDOG_RUN_NAME, WATCHDOG_RUN_NAMESPACE and WATCHDOG_ATTEMPT are read from. */
  env?: Record<string, string | undefined>;
  /** Overrides the identity from the environment. */
  identity?: SandboxIdentity;
  /** Overrides the heartbeat timeout read from the run (status.watchdog.heartbeatTimeout). */
  heartbeatTimeoutMs?: number;
  /** No progress for longer than this and heartbeats stop. Default: the heartbeat timeout. */
  progressTimeoutMs?: number;
  /** Tool records kept in status (the CRD allows 64). Default 32. */
  maxToolCalls?: number;
  /** How long the first read of the run is retried while the API server cannot be reached. Default 60 s. */
  startDeadlineMs?: number;
  /** Called with each new nudge of the stall watchdog. */
  onNudge?: (nudge: Nudge) => void;
  /** Called once when this sandbox is fenced. */
  onFenced?: (reason: string) => void;
  logger?: Logger;
  clock?: () => number;
  /** How complete() and fail() end the process. Default process.exit. */
  exit?: (code: number) => void;
  /** Where fail() leaves its message for the kubelet (the pod's terminationMessagePath), if it exists. */
  terminationLogPath?: string;
}

export interface ToolContext {
  /** Stable across attempts: pass it to the service so it can recognise a repeated request. */
  idempotencyKey: string;
  callId: string;
  attempt: number;
  /** An earlier attempt started this call and its outcome is unknown (idempotent tools only). */
  rerun: boolean;
  /** Aborted when this sandbox is fenced. */
  signal: AbortSignal;
  /** Long-running tools call this to show they are still making progress. */
  progress(): void;
}

/** Anything with zod's safeParse: the tool's argument schema. */
export interface ArgsSchema<A> {
  safeParse(value: unknown): { success: true; data: A } | { success: false; error: unknown };
}

export interface ToolOptions<A> {
  /** Running the tool twice with the same idempotency key is harmless. Default false. */
  idempotent?: boolean;
  /** Validates the arguments before anything runs; a failure comes back as a readable message. */
  schema?: ArgsSchema<A>;
}

export type ToolOutcome<R> =
  | { ok: true; value: R; replayed: boolean; idempotencyKey: string; callId: string }
  | { ok: false; error: ToolFailure; idempotencyKey: string; callId?: string };

export interface TranscriptEntry {
  time: string;
  role: "agent" | "user" | "tool" | "system";
  kind: string;
  text: string;
}

export interface SandboxStats {
  /** Status writes acknowledged by the API server. */
  writes: number;
  /** Of those, writes that carried nothing but the heartbeat. */
  heartbeatWrites: number;
  failedWrites: number;
  watchRestarts: number;
  heartbeatTimeoutMs: number;
  heartbeatIntervalMs: number;
  startedAt: number;
}

export interface StreamHandle {
  /** A chunk of streamed output: progress for the heartbeat, no write. */
  chunk(text: string): void;
  /** The stream's final text (default: the chunks joined), reported as text or emptyText. */
  end(finalText?: string): Promise<void>;
}

interface Waiter {
  version: number;
  resolve(): void;
  reject(err: unknown): void;
}

interface ApprovalWait {
  request: ApprovalRequest;
  resolve(outcome: ApprovalOutcome): void;
  reject(err: unknown): void;
}

const FIRST_RETRY_MS = 200;
const MAX_RETRY_MS = 5_000;
const FLUSH_DEADLINE_MS = 10_000;
/** How long the first read of the run is retried while the API server cannot be reached. */
const START_DEADLINE_MS = 60_000;
/** How long after start a refusal for not being the run's current pod is taken as "not yet". */
const FENCING_GRACE_MS = 30_000;
/** The transcript is for the agent's recent context, not an archive: the newest entries are kept. */
const MAX_TRANSCRIPT = 1000;
const noop = () => {};

/** Write errors worth retrying: the server or the network may recover. */
function isTransient(err: unknown): boolean {
  if (!(err instanceof ApiError)) return true;
  return err.code === 0 || err.code === 401 || err.code === 408 || err.code === 409 || err.code === 429 || err.code >= 500;
}

/** A promise that may be left unawaited without an unhandled rejection taking the process down. */
function handled<T>(p: Promise<T>): Promise<T> {
  p.catch(noop);
  return p;
}

export class Sandbox {
  readonly runName: string;
  readonly namespace: string;
  readonly attempt: number;
  /** metadata.uid of the run. */
  readonly uid: string;
  /** spec.goal of the run. */
  readonly goal: string | undefined;
  /** Why the previous attempt ended (status.lastFailure), as found at start. */
  readonly lastFailure: FailureRecord | undefined;

  private readonly client: KubeClient;
  private readonly log: Logger;
  private readonly clock: () => number;
  private readonly exitProcess: (code: number) => void;
  private readonly options: SandboxOptions;
  private readonly maxToolCalls: number;
  private readonly abort = new AbortController();
  private watch: RunWatch | undefined;

  // what we hold of status
  private run: Json | undefined;
  private toolCalls: ToolCall[] = [];
  private resetAfter: string | undefined;
  private checkpointHeld: Checkpoint | undefined;
  private approval: ApprovalStatus | undefined;

  // agent state
  private state: SandboxState = "Planning";
  private runningTools = 0;
  private waitingForInput = 0;
  private committedStep = 0;
  private callIndex = 0;
  private callSeq = 0;
  private lastProgressAt: number;
  private resumeRequest: ApprovalRequest | undefined;
  private readonly entries: TranscriptEntry[] = [];

  // writes
  private dirtyToolCalls = false;
  private dirtyCheckpoint = false;
  /** Activity to send; null clears what an earlier attempt left behind. */
  private pendingActivity: Activity | null | undefined = null;
  private lastSentState: SandboxState | undefined;
  private heartbeatRequested = false;
  private version = 0;
  private waiters: Waiter[] = [];
  private inFlight = false;
  private retryTimer: ReturnType<typeof setTimeout> | undefined;
  private retryMs = FIRST_RETRY_MS;
  private lastWriteAt = 0;

  // heartbeats
  private timeoutMs = 0;
  private intervalMs = 0;
  private tickTimer: ReturnType<typeof setTimeout> | undefined;
  private wedged = false;

  // watch-driven
  private fenceCause: string | undefined;
  private closed = false;
  private lastNudge: string | undefined;
  private readonly nudgeListeners = new Set<(nudge: Nudge) => void>();
  private readonly fenceListeners = new Set<(reason: string) => void>();
  private approvalWait: ApprovalWait | undefined;
  private readonly runWaits = new Set<{ test(run: Json): boolean; resolve(): void; reject(err: unknown): void }>();

  private readonly counters = { writes: 0, heartbeatWrites: 0, failedWrites: 0 };
  private readonly startedAt: number;

  /** Connects to the run, reads what earlier attempts left, reports in and starts heartbeating. */
  static async start(options: SandboxOptions = {}): Promise<Sandbox> {
    const identity = options.identity ?? identityFromEnv(options.env ?? process.env);
    const client = options.client ?? new KubeClient();
    let raw: Json | undefined;
    // An API server that restarts, or a network still coming up in a new pod, is a matter of
    // seconds: the first read is retried like every write, up to START_DEADLINE_MS.
    const clock = options.clock ?? Date.now;
    const giveUpAt = clock() + (options.startDeadlineMs ?? START_DEADLINE_MS);
    for (let wait = FIRST_RETRY_MS; raw === undefined; wait = Math.min(MAX_RETRY_MS, wait * 2)) {
      try {
        raw = await client.get(paths.run(identity.namespace, identity.runName));
      } catch (err) {
        if (isNotFound(err)) throw new FencedError(`run ${identity.namespace}/${identity.runName} does not exist`);
        if (!isTransient(err) || clock() + wait > giveUpAt) throw err;
        await new Promise((resolve) => setTimeout(resolve, wait));
      }
    }
    // Parsed as the operator parses it: what earlier attempts left decides what tools do now, so
    // a record that does not fit the schema is dropped rather than trusted.
    const read = readRun(raw);
    if (!read.ok) throw new Error(`cannot read run ${identity.namespace}/${identity.runName}: ${read.error}`);
    const sandbox = new Sandbox(options, identity, client, read.run, raw);
    for (const problem of read.problems) sandbox.log.warn({ problem }, "ignoring an unreadable sandbox field left in status");
    await sandbox.open();
    return sandbox;
  }

  private constructor(options: SandboxOptions, identity: SandboxIdentity, client: KubeClient, run: AgentRun, raw: Json) {
    this.runName = identity.runName;
    this.namespace = identity.namespace;
    this.attempt = identity.attempt;
    this.options = options;
    this.client = client;
    this.clock = options.clock ?? Date.now;
    this.exitProcess = options.exit ?? ((code) => process.exit(code));
    this.maxToolCalls = options.maxToolCalls ?? DEFAULT_MAX_TOOL_CALLS;
    this.log = (options.logger ?? createLogger(process.env.WATCHDOG_LOG_LEVEL ?? "info", "sandbox")).child({
      namespace: this.namespace,
      run: this.runName,
      attempt: this.attempt,
    });
    this.startedAt = this.clock();
    this.lastProgressAt = this.startedAt;
    if (options.onNudge) this.nudgeListeners.add(options.onNudge);
    if (options.onFenced) this.fenceListeners.add(options.onFenced);

    const status = run.status ?? {};
    this.run = raw;
    this.uid = run.metadata.uid ?? "";
    this.goal = run.spec.goal;
    this.lastFailure = status.lastFailure;
    this.toolCalls = [...(status.toolCalls ?? [])];
    this.resetAfter = status.toolCallsResetAfter;
    this.approval = status.approval;
    // Only nudges made during this attempt are for this agent.
    this.lastNudge = status.stall?.lastNudge?.time;
    const unwrapped = unwrapCheckpoint(status.checkpoint);
    this.checkpointHeld = status.checkpoint;
    this.committedStep = unwrapped.checkpoint?.step ?? 0;
    this.resumeRequest = unwrapped.request;
    this.applyTimeout(raw);
  }

  private async open(): Promise<void> {
    const run = this.run as Json;
    const fence = fenceReason(run.status as AgentRunStatus | undefined, this.attempt);
    if (fence) throw new FencedError(fence);

    if (this.toolCalls.length > this.maxToolCalls) {
      this.toolCalls = this.toolCalls.slice(-this.maxToolCalls);
      this.dirtyToolCalls = true;
    }
    this.log.info(
      {
        checkpointStep: this.loadCheckpoint()?.step,
        lastFailure: this.lastFailure?.reason,
        awaitingApproval: this.resumeRequest !== undefined,
        heartbeatTimeoutMs: this.timeoutMs,
      },
      "sandbox started",
    );
    // The first write says "alive, planning" and clears the activity an earlier attempt left, so
    // the stall watchdog does not judge this attempt by the last one's words.
    await this.enqueue();
    this.watch = new RunWatch(this.client, this.namespace, this.runName, {
      onRun: (r) => this.observe(r),
      onDeleted: () => this.fence("the run was deleted"),
    }, this.log);
    this.watch.start();
    this.scheduleTick(this.lastWriteAt + this.intervalMs);
  }

  // -------------------------------------------------------------------------------------------
  // what the agent reads

  /** Step in progress: the one after the last committed checkpoint. Tool keys derive from it. */
  get step(): number {
    return this.committedStep + 1;
  }

  /** The last committed checkpoint (the agent's own step and data), or undefined. */
  loadCheckpoint(): Checkpoint | undefined {
    return unwrapCheckpoint(this.checkpointHeld).checkpoint;
  }

  /**
   * The approval request an earlier attempt was waiting on when it ended, and where it stands,
   * or undefined. awaitApproval() returns its answer without asking again.
   */
  get pendingApproval(): { question: string; outcome: ApprovalOutcome } | undefined {
    if (!this.resumeRequest) return undefined;
    return { question: this.resumeRequest.question, outcome: approvalOutcome(this.approval, this.resumeRequest) };
  }

  /** Aborted when this sandbox is fenced or closed. */
  get signal(): AbortSignal {
    return this.abort.signal;
  }

  /** Why this sandbox was fenced, if it was. */
  get fenced(): string | undefined {
    return this.fenceCause;
  }

  get transcript(): readonly TranscriptEntry[] {
    return this.entries;
  }

  /** The tool records this sandbox holds (and writes), newest last. */
  get calls(): readonly ToolCall[] {
    return this.toolCalls;
  }

  stats(): SandboxStats {
    return {
      ...this.counters,
      watchRestarts: this.watch?.restarts ?? 0,
      heartbeatTimeoutMs: this.timeoutMs,
      heartbeatIntervalMs: this.intervalMs,
      startedAt: this.startedAt,
    };
  }

  onNudge(listener: (nudge: Nudge) => void): () => void {
    this.nudgeListeners.add(listener);
    return () => this.nudgeListeners.delete(listener);
  }

  onFenced(listener: (reason: string) => void): () => void {
    this.fenceListeners.add(listener);
    return () => this.fenceListeners.delete(listener);
  }

  /**
   * Waits for the next nudge. Waiting here is waiting for input, not being wedged: heartbeats
   * go on, and the stall watchdog, not the hung-sandbox watchdog, judges a silent agent.
   */
  nextNudge(): Promise<Nudge> {
    this.assertOpen();
    return this.waitingOn(
      new Promise<Nudge>((resolve, reject) => {
        const off = this.onNudge((nudge) => {
          off();
          this.signal.removeEventListener("abort", onAbort);
          resolve(nudge);
        });
        const onAbort = () => {
          off();
          reject(new FencedError(this.fenceCause ?? "sandbox closed"));
        };
        this.signal.addEventListener("abort", onAbort, { once: true });
      }),
    );
  }

  // -------------------------------------------------------------------------------------------
  // progress and activity

  /** A sign of progress: keeps heartbeats going. In memory only; costs no write. */
  progress(): void {
    this.lastProgressAt = this.clock();
    if (this.wedged) {
      this.wedged = false;
      this.log.info("progress again; heartbeats resume");
    }
  }

  /**
   * Final agent text. Non-empty text arms the stall watchdog; empty text reports emptyText,
   * which disarms it. Written at once.
   */
  say(text: string): Promise<void> {
    const kind: ActivityKind = text.trim() === "" ? "emptyText" : "text";
    this.record("agent", kind, text);
    return this.report(kind);
  }

  /** A stream of agent output started: one `delta` write per stream, none per chunk. */
  beginStream(): StreamHandle {
    const chunks: string[] = [];
    void this.report("delta");
    return {
      chunk: (text: string) => {
        chunks.push(text);
        this.progress();
      },
      end: (finalText?: string) => this.say(finalText ?? chunks.join("")),
    };
  }

  /** A user message reached the agent (disarms the stall watchdog). */
  userMessage(text: string): Promise<void> {
    this.record("user", "userMessage", text);
    return this.report("userMessage");
  }

  /** The agent chose not to reply, e.g. answered a nudge with NO_REPLY (disarms). */
  noReply(): Promise<void> {
    this.record("agent", "noReply", "");
    return this.report("noReply");
  }

  /** Reports any activity kind; the helpers above are the usual way. */
  report(kind: ActivityKind): Promise<void> {
    this.assertOpen();
    this.progress();
    this.pendingActivity = { kind, time: new Date(this.clock()).toISOString() };
    return handled(this.enqueue());
  }

  // -------------------------------------------------------------------------------------------
  // checkpoints

  /** Commits a checkpoint; resolves once the API server has it. Later tool calls key on step+1. */
  async saveCheckpoint(step: number, data?: unknown): Promise<void> {
    this.assertOpen();
    const checkpoint: Checkpoint = { step };
    if (data !== undefined) checkpoint.data = data;
    await this.commitCheckpoint(checkpoint);
  }

  private async commitCheckpoint(checkpoint: Checkpoint): Promise<void> {
    this.progress();
    this.checkpointHeld = checkpoint;
    this.dirtyCheckpoint = true;
    if (checkpoint.step !== this.committedStep) this.callIndex = 0;
    this.committedStep = checkpoint.step;
    await this.enqueue();
  }

  // -------------------------------------------------------------------------------------------
  // tool calls

  /**
   * Runs a tool under the protocol: Started is committed before `fn` runs, then Succeeded with a
   * small result or Failed with the error. A call an earlier attempt already made (same step,
   * position, name and arguments) is not repeated blindly: a saved result is returned, an
   * unfinished idempotent call runs again with the same key, an unfinished non-idempotent call is
   * refused with UnconfirmedSideEffectError. Tool failures, including invalid arguments, come
   * back as `{ ok: false, error }` for the agent to read and act on.
   */
  async tool<A, R>(name: string, args: A, fn: (args: A, ctx: ToolContext) => R | Promise<R>, options: ToolOptions<A> = {}): Promise<ToolOutcome<R>> {
    this.assertOpen();
    this.progress();
    const idempotent = options.idempotent ?? false;
    const hash = argsHash(args);
    const key = idempotencyKey({ runUid: this.uid, step: this.step, index: this.callIndex++, name, argsHash: hash });
    const decision = replayDecision(this.toolCalls, key, idempotent, this.resetAfter);

    if (decision.kind === "saved") {
      this.record("tool", "replayed", `${name}: saved result of call ${decision.previous.id}`);
      this.log.info({ tool: name, call: decision.previous.id }, "returning the saved result of an earlier attempt");
      return { ok: true, value: decodeResult(decision.previous.result) as R, replayed: true, idempotencyKey: key, callId: decision.previous.id };
    }
    if (decision.kind === "refuse") {
      const err = new UnconfirmedSideEffectError(decision.previous);
      this.log.error({ tool: name, call: decision.previous.id }, err.message);
      throw err;
    }
    if (decision.kind === "unconfirmed") {
      const failure: ToolFailure = {
        kind: "unconfirmed",
        message: `${name} was started by attempt ${decision.previous.attempt ?? "?"} and its outcome is unknown; it was not run again. Check its effect before deciding what to do.`,
      };
      this.record("tool", "unconfirmed", failure.message);
      return { ok: false, error: failure, idempotencyKey: key, callId: decision.previous.id };
    }

    const startedAt = new Date(this.clock()).toISOString();
    const call: ToolCall = {
      id: `a${this.attempt}-${++this.callSeq}`,
      name,
      argsHash: hash,
      idempotencyKey: key,
      idempotent,
      attempt: this.attempt,
      state: "Started",
      startedAt,
    };

    let input = args;
    if (options.schema) {
      const parsed = options.schema.safeParse(args);
      if (!parsed.success) {
        const failure: ToolFailure = isValidationError(parsed.error)
          ? validationFailure(name, parsed.error)
          : { ...describeFailure(parsed.error, this.clock(), name), kind: "validation" };
        await this.finishCall({ ...call, state: "Failed", error: { message: failure.message }, finishedAt: startedAt });
        this.record("tool", "invalidArguments", failure.message);
        return { ok: false, error: failure, idempotencyKey: key, callId: call.id };
      }
      input = parsed.data;
    }

    // The intent is committed before anything can happen: a crash from here on leaves a Started
    // record that the watchdog and the next attempt act on.
    this.runningTools++;
    this.setState();
    this.toolCalls = upsertCall(this.toolCalls, call, this.maxToolCalls);
    this.dirtyToolCalls = true;
    try {
      await this.enqueue();
    } catch (err) {
      this.runningTools--;
      this.setState();
      throw err;
    }
    if (decision.kind === "rerun") this.log.warn({ tool: name, previous: decision.previous.id }, "running an unfinished idempotent call again with its key");

    const ctx: ToolContext = {
      idempotencyKey: key,
      callId: call.id,
      attempt: this.attempt,
      rerun: decision.kind === "rerun",
      signal: this.signal,
      progress: () => this.progress(),
    };
    let value: R;
    try {
      value = await fn(input, ctx);
    } catch (err) {
      this.runningTools--;
      this.assertOpen();
      const failure = describeFailure(err, this.clock(), name);
      const error: NonNullable<ToolCall["error"]> = { message: failure.message };
      if (failure.httpStatus !== undefined) error.httpStatus = failure.httpStatus;
      if (failure.retryAfterSeconds !== undefined) error.retryAfterSeconds = failure.retryAfterSeconds;
      await this.finishCall({ ...call, state: "Failed", error, finishedAt: new Date(this.clock()).toISOString() });
      this.record("tool", "failed", `${name}: ${failure.message}`);
      return { ok: false, error: failure, idempotencyKey: key, callId: call.id };
    }
    this.runningTools--;
    this.assertOpen();
    const done: ToolCall = { ...call, state: "Succeeded", finishedAt: new Date(this.clock()).toISOString() };
    const result = encodeResult(value);
    if (result !== undefined) done.result = result;
    await this.finishCall(done);
    this.record("tool", "succeeded", `${name}: ${result ?? ""}`);
    return { ok: true, value, replayed: false, idempotencyKey: key, callId: call.id };
  }

  /** Records a call's end with a toolResult activity; resolves once the API server has it. */
  private async finishCall(call: ToolCall): Promise<void> {
    this.progress();
    this.toolCalls = upsertCall(this.toolCalls, call, this.maxToolCalls);
    this.dirtyToolCalls = true;
    this.pendingActivity = { kind: "toolResult", time: call.finishedAt ?? new Date(this.clock()).toISOString() };
    this.setState();
    await this.enqueue();
  }

  // -------------------------------------------------------------------------------------------
  // approvals

  /**
   * Asks a person and waits for the answer: saves a checkpoint with the question, reports
   * AwaitingReply, and resolves with the answer once status.approval is Approved. If the operator
   * releases this pod meanwhile, this sandbox is fenced (FencedError) and the next attempt, started
   * when the answer comes, gets the answer from this same call without asking again. Rejected or
   * timed out: ApprovalDeniedError (the operator fails the run).
   */
  async awaitApproval(question: string, checkpoint?: { step: number; data?: unknown }): Promise<string> {
    this.assertOpen();
    this.progress();
    let request = this.resumeRequest;
    this.resumeRequest = undefined; // one resumed request answers one call
    if (request) {
      const outcome = approvalOutcome(this.approval, request);
      if (outcome.state !== "Pending") return this.settleApproval(request, outcome);
      this.log.info({ question: request.question }, "still awaiting the reply an earlier attempt asked for");
    } else {
      // The operator opens a new request when it sees the run enter AwaitingReply; if it has not
      // yet seen us leave the previous one, wait until it has, or our question would be lost.
      await this.waitingOn(this.waitForRun((run) => (run.status as AgentRunStatus | undefined)?.phase !== "AwaitingReply" || this.ownAttemptMissing(run)));
      const current = this.loadCheckpoint();
      const step = checkpoint?.step ?? current?.step ?? this.committedStep;
      const data = checkpoint ? checkpoint.data : current?.data;
      request = { question, askedAt: new Date(this.clock()).toISOString() };
      const supersedes = approvalFingerprint(this.approval);
      if (supersedes) request.supersedes = supersedes;
      this.checkpointHeld = wrapApprovalCheckpoint(step, data, request);
      this.dirtyCheckpoint = true;
      if (step !== this.committedStep) this.callIndex = 0;
      this.committedStep = step;
    }
    this.record("agent", "awaitingApproval", request.question);
    this.log.info({ question: request.question }, "awaiting approval");
    const asked = request;
    const outcome = await this.waitingOn(
      new Promise<ApprovalOutcome>((resolve, reject) => {
        this.approvalWait = { request: asked, resolve, reject };
        this.setState();
        this.enqueue().catch(reject);
        this.checkApproval();
      }),
    ).finally(() => {
      this.approvalWait = undefined;
      this.setState();
    });
    // Back to work: say so at once, and before the agent can ask again (see above).
    if (outcome.state === "Approved") await this.enqueue();
    return this.settleApproval(asked, outcome);
  }

  private settleApproval(request: ApprovalRequest, outcome: ApprovalOutcome): string {
    if (outcome.state === "Approved") {
      this.record("user", "approved", outcome.answer);
      this.log.info({ question: request.question, answer: outcome.answer }, "approved");
      return outcome.answer;
    }
    if (outcome.state === "Pending") throw new Error("approval still pending"); // unreachable
    const err = new ApprovalDeniedError(outcome.state, outcome.state === "Rejected" ? outcome.reason : undefined);
    this.record("user", outcome.state === "Rejected" ? "rejected" : "approvalTimedOut", err.message);
    throw err;
  }

  private checkApproval(): void {
    const wait = this.approvalWait;
    if (!wait) return;
    const outcome = approvalOutcome(this.approval, wait.request);
    if (outcome.state !== "Pending") wait.resolve(outcome);
  }

  // -------------------------------------------------------------------------------------------
  // shutting down

  /** Stops heartbeats and the watch and flushes what is pending. Does not exit. */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    this.stopTimers();
    await this.flushed(FLUSH_DEADLINE_MS);
    this.watch?.stop();
    if (!this.abort.signal.aborted) this.abort.abort(new Error("sandbox closed"));
  }

  /** The agent's work is done: flush and exit 0. The pod's exit 0 completes the run. */
  async complete(): Promise<void> {
    if (this.fenceCause) {
      // A fenced sandbox no longer speaks for the run, not even to say it is done.
      this.log.warn({ reason: this.fenceCause }, "complete() after being fenced; exiting as fenced");
      await this.close();
      this.exitProcess(EXIT_CODES.fenced);
      return;
    }
    this.log.info({ stats: this.stats() }, "agent completed");
    await this.close();
    this.exitProcess(EXIT_CODES.completed);
  }

  /** The agent failed: flush, leave the message for the kubelet, exit non-zero. */
  async fail(reason: unknown, code = 1): Promise<void> {
    const message = reason instanceof Error ? `${reason.name}: ${reason.message}` : String(reason);
    this.log.error({ stats: this.stats(), code }, `agent failed: ${message}`);
    await this.writeTerminationMessage(message);
    await this.close();
    this.exitProcess(code === 0 ? 1 : code);
  }

  /** Stops at once without flushing anything, as a crash would. For tests and emergencies. */
  abandon(): void {
    this.closed = true;
    this.stopTimers();
    this.watch?.stop();
    this.rejectWaiters(new FencedError("sandbox abandoned"));
    if (!this.abort.signal.aborted) this.abort.abort(new Error("sandbox abandoned"));
  }

  /**
   * Leaves the message where the kubelet reads it into the pod's status, so the watchdog's
   * lastFailure says why. Only into a file that exists: the kubelet provides it in a pod, and
   * outside one nothing should be created.
   */
  private async writeTerminationMessage(message: string): Promise<void> {
    const path = this.options.terminationLogPath ?? "/dev/termination-log";
    let file: FileHandle | undefined;
    try {
      file = await open(path, "r+");
      await file.truncate(0);
      await file.writeFile(message.slice(0, 4096));
    } catch {
      // not in a pod, or not writable: the log line carries the message
    } finally {
      await file?.close().catch(noop);
    }
  }

  private stopTimers(): void {
    if (this.tickTimer) clearTimeout(this.tickTimer);
    if (this.retryTimer) clearTimeout(this.retryTimer);
    this.tickTimer = undefined;
    this.retryTimer = undefined;
  }

  private async flushed(deadlineMs: number): Promise<void> {
    if (!this.hasPending() && !this.inFlight) return;
    const pending = this.enqueue().catch(noop);
    let timer: ReturnType<typeof setTimeout> | undefined;
    const deadline = new Promise<void>((resolve) => (timer = setTimeout(resolve, deadlineMs)));
    await Promise.race([pending, deadline]);
    if (timer) clearTimeout(timer);
  }

  // -------------------------------------------------------------------------------------------
  // the watch

  private observe(run: Json): void {
    if (this.fenceCause) return;
    this.run = run;
    // Only operator-owned fields are read here, on every event (each of our own writes is one).
    const status = (run.status ?? {}) as AgentRunStatus;
    this.applyTimeout(run);
    this.resetAfter = status.toolCallsResetAfter;
    this.approval = status.approval;
    for (const wait of [...this.runWaits]) if (wait.test(run)) wait.resolve();
    // The answer first: a rejection also fails the run, and the agent should learn why.
    this.checkApproval();
    const nudge = newNudge(status.stall, this.lastNudge);
    if (nudge) this.deliverNudge(nudge);
    const fence = fenceReason(status, this.attempt);
    if (fence) this.fence(fence);
  }

  private deliverNudge(nudge: Nudge): void {
    this.lastNudge = nudge.time;
    this.record("system", "nudge", nudge.message);
    this.log.info({ nudge: nudge.count, time: nudge.time }, `nudge: ${nudge.message}`);
    for (const listener of [...this.nudgeListeners]) {
      try {
        listener(nudge);
      } catch (err) {
        this.log.error({ err: String(err) }, "nudge listener threw");
      }
    }
  }

  private fence(reason: string): void {
    if (this.fenceCause) return;
    this.fenceCause = reason;
    this.log.warn({ reason }, "fenced: this sandbox stops and writes nothing more");
    this.closed = true;
    this.stopTimers();
    this.watch?.stop();
    const err = new FencedError(reason);
    this.rejectWaiters(err);
    this.approvalWait?.reject(err);
    for (const wait of [...this.runWaits]) wait.reject(err);
    this.abort.abort(err);
    for (const listener of [...this.fenceListeners]) {
      try {
        listener(reason);
      } catch (e) {
        this.log.error({ err: String(e) }, "fence listener threw");
      }
    }
  }

  private ownAttemptMissing(run: Json): boolean {
    return fenceReason(run.status as AgentRunStatus | undefined, this.attempt) !== undefined;
  }

  private waitForRun(test: (run: Json) => boolean): Promise<void> {
    if (this.run && test(this.run)) return Promise.resolve();
    return new Promise<void>((resolve, reject) => {
      const wait = {
        test,
        resolve: () => {
          this.runWaits.delete(wait);
          resolve();
        },
        reject: (err: unknown) => {
          this.runWaits.delete(wait);
          reject(err);
        },
      };
      this.runWaits.add(wait);
    });
  }

  /** Marks the agent as waiting on the SDK for input while `p` is pending. */
  private async waitingOn<T>(p: Promise<T>): Promise<T> {
    this.waitingForInput++;
    try {
      return await p;
    } finally {
      this.waitingForInput--;
      this.progress();
    }
  }

  private applyTimeout(run: Json): void {
    const timeout = this.options.heartbeatTimeoutMs ?? effectiveHeartbeatTimeoutMs(run as RunLike);
    if (timeout === this.timeoutMs) return;
    const first = this.timeoutMs === 0;
    this.timeoutMs = timeout;
    this.intervalMs = heartbeatIntervalMs(timeout);
    if (!first) {
      this.log.info({ heartbeatTimeoutMs: timeout }, "heartbeat timeout changed");
      if (this.tickTimer) this.scheduleTick(this.lastWriteAt + this.intervalMs);
    }
  }

  // -------------------------------------------------------------------------------------------
  // heartbeats and writes

  private scheduleTick(at: number): void {
    if (this.closed) return;
    if (this.tickTimer) clearTimeout(this.tickTimer);
    this.tickTimer = setTimeout(() => this.tick(), Math.max(0, at - this.clock()));
  }

  private tick(): void {
    this.tickTimer = undefined;
    if (this.closed) return;
    const decision = heartbeatDecision({
      now: this.clock(),
      lastWriteAt: this.lastWriteAt,
      intervalMs: this.intervalMs,
      lastProgressAt: this.lastProgressAt,
      progressTimeoutMs: this.options.progressTimeoutMs ?? this.timeoutMs,
      waitingForInput: this.waitingForInput > 0,
    });
    if (decision.wedged && !this.wedged) {
      this.wedged = true;
      this.log.warn(
        { lastProgressAt: new Date(this.lastProgressAt).toISOString() },
        "no progress for longer than the progress timeout: heartbeats stop so the watchdog can replace this sandbox",
      );
    }
    if (decision.write && !this.inFlight && !this.hasPending()) {
      this.heartbeatRequested = true;
      this.enqueue().catch(noop); // a failed heartbeat is retried; the next tick tries again anyway
    }
    this.scheduleTick(decision.nextCheckAt);
  }

  private setState(): void {
    const next: SandboxState = this.approvalWait ? "AwaitingReply" : this.runningTools > 0 ? "ExecutingTool" : "Planning";
    this.state = next;
  }

  private hasPending(): boolean {
    return this.dirtyToolCalls || this.dirtyCheckpoint || this.pendingActivity !== undefined || this.state !== this.lastSentState || this.heartbeatRequested;
  }

  /** Resolves once everything changed so far is acknowledged by the API server. */
  private enqueue(): Promise<void> {
    if (this.fenceCause) return Promise.reject(new FencedError(this.fenceCause));
    const version = ++this.version;
    const promise = new Promise<void>((resolve, reject) => this.waiters.push({ version, resolve, reject }));
    if (!this.inFlight && !this.retryTimer) void this.flush();
    return promise;
  }

  private async flush(): Promise<void> {
    while (!this.fenceCause && !this.inFlight && (this.hasPending() || this.waiters.length > 0)) {
      const upTo = this.version;
      if (!this.hasPending()) {
        this.settle(upTo); // everything asked for went out with an earlier write
        continue;
      }
      const sent = {
        toolCalls: this.dirtyToolCalls,
        checkpoint: this.dirtyCheckpoint,
        activity: this.pendingActivity,
        state: this.state,
      };
      const heartbeatOnly = !sent.toolCalls && !sent.checkpoint && sent.activity === undefined && sent.state === this.lastSentState;
      const heartbeat: Record<string, unknown> = { time: new Date(this.clock()).toISOString(), attempt: this.attempt, state: sent.state };
      if (sent.activity !== undefined) heartbeat.activity = sent.activity;
      const status: Record<string, unknown> = { heartbeat };
      if (sent.toolCalls) status.toolCalls = this.toolCalls;
      if (sent.checkpoint) status.checkpoint = this.checkpointHeld ?? null;
      this.dirtyToolCalls = false;
      this.dirtyCheckpoint = false;
      this.pendingActivity = undefined;
      this.heartbeatRequested = false;
      this.inFlight = true;
      try {
        // Under its own field manager: the API server's record of this write (managedFields) is
        // the heartbeat's time on the server's clock, which is what the watchdog measures by.
        await this.client.mergePatch(paths.runStatus(this.namespace, this.runName), { status }, { fieldManager: SANDBOX_FIELD_MANAGER });
        this.inFlight = false;
        this.counters.writes++;
        if (heartbeatOnly) this.counters.heartbeatWrites++;
        this.lastWriteAt = this.clock();
        this.lastSentState = sent.state;
        this.retryMs = FIRST_RETRY_MS;
        this.settle(upTo);
      } catch (err) {
        this.inFlight = false;
        this.counters.failedWrites++;
        if (isNotFound(err)) {
          this.fence("the run was deleted");
          return;
        }
        if (!this.retryable(err)) {
          // The server refused this content; sending it again would fail the same way. Whoever
          // waited for it learns why; changes made since go out with the next write.
          this.log.error({ err: String(err) }, "status write rejected");
          this.lastSentState = sent.state;
          this.rejectWaiters(err, upTo);
          continue;
        }
        // Put back what did not go out, unless something newer replaced it meanwhile.
        this.dirtyToolCalls ||= sent.toolCalls;
        this.dirtyCheckpoint ||= sent.checkpoint;
        if (this.pendingActivity === undefined) this.pendingActivity = sent.activity;
        this.log.warn({ err: String(err), retryInMs: this.retryMs }, "status write failed; retrying");
        this.retryTimer = setTimeout(() => {
          this.retryTimer = undefined;
          void this.flush();
        }, this.retryMs);
        this.retryMs = Math.min(MAX_RETRY_MS, this.retryMs * 2);
        return;
      }
    }
  }

  /**
   * Whether a failed write should be tried again. Besides transient errors: admission refuses a
   * sandbox whose pod the run does not name yet, and the operator writes that name just after it
   * creates the pod (or a new leader does, after a failover), so right after start that refusal is
   * a matter of moments, not a verdict.
   */
  private retryable(err: unknown): boolean {
    if (isTransient(err)) return true;
    const notYetNamed = err instanceof ApiError && err.code === 403 && err.message.includes(NOT_CURRENT_SANDBOX);
    return notYetNamed && this.clock() - this.startedAt < FENCING_GRACE_MS;
  }

  private settle(upTo: number): void {
    const done = this.waiters.filter((w) => w.version <= upTo);
    this.waiters = this.waiters.filter((w) => w.version > upTo);
    for (const w of done) w.resolve();
  }

  private rejectWaiters(err: unknown, upTo = Infinity): void {
    const failed = this.waiters.filter((w) => w.version <= upTo);
    this.waiters = this.waiters.filter((w) => w.version > upTo);
    for (const w of failed) w.reject(err);
  }

  private assertOpen(): void {
    if (this.fenceCause) throw new FencedError(this.fenceCause);
    if (this.closed) throw new Error("the sandbox is closed");
  }

  private record(role: TranscriptEntry["role"], kind: string, text: string): void {
    this.entries.push({ time: new Date(this.clock()).toISOString(), role, kind, text });
    if (this.entries.length > MAX_TRANSCRIPT) this.entries.splice(0, this.entries.length - MAX_TRANSCRIPT);
  }
}
