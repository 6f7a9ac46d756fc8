// The in-memory world behind a Kubernetes API of its own, for the real Executor: reads, creates,
// merge patches (status and metadata, with resourceVersion preconditions) and graceful deletes
// (with uid preconditions) act on the world's run and pods as the API server would, and any of
// them can be made to fail, or to race with a sandbox's write, once. The world's checks on every
// pod create and delete (test/unit/world.ts) then hold the executor to the guarantees.
import type { Logger } from "pino";
import { LABELS } from "../../../operator/api/annotations.ts";
import { parseDuration } from "../../../operator/api/duration.ts";
import type { EventRecorder } from "../../../operator/controller/events.ts";
import { Executor, StatusWriteRefused } from "../../../operator/controller/executor.ts";
import { planRun } from "../../../operator/controller/plan-run.ts";
import { ApiError, paths, type KubeClient } from "../../../operator/kube/client.ts";
import { applyMergePatch } from "../../../operator/watchdog/merge-patch.ts";
import { isQuiet, type Plan } from "../../../operator/watchdog/plan.ts";
import { World } from "../world.ts";

type Json = Record<string, any>;

/** The API requests the executor makes, by what they do. */
export type Operation = "readRun" | "listPods" | "readPod" | "createPod" | "writeStatus" | "writeMetadata" | "deletePod";

/** What the API server does to one request: refuse it with a code, or let a sandbox write first. */
export type Fault = { operation: Operation; code: number } | { operation: Operation; race: true };

const NS = "ns";
const NAME = "r";

/** What a plan made from the cache was made from. */
export interface Snapshot {
  run: Json;
  pods: Json[];
  /** Taken before the last change: the cache lags behind the API server. */
  stale: boolean;
}

const silent = { debug() {}, info() {}, warn() {}, error() {} } as unknown as Logger;

export class ApiWorld extends World {
  /** The next request of this kind meets this fault (once). */
  fault?: Fault;
  /** Faults that struck, in order, for the reader of a failed case. */
  struck: string[] = [];
  /** The last status write the API server refused for what it held, for the next decision. */
  private refused?: { message: string; tooLarge: boolean };
  private version = 0;
  private lastSeen = "";
  /** Whether a plan made from the cache may take its pods as complete (Controller.cacheCurrent). */
  trustCache = false;

  /** When the API server accepted each attempt's newest heartbeat (its clock, to the ms). */
  private readonly heartbeatAccepted = new Map<number, number>();

  override heartbeat(...args: Parameters<World["heartbeat"]>): void {
    super.heartbeat(...args);
    const attempt = this.status.heartbeat?.attempt;
    if (typeof attempt === "number") this.heartbeatAccepted.set(attempt, this.now);
  }

  /**
   * A kill as hung (rule 2) is taken only while the attempt's newest accepted heartbeat is at least
   * a timeout old: a plan made before that heartbeat must lose to it (the write's precondition).
   */
  private checkKill(patch: Json): void {
    const failure = patch.status?.lastFailure;
    if (failure?.reason !== "HeartbeatTimeout" || typeof failure.attempt !== "number") return;
    // A heartbeat the sandbox has since overwritten (with garbage, say) is no longer its report.
    if (this.run.status?.heartbeat?.attempt !== failure.attempt) return;
    const accepted = this.heartbeatAccepted.get(failure.attempt);
    const timeout = parseDuration(String(this.run.status?.watchdog?.heartbeatTimeout ?? patch.status?.watchdog?.heartbeatTimeout ?? "0s"));
    if (accepted !== undefined && this.now < accepted + timeout) {
      this.violations.push(`attempt ${failure.attempt} killed as hung ${(this.now - accepted) / 1000} s after a heartbeat the API server had accepted (timeout ${timeout / 1000} s)`);
    }
  }

