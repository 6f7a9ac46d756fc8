// What kubectl agentrun prints: ages, the run table and the describe page.
import { describe, expect, it } from "vitest";
import { budgetColumn, formatDescribe, formatList, humanDuration, nudgesColumn, relative, restartsColumn, table, watchdogOverrides } from "../../../operator/cli/plugin/format.ts";
import { mergeTimeline } from "../../../operator/cli/plugin/timeline.ts";
import { resolveWatchdog } from "../../../operator/api/defaults.ts";
import { iso, run, T0 } from "../fixtures.ts";

const s = 1000;
const m = 60 * s;
const h = 60 * m;
const d = 24 * h;

describe("ages", () => {
  it("are written the way kubectl writes them", () => {
    const cases: [number, string][] = [
      [-5 * s, "0s"],
      [0, "0s"],
      [999, "0s"],
      [45 * s, "45s"],
      [119 * s, "119s"],
      [2 * m, "2m"],
      [3 * m + 12 * s, "3m12s"],
      [10 * m + 30 * s, "10m"],
      [2 * h + 59 * m, "179m"],
      [3 * h, "3h"],
      [5 * h + 10 * m, "5h10m"],
      [30 * h, "30h"],
      [3 * d + 4 * h, "3d4h"],
      [8 * d, "8d"],
      [400 * d, "400d"],
      [2 * 365 * d + 30 * d, "2y30d"],
    ];
    for (const [ms, text] of cases) expect(humanDuration(ms), String(ms)).toBe(text);
  });

  it("say whether a time is past or to come", () => {
    expect(relative(iso(T0 - 5 * s), T0)).toBe("5s ago");
    expect(relative(iso(T0 + 90 * s), T0)).toBe("in 90s");
    expect(relative(undefined, T0)).toBe("");
    expect(relative("not a time", T0)).toBe("");
  });
});

const effective = resolveWatchdog({ maxRestarts: 3, stall: { maxNudges: 2 } });

function runningRun() {
  return run({
    spec: { goal: "summarise the docs", watchdog: { maxRestarts: 3, stall: { maxNudges: 2 } } },
    status: {
      phase: "ExecutingTool",
      attempt: 3,
      restarts: 2,
      podName: "r-3",
      watchdog: effective,
      heartbeat: { time: iso(T0 + 50 * s), attempt: 3, state: "ExecutingTool" },
      stall: { state: "Armed", nudges: 1, armedAt: iso(T0 + 40 * s) },
    },
  });
}

describe("the run table", () => {
  it("shows phase, attempt, restarts of the allowance, heartbeat age, nudges, reason and age", () => {
    const queued = run({
      status: {
        phase: "Queued",
        attempt: 2,
        restarts: 1,
        reason: "HeartbeatTimeout",
        message: "no heartbeat for 4s;\n attempt 2 starts later",
        retryAfter: iso(T0 + 70 * s),
        watchdog: effective,
        // the heartbeat of attempt 1 says nothing about attempt 2
        heartbeat: { time: iso(T0 + 10 * s), attempt: 1, state: "Planning" },
        stall: { state: "Disarmed", nudges: 0 },
      },
    });
    queued.metadata.name = "queued";
    const fresh = run();
    fresh.metadata.name = "fresh";
    const now = T0 + 60 * s;
    expect(formatList([runningRun(), queued, fresh], { allNamespaces: false, wide: false }, now)).toBe(
      [
        "NAME     PHASE           ATTEMPT   RESTARTS   HEARTBEAT   NUDGES   APPROVAL   BUDGET   REASON             AGE",
        "r        ExecutingTool   3         2/3        10s         1/2      -          -        -                  60s",
        "queued   Queued          2         1/3        -           0/2      -          -        HeartbeatTimeout   60s",
        "fresh    -               -         -          -           -        -          -        -                  60s",
        "",
      ].join("\n"),
    );
    const wide = formatList([runningRun(), queued], { allNamespaces: true, wide: true }, now).split("\n");
    expect(wide[0]).toMatch(/^NAMESPACE\s+NAME\s+PHASE\s+ATTEMPT\s+RESTARTS\s+HEARTBEAT\s+NUDGES\s+APPROVAL\s+BUDGET\s+REASON\s+AGE\s+POD\s+STALL\s+RETRY\s+MESSAGE$/);
    expect(wide[1]).toMatch(/^ns\s+r\s+ExecutingTool\s+3\s+2\/3\s+10s\s+1\/2\s+-\s+-\s+-\s+60s\s+r-3\s+Armed\s+-\s+-$/);
    expect(wide[2]).toMatch(/^ns\s+queued\s+Queued .* HeartbeatTimeout\s+60s\s+-\s+Disarmed\s+in 10s\s+no heartbeat for 4s; attempt 2 starts later$/);
  });

  it("shows the pending request's id, which an answer must name, and the heartbeat's age on the server's clock", () => {
    const asking = runningRun();
    asking.status.phase = "AwaitingReply";
    asking.status.approval = { id: "3-abc", state: "Pending", requestedAt: iso(T0) };
    // The sandbox's clock is an hour ahead; the API server accepted the write 5 s ago.
    asking.status.heartbeat.time = iso(T0 + 60 * s + 3_600_000);
    asking.metadata.managedFields = [{ manager: "agent-watchdog-sandbox", time: iso(T0 + 55 * s).replace(".000Z", "Z"), fieldsV1: { "f:status": { "f:heartbeat": { "f:time": {} } } } }];
    const line = formatList([asking], { allNamespaces: false, wide: false }, T0 + 60 * s).split("\n")[1];
    expect(line).toMatch(/^r\s+AwaitingReply\s+3\s+2\/3\s+5s\s+1\/2\s+3-abc\s/);
  });

  it("marks unknown allowances and disabled stall nudges", () => {
    expect(restartsColumn({ phase: "Queued", restarts: 1 })).toBe("1/?");
    expect(restartsColumn({})).toBe("-");
    const off = resolveWatchdog({ stall: { enabled: false } });
    expect(nudgesColumn({ phase: "Planning", watchdog: off })).toBe("off");
    expect(nudgesColumn({ phase: "Planning", watchdog: effective, stall: { state: "Fired", nudges: 2 } })).toBe("2/2");
  });

  it("pads columns to the widest cell and leaves no trailing space", () => {
    expect(table(["A", "BB"], [["xxx", "y"], ["z", ""]])).toBe("A     BB\nxxx   y\nz\n");
  });
});

