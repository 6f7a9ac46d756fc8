// What the soak's observer records: plain facts with their times, gathered through its own watches
// and, on the real node, from containerd. Nothing here comes from the operator's metrics or logs.
// Every time is in ms on this machine's clock, which is the API server's clock too (it runs here);
// times the API server stamps (creation, deletion, managedFields) have whole seconds.

export interface PodRecord {
  uid: string;
  name: string;
  run: string;
  runUid: string;
  attempt: number;
  /** metadata.creationTimestamp (whole seconds). */
  createdAt: number;
  /** When this observer first saw the pod (its watch keeps the server's order of writes). */
  seenAt: number;
  /** When the deletion was requested: deletionTimestamp minus its grace (whole seconds). */
  deletionRequestedAt?: number;
  /** When this observer first saw the pod's deletionTimestamp. */
  deletionSeenAt?: number;
  /** When the agent container started (containerStatuses, whole seconds). */
  agentStartedAt?: number;
  /** When this observer first saw the pod in a terminal phase. */
  terminalAt?: number;
  /** When this observer saw the pod object go (a DELETED event, or missing from a relist). */
  goneAt?: number;
  /** The longest grace its kubelet may give it: its terminationGracePeriodSeconds or its deletion's. */
  graceSeconds?: number;
}

/** The times at which a pod had a running container on the node (containerd's or the runner's view). */
export interface ContainerInterval {
  pod: string;
  run: string;
  from: number;
  to: number;
  /**
   * events: from containerd's task start to its exit, as containerd announced them (real node);
   * otherwise sampled every 250 ms (containerd's task list, or the kwok runner's processes).
   */
  source?: "events";
}

/** One heartbeat value of a run, as its status showed it. */
export interface HeartbeatRecord {
  runUid: string;
  attempt: number;
  /** The API server's acceptance of the write: the managedFields time (whole seconds). */
  acceptedAt: number;
}

/** An attempt that ended with a requeue: the retry-after its run recorded for it. */
export interface AttemptEnd {
  runUid: string;
  attempt: number;
  reason: string;
  /** status.retryAfter as first seen with this failure (whole seconds, rounded up). */
  retryAfter?: number;
}

/** A run's phase as this observer saw it change. */
export interface PhaseRecord {
  runUid: string;
  at: number;
  phase: string;
  retryAfter?: number;
}

export interface RunRecord {
  name: string;
  uid: string;
  behaviour: string;
  heartbeatTimeoutMs: number;
  maxRestarts: number;
  /** Faults that touched this run's sandboxes (a kill from outside, a paused node): each may cost a restart. */
  faulted: string[];
  /** Its status when the soak settled (undefined if the run was gone). */
  final?: { phase?: string; reason?: string; restarts?: number; attempt?: number; lastFailureReason?: string };
  /** Transition keys (time|phase) its status showed at any time, and tool call ids. */
  transitionsSeen: string[];
  toolCallsSeen: string[];
}

/** What PostgreSQL's ledger holds for a run (keys as in RunRecord), with duplicates kept. */
export interface LedgerRecord {
  runUid: string;
  transitions: string[];
  toolCalls: string[];
}

/** One approval request of a run, as its status showed it: asked, then decided (or not). */
export interface ApprovalRecord {
  runUid: string;
  run: string;
  /** status.approval.id: every request has a new one. */
  id: string;
  /** When this observer first saw it Pending. */
  seenAt: number;
  /** Its last state seen (Pending, Approved, Rejected, TimedOut, Withdrawn). */
  state: string;
  /** status.approval.answer or .reason once decided. */
  answer?: string;
  /** When this observer first saw it decided. */
  decidedSeenAt?: number;
}

/** An answer someone gave: the approve annotation with the approval-id it named. */
export interface AnswerRecord {
  run: string;
  /** The request id the answer named. */
  requestId: string;
  answer: string;
  /** When the write was accepted (the patch's response). */
  at: number;
  /** A deliberate stray: it names no pending request and must be refused, never applied. */
  stray?: boolean;
}

export interface LeaseRecord {
  at: number;
  holder?: string;
}

/**
 * One tenure of a Lease that decides who writes for runs (the leader Lease, or a shard's), as the
 * observer's watch of the Leases saw it begin: a holder and its spec.acquireTime, or a hand-back
 * (holder "", at its spec.renewTime, the time of the release; the Lease keeps its acquireTime).
 */
