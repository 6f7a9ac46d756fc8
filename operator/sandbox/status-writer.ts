// Everything the sandbox reports is a JSON merge patch on its own run's status subresource naming
// only sandbox-owned fields (heartbeat, toolCalls, checkpoint). Writes go out one at a time, each
// carrying the newest state, so a slow write can never land after a newer one and undo it (merge
// patch replaces arrays whole: toolCalls is always the full list the sandbox holds). Every write
// carries the heartbeat with this sandbox's attempt, so every write is a sign of life and
// admission can fence stale attempts by looking at one field. The heartbeat also carries the
// attempt's usage as it stands when the write is made (usage.ts): a change of usage alone is no
// reason to write, it rides the next write; and the first writes clear what an earlier attempt
// reported (null for the fields this one does not report yet), since a merge patch would keep it.
//
// A write that fails for a reason that passes (the network, a 5xx, a 429 with its Retry-After) is
// tried again until it lands, with whatever changed meanwhile. One the server refuses for what it
// carries (422 Invalid, 400, 413, etcd's "request is too large") is never tried again: whoever
// waited on it (the call that saved a checkpoint or recorded a tool call) learns why, the refused
// content is dropped, and the heartbeats after it go out as usual.
import type { Activity, Checkpoint, SandboxState, ToolCall, Usage } from "../api/agentrun.ts";
import { NOT_CURRENT_SANDBOX, SANDBOX_FIELD_MANAGER } from "../api/annotations.ts";
import { RETRY, apiErrorCode, isNotFound, isTransient, retryAfterMs, type SandboxApi } from "./api-client.ts";
import { FencedError } from "./errors.ts";
import type { SandboxLogger } from "./log.ts";
import type { SandboxStatusPart } from "./protocol.ts";
import { timerDelayMs } from "./timers.ts";

/**
 * How long after start a refusal for not being the run's current pod is taken as "not yet": the
 * operator names the pod just after creating it, but when that write is lost a new leader names it
 * on adoption, after the Lease's duration and its own retries (a minute is not unusual under a
 * storm of conflicts). A sandbox that really was replaced learns it sooner from its watch of the
 * run, which shows the new attempt, and its writes are refused meanwhile anyway.
 */
const FENCING_GRACE_MS = 3 * 60_000;
/**
 * The longest Retry-After honoured: the writer looks again at least this often, since every
 * retry also carries the heartbeat.
 */
const MAX_RETRY_AFTER_MS = 60_000;
/** What the API server's refusal by an admission policy says, unlike RBAC's. */
const ADMISSION_REFUSAL = "ValidatingAdmissionPolicy";
const noop = () => {};
/** The usage fields an attempt may not report from its first write on. */
const CLEARED_USAGE_FIELDS = ["cost", "model"] as const;

const withoutNulls = (value: Record<string, unknown>) => Object.fromEntries(Object.entries(value).filter(([, v]) => v !== null));

export interface StatusWriterOptions {
  client: SandboxApi;
  /** The run's status subresource. */
  path: string;
  attempt: number;
  clock: () => number;
  log: SandboxLogger;
  startedAt: number;
  /** The tool records status holds at start: what the sandbox's part of status already carries. */
  toolCalls?: ToolCall[];
  /** The run is gone (a write found no object): the sandbox must stop. */
  onGone: () => void;
  /** The attempt's usage now, written with every heartbeat (status.heartbeat.usage). */
  usage?: () => Usage;
}

interface Waiter {
  version: number;
  resolve(): void;
  reject(err: unknown): void;
}

export class StatusWriter {
  /** Status writes acknowledged by the API server, and of those, the heartbeat-only ones. */
  readonly counts = { writes: 0, heartbeatWrites: 0, failedWrites: 0 };
  private readonly o: StatusWriterOptions;

  // what the next write reports, and what of it changed since the last one
  private toolCalls: ToolCall[] = [];
  private checkpoint: Checkpoint | undefined;
  private dirtyToolCalls = false;
  private dirtyCheckpoint = false;
  /** Activity to send; null (the first write) clears what an earlier attempt left behind. */
  private activity: Activity | null | undefined = null;
  private state: SandboxState = "Planning";
  private sentState: SandboxState | undefined;
  private heartbeatRequested = false;

  // the queue: a version per change, resolved once a write that includes it is acknowledged
  private version = 0;
  private waiters: Waiter[] = [];
  private inFlight = false;
  private retryTimer: ReturnType<typeof setTimeout> | undefined;
  private retryMs: number = RETRY.firstMs;
  private fencedBy: string | undefined;
  private lastAckAt = 0;
  /** The usage the last acknowledged write carried (as JSON), and whether one has landed at all. */
  private ackedUsage: string | undefined;