/** A run with a token and a cost budget: attempt 1 ended and was folded; attempt 2 is reporting. */
function spendingRun() {
  const r = runningRun();
  r.spec.budget = { tokens: 100_000, prices: [{ model: "m", inputPerMillion: "2", outputPerMillion: "10" }] };
  r.status.attempt = 2;
  r.status.startTime = iso(T0 - 192 * s);
  r.status.budget = { tokens: 100_000, cost: { amount: "12.50", currency: "USD" }, toolCalls: 40, warnAt: 0.8 };
  r.status.spent = { inputTokens: 50_000, outputTokens: 10_000, cost: "0.2", toolCalls: 4, throughAttempt: 1 };
  r.status.heartbeat = { time: iso(T0 + 50 * s), attempt: 2, state: "Planning", usage: { inputTokens: 20_000, outputTokens: 2_000, model: "m", toolCalls: 1 } };
  return r;
}

describe("what a run has spent", () => {
  it("the table shows the limit nearest to being reached as spent/limit: ended attempts plus the current one", () => {
    const now = T0 + 60 * s;
    expect(budgetColumn(spendingRun(), now)).toBe("82000/100000 tokens");
    const line = formatList([spendingRun()], { allNamespaces: false, wide: false }, now).split("\n")[1];
    expect(line).toMatch(/\s1\/2\s+-\s+82000\/100000 tokens\s+-\s+60s$/);
  });

  it("a stale attempt's report counts nothing, and without limits the column shows the tokens spent", () => {
    const r = spendingRun();
    r.status.heartbeat.attempt = 1; // attempt 1's late write: already folded into status.spent
    expect(budgetColumn(r, T0)).toBe("60000/100000 tokens");
    delete r.status.budget;
    expect(budgetColumn(r, T0)).toBe("60000 tokens");
    expect(budgetColumn(runningRun(), T0)).toBe("-");
  });

  it("describe shows each limit, the spending's breakdown and the wall clock", () => {
    const page = formatDescribe({ run: spendingRun(), timeline: [], timelineSource: "events", now: T0 + 60 * s });
    const section = page.slice(page.indexOf("Budget:"), page.indexOf("Conditions:")).trimEnd().split("\n");
    expect(section).toEqual([
      "Budget:",
      "  tokens:          82000 of 100000 tokens spent (82%)",
      "  cost:            0.26 of 12.50 USD spent (2%)",
      "  toolCalls:       5 of 40 tool calls made (12%)",
      "  Warn at:         80% of each limit",
      "  Spent:           70000 input + 12000 output tokens, 0.26 USD, 5 tool calls",
      "  Ended attempts:  50000 input + 10000 output tokens, 0.2 USD, 4 tool calls (attempt 1)",
      "  This attempt:    20000 input + 2000 output tokens, 0.06 USD, 1 tool call",
      "  Wall clock:      4m12s since the first start",
    ]);
    expect(formatDescribe({ run: runningRun(), timeline: [], timelineSource: "events", now: T0 })).not.toContain("Budget:");
  });

  it("an exhausted limit says so", () => {
    const r = spendingRun();
    r.status.heartbeat.usage.inputTokens = 40_000;
    const page = formatDescribe({ run: r, timeline: [], timelineSource: "events", now: T0 + 60 * s });
    expect(page).toContain("tokens:          102000 of 100000 tokens spent (102%), exhausted");
  });
});

