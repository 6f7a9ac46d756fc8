// The AgentRun controller: informers feed a work queue; workers run the pure core on the cached
// objects (with this operator's own writes in place until the watches show them); plans that write
// anything are executed with preconditions that refuse them when the cache was stale; every plan's
// next deadline becomes a wake-up. A heartbeat-only update therefore costs one in-memory decision
// and moves a timer, and nothing else.
import { randomUUID } from "node:crypto";
import type { Logger } from "pino";
import { ACTIVE_PHASES, PHASES, type Phase } from "../api/agentrun.ts";
import { LABELS } from "../api/annotations.ts";
import { resolveWatchdog, toSettings, type InstallDefaults } from "../api/defaults.ts";
import { isConflict, paths, type Json, type KubeClient } from "../kube/client.ts";
import { CONTROLLER, type Metrics } from "../metrics/metrics.ts";
import type { DecideInput } from "../watchdog/decide.ts";
import { believe, livenessFacts, type LivenessMemory } from "../watchdog/liveness.ts";
import type { SandboxIdentity } from "../watchdog/sandbox-identity.ts";
import { isQuiet, type Plan } from "../watchdog/plan.ts";
import type { EventRecorder } from "./events.ts";
import { Executor, StatusWriteRefused, type Executed } from "./executor.ts";
import { Informer } from "./informer.ts";
import { NodeCache } from "./nodes.ts";
import { planRun } from "./plan-run.ts";
import { WorkQueue } from "./queue.ts";
import { TRACKED_POLL_MS, TrackedPods } from "./tracked.ts";
import { trimPod, trimRun } from "./trim.ts";
import { Wakeups } from "./wakeups.ts";
import { Written } from "./written.ts";
import { toMillis } from "../api/timestamp.ts";

export interface ControllerOptions {
  /** Namespaces to watch; empty means all. */
  namespaces: string[];
  concurrency: number;
  resyncMs: number;
  /** A watch with no sign of life for this long is restarted, and /healthz fails. */
  watchSilenceMs: number;
  /** A reconcile running longer than this means the work loop is stuck. */
  stuckReconcileMs: number;
  defaults: InstallDefaults;
  sandbox: SandboxIdentity;
  /**
   * Whether this replica may write now (it leads): every write of the controller (pod creates and
   * deletes, status and annotation patches) asks it first, so that a replica that lost the lease
   * stops writing at once. Always true without leader election.
   */
  canWrite?: () => boolean;
}

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

/** What the controller tells others about each run it has handled (the ledger listens). */
export interface RunObserver {
  (run: Json, executed?: Executed): void;
}

const keyOf = (namespace: string, name: string) => `${namespace}/${name}`;

/** How long a cache gets to catch up with the leadership's start by itself (see markTermStart). */
const CATCH_UP_MS = 5_000;
/** How long a run's mirror annotations may wait for idle workers (see mayDeferMirror). */
const MIRROR_DEFERRAL_MS = 5_000;
/** How long the final state of a deleted pod is kept for the run it belonged to. */
const TOMBSTONE_TTL_MS = 10 * 60_000;

/** What identifies one heartbeat value: a new one is a sign of life, whatever its clock says. */
function heartbeatKey(run: Json | undefined): string | undefined {
  const hb = (run?.status as { heartbeat?: { time?: unknown; attempt?: unknown; state?: unknown } } | undefined)?.heartbeat;
  return hb ? JSON.stringify([hb.time, hb.attempt, hb.state]) : undefined;
}

