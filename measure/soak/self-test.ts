// `npm run soak -- --self-test`: a record of a short soak in which every promise is broken exactly
// once (and a few things that look like violations but are not: a retry waiting out a leader
// failover, a kill right at the deadline, a write refused while another replica led), fed to the
// same analysis as a real soak. Each invariant must be counted exactly once, or the observer
// cannot be trusted. Beside it, a sharded soak that broke nothing while a killed replica's shard
// moved to another and back to its successor: it must be found clean.
import { shardOf } from "../../operator/sharding/shard-of.ts";
import { analyse, INVARIANTS, type Findings, type Invariant } from "./analyse.ts";
import type { PodRecord, RunRecord, SoakRecord, WriteRecord } from "./record.ts";

const T = Date.UTC(2026, 0, 1, 12, 0, 0);
const S = 1000;
const TIMEOUT = 30 * S;

function run(name: string, behaviour: string, final: RunRecord["final"], extra: Partial<RunRecord> = {}): RunRecord {
  return { name, uid: `uid-${name}`, behaviour, heartbeatTimeoutMs: TIMEOUT, maxRestarts: 2, faulted: [], final, transitionsSeen: [`${T}|Queued`], toolCallsSeen: [], ...extra };
}

function pod(runName: string, attempt: number, from: number, to: number, extra: Partial<PodRecord> = {}): PodRecord {
  return { uid: `uid-${runName}-${attempt}`, name: `${runName}-${attempt}`, run: runName, runUid: `uid-${runName}`, attempt, createdAt: from, seenAt: from, agentStartedAt: from + S, terminalAt: to, goneAt: to + 500, ...extra };
}

const NAMESPACE = "agent-watchdog-soak";
const LEASE = "agent-watchdog-soak";
/** The audit log's user of replica slot `slot`'s ServiceAccount. */
export const replicaUser = (slot: string) => `system:serviceaccount:agent-watchdog-bench:soak-${slot}`;

function write(slot: string, verb: string, resource: string, name: string, at: number, code = 200): WriteRecord {
  return { user: replicaUser(slot), verb, resource, name, at, code };
}

