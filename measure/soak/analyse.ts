// The soak's verdict, from the observer's record alone: what broke a promise (each counted once),
// and the figures (detection latency, failover). Pure, so the self-test can feed it a record with
// one violation of each kind and check that each is counted exactly once.
import { CONTACT_MARGIN_MS, CONTACT_POLL_MS, DEFAULT_POD_GRACE_SECONDS, KUBELET_MIN_GRACE_SECONDS } from "../../operator/watchdog/sandboxes.ts";
import type { FaultRecord, PodRecord, RunRecord, SoakRecord } from "./record.ts";

export const INVARIANTS = ["duplicateSandboxes", "earlyRetries", "falseKills", "lostOrStuckRuns", "ledgerGaps", "sideEffects", "misappliedAnswers", "operatorCrashes"] as const;
export type Invariant = (typeof INVARIANTS)[number];

export interface Violation {
  invariant: Invariant;
  run?: string;
  at?: number;
  what: string;
}

export interface Stats {
  count: number;
  p50?: number;
  p99?: number;
  max?: number;
}

export interface Findings {
  violations: Violation[];
  counts: Record<Invariant, number>;
  /** Heartbeat deadline to the deletion request, and to the container gone, ms. */
  detection: { requestWithLeader: Stats; requestWithoutLeader: Stats; containerGone: Stats };
  /** Leader lost to another replica leading, ms, by how it was lost. */
  failover: { hard: Stats; graceful: Stats };
}

/** A run queued past its retry-after with no pod for longer than this, while a leader exists, is stuck. */
export const STUCK_AFTER_MS = 15_000;
/** Server timestamps have whole seconds: a kill counts as false only when it is early beyond that. */
const SERVER_RESOLUTION_MS = 1_000;
const HEARTBEAT_ROUND_UP_MS = 999;

export function stats(values: number[]): Stats {
  if (values.length === 0) return { count: 0 };
  const sorted = [...values].sort((a, b) => a - b);
  const at = (q: number) => sorted[Math.min(sorted.length - 1, Math.ceil(q * sorted.length) - 1)] as number;
  return { count: sorted.length, p50: at(0.5), p99: at(0.99), max: sorted.at(-1) as number };
}

interface Interval {
  from: number;
  to: number;
}

const overlaps = (a: Interval, b: Interval) => a.from < b.to && b.from < a.to;
const inside = (t: number, intervals: Interval[]) => intervals.some((i) => t >= i.from && t < i.to);

/** A pod is live for the API from when it is seen until it is seen terminal or gone. */
const apiLife = (p: PodRecord, end: number): Interval => ({ from: p.seenAt, to: Math.min(p.terminalAt ?? Infinity, p.goneAt ?? Infinity, end) });

/** When no replica led: from each loss of the leader until another replica held the lease, and API outages. */
export function leaderless(record: SoakRecord): Interval[] {
  const out: Interval[] = [];
  for (const fault of record.faults) {
    if (fault.skipped) continue;
    if (((fault.kind === "leader-sigkill" || fault.kind === "leader-rollout") && fault.replica) || (fault.kind === "watch-stall" && fault.leader && fault.replica)) {
      const next = record.leases.find((l) => l.at >= fault.at && l.holder !== undefined && l.holder !== fault.replica);
      out.push({ from: fault.at, to: next?.at ?? record.endedAt });
    }
    if (fault.kind === "apiserver-restart" || fault.kind === "etcd-restart") {
      // Nobody can write while the API is down, and a leader may have to take the lease again after.
      const back = fault.until ?? record.endedAt;
      const next = record.leases.find((l) => l.at >= back && l.holder !== undefined);
      out.push({ from: fault.at, to: Math.max(back, next?.at ?? back) });
    }
  }
  return out;
}