  constructor(options: StatusWriterOptions) {
    this.o = options;
    this.toolCalls = options.toolCalls ?? [];
  }

  /** When the last write of any kind was acknowledged: every write carries a heartbeat. */
  get lastWriteAt(): number {
    return this.lastAckAt;
  }

  /** The full list of tool records, which replaces the list in status. */
  setToolCalls(calls: ToolCall[]): void {
    this.toolCalls = calls;
    this.dirtyToolCalls = true;
  }

  setCheckpoint(checkpoint: Checkpoint): void {
    this.checkpoint = checkpoint;
    this.dirtyCheckpoint = true;
  }

  /** The sandbox's part of status as a write of everything held now, with `checkpoint`, leaves it. */
  statusWith(checkpoint: Checkpoint): SandboxStatusPart {
    const part: SandboxStatusPart = { heartbeat: this.heartbeat(this.state, this.activity), checkpoint };
    if (this.toolCalls.length) part.toolCalls = this.toolCalls;
    return part;
  }

  setActivity(activity: Activity): void {
    this.activity = activity;
  }

  /** A new state goes out with the next write; it is not a reason to write on its own. */
  setState(state: SandboxState): void {
    this.state = state;
  }

  /** Resolves once everything changed so far is acknowledged by the API server. */
  write(): Promise<void> {
    if (this.fencedBy) return Promise.reject(new FencedError(this.fencedBy));
    const version = ++this.version;
    const promise = new Promise<void>((resolve, reject) => this.waiters.push({ version, resolve, reject }));
    if (!this.inFlight && !this.retryTimer) void this.flush();
    return promise;
  }

  /**
   * A write now, even when nothing but the usage changed (a report that reaches a limit of the
   * run's budget); when a write is under way, the one after it.
   */
  writeNow(): Promise<void> {
    this.heartbeatRequested = true;
    return this.write();
  }

  /** A heartbeat-only write, unless a write is under way: that one carries the heartbeat. */
  beat(): void {
    if (this.inFlight || this.hasPending()) return;
    this.heartbeatRequested = true;
    this.write().catch(noop); // a failed heartbeat is retried; the next beat tries again anyway
  }

  /** Whether the attempt's usage has changed since the last acknowledged write. */
  get usageUnsent(): boolean {
    return this.o.usage !== undefined && JSON.stringify(this.o.usage()) !== this.ackedUsage;
  }

  /**
   * Sends what is pending at once (no retry backoff) and waits for it, at most `deadlineMs`.
   * Usage that changed since the last write goes out too: the last report of an attempt is what
   * the operator adds into status.spent.
   */
  async drain(deadlineMs: number): Promise<void> {
    this.cancelRetry();
    if (this.usageUnsent && !this.fencedBy) this.heartbeatRequested = true;
    if (!this.hasPending() && !this.inFlight) return;
    const pending = this.write().catch(noop);
    let timer: ReturnType<typeof setTimeout> | undefined;
    const deadline = new Promise<void>((resolve) => (timer = setTimeout(resolve, timerDelayMs(deadlineMs))));
    await Promise.race([pending, deadline]);
    if (timer) clearTimeout(timer);
  }

  /** Nothing more is written: this sandbox no longer speaks for the run. Whoever waits learns why. */
  fence(reason: string, err: unknown): void {
    this.fencedBy = reason;
    this.cancelRetry();
    this.rejectWaiters(err);
  }

  /** Drops the retry and fails whoever waits, as a crash would. */
  abandon(err: unknown): void {
    this.cancelRetry();
    this.rejectWaiters(err);
  }

  private cancelRetry(): void {
    if (this.retryTimer) clearTimeout(this.retryTimer);
    this.retryTimer = undefined;
  }

  private hasPending(): boolean {
    return this.dirtyToolCalls || this.dirtyCheckpoint || this.activity !== undefined || this.state !== this.sentState || this.heartbeatRequested;
  }

