// Where the agent is in its work: the last committed checkpoint, which a new attempt resumes
// from, and the step in progress (the one after it). Tool calls take their idempotency keys from
// the step and their position in it, so a replay from the checkpoint meets the same keys again;
// the position starts again at 0 whenever a checkpoint moves the step.
//
// A checkpoint too large for the run's status (operator/api/limits.ts) is refused when it is
// held, before anything is written; one the API server refuses is taken back, so the step and
// the keys stay those of the checkpoint status holds.
import type { Checkpoint } from "../api/agentrun.ts";
import { checkpointRefusal, unwrapCheckpoint } from "./protocol.ts";
import type { StatusWriter } from "./status-writer.ts";

export class Checkpoints {
  private readonly writer: Pick<StatusWriter, "setCheckpoint" | "statusWith">;
  /** As written in status, with a pending approval request wrapped in (see approvals.ts). */
  private held: Checkpoint | undefined;
  private committedStep: number;
  private callIndex = 0;

  constructor(found: Checkpoint | undefined, writer: Pick<StatusWriter, "setCheckpoint" | "statusWith">) {
    this.writer = writer;
    this.held = found;
    this.committedStep = unwrapCheckpoint(found).checkpoint?.step ?? 0;
  }

  /** The step of the last committed checkpoint; 0 before the first. */
  get committed(): number {
    return this.committedStep;
  }

  /** The step in progress: the one after the last committed checkpoint. */
  get step(): number {
    return this.committedStep + 1;
  }

  /** The agent's own checkpoint (its step and data), without what the SDK wraps around it. */
  current(): Checkpoint | undefined {
    return unwrapCheckpoint(this.held).checkpoint;
  }

  /**
   * Makes `checkpoint` what the next status write carries, or throws CheckpointTooLargeError and
   * changes nothing. Returns what takes it back if that write is refused (unless a newer
   * checkpoint was held meanwhile).
   */
  hold(checkpoint: Checkpoint): () => void {
    const refusal = checkpointRefusal(this.writer.statusWith(checkpoint));
    if (refusal) throw refusal;
    const before = { held: this.held, committedStep: this.committedStep, callIndex: this.callIndex };
    this.held = checkpoint;
    this.writer.setCheckpoint(checkpoint);
    if (checkpoint.step !== this.committedStep) this.callIndex = 0;
    this.committedStep = checkpoint.step;
    return () => {
      if (this.held !== checkpoint) return;
      ({ held: this.held, committedStep: this.committedStep, callIndex: this.callIndex } = before);
    };
  }

  /** The 0-based position of the next tool call within the step in progress. */
  nextCallIndex(): number {
    return this.callIndex++;
  }
}
