// The sandbox SDK: what agent code running in a sandbox pod uses to speak the AgentRun protocol.
// The Sandbox is the agent's handle on its run; each part of the protocol lives in its own module:
//
//   status-writer.ts  one merge-patch write at a time, always the newest state and the heartbeat
//   heartbeat.ts      when a heartbeat is due, and when the agent counts as wedged
//   tool-runner.ts    tool calls: Started before they run, idempotency keys, replays
//   checkpoints.ts    the committed checkpoint and the step in progress
//   approvals.ts      asking a person and waiting for the answer, across attempts
//   nudges.ts         stall nudges from the operator, each delivered once
//   run-watch.ts      the watch of the run that brings answers, nudges and fencing
//   usage.ts          the attempt's usage in every heartbeat, and the run's budget as the SDK sees it
//   timers.ts         delays Node's timers can hold, whatever a run or a server asks for
//
// Fencing. The SDK watches its own run. When status.attempt moves past this sandbox's attempt
// (the watchdog has replaced it) or the operator stops the run, the SDK aborts the agent (signal
// and callbacks) and writes nothing more.
import { open as openFile, type FileHandle } from "node:fs/promises";
import type { ActivityKind, AgentRun, AgentRunStatus, Checkpoint, FailureRecord, SandboxState, ToolCall, Usage } from "../api/agentrun.ts";
import { ApiClient, runPaths, type Json, type SandboxApi } from "./api-client.ts";
import { Approvals } from "./approvals.ts";
import { Checkpoints } from "./checkpoints.ts";
import { BudgetExhaustedError, EXIT_CODES, FencedError, type BudgetBreach } from "./errors.ts";
import { HeartbeatLoop } from "./heartbeat.ts";
import { defaultLogger, type SandboxLogger } from "./log.ts";
import { Nudges } from "./nudges.ts";
import { DEFAULT_MAX_TOOL_CALLS, fenceReason, identityFromEnv, unwrapCheckpoint, type ApprovalOutcome, type Nudge, type RunLike, type SandboxIdentity } from "./protocol.ts";
import { readOwnRun, readRun } from "./read-run.ts";
import { RunWatch } from "./run-watch.ts";
import { StatusWriter } from "./status-writer.ts";
import { timerDelayMs } from "./timers.ts";
import { ToolRunner, type ToolContext, type ToolOptions, type ToolOutcome } from "./tool-runner.ts";
import { flushTraces } from "./tracing.ts";
import { Transcript, type TranscriptEntry } from "./transcript.ts";
import { BudgetView, UsageMeter, spendingOf, type Spending, type UsageReport } from "./usage.ts";

