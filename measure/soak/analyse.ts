// The soak's verdict, from the observer's record alone: what broke a promise (each counted once),
// and the figures (detection latency, failover). Pure, so the self-test can feed it a record with
// one violation of each kind and check that each is counted exactly once.
import { CONTACT_MARGIN_MS, CONTACT_POLL_MS, DEFAULT_POD_GRACE_SECONDS, KUBELET_MIN_GRACE_SECONDS } from "../../operator/watchdog/sandboxes.ts";
import { shardOf } from "../../operator/sharding/shard-of.ts";
import type { FaultRecord, PodRecord, RunRecord, SoakRecord, TenureRecord, WriteRecord } from "./record.ts";

export const INVARIANTS = ["duplicateSandboxes", "sharedRuns", "earlyRetries", "falseKills", "lostOrStuckRuns", "ledgerGaps", "sideEffects", "misappliedAnswers", "operatorCrashes"] as const;
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
  /** Leader lost to another replica leading, ms, by how it was lost (sharded: every shard it held taken by another). */
  failover: { hard: Stats; graceful: Stats };
  /** What sharedRuns checked: the replicas' writes to runs against the Leases' tenures (all 0 in an older history). */
  writes: { checked: number; runs: number; replicas: number; tenures: number };
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

/** Whether the runs were shared by a Lease per shard, whose tenures the history holds. */
const sharded = (record: SoakRecord) => (record.sharding?.shards ?? 1) > 1 && (record.tenures?.length ?? 0) > 0;

/** The Lease that decides who writes for the run named `run`: its shard's, or the leader's. */
function leaseOfRun(record: SoakRecord, run: string): string | undefined {
  const sharding = record.sharding;
  if (!sharding) return undefined;
  const shard = sharding.shards > 1 ? shardOf(sharding.namespace, run, sharding.shards) : 0;
  return sharding.leases[shard];
}

/**
 * Sharded: when the shard of the run named `run` was acquired. Each acquisition begins a tenure
 * (another holder, or the same after a hand-back), whose holder starts with no memory of the run.
 */
function takeoversOf(record: SoakRecord, run: string): number[] {
  if (!sharded(record)) return [];
  const lease = leaseOfRun(record, run);
  return (tenuresByLease(record).get(lease ?? "") ?? []).filter((t) => t.holder !== "").map((t) => t.at);
}

/** Each Lease's tenures in the order they began. */
function tenuresByLease(record: SoakRecord): Map<string, TenureRecord[]> {
  const out = new Map<string, TenureRecord[]>();
  for (const t of record.tenures ?? []) out.set(t.lease, [...(out.get(t.lease) ?? []), t]);
  for (const list of out.values()) list.sort((a, b) => a.at - b.at || a.seenAt - b.seenAt);
  return out;
}

/**
 * Sharded: when every shard Lease `replica` held at `t` had been acquired by another replica
 * (Infinity if one never was), or undefined when it held none.
 */
function handedOver(record: SoakRecord, replica: string, t: number): number | undefined {
  let last: number | undefined;
  for (const tenures of tenuresByLease(record).values()) {
    if (tenures.findLast((x) => x.at <= t)?.holder !== replica) continue;
    const next = tenures.find((x) => x.at >= t && x.holder !== "" && x.holder !== replica);
    last = Math.max(last ?? -Infinity, next?.at ?? Infinity);
  }
  return last;
}

/**
 * Sharded: how long after the API server is back a shard Lease that could not be renewed during the
 * outage may take to be held again (its 15 s duration, a 2 s retry, and a margin); changes of hands
 * later than that are the replicas sharing the shards again, not the outage's doing.
 */
const OUTAGE_RECOVERY_MS = 20_000;

/**
 * Sharded: when no replica held a shard: from each loss of a replica holding shards until others
 * held them, from each hand-back until the next holder took the shard, and API outages. With
 * `lease`, that shard's only (a run's); else any shard's.
 */
function shardless(record: SoakRecord, lease?: string): Interval[] {
  const out: Interval[] = [];
  for (const [name, list] of tenuresByLease(record)) {
    if (lease !== undefined && name !== lease) continue;
    list.forEach((t, i) => {
      if (t.holder !== "") return;
      const next = list.slice(i + 1).find((x) => x.holder !== "");
      out.push({ from: t.at, to: Math.min(next?.at ?? Infinity, record.endedAt) });
    });
  }
  const acquisitions = (record.tenures ?? []).filter((t) => t.holder !== "" && (lease === undefined || t.lease === lease));
  const tenures = lease === undefined ? undefined : (tenuresByLease(record).get(lease) ?? []);
  for (const fault of record.faults) {
    if (fault.skipped) continue;
    if (((fault.kind === "leader-sigkill" || fault.kind === "leader-rollout") && fault.replica) || (fault.kind === "watch-stall" && fault.leader && fault.replica)) {
      let to: number | undefined;
      if (tenures) {
        if (tenures.findLast((x) => x.at <= fault.at)?.holder === fault.replica) to = tenures.find((x) => x.at >= fault.at && x.holder !== "" && x.holder !== fault.replica)?.at ?? Infinity;
      } else {
        to = handedOver(record, fault.replica as string, fault.at);
      }
      if (to !== undefined) out.push({ from: fault.at, to: Math.min(to, record.endedAt) });
    }
    if (fault.kind === "apiserver-restart" || fault.kind === "etcd-restart") {
      const back = fault.until ?? record.endedAt;
      const retaken = acquisitions.filter((t) => t.at >= fault.at && t.at <= back + OUTAGE_RECOVERY_MS).map((t) => t.at);
      out.push({ from: fault.at, to: Math.max(back, ...retaken) });
    }
  }
  return out;
}

