// The stall watchdog's state machine, driven by heartbeat.activity.
//
//   Disarmed --text--> Armed --(timeout, no newer activity)--> Fired (nudge 1)
//   Fired --(timeout)--> Fired (nudge n+1) ... after maxNudges --> escalate (StallUnresolved)
//   Armed|Fired --delta|userMessage|noReply|emptyText--> Disarmed (nudges reset)
//   Armed|Fired --text--> Armed (timer restarts, nudges kept: the agent answered with text again)
//   toolResult: the timer restarts from it, the state stays.
//
// Every deadline is computed from times in the object (the arming text, the newest activity, the
// last nudge), so an operator that restarts fires at the same moment.
import type { Activity, StallStatus } from "../api/agentrun.ts";
import { toMillis } from "../api/timestamp.ts";

export const DISARMED: StallStatus = { state: "Disarmed", nudges: 0 };

const DISARMING: ReadonlySet<Activity["kind"]> = new Set(["delta", "userMessage", "noReply", "emptyText"]);

export interface StallSettings {
  enabled: boolean;
  timeoutMs: number;
  maxNudges: number;
  message: string;
}

export interface StallStep {
  stall: StallStatus;
  /** Record a nudge now. */
  nudge: boolean;
  /** maxNudges are spent and the agent is still stalled. */
  escalate: boolean;
  /** When the timer next fires, if it runs. */
  wakeAt?: number;
}

/**
 * Advances the stall state for the latest activity at `now`. `paused` stops the timer without
 * forgetting the state (a tool call in flight is work, not a stall). `toServer` moves a time the
 * sandbox reported onto the server's clock: the sandbox's own clock orders its activities, the
 * server's times the nudges.
 */
export function stepStall(
  current: StallStatus | undefined,
  activity: Activity | undefined,
  now: number,
  settings: StallSettings,
  paused: boolean,
  toServer: (time: string | undefined) => number | undefined = toMillis,
): StallStep {
  let stall: StallStatus = current ?? DISARMED;
  if (!settings.enabled) {
    return { stall: stall.state === "Disarmed" ? stall : { ...stall, state: "Disarmed", nudges: 0 }, nudge: false, escalate: false };
  }

  const activityAt = activity ? toMillis(activity.time) : undefined;
  const armedAt = toMillis(stall.armedAt);
  if (activity && activityAt !== undefined) {
    if (activity.kind === "text" && (armedAt === undefined || activityAt > armedAt)) {
      stall = { ...stall, state: "Armed", armedAt: activity.time };
    } else if (DISARMING.has(activity.kind) && stall.state !== "Disarmed" && (armedAt === undefined || activityAt >= armedAt)) {
      stall = { ...stall, state: "Disarmed", nudges: 0 };
    }
  }
  if (stall.state === "Disarmed" || paused) return { stall, nudge: false, escalate: false };

  // The timer runs from the newest of: the arming text, a later tool result or text, the last nudge.
  const since = Math.max(
    toServer(stall.armedAt) ?? 0,
    activity && activityAt !== undefined && (activity.kind === "toolResult" || activity.kind === "text") ? (toServer(activity.time) ?? 0) : 0,
    stall.state === "Fired" ? (toMillis(stall.lastNudge?.time) ?? 0) : 0,
  );
  const deadline = since + settings.timeoutMs;
  if (now < deadline) return { stall, nudge: false, escalate: false, wakeAt: deadline };
  if (stall.nudges >= settings.maxNudges) return { stall, nudge: false, escalate: true };
  const nudged: StallStatus = {
    ...stall,
    state: "Fired",
    nudges: stall.nudges + 1,
    lastNudge: { time: new Date(now).toISOString(), message: settings.message },
  };
  return { stall: nudged, nudge: true, escalate: false, wakeAt: now + settings.timeoutMs };
}