export interface SandboxOptions {
  /** API client; by default from $KUBECONFIG, ~/.kube/config or the pod's service account. */
  client?: SandboxApi;
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
  /** A pino logger, or anything with its methods; default pino JSON on stdout (WATCHDOG_LOG_LEVEL). */
  logger?: SandboxLogger;
  clock?: () => number;
  /** How complete() and fail() end the process. Default process.exit. */
  exit?: (code: number) => void;
  /** Where fail() leaves its message for the kubelet (the pod's terminationMessagePath), if it exists. */
  terminationLogPath?: string;
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

const FLUSH_DEADLINE_MS = 10_000;
/** How long the first read of the run is retried while the API server cannot be reached. */
const START_DEADLINE_MS = 60_000;
const noop = () => {};

/** A promise that may be left unawaited without an unhandled rejection taking the process down. */
function handled<T>(p: Promise<T>): Promise<T> {
  p.catch(noop);
  return p;
}

/**
 * Leaves the message where the kubelet reads it into the pod's status, so the watchdog's
 * lastFailure says why. Only into a file that exists: the kubelet provides it in a pod, and
 * outside one nothing should be created.
 */
async function writeTerminationMessage(path: string, message: string): Promise<void> {
  let file: FileHandle | undefined;
  try {
    file = await openFile(path, "r+");
    await file.truncate(0);
    await file.writeFile(message.slice(0, 4096));
  } catch {
    // not in a pod, or not writable: the log line carries the message
  } finally {
    await file?.close().catch(noop);
  }
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

  private readonly client: SandboxApi;
  private readonly log: SandboxLogger;
  private readonly clock: () => number;
  private readonly options: SandboxOptions;
  private readonly startedAt: number;
  private readonly abort = new AbortController();
  private readonly writer: StatusWriter;
  private readonly heartbeat: HeartbeatLoop;
  private readonly checkpoints: Checkpoints;
  private readonly tools: ToolRunner;
  private readonly approvals: Approvals;
  private readonly nudges: Nudges;
  private readonly history: Transcript;
  private readonly meter = new UsageMeter();
  private readonly budget: BudgetView;
  private refusedForBudget = false;
  private readonly fenceListeners = new Set<(reason: string) => void>();
  private watch: RunWatch | undefined;
  private fenceCause: string | undefined;
  private closed = false;

  /** Connects to the run, reads what earlier attempts left, reports in and starts heartbeating. */
  static async start(options: SandboxOptions = {}): Promise<Sandbox> {
    const identity = options.identity ?? identityFromEnv(options.env ?? process.env);
    const client = options.client ?? new ApiClient();
    const log = (options.logger ?? defaultLogger()).child({ namespace: identity.namespace, run: identity.runName, attempt: identity.attempt });
    const raw = await readOwnRun(client, identity, options.clock ?? Date.now, options.startDeadlineMs ?? START_DEADLINE_MS, log);
    const read = readRun(raw);
    if (!read.ok) throw new Error(`cannot read run ${identity.namespace}/${identity.runName}: ${read.error}`);
    const sandbox = new Sandbox(options, identity, client, read.run, raw, log);
    for (const problem of read.problems) sandbox.log.warn({ problem }, "ignoring an unreadable sandbox field left in status");
    await sandbox.open(raw);
    return sandbox;
  }

  private constructor(options: SandboxOptions, identity: SandboxIdentity, client: SandboxApi, run: AgentRun, raw: Json, logger: SandboxLogger) {
    this.runName = identity.runName;
    this.namespace = identity.namespace;
    this.attempt = identity.attempt;
    this.options = options;
    this.client = client;
    this.clock = options.clock ?? Date.now;
    this.log = logger;
    this.startedAt = this.clock();

    const status = run.status ?? {};
    this.uid = run.metadata.uid ?? "";
    this.goal = run.spec.goal;
    this.lastFailure = status.lastFailure;

    const { clock, log, attempt } = this;
    const stateChanged = () => this.stateChanged();
    this.history = new Transcript(clock);
    this.budget = new BudgetView(attempt);
    this.budget.observe(raw);
    // This attempt reported before (the same attempt's process started again): its figures stand,
    // and a report below them would be refused.
    const earlier = (raw.status as { heartbeat?: { attempt?: unknown; usage?: unknown } } | undefined)?.heartbeat;
    if (earlier?.attempt === attempt) this.meter.resume(earlier.usage);
    this.writer = new StatusWriter({
      client,
      path: runPaths.status(this.namespace, this.runName),
      attempt,
      clock,
      log,
      startedAt: this.startedAt,
      toolCalls: status.toolCalls ?? [],
      onGone: () => this.fence("the run was deleted"),
      usage: () => this.meter.report(),
    });
    const { heartbeatTimeoutMs, progressTimeoutMs } = options;
    this.heartbeat = new HeartbeatLoop({ writer: this.writer, clock, log, heartbeatTimeoutMs, progressTimeoutMs });
    this.heartbeat.applyTimeout(raw as RunLike);
    this.checkpoints = new Checkpoints(status.checkpoint, this.writer);
    const shared = { attempt, clock, log, writer: this.writer, heartbeat: this.heartbeat, checkpoints: this.checkpoints, transcript: this.history, stateChanged };
    this.tools = new ToolRunner(
      {
        ...shared,
        uid: this.uid,
        maxToolCalls: options.maxToolCalls ?? DEFAULT_MAX_TOOL_CALLS,
        signal: this.abort.signal,
        assertOpen: () => this.assertOpen(),
        assertWithinBudget: () => this.assertWithinBudget(),
        countToolCall: () => this.meter.toolCall(),
      },
      { calls: status.toolCalls ?? [], resetAfter: status.toolCallsResetAfter },
    );
    this.approvals = new Approvals(shared, { run: raw, approval: status.approval, request: unwrapCheckpoint(status.checkpoint).request });
    // Only nudges made during this attempt are for this agent.
    this.nudges = new Nudges(status.stall, log, this.history);
    if (options.onNudge) this.nudges.on(options.onNudge);
    if (options.onFenced) this.fenceListeners.add(options.onFenced);
  }

  private async open(raw: Json): Promise<void> {
    const fence = fenceReason(raw.status as AgentRunStatus | undefined, this.attempt);
    if (fence) throw new FencedError(fence);
    this.tools.trim();
    this.log.info(
      {
        checkpointStep: this.loadCheckpoint()?.step,
        lastFailure: this.lastFailure?.reason,
        awaitingApproval: this.approvals.pending !== undefined,
        heartbeatTimeoutMs: this.heartbeat.timeoutMs,
        // The first heartbeat is due a heartbeatTimeout after the container started: a start this
        // slow (a node starting many sandboxes at once) is what a kill as hung at start comes from.
        processUptimeMs: Math.round(process.uptime() * 1000),
      },
      "sandbox started",
    );
    // The first write says "alive, planning" and clears the activity an earlier attempt left, so
    // the stall watchdog does not judge this attempt by the last one's words.
    await this.writer.write();
    this.watch = new RunWatch(this.client, this.namespace, this.runName, { onRun: (r) => this.observe(r), onDeleted: () => this.fence("the run was deleted") }, this.log);
    this.watch.start();
    this.heartbeat.start();
  }

  // -------------------------------------------------------------------------------------------
  // what the agent reads

  /** Step in progress: the one after the last committed checkpoint. Tool keys derive from it. */
  get step(): number {
    return this.checkpoints.step;
  }

  /** The last committed checkpoint (the agent's own step and data), or undefined. */
  loadCheckpoint(): Checkpoint | undefined {
    return this.checkpoints.current();
  }

  /**
   * The approval request an earlier attempt was waiting on when it ended, and where it stands,
   * or undefined. awaitApproval() returns its answer without asking again.
   */
  get pendingApproval(): { question: string; outcome: ApprovalOutcome } | undefined {
    return this.approvals.pending;
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
    return this.history.entries;
  }

  /** The tool records this sandbox holds (and writes), newest last. */
  get calls(): readonly ToolCall[] {
    return this.tools.records;
  }

  stats(): SandboxStats {
    return {
      ...this.writer.counts,
      watchRestarts: this.watch?.restarts ?? 0,
      heartbeatTimeoutMs: this.heartbeat.timeoutMs,
      heartbeatIntervalMs: this.heartbeat.intervalMs,
      startedAt: this.startedAt,
    };
  }

  onNudge(listener: (nudge: Nudge) => void): () => void {
    return this.nudges.on(listener);
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
    return this.heartbeat.waitingOn(this.nudges.next(this.signal, () => this.fenceCause));
  }

  // -------------------------------------------------------------------------------------------
  // progress and activity

  /** A sign of progress: keeps heartbeats going. In memory only; costs no write. */
  progress(): void {
    this.heartbeat.progress();
  }

  /**
   * Final agent text. Non-empty text arms the stall watchdog; empty text reports emptyText,
   * which disarms it. Written at once.
   */
  say(text: string): Promise<void> {
    const kind: ActivityKind = text.trim() === "" ? "emptyText" : "text";
    this.history.record("agent", kind, text);
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
    this.history.record("user", "userMessage", text);
    return this.report("userMessage");
  }

  /** The agent chose not to reply, e.g. answered a nudge with NO_REPLY (disarms). */
  noReply(): Promise<void> {
    this.history.record("agent", "noReply", "");
    return this.report("noReply");
  }

  /** Reports any activity kind; the helpers above are the usual way. */
  report(kind: ActivityKind): Promise<void> {
    this.assertOpen();
    this.progress();
    this.writer.setActivity({ kind, time: new Date(this.clock()).toISOString() });
    return handled(this.writer.write());
  }

  // -------------------------------------------------------------------------------------------
  // checkpoints, tools, approvals

  /**
   * Commits a checkpoint; resolves once the API server has it. Later tool calls key on step+1.
   * A checkpoint too large for the run's status (256 KiB as JSON, or 512 KiB for the sandbox's
   * whole part of status with the tool records) throws CheckpointTooLargeError here, at the
   * call, and nothing is written. One the API server refuses rejects with its ApiError; either
   * way the last committed checkpoint, and its step, stand.
   */
  saveCheckpoint(step: number, data?: unknown): Promise<void> {
    this.assertOpen();
    const checkpoint: Checkpoint = { step };
    if (data !== undefined) checkpoint.data = data;
    this.progress();
    const restore = this.checkpoints.hold(checkpoint);
    return this.writer.write().catch((err: unknown) => {
      restore();
      throw err;
    });
  }

  /**
   * Runs a tool under the protocol (see tool-runner.ts): Started is committed before `fn` runs,
   * then Succeeded with a small result or Failed with the error. A call an earlier attempt
   * already made is not repeated blindly: a saved result is returned, an unfinished idempotent
   * call runs again with the same key, an unfinished non-idempotent call is refused with
   * UnconfirmedSideEffectError. Tool failures, including invalid arguments, come back as
   * `{ ok: false, error }` for the agent to read and act on.
   */
  tool<A, R>(name: string, args: A, fn: (args: A, ctx: ToolContext) => R | Promise<R>, options: ToolOptions<A> = {}): Promise<ToolOutcome<R>> {
    return this.tools.run(name, args, fn, options);
  }

  /**
   * Asks a person and waits for the answer (see approvals.ts): saves a checkpoint with the
   * question, reports AwaitingReply, and resolves with the answer once status.approval is
   * Approved. If the operator releases this pod meanwhile, this sandbox is fenced (FencedError)
   * and the next attempt gets the answer from this same call, asking the same question, without
   * asking again. Rejected or timed out: ApprovalDeniedError (the operator fails the run).
   */
  async awaitApproval(question: string, checkpoint?: { step: number; data?: unknown }): Promise<string> {
    this.assertOpen();
    return this.approvals.ask(question, checkpoint);
  }

  // -------------------------------------------------------------------------------------------
  // usage and the run's budget

  /**
   * Adds one model call's usage to this attempt's running totals, which every heartbeat reports
   * (status.heartbeat.usage); the framework adapters call it for you. Counts are non-negative
   * integers; `cost` is what the call cost in the budget's currency, a decimal string ("0.0123")
   * or a number taken as the decimal it prints as, added exactly (never as a float); without it
   * the operator prices the tokens by `model` from spec.budget.prices. Tool calls are counted by
   * the SDK itself. A change rides the next heartbeat, except one that brings the run to a limit
   * of its budget: that is written at once. Throws RangeError or TypeError for a malformed report
   * (nothing is added).
   */
  recordUsage(report: UsageReport): void {
    const within = this.checkBudget().length === 0;
    for (const model of this.meter.record(report, this.budget.modelPrices)) {
      this.log.warn({ model }, "usage without a cost for a model spec.budget.prices does not price: its tokens add nothing to the cost this attempt reports");
    }
    this.progress();
    if (within && !this.closed && this.checkBudget().length > 0) this.writer.writeNow().catch(noop);
  }

  /** This attempt's usage so far, as the heartbeat reports it (status.heartbeat.usage). */
  get usage(): Usage {
    return this.meter.report();
  }

  /**
   * The run's spending as the SDK sees it: what ended attempts spent (status.spent, written by
   * the operator) plus this attempt's usage, with tokens reported without a cost priced by
   * spec.budget.prices.
   */
  spending(): Spending {
    return spendingOf(this.currentSpending());
  }

  /**
   * The limits of the run's budget its spending has reached, empty while it is within budget.
   * The limits are the effective ones the operator publishes (status.budget), else spec.budget;
   * the wall clock is left to the operator, which measures it on the API server's clock.
   */
  checkBudget(): BudgetBreach[] {
    return this.budget.breaches(this.currentSpending());
  }

  /**
   * Throws BudgetExhaustedError when the run's spending has reached a limit of its budget: call it
   * before work that spends (a model call). The adapters call it before every model call, and
   * tool() before every call it would run. The operator stops such a run for a person
   * (BudgetExhausted) whether or not the agent asks.
   */
  assertWithinBudget(): void {
    const breaches = this.checkBudget();
    if (breaches.length === 0) return;
    const err = new BudgetExhaustedError(breaches);
    if (!this.refusedForBudget) {
      this.refusedForBudget = true;
      this.log.warn({ spending: this.spending(), breaches }, "the run's budget is exhausted: no more work is started");
    }
    throw err;
  }

  /**
   * Flushes what is pending, then waits (heartbeating) until the operator stops this attempt,
   * that is, this sandbox is fenced, at most `timeoutMs`. Resolves with whether it was. runAgent
   * uses it when the agent stopped on its budget, so that the run ends as the operator's
   * BudgetExhausted rather than as a crash.
   */
  async waitForStop(timeoutMs: number): Promise<boolean> {
    if (this.fenceCause) return true;
    if (this.closed) return false;
    await this.writer.drain(FLUSH_DEADLINE_MS);
    let timer: ReturnType<typeof setTimeout> | undefined;
    let off = noop as () => unknown;
    const stopped = new Promise<boolean>((resolve) => {
      off = this.onFenced(() => resolve(true));
      timer = setTimeout(() => resolve(false), timerDelayMs(timeoutMs));
    });
    try {
      return this.fenceCause ? true : await this.heartbeat.waitingOn(stopped);
    } finally {
      clearTimeout(timer);
      off();
    }
  }

  private currentSpending() {
    return this.budget.spending(this.meter.figures(this.budget.modelPrices));
  }

  // -------------------------------------------------------------------------------------------
  // shutting down

  /** Stops heartbeats and the watch and flushes what is pending. Does not exit. */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    this.heartbeat.stop();
    await this.writer.drain(FLUSH_DEADLINE_MS);
    await flushTraces(FLUSH_DEADLINE_MS);
    this.watch?.stop();
    if (!this.abort.signal.aborted) this.abort.abort(new Error("sandbox closed"));
  }

