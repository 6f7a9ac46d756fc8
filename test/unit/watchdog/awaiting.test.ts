// An approval wait in its own words (policy/awaiting.ts, rule 11): the request recorded, an answer
// consumed and said, a released sandbox, a rejection and a timeout, each with its Event.
import { describe, expect, it } from "vitest";
import { type World, startedWorld } from "../world.ts";

const M = 60_000;
const SPEC = { watchdog: { heartbeatTimeout: "1m", releaseAwaitingAfter: "5m", approvalTimeout: "1h" } };

function asking(): { w: World; id: string } {
  const w = startedWorld(SPEC);
  w.heartbeat("AwaitingReply");
  w.settle();
  return { w, id: w.status.approval.id as string };
}

describe("a request", () => {
  it("is recorded with an Event that says how to answer it", () => {
    const w = startedWorld(SPEC);
    w.heartbeat("AwaitingReply");
    const plan = w.reconcile();
    const id = w.status.approval.id as string;
    expect(plan.summary).toBe(`awaiting a reply to request ${id}`);
    expect(w.status.approval).toMatchObject({ state: "Pending", attempt: 1 });
    expect(plan.events).toContainEqual({ type: "Normal", reason: "ApprovalRequested", action: "AwaitReply", note: expect.stringMatching(/^the agent awaits a reply: annotate watchdog\.dev\//) });
  });
});

describe("an answer", () => {
  it("approves the live sandbox's request: consumed from the annotations, recorded, and said", () => {
    const { w, id } = asking();
    w.answer("approve", "yes");
    const plan = w.reconcile();
    expect(plan.summary).toBe("approved");
    expect(plan.events).toEqual([{ type: "Normal", reason: "Approved", action: "Approve", note: `request ${id} was approved` }]);
    expect(plan.deletePods).toEqual([]);
    expect(w.status.approval).toMatchObject({ id, state: "Approved", answer: "yes" });
    expect(w.annotations).not.toHaveProperty("watchdog.dev/approve");
    expect(w.annotations).not.toHaveProperty("watchdog.dev/approval-id");
  });

  it("ends the run on a rejection, removing the sandbox without a kill", () => {
    const { w, id } = asking();
    w.answer("reject", "too risky");
    const plan = w.reconcile();
    expect(plan.summary).toBe("failed: Rejected");
    expect(w.status).toMatchObject({ phase: "Failed", reason: "Rejected", message: "the request was rejected: too risky" });
    expect(w.status.approval).toMatchObject({ id, state: "Rejected", reason: "too risky" });
    expect(plan.events).toEqual([{ type: "Warning", reason: "Rejected", action: "Fail", note: "the request was rejected: too risky" }]);
    // Its own grace: the sandbox is cleaned up, not killed.
    expect(plan.deletePods).toEqual([{ name: "r-1-uidr", uid: "uid-r-1-uidr" }]);
  });

  it("ends the run when none comes within approvalTimeout", () => {
    const { w } = asking();
    w.runUntil(w.now + 60 * M);
    const plan = w.plans.find((p) => p.summary.startsWith("failed"))!;
    expect(plan.summary).toBe("failed: ApprovalTimeout");
    expect(w.status).toMatchObject({ phase: "Failed", reason: "ApprovalTimeout", message: "no reply within 1h" });
    expect(w.status.approval.state).toBe("TimedOut");
    expect(plan.events).toEqual([{ type: "Warning", reason: "ApprovalTimeout", action: "Fail", note: "no reply within 1h" }]);
  });
});

describe("a long wait", () => {
  it("releases the sandbox after releaseAwaitingAfter, saying which request resumes it, and keeps the timeout", () => {
    const { w, id } = asking();
    w.runUntil(w.now + 5 * M);
    const plan = w.plans.find((p) => p.summary.startsWith("released"))!;
    expect(plan.summary).toBe("released the sandbox while awaiting a reply");
    expect(plan.deletePods).toEqual([{ name: "r-1-uidr", uid: "uid-r-1-uidr" }]);
    expect(plan.events).toEqual([{ type: "Normal", reason: "SandboxReleased", action: "DeletePod", note: "released sandbox pod r-1-uidr while the run awaits a reply" }]);
    expect(plan.wakeAt).toBe(Date.parse(w.status.approval.requestedAt) + 60 * M);
    expect(w.status).toMatchObject({ phase: "AwaitingReply", reason: "SandboxReleased", message: `sandbox pod r-1-uidr released after 5m awaiting a reply; approve request ${id} to resume` });
  });

  it("resumes in a new sandbox once approved after the release", () => {
    const { w, id } = asking();
    w.runUntil(w.now + 5 * M);
    w.answer("approve", "ship");
    const plan = w.reconcile();
    expect(plan.summary).toBe("approved; resuming in a new sandbox; starting attempt 2");
    expect(plan.events).toContainEqual({ type: "Normal", reason: "Approved", action: "Approve", note: `request ${id} was approved` });
    expect(w.status.transitions).toContainEqual(expect.objectContaining({ phase: "Queued", reason: "Approved", message: expect.stringMatching(/^approved; attempt 2 resumes from/) }));
    expect(w.status).toMatchObject({ phase: "Starting", attempt: 2 });
    expect(w.status.retryAfter).toBeUndefined();
  });
});