function duplicates(record: SoakRecord): Violation[] {
  const out: Violation[] = [];
  const byRun = new Map<string, PodRecord[]>();
  for (const p of record.pods) byRun.set(p.runUid, [...(byRun.get(p.runUid) ?? []), p]);
  for (const pods of byRun.values()) {
    for (let i = 0; i < pods.length; i++) {
      for (let j = i + 1; j < pods.length; j++) {
        const [a, b] = [pods[i] as PodRecord, pods[j] as PodRecord];
        const [la, lb] = [apiLife(a, record.endedAt), apiLife(b, record.endedAt)];
        if (overlaps(la, lb)) out.push({ invariant: "duplicateSandboxes", run: a.run, at: Math.max(la.from, lb.from), what: `API: pods ${a.name} and ${b.name} were both live` });
      }
    }
  }
  const containers = record.containers;
  for (let i = 0; i < containers.length; i++) {
    for (let j = i + 1; j < containers.length; j++) {
      const [a, b] = [containers[i], containers[j]] as [(typeof containers)[number], (typeof containers)[number]];
      if (a.run === b.run && a.pod !== b.pod && overlaps(a, b)) {
        out.push({ invariant: "duplicateSandboxes", run: a.run, at: Math.max(a.from, b.from), what: `node: containers of ${a.pod} and ${b.pod} ran at once` });
      }
    }
  }
  return out;
}

function earlyRetries(record: SoakRecord): Violation[] {
  const out: Violation[] = [];
  for (const end of record.attemptEnds) {
    if (end.retryAfter === undefined) continue;
    for (const p of record.pods) {
      if (p.runUid === end.runUid && p.attempt === end.attempt + 1 && p.createdAt < end.retryAfter) {
        out.push({ invariant: "earlyRetries", run: p.run, at: p.createdAt, what: `pod ${p.name} of attempt ${p.attempt} was created ${(end.retryAfter - p.createdAt) / 1000} s before the retry-after of attempt ${end.attempt} (${end.reason})` });
      }
    }
  }
  return out;
}

/** The newest heartbeat of the pod's attempt accepted before `t`. */
function lastHeartbeatBefore(record: SoakRecord, pod: PodRecord, t: number): number | undefined {
  let newest: number | undefined;
  for (const h of record.heartbeats) {
    if (h.runUid === pod.runUid && h.attempt === pod.attempt && h.acceptedAt <= t && (newest === undefined || h.acceptedAt > newest)) newest = h.acceptedAt;
  }
  return newest;
}

const killedAsHung = (record: SoakRecord, pod: PodRecord) => record.attemptEnds.some((e) => e.runUid === pod.runUid && e.attempt === pod.attempt && e.reason === "HeartbeatTimeout");
const runOf = (record: SoakRecord, uid: string) => record.runs.find((r) => r.uid === uid);

function falseKills(record: SoakRecord): Violation[] {
  const out: Violation[] = [];
  for (const p of record.pods) {
    if (p.deletionRequestedAt === undefined || !killedAsHung(record, p)) continue;
    const run = runOf(record, p.runUid);
    const heartbeat = lastHeartbeatBefore(record, p, p.deletionRequestedAt);
    if (!run || heartbeat === undefined) continue;
    const age = p.deletionRequestedAt - heartbeat;
    if (age < run.heartbeatTimeoutMs - SERVER_RESOLUTION_MS) {
      out.push({ invariant: "falseKills", run: p.run, at: p.deletionRequestedAt, what: `pod ${p.name} was killed as hung ${age / 1000} s after a heartbeat (timeout ${run.heartbeatTimeoutMs / 1000} s)` });
    }
  }
  return out;
}

/** Base restarts of each behaviour of the example agent, with no fault. */
const BASE_RESTARTS: Record<string, number> = { healthy: 0, crash: 1, "rate-limited": 0, "side-effect-then-crash": 1, "await-approval": 0 };