  /** The agent's work is done: flush and exit 0. The pod's exit 0 completes the run. */
  async complete(): Promise<void> {
    if (this.fenceCause) {
      // A fenced sandbox no longer speaks for the run, not even to say it is done.
      this.log.warn({ reason: this.fenceCause }, "complete() after being fenced; exiting as fenced");
      await this.close();
      this.exit(EXIT_CODES.fenced);
      return;
    }
    this.log.info({ stats: this.stats() }, "agent completed");
    await this.close();
    this.exit(EXIT_CODES.completed);
  }

  /** The agent failed: flush, leave the message for the kubelet, exit non-zero. */
  async fail(reason: unknown, code = 1): Promise<void> {
    const message = reason instanceof Error ? `${reason.name}: ${reason.message}` : String(reason);
    this.log.error({ stats: this.stats(), code }, `agent failed: ${message}`);
    await writeTerminationMessage(this.options.terminationLogPath ?? "/dev/termination-log", message);
    await this.close();
    this.exit(code === 0 ? 1 : code);
  }

  /** Stops at once without flushing anything, as a crash would. For tests and emergencies. */
  abandon(): void {
    this.closed = true;
    this.heartbeat.stop();
    this.watch?.stop();
    this.writer.abandon(new FencedError("sandbox abandoned"));
    if (!this.abort.signal.aborted) this.abort.abort(new Error("sandbox abandoned"));
  }

