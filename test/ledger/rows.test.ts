// The pure parts of the ledger: what observe() queues for a run, the bounded buffer, and how a
// batch collapses repeats. No database needed.
import { describe, expect, it } from "vitest";
import { RowQueue } from "../../operator/ledger/queue.ts";
import { runRef, RunMemory, type Row } from "../../operator/ledger/rows.ts";
import { dedupe } from "../../operator/ledger/store.ts";
import { RunSim } from "./support.ts";

const SEEN = "2030-01-01T00:00:00.000Z";

function diff(memory: RunMemory, sim: RunSim | ReturnType<RunSim["object"]>): Row[] {
  const run = sim instanceof RunSim ? sim.object() : sim;
  return memory.diff(run, runRef(run)!, SEEN);
}

const describeRows = (rows: Row[]) =>
  rows.map((r) =>
    r.kind === "transition" ? `T ${r.row.to_phase}` : r.kind === "toolCall" ? `C ${r.row.call_id} ${r.row.state}` : `U ${r.row.attempt} ${r.row.input_tokens}`,
  );

describe("RunMemory", () => {
  it("queues each transition and each call state once", () => {
    const sim = new RunSim("ns", "r").to("Queued").to("Starting");
    const memory = new RunMemory(runRef(sim.object())!);
    expect(describeRows(diff(memory, sim))).toEqual(["T Queued", "T Starting"]);
    expect(diff(memory, sim)).toEqual([]);
    const id = sim.startCall("search");
    sim.to("Planning");
    expect(describeRows(diff(memory, sim))).toEqual(["T Planning", `C ${id} Started`]);
    sim.finishCall(id);
    expect(describeRows(diff(memory, sim))).toEqual([`C ${id} Succeeded`]);
    expect(diff(memory, sim)).toEqual([]);
  });

  it("finds nothing new in an older version observed after a newer one", () => {
    const sim = new RunSim("ns", "r").to("Queued");
    const id = sim.startCall("search");
    const older = sim.object();
    sim.finishCall(id).to("Starting");
    const memory = new RunMemory(runRef(older)!);
    diff(memory, sim);
    expect(diff(memory, older)).toEqual([]);
  });

  it("still queues a transition stamped earlier than the newest it has seen", () => {
    // A new leader whose clock runs behind the old one's.
    const sim = new RunSim("ns", "r").to("Queued").to("Starting");
    const memory = new RunMemory(runRef(sim.object())!);
    diff(memory, sim);
    const run = sim.object() as any;
    const earlier = new Date(Date.parse(run.status.transitions[1].time) - 1).toISOString();
    run.status.transitions.push({ phase: "Planning", from: "Starting", attempt: 1, time: earlier });
    expect(describeRows(diff(memory, run))).toEqual(["T Planning"]);
  });

  it("remembers only calls the run still holds", () => {
    const sim = new RunSim("ns", "r").to("Queued");
    const memory = new RunMemory(runRef(sim.object())!);
    for (let i = 0; i < 100; i++) sim.finishCall(sim.startCall("t"));
    diff(memory, sim);
    expect((memory as any).calls.size).toBe(64);
  });

  it("tells whether an object is at least as new as every version it observed", () => {
    const sim = new RunSim("ns", "r").to("Queued").to("Starting");
    const id = sim.startCall("search");
    const started = sim.object();
    sim.finishCall(id);
    const finished = sim.object();
    sim.to("Planning");
    const planning = sim.object();
    const memory = new RunMemory(runRef(planning)!);
    expect(memory.coveredBy(started)).toBe(true); // it has seen nothing yet
    diff(memory, planning);
    expect(memory.coveredBy(planning)).toBe(true);
    expect(memory.coveredBy(finished)).toBe(false); // lacks the newest transition

    const other = new RunSim("ns", "r2").to("Queued");
    const call = other.startCall("t");
    const before = other.object();
    other.finishCall(call);
    const memory2 = new RunMemory(runRef(before)!);
    diff(memory2, other);
    expect(memory2.coveredBy(before)).toBe(false); // the call is only Started there
    expect(memory2.coveredBy(other.object())).toBe(true);
    for (let i = 0; i < 64; i++) other.finishCall(other.startCall("t"));
    expect(memory2.coveredBy(other.object())).toBe(true); // the call rotated out of a newer object
  });

  it("notes dropped rows up to a bound, then only counts them", () => {
    const sim = new RunSim("ns", "r").to("Queued");
    const memory = new RunMemory(runRef(sim.object())!);
    const [row] = diff(memory, sim) as [Row];
    for (let i = 0; i < 1005; i++) memory.noteDropped(row);
    expect(memory.droppedTransitions).toHaveLength(1000);
    expect(memory.droppedUntracked).toBe(5);
    expect(memory.hasDropped).toBe(true);
  });

  it("keeps one dropped usage row per attempt, each figure at its greatest", () => {
    const sim = new RunSim("ns", "r").to("Queued").to("Starting").to("Planning");
    const memory = new RunMemory(runRef(sim.object())!);
    diff(memory, sim);
    const usageOf = (usage: Parameters<RunSim["report"]>[0], attempt = 1) => {
      sim.attempt = attempt;
      sim.report(usage);
      return diff(memory, sim).filter((r) => r.kind === "attemptUsage");
    };
    for (const row of usageOf({ inputTokens: 10, outputTokens: 5, cost: "0.3", toolCalls: 2 })) memory.noteDropped(row);
    for (const row of usageOf({ inputTokens: 12, outputTokens: 5, cost: "0.3", toolCalls: 3 })) memory.noteDropped(row);
    for (const row of usageOf({ inputTokens: 1, outputTokens: 1, toolCalls: 0 }, 2)) memory.noteDropped(row);
    expect([...memory.droppedUsage.values()].map((u) => [u.attempt, u.input_tokens, u.output_tokens, u.tool_calls, u.cost])).toEqual([
      [1, 12, 5, 3, "0.3"],
      [2, 1, 1, 0, null],
    ]);
    expect(memory.hasDropped).toBe(true);
  });
});

