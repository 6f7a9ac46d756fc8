// The harness of the guarantee suites against the real API server: one namespace and one operator
// process per describe, and the parts of the kubelet and the sandbox the tests play (pod phases,
// heartbeats and tool records as the contract writes them), with waits that have deadlines.
import { afterAll, afterEach, beforeAll, expect } from "vitest";
import { FINALIZER, SANDBOX_FIELD_MANAGER } from "../../operator/api/annotations.ts";
import { ApiError, isNotFound, paths, type Json, type KubeClient } from "../../operator/kube/client.ts";
import { deleteNamespace, getRun, kube, listEvents, listPods, newNamespace, ofAttempt } from "./cluster.ts";
import { startOperator, type OperatorProcess } from "./operator-process.ts";
import { heartbeat, setPodPhase, type HeartbeatOptions, type SandboxState } from "./sandbox.ts";
import { waitFor } from "./wait.ts";

// --- one namespace and one operator per describe ------------------------------------------

export interface Env {
  client: KubeClient;
  ns: string;
  operator: OperatorProcess;
}

export function cluster(prefix: string, operatorArgs: string[] = [], operatorEnv: NodeJS.ProcessEnv = {}): Env {
  const env = {} as Env;
  beforeAll(async () => {
    env.client = kube();
    env.ns = await newNamespace(env.client, `guarantees-${prefix}`);
    env.operator = await startOperator(env.ns, operatorArgs, operatorEnv);
  });
  afterEach((ctx) => {
    if (ctx.task.result?.state === "fail") console.error(env.operator?.logs.slice(-60).join("\n"));
  });
  afterAll(async () => {
    await env.operator?.stop();
    if (env.client && env.ns) await deleteNamespace(env.client, env.ns);
  });
  return env;
}

// --- playing the kubelet and the sandbox --------------------------------------------------

export const ownerUid = (pod: any): string | undefined => (pod.metadata.ownerReferences ?? []).find((o: any) => o.controller === true)?.uid;

/** The attempt's pod of the run (of its current uid, when given). */
export async function podOf(env: Env, run: string, attempt: number, uid?: string, timeoutMs = 30_000): Promise<any> {
  return waitFor(`pod of ${run} attempt ${attempt}`, async () => (await listPods(env.client, env.ns, run)).find((p) => ofAttempt(attempt)(p) && (uid === undefined || ownerUid(p) === uid)), { timeoutMs });
}

/** Waits for the attempt's pod and reports it Running, as a kubelet would. */
export async function running(env: Env, run: string, attempt = 1, uid?: string): Promise<any> {
  const pod = await podOf(env, run, attempt, uid);
  await setPodPhase(env.client, env.ns, pod.metadata.name, "Running");
  return pod;
}

export async function phaseOf(env: Env, run: string, phase: string, timeoutMs = 30_000): Promise<any> {
  return waitFor(`${run} in phase ${phase}`, async () => {
    const r = await getRun(env.client, env.ns, run);
    return r.status?.phase === phase ? r : undefined;
  }, { timeoutMs });
}

/** A heartbeat as the SDK writes it: under the sandbox's own field manager. */
export function beat(env: Env, run: string, attempt: number, state: SandboxState = "Planning", activity?: { kind: string; time?: string }, options: HeartbeatOptions = {}): Promise<Json> {
  return heartbeat(env.client, env.ns, run, attempt, state, activity, {}, { fieldManager: SANDBOX_FIELD_MANAGER, ...options });
}

export interface Target {
  run: string;
  attempt: number;
  state?: SandboxState;
  skewMs?: number;
  /** heartbeat.time for each beat, when the sandbox writes something odd. */
  time?: () => string;
}

/**
 * Heartbeats the targets every `intervalMs` in the background (the sandbox's own interval) until
 * stop(), which waits for the beat in flight so that nothing lands after it, and returns the last
 * accepted write of each run.
 */
export function keepBeating(env: Env, targets: Target[], intervalMs = 1000) {
  let stopped = false;
  let wake: () => void = () => {};
  const last = new Map<string, any>();
  const errors: string[] = [];
  const loop = (async () => {
    while (!stopped) {
      await Promise.all(
        targets.map(async (t) => {
          try {
            const options: HeartbeatOptions = {};
            if (t.skewMs !== undefined) options.skewMs = t.skewMs;
            if (t.time) options.time = t.time();
            last.set(t.run, await beat(env, t.run, t.attempt, t.state ?? "Planning", undefined, options));
          } catch (err) {
            errors.push(`${t.run}: ${String(err)}`);
          }
        }),
      );
      if (stopped) break;
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, intervalMs);
        wake = () => {
          clearTimeout(timer);
          resolve();
        };
      });
    }
  })();
  return {
    last,
    errors,
    async stop(): Promise<Map<string, any>> {
      stopped = true;
      wake();
      await loop;
      return last;
    },
  };
}

