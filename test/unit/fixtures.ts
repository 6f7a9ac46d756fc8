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

/** The controller owner reference of run r's pods. */
export const OWNER = { apiVersion: "watchdog.dev/v1alpha1", kind: "AgentRun", name: "r", uid: "uid-r", controller: true, blockOwnerDeletion: true };

/** What the API server records of a status write of heartbeat.time at `ms` (whole seconds). */
export function heartbeatManagedFields(ms: number): Json[] {
  return [
    {
      manager: "agent-watchdog-sandbox",
      operation: "Update",
      subresource: "status",
      apiVersion: "watchdog.dev/v1alpha1",
      time: new Date(Math.floor(ms / 1000) * 1000).toISOString().replace(".000Z", "Z"),
      fieldsV1: { "f:status": { "f:heartbeat": { ".": {}, "f:attempt": {}, "f:state": {}, "f:time": {} } } },
    },
  ];
}

export function pod(
  attempt: number,
  overrides: { phase?: string; created?: number; deleting?: boolean; exitCode?: number; reason?: string; name?: string; owner?: Json | null; nodeName?: string } = {},
): Json {
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
      ...(overrides.owner === null ? {} : { ownerReferences: [overrides.owner ?? OWNER] }),
      ...(overrides.deleting ? { deletionTimestamp: iso(T0), deletionGracePeriodSeconds: 30 } : {}),
    },
    spec: { containers: [{ name: "agent", image: "agent:1" }], ...(overrides.nodeName ? { nodeName: overrides.nodeName } : {}) },
    status,
  };
}