/** One violation of each invariant, each in a run of its own, beside runs that broke nothing. */
export function selfTestRecord(): SoakRecord {
  const completed = (restarts: number) => ({ phase: "Completed", restarts, attempt: restarts + 1 });
  const record: SoakRecord = {
    startedAt: T,
    endedAt: T + 300 * S,
    node: "kubelet",
    runs: [
      run("clean", "healthy", completed(0)),
      // a HeartbeatTimeout kill on time, then a retry that waits out a leader failover
      run("hung", "hang-in-tool", { phase: "NeedsHumanIntervention", reason: "RecoveryBudgetExhausted", restarts: 2, attempt: 3, lastFailureReason: "HeartbeatTimeout" }),
      run("dup", "healthy", completed(1), { faulted: ["sandbox-kill"] }),
      run("early", "crash", completed(1)),
      run("falsekill", "crash", completed(1)),
      run("stuck", "crash", completed(1)),
      run("ledger", "healthy", completed(0), { transitionsSeen: [`${T}|Queued`, `${T + 5 * S}|Planning`] }),
      run("email", "side-effect-then-crash", completed(1)),
      // a stray answer refused, then the right one applied; and a stray answer applied
      run("approved", "await-approval", completed(0)),
      run("misapplied", "await-approval", completed(0)),
      // written by replica-b while replica-a led
      run("shared", "healthy", completed(0)),
    ],
    pods: [
      pod("clean", 1, T, T + 20 * S),
      pod("hung", 1, T, T + 60 * S, { deletionRequestedAt: T + 41 * S, deletionSeenAt: T + 41.3 * S }),
      pod("hung", 2, T + 100 * S, T + 160 * S, { deletionRequestedAt: T + 141 * S, deletionSeenAt: T + 141.4 * S }),
      pod("hung", 3, T + 200 * S, T + 260 * S, { deletionRequestedAt: T + 241 * S, deletionSeenAt: T + 242 * S }),
      // the API says the first pod ended before the second was made, but the node ran both
      pod("dup", 1, T, T + 30 * S),
      pod("dup", 2, T + 31 * S, T + 60 * S),
      pod("early", 1, T, T + 10 * S),
      pod("early", 2, T + 19 * S, T + 40 * S),
      pod("falsekill", 1, T, T + 20 * S, { deletionRequestedAt: T + 15 * S, deletionSeenAt: T + 15.2 * S }),
      pod("falsekill", 2, T + 40 * S, T + 60 * S),
      pod("stuck", 1, T, T + 10 * S),
      pod("stuck", 2, T + 60 * S, T + 80 * S),
      pod("ledger", 1, T, T + 20 * S),
      pod("email", 1, T, T + 10 * S),
      pod("email", 2, T + 20 * S, T + 30 * S),
      pod("shared", 1, T, T + 20 * S),
    ],
    containers: [
      { pod: "clean-1", run: "clean", from: T + S, to: T + 20 * S },
      { pod: "dup-1", run: "dup", from: T + S, to: T + 35 * S },
      { pod: "dup-2", run: "dup", from: T + 32 * S, to: T + 60 * S },
      { pod: "hung-1", run: "hung", from: T + S, to: T + 43 * S },
    ],
    heartbeats: [
      { runUid: "uid-clean", attempt: 1, acceptedAt: T + 5 * S },
      { runUid: "uid-hung", attempt: 1, acceptedAt: T + 10 * S },
      { runUid: "uid-hung", attempt: 2, acceptedAt: T + 110 * S },
      { runUid: "uid-hung", attempt: 3, acceptedAt: T + 210 * S },
      { runUid: "uid-falsekill", attempt: 1, acceptedAt: T + 10 * S },
    ],
    attemptEnds: [
      { runUid: "uid-hung", attempt: 1, reason: "HeartbeatTimeout", retryAfter: T + 90 * S },
      { runUid: "uid-hung", attempt: 2, reason: "HeartbeatTimeout", retryAfter: T + 190 * S },
      { runUid: "uid-hung", attempt: 3, reason: "HeartbeatTimeout" },
      { runUid: "uid-dup", attempt: 1, reason: "PodFailed", retryAfter: T + 31 * S },
      { runUid: "uid-early", attempt: 1, reason: "PodFailed", retryAfter: T + 20 * S },
      { runUid: "uid-falsekill", attempt: 1, reason: "HeartbeatTimeout", retryAfter: T + 40 * S },
      { runUid: "uid-stuck", attempt: 1, reason: "PodFailed", retryAfter: T + 20 * S },
      { runUid: "uid-email", attempt: 1, reason: "PodFailed", retryAfter: T + 20 * S },
    ],
    phases: [
      // hung's retry is due at 90 s, while no replica leads (80 s to 99 s): its wait does not count
      { runUid: "uid-hung", at: T + 61 * S, phase: "Queued", retryAfter: T + 90 * S },
      { runUid: "uid-hung", at: T + 100 * S, phase: "Starting" },
      // stuck's retry is due at 20 s, and nothing happens until 60 s while a replica leads
      { runUid: "uid-stuck", at: T + 11 * S, phase: "Queued", retryAfter: T + 20 * S },
      { runUid: "uid-stuck", at: T + 60 * S, phase: "Starting" },
    ],
    ledger: [
      { runUid: "uid-clean", transitions: [`${T}|Queued`], toolCalls: [] },
      { runUid: "uid-hung", transitions: [`${T}|Queued`], toolCalls: [] },
      { runUid: "uid-dup", transitions: [`${T}|Queued`], toolCalls: [] },
      { runUid: "uid-early", transitions: [`${T}|Queued`], toolCalls: [] },
      { runUid: "uid-falsekill", transitions: [`${T}|Queued`], toolCalls: [] },
      { runUid: "uid-stuck", transitions: [`${T}|Queued`], toolCalls: [] },
      { runUid: "uid-ledger", transitions: [`${T}|Queued`], toolCalls: [] },
      { runUid: "uid-email", transitions: [`${T}|Queued`], toolCalls: [] },
      { runUid: "uid-approved", transitions: [`${T}|Queued`], toolCalls: [] },
      { runUid: "uid-misapplied", transitions: [`${T}|Queued`], toolCalls: [] },
      { runUid: "uid-shared", transitions: [`${T}|Queued`], toolCalls: [] },
    ],
    emails: { email: 2 },
    approvals: [
      { runUid: "uid-approved", run: "approved", id: "1-a", seenAt: T + 5 * S, state: "Approved", answer: "ship it", decidedSeenAt: T + 10 * S },
      { runUid: "uid-misapplied", run: "misapplied", id: "1-b", seenAt: T + 5 * S, state: "Approved", answer: "stray answer 2", decidedSeenAt: T + 8 * S },
    ],
    answers: [
      { run: "approved", requestId: "stray-1", answer: "stray answer 1", at: T + 6 * S, stray: true },
      { run: "approved", requestId: "1-a", answer: "ship it", at: T + 9 * S },
      { run: "misapplied", requestId: "stray-2", answer: "stray answer 2", at: T + 6 * S, stray: true },
      { run: "misapplied", requestId: "1-b", answer: "ship it", at: T + 9 * S },
    ],
    leases: [
      { at: T, holder: "replica-a" },
      { at: T + 99 * S, holder: "replica-b" },
    ],
    faults: [{ kind: "leader-sigkill", at: T + 80 * S, detail: "SIGKILL replica-a", replica: "replica-a" }],
    operatorExits: [
      { replica: "replica-a", at: T + 80 * S, code: null, signal: "SIGKILL", bySoak: true },
      { replica: "replica-b", at: T + 250 * S, code: 1, signal: null, bySoak: false },
    ],
    // One leader Lease: replica-a holds it until it is killed, replica-b from 99 s.
    sharding: { namespace: NAMESPACE, replicas: 2, shards: 1, leases: [LEASE] },
    replicas: [
      { identity: "replica-a", user: replicaUser("a"), startedAt: T - 10 * S },
      { identity: "replica-b", user: replicaUser("b"), startedAt: T - 10 * S },
    ],
    tenures: [
      { lease: LEASE, holder: "replica-a", at: T - 5 * S, seenAt: T - 5 * S },
      { lease: LEASE, holder: "replica-b", at: T + 99 * S, seenAt: T + 99.1 * S },
    ],
    writes: [
      write("a", "create", "pods", "clean-1", T),
      write("a", "patch", "agentruns/status", "clean", T + 20 * S),
      write("a", "create", "pods", "shared-1", T),
      // refused (a conflict): it changed nothing
      write("b", "patch", "agentruns/status", "shared", T + 30 * S, 409),
      // applied while replica-a led: the one violation
      write("b", "patch", "agentruns/status", "shared", T + 50 * S),
      write("b", "create", "pods", "hung-2", T + 100 * S),
      write("b", "delete", "pods", "hung-2", T + 141 * S),
    ],
  };
  return record;
}

