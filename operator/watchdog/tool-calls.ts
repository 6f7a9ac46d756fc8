// Reading the sandbox's tool-call records: which belong to the current attempt, whether the
// newest failed on a rate limit, and whether the newest calls form a loop.
import type { Heartbeat, ToolCall } from "../api/agentrun.ts";

/**
 * The attempt a call belongs to. Records written without an attempt are attributed to the
 * attempt of the heartbeat beside them, which the same sandbox wrote.
 */
export function callAttempt(call: ToolCall, heartbeat: Heartbeat | undefined): number | undefined {
  return call.attempt ?? heartbeat?.attempt;
}

/** The newest call, if the current attempt made it. */
export function newestCurrentCall(
  calls: readonly ToolCall[] | undefined,
  heartbeat: Heartbeat | undefined,
  attempt: number,
): ToolCall | undefined {
  const newest = calls?.at(-1);
  return newest && callAttempt(newest, heartbeat) === attempt ? newest : undefined;
}

export function isRateLimited(call: ToolCall | undefined): call is ToolCall {
  return call?.state === "Failed" && call.error?.httpStatus === 429;
}

/** Calls made after the failure streak was last reset (by a resume). */
export function callsSinceReset(calls: readonly ToolCall[] | undefined, resetAfterId: string | undefined): readonly ToolCall[] {
  if (!calls) return [];
  if (resetAfterId === undefined) return calls;
  const index = calls.findIndex((c) => c.id === resetAfterId);
  // When the marker has rotated out of the bounded list, every call left is newer than it.
  return index < 0 ? calls : calls.slice(index + 1);
}

/**
 * A loop: the newest `limit` calls since the last reset all failed with the same name and
 * arguments, and the newest of them belongs to the current attempt.
 */
export function detectLoop(
  calls: readonly ToolCall[] | undefined,
  resetAfterId: string | undefined,
  heartbeat: Heartbeat | undefined,
  attempt: number,
  limit: number,
): ToolCall | undefined {
  const recent = callsSinceReset(calls, resetAfterId);
  if (limit < 1 || recent.length < limit) return undefined;
  const window = recent.slice(-limit);
  const newest = window.at(-1) as ToolCall;
  if (callAttempt(newest, heartbeat) !== attempt) return undefined;
  const same = window.every((c) => c.state === "Failed" && c.name === newest.name && c.argsHash === newest.argsHash);
  return same ? newest : undefined;
}

/**
 * A non-idempotent call of the current attempt that was started and never finished: its effect
 * may or may not have happened (rule 10). Any such call counts, not only the newest.
 */
export function unconfirmedCall(calls: readonly ToolCall[] | undefined, heartbeat: Heartbeat | undefined, attempt: number): ToolCall | undefined {
  return calls?.find((c) => c.state === "Started" && c.idempotent === false && callAttempt(c, heartbeat) === attempt);
}

/** A call of the current attempt recorded Started and not finished: a tool is running (rule 7). */
export function inFlightCall(calls: readonly ToolCall[] | undefined, heartbeat: Heartbeat | undefined, attempt: number): ToolCall | undefined {
  return calls?.find((c) => c.state === "Started" && callAttempt(c, heartbeat) === attempt);
}
