// Carries out the core's plans against the API server, in an order that keeps every prefix safe:
// - a new sandbox pod is created only after a live list shows no other live pod of the run, and
//   before the status that names it, with its uid (a lost status write is repaired by adopting
//   the pod);
// - otherwise the status goes first, guarded by the resourceVersion the plan was made from, so a
//   decision based on an old heartbeat loses to the newer heartbeat. Pod deletions come right
//   after it (detection latency is measured to them), alongside the annotation write: the
//   annotations mirror the status and every later decision re-diffs them, so either may land
//   first. Events come last, sent in the background.
// - pods are deleted gracefully, never with grace 0: a node cut off from the API server would keep
//   a force-deleted pod's containers running (rule 9);
// - a run's finalizer goes on before its first pod is created (with the attempt annotation, in
//   one metadata write guarded by the resourceVersion), and comes off only when the core says no
//   sandbox of it may run;
// - no pod is deleted behind a status write that failed: a kill never rides on a plan a newer
//   heartbeat would have refused (rule 2). A write refused for what it held (400, 413, 422, or
//   the storage's "too large") is reported as StatusWriteRefused, and the next decision, told so,
//   stops the run for a person with a write small enough to be taken, and deletes the pods behind
//   that (rule 12); a write that failed for any other reason (a conflict, 429 from API Priority
//   and Fairness, 5xx, a timeout) is thrown to the caller, which decides again after a backoff;
// - every write first asks whether this replica may still write (it leads), and whether the
//   reconcile is still wanted (its context: not stopped, not past its deadline).
// The executor never decides: it carries out a plan as it was made (plan-run.ts made it, from a
// live list of pods when it creates one). The status write's resourceVersion precondition (and
// the annotation write's) refuses it when the run it was made from was stale, and the pod
// deletions' uid preconditions keep them to the pods the plan meant.
import type { Logger } from "pino";
import { ANNOTATIONS, FINALIZER, LABELS } from "../api/annotations.ts";
import { cutToCodePoints } from "../api/limits.ts";
import { ApiError, isAlreadyExists, isConflict, isNotFound, paths, type Json, type KubeClient } from "../kube/client.ts";
import { isLive, podView } from "../watchdog/observe.ts";
import { isQuiet, type Plan } from "../watchdog/plan.ts";
import type { EventRecorder } from "./events.ts";
import type { Decision } from "./plan-run.ts";

export interface Executed {
  plan: Plan;
  /** The run as it stands after the plan's writes, when there was one. */
  run?: Json;
  /** When the last planned pod deletion was accepted by the API server (ms since epoch). */
  deletedAt?: number;
  /** The pods whose deletion the API server accepted (or that were gone already); not yet confirmed gone. */
  deletedPods?: string[];
  /** Pods as the API server answered their create or delete, for the cache to show until it catches up. */
  podsWritten?: Json[];
  /** The plan's annotations were left for a later reconcile (see mirrorOnly and mayDeferMirror). */
  annotationsDeferred?: boolean;
}

/** The annotations that mirror status: the attempt, and the backoff that a new attempt clears. */
const MIRROR_ANNOTATIONS: ReadonlySet<string> = new Set([ANNOTATIONS.attempt, ANNOTATIONS.retryAfter, ANNOTATIONS.backoffReason]);

/**
 * Whether a plan's annotation write only catches the mirror up with status (the attempt number a
 * status write already holds, a backoff that is over), so that it may trail: every later decision
 * re-diffs it. A retry-after being set is never such a write: it is the durable wake-up.
 */
function mirrorOnly(annotations: Plan["annotations"]): boolean {
  if (!annotations) return false;
  return Object.entries(annotations).every(([key, value]) => key === ANNOTATIONS.attempt || (MIRROR_ANNOTATIONS.has(key) && value === null));
}

/**
 * The API server refused a run's status write for what it held: the write will never be taken as
 * it is. The caller tells the next decision (DecideInput.refusedWrite).
 */
export class StatusWriteRefused extends Error {
  readonly tooLarge: boolean;
  constructor(cause: ApiError) {
    super(cutToCodePoints(cause.message, 512), { cause });
    this.name = "StatusWriteRefused";
    this.tooLarge = cause.code === 413 || /too large/i.test(cause.message);
  }
}

/** A refusal of what a write held, as opposed to a conflict, an overload or an outage. */
export function refusedForContent(err: unknown): err is ApiError {
  if (!(err instanceof ApiError)) return false;
  return err.code === 400 || err.code === 413 || err.code === 422 || (err.code === 500 && /too large/i.test(err.message));
}

/**
 * What one reconcile runs under: the operator's stop (a long-lived signal, shared) and its own
 * deadline. A plain deadline rather than a timer signal per reconcile: a heartbeat-only update is
 * a reconcile too, thousands a second at scale.
 */
export interface ReconcileContext {
  signal: AbortSignal;
  /** ms since the epoch, this machine's clock (a span of the reconcile, not a run's deadline). */
  deadline: number;
}