export interface TenureRecord {
  lease: string;
  /** spec.holderIdentity; "" when the Lease was handed back. */
  holder: string;
  /** spec.acquireTime of the holder, or spec.renewTime of a hand-back (the replica's clock, ms). */
  at: number;
  /** When this observer saw it. */
  seenAt: number;
}

/** One process of an operator replica: the identity it held Leases under, and who it was to the API server. */
export interface ReplicaRecord {
  /** Its POD_NAME: new on every start, as a Deployment's pods are. */
  identity: string;
  /** The API server's user name of its ServiceAccount (one per replica, kept across its restarts). */
  user: string;
  /** When the process was started: it wrote nothing before. */
  startedAt: number;
}

/**
 * A write of a replica to a run's objects, from the API server's audit log: create, update, patch
 * or delete of an AgentRun (or its status) or of a sandbox pod, in the soak's namespace, by name.
 */
export interface WriteRecord {
  /** The audit log's user name (a replica's ServiceAccount). */
  user: string;
  verb: string;
  /** resource[/subresource]: agentruns, agentruns/status, pods. */
  resource: string;
  name: string;
  /** When the API server received it (its requestReceivedTimestamp, ms). */
  at: number;
  /** Its response code: 400 and above were refused, and changed nothing. */
  code: number;
}

/** How the runs were shared among the replicas: by one leader Lease (shards 1) or by a Lease per shard. */
export interface ShardingRecord {
  /** The soak's namespace, which with the run's name gives its shard. */
  namespace: string;
  /** How many replicas ran at once. */
  replicas: number;
  shards: number;
  /** The Lease of each shard, by shard number (shards 1: the leader Lease). */
  leases: string[];
}

export type FaultKind =
  | "leader-sigkill"
  | "leader-rollout"
  | "apiserver-restart"
  | "etcd-restart"
  | "watch-cut"
  | "watch-stall"
  | "node-pause"
  | "sandbox-kill"
  | "conflict-storm"
  | "postgres-stop"
  | "clock-skew"
  | "stray-answer";

export interface FaultRecord {
  kind: FaultKind;
  at: number;
  /** When the fault ended (the node resumed, the server came back), if it lasts. */
  until?: number;
  detail: string;
  /** For leader faults and stalls: the replica's identity (leading, for leader faults). */
  replica?: string;
  /** For a stall: whether the stalled replica was leading. */
  leader?: boolean;
  /** Whether it could not be applied (e.g. no sandbox to kill), with why. */
  skipped?: string;
}

/** An operator process that ended; the soak starts it again, as a Deployment's kubelet would. */
export interface OperatorExit {
  replica: string;
  at: number;
  code: number | null;
  signal: string | null;
  /** Whether the soak signalled it (a SIGKILL or SIGTERM it sent). */
  bySoak: boolean;
}

export interface SoakRecord {
  /** The seed of the schedule, to play it again. */
  seed?: number;
  startedAt: number;
  endedAt: number;
  /** How long faults were injected (--duration); the rest, to endedAt, was the wait to settle. */
  durationMs?: number;
  node: "kubelet" | "kwok";
  /** The fixed defect the operator ran with (npm run soak -- --reintroduce), if any. */
  reintroduced?: string;
  pods: PodRecord[];
  containers: ContainerInterval[];
  heartbeats: HeartbeatRecord[];
  attemptEnds: AttemptEnd[];
  phases: PhaseRecord[];
  runs: RunRecord[];
  ledger: LedgerRecord[];
  /** E-mails in the outbox, by run name. */
  emails: Record<string, number>;
  leases: LeaseRecord[];
  /** Approval requests as the runs' status showed them, and the answers given (absent in older histories). */
  approvals?: ApprovalRecord[];
  answers?: AnswerRecord[];
  faults: FaultRecord[];
  operatorExits: OperatorExit[];
  /**
   * Who might write for which run, and who did (absent in older histories, whose writes are not
   * checked): the replicas' processes, the tenures of the Leases, and the replicas' writes to the
   * runs and their pods as the API server's audit log shows them.
   */
  sharding?: ShardingRecord;
  replicas?: ReplicaRecord[];
  tenures?: TenureRecord[];
  writes?: WriteRecord[];
}
