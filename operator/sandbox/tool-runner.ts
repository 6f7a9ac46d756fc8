// Tool calls under the protocol (rule 10). The intent is committed before anything can happen: a
// call is recorded Started, and the API server has acknowledged the record, before the tool runs;
// then Succeeded with a small result, or Failed with the error the watchdog reads (message, HTTP
// status, Retry-After). A crash in between leaves a Started record that the watchdog and the next
// attempt act on.
//
// A call an earlier attempt already made (same run, step, position, name and arguments, hence the
// same idempotency key) is not repeated blindly: a saved result is returned without running the
// tool, an unfinished idempotent call runs again with the same key, and an unfinished
// non-idempotent call, whose effect may or may not have happened, is refused with
// UnconfirmedSideEffectError so that a person can look.
//
// Each call recorded in this attempt counts once towards its usage (status.heartbeat.usage
// toolCalls), from when its record is acknowledged; a saved result returned instead counts
// nothing. A call that would run is refused with BudgetExhaustedError, before anything is
// recorded, once the run's spending has reached a limit of its budget.
import type { ToolCall } from "../api/agentrun.ts";
import type { Checkpoints } from "./checkpoints.ts";
import { UnconfirmedSideEffectError, describeFailure, isValidationError, validationFailure, type ToolFailure } from "./errors.ts";
import type { HeartbeatLoop } from "./heartbeat.ts";
import { argsHash, idempotencyKey } from "./keys.ts";
import type { SandboxLogger } from "./log.ts";
import { decodeResult, encodeResult, replayDecision, upsertCall } from "./protocol.ts";
import type { StatusWriter } from "./status-writer.ts";
import { endToolSpan, startToolSpan } from "./tracing.ts";
import type { Transcript } from "./transcript.ts";

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

export interface ToolRunnerOptions {
  /** metadata.uid of the run: part of every key. */
  uid: string;
  attempt: number;
  /** Records kept in status, newest last. */
  maxToolCalls: number;
  clock: () => number;
  log: SandboxLogger;
  writer: Pick<StatusWriter, "setToolCalls" | "setActivity" | "write">;
  heartbeat: Pick<HeartbeatLoop, "progress">;
  checkpoints: Pick<Checkpoints, "step" | "nextCallIndex">;
  transcript: Transcript;
  /** Aborted when the sandbox is fenced; handed to every tool. */
  signal: AbortSignal;
  /** Throws when the sandbox is fenced or closed: a tool's result then goes nowhere. */
  assertOpen(): void;
  /** The number of running tools changed, and with it the state the sandbox reports. */
  stateChanged(): void;
  /** Throws BudgetExhaustedError once the run's spending has reached a limit. */
  assertWithinBudget(): void;
  /** A call was recorded: one more tool call in this attempt's usage. */
  countToolCall(): void;
}

export class ToolRunner {
  private readonly o: ToolRunnerOptions;
  private calls: ToolCall[];
  /** status.toolCallsResetAfter: the last record a person has seen when resuming the run. */
  private resetAfter: string | undefined;
  private seq = 0;
  private runningTools = 0;

  constructor(options: ToolRunnerOptions, found: { calls: ToolCall[]; resetAfter: string | undefined }) {
    this.o = options;
    this.calls = [...found.calls];
    this.resetAfter = found.resetAfter;
  }

  /** The records this sandbox holds (and writes), newest last. */
  get records(): readonly ToolCall[] {
    return this.calls;
  }

  get running(): number {
    return this.runningTools;
  }

  /** Operator-owned: a person's resume moves it, and a refused call may then be reported instead. */
  observe(resetAfter: string | undefined): void {
    this.resetAfter = resetAfter;
  }

  /** Keeps only the newest records if earlier attempts left more; true when it dropped some. */
  trim(): boolean {
    if (this.calls.length <= this.o.maxToolCalls) return false;
    this.calls = this.calls.slice(-this.o.maxToolCalls);
    this.o.writer.setToolCalls(this.calls);
    return true;
  }

