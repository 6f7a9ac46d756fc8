// The snapshot every policy decides from: the run as read, its effective settings, its pods as
// rule 9 sees them, its current heartbeat on the server's clock, a valid answer if one is given,
// and the time. Built once per decision; nothing in it changes while policies run.
import type { AgentRun, AgentRunStatus, Heartbeat } from "../api/agentrun.ts";
import type { BudgetSettings, WatchdogSettings } from "../api/defaults.ts";
import type { Answer } from "./answers.ts";
import type { CurrentHeartbeat } from "./liveness.ts";
import type { PodView } from "./observe.ts";
import type { OperatorStatus } from "./outcome.ts";
import type { Sandboxes } from "./sandboxes.ts";
import type { SandboxIdentity } from "./sandbox-identity.ts";

export interface RunView {
  run: AgentRun;
  /** Status as read: the operator's fields and the sandbox's. */
  status: AgentRunStatus;
  settings: WatchdogSettings;
  /** The run budget: spec.budget over the install's budget defaults. */
  budget: BudgetSettings;
  now: number;
  identity: SandboxIdentity;
  sandboxes: Sandboxes;
  /** The current attempt's heartbeat, if it is one the watchdog may believe. */
  heartbeat?: CurrentHeartbeat;
  /** When a late write of an earlier attempt replaced the current heartbeat (see LivenessMemory). */
  heartbeatErasedAt?: number;
  answer?: Answer;
  /** What is wrong with the size of the sandbox's report, when it is over the protocol's bound. */
  oversizeReport?: string;
  /** The API server's refusal of the run's last status write, when it refused what the write held. */
  refusedWrite?: string;
}


export const attemptOf = (next: OperatorStatus) => next.attempt ?? 0;

/** The pod the status names as the current attempt's (by uid once known, else by name). */
export function currentPod(view: RunView, next: OperatorStatus): PodView | undefined {
  if (next.podName === undefined) return undefined;
  return view.sandboxes.owned.find((p) => (next.podUID ? p.uid === next.podUID : p.name === next.podName && (p.attempt === undefined || p.attempt === attemptOf(next))));
}

export const heartbeatOf = (view: RunView): Heartbeat | undefined => view.heartbeat?.heartbeat;