/** Why a run's end state is not what its behaviour requires, or undefined. */
export function endStateProblem(run: RunRecord): string | undefined {
  const f = run.final;
  if (!f) return "the run is gone";
  const is = (phase: string, reason?: string) => f.phase === phase && (reason === undefined || f.reason === reason);
  const describe = `${f.phase ?? "no phase"}${f.reason ? ` (${f.reason})` : ""}, attempt ${f.attempt}, restarts ${f.restarts}`;
  switch (run.behaviour) {
    case "hang-in-tool":
      return is("NeedsHumanIntervention", "RecoveryBudgetExhausted") && f.lastFailureReason === "HeartbeatTimeout" ? undefined : `${describe}; expected NeedsHumanIntervention (RecoveryBudgetExhausted) after HeartbeatTimeout`;
    case "tool-loop":
      return is("NeedsHumanIntervention", "ToolLoop") ? undefined : `${describe}; expected NeedsHumanIntervention (ToolLoop)`;
    case "stall":
      return is("NeedsHumanIntervention", "StallUnresolved") ? undefined : `${describe}; expected NeedsHumanIntervention (StallUnresolved)`;
    default: {
      const base = BASE_RESTARTS[run.behaviour] ?? 0;
      if (is("Completed") && (f.restarts ?? 0) >= base && (f.restarts ?? 0) <= base + run.faulted.length) return undefined;
      // A fault may spend the whole allowance; then a person is asked, which is the rule.
      if (run.faulted.length > 0 && is("NeedsHumanIntervention", "RecoveryBudgetExhausted")) return undefined;
      return `${describe}; expected Completed with ${base} restart${base === 1 ? "" : "s"}${run.faulted.length ? ` (and up to ${run.faulted.length} more for ${run.faulted.join(", ")})` : ""}`;
    }
  }
}

/** How often a kubelet renews its node Lease (a quarter of the Lease's 40 s). */
const NODE_LEASE_RENEW_MS = 10_000;
/** How long an operator whose connections were dropped takes to list again and see what it missed. */
const RELIST_MS = 5_000;

/** When the operator may not have seen what became of a pod: no replica led, or its watches were cut or stalled. */
function blind(record: SoakRecord, noLeader: Interval[]): Interval[] {
  const out = [...noLeader];
  for (const fault of record.faults) {
    if (fault.skipped) continue;
    if (fault.kind === "watch-cut") out.push({ from: fault.at, to: fault.at + RELIST_MS });
    if (fault.kind === "watch-stall") out.push({ from: fault.at, to: (fault.until ?? record.endedAt) + RELIST_MS });
  }
  return out;
}

/**
 * Rule 9's wait for a pod whose end the operator did not see: its object gone with no final
 * state in view, the pod may still run on its node, so no replacement starts until the node has
 * been heard from since and the pod's longest grace has passed, with the kubelet's margin
 * (operator/watchdog/sandboxes.ts). The operator notices the pod gone once it sees again, the node
 * is heard from at its next Lease renewal (after a pause, once it resumes), and the operator looks
 * every CONTACT_POLL_MS. A run queued meanwhile waits as it must, not stuck.
 */
function unseenEndWaits(record: SoakRecord, pods: PodRecord[], noLeader: Interval[]): Interval[] {
  const unseen = blind(record, noLeader);
  const out: Interval[] = [];
  for (const p of pods) {
    if (p.goneAt === undefined || !inside(p.terminalAt ?? p.goneAt, unseen)) continue;
    let noticed = p.goneAt;
    for (let moved = true; moved; ) {
      const covering = unseen.find((i) => noticed >= i.from && noticed < i.to);
      moved = covering !== undefined;
      if (covering) noticed = covering.to;
    }
    let contact = noticed + NODE_LEASE_RENEW_MS;
    for (const fault of record.faults) {
      if (fault.kind !== "node-pause" || fault.skipped) continue;
      const resumed = fault.until ?? record.endedAt;
      if (fault.at < contact && resumed > noticed) contact = Math.max(contact, resumed + NODE_LEASE_RENEW_MS);
    }
    const grace = Math.max(p.graceSeconds ?? DEFAULT_POD_GRACE_SECONDS, KUBELET_MIN_GRACE_SECONDS) * 1000;
    out.push({ from: p.goneAt, to: contact + CONTACT_POLL_MS + grace + CONTACT_MARGIN_MS });
  }
  return out;
}

