import { describe, expect, it } from "vitest";
import type { ApprovalStatus, ToolCall } from "../../../operator/api/agentrun.ts";
import { MAX_CHECKPOINT_BYTES, MAX_SANDBOX_STATUS_BYTES } from "../../../operator/api/limits.ts";
import { CheckpointTooLargeError, SandboxConfigError } from "../../../operator/sandbox/errors.ts";
import {
  APPROVAL_REQUEST_KEY,
  MAX_HEARTBEAT_INTERVAL_MS,
  MAX_RESULT_CHARS,
  approvalOutcome,
  checkpointRefusal,
  decodeResult,
  effectiveHeartbeatTimeoutMs,
  encodeResult,
  fenceReason,
  heartbeatDecision,
  heartbeatIntervalMs,
  identityFromEnv,
  newNudge,
  newestCallRateLimited,
  openedRequestId,
  replayDecision,
  unwrapCheckpoint,
  upsertCall,
  wrapApprovalCheckpoint,
  type HeartbeatClock,
} from "../../../operator/sandbox/protocol.ts";
import { MAX_TIMER_DELAY_MS, timerDelayMs } from "../../../operator/sandbox/timers.ts";

const S = 1000;
const M = 60 * S;
const T0 = Date.parse("2026-11-30T12:00:00Z");
const iso = (ms: number) => new Date(ms).toISOString();

describe("identity from the environment", () => {
  it("reads the run, namespace and attempt the operator sets", () => {
    expect(identityFromEnv({ WATCHDOG_RUN_NAME: "r", WATCHDOG_RUN_NAMESPACE: "ns", WATCHDOG_ATTEMPT: "3" })).toEqual({ runName: "r", namespace: "ns", attempt: 3 });
  });
  it("refuses to guess", () => {
    expect(() => identityFromEnv({ WATCHDOG_RUN_NAME: "r" })).toThrow(/WATCHDOG_RUN_NAMESPACE, WATCHDOG_ATTEMPT not set/);
    expect(() => identityFromEnv({ WATCHDOG_RUN_NAME: "r", WATCHDOG_RUN_NAMESPACE: "ns", WATCHDOG_ATTEMPT: "0" })).toThrow(SandboxConfigError);
    expect(() => identityFromEnv({ WATCHDOG_RUN_NAME: "r", WATCHDOG_RUN_NAMESPACE: "ns", WATCHDOG_ATTEMPT: "1.5" })).toThrow(SandboxConfigError);
  });
});