  private async flush(): Promise<void> {
    while (!this.fencedBy && !this.inFlight && (this.hasPending() || this.waiters.length > 0)) {
      const upTo = this.version;
      if (!this.hasPending()) {
        this.settle(upTo); // everything asked for went out with an earlier write
        continue;
      }
      const sent = { toolCalls: this.dirtyToolCalls, checkpoint: this.dirtyCheckpoint, activity: this.activity, state: this.state };
      const heartbeatOnly = !sent.toolCalls && !sent.checkpoint && sent.activity === undefined && sent.state === this.sentState;
      const heartbeat = this.heartbeat(sent.state, sent.activity);
      const status: Record<string, unknown> = { heartbeat };
      if (sent.toolCalls) status.toolCalls = this.toolCalls;
      if (sent.checkpoint) status.checkpoint = this.checkpoint ?? null;
      this.dirtyToolCalls = false;
      this.dirtyCheckpoint = false;
      this.activity = undefined;
      this.heartbeatRequested = false;
      this.inFlight = true;
      try {
        // Under its own field manager: the API server's record of this write (managedFields) is
        // the heartbeat's time on the server's clock, which is what the watchdog measures by.
        await this.o.client.mergePatch(this.o.path, { status }, { fieldManager: SANDBOX_FIELD_MANAGER });
        this.inFlight = false;
        this.counts.writes++;
        if (heartbeatOnly) this.counts.heartbeatWrites++;
        this.lastAckAt = this.o.clock();
        if (heartbeat.usage) this.ackedUsage = JSON.stringify(withoutNulls(heartbeat.usage as Record<string, unknown>));
        this.sentState = sent.state;
        this.retryMs = RETRY.firstMs;
        this.settle(upTo);
      } catch (err) {
        this.inFlight = false;
        this.counts.failedWrites++;
        if (isNotFound(err)) {
          this.o.onGone();
          return;
        }
        if (!this.retryable(err)) {
          // The server refused this content; sending it again would fail the same way. Whoever
          // waited for it learns why; what it carried is dropped (it was taken out above), and
          // changes made since go out with the next write, as do the heartbeats.
          this.o.log.error({ err: String(err), carried: { toolCalls: sent.toolCalls, checkpoint: sent.checkpoint } }, "status write refused; not retried");
          this.sentState = sent.state;
          this.rejectWaiters(err, upTo);
          continue;
        }
        // Put back what did not go out, unless something newer replaced it meanwhile.
        this.dirtyToolCalls ||= sent.toolCalls;
        this.dirtyCheckpoint ||= sent.checkpoint;
        if (this.activity === undefined) this.activity = sent.activity;
        // A server that says when to come back is not asked sooner.
        const delay = Math.max(this.retryMs, Math.min(MAX_RETRY_AFTER_MS, retryAfterMs(err) ?? 0));
        this.o.log.warn({ err: String(err), retryInMs: delay }, "status write failed; retrying");
        this.retryTimer = setTimeout(() => {
          this.retryTimer = undefined;
          void this.flush();
        }, timerDelayMs(delay));
        this.retryMs = Math.min(RETRY.maxMs, this.retryMs * 2);
        return;
      }
    }
  }

  private heartbeat(state: SandboxState, activity: Activity | null | undefined): Record<string, unknown> {
    const heartbeat: Record<string, unknown> = { time: new Date(this.o.clock()).toISOString(), attempt: this.o.attempt, state };
    if (activity !== undefined) heartbeat.activity = activity;
    if (this.o.usage) {
      const usage: Record<string, unknown> = { ...this.o.usage() };
      // Until a write has landed, what this attempt does not report is cleared: an earlier
      // attempt's cost or model would otherwise stay in place and be counted as this one's.
      if (this.ackedUsage === undefined) for (const field of CLEARED_USAGE_FIELDS) usage[field] ??= null;
      heartbeat.usage = usage;
    }
    return heartbeat;
  }

  /**
   * Whether a failed write should be tried again. Besides transient errors: admission refuses a
   * sandbox whose pod the run does not name yet, and the operator writes that name just after it
   * creates the pod (or a new leader does, after a failover), so right after start that refusal is
   * a matter of moments, not a verdict.
   */
  private retryable(err: unknown): boolean {
    if (isTransient(err)) return true;
    if (apiErrorCode(err) !== 403 || !(err instanceof Error)) return false;
    // RBAC's refusal is not about what the write carries: an API server that has just restarted
    // refuses everyone until its authorizer has loaded the roles, and a RoleBinding made a moment
    // ago may not be seen yet. Tried again with backoff; were it for good, the heartbeats that
    // never land get the sandbox replaced, and its run stopped for a person, by the watchdog.
    if (!err.message.includes(ADMISSION_REFUSAL)) return true;
    const notYetNamed = err.message.includes(NOT_CURRENT_SANDBOX);
    return notYetNamed && this.o.clock() - this.o.startedAt < FENCING_GRACE_MS;
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
}
