// `npm run soak -- --self-test`: a record of a short soak in which every promise is broken exactly
// once (and a few things that look like violations but are not: a retry waiting out a leader
// failover, a kill right at the deadline), fed to the same analysis as a real soak. Each invariant
// must be counted exactly once, or the observer cannot be trusted.
import { analyse, INVARIANTS, type Findings, type Invariant } from "./analyse.ts";
import type { PodRecord, RunRecord, SoakRecord } from "./record.ts";

const T = Date.UTC(2026, 0, 1, 12, 0, 0);
const S = 1000;
const TIMEOUT = 30 * S;

function run(name: string, behaviour: string, final: RunRecord["final"], extra: Partial<RunRecord> = {}): RunRecord {
  return { name, uid: `uid-${name}`, behaviour, heartbeatTimeoutMs: TIMEOUT, maxRestarts: 2, faulted: [], final, transitionsSeen: [`${T}|Queued`], toolCallsSeen: [], ...extra };
}

function pod(runName: string, attempt: number, from: number, to: number, extra: Partial<PodRecord> = {}): PodRecord {
  return { uid: `uid-${runName}-${attempt}`, name: `${runName}-${attempt}`, run: runName, runUid: `uid-${runName}`, attempt, createdAt: from, seenAt: from, agentStartedAt: from + S, terminalAt: to, goneAt: to + 500, ...extra };
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
  };
  return record;
}

export interface SelfTestResult {
  ok: boolean;
  counts: Record<Invariant, number>;
  findings: Findings;
}

export function selfTest(): SelfTestResult {
  const findings = analyse(selfTestRecord());
  const ok = INVARIANTS.every((i) => findings.counts[i] === 1) && findings.failover.hard.count === 1 && findings.detection.requestWithLeader.count === 4;
  return { ok, counts: findings.counts, findings };
}
