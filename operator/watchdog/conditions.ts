// metav1.Condition bookkeeping: a condition's lastTransitionTime moves only when its status does.
import type { Condition, ConditionType } from "../api/agentrun.ts";

export interface ConditionSpec {
  type: ConditionType;
  status: "True" | "False" | "Unknown";
  reason: string;
  message: string;
}

export function setCondition(
  conditions: readonly Condition[],
  next: ConditionSpec,
  nowIso: string,
  generation: number | undefined,
): Condition[] {
  const previous = conditions.find((c) => c.type === next.type);
  const condition: Condition = {
    type: next.type,
    status: next.status,
    reason: next.reason,
    message: next.message,
    lastTransitionTime: previous && previous.status === next.status ? previous.lastTransitionTime : nowIso,
  };
  if (generation !== undefined) condition.observedGeneration = generation;
  const rest = conditions.filter((c) => c.type !== next.type);
  return [...rest, condition].sort((a, b) => a.type.localeCompare(b.type));
}

export function findCondition(conditions: readonly Condition[] | undefined, type: ConditionType): Condition | undefined {
  return conditions?.find((c) => c.type === type);
}