  private exit(code: number): void {
    (this.options.exit ?? ((c: number) => process.exit(c)))(code);
  }

  // -------------------------------------------------------------------------------------------
  // the watch

  private observe(run: Json): void {
    if (this.fenceCause) return;
    // Only operator-owned fields are read here, on every event (each of our own writes is one).
    const status = (run.status ?? {}) as AgentRunStatus;
    this.heartbeat.applyTimeout(run as RunLike);
    this.budget.observe(run);
    this.tools.observe(status.toolCallsResetAfter);
    // The answer first: a rejection also fails the run, and the agent should learn why.
    this.approvals.observe(run, status);
    this.nudges.observe(status.stall);
    const fence = fenceReason(status, this.attempt);
    if (fence) this.fence(fence);
  }

  private fence(reason: string): void {
    if (this.fenceCause) return;
    this.fenceCause = reason;
    this.log.warn({ reason }, "fenced: this sandbox stops and writes nothing more");
    this.closed = true;
    this.heartbeat.stop();
    this.watch?.stop();
    const err = new FencedError(reason);
    this.writer.fence(reason, err);
    this.approvals.fence(err);
    this.abort.abort(err);
    for (const listener of [...this.fenceListeners]) {
      try {
        listener(reason);
      } catch (e) {
        this.log.error({ err: String(e) }, "fence listener threw");
      }
    }
  }

  private stateChanged(): void {
    const state: SandboxState = this.approvals.awaiting ? "AwaitingReply" : this.tools.running > 0 ? "ExecutingTool" : "Planning";
    this.writer.setState(state);
  }

  private assertOpen(): void {
    if (this.fenceCause) throw new FencedError(this.fenceCause);
    if (this.closed) throw new Error("the sandbox is closed");
  }
}
