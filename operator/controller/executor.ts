// Carries out the core's plans against the API server, in an order that keeps every prefix safe:
// - a new sandbox pod is created only after a live list shows no other live pod of the run, and
//   before the status that names it (a lost status write is repaired by adopting the pod);
// - otherwise the status goes first, guarded by the resourceVersion the plan was made from, so a
//   decision based on an old heartbeat loses to the newer heartbeat. Pod deletions come right
//   after it (detection latency is measured to them), alongside the annotation write: the
//   annotations mirror the status and every later decision re-diffs them, so either may land
//   first. Events come last, sent in the background.
// Plans are always recomputed from a fresh read (the run and its pods, fetched together) before
// they are executed.
import type { Logger } from "pino";
import { LABELS } from "../api/annotations.ts";
import type { InstallDefaults } from "../api/defaults.ts";
import { ApiError, isAlreadyExists, isConflict, isNotFound, paths, type Json, type KubeClient } from "../kube/client.ts";
import { decide } from "../watchdog/decide.ts";
import { isLive, podView } from "../watchdog/observe.ts";
import { DEFAULT_SANDBOX_IDENTITY, type SandboxIdentity } from "../watchdog/sandbox-identity.ts";
import { isQuiet, type Plan } from "../watchdog/plan.ts";
import type { EventRecorder } from "./events.ts";

export interface Executed {
  plan: Plan;
  /** The run as it stands after the plan's writes, when there was one. */
  run?: Json;
  /** Runs whose object is gone. */
  gone?: boolean;
  /** When each planned pod deletion was confirmed by the API server (ms since epoch). */
  deletedAt?: number;
  /** The pods the API server confirmed gone (or already gone), not ones replaced under the same name. */
  deletedPods?: string[];
}

const MAX_CONFLICT_RETRIES = 5;

export class Executor {
  private readonly client: KubeClient;
  private readonly recorder: EventRecorder;
  private readonly defaults: () => InstallDefaults | undefined;
  private readonly sandbox: SandboxIdentity;
  private readonly clock: () => number;

  constructor(
    client: KubeClient,
    recorder: EventRecorder,
    defaults: () => InstallDefaults | undefined,
    sandbox: SandboxIdentity = DEFAULT_SANDBOX_IDENTITY,
    clock: () => number = Date.now,
  ) {
    this.client = client;
    this.recorder = recorder;
    this.defaults = defaults;
    this.sandbox = sandbox;
    this.clock = clock;
  }

  /** Reads the run and its pods live, decides again and carries out what that says. */
  async execute(namespace: string, name: string, log: Logger): Promise<Executed> {
    for (let attempt = 0; ; attempt++) {
      let run: Json;
      let pods: { items: Json[] };
      try {
        [run, pods] = await Promise.all([
          this.client.get(paths.run(namespace, name)),
          this.client.get<{ items: Json[] }>(paths.pods(namespace), { labelSelector: `${LABELS.run}=${name}` }),
        ]);
      } catch (err) {
        if (isNotFound(err)) return { plan: { deletePods: [], events: [], metrics: [], phase: "Queued", summary: "run is gone" }, gone: true };
        throw err;
      }
      const plan = decide({ run, pods: pods.items, now: this.clock(), defaults: this.defaults(), sandbox: this.sandbox });
      if (isQuiet(plan)) return { plan, run };
      try {
        return await this.apply(run, pods.items, plan, log);
      } catch (err) {
        if (isConflict(err) && !isAlreadyExists(err) && attempt < MAX_CONFLICT_RETRIES) {
          log.debug({ attempt }, "conflict; deciding again from a fresh read");
          continue;
        }
        throw err;
      }
    }
  }

  private async apply(run: Json, pods: Json[], plan: Plan, log: Logger): Promise<Executed> {
    const meta = run.metadata as { name: string; namespace: string; resourceVersion: string };
    let current = run;
    const result: Executed = { plan, run };

    if (plan.createPod) {
      const live = pods.map(podView).filter(isLive);
      if (live.length > 0) throw new ApiError("POST", "pods", 409, { reason: "Conflict", message: `live pods ${live.map((p) => p.name).join(",")} exist` });
      for (const object of plan.prerequisites ?? []) await this.ensure(object);
      try {
        await this.client.create(paths.pods(meta.namespace), plan.createPod);
      } catch (err) {
        if (!isAlreadyExists(err)) throw err;
        // Created by an earlier try whose status write was lost: fine if it is this attempt's pod.
        const existing = await this.client.get(paths.pod(meta.namespace, plan.createPod.metadata.name));
        const labels = (existing.metadata as { labels?: Record<string, string> }).labels ?? {};
        if (labels[LABELS.run] !== meta.name || labels[LABELS.attempt] !== plan.createPod.metadata.labels[LABELS.attempt]) {
          throw new Error(`pod ${plan.createPod.metadata.name} exists and does not belong to this run`, { cause: err });
        }
      }
      log.info({ pod: plan.createPod.metadata.name }, "created sandbox pod");
    }

    if (plan.status) {
      current = await this.client.mergePatch(paths.runStatus(meta.namespace, meta.name), {
        metadata: { resourceVersion: meta.resourceVersion },
        status: plan.status,
      });
      result.run = current;
    }
    const [deleted, annotated] = await Promise.all([
      this.deletePods(meta.namespace, plan.deletePods, log),
      plan.annotations ? this.client.mergePatch(paths.run(meta.namespace, meta.name), { metadata: { annotations: plan.annotations } }) : undefined,
    ]);
    if (deleted) Object.assign(result, deleted);
    if (annotated) current = result.run = annotated;
    for (const event of plan.events) this.recorder.record(current, event);
    return result;
  }

  /** Deletes the plan's pods at once (grace 0), and says when the last deletion was confirmed. */
  private async deletePods(namespace: string, deletions: Plan["deletePods"], log: Logger): Promise<Pick<Executed, "deletedAt" | "deletedPods"> | undefined> {
    if (deletions.length === 0) return undefined;
    const gone: string[] = [];
    for (const deletion of deletions) {
      try {
        await this.client.delete(paths.pod(namespace, deletion.name), {
          apiVersion: "v1",
          kind: "DeleteOptions",
          gracePeriodSeconds: 0,
          ...(deletion.uid ? { preconditions: { uid: deletion.uid } } : {}),
        });
        log.info({ pod: deletion.name }, "deleted sandbox pod");
        gone.push(deletion.name);
      } catch (err) {
        // Gone already, or replaced by a newer pod of the same name (uid precondition): either way
        // the pod this plan meant is not running.
        if (isNotFound(err)) gone.push(deletion.name);
        else if (!isConflict(err)) throw err;
      }
    }
    return { deletedAt: this.clock(), deletedPods: gone };
  }

  /** Creates an object the sandbox pod needs unless it already exists. */
  private async ensure(object: Json): Promise<void> {
    const meta = object.metadata as { namespace: string; name: string };
    const collection =
      object.kind === "ServiceAccount"
        ? `/api/v1/namespaces/${meta.namespace}/serviceaccounts`
        : `/apis/rbac.authorization.k8s.io/v1/namespaces/${meta.namespace}/${object.kind === "Role" ? "roles" : "rolebindings"}`;
    try {
      await this.client.create(collection, object);
    } catch (err) {
      if (!isAlreadyExists(err)) throw err;
    }
  }
}