describe("the describe page", () => {
  it("shows spec, effective settings, conditions, failure, stall, approval and the timeline", () => {
    const r = run({
      spec: { goal: "answer the ticket", watchdog: { heartbeatTimeout: "4s", backoff: { initial: "2s" } } },
      annotations: { "watchdog.dev/resume": "2026-11-30T12:00:30Z", "watchdog.dev/attempt": "2" },
      status: {
        phase: "AwaitingReply",
        attempt: 2,
        restarts: 1,
        podName: "r-2",
        watchdog: resolveWatchdog({ heartbeatTimeout: "4s", backoff: { initial: "2s" } }),
        heartbeat: { time: iso(T0 + 55 * s), attempt: 2, state: "AwaitingReply", activity: { kind: "text", time: iso(T0 + 50 * s) } },
        conditions: [
          { type: "Running", status: "True", reason: "SandboxRunning", message: "attempt 2 runs in pod r-2", lastTransitionTime: iso(T0 + 20 * s) },
        ],
        lastFailure: {
          reason: "HeartbeatTimeout",
          message: "no heartbeat for 5s",
          time: iso(T0 + 10 * s),
          attempt: 1,
          state: "ExecutingTool",
          tool: { name: "search", argsHash: "abc", state: "Started" },
        },
        stall: { state: "Fired", nudges: 1, lastNudge: { time: iso(T0 + 58 * s), message: "[System] nudge" } },
        approval: { state: "Pending", requestedAt: iso(T0 + 45 * s) },
        transitions: [{ phase: "AwaitingReply", from: "Planning", attempt: 2, time: iso(T0 + 45 * s) }],
      },
    });
    const timeline = mergeTimeline({ transitions: r.status.transitions });
    const page = formatDescribe({ run: r, timeline, timelineSource: "status.transitions and Events", now: T0 + 60 * s });
    const expected = [
      /^Name: +r$/m,
      /^Namespace: +ns$/m,
      /^Goal: +answer the ticket$/m,
      /^Containers: +agent \(agent:1\)$/m,
      /^Suspend: +false$/m,
      /^Watchdog \(spec\): +heartbeatTimeout=4s, backoff.initial=2s$/m,
      /^Annotations: +watchdog.dev\/resume="2026-11-30T12:00:30Z"$/m,
      /^Phase: +AwaitingReply$/m,
      /^Restarts: +1 of 3 allowed$/m,
      /^Heartbeat: +5s ago \(AwaitingReply\); last activity text 10s ago$/m,
      /^Stall: +Fired; 1 of 3 nudges; last nudge 2s ago: "\[System\] nudge"$/m,
      /^Approval: +Pending since 2026-11-30T12:00:45.000Z \(15s ago\); answer with: kubectl agentrun approve r \[--answer TEXT\], or reject r \[--reason TEXT\]$/m,
      /^ {2}Heartbeat timeout: +4s$/m,
      /^ {2}Backoff: +2s, x2 per retry, at most 10m$/m,
      /^ {2}Approval timeout: +none \(waits for a reply forever\)$/m,
      /^ {2}TYPE +STATUS +REASON +AGE +MESSAGE$/m,
      /^ {2}Running +True +SandboxRunning +40s +attempt 2 runs in pod r-2$/m,
      /^Last failure:\n {2}Reason: +HeartbeatTimeout\n {2}Time: +2026-11-30T12:00:10.000Z \(50s ago\)\n {2}Attempt: +1, while ExecutingTool\n {2}Tool: +search \(args abc\), Started\n {2}Message: +no heartbeat for 5s$/m,
      /^Timeline \(status.transitions and Events\):\n {2}2026-11-30T12:00:45.000Z {2}phase {2}Planning -> AwaitingReply {2}\(attempt 2\)$/m,
    ];
    for (const pattern of expected) expect(page).toMatch(pattern);
    // the operator's own annotations are not the user's business here
    expect(page).not.toContain("watchdog.dev/attempt");
  });

  it("says when the operator has not acted on a run yet", () => {
    const page = formatDescribe({ run: run(), timeline: [], timelineSource: "status.transitions and Events", now: T0 });
    expect(page).toMatch(/^Phase: +<none>: the operator has not acted on this run yet$/m);
    expect(page).toMatch(/^Watchdog \(spec\): +none \(the install's defaults apply\)$/m);
    expect(page).toContain("Effective watchdog settings:\n  (not resolved yet: the operator has not acted on this run)");
    expect(page).toContain("Conditions:\n  (none)");
    expect(page).toContain("  (nothing recorded)");
  });

  it("flattens spec.watchdog overrides", () => {
    expect(watchdogOverrides({ watchdog: { maxRestarts: 0, stall: { enabled: false, message: "hi" } } })).toBe("maxRestarts=0, stall.enabled=false, stall.message=hi");
  });
});