export class Controller {
  readonly queue: WorkQueue;
  private readonly wakeups: Wakeups;
  private readonly runInformers: Informer[] = [];
  private readonly podInformers: Informer[] = [];
  /** run key -> pod key -> pod, so a reconcile never scans every pod. */
  private readonly podsByRun = new Map<string, Map<string, Json>>();
  /** run key -> pod uid -> the pod's final state as its deletion was seen (rule 9). */
  private readonly tombstones = new Map<string, Map<string, { pod: Json; at: number }>>();
  /** run key -> the heartbeat value this operator saw appear, and when (its own observation). */
  private readonly heartbeatsSeen = new Map<string, { key: string; at: number }>();
  /** run key -> what was last believed about its current attempt's liveness, from every event seen. */
  private readonly liveness = new Map<string, LivenessMemory>();
  /** pod uid -> container name -> when this operator first saw it running (its own clock). */
  private readonly containerStarts = new Map<string, Map<string, number>>();
  /** pod uid -> the run key its pod cache entry is filed under (a label can change). */
  private readonly podKeys = new Map<string, string>();
  /** Pods the runs' statuses track that the label-selected cache does not show. */
  private readonly tracked: TrackedPods;
  /** run key -> the API server's refusal of its last status write, for the next decision. */
  private readonly refusals = new Map<string, { message: string; tooLarge: boolean }>();
  /** The API server's clock: every deadline is compared with it, never with this machine's. */
  private readonly clock: KubeClient["clock"];
  /** What this operator wrote and its watches have not shown yet. */
  private readonly written = new Written();
  /** informer -> the resourceVersion of its collection when this replica began to lead. */
  private readonly termStart = new Map<Informer, string>();
  private readonly nodeCache: NodeCache;
  private readonly executor: Executor;
  private readonly observers: RunObserver[] = [];
  private workers = 0;
  private workersStarted = false;
  private stopping = false;
  /** Aborted at stop: reconciles under way write nothing more. */
  private readonly stopped = new AbortController();
  private readonly client: KubeClient;
  private readonly metrics: Metrics;
  private readonly log: Logger;
  private readonly options: ControllerOptions;

  constructor(client: KubeClient, metrics: Metrics, recorder: EventRecorder, log: Logger, options: ControllerOptions) {
    this.client = client;
    this.metrics = metrics;
    this.log = log;
    this.options = options;
    this.clock = client.clock;
    this.tracked = new TrackedPods(client);
    this.queue = new WorkQueue(metrics.queueMetrics());
    this.wakeups = new Wakeups((key) => this.queue.add(key), () => this.clock.now());
    this.executor = new Executor(client, recorder, {
      canWrite: options.canWrite ?? (() => true),
      mayDeferMirror: (key) => this.mayDeferMirror(key),
      clock: () => this.clock.now(),
    });
    this.nodeCache = new NodeCache(client, { resyncMs: options.resyncMs, silenceMs: options.watchSilenceMs, log });
    metrics.maxConcurrentReconciles.set({ controller: CONTROLLER }, options.concurrency);
    metrics.activeWorkers.set({ controller: CONTROLLER }, 0);

    const scopes = options.namespaces.length ? options.namespaces : [undefined];
    for (const namespace of scopes) {
      const common = { resyncMs: options.resyncMs, silenceMs: options.watchSilenceMs, log };
      const runs = new Informer(client, { ...common, name: `agentruns${namespace ? `/${namespace}` : ""}`, path: paths.runs(namespace), transform: trimRun });
      const pods = new Informer(client, {
        ...common,
        name: `pods${namespace ? `/${namespace}` : ""}`,
        path: paths.pods(namespace),
        labelSelector: LABELS.run,
        transform: trimPod,
      });
      runs.on((event, run, previous) => this.onRun(event, run, previous));
      pods.on((event, pod) => this.onPod(event, pod));
      this.runInformers.push(runs);
      this.podInformers.push(pods);
    }
  }

  /** Calls `observer` with each run after it has been reconciled. */
  observe(observer: RunObserver): void {
    this.observers.push(observer);
  }

  /** Starts the informers; followers run them too, so that a new leader starts warm. */
  startInformers(): void {
    for (const informer of this.informers) informer.start();
  }

