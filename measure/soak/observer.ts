// The soak's independent observer. It trusts nothing the operator says about itself: it lists and
// watches pods, runs and the Leases that decide who writes (the leader's, or each shard's) through a connection of its own (not through the proxies
// the soak breaks), samples what really runs on the node, and writes down plain facts with their
// times (record.ts). The analysis (analyse.ts) decides afterwards what broke.
import { LABELS } from "../../operator/api/annotations.ts";
import { parseDuration } from "../../operator/api/duration.ts";
import type { Json, KubeClient } from "../../operator/kube/client.ts";
import type { TaskEvent } from "./node-view.ts";
import type { ApprovalRecord, AttemptEnd, ContainerInterval, HeartbeatRecord, LeaseRecord, PhaseRecord, PodRecord, RunRecord, TenureRecord } from "./record.ts";
import { HEARTBEAT_FIELD, serverWriteTime } from "../../operator/api/managed-fields.ts";

/* eslint-disable @typescript-eslint/no-explicit-any -- objects are read as plain JSON here */

/** A running container of a sandbox pod, as the node (or the kwok runner) shows it. */
export interface RunningContainer {
  podUid?: string;
  pod: string;
  namespace: string;
}

export type NodeView = () => Promise<RunningContainer[]>;

/** containerd's stream of task starts and exits, and which pod a container belongs to. */
export interface NodeEvents {
  events(onEvent: (event: TaskEvent) => void): { stop(): void };
  describe(id: string): Promise<RunningContainer | undefined>;
}

/** A sandbox pod's run, from its name (<run>-<attempt>-<uid prefix>), when its object was not seen. */
const runOfPod = (pod: string) => pod.replace(/-\d+(-[a-z0-9]+)?$/, "");

const ms = (t: unknown) => (typeof t === "string" ? Date.parse(t) : NaN);

/**
 * Lists, then watches from the list's resourceVersion; after any error or close it lists again,
 * and reports what vanished in between as gone. Simple on purpose: it must not share the
 * operator's informer, whose faults it is there to catch.
 */
class ListWatch {
  private readonly known = new Map<string, Json>();
  private stopped = false;
  private abort?: AbortController;
  private loop?: Promise<void>;

  private readonly client: KubeClient;
  private readonly path: string;
  private readonly query: Record<string, string>;
  private readonly onObject: (type: "ADDED" | "MODIFIED" | "DELETED", object: Json) => void;
  private listed?: () => void;
  /** Resolves once the first list has been taken in: from then on the watch misses nothing. */
  readonly ready = new Promise<void>((resolve) => (this.listed = resolve));

  constructor(client: KubeClient, path: string, query: Record<string, string>, onObject: (type: "ADDED" | "MODIFIED" | "DELETED", object: Json) => void) {
    this.client = client;
    this.path = path;
    this.query = query;
    this.onObject = onObject;
  }

  start(): void {
    this.loop = (async () => {
      while (!this.stopped) {
        try {
          const list = await this.client.get<{ metadata: { resourceVersion: string }; items: Json[] }>(this.path, this.query);
          const seen = new Set<string>();
          for (const item of list.items) {
            const uid = (item.metadata as any).uid as string;
            seen.add(uid);
            this.onObject(this.known.has(uid) ? "MODIFIED" : "ADDED", item);
            this.known.set(uid, item);
          }
          for (const [uid, object] of this.known) {
            if (!seen.has(uid)) {
              this.known.delete(uid);
              this.onObject("DELETED", object);
            }
          }
          this.listed?.();
          await new Promise<void>((resolve) => {
            void this.client
              .watch(
                this.path,
                { ...this.query, resourceVersion: list.metadata.resourceVersion, allowWatchBookmarks: true },
                (type, object) => {
                  if (type !== "ADDED" && type !== "MODIFIED" && type !== "DELETED") return;
                  const uid = (object.metadata as any).uid as string;
                  if (type === "DELETED") this.known.delete(uid);
                  else this.known.set(uid, object);
                  this.onObject(type, object);
                },
                () => resolve(),
                30_000,
              )
              .then((abort) => (this.abort = abort), () => resolve());
          });
        } catch {
          // the API server is down or restarting: list again shortly
        }
        if (!this.stopped) await new Promise((resolve) => setTimeout(resolve, 300));
      }
    })();
  }

  async stop(): Promise<void> {
    this.stopped = true;
    this.listed?.();
    this.abort?.abort();
    await this.loop;
  }
}

/**
 * The Leases the observer watches: the leader Lease `name` (its holders go to `leases`), or with
 * `selector`, the shard Leases that label selector finds. Either way each tenure goes to `tenures`.
 */
