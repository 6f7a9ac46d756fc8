// A tiny in-memory cluster for the pure core: it applies plans the way the controller does
// (status merge patch, annotation patch, graceful pod deletes, pod create) and records what
// happened, so tests can play the sandbox, the kubelet and the API server against `decide`
// without an API server. The API server stamps each heartbeat write into managedFields with its
// own clock (whole seconds), as the real one does; the sandbox's clock may be off.
import { decide, type DecideInput } from "../../operator/watchdog/decide.ts";
import { believe, livenessFacts, type LivenessMemory } from "../../operator/watchdog/liveness.ts";
import { isLive, podView, type NodeView } from "../../operator/watchdog/observe.ts";
import { applyMergePatch } from "../../operator/watchdog/merge-patch.ts";
import type { Plan } from "../../operator/watchdog/plan.ts";
import type { InstallDefaults } from "../../operator/api/defaults.ts";
import { FINALIZER, LABELS } from "../../operator/api/annotations.ts";
import { T0, heartbeatManagedFields, iso, run as makeRun } from "./fixtures.ts";

type Json = Record<string, any>;

/** What the node does with a deleted pod. */
export type Kubelet =
  /** stops its containers at once: terminal phase, then the object goes (the kubelet's final delete) */
  | "prompt"
  /** leaves it terminating, containers running, until finalizePods() */
  | "slow"
  /** the node is cut off: deleted pods stay terminating and running; the node is not Ready */
  | "cutOff";

export const NODE = "node-1";

export class World {
  now = T0;
  run: Json;
  pods = new Map<string, Json>();
  /** Final states of pods whose objects disappeared, as the controller's watch saw them. */
  tombstones: Json[] = [];
  plans: Plan[] = [];
  created: { name: string; at: number; attempt: number }[] = [];
  deleted: { name: string; at: number; grace?: number }[] = [];
  violations: string[] = [];
  kubelet: Kubelet = "prompt";
  /** The sandbox's clock minus the server's. */
  sandboxClockSkewMs = 0;
  /** The node's clock minus the server's: what the kubelet writes as a container's startedAt. */
  nodeClockSkewMs = 0;
  /** The run object is gone (deleted, and no finalizer held it). */
  runGone = false;
  /** When the node's kubelet last renewed its Lease (server clock). */
  nodeContact = T0;
  /**
   * Containers of pods whose objects were force-deleted while their node could not stop them: they
   * run on until the node's kubelet, in contact again, kills them (at diesAt).
   */
  orphans: { name: string; diesAt?: number }[] = [];
  defaults: InstallDefaults | undefined;

  constructor(spec: Json = {}, defaults?: InstallDefaults) {
    this.run = makeRun({ spec });
    this.defaults = defaults;
  }

  get status(): Json {
    return this.run.status ?? {};
  }
  get annotations(): Record<string, string> {
    return this.run.metadata.annotations ?? {};
  }
  get livePods(): Json[] {
    return [...this.pods.values()].filter((p) => isLive(podView(p)));
  }
  currentPod(): Json | undefined {
    return this.pods.get(this.status.podName);
  }
  /** The name the run's attempt n runs under. */
  podName(attempt: number): string {
    return `r-${attempt}-uidr`;
  }

  advance(ms: number): void {
    this.now += ms;
    if (this.kubelet !== "cutOff") this.nodeContact = this.now;
    this.orphans = this.orphans.filter((o) => o.diesAt === undefined || o.diesAt > this.now);
  }

  /** The node is in contact again: its kubelet stops, within a couple of seconds, what the API no longer has. */
  nodeBack(): void {
    this.kubelet = "prompt";
    for (const o of this.orphans) o.diesAt ??= this.now + 2_000;
    this.finalizePods();
    this.advance(0);
  }

  nodes(): Map<string, NodeView> {
    const cutOff = this.kubelet === "cutOff";
    return new Map([[NODE, { name: NODE, ready: cutOff ? "Unknown" : "True", outOfService: false, lastContact: this.nodeContact }]]);
  }

  /** What the controller remembers of the current attempt's liveness, from every change it saw. */
  private liveness: LivenessMemory | undefined;
  /** When the controller first saw each pod's agent running (its own sight, as the controller keeps it). */
  private agentStartsSeen = new Map<string, number>();
  /** Whether the controller is watching: a restarted operator saw nothing of what came before. */
  watching = true;
  protected observe(): void {
    const facts = livenessFacts(this.run, undefined);
    this.liveness = facts ? believe(facts, this.liveness).memory : undefined;
    if (!this.watching) return;
    for (const pod of this.pods.values()) {
      const view = podView(pod);
      if (view.uid && view.agent.startedAt !== undefined && !this.agentStartsSeen.has(view.uid)) this.agentStartsSeen.set(view.uid, this.now);
    }
  }
  /** The operator restarts: it remembers nothing it saw. */
  restartOperator(): void {
    this.liveness = undefined;
    this.agentStartsSeen = new Map();
  }

