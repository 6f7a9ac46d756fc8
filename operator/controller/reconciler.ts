// One reconcile of one run, from the cache to the API server: the run and pods as the cache shows
// them (with this operator's own writes in place until the watches show them: written.ts), the
// pods its status tracks outside the cache (tracked.ts), the plan (plan-run.ts, the one call of the
// core), its execution (executor.ts) when it writes anything, and when to look again. The handler
// in workers.ts acts on that answer.
import { randomUUID } from "node:crypto";
import type { Logger } from "pino";
import { LABELS } from "../api/annotations.ts";
import type { InstallDefaults } from "../api/defaults.ts";
import { paths, type Json, type KubeClient } from "../kube/client.ts";
import type { Metrics } from "../metrics/metrics.ts";
import { isQuiet, type Plan } from "../watchdog/plan.ts";
import type { SandboxIdentity } from "../watchdog/sandbox-identity.ts";
import type { EventRecorder } from "./events.ts";
import { Executor, StatusWriteRefused, type Executed, type ReconcileContext } from "./executor.ts";
import { decisionInputs, type NodeSource } from "./inputs.ts";
import { planRun } from "./plan-run.ts";
import type { RunIndex } from "./run-index.ts";
import { TRACKED_POLL_MS, TrackedPods } from "./tracked.ts";
import { trimPod, trimRun } from "./trim.ts";
import { Written } from "./written.ts";

/**
 * What one reconcile asks of the queue, as controller-runtime's Result: when to look at the run
 * again. An error is thrown instead, and the run is retried with backoff.
 */
export interface ReconcileResult {
  /** The run's next deadline (ms, the API server's clock); none clears its wake-up. */
  wakeAt?: number;
  /** Look again after this long as well (a tracked pod to poll, mirror annotations owed). */
  requeueAfterMs?: number;
  /** Owed work that may wait until no other run waits for a worker (mirror annotations). */
  requeueWhenIdle?: boolean;
}

/**
 * What the controller tells others about each run it has handled (the ledger and the tracer
 * listen): the run as it is now, what was executed, and the run as the reconcile found it.
 */
export interface RunObserver {
  (run: Json, executed: Executed | undefined, before: Json): void;
}

/** How long a run's mirror annotations may wait for idle workers (see mayDeferMirror). */
const MIRROR_DEFERRAL_MS = 5_000;

export interface ReconcilerOptions {
  defaults: InstallDefaults;
  sandbox: SandboxIdentity;
  canWrite: () => boolean;
  /** The run as the cache holds it. */
  cachedRun: (key: string) => Json | undefined;
  /** Whether the caches show every pod that may still run (Controller.cacheCurrent). */
  cacheCurrent: () => boolean;
  /** How many runs wait for a worker now. */
  waiting: () => number;
  nodes: NodeSource;
  log: Logger;
}

export class Reconciler {
  private readonly client: KubeClient;
  private readonly index: RunIndex;
  private readonly metrics: Metrics;
  private readonly options: ReconcilerOptions;
  private readonly executor: Executor;
  /** What this operator wrote and its watches have not shown yet. */
  private readonly written = new Written();
  /** Pods the runs' statuses track that the label-selected cache does not show. */
  private readonly tracked: TrackedPods;
  /** run key -> the API server's refusal of its last status write, for the next decision. */
  private readonly refusals = new Map<string, { message: string; tooLarge: boolean }>();
  /** Runs whose mirror annotations wait for idle workers, with when they were first deferred. */
  private readonly mirrorsDeferred = new Map<string, number>();
  private readonly observers: RunObserver[] = [];
  /** Told when a run's object is gone, so that observers can forget it. */
  private readonly forgetters: ((key: string) => void)[] = [];

  constructor(client: KubeClient, index: RunIndex, recorder: EventRecorder, metrics: Metrics, options: ReconcilerOptions) {
    this.client = client;
    this.index = index;
    this.metrics = metrics;
    this.options = options;
    this.tracked = new TrackedPods(client);
    this.executor = new Executor(client, recorder, {
      canWrite: options.canWrite,
      mayDeferMirror: (key) => this.mayDeferMirror(key),
      clock: () => client.clock.now(),
    });
  }

  /** Calls `observer` with each run after it has been reconciled, and `forget` once it is gone. */
  observe(observer: RunObserver, forget?: (key: string) => void): void {
    this.observers.push(observer);
    if (forget) this.forgetters.push(forget);
  }

  /** Forgets what was kept for a run whose object is gone. */
  forgetRun(key: string): void {
    this.mirrorsDeferred.delete(key);
    this.written.forget(key);
    this.tracked.forget(key);
    this.refusals.delete(key);
    for (const forget of this.forgetters) forget(key);
  }

  /** A pod's deletion was seen: what this operator wrote of it no longer stands in for it. */
  podGone(key: string, pod: Json): void {
    this.written.podGone(key, pod);
  }

