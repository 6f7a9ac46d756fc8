// The soak's observer must be trusted to find what breaks: its analysis is checked here on made-up
// records, with one violation of each kind (the soak's own --self-test) and with look-alikes that
// must not count.
import { describe, expect, it } from "vitest";
import { analyse, endStateProblem, INVARIANTS } from "../../../measure/soak/analyse.ts";
import { schedule, random } from "../../../measure/soak/faults.ts";
import type { SoakRecord } from "../../../measure/soak/record.ts";
import { replicaUser, selfTest, selfTestHandoffRecord, selfTestRecord } from "../../../measure/soak/self-test.ts";

const S = 1000;

describe("soak analysis", () => {
  it("counts each injected violation exactly once (the --self-test record)", () => {
    const result = selfTest();
    expect(result.counts).toEqual(Object.fromEntries(INVARIANTS.map((i) => [i, 1])));
    expect(result.handoff.violations).toEqual([]);
    expect(result.ok).toBe(true);
  });

  it("counts nothing once the injected violations are taken out", () => {
    const record: SoakRecord = selfTestRecord();
    record.containers = record.containers.filter((c) => c.pod !== "dup-2");
    record.pods = record.pods.filter((p) => p.name !== "early-2" && p.name !== "falsekill-1");
    record.phases = record.phases.filter((p) => p.runUid !== "uid-stuck");
    record.runs.find((r) => r.name === "ledger")!.transitionsSeen.pop();
    record.emails.email = 1;
    const misapplied = record.approvals!.find((a) => a.run === "misapplied")!;
    misapplied.answer = "ship it";
    misapplied.decidedSeenAt = record.answers!.find((a) => a.run === "misapplied" && !a.stray)!.at + S;
    record.operatorExits = record.operatorExits.filter((e) => e.bySoak);
    record.writes = record.writes!.filter((w) => !(w.name === "shared" && w.user === replicaUser("b")));
    expect(analyse(record).violations).toEqual([]);
  });

  it("takes only an answer that named the request, given before it was decided, as applied rightly", () => {
    const record = selfTestRecord();
    const approved = record.approvals!.find((a) => a.run === "approved")!;
    const right = record.answers!.find((a) => a.run === "approved" && !a.stray)!;
    expect(analyse(record).counts.misappliedAnswers).toBe(1);
    approved.decidedSeenAt = right.at - 1; // decided before the answer was sent: not by it
    expect(analyse(record).counts.misappliedAnswers).toBe(2);
    approved.decidedSeenAt = right.at + S;
    right.requestId = "1-other"; // the right text, but naming another request
    expect(analyse(record).counts.misappliedAnswers).toBe(2);
    right.requestId = approved.id;
    record.approvals!.push({ ...approved, id: "2-a", state: "TimedOut", answer: undefined }); // not decided by an answer
    expect(analyse(record).counts.misappliedAnswers).toBe(1);
  });

  it("takes two containers seen in the same sample as running at once", () => {
    const record = selfTestRecord();
    const dup1 = record.containers.find((c) => c.pod === "dup-1")!;
    const dup2 = record.containers.find((c) => c.pod === "dup-2")!;
    dup2.from = dup1.to - 1; // seen together in dup-1's last sample
    expect(analyse(record).counts.duplicateSandboxes).toBe(1);
    dup2.from = dup1.to; // the next sample
    expect(analyse(record).counts.duplicateSandboxes).toBe(0);
  });

  it("does not call a kill at the deadline false, within the server's one-second resolution", () => {
    const record = selfTestRecord();
    const pod = record.pods.find((p) => p.name === "falsekill-1")!;
    pod.deletionRequestedAt = record.heartbeats.find((h) => h.runUid === "uid-falsekill")!.acceptedAt + 29 * S;
    expect(analyse(record).counts.falseKills).toBe(0);
    pod.deletionRequestedAt -= 1;
    expect(analyse(record).counts.falseKills).toBe(1);
  });

  it("does not count a retry's wait while no replica leads, and counts it once one does", () => {
    const record = selfTestRecord();
    const stuck = record.phases.find((p) => p.runUid === "uid-stuck" && p.phase === "Queued")!;
    record.faults.push({ kind: "leader-sigkill", at: stuck.retryAfter!, detail: "", replica: "replica-b" });
    record.leases.push({ at: stuck.retryAfter! + 30 * S, holder: "replica-c" });
    expect(analyse(record).counts.lostOrStuckRuns).toBe(0);
  });

  it("lets a retry wait out rule 9 for a pod whose end the operator could not see, and no longer", () => {
    const record = selfTestRecord();
    const stuck = record.phases.find((p) => p.runUid === "uid-stuck" && p.phase === "Queued")!;
    const first = record.pods.find((p) => p.name === "stuck-1")!;
    const second = record.pods.find((p) => p.name === "stuck-2")!;
    first.graceSeconds = 5;
    // The pod ends while every operator connection is cut: the operator finds its object gone with
    // no final state, and waits for the node's next Lease renewal, a look, the grace and the margin.
    record.faults.push({ kind: "watch-cut", at: first.terminalAt! - 1 * S, detail: "" });
    const noticed = first.terminalAt! - 1 * S + 5 * S; // the cut's relist
    const bound = noticed + 10 * S + 10 * S + 5 * S + 22 * S; // Lease renewal, a look, grace, margin
    second.seenAt = second.createdAt = bound - 1 * S;
    record.phases.find((p) => p.runUid === "uid-stuck" && p.phase === "Starting")!.at = bound - 1 * S;
    expect(stuck.retryAfter! < bound).toBe(true);
    expect(analyse(record).counts.lostOrStuckRuns).toBe(0);
    // Past the bound, a replica leading, no pod: stuck.
    second.seenAt = second.createdAt = bound + 16 * S;
    record.phases.find((p) => p.runUid === "uid-stuck" && p.phase === "Starting")!.at = bound + 16 * S;
    expect(analyse(record).counts.lostOrStuckRuns).toBe(1);
    // Seen ending, the pod was confirmed at once: the same wait is stuck.
    record.faults.pop();
    second.seenAt = second.createdAt = bound - 1 * S;
    record.phases.find((p) => p.runUid === "uid-stuck" && p.phase === "Starting")!.at = bound - 1 * S;
    expect(analyse(record).counts.lostOrStuckRuns).toBe(1);
  });

  it("finds a write outside the writer's tenure, names the events, and counts a burst of them once", () => {
    const record = selfTestRecord();
    const [violation] = analyse(record).violations.filter((v) => v.invariant === "sharedRuns");
    expect(violation?.run).toBe("shared");
    expect(violation?.what).toContain("write: replica-b patch agentruns/status shared at 2026-01-01T12:00:50.000Z (code 200)");
    expect(violation?.what).toContain("agent-watchdog-soak: replica-a acquired it at 2026-01-01T11:59:55.000Z");
    expect(violation?.what).toContain("next: replica-b acquired it at 2026-01-01T12:01:39.000Z");
    // More writes of replica-b to the run under replica-a's tenure: the same episode.
    record.writes!.push({ ...record.writes!.find((w) => w.code === 200 && w.name === "shared" && w.user === replicaUser("b"))!, at: Date.UTC(2026, 0, 1, 12, 1, 0) });
    expect(analyse(record).counts.sharedRuns).toBe(1);
    expect(analyse(record).violations.find((v) => v.invariant === "sharedRuns")?.what).toContain("and 1 more such write until 2026-01-01T12:01:00.000Z");
    // A write of replica-b to a pod of another run, before it led: another episode.
    record.writes!.push({ user: replicaUser("b"), verb: "delete", resource: "pods", name: "clean-1", at: Date.UTC(2026, 0, 1, 12, 0, 10), code: 200 });
    expect(analyse(record).counts.sharedRuns).toBe(2);
    // Reads and refused writes change nothing.
    record.writes!.push({ user: replicaUser("b"), verb: "get", resource: "agentruns", name: "ledger", at: Date.UTC(2026, 0, 1, 12, 0, 10), code: 200 });
    record.writes!.push({ user: replicaUser("b"), verb: "update", resource: "agentruns", name: "ledger", at: Date.UTC(2026, 0, 1, 12, 0, 10), code: 409 });
    expect(analyse(record).counts.sharedRuns).toBe(2);
  });

  it("judges writes around a shard handoff by the tenure of the writer's own process", () => {
    const clean = selfTestHandoffRecord();
    expect(analyse(clean).violations).toEqual([]);
    expect(analyse(clean).writes).toEqual({ checked: 10, runs: 2, replicas: 3, tenures: 5 });
    const moved = clean.runs.find((r) => r.behaviour === "crash")!.name;
    const at = (s: number) => clean.startedAt + s * S;
    // The killed replica's successor (the same ServiceAccount) writes before it took the shard.
    const early = selfTestHandoffRecord();
    early.writes!.push({ user: replicaUser("a"), verb: "patch", resource: "agentruns/status", name: moved, at: at(65), code: 200 });
    expect(analyse(early).counts.sharedRuns).toBe(1);
    expect(analyse(early).violations[0]?.what).toContain("soak-a-2 had never acquired it");
    // The replica that handed the shard back writes once its successor holds it.
    const late = selfTestHandoffRecord();
    late.writes!.push({ user: replicaUser("b"), verb: "create", resource: "pods", name: `${moved}-3-c0ffe`, at: at(71), code: 201 });
    expect(analyse(late).counts.sharedRuns).toBe(1);
    expect(analyse(late).violations[0]?.what).toContain("soak-b-1's tenure began at 2026-01-01T12:00:56.000Z and ended when soak-a-2 acquired it at 2026-01-01T12:01:11.000Z");
    // The killed process itself, writing after the shard was taken (a request held up on the way).
    const stale = selfTestHandoffRecord();
    stale.replicas = stale.replicas!.filter((r) => r.identity !== "soak-a-2");
    stale.tenures = stale.tenures!.filter((t) => t.holder !== "soak-a-2" && t.holder !== "");
    stale.writes = stale.writes!.filter((w) => w.at < at(70));
    stale.writes.push({ user: replicaUser("a"), verb: "patch", resource: "agentruns/status", name: moved, at: at(57), code: 200 });
    expect(analyse(stale).counts.sharedRuns).toBe(1);
  });

  it("checks nothing in a history without tenures and writes, and finds nothing there", () => {
    const record = selfTestRecord();
    delete record.sharding;
    delete record.replicas;
    delete record.tenures;
    delete record.writes;
    const findings = analyse(record);
    expect(findings.counts.sharedRuns).toBe(0);
    expect(findings.writes.checked).toBe(0);
  });

  it("waits out a killed replica's shards moving to another, and rule 9 again for each new holder, and no longer", () => {
    const record = selfTestHandoffRecord();
    expect(analyse(record).failover.hard).toMatchObject({ count: 1, max: 16 * S });
    const moved = record.runs.find((r) => r.behaviour === "crash")!;
    const first = record.pods.find((p) => p.runUid === moved.uid && p.attempt === 1)!;
    const second = record.pods.find((p) => p.runUid === moved.uid && p.attempt === 2)!;
    const starting = record.phases.find((p) => p.runUid === moved.uid && p.phase === "Starting")!;
    const retryAt = (s: number) => {
      second.seenAt = second.createdAt = starting.at = record.startedAt + s * S;
      second.terminalAt = second.goneAt = record.endedAt = record.startedAt + (s + 20) * S;
      return analyse(record).counts.lostOrStuckRuns;
    };
    // soak-b-1, taking the shard at 56 s, never saw the first pod end: it waits for the node's next
    // Lease renewal (10 s), a look (10 s), the pod's grace (5 s) and the margin (22 s); soak-a-2,
    // taking it over at 71 s, waits all that again: until 118 s.
    first.graceSeconds = 5;
    expect(retryAt(118 + 14)).toBe(0);
    expect(retryAt(118 + 16)).toBe(1);
    // Without the second takeover, the wait ends at 103 s.
    record.tenures = record.tenures!.filter((t) => t.holder !== "soak-a-2" && t.holder !== "");
    expect(retryAt(103 + 14)).toBe(0);
    expect(retryAt(103 + 16)).toBe(1);
  });

  it("finds a lost run, and allows a faulted run the restarts its faults cost", () => {
    const run = { name: "x", uid: "u", behaviour: "healthy", heartbeatTimeoutMs: 30 * S, maxRestarts: 2, faulted: [] as string[], transitionsSeen: [], toolCallsSeen: [] };
    expect(endStateProblem(run)).toBe("the run is gone");
    expect(endStateProblem({ ...run, final: { phase: "Completed", restarts: 1, attempt: 2 } })).toContain("expected Completed with 0 restarts");
    expect(endStateProblem({ ...run, faulted: ["node-pause"], final: { phase: "Completed", restarts: 1, attempt: 2 } })).toBeUndefined();
    expect(endStateProblem({ ...run, behaviour: "tool-loop", final: { phase: "NeedsHumanIntervention", reason: "ToolLoop" } })).toBeUndefined();
  });

  it("schedules every fault kind within five minutes on the real node, and the same faults for the same seed", () => {
    const kinds = new Set(schedule(300 * S, "kubelet", random(1)).map((f) => f.kind));
    expect([...kinds].sort()).toEqual(["apiserver-restart", "conflict-storm", "etcd-restart", "leader-rollout", "leader-sigkill", "node-pause", "postgres-stop", "sandbox-kill", "watch-cut", "watch-stall"]);
    expect(schedule(1800 * S, "kwok", random(7))).toEqual(schedule(1800 * S, "kwok", random(7)));
    expect(schedule(1800 * S, "kwok", random(7)).some((f) => f.kind === "node-pause")).toBe(false);
  });
});
