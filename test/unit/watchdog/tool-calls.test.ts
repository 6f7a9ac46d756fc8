// Reading the sandbox's tool-call records: which attempt a call belongs to, the newest call of the
// current attempt, rate limits (rule 4), the calls since a resume, tool loops (rule 6), unconfirmed
// non-idempotent calls (rule 10) and calls in flight (rule 7).
import { describe, expect, it } from "vitest";
import type { Heartbeat, ToolCall } from "../../../operator/api/agentrun.ts";
import {
  callAttempt,
  callsSinceReset,
  detectLoop,
  inFlightCall,
  isRateLimited,
  newestCurrentCall,
  unconfirmedCall,
} from "../../../operator/watchdog/tool-calls.ts";
import { T0, iso } from "../fixtures.ts";

const call = (id: string, fields: Partial<ToolCall> = {}): ToolCall => ({ id, name: "search", argsHash: "h", state: "Failed", attempt: 2, ...fields });
const heartbeat = (attempt: number): Heartbeat => ({ time: iso(T0), attempt, state: "Planning" });
const failed = (n: number, fields: Partial<ToolCall> = {}) => Array.from({ length: n }, (_, i) => call(`c${i + 1}`, fields));

describe("the attempt of a call", () => {
  it("is the attempt the call records, whatever the heartbeat says", () => {
    expect(callAttempt(call("c1", { attempt: 2 }), heartbeat(5))).toBe(2);
  });

  it("is the heartbeat's attempt for a call recorded without one: the same sandbox wrote both", () => {
    expect(callAttempt(call("c1", { attempt: undefined }), heartbeat(5))).toBe(5);
  });

  it("is unknown for a call without an attempt and no heartbeat", () => {
    expect(callAttempt(call("c1", { attempt: undefined }), undefined)).toBeUndefined();
  });
});

describe("the newest call of the current attempt", () => {
  it("is the newest record when the current attempt made it", () => {
    const calls = [call("c1"), call("c2")];
    expect(newestCurrentCall(calls, undefined, 2)).toBe(calls[1]);
  });

  it("is none when the newest record belongs to an earlier attempt, even if an older one is current", () => {
    expect(newestCurrentCall([call("c1", { attempt: 2 }), call("c2", { attempt: 1 })], undefined, 2)).toBeUndefined();
  });

  it("counts an attempt-less newest record as the heartbeat's attempt", () => {
    const calls = [call("c1", { attempt: undefined })];
    expect(newestCurrentCall(calls, heartbeat(2), 2)).toBe(calls[0]);
    expect(newestCurrentCall(calls, heartbeat(1), 2)).toBeUndefined();
  });

  it("is none without records, or with an empty list", () => {
    expect(newestCurrentCall(undefined, heartbeat(2), 2)).toBeUndefined();
    expect(newestCurrentCall([], heartbeat(2), 2)).toBeUndefined();
  });
});

describe("a rate-limited call", () => {
  it("is a failed call with HTTP 429", () => {
    expect(isRateLimited(call("c1", { state: "Failed", error: { httpStatus: 429 } }))).toBe(true);
  });

  it("is not a call still running, even one that recorded a 429", () => {
    expect(isRateLimited(call("c1", { state: "Started", error: { httpStatus: 429 } }))).toBe(false);
    expect(isRateLimited(call("c1", { state: "Succeeded", error: { httpStatus: 429 } }))).toBe(false);
  });

  it("is not a failure with another status, or without one", () => {
    expect(isRateLimited(call("c1", { error: { httpStatus: 503 } }))).toBe(false);
    expect(isRateLimited(call("c1", { error: { message: "boom" } }))).toBe(false);
  });

  it("is not a failure that recorded no error at all, nor a missing call", () => {
    expect(isRateLimited(call("c1", { error: undefined }))).toBe(false);
    expect(isRateLimited(undefined)).toBe(false);
  });
});

describe("the calls since the failure streak was reset (by a resume)", () => {
  it("are none without records", () => {
    expect(callsSinceReset(undefined, undefined)).toEqual([]);
    expect(callsSinceReset(undefined, "c1")).toEqual([]);
  });

  it("are all the calls when the streak was never reset", () => {
    const calls = failed(3);
    expect(callsSinceReset(calls, undefined)).toBe(calls);
  });

  it("are the calls after the marker", () => {
    const calls = failed(4);
    expect(callsSinceReset(calls, "c2")).toEqual([calls[2], calls[3]]);
  });

  it("are the calls after the marker when the marker is the oldest record", () => {
    const calls = failed(3);
    expect(callsSinceReset(calls, "c1")).toEqual([calls[1], calls[2]]);
  });

  it("are none when the marker is the newest record: nothing happened since the resume", () => {
    expect(callsSinceReset(failed(3), "c3")).toEqual([]);
  });

  it("are all the calls when the marker has rotated out of the bounded list: each left is newer", () => {
    const calls = failed(3);
    expect(callsSinceReset(calls, "gone")).toEqual(calls);
  });
});

