// The runs counted for the gauges: by phase, with stale heartbeats and unconfirmed sandboxes, and
// each run waiting for a person by name (the alert that pages someone must say which run).
import { ACTIVE_PHASES, PHASES, type Phase } from "../api/agentrun.ts";
import { resolveWatchdog, toSettings, type InstallDefaults } from "../api/defaults.ts";
import { toMillis } from "../api/timestamp.ts";
import type { Json } from "../kube/client.ts";

export interface Census {
  phases: Record<Phase, number>;
  /** Active runs whose heartbeat is older than half its timeout. */
  staleHeartbeats: number;
  /** Runs with a sandbox deleted and not yet confirmed gone. */
  unconfirmed: number;
  /** Each run in NeedsHumanIntervention, with the reason of its condition. */
  waitingForPerson: { namespace: string; name: string; reason: string }[];
}

/** A reason as the operator writes them; anything else (a hand-edited status) is not put in a label. */
const REASON = /^[A-Z][A-Za-z]{0,63}$/;

export function census(runs: Iterable<Json>, defaults: InstallDefaults, now: number): Census {
  const phases = Object.fromEntries(PHASES.map((p) => [p, 0])) as Record<Phase, number>;
  let staleHeartbeats = 0;
  let unconfirmed = 0;
  const waitingForPerson: Census["waitingForPerson"] = [];
  for (const run of runs) {
    const status = (run.status ?? {}) as { phase?: Phase; heartbeat?: { time?: string }; conditions?: { type: string; status: string; reason?: string }[] };
    const phase = status.phase ?? "Queued";
    if (phase in phases) phases[phase]++;
    if (status.conditions?.some((c) => c.type === "SandboxUnconfirmed" && c.status === "True")) unconfirmed++;
    if (phase === "NeedsHumanIntervention") {
      const { namespace, name } = run.metadata as { namespace: string; name: string };
      const reason = status.conditions?.find((c) => c.type === "NeedsHumanIntervention")?.reason;
      waitingForPerson.push({ namespace, name, reason: reason && REASON.test(reason) ? reason : "Unknown" });
    }
    if (!ACTIVE_PHASES.includes(phase) || phase === "AwaitingReply" || !status.heartbeat?.time) continue;
    try {
      const timeout = toSettings(resolveWatchdog((run.spec as { watchdog?: InstallDefaults }).watchdog, defaults)).heartbeatTimeoutMs;
      const age = now - (toMillis(status.heartbeat.time) ?? now);
      if (age > timeout / 2) staleHeartbeats++;
    } catch {
      // a run the core cannot read is reported by its own condition
    }
  }
  return { phases, staleHeartbeats, unconfirmed, waitingForPerson };
}