describe("heartbeat throttling", () => {
  it("spaces heartbeat-only writes a quarter of the timeout apart", () => {
    expect(heartbeatIntervalMs(5 * M)).toBe(75 * S);
    expect(heartbeatIntervalMs(4 * S)).toBe(1 * S);
    expect(heartbeatIntervalMs(10)).toBe(100); // floor
  });

  it("heartbeats at least as often as with the default timeout, however long the timeout", () => {
    expect(MAX_HEARTBEAT_INTERVAL_MS).toBe(75 * S);
    expect(heartbeatIntervalMs(10 * M)).toBe(75 * S);
    expect(heartbeatIntervalMs(100_000 * 60 * M)).toBe(75 * S); // "100000h"
    expect(heartbeatIntervalMs(Infinity)).toBe(75 * S);
    expect(heartbeatIntervalMs(Number.NaN)).toBe(75 * S);
  });

  it("never hands a timer a delay it cannot hold", () => {
    expect(MAX_TIMER_DELAY_MS).toBe(2_147_483_647);
    expect(timerDelayMs(2 ** 40)).toBe(MAX_TIMER_DELAY_MS);
    expect(timerDelayMs(Infinity)).toBe(MAX_TIMER_DELAY_MS);
    expect(timerDelayMs(1500)).toBe(1500);
    expect(timerDelayMs(-5)).toBe(0);
    expect(timerDelayMs(Number.NaN)).toBe(0);
  });

  it("reads the effective timeout the operator publishes, then the spec, then the default", () => {
    expect(effectiveHeartbeatTimeoutMs({ status: { watchdog: { heartbeatTimeout: "2m" } }, spec: { watchdog: { heartbeatTimeout: "9m" } } })).toBe(2 * M);
    expect(effectiveHeartbeatTimeoutMs({ spec: { watchdog: { heartbeatTimeout: "9m" } } })).toBe(9 * M);
    expect(effectiveHeartbeatTimeoutMs({ status: { watchdog: { heartbeatTimeout: "garbage" } } })).toBe(5 * M);
    expect(effectiveHeartbeatTimeoutMs(undefined)).toBe(5 * M);
  });

  const clock = (over: Partial<HeartbeatClock>): HeartbeatClock => ({
    now: T0,
    lastWriteAt: T0,
    intervalMs: 75 * S,
    lastProgressAt: T0,
    progressTimeoutMs: 5 * M,
    waitingForInput: false,
    ...over,
  });

  it("writes nothing before the interval has passed since the last write of any kind", () => {
    const d = heartbeatDecision(clock({ now: T0 + 74 * S, lastProgressAt: T0 + 70 * S }));
    expect(d).toEqual({ write: false, wedged: false, nextCheckAt: T0 + 75 * S });
  });

  it("writes once the interval has passed, and looks again one interval later", () => {
    const d = heartbeatDecision(clock({ now: T0 + 75 * S, lastProgressAt: T0 + 70 * S }));
    expect(d).toEqual({ write: true, wedged: false, nextCheckAt: T0 + 150 * S });
  });

  it("at most one heartbeat-only write per interval over a long healthy run", () => {
    let lastWriteAt = T0;
    let writes = 0;
    let at = T0;
    for (let step = 0; step < 600; step++) {
      at += S; // ten minutes, checked every second, progress all the time
      const d = heartbeatDecision(clock({ now: at, lastWriteAt, lastProgressAt: at }));
      if (d.write) {
        writes++;
        lastWriteAt = at;
      }
    }
    expect(writes).toBe(8); // 600 s / 75 s
  });

  it("stops heartbeating when the agent makes no progress for longer than the progress timeout", () => {
    const fresh = heartbeatDecision(clock({ now: T0 + 5 * M, lastWriteAt: T0 + 3 * M, lastProgressAt: T0 }));
    expect(fresh.write).toBe(true); // exactly at the timeout: still alive
    const stale = heartbeatDecision(clock({ now: T0 + 5 * M + 1, lastWriteAt: T0 + 3 * M, lastProgressAt: T0 }));
    expect(stale).toMatchObject({ write: false, wedged: true });
    expect(stale.nextCheckAt).toBe(T0 + 5 * M + 1 + 75 * S); // looks again, in case it recovers
  });

  it("keeps heartbeating while the agent waits on the SDK for input", () => {
    const d = heartbeatDecision(clock({ now: T0 + 60 * M, lastWriteAt: T0 + 58 * M, lastProgressAt: T0, waitingForInput: true }));
    expect(d).toMatchObject({ write: true, wedged: false });
  });
});

function call(over: Partial<ToolCall> & { id: string }): ToolCall {
  return { name: "t", argsHash: "h", idempotencyKey: "k", state: "Succeeded", attempt: 1, ...over };
}