function lostOrStuck(record: SoakRecord, noLeader: Interval[]): Violation[] {
  const out: Violation[] = [];
  for (const run of record.runs) {
    const problem = endStateProblem(run);
    // Judged at the end, so tied to no fault's time.
    if (problem) out.push({ invariant: "lostOrStuckRuns", run: run.name, what: `ended ${problem}` });
  }
  // Queued past retry-after with no pod at all, counted only while a replica leads.
  const step = 250;
  for (const run of record.runs) {
    const phases = record.phases.filter((p) => p.runUid === run.uid).sort((a, b) => a.at - b.at);
    const runPods = record.pods.filter((p) => p.runUid === run.uid);
    const pods = [...runPods.map((p) => ({ from: p.seenAt, to: p.goneAt ?? record.endedAt })), ...unseenEndWaits(record, runPods, noLeader)];
    let waited = 0;
    let reported = false;
    for (let i = 0; i < phases.length; i++) {
      const current = phases[i] as (typeof phases)[number];
      if (current.phase !== "Queued") continue;
      const until = phases[i + 1]?.at ?? record.endedAt;
      for (let t = Math.max(current.at, current.retryAfter ?? current.at); t < until; t += step) {
        if (inside(t, noLeader) || pods.some((p) => t >= p.from && t < p.to)) continue;
        waited += step;
        if (waited > STUCK_AFTER_MS && !reported) {
          reported = true;
          out.push({ invariant: "lostOrStuckRuns", run: run.name, at: t, what: `Queued past its retry-after with no pod for more than ${STUCK_AFTER_MS / 1000} s while a replica led` });
        }
      }
      waited = 0;
    }
  }
  return out;
}

function ledgerGaps(record: SoakRecord): Violation[] {
  const out: Violation[] = [];
  for (const run of record.runs) {
    const stored = record.ledger.find((l) => l.runUid === run.uid);
    const check = (kind: string, seen: string[], kept: string[]) => {
      for (const key of new Set(seen)) {
        const n = kept.filter((k) => k === key).length;
        if (n !== 1) out.push({ invariant: "ledgerGaps", run: run.name, what: `${kind} ${key} is in the ledger ${n} times` });
      }
    };
    check("transition", run.transitionsSeen, stored?.transitions ?? []);
    check("tool call", run.toolCallsSeen, stored?.toolCalls ?? []);
  }
  return out;
}

function sideEffects(record: SoakRecord): Violation[] {
  const out: Violation[] = [];
  for (const run of record.runs) {
    if (run.behaviour !== "side-effect-then-crash") continue;
    const sent = record.emails[run.name] ?? 0;
    const completed = run.final?.phase === "Completed";
    if (sent > 1 || (completed && sent !== 1)) out.push({ invariant: "sideEffects", run: run.name, what: `${sent} e-mails delivered, expected exactly one` });
  }
  return out;
}

/**
 * Rule 11: an answer answers the request it names and no other. Every request seen decided by an
 * answer (Approved or Rejected) must carry the text of an answer given for that run naming that
 * very id, and never a deliberate stray's (one naming no pending request, which must be refused).
 */
function misappliedAnswers(record: SoakRecord): Violation[] {
  const out: Violation[] = [];
  const answers = record.answers ?? [];
  for (const request of record.approvals ?? []) {
    if ((request.state !== "Approved" && request.state !== "Rejected") || request.decidedSeenAt === undefined) continue;
    const given = answers.filter((a) => a.run === request.run && a.at <= request.decidedSeenAt!);
    const named = given.filter((a) => !a.stray && a.requestId === request.id);
    if (named.some((a) => a.answer === request.answer)) continue;
    const stray = given.find((a) => a.stray && a.answer === request.answer);
    out.push({
      invariant: "misappliedAnswers",
      run: request.run,
      at: request.decidedSeenAt,
      what: stray
        ? `request ${request.id} was ${request.state} with the stray answer ${JSON.stringify(stray.answer)}, which named ${stray.requestId}`
        : `request ${request.id} was ${request.state} (${JSON.stringify(request.answer ?? "")}) by no answer that named it (${named.length ? `answers naming it: ${named.map((a) => JSON.stringify(a.answer)).join(", ")}` : "none named it"})`,
    });
  }
  return out;
}

