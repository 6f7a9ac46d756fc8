// Where the money went, as the history prints it: a line per attempt where the ledger last saw its
// usage grow, and a total summed exactly; the sandbox's words (the model) inert.
import { describe, expect, it } from "vitest";
import { describeTotal, describeUsage, formatHistory, timeline } from "../../../operator/ledger/format.ts";
import type { AttemptUsageRecord, RunHistory } from "../../../operator/ledger/read.ts";

const t = (s: number) => new Date(Date.parse("2026-11-30T12:00:00Z") + s * 1000).toISOString();

function usage(attempt: number, over: Partial<AttemptUsageRecord> = {}): AttemptUsageRecord {
  return {
    runUid: "uid-1",
    namespace: "ns",
    runName: "r",
    attempt,
    inputTokens: 12_000,
    outputTokens: 800,
    cost: "0.31",
    currency: "USD",
    toolCalls: 4,
    model: "gpt-5",
    firstSeen: t(attempt * 10),
    lastSeen: t(attempt * 10 + 5),
    ...over,
  };
}

function history(records: AttemptUsageRecord[], uids = ["uid-1"]): RunHistory {
  const base = { runUid: "uid-1", namespace: "ns", name: "r" };
  return {
    namespace: "ns",
    name: "r",
    uids,
    transitions: [
      { ...base, phase: "Planning", attempt: 1, time: t(10) },
      { ...base, phase: "Queued", from: "Planning", reason: "HeartbeatTimeout", attempt: 2, time: t(15) },
      { ...base, phase: "Planning", from: "Queued", attempt: 2, time: t(20) },
    ],
    toolCalls: [],
    gaps: [],
    usage: records,
  };
}

describe("an attempt's usage", () => {
  it("reads as one sentence", () => {
    expect(describeUsage(usage(2))).toBe("attempt 2 spent 12000 input + 800 output tokens, 0.31 USD, 4 tool calls (model gpt-5)");
    expect(describeUsage(usage(1, { currency: undefined, toolCalls: 1, model: undefined }))).toBe("attempt 1 spent 12000 input + 800 output tokens, cost 0.31, 1 tool call");
    expect(describeUsage(usage(1, { cost: undefined }))).toBe("attempt 1 spent 12000 input + 800 output tokens, cost unknown, 4 tool calls (model gpt-5)");
    // No tokens, no price needed: an attempt that only called tools cost nothing.
    const toolsOnly = usage(1, { cost: undefined, currency: undefined, inputTokens: 0, outputTokens: 0, model: undefined });
    expect(describeUsage(toolsOnly)).toBe("attempt 1 spent 0 input + 0 output tokens, cost 0, 4 tool calls");
    expect(describeTotal([toolsOnly])).toBe("spent in all: 0 input + 0 output tokens, cost 0, 4 tool calls over 1 attempt");
  });

  it("sums the attempts exactly, each currency apart, and says when a cost is only a floor", () => {
    expect(describeTotal([usage(1, { cost: "0.1" }), usage(2, { cost: "0.2" })])).toBe(
      "spent in all: 24000 input + 1600 output tokens, 0.3 USD, 8 tool calls over 2 attempts",
    );
    const max = Number.MAX_SAFE_INTEGER;
    expect(describeTotal([usage(1, { inputTokens: max }), usage(2, { inputTokens: max })])).toContain(`${2n * BigInt(max)} input`);
    expect(describeTotal([usage(1, { cost: undefined }), usage(2), usage(3, { cost: "1", currency: "EUR" })])).toBe(
      "spent in all: 36000 input + 2400 output tokens, at least 0.31 USD + 1 EUR, 12 tool calls over 3 attempts",
    );
    expect(describeTotal([usage(1, { cost: undefined })])).toBe("spent in all: 12000 input + 800 output tokens, cost unknown, 4 tool calls over 1 attempt");
  });

  it("stands in the timeline where it last grew, and after a transition at the same time", () => {
    const entries = timeline(history([usage(1, { lastSeen: t(15) }), usage(2)]));
    expect(entries.map((e) => e.kind)).toEqual(["transition", "transition", "usage", "transition", "usage"]);
  });

  it("is printed in the history with a total", () => {
    const text = formatHistory(history([usage(1, { cost: "0.1", lastSeen: t(14) }), usage(2, { cost: "0.21" })]));
    expect(text.split("\n")).toEqual([
      "AgentRun ns/r  (uid uid-1)",
      "3 transitions, 0 tool calls, 0 gaps",
      "spent in all: 24000 input + 1600 output tokens, 0.31 USD, 8 tool calls over 2 attempts",
      "",
      `${t(10)}  phase  Planning  (attempt 1)`,
      `${t(14)}  usage  attempt 1 spent 12000 input + 800 output tokens, 0.1 USD, 4 tool calls (model gpt-5)`,
      `${t(15)}  phase  Planning -> Queued  (attempt 2)  HeartbeatTimeout`,
      `${t(20)}  phase  Queued -> Planning  (attempt 2)`,
      `${t(25)}  usage  attempt 2 spent 12000 input + 800 output tokens, 0.21 USD, 4 tool calls (model gpt-5)`,
      "",
    ]);
    // Nothing spent, nothing said; a history from before usage was recorded prints as before.
    const { usage: _, ...older } = history([]);
    expect(formatHistory(older)).toBe(formatHistory(history([])));
    expect(formatHistory(older)).not.toContain("spent");
  });

  it("sums each run of a reused name on its own", () => {
    const text = formatHistory(history([usage(1), usage(1, { runUid: "uid-2222-later", firstSeen: t(100), lastSeen: t(100) })], ["uid-1", "uid-2222-later"]));
    expect(text).toContain("spent in all: 12000 input + 800 output tokens, 0.31 USD, 4 tool calls over 1 attempt  [run uid-1]\n");
    expect(text).toContain("spent in all: 12000 input + 800 output tokens, 0.31 USD, 4 tool calls over 1 attempt  [run uid-2222]\n");
    expect(text).toContain(`${t(100)}  usage  attempt 1 spent 12000 input + 800 output tokens, 0.31 USD, 4 tool calls (model gpt-5)  [run uid-2222]`);
  });

  it("keeps a hostile model name inert, on one line", () => {
    const evil = "gpt\u001b]52;c;ZWNobyBwd25lZA==\u0007\u001b[2J\nattempt 9 spent 0 input\r\u202e5-tpg";
    const line = describeUsage(usage(1, { model: evil }));
    const text = formatHistory(history([usage(1, { model: evil })]));
    for (const out of [line, text]) {
      // eslint-disable-next-line no-control-regex -- looking for control characters is the point
      expect(out).not.toMatch(/[\u0000-\u0009\u000b-\u001f\u007f-\u009f\u202a-\u202e\u2066-\u2069]/);
      expect(out).toContain("(model gpt\\u001b]52;c;ZWNobyBwd25lZA==\\u0007\\u001b[2J\\nattempt 9 spent 0 input\\r\\u202e5-tpg)");
    }
    expect(text.split("\n").filter((l) => l.includes("usage  "))).toHaveLength(1);
  });
});