describe("replaying tool calls (rule 10)", () => {
  it("runs a call nobody made before", () => {
    expect(replayDecision([call({ id: "a1-1", idempotencyKey: "other" })], "k", true, undefined)).toEqual({ kind: "run" });
  });

  it("returns the saved result of a call that succeeded", () => {
    const done = call({ id: "a1-1", state: "Succeeded", result: '{"ok":1}' });
    expect(replayDecision([done], "k", false, undefined)).toEqual({ kind: "saved", previous: done });
  });

  it("runs again a call whose last try failed", () => {
    const failed = call({ id: "a1-1", state: "Failed" });
    expect(replayDecision([failed], "k", false, undefined)).toEqual({ kind: "run", previous: failed });
  });

  it("reruns an unfinished idempotent call with its key", () => {
    const started = call({ id: "a1-1", state: "Started", idempotent: true });
    expect(replayDecision([started], "k", true, undefined)).toEqual({ kind: "rerun", previous: started });
  });

  it("refuses an unfinished non-idempotent call", () => {
    const started = call({ id: "a1-1", state: "Started", idempotent: false });
    expect(replayDecision([started], "k", false, undefined)).toEqual({ kind: "refuse", previous: started });
  });

  it("goes by what the record promised, not by today's option", () => {
    const promisedSafe = call({ id: "a1-1", state: "Started", idempotent: true });
    expect(replayDecision([promisedSafe], "k", false, undefined).kind).toBe("rerun");
    const promisedUnsafe = call({ id: "a1-1", state: "Started", idempotent: false });
    expect(replayDecision([promisedUnsafe], "k", true, undefined).kind).toBe("refuse");
    const unknown = call({ id: "a1-1", state: "Started" });
    expect(replayDecision([unknown], "k", true, undefined).kind).toBe("rerun");
    expect(replayDecision([unknown], "k", false, undefined).kind).toBe("refuse");
  });

  it("looks at the newest record of the key", () => {
    const first = call({ id: "a1-1", state: "Started", idempotent: true });
    const second = call({ id: "a2-1", state: "Succeeded", attempt: 2, result: "1" });
    expect(replayDecision([first, call({ id: "x", idempotencyKey: "x" }), second], "k", true, undefined)).toEqual({ kind: "saved", previous: second });
  });

  it("after a person resumed the run, reports the unknown outcome instead of refusing, and never runs it", () => {
    const started = call({ id: "a1-1", state: "Started", idempotent: false });
    const later = call({ id: "a1-2", idempotencyKey: "other" });
    expect(replayDecision([started, later], "k", false, "a1-2")).toEqual({ kind: "unconfirmed", previous: started });
    expect(replayDecision([started], "k", false, "a1-1").kind).toBe("unconfirmed");
    // A resume marker older than the call, or one no longer in the list, does not cover it.
    expect(replayDecision([later, started], "k", false, "a1-2").kind).toBe("refuse");
    expect(replayDecision([started], "k", false, "gone").kind).toBe("refuse");
  });
});

describe("the bounded list of tool records", () => {
  it("replaces a record by id in place and appends new ones, newest last", () => {
    const a = call({ id: "a" });
    const b = call({ id: "b" });
    expect(upsertCall([a, b], { ...a, state: "Failed" }, 32).map((c) => [c.id, c.state])).toEqual([
      ["a", "Failed"],
      ["b", "Succeeded"],
    ]);
    expect(upsertCall([a], b, 32).map((c) => c.id)).toEqual(["a", "b"]);
  });

  it("keeps only the newest records", () => {
    let calls: ToolCall[] = [];
    for (let i = 1; i <= 40; i++) calls = upsertCall(calls, call({ id: `c${i}` }), 32);
    expect(calls).toHaveLength(32);
    expect(calls[0]!.id).toBe("c9");
    expect(calls.at(-1)!.id).toBe("c40");
  });
});

