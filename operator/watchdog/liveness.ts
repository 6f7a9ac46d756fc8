// Liveness on the server's clock (rule 2). A heartbeat's age is measured from when the API server
// accepted the sandbox's write (the managedFields time of status.heartbeat.time), or from when this
// operator saw it change; never from heartbeat.time alone, which is the sandbox's own clock. A
// sandbox clock off by an hour therefore neither kills a healthy run nor keeps a dead one alive.
// The sandbox's other times (its activity, for the stall timer) are moved onto the server's clock
// by the offset between its heartbeat time and the server's acceptance of it.
import type { Heartbeat } from "../api/agentrun.ts";
import { toMillis } from "./observe.ts";

export interface CurrentHeartbeat {
  heartbeat: Heartbeat;
  /** When the server accepted it (or the operator saw it), ms on the server's clock. */
  acceptedAt?: number;
  /** Sandbox clock minus server clock, ms (0 when unknown). */
  skewMs: number;
}

/** managedFields times have whole seconds: the true time is up to this much later. */
export const SERVER_TIME_RESOLUTION_MS = 999;

/**
 * The current attempt's heartbeat with its server time. `serverTime` is the managedFields time of
 * the heartbeat field (whole seconds); `seenAt` is the operator's own observation of this heartbeat
 * value, used only when the server's record is missing. For deadlines the server's time is rounded
 * up, so that a healthy sandbox is never killed early; for the sandbox's clock offset it is taken
 * as it is (a nudge may then come up to a second early, never late).
 */
export function currentHeartbeat(heartbeat: Heartbeat | undefined, attempt: number, serverTime: number | undefined, seenAt: number | undefined): CurrentHeartbeat | undefined {
  if (!heartbeat || heartbeat.attempt !== attempt) return undefined; // a stale attempt's heartbeat is ignored
  const at = serverTime ?? seenAt;
  const sandboxTime = toMillis(heartbeat.time);
  const skewMs = at !== undefined && sandboxTime !== undefined ? sandboxTime - at : 0;
  if (at === undefined) return { heartbeat, skewMs };
  return { heartbeat, acceptedAt: serverTime !== undefined ? serverTime + SERVER_TIME_RESOLUTION_MS : at, skewMs };
}

/** A time the sandbox reported, on the server's clock. */
export function onServerClock(hb: CurrentHeartbeat | undefined, sandboxTime: string | undefined): number | undefined {
  const t = toMillis(sandboxTime);
  return t === undefined ? undefined : t - (hb?.skewMs ?? 0);
}

/**
 * The last sign of life of an active sandbox: its newest accepted heartbeat, or the start of its
 * agent container when it has not heartbeated yet. Undefined while the agent has not started
 * (startTimeout covers that).
 */
export function lastSignOfLife(hb: CurrentHeartbeat | undefined, agentStartedAt: number | undefined): number | undefined {
  const times = [hb?.acceptedAt, agentStartedAt].filter((t): t is number => t !== undefined);
  return times.length ? Math.max(...times) : undefined;
}