  /** What the controller gives the core beside the run, its pods and the time (inputs.ts). */
  protected decideInputs(): Omit<DecideInput, "run" | "pods" | "now"> {
    return {
      defaults: this.defaults,
      deletedPods: structuredClone(this.tombstones),
      nodes: this.nodes(),
      containerStartsSeen: new Map([...this.agentStartsSeen].map(([uid, at]) => [uid, new Map([["agent", at]])])),
      ...(this.liveness ? { liveness: this.liveness } : {}),
    };
  }

  /** Runs the core once and applies its plan. */
  reconcile(): Plan {
    this.observe();
    const plan = decide({ run: structuredClone(this.run), pods: [...this.pods.values()].map((p) => structuredClone(p)), now: this.now, ...this.decideInputs() });
    this.apply(plan);
    this.plans.push(plan);
    return plan;
  }

  /** Reconciles until the plan is quiet (what the controller does as writes trigger watch events). */
  settle(max = 10): Plan {
    let plan = this.reconcile();
    for (let i = 0; i < max && (plan.status || plan.annotations || plan.createPod || plan.deletePods.length); i++) {
      plan = this.reconcile();
    }
    return plan;
  }

  /** Reconciles at each wake-up until `until`, as the controller's timers would. */
  runUntil(until: number, max = 1000): void {
    this.settle();
    for (let i = 0; i < max; i++) {
      const wake = this.plans.at(-1)?.wakeAt;
      if (wake === undefined || wake > until) break;
      this.advance(Math.max(0, wake - this.now));
      this.settle();
    }
    this.advance(Math.max(0, until - this.now));
    this.settle();
  }

  private apply(plan: Plan): void {
    if (this.runGone) return;
    if (plan.finalizer === "add") this.run.metadata.finalizers = [...(this.run.metadata.finalizers ?? []), FINALIZER];
    if (plan.status) this.run.status = applyMergePatch(this.run.status ?? {}, plan.status);
    if (plan.annotations) {
      const annotations = { ...this.annotations };
      for (const [key, value] of Object.entries(plan.annotations)) {
        if (value === null) delete annotations[key];
        else annotations[key] = value;
      }
      this.run.metadata.annotations = annotations;
    }
    for (const deletion of plan.deletePods) {
      const pod = this.pods.get(deletion.name);
      if (!pod || (deletion.uid && pod.metadata.uid !== deletion.uid)) continue;
      this.requestPodDeletion(pod, deletion.gracePeriodSeconds);
    }
    if (plan.createPod) {
      if (this.pods.has(plan.createPod.metadata.name)) {
        this.violations.push(`pod ${plan.createPod.metadata.name} already exists`);
        return;
      }
      const created = this.createPod(plan.createPod);
      // The executor writes the new pod's uid with the status that names it.
      if (plan.status) this.run.status = { ...this.run.status, podUID: created.metadata.uid };
    }
    if (plan.finalizer === "remove") {
      if (this.livePods.length > 0 || this.orphans.length > 0) this.violations.push("removed the finalizer while a sandbox may run");
      this.run.metadata.finalizers = (this.run.metadata.finalizers ?? []).filter((f: string) => f !== FINALIZER);
      if (this.run.metadata.deletionTimestamp && this.run.metadata.finalizers.length === 0) this.runGone = true;
    }
  }

