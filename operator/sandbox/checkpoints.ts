// Where the agent is in its work: the last committed checkpoint, which a new attempt resumes
// from, and the step in progress (the one after it). Tool calls take their idempotency keys from
// the step and their position in it, so a replay from the checkpoint meets the same keys again;
// the position starts again at 0 whenever a checkpoint moves the step.
import type { Checkpoint } from "../api/agentrun.ts";
import { unwrapCheckpoint } from "./protocol.ts";
import type { StatusWriter } from "./status-writer.ts";

export class Checkpoints {
  private readonly writer: Pick<StatusWriter, "setCheckpoint">;
  /** As written in status, with a pending approval request wrapped in (see approvals.ts). */
  private held: Checkpoint | undefined;
  private committedStep: number;
  private callIndex = 0;

  constructor(found: Checkpoint | undefined, writer: Pick<StatusWriter, "setCheckpoint">) {
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

  /** Makes `checkpoint` what the next status write carries. */
  hold(checkpoint: Checkpoint): void {
    this.held = checkpoint;
    this.writer.setCheckpoint(checkpoint);
    if (checkpoint.step !== this.committedStep) this.callIndex = 0;
    this.committedStep = checkpoint.step;
  }

  /** The 0-based position of the next tool call within the step in progress. */
  nextCallIndex(): number {
    return this.callIndex++;
  }
}