  async run<A, R>(name: string, args: A, fn: (args: A, ctx: ToolContext) => R | Promise<R>, options: ToolOptions<A> = {}): Promise<ToolOutcome<R>> {
    const { o } = this;
    o.assertOpen();
    o.heartbeat.progress();
    const idempotent = options.idempotent ?? false;
    const hash = argsHash(args);
    const key = idempotencyKey({ runUid: o.uid, step: o.checkpoints.step, index: o.checkpoints.nextCallIndex(), name, argsHash: hash });
    const decision = replayDecision(this.calls, key, idempotent, this.resetAfter);

    if (decision.kind === "saved") {
      o.transcript.record("tool", "replayed", `${name}: saved result of call ${decision.previous.id}`);
      o.log.info({ tool: name, call: decision.previous.id }, "returning the saved result of an earlier attempt");
      return { ok: true, value: decodeResult(decision.previous.result) as R, replayed: true, idempotencyKey: key, callId: decision.previous.id };
    }
    if (decision.kind === "refuse") {
      const err = new UnconfirmedSideEffectError(decision.previous);
      o.log.error({ tool: name, call: decision.previous.id }, err.message);
      throw err;
    }
    if (decision.kind === "unconfirmed") {
      const failure: ToolFailure = {
        kind: "unconfirmed",
        message: `${name} was started by attempt ${decision.previous.attempt ?? "?"} and its outcome is unknown; it was not run again. Check its effect before deciding what to do.`,
      };
      o.transcript.record("tool", "unconfirmed", failure.message);
      return { ok: false, error: failure, idempotencyKey: key, callId: decision.previous.id };
    }

    // Only work that would run is refused: a saved result costs nothing.
    o.assertWithinBudget();
    const startedAt = new Date(o.clock()).toISOString();
    const call: ToolCall = { id: `a${o.attempt}-${++this.seq}`, name, argsHash: hash, idempotencyKey: key, idempotent, attempt: o.attempt, state: "Started", startedAt };

    let input = args;
    if (options.schema) {
      const parsed = options.schema.safeParse(args);
      if (!parsed.success) {
        // Recorded Failed without ever being Started: nothing ran, and the loop rule still sees
        // an agent that keeps sending the same wrong arguments.
        const failure: ToolFailure = isValidationError(parsed.error)
          ? validationFailure(name, parsed.error)
          : { ...describeFailure(parsed.error, o.clock(), name), kind: "validation" };
        await this.finish({ ...call, state: "Failed", error: { message: failure.message }, finishedAt: startedAt });
        o.countToolCall();
        o.transcript.record("tool", "invalidArguments", failure.message);
        return { ok: false, error: failure, idempotencyKey: key, callId: call.id };
      }
      input = parsed.data;
    }

    this.runningTools++;
    o.stateChanged();
    this.calls = upsertCall(this.calls, call, o.maxToolCalls);
    o.writer.setToolCalls(this.calls);
    try {
      await o.writer.write();
    } catch (err) {
      this.runningTools--;
      // The tool never ran: a Started record left in the list would go out with the next write
      // and tell the watchdog and the next attempt of a call whose outcome is unknown.
      this.calls = this.calls.filter((c) => c.id !== call.id);
      o.writer.setToolCalls(this.calls);
      o.stateChanged();
      throw err;
    }
    o.countToolCall();
    if (decision.kind === "rerun") o.log.warn({ tool: name, previous: decision.previous.id }, "running an unfinished idempotent call again with its key");

    const ctx: ToolContext = {
      idempotencyKey: key,
      callId: call.id,
      attempt: o.attempt,
      rerun: decision.kind === "rerun",
      signal: o.signal,
      progress: () => o.heartbeat.progress(),
    };
    const span = startToolSpan({ name, callId: call.id, idempotencyKey: key, attempt: o.attempt, rerun: ctx.rerun });
    let value: R;
    try {
      value = await fn(input, ctx);
    } catch (err) {
      this.runningTools--;
      const failure = describeFailure(err, o.clock(), name);
      endToolSpan(span, failure);
      o.assertOpen();
      const error: NonNullable<ToolCall["error"]> = { message: failure.message };
      if (failure.httpStatus !== undefined) error.httpStatus = failure.httpStatus;
      if (failure.retryAfterSeconds !== undefined) error.retryAfterSeconds = failure.retryAfterSeconds;
      await this.finish({ ...call, state: "Failed", error, finishedAt: new Date(o.clock()).toISOString() });
      o.transcript.record("tool", "failed", `${name}: ${failure.message}`);
      return { ok: false, error: failure, idempotencyKey: key, callId: call.id };
    }
    this.runningTools--;
    endToolSpan(span);
    o.assertOpen();
    const done: ToolCall = { ...call, state: "Succeeded", finishedAt: new Date(o.clock()).toISOString() };
    const result = encodeResult(value);
    if (result !== undefined) done.result = result;
    await this.finish(done);
    o.transcript.record("tool", "succeeded", `${name}: ${result ?? ""}`);
    return { ok: true, value, replayed: false, idempotencyKey: key, callId: call.id };
  }

  /** Records a call's end with a toolResult activity; resolves once the API server has it. */
  private async finish(call: ToolCall): Promise<void> {
    const { o } = this;
    o.heartbeat.progress();
    this.calls = upsertCall(this.calls, call, o.maxToolCalls);
    o.writer.setToolCalls(this.calls);
    o.writer.setActivity({ kind: "toolResult", time: call.finishedAt ?? new Date(o.clock()).toISOString() });
    o.stateChanged();
    await o.writer.write();
  }
}
