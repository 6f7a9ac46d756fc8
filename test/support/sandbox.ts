// Playing the sandbox and the kubelet in integration tests, exactly as the contract says: the
// sandbox writes JSON merge patches on its run's status subresource; the kubelet's part is played
// by patching the pod's status.
import { paths, type Json, type KubeClient } from "../../operator/kube/client.ts";

export type SandboxState = "Planning" | "ExecutingTool" | "AwaitingReply";

/** How a heartbeat is written; each is optional, and without them heartbeat() is as it always was. */
export interface HeartbeatOptions {
  /** The sandbox's clock minus the true time, in ms: a sandbox whose clock is off. */
  skewMs?: number;
  /** heartbeat.time exactly as given (wins over skewMs), e.g. a value no sane clock writes. */
  time?: string;
  /** The write's field manager, e.g. the SDK's (SANDBOX_FIELD_MANAGER); default: the client's. */
  fieldManager?: string;
}

export async function heartbeat(
  client: KubeClient,
  namespace: string,
  name: string,
  attempt: number,
  state: SandboxState = "Planning",
  activity?: { kind: string; time?: string },
  extra: Json = {},
  options: HeartbeatOptions = {},
): Promise<Json> {
  const sandboxNow = () => new Date(Date.now() + (options.skewMs ?? 0)).toISOString();
  const hb: Json = { time: options.time ?? sandboxNow(), attempt, state };
  if (activity) hb.activity = { kind: activity.kind, time: activity.time ?? sandboxNow() };
  const query = options.fieldManager !== undefined ? { fieldManager: options.fieldManager } : undefined;
  return client.mergePatch(paths.runStatus(namespace, name), { status: { heartbeat: hb, ...extra } }, query);
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