describe("saved results", () => {
  it("round-trips small results as JSON", () => {
    expect(encodeResult({ a: [1, "x"] })).toBe('{"a":[1,"x"]}');
    expect(decodeResult(encodeResult({ a: [1, "x"] }))).toEqual({ a: [1, "x"] });
    expect(encodeResult(undefined)).toBeUndefined();
    expect(decodeResult("not json")).toBe("not json");
  });

  it("truncates a large result to fit the record, as valid JSON that says so", () => {
    for (const big of ["x".repeat(20_000), '"\\'.repeat(9000), { rows: Array.from({ length: 3000 }, (_, i) => ({ i })) }]) {
      const text = encodeResult(big)!;
      expect(text.length).toBeLessThanOrEqual(MAX_RESULT_CHARS);
      const parsed = decodeResult(text) as { truncated: boolean; length: number; preview: string };
      expect(parsed.truncated).toBe(true);
      expect(parsed.length).toBe(JSON.stringify(big).length);
      expect(JSON.stringify(big).startsWith(parsed.preview)).toBe(true);
      expect(parsed.preview.length).toBeGreaterThan(MAX_RESULT_CHARS / 3);
    }
  });
});

describe("nudge de-duplication", () => {
  const stall = (time: string, nudges = 1) => ({ state: "Fired" as const, nudges, lastNudge: { time, message: "wake up" } });

  it("hands over a nudge newer than the last one seen, once", () => {
    const first = newNudge(stall(iso(T0 + 10 * S)), undefined);
    expect(first).toEqual({ time: iso(T0 + 10 * S), message: "wake up", count: 1 });
    expect(newNudge(stall(iso(T0 + 10 * S)), first!.time)).toBeUndefined();
    expect(newNudge(stall(iso(T0 + 40 * S), 2), first!.time)).toEqual({ time: iso(T0 + 40 * S), message: "wake up", count: 2 });
  });

  it("ignores a nudge that is not newer (a stale read, or one from before this attempt)", () => {
    expect(newNudge(stall(iso(T0)), iso(T0 + S))).toBeUndefined();
    expect(newNudge({ state: "Disarmed", nudges: 0 }, undefined)).toBeUndefined();
    expect(newNudge(undefined, undefined)).toBeUndefined();
  });
});

describe("self-fencing", () => {
  it("fences when a newer attempt has taken over", () => {
    expect(fenceReason({ attempt: 3, phase: "Starting" }, 2)).toBe("attempt 2 was superseded by attempt 3");
  });

  it("does not fence when the operator has not yet written this attempt", () => {
    expect(fenceReason({ attempt: 1, phase: "Queued" }, 2)).toBeUndefined();
    expect(fenceReason(undefined, 1)).toBeUndefined();
    expect(fenceReason({ attempt: 2, phase: "Planning" }, 2)).toBeUndefined();
    expect(fenceReason({ attempt: 2, phase: "AwaitingReply" }, 2)).toBeUndefined();
  });

  it("fences when the operator stopped the run at this attempt", () => {
    for (const phase of ["NeedsHumanIntervention", "Suspended", "Failed", "Completed"]) {
      expect(fenceReason({ attempt: 2, phase }, 2)).toBe(`the run is ${phase}`);
    }
  });
});

