// The conditions of a run, derived from its phase and what the decision found: Running,
// BackingOff, NeedsHumanIntervention, Succeeded, SandboxReportValid and SandboxUnconfirmed.
import { ACTIVE_PHASES, type Condition, type Phase } from "../api/agentrun.ts";
import { findCondition, setCondition } from "./conditions.ts";
import type { OperatorStatus } from "./outcome.ts";
import { REASONS } from "./reasons.ts";
import type { Unconfirmed } from "./sandboxes.ts";

export interface ConditionFacts {
  phase: Phase;
  next: OperatorStatus;
  nowIso: string;
  generation: number | undefined;
  backingOff: boolean;
  /** Problems found in what the sandbox wrote; none when its report is valid. */
  problems: string[];
  /** The reason SandboxReportValid gives them (default InvalidSandboxReport). */
  problemReason?: string;
  /** Deleted pods not confirmed gone past unconfirmedAfter. */
  overdue: Unconfirmed[];
}

export function conditionsFor(f: ConditionFacts): Condition[] {
  let conditions: Condition[] = [...(f.next.conditions ?? [])];
  const set = (type: Parameters<typeof setCondition>[1]["type"], status: "True" | "False" | "Unknown", reason: string, message: string) => {
    conditions = setCondition(conditions, { type, status, reason, message }, f.nowIso, f.generation);
  };
  const reason = f.next.reason ?? f.phase;
  const message = f.next.message ?? "";

  if (ACTIVE_PHASES.includes(f.phase)) set("Running", "True", REASONS.running, `attempt ${f.next.attempt ?? 0} runs in pod ${f.next.podName ?? ""}`);
  else set("Running", "False", reason, message);

  if (f.backingOff) set("BackingOff", "True", reason, message);
  else set("BackingOff", "False", f.phase === "Queued" ? "RetryDue" : reason, "");

  if (f.phase === "NeedsHumanIntervention") set("NeedsHumanIntervention", "True", reason, message);
  else {
    // Once False, the condition keeps the reason it got when it became False (e.g. Resumed).
    const previous = findCondition(conditions, "NeedsHumanIntervention");
    if (previous?.status === "True") set("NeedsHumanIntervention", "False", REASONS.resumed, message);
    else if (!previous) set("NeedsHumanIntervention", "False", "NoInterventionNeeded", "");
  }

  if (f.phase === "Completed") set("Succeeded", "True", REASONS.completed, message);
  else if (f.phase === "Failed") set("Succeeded", "False", reason, message);
  else set("Succeeded", "Unknown", REASONS.notFinished, "");

  if (f.problems.length > 0) set("SandboxReportValid", "False", f.problemReason ?? REASONS.invalidSandboxReport, f.problems.join("; "));
  else if (findCondition(conditions, "SandboxReportValid")) set("SandboxReportValid", "True", REASONS.validSandboxReport, "");

  if (f.overdue.length > 0) {
    const first = f.overdue.find((u) => u.reason === REASONS.nodeUnreachable) ?? (f.overdue[0] as Unconfirmed);
    const where = first.entry.nodeName ? ` on node ${first.entry.nodeName}` : "";
    const why =
      first.reason !== REASONS.nodeUnreachable
        ? `the kubelet has not confirmed that its containers stopped`
        : first.entry.nodeName
          ? `its node is not Ready, so its containers may still run`
          : `it vanished with no node on record, and not every node has been heard from since, so its containers may still run`;
    set("SandboxUnconfirmed", "True", first.reason, `sandbox pod ${first.entry.name}${where} was deleted at ${first.entry.since} and is not confirmed gone: ${why}; no replacement starts until it is`);
  } else if (findCondition(conditions, "SandboxUnconfirmed")) set("SandboxUnconfirmed", "False", REASONS.sandboxGone, "");
  return conditions;
}
