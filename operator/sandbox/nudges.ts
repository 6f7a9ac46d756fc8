// Stall nudges. When the agent has said its final text and then gone quiet, the operator records
// a nudge in status.stall; the sandbox delivers it into the agent's session (listeners, the
// transcript, nextNudge()). Each nudge reaches the agent once, however often the watch shows the
// same status, and only nudges made during this attempt count: one that stood in status when the
// sandbox started was for an earlier attempt.
import type { StallStatus } from "../api/agentrun.ts";
import { FencedError } from "./errors.ts";
import type { SandboxLogger } from "./log.ts";
import { newNudge, type Nudge } from "./protocol.ts";
import type { Transcript } from "./transcript.ts";

export class Nudges {
  private readonly log: SandboxLogger;
  private readonly transcript: Transcript;
  private readonly listeners = new Set<(nudge: Nudge) => void>();
  /** The time of the last nudge handled. */
  private last: string | undefined;

  constructor(found: StallStatus | undefined, log: SandboxLogger, transcript: Transcript) {
    this.last = found?.lastNudge?.time;
    this.log = log;
    this.transcript = transcript;
  }

  on(listener: (nudge: Nudge) => void): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  observe(stall: StallStatus | undefined): void {
    const nudge = newNudge(stall, this.last);
    if (!nudge) return;
    this.last = nudge.time;
    this.transcript.record("system", "nudge", nudge.message);
    this.log.info({ nudge: nudge.count, time: nudge.time }, `nudge: ${nudge.message}`);
    for (const listener of [...this.listeners]) {
      try {
        listener(nudge);
      } catch (err) {
        this.log.error({ err: String(err) }, "nudge listener threw");
      }
    }
  }

  /** The next nudge; rejects with FencedError when `signal` aborts (`why` says what stopped it). */
  next(signal: AbortSignal, why: () => string | undefined): Promise<Nudge> {
    return new Promise<Nudge>((resolve, reject) => {
      const off = this.on((nudge) => {
        off();
        signal.removeEventListener("abort", onAbort);
        resolve(nudge);
      });
      const onAbort = () => {
        off();
        reject(new FencedError(why() ?? "sandbox closed"));
      };
      signal.addEventListener("abort", onAbort, { once: true });
    });
  }
}
