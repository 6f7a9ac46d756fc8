// Playing the sandbox and the kubelet in integration tests, exactly as the contract says: the
// sandbox writes JSON merge patches on its run's status subresource; the kubelet's part is played
// by patching the pod's status.
import { paths, type Json, type KubeClient } from "../../operator/kube/client.ts";

export type SandboxState = "Planning" | "ExecutingTool" | "AwaitingReply";

export async function heartbeat(
  client: KubeClient,
  namespace: string,
  name: string,
  attempt: number,
  state: SandboxState = "Planning",
  activity?: { kind: string; time?: string },
  extra: Json = {},
): Promise<Json> {
  const hb: Json = { time: new Date().toISOString(), attempt, state };
  if (activity) hb.activity = { kind: activity.kind, time: activity.time ?? new Date().toISOString() };
  return client.mergePatch(paths.runStatus(namespace, name), { status: { heartbeat: hb, ...extra } });
}

export async function writeToolCalls(client: KubeClient, namespace: string, name: string, toolCalls: Json[]): Promise<Json> {
  return client.mergePatch(paths.runStatus(namespace, name), { status: { toolCalls } });
}

export function failedCall(id: string, attempt: number, name: string, argsHash: string, error: Json = { message: "boom" }): Json {
  const now = new Date().toISOString();
  return { id, attempt, name, argsHash, state: "Failed", error, startedAt: now, finishedAt: now };
}

/** The kubelet's part: the pod's containers ran, or ended with `exitCode`. */
export async function setPodPhase(
  client: KubeClient,
  namespace: string,
  pod: string,
  phase: "Running" | "Succeeded" | "Failed",
  exitCode?: number,
): Promise<Json> {
  const now = new Date().toISOString();
  const state =
    phase === "Running"
      ? { running: { startedAt: now } }
      : { terminated: { exitCode: exitCode ?? (phase === "Succeeded" ? 0 : 1), reason: phase === "Succeeded" ? "Completed" : "Error", startedAt: now, finishedAt: now } };
  return client.mergePatch(paths.podStatus(namespace, pod), {
    status: {
      phase,
      containerStatuses: [{ name: "agent", image: "agent-watchdog:test", imageID: "", ready: phase === "Running", restartCount: 0, state }],
    },
  });
}