export interface WatchedLeases {
  namespace: string;
  name: string;
  selector?: string;
}

interface RunState {
  record: RunRecord;
  transitions: Set<string>;
  toolCalls: Set<string>;
  phase?: string;
  heartbeat?: string;
}

export class Observer {
  readonly pods = new Map<string, PodRecord>();
  readonly containers: ContainerInterval[] = [];
  readonly heartbeats: HeartbeatRecord[] = [];
  readonly attemptEnds = new Map<string, AttemptEnd>();
  readonly phases: PhaseRecord[] = [];
  readonly leases: LeaseRecord[] = [];
  readonly tenures: TenureRecord[] = [];
  /** Every approval request seen, by run uid and id. */
  private readonly approvalRequests = new Map<string, ApprovalRecord>();
  private readonly runs = new Map<string, RunState>();
  private readonly open = new Map<string, ContainerInterval>();
  private readonly watches: ListWatch[] = [];
  private sampling?: Promise<void>;
  /** Containers whose task start containerd announced and whose exit it has not yet, by id. */
  private readonly started = new Map<string, ContainerInterval>();
  private following?: { stop(): void };
  private taskEvents: Promise<void> = Promise.resolve();
  private stopped = false;
  samples = 0;

  private readonly client: KubeClient;
  private readonly namespace: string;
  private readonly lease: WatchedLeases;
  private readonly nodeView: NodeView;
  private readonly nodeEvents?: NodeEvents;
  /** Told of each pod seen Failed, once (the soak keeps its log for whoever looks into it). */
  onFailedPod?: (pod: string) => void;

  constructor(client: KubeClient, namespace: string, lease: WatchedLeases, nodeView: NodeView, nodeEvents?: NodeEvents) {
    this.client = client;
    this.namespace = namespace;
    this.lease = lease;
    this.nodeView = nodeView;
    if (nodeEvents) this.nodeEvents = nodeEvents;
  }

  start(): void {
    const ns = this.namespace;
    this.watches.push(
      new ListWatch(this.client, `/api/v1/namespaces/${ns}/pods`, { labelSelector: LABELS.run }, (type, pod) => this.onPod(type, pod)),
      new ListWatch(this.client, `/apis/watchdog.dev/v1alpha1/namespaces/${ns}/agentruns`, {}, (type, run) => this.onRun(type, run)),
      new ListWatch(
        this.client,
        `/apis/coordination.k8s.io/v1/namespaces/${this.lease.namespace}/leases`,
        this.lease.selector ? { labelSelector: this.lease.selector } : { fieldSelector: `metadata.name=${this.lease.name}` },
        (type, lease) => this.onLease(type, lease),
      ),
    );
    for (const w of this.watches) w.start();
    this.sampling = this.sample();
    // One event at a time, in containerd's order: an exit never overtakes its start's lookup.
    this.following = this.nodeEvents?.events((event) => void (this.taskEvents = this.taskEvents.then(() => this.onTaskEvent(event))));
  }

  /** Resolves once the Leases have been listed: a tenure that begins later is seen. */
  leasesWatched(): Promise<void> {
    return (this.watches[2] as ListWatch).ready;
  }

  async stop(): Promise<void> {
    this.stopped = true;
    this.following?.stop();
    await Promise.all(this.watches.map((w) => w.stop()));
    await this.sampling;
    await this.taskEvents;
    for (const interval of this.open.values()) this.containers.push(interval);
    this.open.clear();
    // Still running when the soak ended.
    for (const interval of this.started.values()) this.containers.push({ ...interval, to: Date.now() });
    this.started.clear();
  }

  /** A container of a sandbox pod started or exited, by containerd's word and time. */
  private async onTaskEvent(event: TaskEvent): Promise<void> {
    if (event.kind === "exit") {
      const interval = this.started.get(event.id);
      if (!interval) return; // started before the observer, or not a sandbox's
      this.started.delete(event.id);
      this.containers.push({ ...interval, to: Math.max(interval.from + 1, event.at) });
      return;
    }
    const container = await this.nodeEvents?.describe(event.id).catch(() => undefined);
    if (!container || container.namespace !== this.namespace) return;
    const record = container.podUid ? this.pods.get(container.podUid) : undefined;
    this.started.set(event.id, { pod: container.pod, run: record?.run ?? runOfPod(container.pod), from: event.at, to: event.at + 1, source: "events" });
  }

  /** The runs as last seen, with what their status showed over time. */
  runRecords(): RunRecord[] {
    return [...this.runs.values()].map((s) => ({ ...s.record, transitionsSeen: [...s.transitions], toolCallsSeen: [...s.toolCalls] }));
  }

