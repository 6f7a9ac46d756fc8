// Driving the demo's runs to their end: polling them, and approving the one that asks.
import { paths, type KubeClient } from "../operator/kube/client.ts";
import { abortableSleep } from "./cluster.ts";
import { APPROVAL_ANSWER } from "./scenario.ts";

/* eslint-disable @typescript-eslint/no-explicit-any -- runs are read as plain JSON here */
export type Run = { metadata: { name: string; uid: string; annotations?: Record<string, string> }; status?: any };

export const FINAL_PHASES = new Set(["Completed", "Failed", "NeedsHumanIntervention"]);
export const isSettled = (run: Run) => FINAL_PHASES.has(run.status?.phase);

/** Awaiting a reply with its pod given back: only an answer moves it on. */
export const isReleased = (run: Run) =>
  run.status?.phase === "AwaitingReply" && run.status?.reason === "SandboxReleased" && run.status?.approval?.state === "Pending";

export interface DriveOptions {
  client: KubeClient;
  namespace: string;
  /** ms since the epoch */
  deadline: number;
  signal?: AbortSignal;
  intervalMs?: number;
  /** How long a released run is left on show before the demo approves it. */
  approveAfterMs?: number;
  onTick?: (runs: Run[]) => void;
  onApprove?: (run: string) => void;
}

/**
 * Polls the runs until every one has settled (or the deadline passes), approving each run whose
 * pod was released while it awaited a reply. Returns the runs as last seen.
 */
export async function driveUntilSettled(options: DriveOptions): Promise<{ runs: Run[]; settled: boolean; approved: Set<string> }> {
  const { client, namespace, deadline, signal } = options;
  const releasedSince = new Map<string, number>();
  const approved = new Set<string>();
  let runs: Run[] = [];
  for (;;) {
    signal?.throwIfAborted();
    try {
      runs = (await client.get<{ items: Run[] }>(paths.runs(namespace))).items;
    } catch (err) {
      // A slow or restarting API server is no reason to stop watching; the deadline still holds.
      if (Date.now() > deadline) throw err;
    }
    options.onTick?.(runs);
    const now = Date.now();
    for (const run of runs) {
      const name = run.metadata.name;
      if (!isReleased(run) || approved.has(name)) continue;
      const since = releasedSince.get(name) ?? now;
      releasedSince.set(name, since);
      if (now - since < (options.approveAfterMs ?? 0)) continue;
      try {
        // The answer names the request it answers (watchdog.dev/approval-id), as kubectl agentrun does.
        await client.mergePatch(paths.run(namespace, name), {
          metadata: { annotations: { "watchdog.dev/approve": APPROVAL_ANSWER, "watchdog.dev/approval-id": run.status?.approval?.id ?? "" } },
        });
      } catch {
        continue; // tried again on the next round
      }
      approved.add(name);
      options.onApprove?.(name);
    }
    if (runs.length > 0 && runs.every(isSettled)) return { runs, settled: true, approved };
    if (now > deadline) return { runs, settled: false, approved };
    await abortableSleep(options.intervalMs ?? 1000, signal);
  }
}