/**
 * When no replica led: from each loss of the leader until another replica held the lease, and API
 * outages. Sharded, when no replica held the shard of the run named `run` (without it: any shard).
 */
export function leaderless(record: SoakRecord, run?: string): Interval[] {
  if (sharded(record)) return shardless(record, run === undefined ? undefined : leaseOfRun(record, run));
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
 * every CONTACT_POLL_MS. A run queued meanwhile waits as it must, not stuck. The wait is the
 * memory of the replica that leads (or holds the run's shard): one that loses the run before the
 * wait is over leaves it to the next, which waits again from when it takes the run over.
 */
function unseenEndWaits(record: SoakRecord, pods: PodRecord[], noLeader: Interval[], takeovers: number[] = []): Interval[] {
  const unseen = blind(record, noLeader);
  const out: Interval[] = [];
  for (const p of pods) {
    if (p.goneAt === undefined) continue;
    const end = p.terminalAt ?? p.goneAt;
    // Sharded: the holder that saw the pod end may hand the run over before its next attempt
    // starts; the next holder never saw the end, and waits from when it took the shard.
    const next = pods.filter((q) => q.attempt > p.attempt).reduce((first, q) => Math.min(first, q.seenAt), Infinity);
    const takeover = takeovers.find((t) => t > end && t < next);
    let from: number;
    let noticed: number;
    if (inside(end, unseen)) [from, noticed] = [p.goneAt, p.goneAt];
    else if (takeover !== undefined) [from, noticed] = [takeover, Math.max(takeover, p.goneAt)];
    else continue;
    for (;;) {
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
      const done = contact + CONTACT_POLL_MS + grace + CONTACT_MARGIN_MS;
      const lost = noLeader.filter((i) => i.from >= noticed && i.from < done).sort((a, b) => a.from - b.from)[0];
      const taken = takeovers.find((t) => t > noticed && t < done);
      const again = Math.min(lost && lost.to > noticed ? lost.to : Infinity, taken ?? Infinity);
      if (!Number.isFinite(again)) {
        out.push({ from, to: done });
        break;
      }
      noticed = again;
    }
  }
  return out;
}

function lostOrStuck(record: SoakRecord, noLeaderOf: (run: string) => Interval[]): Violation[] {
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
    const noLeader = noLeaderOf(run.name);
    const pods = [...runPods.map((p) => ({ from: p.seenAt, to: p.goneAt ?? record.endedAt })), ...unseenEndWaits(record, runPods, noLeader, takeoversOf(record, run.name))];
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

const WRITE_VERBS = new Set(["create", "update", "patch", "delete"]);
/** A sandbox pod's run, from its name (<run>-<attempt>-<uid prefix>), when the observer did not see the pod. */
const runOfPodName = (pod: string) => /^(.*)-\d+(-[a-z0-9]{1,5})?$/.exec(pod)?.[1] ?? pod;
const iso = (t: number) => new Date(t).toISOString();
const describeTenure = (t: TenureRecord) => (t.holder ? `${t.holder} acquired it at ${iso(t.at)}` : `it was handed back at ${iso(t.at)}`);

/** The run an applied write of a replica was about, or undefined (a refused write changed nothing). */
function runWritten(write: WriteRecord, podRuns: Map<string, string>): string | undefined {
  if (!WRITE_VERBS.has(write.verb) || !write.name || write.code >= 400) return undefined;
  if (write.resource === "agentruns" || write.resource.startsWith("agentruns/")) return write.name;
  if (write.resource === "pods" || write.resource.startsWith("pods/")) return podRuns.get(write.name) ?? runOfPodName(write.name);
  return undefined;
}

/**
 * Which process of a replica wrote: the last one of its ServiceAccount started by then (a
 * replica's processes follow one another: each is started once the one before has exited).
 */
function writerOf(record: SoakRecord, write: WriteRecord): string {
  let writer: { identity: string; startedAt: number } | undefined;
  for (const r of record.replicas ?? []) if (r.user === write.user && r.startedAt <= write.at && (!writer || r.startedAt >= writer.startedAt)) writer = r;
  return writer?.identity ?? write.user;
}

/**
 * No run acted on by two replicas at once: every write a replica's process made to a run's objects
 * (the run, its status, its pods: the API server's audit log) falls within that process's tenure
 * of the Lease that decides the run (its shard's, or the leader's): at or after its acquireTime,
 * and before the Lease was next acquired by another. A hand-back ends nothing by itself: until
 * another holds the Lease nobody else writes. Writes close together by one writer to one run under
 * one tenure not its own are one violation. A history without these records has nothing to check.
 */
function sharedRuns(record: SoakRecord): { violations: Violation[]; writes: Findings["writes"] } {
  const sharding = record.sharding;
  const none = { violations: [], writes: { checked: 0, runs: 0, replicas: 0, tenures: record.tenures?.length ?? 0 } };
  if (!sharding || !record.writes?.length || !record.tenures) return none;
  const podRuns = new Map(record.pods.map((p) => [p.name, p.run]));
  const byLease = tenuresByLease(record);
  const episodes = new Map<string, { violation: Violation; more: number; last: number }>();
  const runs = new Set<string>();
  const writers = new Set<string>();
  let checked = 0;
  for (const write of [...record.writes].sort((a, b) => a.at - b.at)) {
    const run = runWritten(write, podRuns);
    if (run === undefined) continue;
    const shard = sharding.shards > 1 ? shardOf(sharding.namespace, run, sharding.shards) : 0;
    const lease = leaseOfRun(record, run) ?? `shard ${shard}`;
    const writer = writerOf(record, write);
    checked++;
    runs.add(run);
    writers.add(writer);
    const tenures = byLease.get(lease) ?? [];
    const index = tenures.findLastIndex((t) => t.holder !== "" && t.at <= write.at);
    const current = tenures[index];
    if (current?.holder === writer) continue;
    const key = `${writer}|${run}|${lease}|${index}`;
    const episode = episodes.get(key);
    if (episode) {
      episode.more++;
      episode.last = write.at;
      continue;
    }
    const own = tenures.findLast((t) => t.holder === writer && t.at <= write.at);
    const ownEnd = own ? tenures.find((t) => t.at >= own.at && t.holder !== "" && t.holder !== writer) : undefined;
    const next = tenures.find((t) => t.at > write.at);
    const events = [
      `write: ${writer} ${write.verb} ${write.resource} ${write.name} at ${iso(write.at)} (code ${write.code})`,
      `${lease}${sharding.shards > 1 ? ` (shard ${shard})` : ""}: ${current ? `${describeTenure(current)}` : "nobody had acquired it yet"}`,
      own ? `${writer}'s tenure began at ${iso(own.at)}${ownEnd ? ` and ended when ${ownEnd.holder} acquired it at ${iso(ownEnd.at)}` : ""}` : `${writer} had never acquired it`,
      ...(next ? [`next: ${describeTenure(next)}`] : []),
    ];
    episodes.set(key, { violation: { invariant: "sharedRuns", run, at: write.at, what: `${writer} wrote outside its tenure of ${lease}: ${events.join("; ")}` }, more: 0, last: write.at });
  }
  const violations = [...episodes.values()].map(({ violation, more, last }) => (more ? { ...violation, what: `${violation.what}; and ${more} more such write${more === 1 ? "" : "s"} until ${iso(last)}` } : violation));
  return { violations, writes: { checked, runs: runs.size, replicas: writers.size, tenures: record.tenures.length } };
}

function detection(record: SoakRecord, noLeaderOf: (run: string) => Interval[]): Findings["detection"] {
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
    (inside(deadline, noLeaderOf(p.run)) ? withoutLeader : withLeader).push(p.deletionSeenAt - deadline);
    const container = record.containers.filter((c) => c.pod === p.name).map((c) => c.to);
    const end = container.length ? Math.max(...container) : p.goneAt;
    if (end !== undefined) gone.push(end - deadline);
  }
  return { requestWithLeader: stats(withLeader), requestWithoutLeader: stats(withoutLeader), containerGone: stats(gone) };
}

function failover(record: SoakRecord): Findings["failover"] {
  const gap = (f: FaultRecord) => {
    if (sharded(record)) {
      const to = handedOver(record, f.replica as string, f.at);
      return to !== undefined && Number.isFinite(to) ? to - f.at : undefined;
    }
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
  // Sharded, a run is without a supervisor only while its own shard has no holder.
  const noLeader = leaderless(record);
  const byRun = new Map<string, Interval[]>();
  const noLeaderOf = (run: string) => (sharded(record) ? (byRun.get(run) ?? (byRun.set(run, leaderless(record, run)).get(run) as Interval[])) : noLeader);
  const shared = sharedRuns(record);
  const violations = [...duplicates(record), ...shared.violations, ...earlyRetries(record), ...falseKills(record), ...lostOrStuck(record, noLeaderOf), ...ledgerGaps(record), ...sideEffects(record), ...misappliedAnswers(record), ...crashes(record)];
  const counts = Object.fromEntries(INVARIANTS.map((i) => [i, violations.filter((v) => v.invariant === i).length])) as Record<Invariant, number>;
  return { violations, counts, detection: detection(record, noLeaderOf), failover: failover(record), writes: shared.writes };
}
