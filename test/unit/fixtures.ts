// Builders for runs and pods as the API server would return them.
import { LABELS } from "../../operator/api/annotations.ts";

export const T0 = Date.parse("2026-11-30T12:00:00Z");
export const iso = (ms: number) => new Date(ms).toISOString();

type Json = Record<string, any>;

export function run(overrides: { spec?: Json; status?: Json; annotations?: Record<string, string>; generation?: number } = {}): Json {
  return {
    apiVersion: "watchdog.dev/v1alpha1",
    kind: "AgentRun",
    metadata: {
      name: "r",
      namespace: "ns",
      uid: "uid-r",
      generation: overrides.generation ?? 1,
      creationTimestamp: iso(T0),
      annotations: overrides.annotations ?? {},
    },
    spec: {
      template: { spec: { containers: [{ name: "agent", image: "agent:1" }] } },
      ...overrides.spec,
    },
    ...(overrides.status ? { status: overrides.status } : {}),
  };
}

export function pod(attempt: number, overrides: { phase?: string; created?: number; deleting?: boolean; exitCode?: number; reason?: string; name?: string } = {}): Json {
  const status: Json = { phase: overrides.phase ?? "Running" };
  if (overrides.exitCode !== undefined) {
    status.containerStatuses = [{ name: "agent", state: { terminated: { exitCode: overrides.exitCode, reason: overrides.reason } } }];
  }
  return {
    metadata: {
      name: overrides.name ?? `r-${attempt}`,
      namespace: "ns",
      uid: `uid-pod-${attempt}`,
      labels: { [LABELS.run]: "r", [LABELS.attempt]: String(attempt) },
      creationTimestamp: iso(overrides.created ?? T0),
      ...(overrides.deleting ? { deletionTimestamp: iso(T0) } : {}),
    },
    status,
  };
}
