// The soak's observer must be trusted to find what breaks: its analysis is checked here on made-up
// records, with one violation of each kind (the soak's own --self-test) and with look-alikes that
// must not count.
import { describe, expect, it } from "vitest";
import { analyse, endStateProblem, INVARIANTS } from "../../../measure/soak/analyse.ts";
import { schedule, random } from "../../../measure/soak/faults.ts";
import type { SoakRecord } from "../../../measure/soak/record.ts";
import { selfTest, selfTestRecord } from "../../../measure/soak/self-test.ts";

const S = 1000;

describe("soak analysis", () => {
  it("counts each injected violation exactly once (the --self-test record)", () => {
    const result = selfTest();
    expect(result.counts).toEqual(Object.fromEntries(INVARIANTS.map((i) => [i, 1])));
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