  /**
   * One reconcile: decide from the cache; execute against the API server only when there is work;
   * say when to look again. Throws when a write failed. `podCreated` is called once the plan's pod
   * exists (the worker may go on meanwhile); nothing is written once the context is stopped or
   * past its deadline.
   */
  async reconcile(key: string, context: ReconcileContext, podCreated: () => void): Promise<ReconcileResult> {
    const run = this.written.currentRun(key, this.options.cachedRun(key));
    if (!run) return {};
    const [namespace, name] = key.split("/") as [string, string];
    const cachedPods = this.written.currentPods(key, this.index.pods(key));
    // Pods its status tracks that the cache no longer shows are looked up before anything is decided.
    const lookup = await this.tracked.lookup(key, namespace, run, cachedPods, this.index.deletedPods(key));
    for (const pod of lookup.vanished) this.index.tombstone(key, pod);
    const decision = await planRun(run, cachedPods, {
      now: () => this.client.clock.now(),
      inputs: (r, pods) => ({ defaults: this.options.defaults, sandbox: this.options.sandbox, ...this.inputs(key, r, pods) }),
      podsComplete: this.options.cacheCurrent,
      listPods: () => this.client.get<{ items: Json[] }>(paths.pods(namespace), { labelSelector: `${LABELS.run}=${name}` }).then((list) => list.items),
    });
    const result: ReconcileResult = { wakeAt: decision.plan.wakeAt };
    // A tracked pod the cache does not show sends no events: it is read again.
    if (lookup.polling) result.requeueAfterMs = TRACKED_POLL_MS;
    let executed: Executed | undefined;
    if (!isQuiet(decision.plan)) {
      const status = (run.status ?? {}) as { attempt?: number };
      const log = this.options.log.child({ namespace, name, attempt: status.attempt, reconcileID: randomUUID() });
      try {
        executed = await this.executor.execute(decision, log, podCreated, context);
      } catch (err) {
        // A write of a plan made from what this operator wrote may have been refused because it is
        // out of date: decide from the cache alone next time.
        this.written.forget(key);
        // The next decision is told, so that it stops the run for a person with a write that is taken (rule 12).
        if (err instanceof StatusWriteRefused) this.refusals.set(key, { message: err.message, tooLarge: err.tooLarge });
        throw err;
      }
      this.refusals.delete(key);
      if (executed.annotationsDeferred) {
        // Owed: when the workers are idle, and at the latest once the deferral is over.
        result.requeueWhenIdle = true;
        const dueMs = MIRROR_DEFERRAL_MS - (Date.now() - (this.mirrorsDeferred.get(key) ?? Date.now())) + 1;
        result.requeueAfterMs = Math.min(result.requeueAfterMs ?? Infinity, dueMs);
      } else this.mirrorsDeferred.delete(key);
      if (executed.run && executed.run !== run) this.written.run(key, trimRun(executed.run));
      for (const pod of executed.podsWritten ?? []) this.written.pod(key, trimPod(pod));
      log.info({ phase: decision.plan.phase, summary: decision.plan.summary }, "executed plan");
      this.count(decision.plan, executed);
    }
    for (const observer of this.observers) observer(executed?.run ?? run, executed, run);
    return result;
  }

  /** The decision's input beyond the run and its pods, from what this operator saw (inputs.ts). */
  private inputs(key: string, run: Json, pods: readonly Json[]) {
    const refusedWrite = this.refusals.get(key);
    const liveness = this.index.liveness(key);
    const heartbeatSeenAt = this.index.heartbeatSeenAt(key, run);
    return decisionInputs(
      run,
      pods,
      {
        deletedPods: this.index.deletedPods(key),
        containersSeenRunning: (uid) => this.index.containersSeenRunning(uid),
        detachedPods: this.tracked.known(key),
        ...(heartbeatSeenAt !== undefined ? { heartbeatSeenAt } : {}),
        ...(liveness ? { liveness } : {}),
        ...(refusedWrite ? { refusedWrite } : {}),
      },
      this.options.nodes,
      (ms) => this.client.clock.upper(ms),
    );
  }

  /**
   * A run's mirror annotations (the attempt number, a finished backoff) wait while other runs wait
   * for a worker, for at most MIRROR_DEFERRAL_MS: under a burst of new runs the pods and the
   * statuses that name them come first, and one write a run comes after. The status holds what
   * they mirror.
   */
  private mayDeferMirror(key: string): boolean {
    const since = this.mirrorsDeferred.get(key) ?? Date.now();
    if (this.options.waiting() === 0 || Date.now() - since >= MIRROR_DEFERRAL_MS) return false;
    this.mirrorsDeferred.set(key, since);
    return true;
  }

  /** The plan's signals, as the watchdog's own metrics. */
  private count(plan: Plan, executed: Executed): void {
    for (const signal of plan.metrics) {
      switch (signal.kind) {
        case "hungKilled":
          this.metrics.hungKilled.inc();
          this.metrics.detectionLatency.observe(Math.max(0, ((executed.deletedAt ?? Date.now()) - signal.deadline) / 1000));
          break;
        case "requeue":
          this.metrics.requeues.inc({ reason: signal.reason });
          break;
        case "needsHuman":
          this.metrics.needsHuman.inc({ reason: signal.reason });
          break;
        case "nudge":
          this.metrics.nudges.inc();
          break;
        case "budgetExhausted":
          this.metrics.budgetExhausted.inc({ limit: signal.limit });
          break;
      }
    }
  }
}
