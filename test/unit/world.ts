// A tiny in-memory cluster for the pure core: it applies plans the way the controller does
// (status merge patch, annotation patch, pod deletes, pod create) and records what happened, so
// tests can play the sandbox and the kubelet against `decide` without an API server.
import { decide } from "../../operator/watchdog/decide.ts";
import { isLive, podView } from "../../operator/watchdog/observe.ts";
import { applyMergePatch } from "../../operator/watchdog/merge-patch.ts";
import type { Plan } from "../../operator/watchdog/plan.ts";
import type { InstallDefaults } from "../../operator/api/defaults.ts";
import { LABELS } from "../../operator/api/annotations.ts";
import { T0, iso, run as makeRun } from "./fixtures.ts";

type Json = Record<string, any>;

export interface Violation {
  message: string;
}

export class World {
  now = T0;
  run: Json;
  pods = new Map<string, Json>();
  plans: Plan[] = [];
  created: { name: string; at: number; attempt: number }[] = [];
  deleted: { name: string; at: number }[] = [];
  violations: string[] = [];
  /** When true, deleted pods linger as terminating until `finalizePods`. */
  slowDeletes = false;
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

  advance(ms: number): void {
    this.now += ms;
  }

  /** Runs the core once and applies its plan. */
  reconcile(): Plan {
    const plan = decide({ run: structuredClone(this.run), pods: [...this.pods.values()].map((p) => structuredClone(p)), now: this.now, defaults: this.defaults });
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
      this.now = Math.max(this.now, wake);
      this.settle();
    }
    this.now = Math.max(this.now, until);
    this.settle();
  }

  private apply(plan: Plan): void {
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
      if (!pod) continue;
      this.deleted.push({ name: deletion.name, at: this.now });
      if (this.slowDeletes) pod.metadata.deletionTimestamp = iso(this.now);
      else this.pods.delete(deletion.name);
    }
    if (plan.createPod) {
      const attempt = Number(plan.createPod.metadata.labels[LABELS.attempt]);
      if (this.livePods.length > 0) this.violations.push(`created ${plan.createPod.metadata.name} while ${this.livePods.map((p) => p.metadata.name).join(",")} live`);
      const retryAfter = Date.parse(this.annotations["watchdog.dev/retry-after"] ?? "");
      if (!Number.isNaN(retryAfter) && this.now < retryAfter) this.violations.push(`created ${plan.createPod.metadata.name} before retry-after`);
      if (this.pods.has(plan.createPod.metadata.name)) {
        this.violations.push(`pod ${plan.createPod.metadata.name} already exists`);
        return;
      }
      this.pods.set(plan.createPod.metadata.name, {
        ...structuredClone(plan.createPod),
        metadata: { ...structuredClone(plan.createPod.metadata), uid: `uid-${plan.createPod.metadata.name}`, creationTimestamp: iso(this.now) },
        status: { phase: "Pending" },
      });
      this.created.push({ name: plan.createPod.metadata.name, at: this.now, attempt });
    }
  }

  // --- the kubelet -------------------------------------------------------------------------------

  finalizePods(): void {
    for (const [name, pod] of this.pods) if (pod.metadata.deletionTimestamp) this.pods.delete(name);
  }
  podRunning(): void {
    const pod = this.currentPod();
    if (pod) pod.status = { phase: "Running" };
  }
  podExit(code: number, reason?: string): void {
    const pod = this.currentPod();
    if (!pod) return;
    pod.status = {
      phase: code === 0 ? "Succeeded" : "Failed",
      containerStatuses: [{ name: "agent", state: { terminated: { exitCode: code, ...(reason ? { reason } : {}) } } }],
    };
  }
  podDeletedByOthers(): void {
    const pod = this.currentPod();
    if (pod) this.pods.delete(pod.metadata.name);
  }

  // --- the sandbox -------------------------------------------------------------------------------

  private patchStatus(fields: Json): void {
    this.run.status = { ...(this.run.status ?? {}), ...fields };
  }
  heartbeat(state: "Planning" | "ExecutingTool" | "AwaitingReply" = "Planning", activity?: { kind: string; at?: number }, attempt = this.status.attempt): void {
    const hb: Json = { time: iso(this.now), attempt, state };
    if (activity) hb.activity = { kind: activity.kind, time: iso(activity.at ?? this.now) };
    else if (this.status.heartbeat?.activity) hb.activity = this.status.heartbeat.activity;
    this.patchStatus({ heartbeat: hb });
  }
  toolCall(call: { name: string; argsHash?: string; state: "Started" | "Succeeded" | "Failed"; httpStatus?: number; retryAfterSeconds?: number; id?: string; attempt?: number | null }): void {
    const calls = [...(this.status.toolCalls ?? [])];
    const record: Json = {
      id: call.id ?? `c${calls.length + 1}-${this.now}`,
      name: call.name,
      argsHash: call.argsHash ?? "h",
      state: call.state,
      startedAt: iso(this.now),
    };
    if (call.attempt !== null) record.attempt = call.attempt ?? this.status.attempt;
    if (call.state === "Failed") {
      record.error = { message: "failed" };
      if (call.httpStatus !== undefined) record.error.httpStatus = call.httpStatus;
      if (call.retryAfterSeconds !== undefined) record.error.retryAfterSeconds = call.retryAfterSeconds;
    }
    calls.push(record);
    this.patchStatus({ toolCalls: calls.slice(-64) });
  }

  // --- the user ---------------------------------------------------------------------------------

  setSpec(fields: Json): void {
    this.run.spec = { ...this.run.spec, ...fields };
    this.run.metadata.generation += 1;
  }
  annotate(key: string, value: string): void {
    this.run.metadata.annotations = { ...this.annotations, [key]: value };
  }
  condition(type: string): Json | undefined {
    return (this.status.conditions ?? []).find((c: Json) => c.type === type);
  }
  events(): { type: string; reason: string; note: string }[] {
    return this.plans.flatMap((p) => p.events);
  }
}
