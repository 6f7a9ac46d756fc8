// One timeline from Events, status.transitions and the ledger.
import { describe, expect, it } from "vitest";
import { eventItem, historyOfUid, mergeTimeline, timelineLine } from "../../../operator/cli/plugin/timeline.ts";
import type { RunHistory } from "../../../operator/ledger/read.ts";

const t = (s: number) => new Date(Date.parse("2026-11-30T12:00:00Z") + s * 1000).toISOString();

function event(reason: string, at: string, note: string, extra: Record<string, unknown> = {}) {
  return { metadata: { name: `r.${reason}` }, eventTime: at, type: "Warning", reason, note, ...extra };
}

function ledgerHistory(): RunHistory {
  const base = { runUid: "uid-1", namespace: "ns", name: "r" };
  return {
    namespace: "ns",
    name: "r",
    uids: ["uid-1"],
    transitions: [
      { ...base, phase: "Queued", attempt: 1, time: t(0) },
      { ...base, phase: "Starting", from: "Queued", attempt: 1, time: t(1) },
      { ...base, phase: "Planning", from: "Starting", attempt: 1, time: t(3) },
    ],
    toolCalls: [
      {
        runUid: "uid-1",
        namespace: "ns",
        runName: "r",
        id: "c1",
        name: "search",
        argsHash: "h",
        state: "Failed",
        attempt: 1,
        error: { httpStatus: 429, message: "slow down" },
        startedAt: t(4),
        finishedAt: t(5.5),
        firstSeen: t(4),
        lastSeen: t(6),
      },
    ],
    gaps: [{ ...base, kind: "transitions", cause: "dropped", after: { time: t(3), phase: "Planning" }, before: { time: t(8), from: "Queued", phase: "Starting" }, missing: 2, detectedAt: t(9) }],
    usage: [
      {
        runUid: "uid-1",
        namespace: "ns",
        runName: "r",
        attempt: 1,
        inputTokens: 12_000,
        outputTokens: 800,
        cost: "0.31",
        currency: "USD",
        toolCalls: 1,
        model: "gpt-5",
        firstSeen: t(3),
        lastSeen: t(7),
      },
    ],
  };
}

describe("the merged timeline", () => {
  it("orders Events, transitions and ledger records by time, each transition once", () => {
    const items = mergeTimeline({
      // status still holds the two newest transitions; one of them is in the ledger already
      transitions: [
        { phase: "Planning", from: "Starting", attempt: 1, time: t(3) },
        { phase: "Queued", from: "Planning", reason: "RateLimited", message: "the last call was rate limited", attempt: 2, time: t(7) },
      ],
      events: [event("RateLimited", "2026-11-30T12:00:07.000500Z", "attempt 1: rate limited"), event("SandboxCreated", t(1), "created pod r-1", { type: "Normal" })],
      history: ledgerHistory(),
    });
    expect(items.map(timelineLine)).toEqual([
      `${t(0)}  phase  Queued  (attempt 1)`,
      `${t(1)}  phase  Queued -> Starting  (attempt 1)`,
      `${t(1)}  event  Normal SandboxCreated: created pod r-1`,
      `${t(3)}  phase  Starting -> Planning  (attempt 1)`,
      `${t(4)}  tool   search [c1] Failed in 1.5s: HTTP 429 slow down  (attempt 1)`,
      `${t(7)}  phase  Planning -> Queued  (attempt 2)  RateLimited: the last call was rate limited`,
      `${t(7)}  event  Warning RateLimited: attempt 1: rate limited`,
      `${t(7)}  usage  attempt 1 spent 12000 input + 800 output tokens, 0.31 USD, 1 tool call (model gpt-5)`,
      `${t(8)}  GAP    could not recover 2 transitions after Planning at ${t(3)}, before Queued -> Starting at ${t(8)} (the buffer dropped them and the run no longer holds them)`,
    ]);
  });

  it("reads an Event's time from eventTime, else the deprecated fields, and counts repeats", () => {
    expect(eventItem({ eventTime: "2026-11-30T12:00:01.123456Z", reason: "R", note: "n" })).toEqual({
      kind: "event",
      time: "2026-11-30T12:00:01.123Z",
      type: "Normal",
      reason: "R",
      note: "n",
      count: 1,
    });
    expect(eventItem({ eventTime: null, deprecatedLastTimestamp: t(2), deprecatedCount: 4, type: "Warning", reason: "R", note: "n" })).toMatchObject({ time: t(2), count: 4 });
    expect(eventItem({ metadata: { creationTimestamp: t(3) }, series: { count: 7 }, reason: "R" })).toMatchObject({ time: t(3), count: 7 });
    expect(timelineLine(eventItem({ metadata: { creationTimestamp: t(3) }, series: { count: 7 }, reason: "R", note: "n" })!)).toBe(`${t(3)}  event  Normal R (x7): n`);
    expect(eventItem({ reason: "R" })).toBeUndefined();
  });

  it("narrows the ledger's history of a name to one run", () => {
    const history = ledgerHistory();
    history.uids.push("uid-2");
    history.transitions.push({ runUid: "uid-2", namespace: "ns", name: "r", phase: "Queued", attempt: 1, time: t(100) });
    const mine = historyOfUid(history, "uid-2");
    expect(mine).toMatchObject({ uids: ["uid-2"], toolCalls: [], gaps: [], usage: [] });
    expect(historyOfUid(history, "uid-1")?.usage?.map((u) => u.attempt)).toEqual([1]);
    expect(mine?.transitions.map((x) => x.time)).toEqual([t(100)]);
    expect(historyOfUid(history, "uid-3")).toBeUndefined();
    expect(historyOfUid(undefined, "uid-1")).toBeUndefined();
  });
});