/** Thrown instead of writing when a reconcile has run past its deadline. */
export class ReconcileDeadlineExceeded extends Error {
  constructor(deadline: number) {
    super(`the reconcile ran past its deadline (${new Date(deadline).toISOString()}): writes are stopped`);
    this.name = "ReconcileDeadlineExceeded";
  }
}

/** Thrown instead of writing when this replica no longer leads. */
export class NotLeaderError extends Error {
  constructor() {
    super("not the leader: writes are stopped");
    this.name = "NotLeaderError";
  }
}

export interface ExecutorOptions {
  /** Whether this replica may write now (it leads); asked before every write. */
  canWrite?: () => boolean;
  /**
   * Whether a run's mirror annotations (see mirrorOnly) may be left for a later reconcile, which
   * the caller then owes the run (Executed.annotationsDeferred).
   */
  mayDeferMirror?: (key: string) => boolean;
  /** The API server's clock, for when deletions were accepted. */
  clock?: () => number;
}

export class Executor {
  private readonly client: KubeClient;
  private readonly recorder: EventRecorder;
  private readonly canWrite: () => boolean;
  private readonly mayDeferMirror: (key: string) => boolean;
  private readonly clock: () => number;

  constructor(client: KubeClient, recorder: EventRecorder, options: ExecutorOptions = {}) {
    this.client = client;
    this.recorder = recorder;
    this.canWrite = options.canWrite ?? (() => true);
    this.mayDeferMirror = options.mayDeferMirror ?? (() => false);
    this.clock = options.clock ?? Date.now;
  }

  /** Before every write: this replica still leads, and the reconcile is neither stopped nor past its deadline. */
  private guard(context?: ReconcileContext): void {
    context?.signal.throwIfAborted();
    if (context && Date.now() > context.deadline) throw new ReconcileDeadlineExceeded(context.deadline);
    if (!this.canWrite()) throw new NotLeaderError();
  }

  /**
   * Carries out a plan on the run and pods it was made from, and never decides: a write refused
   * because they were stale (a conflict) is thrown to the caller, which decides again after a
   * backoff, from a cache that has caught up by then. `podCreated` is called once the plan's pod
   * exists, before the writes that follow it. Nothing is written once the context is stopped or
   * past its deadline.
   */
  async execute(decision: Decision, log: Logger, podCreated: () => void = () => {}, context?: ReconcileContext): Promise<Executed> {
    if (isQuiet(decision.plan)) return { plan: decision.plan, run: decision.run };
    return this.apply(decision, log, podCreated, context);
  }

  private async apply({ run, pods, plan }: Decision, log: Logger, podCreated: () => void, context?: ReconcileContext): Promise<Executed> {
    const meta = run.metadata as { name: string; namespace: string; resourceVersion: string; uid: string; finalizers?: string[] };
    let current = run;
    const result: Executed = { plan, run };
    let status = plan.status;
    const versionOf = (o: Json) => (o.metadata as { resourceVersion: string }).resourceVersion;
    let annotationsDone = false;

    if (plan.finalizer === "add") {
      // Before the pod exists: a run deleted from here on stays until its sandbox is gone. The
      // attempt annotation goes with it, so a start still costs three requests.
      this.guard(context);
      current = await this.client.mergePatch(paths.run(meta.namespace, meta.name), {
        metadata: { resourceVersion: meta.resourceVersion, finalizers: [...(meta.finalizers ?? []).filter((f) => f !== FINALIZER), FINALIZER], ...(plan.annotations ? { annotations: plan.annotations } : {}) },
      });
      result.run = current;
      annotationsDone = true;
    }

    if (plan.createPod) {
      // Only the run's own pods count (owner uid): an earlier run's pod of the same name is not it.
      const live = pods.map((p) => podView(p)).filter((p) => p.ownerUid === meta.uid && isLive(p));
      if (live.length > 0) throw new ApiError("POST", "pods", 409, { reason: "Conflict", message: `live pods ${live.map((p) => p.name).join(",")} exist` });
      for (const object of plan.prerequisites ?? []) {
        this.guard(context);
        await this.ensure(object);
      }
      let created: Json;
      try {
        this.guard(context);
        created = await this.client.create(paths.pods(meta.namespace), plan.createPod);
      } catch (err) {
        // Its ServiceAccount may have been deleted since it was made: make it again next time.
        this.ensured.clear();
        if (!isAlreadyExists(err)) throw err;
        // Created by an earlier try whose status write was lost: fine if it is this run's pod of
        // this attempt (by the owner's uid, never by name alone).
        created = await this.client.get(paths.pod(meta.namespace, plan.createPod.metadata.name));
        const existing = podView(created);
        if (existing.ownerUid !== meta.uid || existing.attempt !== Number(plan.createPod.metadata.labels[LABELS.attempt])) {
          throw new Error(`pod ${plan.createPod.metadata.name} exists and does not belong to this run`, { cause: err });
        }
      }
      // The status that names the pod names its uid too: admission fences sandbox writes by it.
      const uid = (created.metadata as { uid?: string }).uid;
      if (uid) status = { ...(status ?? {}), podUID: uid };
      result.podsWritten = [created];
      log.info({ pod: plan.createPod.metadata.name, uid }, "created sandbox pod");
      podCreated();
    }

    if (status) {
      try {
        this.guard(context);
        current = await this.client.mergePatch(paths.runStatus(meta.namespace, meta.name), {
          metadata: { resourceVersion: versionOf(current) },
          status,
        });
        result.run = current;
      } catch (err) {
        // No deletion behind a write that failed: the next decision, from a fresh read, decides
        // again (a conflict or an outage), or is told the API server will never take it.
        if (refusedForContent(err)) {
          log.error({ err: String(err) }, "status write refused for what it held; the next decision stops the run for a person");
          throw new StatusWriteRefused(err);
        }
        throw err;
      }
    }
    this.guard(context);
    // A status write that was accepted shows the run was current; without one, the annotations
    // carry the precondition themselves, so that a stale run cannot move an attempt back. The
    // finalizer comes off only with the precondition: the list is replaced as a whole.
    const removeFinalizer = plan.finalizer === "remove";
    const precondition = status && !removeFinalizer ? {} : { resourceVersion: versionOf(current) };
    const deferred = !annotationsDone && !removeFinalizer && mirrorOnly(plan.annotations) && this.mayDeferMirror(`${meta.namespace}/${meta.name}`);
    if (deferred) result.annotationsDeferred = true;
    const annotations = plan.annotations && !annotationsDone && !deferred ? { annotations: plan.annotations } : {};
    const finalizers = removeFinalizer ? { finalizers: (meta.finalizers ?? []).filter((f) => f !== FINALIZER) } : {};
    const metadata = Object.keys(annotations).length || removeFinalizer ? { ...precondition, ...annotations, ...finalizers } : undefined;
    const [deleted, annotated] = await Promise.all([
      this.deletePods(meta.namespace, plan.deletePods, log, context),
      metadata ? this.client.mergePatch(paths.run(meta.namespace, meta.name), { metadata }) : undefined,
    ]);
    if (deleted) {
      const { podsWritten, ...rest } = deleted;
      Object.assign(result, rest);
      if (podsWritten.length) result.podsWritten = [...(result.podsWritten ?? []), ...podsWritten];
    }
    if (annotated) current = result.run = annotated;
    for (const event of plan.events) this.recorder.record(current, event);
    return result;
  }