  /**
   * The API server and the scheduler take a new pod: bound to the node, Pending. Whatever made it,
   * the guarantees a create must keep are checked here (never two sandboxes, none before
   * retry-after, none without the finalizer, none for a run deleted or suspended).
   */
  createPod(manifest: Json): Json {
    const name = manifest.metadata.name as string;
    if (this.livePods.length > 0) this.violations.push(`created ${name} while ${this.livePods.map((p) => p.metadata.name).join(",")} live`);
    if (this.orphans.length > 0) this.violations.push(`created ${name} while the containers of ${this.orphans.map((o) => o.name).join(",")} still run`);
    const retryAfter = Date.parse(this.annotations["watchdog.dev/retry-after"] ?? "");
    if (!Number.isNaN(retryAfter) && this.now < retryAfter) this.violations.push(`created ${name} before retry-after`);
    if (!(this.run.metadata.finalizers ?? []).includes(FINALIZER)) this.violations.push(`created ${name} for a run without its finalizer`);
    if (this.run.metadata.deletionTimestamp) this.violations.push(`created ${name} for a run being deleted`);
    if (this.run.spec.suspend === true) this.violations.push(`created ${name} for a suspended run`);
    const pod = {
      ...structuredClone(manifest),
      metadata: { ...structuredClone(manifest.metadata), uid: `uid-${name}`, creationTimestamp: iso(this.now) },
      spec: { ...structuredClone(manifest.spec), nodeName: NODE },
      status: { phase: "Pending" },
    };
    this.pods.set(name, pod);
    this.created.push({ name, at: this.now, attempt: Number(manifest.metadata.labels[LABELS.attempt]) });
    return pod;
  }

  /** A graceful delete of a pod, as the API server takes it; a grace of 0 breaks rule 9. */
  requestPodDeletion(pod: Json, grace?: number): void {
    if (grace === 0) this.violations.push(`force-deleted ${pod.metadata.name}`);
    this.deleted.push({ name: pod.metadata.name, at: this.now, grace });
    this.deletePod(pod, grace);
  }

  /** The user deletes the run: it stays, being deleted, while a finalizer holds it. */
  deleteRun(): void {
    this.run.metadata.deletionTimestamp ??= iso(this.now);
    if ((this.run.metadata.finalizers ?? []).length === 0) this.runGone = true;
  }

  // --- the kubelet and the API server -------------------------------------------------------

  private deletePod(pod: Json, grace?: number): void {
    if (!pod.metadata.deletionTimestamp) {
      const seconds = grace ?? pod.spec?.terminationGracePeriodSeconds ?? 30;
      pod.metadata.deletionTimestamp = iso(this.now + seconds * 1000);
      pod.metadata.deletionGracePeriodSeconds = seconds;
    }
    if (this.kubelet === "prompt") this.stopAndRemove(pod);
  }

  /** The kubelet stops the pod's containers, reports it terminal, and deletes the object. */
  private stopAndRemove(pod: Json): void {
    if (isLive(podView(pod))) {
      pod.status = {
        phase: "Failed",
        containerStatuses: [{ name: "agent", state: { terminated: { exitCode: 137, reason: "Error" } } }],
      };
    }
    this.pods.delete(pod.metadata.name);
    this.tombstones.push(structuredClone(pod));
  }

  /** A slow or cut-off kubelet finally stops the terminating pods. */
  finalizePods(): void {
    for (const pod of [...this.pods.values()]) if (pod.metadata.deletionTimestamp) this.stopAndRemove(pod);
  }
  /** Someone force-deletes the terminating pods: the objects vanish, their containers run on. */
  forceDeleteByOthers(): void {
    for (const pod of [...this.pods.values()]) {
      if (!pod.metadata.deletionTimestamp) continue;
      this.pods.delete(pod.metadata.name);
      this.tombstones.push(structuredClone(pod));
      // A kubelet in contact kills them soon; a cut-off one only once it is back.
      if (isLive(podView(pod))) this.orphans.push({ name: pod.metadata.name, ...(this.kubelet === "cutOff" ? {} : { diesAt: this.now + 2_000 }) });
    }
  }
  /**
   * The current pod's object disappears while no operator watches, so no final state of it is
   * seen (an operator restarted meanwhile); on a cut-off node its containers run on.
   */
  podVanishedUnseen(): void {
    const pod = this.currentPod();
    if (!pod) return;
    this.pods.delete(pod.metadata.name);
    if (isLive(podView(pod))) this.orphans.push({ name: pod.metadata.name, ...(this.kubelet === "cutOff" ? {} : { diesAt: this.now + 2_000 }) });
  }
  /** The kubelet reports the agent running: the start on the node's clock, the write on the server's. */
  podRunning(): void {
    const pod = this.currentPod();
    if (!pod) return;
    pod.status = { phase: "Running", containerStatuses: [{ name: "agent", state: { running: { startedAt: iso(this.now + this.nodeClockSkewMs) } } }] };
    pod.metadata.managedFields = [
      {
        manager: "kubelet",
        operation: "Update",
        subresource: "status",
        apiVersion: "v1",
        time: new Date(Math.floor(this.now / 1000) * 1000).toISOString().replace(".000Z", "Z"),
        fieldsV1: { "f:status": { "f:containerStatuses": {}, "f:phase": {} } },
      },
    ];
  }
  podExit(code: number, reason?: string): void {
    const pod = this.currentPod();
    if (!pod) return;
    pod.status = {
      phase: code === 0 ? "Succeeded" : "Failed",
      containerStatuses: [{ name: "agent", state: { terminated: { exitCode: code, ...(reason ? { reason } : {}) } } }],
    };
  }
  /** Someone else deletes the current pod, gracefully; the kubelet does what it does. */
  podDeletedByOthers(): void {
    const pod = this.currentPod();
    if (pod) this.deletePod(pod);
  }

