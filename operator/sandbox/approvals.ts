// Asking a person and waiting for the answer (rule 11). The question is saved in the checkpoint,
// wrapped around the agent's own data, with a random key new for every question, and the sandbox
// reports AwaitingReply, which is never hung. When the operator sees the run enter AwaitingReply
// it opens a request in status.approval with a new id and the question's key; the sandbox knows
// the request by that key, holds on to its id, and takes only a decision of that id: no answer to
// another question, however close in time, is ever taken for this one's.
//
// If the operator releases the pod meanwhile, this sandbox is fenced; the next attempt, started
// when the answer comes, finds the question in the checkpoint, and the call that asks the same
// question gets the answer without asking again (or waits on, if it is still pending). A call
// that asks something else gets a new request, and the old one is dropped. A request withdrawn
// (the run left the wait without an answer) is never answered: the same question is asked anew.
import { randomBytes } from "node:crypto";
import type { AgentRunStatus, ApprovalStatus } from "../api/agentrun.ts";
import type { Json } from "./api-client.ts";
import type { Checkpoints } from "./checkpoints.ts";
import { ApprovalDeniedError } from "./errors.ts";
import type { HeartbeatLoop } from "./heartbeat.ts";
import type { SandboxLogger } from "./log.ts";
import {
  APPROVAL_KEY_BYTES,
  approvalOutcome,
  fenceReason,
  openedRequestId,
  wrapApprovalCheckpoint,
  type ApprovalOutcome,
  type ApprovalRequest,
  type RequestRef,
} from "./protocol.ts";
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

/** A request waited on: as the checkpoint carries it, and the id the operator opened it with. */
interface Asked {
  request: ApprovalRequest;
  ref: RequestRef;
}

interface Waiting {
  asked: Asked;
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
    return { question: this.resumeRequest.question, outcome: approvalOutcome(this.approval, { key: this.resumeRequest.key }) };
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
    let asked = this.takeResumed(question);
    if (asked) {
      const outcome = approvalOutcome(this.approval, asked.ref);
      if (outcome.state === "Withdrawn") {
        o.log.info({ question }, "the request an earlier attempt asked was withdrawn unanswered; asking again");
        asked = undefined;
      } else if (outcome.state !== "Pending") {
        return this.settle(asked.request, outcome);
      } else {
        // Asked again under the same key, so the operator keeps (or opens) the same request.
        o.log.info({ question }, "still awaiting the reply an earlier attempt asked for");
      }
    }
    for (;;) {
      if (!asked) {
        await this.leftPreviousWait();
        const request: ApprovalRequest = { question, askedAt: new Date(o.clock()).toISOString(), key: randomBytes(APPROVAL_KEY_BYTES).toString("hex") };
        asked = { request, ref: { key: request.key } };
      }
      const restore = this.hold(asked.request, checkpoint);
      let outcome: ApprovalOutcome;
      try {
        outcome = await this.wait(asked);
      } catch (err) {
        restore(); // the question never reached the API server, or this sandbox no longer speaks
        throw err;
      }
      if (outcome.state !== "Withdrawn") return this.settle(asked.request, outcome);
      o.log.warn({ question, request: asked.ref.id }, "the request was withdrawn before it was answered; asking again");
      asked = undefined;
    }
  }

  /**
   * The request an earlier attempt asked, if this call asks the same question. One resumed
   * request answers one call, and only its own question; one without a key (an older SDK asked
   * it) can never be told apart from another request, so it is asked again.
   */
  private takeResumed(question: string): Asked | undefined {
    const resumed = this.resumeRequest;
    this.resumeRequest = undefined;
    if (!resumed) return undefined;
    if (resumed.question !== question) {
      this.o.log.info({ asked: question, earlier: resumed.question }, "a different question than the one an earlier attempt asked: a new request");
      return undefined;
    }
    if (resumed.key === undefined) {
      this.o.log.info({ question }, "the request an earlier attempt asked has no key; asking again");
      return undefined;
    }
    return { request: resumed, ref: { key: resumed.key } };
  }

  /**
   * The operator opens a new request when it sees the run enter AwaitingReply; if it has not yet
   * seen us leave the previous wait, wait until it has, or our question would be lost.
   */
  private leftPreviousWait(): Promise<void> {
    const { o } = this;
    return o.heartbeat.waitingOn(
      this.waitForRun((run) => (run.status as AgentRunStatus | undefined)?.phase !== "AwaitingReply" || fenceReason(run.status as AgentRunStatus | undefined, o.attempt) !== undefined),
    );
  }

  /** The question (and its key) wrapped into the checkpoint the next write carries, where the operator reads it. */
  private hold(request: ApprovalRequest, checkpoint?: { step: number; data?: unknown }): () => void {
    const { o } = this;
    const current = o.checkpoints.current();
    const step = checkpoint?.step ?? current?.step ?? o.checkpoints.committed;
    const data = checkpoint ? checkpoint.data : current?.data;
    return o.checkpoints.hold(wrapApprovalCheckpoint(step, data, request));
  }

  /** Reports AwaitingReply until the request is decided; back to work at once after. */
  private async wait(asked: Asked): Promise<ApprovalOutcome> {
    const { o } = this;
    o.transcript.record("agent", "awaitingApproval", asked.request.question);
    o.log.info({ question: asked.request.question }, "awaiting approval");
    const outcome = await o.heartbeat
      .waitingOn(
        new Promise<ApprovalOutcome>((resolve, reject) => {
          this.waiting = { asked, resolve, reject };
          o.stateChanged();
          o.writer.write().catch(reject);
          this.check();
        }),
      )
      .finally(() => {
        this.waiting = undefined;
        o.stateChanged();
      });
    // Say so at once, and before the agent can ask again (see newRequest). A rejection or a
    // timeout ends the run, and with it this sandbox.
    if (outcome.state === "Approved" || outcome.state === "Withdrawn") await o.writer.write();
    return outcome;
  }

  private settle(request: ApprovalRequest, outcome: ApprovalOutcome): string {
    if (outcome.state === "Approved") {
      this.o.transcript.record("user", "approved", outcome.answer);
      this.o.log.info({ question: request.question, answer: outcome.answer }, "approved");
      return outcome.answer;
    }
    if (outcome.state === "Pending" || outcome.state === "Withdrawn") throw new Error(`approval ${outcome.state}`); // unreachable
    const err = new ApprovalDeniedError(outcome.state, outcome.state === "Rejected" ? outcome.reason : undefined);
    this.o.transcript.record("user", outcome.state === "Rejected" ? "rejected" : "approvalTimedOut", err.message);
    throw err;
  }

  private check(): void {
    const wait = this.waiting;
    if (!wait) return;
    const { ref } = wait.asked;
    // The operator opened the request for our key: from now on only a decision of its id counts.
    ref.id = openedRequestId(this.approval, ref) ?? ref.id;
    const outcome = approvalOutcome(this.approval, ref);
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