  /** The run's resourceVersion: it moves whenever anything in the run changed, by whoever. */
  private resourceVersion(): string {
    const now = JSON.stringify({ ...this.run, metadata: { ...this.run.metadata, resourceVersion: undefined } });
    if (now !== this.lastSeen) {
      this.lastSeen = now;
      this.version++;
    }
    return String(this.version);
  }

  private runObject(): Json {
    return structuredClone({ ...this.run, metadata: { ...this.run.metadata, resourceVersion: this.resourceVersion() } });
  }

  /** Every request the executor made, in order, and what became of it. */
  requests: string[] = [];

  /** Meets the fault set for this operation, if any: a refusal, or a sandbox's write first. */
  private meet(operation: Operation, path: string): void {
    this.requests.push(operation);
    const fault = this.fault;
    if (!fault || fault.operation !== operation) return;
    this.fault = undefined;
    if ("race" in fault) {
      this.struck.push(`${operation}: a heartbeat landed first`);
      this.heartbeat("Planning", { kind: "delta" });
      return;
    }
    this.struck.push(`${operation}: ${fault.code}`);
    this.requests.push(`${operation} refused ${fault.code}`);
    const reason = fault.code === 409 ? "Conflict" : fault.code === 422 ? "Invalid" : fault.code === 429 ? "TooManyRequests" : "InternalError";
    throw new ApiError(operation === "readRun" || operation === "listPods" || operation === "readPod" ? "GET" : "PATCH", path, fault.code, { reason, message: `injected ${fault.code}` });
  }

  private notFound(method: string, path: string): never {
    throw new ApiError(method, path, 404, { reason: "NotFound", message: "not found" });
  }

  private precondition(method: string, path: string, metadata: Json | undefined): void {
    if (metadata?.resourceVersion !== undefined && metadata.resourceVersion !== this.resourceVersion()) {
      throw new ApiError(method, path, 409, { reason: "Conflict", message: "the object has been modified" });
    }
  }

  /** The API server, as far as the executor uses it. */
  readonly client = {
    get: async (path: string, query?: Json): Promise<Json> => {
      if (path === paths.run(NS, NAME)) {
        this.meet("readRun", path);
        if (this.runGone) this.notFound("GET", path);
        return this.runObject();
      }
      if (path === paths.pods(NS)) {
        this.meet("listPods", path);
        const selector = String(query?.labelSelector ?? "");
        const items = [...this.pods.values()].filter((p) => selector === `${LABELS.run}=${NAME}` && p.metadata.labels?.[LABELS.run] === NAME);
        return { items: structuredClone(items) };
      }
      const pod = this.pods.get(path.slice(paths.pods(NS).length + 1));
      this.meet("readPod", path);
      if (!pod) this.notFound("GET", path);
      return structuredClone(pod);
    },
    create: async (path: string, body: Json): Promise<Json> => {
      if (path !== paths.pods(NS)) return structuredClone(body); // a sandbox identity's prerequisites
      this.meet("createPod", path);
      if (this.pods.has(body.metadata.name)) throw new ApiError("POST", path, 409, { reason: "AlreadyExists", message: "already exists" });
      return structuredClone(this.createPod(body));
    },
    mergePatch: async (path: string, patch: Json): Promise<Json> => {
      if (this.runGone) this.notFound("PATCH", path);
      if (path === paths.runStatus(NS, NAME)) {
        this.meet("writeStatus", path);
        this.precondition("PATCH", path, patch.metadata);
        this.checkKill(patch);
        this.run.status = applyMergePatch(this.run.status ?? {}, patch.status ?? {});
        return this.runObject();
      }
      this.meet("writeMetadata", path);
      this.precondition("PATCH", path, patch.metadata);
      const metadata = patch.metadata ?? {};
      if (metadata.annotations) this.run.metadata.annotations = applyMergePatch(this.run.metadata.annotations ?? {}, metadata.annotations);
      if (metadata.finalizers) {
        this.run.metadata.finalizers = [...metadata.finalizers];
        if (this.run.metadata.deletionTimestamp && metadata.finalizers.length === 0) this.runGone = true;
      }
      return this.runObject();
    },
    delete: async (path: string, body?: Json): Promise<Json> => {
      this.meet("deletePod", path);
      const pod = this.pods.get(path.slice(paths.pods(NS).length + 1));
      if (!pod) this.notFound("DELETE", path);
      if (body?.preconditions?.uid !== undefined && body.preconditions.uid !== pod.metadata.uid) {
        throw new ApiError("DELETE", path, 409, { reason: "Conflict", message: "Precondition failed: UID in precondition" });
      }
      this.requestPodDeletion(pod, body?.gracePeriodSeconds);
      const after = this.pods.get(pod.metadata.name);
      return after ? structuredClone(after) : { kind: "Status", status: "Success" };
    },
  };