  /** Every approval request seen, with what became of it. */
  approvals(): ApprovalRecord[] {
    return [...this.approvalRequests.values()].map((a) => ({ ...a }));
  }

  /** Marks a run as touched by a fault, which may cost it a restart. */
  faulted(runName: string, fault: string): void {
    for (const s of this.runs.values()) if (s.record.name === runName) s.record.faulted.push(fault);
  }

  /**
   * The runs with a pod that may be on the node now, started or not: a kubelet paused now cannot
   * report such a pod's agent starting or ending, which may cost its run a restart.
   */
  runsWithLivePods(): string[] {
    return [...new Set([...this.pods.values()].filter((p) => p.terminalAt === undefined && p.deletionRequestedAt === undefined && p.goneAt === undefined).map((p) => p.run))];
  }

  /** The runs whose current pod is running on the node now, by name. */
  activeRuns(): { run: string; pod: string; uid: string }[] {
    return [...this.pods.values()].filter((p) => p.agentStartedAt !== undefined && p.terminalAt === undefined && p.deletionRequestedAt === undefined && p.goneAt === undefined).map((p) => ({ run: p.run, pod: p.name, uid: p.uid }));
  }

  private onPod(type: string, pod: any): void {
    const uid = pod.metadata.uid as string;
    const now = Date.now();
    let record = this.pods.get(uid);
    if (!record) {
      const owner = (pod.metadata.ownerReferences ?? []).find((o: any) => o.controller);
      record = {
        uid,
        name: pod.metadata.name,
        run: pod.metadata.labels?.[LABELS.run] ?? "",
        runUid: owner?.uid ?? "",
        attempt: Number(pod.metadata.labels?.[LABELS.attempt] ?? 0),
        createdAt: ms(pod.metadata.creationTimestamp),
        seenAt: now,
      };
      this.pods.set(uid, record);
    }
    const grace = Math.max(Number(pod.spec?.terminationGracePeriodSeconds ?? 30), Number(pod.metadata.deletionGracePeriodSeconds ?? 0));
    if (Number.isFinite(grace) && grace > (record.graceSeconds ?? -1)) record.graceSeconds = grace;
    if (pod.metadata.deletionTimestamp && record.deletionRequestedAt === undefined) {
      record.deletionRequestedAt = ms(pod.metadata.deletionTimestamp) - 1000 * Number(pod.metadata.deletionGracePeriodSeconds ?? 0);
      record.deletionSeenAt = now;
    }
    const agent = (pod.status?.containerStatuses ?? []).find((c: any) => c.name === (pod.spec?.containers?.[0]?.name ?? "agent"));
    const started = agent?.state?.running?.startedAt ?? agent?.state?.terminated?.startedAt;
    if (started && record.agentStartedAt === undefined) record.agentStartedAt = ms(started);
    if ((pod.status?.phase === "Succeeded" || pod.status?.phase === "Failed") && record.terminalAt === undefined) {
      record.terminalAt = now;
      if (pod.status.phase === "Failed") this.onFailedPod?.(record.name);
    }
    if (type === "DELETED" && record.goneAt === undefined) record.goneAt = now;
  }