/** The first name `r<i>-<behaviour>` whose run falls on `shard` of `shards` in the soak's namespace. */
function nameOnShard(behaviour: string, shard: number, shards: number): string {
  for (let i = 0; ; i++) if (shardOf(NAMESPACE, `r${i}-${behaviour}`, shards) === shard) return `r${i}-${behaviour}`;
}

/**
 * A sharded soak (two replicas, two shards) that broke nothing. soak-a-1 holds shard 0 and
 * soak-b-1 shard 1. soak-a-1 is SIGKILLed at 40 s; its run on shard 0, queued for a retry due at
 * 42 s, waits until soak-b-1 takes the shard at 56 s (no holder: not stuck) and gets its pod. Its
 * successor soak-a-2 (the same ServiceAccount) joins, soak-b-1 hands the shard back at 70 s (and
 * writes once more before anyone else holds it), and soak-a-2 takes it at 71 s and finishes the run.
 */
export function selfTestHandoffRecord(): SoakRecord {
  const shards = 2;
  const leases = [0, 1].map((shard) => `${LEASE}-shard-${shard}`) as [string, string];
  const moved = nameOnShard("crash", 0, shards);
  const stayed = nameOnShard("healthy", 1, shards);
  const podName = (r: string, attempt: number) => `${r}-${attempt}-c0ffe`;
  const tenure = (lease: string, holder: string, at: number) => ({ lease, holder, at, seenAt: at + 100 });
  return {
    startedAt: T,
    endedAt: T + 120 * S,
    node: "kubelet",
    runs: [run(moved, "crash", { phase: "Completed", restarts: 1, attempt: 2 }), run(stayed, "healthy", { phase: "Completed", restarts: 0, attempt: 1 })],
    pods: [
      pod(moved, 1, T, T + 38 * S, { name: podName(moved, 1) }),
      pod(moved, 2, T + 58 * S, T + 80 * S, { name: podName(moved, 2) }),
      pod(stayed, 1, T, T + 30 * S, { name: podName(stayed, 1) }),
    ],
    containers: [
      { pod: podName(moved, 1), run: moved, from: T + S, to: T + 38 * S },
      { pod: podName(moved, 2), run: moved, from: T + 59 * S, to: T + 80 * S },
      { pod: podName(stayed, 1), run: stayed, from: T + S, to: T + 30 * S },
    ],
    heartbeats: [
      { runUid: `uid-${moved}`, attempt: 1, acceptedAt: T + 10 * S },
      { runUid: `uid-${moved}`, attempt: 2, acceptedAt: T + 65 * S },
      { runUid: `uid-${stayed}`, attempt: 1, acceptedAt: T + 10 * S },
    ],
    attemptEnds: [{ runUid: `uid-${moved}`, attempt: 1, reason: "PodFailed", retryAfter: T + 42 * S }],
    phases: [
      { runUid: `uid-${moved}`, at: T + 39 * S, phase: "Queued", retryAfter: T + 42 * S },
      { runUid: `uid-${moved}`, at: T + 58 * S, phase: "Starting" },
    ],
    ledger: [
      { runUid: `uid-${moved}`, transitions: [`${T}|Queued`], toolCalls: [] },
      { runUid: `uid-${stayed}`, transitions: [`${T}|Queued`], toolCalls: [] },
    ],
    emails: {},
    leases: [],
    approvals: [],
    answers: [],
    faults: [{ kind: "leader-sigkill", at: T + 40 * S, detail: "SIGKILL soak-a-1", replica: "soak-a-1" }],
    operatorExits: [{ replica: "soak-a-1", at: T + 40 * S, code: null, signal: "SIGKILL", bySoak: true }],
    sharding: { namespace: NAMESPACE, replicas: 2, shards, leases },
    replicas: [
      { identity: "soak-a-1", user: replicaUser("a"), startedAt: T - 20 * S },
      { identity: "soak-b-1", user: replicaUser("b"), startedAt: T - 20 * S },
      { identity: "soak-a-2", user: replicaUser("a"), startedAt: T + 41 * S },
    ],
    tenures: [
      tenure(leases[0], "soak-a-1", T - 10 * S),
      tenure(leases[1], "soak-b-1", T - 10 * S),
      tenure(leases[0], "soak-b-1", T + 56 * S),
      tenure(leases[0], "", T + 70 * S),
      tenure(leases[0], "soak-a-2", T + 71 * S),
    ],
    writes: [
      write("a", "create", "pods", podName(moved, 1), T + 0.5 * S),
      write("a", "patch", "agentruns/status", moved, T + 1 * S),
      write("b", "create", "pods", podName(stayed, 1), T + 0.5 * S),
      write("b", "patch", "agentruns/status", stayed, T + 31 * S),
      write("a", "patch", "agentruns/status", moved, T + 39 * S),
      write("b", "create", "pods", podName(moved, 2), T + 58 * S),
      write("b", "patch", "agentruns/status", moved, T + 60 * S),
      // after handing the shard back, before anyone else holds it
      write("b", "patch", "agentruns/status", moved, T + 70.5 * S),
      write("a", "patch", "agentruns/status", moved, T + 80 * S),
      write("a", "delete", "pods", podName(moved, 2), T + 81 * S),
    ],
  };
}

export interface SelfTestResult {
  ok: boolean;
  counts: Record<Invariant, number>;
  findings: Findings;
  /** The sharded soak with a handoff, which must be found clean. */
  handoff: Findings;
}

export function selfTest(): SelfTestResult {
  const findings = analyse(selfTestRecord());
  const handoff = analyse(selfTestHandoffRecord());
  const record = selfTestRecord();
  const ok =
    INVARIANTS.every((i) => findings.counts[i] === 1) &&
    findings.failover.hard.count === 1 &&
    findings.detection.requestWithLeader.count === 4 &&
    findings.writes.checked === (record.writes ?? []).filter((w) => w.code < 400).length &&
    handoff.violations.length === 0 &&
    handoff.failover.hard.count === 1 &&
    handoff.writes.checked === selfTestHandoffRecord().writes?.length &&
    handoff.writes.replicas === 3;
  return { ok, counts: findings.counts, findings, handoff };
}