  /**
   * One reconcile through the real executor, as the controller runs it: from a plan made on the
   * cache (`cached`) or from a live read. A refusal for content is told to the next decision; any
   * other failure leaves the run for the next try.
   */
  async reconcileThroughExecutor(cached?: Snapshot): Promise<Plan | undefined> {
    this.observe();
    // The pods the run's status tracks that lost its label are looked up by name (tracked.ts): here,
    // every pod without the label is one of this run's.
    const detachedPods = [...this.pods.values()].filter((p) => p.metadata.labels?.[LABELS.run] !== NAME).map((p) => structuredClone(p));
    const inputs = { ...this.decideInputs(), ...(detachedPods.length ? { detachedPods } : {}), ...(this.refused ? { refusedWrite: this.refused } : {}) };
    const executor = new Executor(this.client as unknown as KubeClient, { record() {} } as unknown as EventRecorder, { clock: () => this.now });
    const listPods = () => this.client.get(paths.pods(NS), { labelSelector: `${LABELS.run}=${NAME}` }).then((list) => list.items as Json[]);
    try {
      // What the controller's cache holds, or what a fresh read shows (then the pods are complete).
      const seen = cached ?? { run: await this.client.get(paths.run(NS, NAME)), pods: await listPods(), stale: false };
      // Only a cache known to hold every pod is trusted (Controller.cacheCurrent): never a stale one.
      const podsComplete = () => (cached ? this.trustCache && !cached.stale : true);
      const decision = await planRun(seen.run, seen.pods, { now: () => this.now, inputs: () => inputs, podsComplete, listPods });
      const executed = await executor.execute(decision, silent);
      this.refused = undefined;
      this.plans.push(executed.plan);
      // Carried out means carried out: every pod the plan deleted is terminating or gone, unless
      // its name now belongs to another pod (the uid precondition refused the delete).
      for (const deletion of executed.plan.deletePods) {
        const pod = this.pods.get(deletion.name);
        if (pod && !pod.metadata.deletionTimestamp && (!deletion.uid || pod.metadata.uid === deletion.uid)) {
          this.violations.push(`the executor reported a plan done while its pod ${deletion.name} was not deleted`);
        }
      }
      return executed.plan;
    } catch (err) {
      if (err instanceof StatusWriteRefused) this.refused = { message: err.message, tooLarge: err.tooLarge };
      else if (!(err instanceof ApiError)) throw err;
      return undefined;
    }
  }

  /** Reconciles until a plan is quiet, as the controller does while its writes cause events. */
  async settleThroughExecutor(cached?: Snapshot, max = 10): Promise<void> {
    for (let i = 0; i < max; i++) {
      if (this.runGone) return;
      const plan = await this.reconcileThroughExecutor(i === 0 ? cached : undefined);
      if (plan && isQuiet(plan)) return;
    }
  }

  /** The run and its pods as an informer's cache holds them now; `stale` once the world moved on. */
  snapshot(stale = false): Snapshot {
    return {
      run: this.runObject(),
      pods: [...this.pods.values()].filter((p) => p.metadata.labels?.[LABELS.run] === NAME).map((p) => structuredClone(p)),
      stale,
    };
  }
}