describe("checkpoint sizes", () => {
  const heartbeat = { time: iso(T0), attempt: 1, state: "Planning" };
  /** A checkpoint whose JSON is exactly `bytes` long: {"step":1,"data":"xxx…"}. */
  const sized = (bytes: number, char = "x") => ({ step: 1, data: char.repeat((bytes - JSON.stringify({ step: 1, data: "" }).length) / Buffer.byteLength(char)) });

  it("takes a checkpoint up to the limit, and refuses one byte more, naming its size and the limit", () => {
    expect(checkpointRefusal({ heartbeat, checkpoint: sized(MAX_CHECKPOINT_BYTES) })).toBeUndefined();
    const refusal = checkpointRefusal({ heartbeat, checkpoint: sized(MAX_CHECKPOINT_BYTES + 1) });
    expect(refusal).toBeInstanceOf(CheckpointTooLargeError);
    expect(refusal).toMatchObject({ what: "checkpoint", step: 1, bytes: MAX_CHECKPOINT_BYTES + 1, limit: MAX_CHECKPOINT_BYTES });
    expect(refusal!.message).toBe(`the checkpoint of step 1 is ${MAX_CHECKPOINT_BYTES + 1} bytes as JSON, over the limit of ${MAX_CHECKPOINT_BYTES} bytes; nothing was written`);
  });

  it("counts UTF-8 bytes, as the API server stores them, not characters", () => {
    const euros = sized(MAX_CHECKPOINT_BYTES + 1, "€"); // three bytes each
    expect(JSON.stringify(euros).length).toBeLessThan(MAX_CHECKPOINT_BYTES / 2);
    expect(checkpointRefusal({ heartbeat, checkpoint: euros })).toMatchObject({ bytes: MAX_CHECKPOINT_BYTES + 1 });
  });

  it("counts what the SDK wraps around the agent's data", () => {
    const data = sized(MAX_CHECKPOINT_BYTES).data;
    expect(checkpointRefusal({ heartbeat, checkpoint: { step: 1, data } })).toBeUndefined();
    expect(checkpointRefusal({ heartbeat, checkpoint: wrapApprovalCheckpoint(1, data, { question: "Deploy?", askedAt: iso(T0), key: "k" }) })).toMatchObject({ what: "checkpoint" });
  });

  it("refuses a checkpoint that would make the sandbox's part of status too large with the tool records", () => {
    const record = call({ id: "a1-1", result: "r".repeat(8000) });
    const toolCalls = Array.from({ length: 50 }, (_, i) => ({ ...record, id: `a1-${i}` })); // ~400 KB
    const checkpoint = sized(200 * 1024);
    expect(checkpointRefusal({ heartbeat, checkpoint })).toBeUndefined();
    const refusal = checkpointRefusal({ heartbeat, toolCalls, checkpoint });
    expect(refusal).toMatchObject({ what: "sandbox status", limit: MAX_SANDBOX_STATUS_BYTES });
    expect(refusal!.bytes).toBe(Buffer.byteLength(JSON.stringify({ heartbeat, toolCalls, checkpoint })));
    expect(refusal!.message).toContain(`over the limit of ${MAX_SANDBOX_STATUS_BYTES} bytes`);
  });
});

describe("rate limits", () => {
  const failed = (id: string, attempt: number, httpStatus?: number): ToolCall => call({ id, attempt, state: "Failed", error: httpStatus === undefined ? { message: "x" } : { message: "x", httpStatus } });

  it("sees a give-up on a rate limit when the newest call of this attempt failed with 429", () => {
    expect(newestCallRateLimited([call({ id: "a2-1", attempt: 2 }), failed("a2-2", 2, 429)], 2)).toBe(true);
  });

  it("looks at this attempt's newest call only", () => {
    expect(newestCallRateLimited([failed("a2-1", 2, 429), call({ id: "a2-2", attempt: 2 })], 2)).toBe(false); // it got through since
    expect(newestCallRateLimited([failed("a1-1", 1, 429)], 2)).toBe(false); // an earlier attempt's
    expect(newestCallRateLimited([failed("a2-1", 2, 429), failed("a1-9", 1, 500)], 2)).toBe(true);
    expect(newestCallRateLimited([failed("a2-1", 2, 503)], 2)).toBe(false);
    expect(newestCallRateLimited([call({ id: "a2-1", attempt: 2, state: "Started" })], 2)).toBe(false);
    expect(newestCallRateLimited([], 1)).toBe(false);
  });
});