describe("a tool loop", () => {
  it("is the newest call when the newest `limit` calls all failed with the same name and arguments", () => {
    const calls = failed(3);
    expect(detectLoop(calls, undefined, undefined, 2, 3)).toBe(calls[2]);
  });

  it("is none with one failure fewer than the limit", () => {
    expect(detectLoop(failed(2), undefined, undefined, 2, 3)).toBeUndefined();
  });

  it("with a limit of 1 is a single failed call", () => {
    const calls = failed(1);
    expect(detectLoop(calls, undefined, undefined, 2, 1)).toBe(calls[0]);
  });

  it("is never found with a limit below 1, however many calls failed alike", () => {
    expect(detectLoop(failed(3), undefined, undefined, 2, 0)).toBeUndefined();
    expect(detectLoop(failed(3), undefined, undefined, 2, -1)).toBeUndefined();
  });

  it("looks only at the newest `limit` calls: an older different call does not break the loop", () => {
    const calls = [call("c0", { name: "email", state: "Succeeded" }), ...failed(3)];
    expect(detectLoop(calls, undefined, undefined, 2, 3)).toBe(calls[3]);
  });

  it("is none when one call of the window succeeded", () => {
    const calls = failed(3);
    calls[0] = call("c1", { state: "Succeeded" });
    expect(detectLoop(calls, undefined, undefined, 2, 3)).toBeUndefined();
  });

  it("is none when the newest call of the window is still running", () => {
    const calls = failed(3);
    calls[2] = call("c3", { state: "Started" });
    expect(detectLoop(calls, undefined, undefined, 2, 3)).toBeUndefined();
  });

  it("is none when one call of the window names another tool", () => {
    const calls = failed(3);
    calls[1] = call("c2", { name: "email" });
    expect(detectLoop(calls, undefined, undefined, 2, 3)).toBeUndefined();
  });

  it("is none when one call of the window had other arguments", () => {
    const calls = failed(3);
    calls[0] = call("c1", { argsHash: "other" });
    expect(detectLoop(calls, undefined, undefined, 2, 3)).toBeUndefined();
  });

  it("is none when the newest call belongs to an earlier attempt: that attempt's loop is over", () => {
    expect(detectLoop(failed(3, { attempt: 1 }), undefined, undefined, 2, 3)).toBeUndefined();
  });

  it("attributes an attempt-less newest call to the heartbeat's attempt", () => {
    const calls = failed(3, { attempt: undefined });
    expect(detectLoop(calls, undefined, heartbeat(2), 2, 3)).toBe(calls[2]);
    expect(detectLoop(calls, undefined, heartbeat(1), 2, 3)).toBeUndefined();
  });

  it("counts only the calls after a resume: the failures before it were forgiven", () => {
    const calls = failed(4);
    expect(detectLoop(calls, "c2", undefined, 2, 3)).toBeUndefined();
    expect(detectLoop(calls, "c1", undefined, 2, 3)).toBe(calls[3]);
  });

  it("is none without records", () => {
    expect(detectLoop(undefined, undefined, undefined, 2, 1)).toBeUndefined();
  });
});

describe("an unconfirmed side effect", () => {
  it("is a non-idempotent call of the current attempt started and never finished", () => {
    const calls = [call("c1", { state: "Started", idempotent: false })];
    expect(unconfirmedCall(calls, undefined, 2)).toBe(calls[0]);
  });

  it("is not a started call that may safely run again, or whose idempotence is not stated", () => {
    expect(unconfirmedCall([call("c1", { state: "Started", idempotent: true })], undefined, 2)).toBeUndefined();
    expect(unconfirmedCall([call("c1", { state: "Started" })], undefined, 2)).toBeUndefined();
  });

  it("is not a non-idempotent call that finished, either way", () => {
    expect(unconfirmedCall([call("c1", { state: "Succeeded", idempotent: false }), call("c2", { state: "Failed", idempotent: false })], undefined, 2)).toBeUndefined();
  });

  it("is not an earlier attempt's unfinished call", () => {
    expect(unconfirmedCall([call("c1", { state: "Started", idempotent: false, attempt: 1 })], undefined, 2)).toBeUndefined();
  });

  it("is any such call, not only the newest", () => {
    const calls = [call("c1", { state: "Started", idempotent: false }), call("c2", { state: "Succeeded" })];
    expect(unconfirmedCall(calls, undefined, 2)).toBe(calls[0]);
  });

  it("attributes an attempt-less call to the heartbeat's attempt", () => {
    const calls = [call("c1", { state: "Started", idempotent: false, attempt: undefined })];
    expect(unconfirmedCall(calls, heartbeat(2), 2)).toBe(calls[0]);
    expect(unconfirmedCall(calls, heartbeat(1), 2)).toBeUndefined();
  });

  it("is none without records", () => {
    expect(unconfirmedCall(undefined, undefined, 2)).toBeUndefined();
  });
});

describe("a call in flight", () => {
  it("is a call of the current attempt recorded Started, idempotent or not", () => {
    const calls = [call("c1", { state: "Succeeded" }), call("c2", { state: "Started", idempotent: true })];
    expect(inFlightCall(calls, undefined, 2)).toBe(calls[1]);
  });

  it("is not a finished call", () => {
    expect(inFlightCall([call("c1", { state: "Succeeded" }), call("c2", { state: "Failed" })], undefined, 2)).toBeUndefined();
  });

  it("is not an earlier attempt's call left Started: that sandbox is gone", () => {
    expect(inFlightCall([call("c1", { state: "Started", attempt: 1 })], undefined, 2)).toBeUndefined();
  });

  it("attributes an attempt-less call to the heartbeat's attempt", () => {
    const calls = [call("c1", { state: "Started", attempt: undefined })];
    expect(inFlightCall(calls, heartbeat(2), 2)).toBe(calls[0]);
    expect(inFlightCall(calls, heartbeat(1), 2)).toBeUndefined();
  });

  it("is none without records", () => {
    expect(inFlightCall(undefined, heartbeat(2), 2)).toBeUndefined();
  });
});