/**
 * A replica cut off from the API server by a fault loses its lease and exits, as controller-runtime's
 * managers do (its restart takes the lease up again): the fault's doing, not a crash. The window
 * covers the renew deadline after the fault ends.
 */
const CUT_OFF_GRACE_MS = 15_000;

function causedByFault(record: SoakRecord, exit: SoakRecord["operatorExits"][number]): boolean {
  return record.faults.some((f) => {
    if (f.skipped) return false;
    const cuts = f.kind === "apiserver-restart" || f.kind === "etcd-restart" || (f.kind === "watch-stall" && f.replica === exit.replica);
    return cuts && exit.at >= f.at && exit.at <= (f.until ?? f.at) + CUT_OFF_GRACE_MS;
  });
}

function crashes(record: SoakRecord): Violation[] {
  return record.operatorExits
    .filter((e) => !e.bySoak && !causedByFault(record, e))
    .map((e) => ({ invariant: "operatorCrashes" as const, at: e.at, what: `replica ${e.replica} exited by itself (code ${e.code}, signal ${e.signal})` }));
}

function detection(record: SoakRecord, noLeader: Interval[]): Findings["detection"] {
  const withLeader: number[] = [];
  const withoutLeader: number[] = [];
  const gone: number[] = [];
  for (const p of record.pods) {
    if (p.deletionSeenAt === undefined || p.deletionRequestedAt === undefined || !killedAsHung(record, p)) continue;
    const run = runOf(record, p.runUid);
    if (!run) continue;
    const heartbeat = lastHeartbeatBefore(record, p, p.deletionRequestedAt);
    const alive = Math.max(heartbeat !== undefined ? heartbeat + HEARTBEAT_ROUND_UP_MS : -Infinity, p.agentStartedAt ?? -Infinity);
    if (!Number.isFinite(alive)) continue;
    const deadline = alive + run.heartbeatTimeoutMs;
    (inside(deadline, noLeader) ? withoutLeader : withLeader).push(p.deletionSeenAt - deadline);
    const container = record.containers.filter((c) => c.pod === p.name).map((c) => c.to);
    const end = container.length ? Math.max(...container) : p.goneAt;
    if (end !== undefined) gone.push(end - deadline);
  }
  return { requestWithLeader: stats(withLeader), requestWithoutLeader: stats(withoutLeader), containerGone: stats(gone) };
}

function failover(record: SoakRecord): Findings["failover"] {
  const gap = (f: FaultRecord) => {
    const next = record.leases.find((l) => l.at >= f.at && l.holder !== undefined && l.holder !== f.replica);
    return next ? next.at - f.at : undefined;
  };
  const of = (kind: FaultRecord["kind"]) =>
    record.faults
      .filter((f) => f.kind === kind && !f.skipped && f.replica)
      .map(gap)
      .filter((g): g is number => g !== undefined);
  return { hard: stats(of("leader-sigkill")), graceful: stats(of("leader-rollout")) };
}

export function analyse(record: SoakRecord): Findings {
  const noLeader = leaderless(record);
  const violations = [...duplicates(record), ...earlyRetries(record), ...falseKills(record), ...lostOrStuck(record, noLeader), ...ledgerGaps(record), ...sideEffects(record), ...misappliedAnswers(record), ...crashes(record)];
  const counts = Object.fromEntries(INVARIANTS.map((i) => [i, violations.filter((v) => v.invariant === i).length])) as Record<Invariant, number>;
  return { violations, counts, detection: detection(record, noLeader), failover: failover(record) };
}