/**
 * When the API server accepted the run's newest heartbeat: the managedFields time of
 * status.heartbeat.time, in whole seconds (the true time is up to a second later).
 */
export function heartbeatAcceptedAt(run: any): number {
  const times = ((run.metadata?.managedFields ?? []) as any[])
    .filter((e) => e.fieldsV1?.["f:status"]?.["f:heartbeat"]?.["f:time"] !== undefined)
    .map((e) => Date.parse(e.time));
  expect(times.length, "a managedFields entry owns status.heartbeat.time").toBeGreaterThan(0);
  return Math.max(...times);
}

export interface Deletion {
  /** When the deletion (deletionTimestamp, or the pod gone) was first seen: it happened before. */
  seenAt: number;
  /** When a read last began that still found the pod running, not being deleted: it happened after. */
  lastAliveAt: number;
}

/** Polls a pod until it is being deleted (deletionTimestamp set) or gone. */
export async function deletionOf(env: Env, name: string, timeoutMs = 20_000): Promise<Deletion> {
  let lastAliveAt = 0;
  return waitFor(`pod ${name} deleted`, async () => {
    const askedAt = Date.now();
    const pod = await env.client.get<any>(paths.pod(env.ns, name)).catch((err) => {
      if (isNotFound(err)) return undefined;
      throw err;
    });
    if (pod && !pod.metadata.deletionTimestamp) {
      lastAliveAt = askedAt;
      return undefined;
    }
    return { seenAt: Date.now(), lastAliveAt };
  }, { timeoutMs, intervalMs: 50 });
}

/** Whether the pod is there and nobody has asked for its deletion. */
export async function untouched(env: Env, name: string): Promise<boolean> {
  try {
    const pod = await env.client.get<any>(paths.pod(env.ns, name));
    return !pod.metadata.deletionTimestamp;
  } catch (err) {
    if (isNotFound(err)) return false;
    throw err;
  }
}

export async function annotate(env: Env, run: string, annotations: Record<string, string | null>): Promise<void> {
  await env.client.mergePatch(paths.run(env.ns, run), { metadata: { annotations } });
}

export async function warnings(env: Env, run: string, reason: string): Promise<any[]> {
  return (await listEvents(env.client, env.ns)).filter((e) => e.type === "Warning" && e.reason === reason && e.regarding?.name === run);
}

/** The operator's API writes so far, from its own rest_client_requests_total. */
export async function apiWrites(op: OperatorProcess): Promise<number> {
  let sum = 0;
  for (const line of (await op.metrics()).split("\n")) {
    const m = /^rest_client_requests_total\{([^}]*)\} (\S+)$/.exec(line);
    if (m && /method="(PATCH|POST|DELETE|PUT)"/.test(m[1] as string)) sum += Number(m[2]);
  }
  return sum;
}

/** Waits until the operator has made no API write for `forMs`, and returns its count. */
export async function writesSettled(op: OperatorProcess, forMs = 1500): Promise<number> {
  return waitFor("the operator's writes to settle", async () => {
    const before = await apiWrites(op);
    await new Promise((r) => setTimeout(r, forMs));
    const after = await apiWrites(op);
    return after === before ? after : undefined;
  }, { timeoutMs: 30_000, intervalMs: 0 });
}

export function seriesValue(text: string, name: string): number | undefined {
  for (const line of text.split("\n")) {
    if (line.startsWith(`${name} `) || line.startsWith(`${name}{`)) return Number(line.slice(line.lastIndexOf(" ") + 1));
  }
  return undefined;
}

export function podEnv(pod: any): Record<string, string> {
  return Object.fromEntries(pod.spec.containers[0].env.map((e: any) => [e.name, e.value]));
}

/**
 * What a person in a hurry does to a run stuck deleting: takes the watchdog's finalizer off by
 * hand, so that the run goes at once whatever its sandbox is doing.
 */
export async function removeWatchdogFinalizer(client: KubeClient, namespace: string, name: string): Promise<void> {
  await waitFor(`${name}'s finalizer removed`, async () => {
    const run = await getRun(client, namespace, name).catch((err) => (isNotFound(err) ? undefined : Promise.reject(err)));
    if (!run) return true;
    const finalizers = ((run.metadata.finalizers ?? []) as string[]).filter((f) => f !== FINALIZER);
    try {
      await client.mergePatch(paths.run(namespace, name), { metadata: { resourceVersion: run.metadata.resourceVersion, finalizers } });
      return true;
    } catch (err) {
      if (isNotFound(err)) return true;
      if (err instanceof ApiError && err.code === 409) return undefined;
      throw err;
    }
  });
}
