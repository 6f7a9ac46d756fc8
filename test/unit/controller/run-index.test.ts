// The run index files what the watches show by run, and keeps what this operator saw itself: the
// pods of a run (moved when a relabel moves them), the final states of deleted pods for a while,
// the heartbeat value it saw appear, and when it first saw each container run.
import { describe, expect, it } from "vitest";
import { RunIndex } from "../../../operator/controller/run-index.ts";

type Json = Record<string, any>;

const pod = (name: string, run: string, uid: string, extra: Json = {}): Json => ({
  metadata: { namespace: "ns", name, uid, labels: { "watchdog.dev/run": run } },
  ...extra,
});
const run = (heartbeat?: Json, attempt = 1): Json => ({ metadata: { namespace: "ns", name: "r" }, status: { attempt, ...(heartbeat ? { heartbeat } : {}) } });
const running = { status: { containerStatuses: [{ name: "agent", state: { running: {} } }] } };

describe("RunIndex", () => {
  it("files pods by their run label and ignores pods without one", () => {
    const index = new RunIndex();
    expect(index.podChanged("add", pod("p1", "r", "u1"))).toEqual({ key: "ns/r" });
    expect(index.podChanged("add", { metadata: { namespace: "ns", name: "x", uid: "u9" } })).toBeUndefined();
    expect(index.pods("ns/r").map((p: Json) => p.metadata.name)).toEqual(["p1"]);
  });

  it("moves a relabelled pod and names the run it left", () => {
    const index = new RunIndex();
    index.podChanged("add", pod("p1", "r", "u1"));
    expect(index.podChanged("update", pod("p1", "other", "u1"))).toEqual({ key: "ns/other", movedFrom: "ns/r" });
    expect(index.pods("ns/r")).toEqual([]);
    expect(index.pods("ns/other")).toHaveLength(1);
  });

  it("keeps a deleted pod's final state for ten minutes, then drops it", () => {
    let now = 1_000_000;
    const index = new RunIndex(() => now);
    index.podChanged("add", pod("p1", "r", "u1"));
    index.podChanged("delete", pod("p1", "r", "u1", { status: { phase: "Failed" } }));
    expect(index.pods("ns/r")).toEqual([]);
    expect(index.deletedPods("ns/r").map((p: Json) => p.status.phase)).toEqual(["Failed"]);
    now += 10 * 60_000;
    expect(index.deletedPods("ns/r")).toHaveLength(1);
    now += 1;
    expect(index.deletedPods("ns/r")).toEqual([]);
  });

  it("remembers when a new heartbeat value was seen, only while it is the run's current one", () => {
    let now = 5_000;
    const index = new RunIndex(() => now);
    const first = run({ time: "2026-01-01T00:00:00Z", attempt: 1, state: "Planning" });
    index.runChanged("add", first);
    expect(index.heartbeatSeenAt("ns/r", first)).toBeUndefined(); // seen at the start, not seen to appear
    now = 7_000;
    const second = run({ time: "2026-01-01T00:00:05Z", attempt: 1, state: "Planning" });
    index.runChanged("update", second, first);
    expect(index.heartbeatSeenAt("ns/r", second)).toBe(7_000);
    expect(index.heartbeatSeenAt("ns/r", first)).toBeUndefined();
    index.forgetRun("ns/r");
    expect(index.heartbeatSeenAt("ns/r", second)).toBeUndefined();
  });

  it("keeps when each container was first seen running, on its own clock", () => {
    let now = 1_000;
    const index = new RunIndex(() => now);
    index.podChanged("add", pod("p1", "r", "u1", running));
    now = 9_000;
    index.podChanged("update", pod("p1", "r", "u1", running));
    expect(index.containersSeenRunning("u1")?.get("agent")).toBe(1_000);
    index.podChanged("delete", pod("p1", "r", "u1", running));
    expect(index.containersSeenRunning("u1")).toBeUndefined();
  });
});