  /**
   * Resolves once every cache has listed what exists, as the Job controller waits for its
   * informers before its workers start: a worker deciding from a half-filled pod cache would not
   * know of a pod that runs.
   */
  async waitForSync(signal?: AbortSignal): Promise<void> {
    while (!this.synced) {
      signal?.throwIfAborted();
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
  }

  /**
   * Starts the workers once the caches are synced; only the leader does this, once: a replica
   * that loses the lease exits.
   */
  async startWorkers(signal?: AbortSignal): Promise<void> {
    await this.waitForSync(signal);
    if (this.stopping) return;
    // Until it is known, pod creates list live pods first; the workers need not wait for it.
    void this.markTermStart();
    for (const informer of this.runInformers) for (const run of informer.list()) this.queue.add(this.runKey(run));
    this.workersStarted = true;
    for (let i = 0; i < this.options.concurrency; i++) void this.worker();
  }

  async stop(): Promise<void> {
    this.stopping = true;
    this.stopped.abort(new Error("the operator is stopping"));
    this.queue.shutDown();
    this.wakeups.clear();
    for (const informer of this.informers) informer.stop();
    const deadline = Date.now() + 10_000;
    while ((this.workers > 0 || this.processing > 0) && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
  }

  /**
   * Notes where the API server stood when this replica began to lead. Pods are created only by
   * the leader: every pod an earlier leader created is older than this, and every pod this one
   * creates is in `written` until the watch shows it. So once the caches have caught up to it,
   * they miss no pod that may still run, and a pod create needs no live list first (as the Job
   * controller trusts its informers and expectations). Until then, or if the read fails, it lists.
   */
  private async markTermStart(): Promise<void> {
    for (const informer of [...this.runInformers, ...this.podInformers]) {
      try {
        const list = await this.client.get<{ metadata: { resourceVersion: string } }>(informer.options.path, { limit: 1, labelSelector: informer.options.labelSelector });
        this.termStart.set(informer, list.metadata.resourceVersion);
        // A cache catches up with the next event of its objects (or a bookmark); until then every
        // pod create lists first. One still behind after a while (a quiet namespace) lists again
        // once instead.
        const timer = setTimeout(() => {
          if (!this.stopping && !this.cacheCurrent(informer)) informer.refresh();
        }, CATCH_UP_MS);
        timer.unref?.();
      } catch (err) {
        this.log.warn({ err: String(err), informer: informer.options.name }, "could not read where the API server stands; pod creates list live pods first");
      }
    }
  }

  /** Whether every run and pod cache has caught up to where the API server stood when this replica began to lead. */
  cacheCurrent(only?: Informer): boolean {
    return (only ? [only] : [...this.runInformers, ...this.podInformers]).every((informer) => {
      // Resource versions are etcd revisions; one that is not a number proves nothing.
      const start = this.termStart.get(informer);
      const now = informer.version;
      return start !== undefined && /^\d+$/.test(start) && /^\d+$/.test(now) && BigInt(now) >= BigInt(start);
    });
  }

  get synced(): boolean {
    return this.informers.every((i) => i.synced);
  }

  /** Every cached run, or undefined until the caches are synced (the ledger catches up from it). */
  listRuns(): Json[] | undefined {
    return this.runInformers.every((i) => i.synced) ? this.runInformers.flatMap((i) => i.list()) : undefined;
  }

  get informers(): Informer[] {
    return [...this.runInformers, ...this.podInformers, ...this.nodeCache.informers];
  }

  /** Problems that should make Kubernetes restart the operator; empty when healthy. */
  healthProblems(expectWorkers: boolean): string[] {
    const problems: string[] = [];
    for (const informer of this.informers) {
      if (informer.isSilent()) problems.push(`watch ${informer.options.name} silent for ${Math.round((Date.now() - informer.lastActivity) / 1000)}s`);
    }
    const longest = this.queue.longestRunningMs();
    if (longest > this.options.stuckReconcileMs) problems.push(`a reconcile has been running for ${Math.round(longest / 1000)}s`);
    // Before the caches have synced the workers have not started yet; that is not a stop.
    if (expectWorkers && this.workersStarted && !this.stopping && this.workers < this.options.concurrency) {
      problems.push(`${this.options.concurrency - this.workers} of ${this.options.concurrency} workers have stopped`);
    }
    return problems;
  }

  /** Counts runs by phase, stale heartbeats and unconfirmed sandboxes, for the gauges. */
  census(now = Date.now()): { phases: Record<Phase, number>; staleHeartbeats: number; unconfirmed: number } {
    const phases = Object.fromEntries(PHASES.map((p) => [p, 0])) as Record<Phase, number>;
    let staleHeartbeats = 0;
    let unconfirmed = 0;
    for (const informer of this.runInformers) {
      for (const run of informer.list()) {
        const status = (run.status ?? {}) as { phase?: Phase; heartbeat?: { time?: string }; conditions?: { type: string; status: string }[] };
        const phase = status.phase ?? "Queued";
        if (phase in phases) phases[phase]++;
        if (status.conditions?.some((c) => c.type === "SandboxUnconfirmed" && c.status === "True")) unconfirmed++;
        if (!ACTIVE_PHASES.includes(phase) || phase === "AwaitingReply" || !status.heartbeat?.time) continue;
        try {
          const timeout = toSettings(resolveWatchdog((run.spec as { watchdog?: InstallDefaults }).watchdog, this.options.defaults)).heartbeatTimeoutMs;
          const age = now - (toMillis(status.heartbeat.time) ?? now);
          if (age > timeout / 2) staleHeartbeats++;
        } catch {
          // a run the core cannot read is reported by its own condition
        }
      }
    }
    return { phases, staleHeartbeats, unconfirmed };
  }

  private runKey(run: Json): string {
    const meta = run.metadata as { namespace: string; name: string };
    return keyOf(meta.namespace, meta.name);
  }

  private onRun(event: string, run: Json, previous?: Json): void {
    const key = this.runKey(run);
    if (event === "delete") {
      this.wakeups.set(key, undefined);
      this.heartbeatsSeen.delete(key);
      this.liveness.delete(key);
      this.tombstones.delete(key);
      this.mirrorsDeferred.delete(key);
      this.written.forget(key);
      this.tracked.forget(key);
      this.refusals.delete(key);
      return;
    }
    // A heartbeat value that changed while this operator watched is a sign of life it saw itself
    // (the server's record of it, in managedFields, is what survives a restart).
    const hb = heartbeatKey(run);
    if (event === "update" && hb !== undefined && hb !== heartbeatKey(previous)) this.heartbeatsSeen.set(key, { key: hb, at: Date.now() });
    // Each event that changes the heartbeat or the attempt is looked at, so that a current
    // heartbeat replaced by a late write of an earlier attempt before the next reconcile is still
    // remembered. Other events (the operator's own writes, mostly) cannot change what is believed.
    const attemptOf = (r: Json | undefined) => (r?.status as { attempt?: unknown } | undefined)?.attempt;
    if (event === "update" && hb === heartbeatKey(previous) && attemptOf(run) === attemptOf(previous)) {
      this.queue.add(key);
      return;
    }
    const seen = this.heartbeatsSeen.get(key);
    const facts = livenessFacts(run, seen && seen.key === hb ? seen.at : undefined);
    const memory = facts ? believe(facts, this.liveness.get(key)).memory : undefined;
    if (memory) this.liveness.set(key, memory);
    else this.liveness.delete(key);
    this.queue.add(key);
  }

  private onPod(event: string, pod: Json): void {
    const meta = pod.metadata as { namespace: string; name: string; uid?: string; labels?: Record<string, string> };
    const runName = meta.labels?.[LABELS.run];
    if (!runName) return;
    const key = keyOf(meta.namespace, runName);
    const uid = meta.uid;
    if (event === "delete") {
      this.forgetPod(key, meta.name);
      this.written.podGone(key, pod);
      if (uid) {
        this.podKeys.delete(uid);
        this.containerStarts.delete(uid);
        // Its final state says whether the kubelet stopped its containers (rule 9).
        this.tombstone(key, pod);
      }
    } else {
      // A pod relabelled to another run's name leaves the first run's entry (which still tracks it by uid).
      const filed = uid ? this.podKeys.get(uid) : undefined;
      if (uid && filed !== undefined && filed !== key) {
        this.forgetPod(filed, meta.name);
        this.queue.add(filed);
      }
      if (uid) this.podKeys.set(uid, key);
      let pods = this.podsByRun.get(key);
      if (!pods) this.podsByRun.set(key, (pods = new Map()));
      pods.set(meta.name, pod);
      if (uid) this.noteContainerStarts(uid, pod);
    }
    if (event !== "resync") this.queue.add(key);
  }

  private tombstone(key: string, pod: Json): void {
    const uid = (pod.metadata as { uid?: string }).uid;
    if (!uid) return;
    let tombs = this.tombstones.get(key);
    if (!tombs) this.tombstones.set(key, (tombs = new Map()));
    tombs.set(uid, { pod, at: Date.now() });
  }

  /** When each container was first seen running, on this operator's own clock (rule 2: never the node's). */
  private noteContainerStarts(uid: string, pod: Json): void {
    const statuses = ((pod.status as { containerStatuses?: { name?: string; state?: { running?: unknown } }[] } | undefined)?.containerStatuses ?? []);
    for (const cs of statuses) {
      if (!cs.state?.running || typeof cs.name !== "string") continue;
      let seen = this.containerStarts.get(uid);
      if (!seen) this.containerStarts.set(uid, (seen = new Map()));
      if (!seen.has(cs.name)) seen.set(cs.name, Date.now());
    }
  }

  private forgetPod(key: string, name: string): void {
    const pods = this.podsByRun.get(key);
    pods?.delete(name);
    if (pods?.size === 0) this.podsByRun.delete(key);
  }

  private cachedRun(key: string): Json | undefined {
    const [namespace, name] = key.split("/") as [string, string];
    for (const informer of this.runInformers) {
      const run = informer.get(namespace, name);
      if (run) return run;
    }
    return undefined;
  }

  /**
   * A worker takes one run at a time. A new run waits only for its pod create: the status and
   * annotation writes after it need not hold the worker, which goes on to the next run while they
   * finish (at most `concurrency` such trailing writes at once), so that a burst of new runs gets
   * its pods first. The run stays in processing until its writes are done: no other worker takes
   * it meanwhile, and its events wait for them.
   */
  private async worker(): Promise<void> {
    this.workers++;
    try {
      for (;;) {
        const key = await this.queue.get();
        if (key === undefined) return;
        let handOff = () => {};
        const handedOff = new Promise<void>((resolve) => (handOff = resolve));
        const processed = this.process(key, () => {
          if (this.trailing >= this.options.concurrency) return false;
          handOff();
          return true;
        });
        await Promise.race([processed, handedOff]);
        // A reconcile that writes nothing never leaves the microtask queue, so a resync of 10,000
        // runs would hold the event loop until all were decided: no watch event, timer, probe or
        // scrape in between. Yield to them after each one.
        await new Promise((resolve) => setImmediate(resolve));
      }
    } finally {
      this.workers--;
    }
  }

  /** Runs whose mirror annotations wait for idle workers, with when they were first deferred. */
  private readonly mirrorsDeferred = new Map<string, number>();

  /**
   * A run's mirror annotations (the attempt number, a finished backoff) wait while other runs wait
   * for a worker, for at most MIRROR_DEFERRAL_MS: under a burst of new runs the pods and the
   * statuses that name them come first, and one write a run comes after. The status holds what
   * they mirror.
   */
  private mayDeferMirror(key: string): boolean {
    const since = this.mirrorsDeferred.get(key) ?? Date.now();
    if (this.queue.length === 0 || Date.now() - since >= MIRROR_DEFERRAL_MS) return false;
    this.mirrorsDeferred.set(key, since);
    return true;
  }

  /** Trailing writes of runs whose worker went on after the pod create (see worker). */
  private trailing = 0;
  /** Reconciles under way, trailing ones included. */
  private processing = 0;

  /**
   * The one handler of reconciles (controller-runtime's reconcileHandler): runs one, and maps what
   * it returned, or threw, onto the wake-ups, the queue and the reconcile metrics. An error of any
   * kind, a conflict included, is retried after the run's backoff. Never throws.
   */
  private async process(key: string, mayHandOff: () => boolean): Promise<void> {
    this.processing++;
    let trailing = false;
    this.metrics.activeWorkers.inc({ controller: CONTROLLER });
    const timer = this.metrics.reconcileTime.startTimer({ controller: CONTROLLER });
    // Past its deadline a reconcile writes nothing more; one still running at the stuck limit
    // (an await that never returns) fails /healthz instead.
    const signal = AbortSignal.any([this.stopped.signal, AbortSignal.timeout(Math.max(1, Math.floor(this.options.stuckReconcileMs / 2)))]);
    try {
      const result = await this.reconcile(key, signal, () => {
        if (trailing || !mayHandOff()) return;
        // The worker is free again: what remains is a trailing write, not a worker's.
        trailing = true;
        this.trailing++;
        this.metrics.activeWorkers.dec({ controller: CONTROLLER });
      });
      this.queue.forget(key);
      this.wakeups.set(key, result.wakeAt);
      if (result.requeueWhenIdle) this.queue.addWhenIdle(key);
      if (result.requeueAfterMs !== undefined) this.queue.addAfter(key, result.requeueAfterMs);
      const requeued = result.wakeAt !== undefined || result.requeueAfterMs !== undefined || result.requeueWhenIdle === true;
      this.metrics.reconcileTotal.inc({ controller: CONTROLLER, result: requeued ? "requeue_after" : "success" });
    } catch (err) {
      this.metrics.reconcileTotal.inc({ controller: CONTROLLER, result: "error" });
      this.metrics.reconcileErrors.inc({ controller: CONTROLLER });
      // The next decision is told, so that it stops the run for a person with a write that is taken (rule 12).
      if (err instanceof StatusWriteRefused) this.refusals.set(key, { message: err.message, tooLarge: err.tooLarge });
      // A conflict is routine (a heartbeat landed after the plan was made): the cache has the newer run by the retry.
      if (isConflict(err)) this.log.debug({ err: String(err), key }, "conflict; deciding again after backoff");
      else this.log.error({ err: String(err), key }, "reconcile failed; retrying with backoff");
      this.queue.addRateLimited(key);
    } finally {
      timer();
      if (trailing) this.trailing--;
      else this.metrics.activeWorkers.dec({ controller: CONTROLLER });
      this.queue.done(key);
      this.processing--;
    }
  }

  /**
   * One reconcile: decide from the cache (plan-run.ts); execute against the API server only when
   * there is work; say when to look again. Throws when a write failed.
   */
  private async reconcile(key: string, signal: AbortSignal, podCreated: () => void): Promise<ReconcileResult> {
    const run = this.written.currentRun(key, this.cachedRun(key));
    if (!run) return {};
    const [namespace, name] = key.split("/") as [string, string];
    const cachedPods = this.written.currentPods(key, [...(this.podsByRun.get(key)?.values() ?? [])]);
    // Pods its status tracks that the cache no longer shows are looked up before anything is decided.
    const lookup = await this.tracked.lookup(key, namespace, run, cachedPods, [...(this.tombstones.get(key)?.values() ?? [])].map((t) => t.pod));
    for (const pod of lookup.vanished) this.tombstone(key, pod);
    const decision = await planRun(run, cachedPods, {
      now: () => this.clock.now(),
      inputs: (r, pods) => ({ defaults: this.options.defaults, sandbox: this.options.sandbox, ...this.inputsFor(key, r, pods) }),
      podsComplete: this.cacheCurrent(),
      listPods: () => this.client.get<{ items: Json[] }>(paths.pods(namespace), { labelSelector: `${LABELS.run}=${name}` }).then((list) => list.items),
    });
    const result: ReconcileResult = { wakeAt: decision.plan.wakeAt };
    // A tracked pod the cache does not show sends no events: it is read again.
    if (lookup.polling) result.requeueAfterMs = TRACKED_POLL_MS;
    let executed: Executed | undefined;
    if (!isQuiet(decision.plan)) {
      const status = (run.status ?? {}) as { attempt?: number };
      const log = this.log.child({ namespace, name, attempt: status.attempt, reconcileID: randomUUID() });
      try {
        executed = await this.executor.execute(decision, log, podCreated, signal);
      } catch (err) {
        // A write of a plan made from what this operator wrote may have been refused because it is
        // out of date: decide from the cache alone next time.
        this.written.forget(key);
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
    for (const observer of this.observers) observer(executed?.run ?? run, executed);
    return result;
  }

  /** What the core needs beyond the run and its pods: deletions seen, nodes, heartbeats seen. */
  private inputsFor(key: string, run: Json, pods: readonly Json[]): Partial<DecideInput> {
    const now = Date.now();
    const tombs = this.tombstones.get(key);
    const deletedPods: Json[] = [];
    if (tombs) {
      for (const [uid, tomb] of tombs) {
        if (now - tomb.at > TOMBSTONE_TTL_MS) tombs.delete(uid);
        else deletedPods.push(tomb.pod);
      }
      if (tombs.size === 0) this.tombstones.delete(key);
    }
    const status = (run.status ?? {}) as { podUID?: string; nodeName?: string; terminating?: { uid?: string; nodeName?: string }[] };
    const names = new Set<string>();
    const seenPods = new Set<string>();
    for (const pod of [...pods, ...deletedPods]) {
      const node = (pod.spec as { nodeName?: string } | undefined)?.nodeName;
      if (node) names.add(node);
      const uid = (pod.metadata as { uid?: string } | undefined)?.uid;
      if (uid) seenPods.add(uid);
    }
    if (status.nodeName) names.add(status.nodeName);
    for (const entry of status.terminating ?? []) if (entry.nodeName) names.add(entry.nodeName);
    // A pod gone unseen with no node on record may have run on any node: the core checks them all.
    const unplaced =
      (status.podUID !== undefined && !status.nodeName && !seenPods.has(status.podUID)) ||
      (status.terminating ?? []).some((entry) => !entry.nodeName && entry.uid !== undefined && !seenPods.has(entry.uid));
    const inputs: Partial<DecideInput> = { deletedPods };
    const nodes = unplaced ? this.nodeCache.all() : this.nodeCache.views(names);
    if (nodes) inputs.nodes = nodes;
    // This operator's own sightings, moved onto the server's clock (their latest possible time).
    const seen = this.heartbeatsSeen.get(key);
    if (seen && seen.key === heartbeatKey(run)) inputs.heartbeatSeenAt = this.clock.upper(seen.at);
    const starts = new Map<string, Map<string, number>>();
    for (const pod of pods) {
      const uid = (pod.metadata as { uid?: string } | undefined)?.uid;
      const local = uid ? this.containerStarts.get(uid) : undefined;
      if (uid && local) starts.set(uid, new Map([...local].map(([name, at]) => [name, this.clock.upper(at)])));
    }
    if (starts.size) inputs.containerStartsSeen = starts;
    const detached = this.tracked.known(key);
    if (detached.length) inputs.detachedPods = detached;
    const refused = this.refusals.get(key);
    if (refused) inputs.refusedWrite = refused;
    const liveness = this.liveness.get(key);
    if (liveness) inputs.liveness = liveness;
    return inputs;
  }

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
