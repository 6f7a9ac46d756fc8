// The heartbeat loop. A heartbeat-only write goes out at most once per heartbeatTimeout/4, and at
// least once per 75 s while the agent makes progress (protocol.ts: heartbeatIntervalMs); anything
// that matters to the watchdog (a state change, a tool record, activity, a checkpoint)
// goes out at once through the status writer and moves the heartbeat with it. A heartbeat must
// mean "the agent is making progress", so:
//  - the loop is a timer on the agent's own event loop: if the process dies or a synchronous
//    loop blocks the event loop, no heartbeat is written;
//  - it is written only while the agent shows progress (any SDK call, a streamed chunk,
//    progress()); after progressTimeout (default: the heartbeat timeout) without any, the agent
//    is wedged, heartbeats stop, and the watchdog replaces the sandbox one timeout later. Waiting
//    on the SDK itself (for an approval or a nudge) is not being wedged;
//  - it stops when the agent's work settles (runAgent then exits) or when this sandbox is
//    fenced; the timer is deliberately kept referenced, so a pending agent can never let the
//    process drain its event loop and exit 0, which would read as "Completed";
//  - it follows the run's effective heartbeatTimeout as the operator publishes it: a new value
//    reschedules the next heartbeat from the new interval at once.
import type { SandboxLogger } from "./log.ts";
import { effectiveHeartbeatTimeoutMs, heartbeatDecision, heartbeatIntervalMs, type RunLike } from "./protocol.ts";
import type { StatusWriter } from "./status-writer.ts";
import { timerDelayMs } from "./timers.ts";

export interface HeartbeatOptions {
  writer: Pick<StatusWriter, "beat" | "lastWriteAt">;
  clock: () => number;
  log: SandboxLogger;
  /** Overrides the heartbeat timeout read from the run. */
  heartbeatTimeoutMs?: number;
  /** No progress for longer than this and heartbeats stop. Default: the heartbeat timeout. */
  progressTimeoutMs?: number;
}

export class HeartbeatLoop {
  private readonly o: HeartbeatOptions;
  private timeout = 0;
  private interval = 0;
  private timer: ReturnType<typeof setTimeout> | undefined;
  private stopped = false;
  private lastProgressAt: number;
  private wedged = false;
  /** How many calls of the agent are waiting on the SDK for input (an approval, a nudge). */
  private waitingForInput = 0;

  constructor(options: HeartbeatOptions) {
    this.o = options;
    this.lastProgressAt = options.clock();
  }

  get timeoutMs(): number {
    return this.timeout;
  }

  get intervalMs(): number {
    return this.interval;
  }

  /** Follows the timeout the watchdog applies to the run; it may change while the run lives. */
  applyTimeout(run: RunLike): void {
    const timeout = this.o.heartbeatTimeoutMs ?? effectiveHeartbeatTimeoutMs(run);
    if (timeout === this.timeout) return;
    const first = this.timeout === 0;
    this.timeout = timeout;
    this.interval = heartbeatIntervalMs(timeout);
    if (!first) {
      this.o.log.info({ heartbeatTimeoutMs: timeout, heartbeatIntervalMs: this.interval }, "heartbeat timeout changed");
      // Not after the old interval, which may be long: the next heartbeat is due by the new one.
      if (this.timer) this.schedule(this.o.writer.lastWriteAt + this.interval);
    }
  }

  start(): void {
    this.schedule(this.o.writer.lastWriteAt + this.interval);
  }

  stop(): void {
    this.stopped = true;
    if (this.timer) clearTimeout(this.timer);
    this.timer = undefined;
  }

  /** A sign of progress: keeps heartbeats going. In memory only; costs no write. */
  progress(): void {
    this.lastProgressAt = this.o.clock();
    if (this.wedged) {
      this.wedged = false;
      this.o.log.info("progress again; heartbeats resume");
    }
  }

  /** Marks the agent as waiting on the SDK for input while `p` is pending. */
  async waitingOn<T>(p: Promise<T>): Promise<T> {
    this.waitingForInput++;
    try {
      return await p;
    } finally {
      this.waitingForInput--;
      this.progress();
    }
  }

  private schedule(at: number): void {
    if (this.stopped) return;
    if (this.timer) clearTimeout(this.timer);
    this.timer = setTimeout(() => this.tick(), timerDelayMs(at - this.o.clock()));
  }

  private tick(): void {
    this.timer = undefined;
    if (this.stopped) return;
    const decision = heartbeatDecision({
      now: this.o.clock(),
      lastWriteAt: this.o.writer.lastWriteAt,
      intervalMs: this.interval,
      lastProgressAt: this.lastProgressAt,
      progressTimeoutMs: this.o.progressTimeoutMs ?? this.timeout,
      waitingForInput: this.waitingForInput > 0,
    });
    if (decision.wedged && !this.wedged) {
      this.wedged = true;
      this.o.log.warn(
        { lastProgressAt: new Date(this.lastProgressAt).toISOString() },
        "no progress for longer than the progress timeout: heartbeats stop so the watchdog can replace this sandbox",
      );
    }
    if (decision.write) this.o.writer.beat();
    this.schedule(decision.nextCheckAt);
  }
}