  // --- the sandbox ---------------------------------------------------------------------------

  private patchStatus(fields: Json): void {
    this.run.status = { ...(this.run.status ?? {}), ...fields };
  }
  heartbeat(state: "Planning" | "ExecutingTool" | "AwaitingReply" = "Planning", activity?: { kind: string; at?: number }, attempt = this.status.attempt): void {
    const sandboxNow = this.now + this.sandboxClockSkewMs;
    const hb: Json = { time: iso(sandboxNow), attempt, state };
    if (activity) hb.activity = { kind: activity.kind, time: iso((activity.at ?? this.now) + this.sandboxClockSkewMs) };
    else if (this.status.heartbeat?.activity) hb.activity = this.status.heartbeat.activity;
    // An SDK that reports usage sends it with every heartbeat of its attempt.
    if (this.status.heartbeat?.usage && this.status.heartbeat.attempt === attempt) hb.usage = this.status.heartbeat.usage;
    this.patchStatus({ heartbeat: hb });
    // The API server's record of the write, on its own clock.
    this.run.metadata.managedFields = heartbeatManagedFields(this.now);
    this.observe();
  }
  /** A heartbeat that reports the attempt's cumulative usage (heartbeat.usage). */
  report(usage: Json, attempt = this.status.attempt, state: "Planning" | "ExecutingTool" | "AwaitingReply" = "Planning"): void {
    this.heartbeat(state, undefined, attempt);
    this.run.status.heartbeat.usage = { ...usage };
  }
  toolCall(call: { name: string; argsHash?: string; state: "Started" | "Succeeded" | "Failed"; httpStatus?: number; retryAfterSeconds?: number; id?: string; attempt?: number | null; idempotent?: boolean }): void {
    const calls = [...(this.status.toolCalls ?? [])];
    const record: Json = {
      id: call.id ?? `c${calls.length + 1}-${this.now}`,
      name: call.name,
      argsHash: call.argsHash ?? "h",
      state: call.state,
      startedAt: iso(this.now),
    };
    if (call.attempt !== null) record.attempt = call.attempt ?? this.status.attempt;
    if (call.idempotent !== undefined) record.idempotent = call.idempotent;
    if (call.state === "Failed") {
      record.error = { message: "failed" };
      if (call.httpStatus !== undefined) record.error.httpStatus = call.httpStatus;
      if (call.retryAfterSeconds !== undefined) record.error.retryAfterSeconds = call.retryAfterSeconds;
    }
    const existing = calls.findIndex((c) => c.id === record.id);
    if (existing >= 0) calls[existing] = record;
    else calls.push(record);
    this.patchStatus({ toolCalls: calls.slice(-64) });
  }

  // --- the user ------------------------------------------------------------------------------

  setSpec(fields: Json): void {
    this.run.spec = { ...this.run.spec, ...fields };
    this.run.metadata.generation += 1;
  }
  annotate(key: string, value: string): void {
    this.run.metadata.annotations = { ...this.annotations, [key]: value };
  }
  /** Approves (or rejects) the pending request, naming it as the contract requires. */
  answer(kind: "approve" | "reject", text: string, id = this.status.approval?.id): void {
    this.annotate(`watchdog.dev/${kind}`, text);
    if (id !== undefined) this.annotate("watchdog.dev/approval-id", id);
  }
  condition(type: string): Json | undefined {
    return (this.status.conditions ?? []).find((c: Json) => c.type === type);
  }
  events(): { type: string; reason: string; note: string }[] {
    return this.plans.flatMap((p) => p.events);
  }
}

/** A world whose run has started: its first pod running and its first heartbeat in. */
export function startedWorld(spec: Json, defaults?: InstallDefaults): World {
  const w = new World(spec, defaults);
  w.settle();
  w.podRunning();
  w.heartbeat("Planning");
  w.settle();
  return w;
}