describe("approval requests", () => {
  const request = (over: Partial<ApprovalStatus> = {}): ApprovalStatus => ({ id: "req-1", state: "Pending", requestKey: "k1", requestedAt: iso(T0), ...over });

  it("keeps the agent's data and the request apart in the checkpoint", () => {
    const asked = { question: "Deploy?", askedAt: iso(T0), key: "k1" };
    const cp = wrapApprovalCheckpoint(4, { version: "v2" }, asked);
    expect((cp.data as Record<string, unknown>)[APPROVAL_REQUEST_KEY]).toEqual(asked);
    expect(unwrapCheckpoint(cp)).toEqual({ checkpoint: { step: 4, data: { version: "v2" } }, request: asked });
    expect(unwrapCheckpoint({ step: 1, data: { plain: true } })).toEqual({ checkpoint: { step: 1, data: { plain: true } } });
    expect(unwrapCheckpoint({ step: 1 })).toEqual({ checkpoint: { step: 1 } });
    expect(unwrapCheckpoint(undefined)).toEqual({});
  });

  it("reads a request someone else wrote field by field, without a key that is not one", () => {
    const found = (fields: Record<string, unknown>) => unwrapCheckpoint({ step: 1, data: { [APPROVAL_REQUEST_KEY]: fields } }).request;
    expect(found({ question: "Q?", askedAt: iso(T0), supersedes: "an old SDK's" })).toEqual({ question: "Q?", askedAt: iso(T0) });
    expect(found({ question: "Q?", key: 42 })).toEqual({ question: "Q?", askedAt: "" });
    expect(found({ question: "Q?", key: "k".repeat(65) })).toEqual({ question: "Q?", askedAt: "" });
    expect(found({ question: 7 })).toBeUndefined();
  });

  it("knows its own request by its key, and holds on to the id it was opened with", () => {
    expect(openedRequestId(request(), { key: "k1" })).toBe("req-1");
    expect(openedRequestId(request({ requestKey: "k2" }), { key: "k1" })).toBeUndefined();
    expect(openedRequestId(request({ state: "Approved" }), { key: "k1" })).toBeUndefined();
    expect(openedRequestId(request(), { key: undefined })).toBeUndefined();
  });

  it("waits while its request is not opened yet, or pending", () => {
    expect(approvalOutcome(undefined, { key: "k1" })).toEqual({ state: "Pending" });
    expect(approvalOutcome(request(), { key: "k1", id: "req-1" })).toEqual({ state: "Pending" });
  });

  it("takes each decision of its own request", () => {
    const own = { key: "k1", id: "req-1" };
    expect(approvalOutcome(request({ state: "Approved", answer: "ship it" }), own)).toEqual({ state: "Approved", answer: "ship it" });
    expect(approvalOutcome(request({ state: "Rejected", reason: "no" }), own)).toEqual({ state: "Rejected", reason: "no" });
    expect(approvalOutcome(request({ state: "TimedOut" }), own)).toEqual({ state: "TimedOut" });
    expect(approvalOutcome(request({ state: "Withdrawn" }), own)).toEqual({ state: "Withdrawn" });
    // Decided before the sandbox saw it open (a new attempt, a relisted watch): its key says whose it is.
    expect(approvalOutcome(request({ state: "Approved", answer: "yes" }), { key: "k1" })).toEqual({ state: "Approved", answer: "yes" });
  });

  it("never takes the decision of another request, asked however close in time", () => {
    const earlier = request({ id: "req-0", requestKey: "k0", state: "Approved", answer: "yes to the first", decidedAt: iso(T0) });
    expect(approvalOutcome(earlier, { key: "k1" })).toEqual({ state: "Pending" });
    expect(approvalOutcome(request({ id: "req-2", state: "Approved", answer: "another id" }), { key: "k1", id: "req-1" })).toEqual({ state: "Pending" });
    expect(approvalOutcome(request({ requestKey: undefined, state: "Approved" }), { key: "k1" })).toEqual({ state: "Pending" });
    // A request of an older SDK has no key: nothing is ever its answer.
    expect(approvalOutcome(request({ requestKey: undefined, state: "Approved" }), { key: undefined })).toEqual({ state: "Pending" });
  });

  it("takes a state it does not know for no decision", () => {
    expect(approvalOutcome(request({ state: "Dancing" as ApprovalStatus["state"] }), { key: "k1" })).toEqual({ state: "Pending" });
  });
});