describe("RowQueue", () => {
  const rows = (n: number, from = 0): Row[] =>
    Array.from({ length: n }, (_, i) => ({ kind: "transition", row: { time: String(from + i) } }) as unknown as Row);
  const times = (list: Row[]) => list.map((r) => (r.row as { time: string }).time);

  it("drops the oldest rows when full", () => {
    const dropped: Row[] = [];
    const queue = new RowQueue(3, (r) => dropped.push(r));
    for (const r of rows(5)) queue.push(r);
    expect(times(dropped)).toEqual(["0", "1"]);
    expect(times(queue.take(10))).toEqual(["2", "3", "4"]);
    expect(queue.length).toBe(0);
  });

  it("puts a failed batch back in front, still dropping the oldest beyond capacity", () => {
    const dropped: Row[] = [];
    const queue = new RowQueue(4, (r) => dropped.push(r));
    for (const r of rows(3)) queue.push(r);
    const batch = queue.take(2);
    for (const r of rows(2, 3)) queue.push(r);
    queue.putBack(batch);
    expect(times(dropped)).toEqual(["0"]);
    expect(times(queue.take(10))).toEqual(["1", "2", "3", "4"]);
  });

  it("stays correct across many takes", () => {
    const queue = new RowQueue(100_000, () => undefined);
    const seen: string[] = [];
    for (let round = 0; round < 50; round++) {
      for (const r of rows(100, round * 100)) queue.push(r);
      seen.push(...times(queue.take(70)));
    }
    seen.push(...times(queue.take(100_000)));
    expect(seen).toEqual(Array.from({ length: 5000 }, (_, i) => String(i)));
  });
});

describe("dedupe", () => {
  it("keeps a call's furthest state and the span it was seen over", () => {
    const sim = new RunSim("ns", "r").to("Queued");
    const id = sim.startCall("t");
    const memoryA = new RunMemory(runRef(sim.object())!);
    const started = sim.object();
    const [s] = memoryA.diff(started, runRef(started)!, "2030-01-01T00:00:01.000Z").filter((r) => r.kind === "toolCall");
    sim.finishCall(id);
    const finished = sim.object();
    const [f] = new RunMemory(runRef(finished)!).diff(finished, runRef(finished)!, "2030-01-01T00:00:02.000Z").filter((r) => r.kind === "toolCall");
    for (const order of [[s!, f!, s!], [f!, s!]]) {
      const { toolCalls } = dedupe(order);
      expect(toolCalls).toHaveLength(1);
      expect(toolCalls[0]).toMatchObject({ state: "Succeeded", first_seen: "2030-01-01T00:00:01.000Z", last_seen: "2030-01-01T00:00:02.000Z" });
    }
  });
});