  /**
   * Asks for the plan's pods to be deleted, gracefully: a kill with the run's killGracePeriod,
   * anything else with the pod's own grace. Says when the last request was accepted. The pods are
   * not gone yet: the core confirms that later, from what the kubelet reports (rule 9).
   */
  private async deletePods(
    namespace: string,
    deletions: Plan["deletePods"],
    log: Logger,
    context?: ReconcileContext,
  ): Promise<{ deletedAt: number; deletedPods: string[]; podsWritten: Json[] } | undefined> {
    if (deletions.length === 0) return undefined;
    const gone: string[] = [];
    const podsWritten: Json[] = [];
    for (const deletion of deletions) {
      try {
        this.guard(context);
        const answer = await this.client.delete<Json>(paths.pod(namespace, deletion.name), {
          apiVersion: "v1",
          kind: "DeleteOptions",
          ...(deletion.gracePeriodSeconds !== undefined ? { gracePeriodSeconds: Math.max(1, deletion.gracePeriodSeconds) } : {}),
          ...(deletion.uid ? { preconditions: { uid: deletion.uid } } : {}),
        });
        log.info({ pod: deletion.name, gracePeriodSeconds: deletion.gracePeriodSeconds ?? "the pod's own" }, "deleted sandbox pod");
        gone.push(deletion.name);
        // A graceful delete answers with the pod, now terminating (a Status when it is gone at once).
        if (answer?.kind === "Pod") podsWritten.push(answer);
      } catch (err) {
        // Gone already, or replaced by a newer pod of the same name (uid precondition): either way
        // the pod this plan meant is not running.
        if (isNotFound(err)) gone.push(deletion.name);
        else if (!isConflict(err)) throw err;
      }
    }
    return { deletedAt: this.clock(), deletedPods: gone, podsWritten };
  }

  /**
   * Shared objects (a namespace's sandbox ServiceAccount and RoleBinding) known to exist, so that
   * each pod create does not first ask for them again; per-run objects are made once anyway.
   */
  private readonly ensured = new Set<string>();

  /** Creates an object the sandbox pod needs unless it already exists. */
  private async ensure(object: Json): Promise<void> {
    const meta = object.metadata as { namespace: string; name: string; ownerReferences?: unknown[] };
    const key = `${String(object.kind)}/${meta.namespace}/${meta.name}`;
    const shared = !meta.ownerReferences?.length;
    if (shared && this.ensured.has(key)) return;
    const collection =
      object.kind === "ServiceAccount"
        ? `/api/v1/namespaces/${meta.namespace}/serviceaccounts`
        : `/apis/rbac.authorization.k8s.io/v1/namespaces/${meta.namespace}/${object.kind === "Role" ? "roles" : "rolebindings"}`;
    try {
      await this.client.create(collection, object);
    } catch (err) {
      if (!isAlreadyExists(err)) throw err;
    }
    if (shared) this.ensured.add(key);
  }
}
