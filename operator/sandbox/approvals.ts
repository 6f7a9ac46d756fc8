// Asking a person and waiting for the answer (rule 11). The question is saved in the checkpoint,
// wrapped around the agent's own data, and the sandbox reports AwaitingReply, which is never hung.
// The answer arrives in status.approval through the watch. If the operator releases the pod
// meanwhile, this sandbox is fenced; the next attempt, started when the answer comes, finds the
// question in the checkpoint and gets the answer from the same awaitApproval() call without asking
// again. An approval in status counts only if it was decided after the question was asked: the
// answer to an earlier question is told apart by its fingerprint.
import type { AgentRunStatus, ApprovalStatus } from "../api/agentrun.ts";
import type { Json } from "./api-client.ts";
import type { Checkpoints } from "./checkpoints.ts";
import { ApprovalDeniedError } from "./errors.ts";
import type { HeartbeatLoop } from "./heartbeat.ts";
import type { SandboxLogger } from "./log.ts";
import { approvalFingerprint, approvalOutcome, fenceReason, wrapApprovalCheckpoint, type ApprovalOutcome, type ApprovalRequest } from "./protocol.ts";
import type { StatusWriter } from "./status-writer.ts";
import type { Transcript } from "./transcript.ts";

export interface ApprovalsOptions {
  attempt: number;
  clock: () => number;
  log: SandboxLogger;
  writer: Pick<StatusWriter, "write">;
  heartbeat: Pick<HeartbeatLoop, "progress" | "waitingOn">;
  checkpoints: Pick<Checkpoints, "committed" | "current" | "hold">;
  transcript: Transcript;
  /** Waiting for an answer started or ended, and with it the state the sandbox reports. */
  stateChanged(): void;
}

interface Waiting {
  request: ApprovalRequest;
  resolve(outcome: ApprovalOutcome): void;
  reject(err: unknown): void;
}

interface RunWait {
  test(run: Json): boolean;
  resolve(): void;
  reject(err: unknown): void;
}

export class Approvals {
  private readonly o: ApprovalsOptions;
  private run: Json;
  private approval: ApprovalStatus | undefined;
  /** The request an earlier attempt was waiting on when it ended, until one call takes it up. */
  private resumeRequest: ApprovalRequest | undefined;
  private waiting: Waiting | undefined;
  private readonly runWaits = new Set<RunWait>();

  constructor(options: ApprovalsOptions, found: { run: Json; approval: ApprovalStatus | undefined; request: ApprovalRequest | undefined }) {
    this.o = options;
    this.run = found.run;
    this.approval = found.approval;
    this.resumeRequest = found.request;
  }

  /** Whether the agent is waiting for an answer now: the sandbox reports AwaitingReply. */
  get awaiting(): boolean {
    return this.waiting !== undefined;
  }

  /** The request an earlier attempt asked, and where it stands, or undefined. */
  get pending(): { question: string; outcome: ApprovalOutcome } | undefined {
    if (!this.resumeRequest) return undefined;
    return { question: this.resumeRequest.question, outcome: approvalOutcome(this.approval, this.resumeRequest) };
  }

  /** Each event of the watch: status.approval is operator-owned, read as it comes. */
  observe(run: Json, status: AgentRunStatus): void {
    this.run = run;
    this.approval = status.approval;
    for (const wait of [...this.runWaits]) if (wait.test(run)) wait.resolve();
    this.check();
  }

  fence(err: unknown): void {
    this.waiting?.reject(err);
    for (const wait of [...this.runWaits]) wait.reject(err);
  }

  async ask(question: string, checkpoint?: { step: number; data?: unknown }): Promise<string> {
    const { o } = this;
    o.heartbeat.progress();
    let request = this.resumeRequest;
    this.resumeRequest = undefined; // one resumed request answers one call
    if (request) {
      const outcome = approvalOutcome(this.approval, request);
      if (outcome.state !== "Pending") return this.settle(request, outcome);
      o.log.info({ question: request.question }, "still awaiting the reply an earlier attempt asked for");
    } else {
      // The operator opens a new request when it sees the run enter AwaitingReply; if it has not
      // yet seen us leave the previous one, wait until it has, or our question would be lost.
      await o.heartbeat.waitingOn(
        this.waitForRun((run) => (run.status as AgentRunStatus | undefined)?.phase !== "AwaitingReply" || fenceReason(run.status as AgentRunStatus | undefined, o.attempt) !== undefined),
      );
      const current = o.checkpoints.current();
      const step = checkpoint?.step ?? current?.step ?? o.checkpoints.committed;
      const data = checkpoint ? checkpoint.data : current?.data;
      request = { question, askedAt: new Date(o.clock()).toISOString() };
      const supersedes = approvalFingerprint(this.approval);
      if (supersedes) request.supersedes = supersedes;
      o.checkpoints.hold(wrapApprovalCheckpoint(step, data, request));
    }
    o.transcript.record("agent", "awaitingApproval", request.question);
    o.log.info({ question: request.question }, "awaiting approval");
    const asked = request;
    const outcome = await o.heartbeat
      .waitingOn(
        new Promise<ApprovalOutcome>((resolve, reject) => {
          this.waiting = { request: asked, resolve, reject };
          o.stateChanged();
          o.writer.write().catch(reject);
          this.check();
        }),
      )
      .finally(() => {
        this.waiting = undefined;
        o.stateChanged();
      });
    // Back to work: say so at once, and before the agent can ask again (see above).
    if (outcome.state === "Approved") await o.writer.write();
    return this.settle(asked, outcome);
  }

  private settle(request: ApprovalRequest, outcome: ApprovalOutcome): string {
    if (outcome.state === "Approved") {
      this.o.transcript.record("user", "approved", outcome.answer);
      this.o.log.info({ question: request.question, answer: outcome.answer }, "approved");
      return outcome.answer;
    }
    if (outcome.state === "Pending") throw new Error("approval still pending"); // unreachable
    const err = new ApprovalDeniedError(outcome.state, outcome.state === "Rejected" ? outcome.reason : undefined);
    this.o.transcript.record("user", outcome.state === "Rejected" ? "rejected" : "approvalTimedOut", err.message);
    throw err;
  }

  private check(): void {
    const wait = this.waiting;
    if (!wait) return;
    const outcome = approvalOutcome(this.approval, wait.request);
    if (outcome.state !== "Pending") wait.resolve(outcome);
  }

  private waitForRun(test: (run: Json) => boolean): Promise<void> {
    if (test(this.run)) return Promise.resolve();
    return new Promise<void>((resolve, reject) => {
      const wait: RunWait = {
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
}