  private onRun(type: string, run: any): void {
    if (type === "DELETED") return;
    const uid = run.metadata.uid as string;
    const status = run.status ?? {};
    let state = this.runs.get(uid);
    if (!state) {
      const watchdog = run.spec?.watchdog ?? {};
      state = {
        record: {
          name: run.metadata.name,
          uid,
          behaviour: run.spec?.goal ?? "healthy",
          heartbeatTimeoutMs: parseDuration(status.watchdog?.heartbeatTimeout ?? watchdog.heartbeatTimeout ?? "5m"),
          maxRestarts: watchdog.maxRestarts ?? 3,
          faulted: [],
          transitionsSeen: [],
          toolCallsSeen: [],
        },
        transitions: new Set(),
        toolCalls: new Set(),
      };
      this.runs.set(uid, state);
    }
    const now = Date.now();
    state.record.final = { phase: status.phase, reason: status.reason, restarts: status.restarts, attempt: status.attempt, lastFailureReason: status.lastFailure?.reason };
    if (status.phase !== state.phase) {
      state.phase = status.phase;
      this.phases.push({ runUid: uid, at: now, phase: status.phase, ...(status.retryAfter ? { retryAfter: ms(status.retryAfter) } : {}) });
    } else if (status.phase === "Queued" && status.retryAfter) {
      const last = this.phases.findLast((p) => p.runUid === uid);
      if (last && last.retryAfter === undefined) last.retryAfter = ms(status.retryAfter);
    }
    const hb = status.heartbeat;
    const accepted = serverWriteTime(run, HEARTBEAT_FIELD);
    const hbKey = hb ? `${hb.attempt}|${hb.time}|${hb.state}` : undefined;
    // Only a heartbeat of the attempt the run is on is a sign of life the watchdog owed regard: a
    // sandbox whose first write lands after its attempt was ended (no admission policy fences it
    // here) did not make that decision wrong. In a coalesced view (a relist) the write may have
    // come just before the end; it is then the last of its attempt, and its earlier ones count.
    if (hb && typeof hb.attempt === "number" && hb.attempt === status.attempt && accepted !== undefined && hbKey !== state.heartbeat) {
      state.heartbeat = hbKey;
      this.heartbeats.push({ runUid: uid, attempt: hb.attempt, acceptedAt: accepted });
    }
    const failure = status.lastFailure;
    if (failure && typeof failure.attempt === "number") {
      const key = `${uid}|${failure.attempt}`;
      const end = this.attemptEnds.get(key);
      if (!end) this.attemptEnds.set(key, { runUid: uid, attempt: failure.attempt, reason: failure.reason, ...(status.retryAfter ? { retryAfter: ms(status.retryAfter) } : {}) });
      else if (end.retryAfter === undefined && status.retryAfter && status.attempt === failure.attempt) end.retryAfter = ms(status.retryAfter);
    }
    const approval = status.approval;
    if (approval && typeof approval.id === "string" && typeof approval.state === "string") {
      const key = `${uid}|${approval.id}`;
      const request = this.approvalRequests.get(key) ?? (this.approvalRequests.set(key, { runUid: uid, run: run.metadata.name, id: approval.id, seenAt: now, state: approval.state }).get(key) as ApprovalRecord);
      if (approval.state !== "Pending" && request.decidedSeenAt === undefined) {
        request.state = approval.state;
        request.decidedSeenAt = now;
        const answer = approval.answer ?? approval.reason;
        if (typeof answer === "string") request.answer = answer;
      }
    }
    for (const t of status.transitions ?? []) if (t?.time && t?.phase) state.transitions.add(`${ms(t.time)}|${t.phase}`);
    for (const c of status.toolCalls ?? []) if (typeof c?.id === "string") state.toolCalls.add(c.id);
  }

  private onLease(type: string, lease: any): void {
    const name = lease.metadata?.name as string;
    if (name === this.lease.name) {
      const holder = type === "DELETED" ? undefined : (lease.spec?.holderIdentity as string | undefined) || undefined;
      if (this.leases.at(-1)?.holder !== holder || this.leases.length === 0) this.leases.push({ at: Date.now(), ...(holder ? { holder } : {}) });
    }
    if (type === "DELETED") return;
    // A tenure begins at its acquireTime; a Lease handed back keeps that, and was handed back at
    // its renewTime. Renewals change neither holder nor acquireTime, and are not tenures.
    const spec = lease.spec ?? {};
    const holder = (spec.holderIdentity as string | undefined) ?? "";
    const seenAt = Date.now();
    const at = ms(holder ? spec.acquireTime : spec.renewTime);
    const tenure: TenureRecord = { lease: name, holder, at: Number.isFinite(at) ? at : seenAt, seenAt };
    const last = this.tenures.findLast((t) => t.lease === name);
    if (!last || last.holder !== tenure.holder || last.at !== tenure.at) this.tenures.push(tenure);
  }

  /** What runs on the node, every 250 ms: a container seen running opens an interval until it is not. */
  private async sample(): Promise<void> {
    while (!this.stopped) {
      const at = Date.now();
      let running: RunningContainer[] | undefined;
      try {
        running = await this.nodeView();
      } catch {
        running = undefined; // a container changed under the listing: look again
      }
      if (running) {
        this.samples++;
        const now = new Set<string>();
        for (const c of running) {
          if (c.namespace !== this.namespace) continue;
          const record = c.podUid ? this.pods.get(c.podUid) : [...this.pods.values()].find((p) => p.name === c.pod);
          const run = record?.run ?? runOfPod(c.pod);
          const key = c.podUid ?? c.pod;
          now.add(key);
          // An interval ends just after its last sample, so that two containers seen in one
          // sample overlap.
          const open = this.open.get(key);
          if (open) open.to = at + 1;
          else this.open.set(key, { pod: c.pod, run, from: at, to: at + 1 });
        }
        for (const [key, interval] of this.open) {
          if (!now.has(key)) {
            this.containers.push(interval);
            this.open.delete(key);
          }
        }
      }
      await new Promise((resolve) => setTimeout(resolve, Math.max(0, 250 - (Date.now() - at))));
    }
  }
}
