import fc from "fast-check";
import { describe, expect, it } from "vitest";
import type { AgentRunStatus, Phase, Transition } from "../../../operator/api/agentrun.ts";
import { initialTraceState, runSpans, type RunIdentity, type SpanRecord } from "../../../operator/tracing/run-spans.ts";
import { decide } from "../../../operator/watchdog/decide.ts";
import { DEFAULT_SANDBOX_IDENTITY } from "../../../operator/watchdog/sandbox-identity.ts";
import { attemptSpanId, attemptTraceparent, runSpanId, runTraceId } from "../../../operator/watchdog/trace-context.ts";
import { T0, run } from "../fixtures.ts";

const RUNS = Number(process.env.PROPERTY_RUNS ?? 300);
const RUN: RunIdentity = { uid: "4f1c2a9e-0000-4000-8000-000000000001", name: "tour", namespace: "team-a", createdAt: T0 - 1_000 };

const at = (ms: number) => new Date(T0 + ms).toISOString();
function step(phase: Phase, attempt: number, ms: number, reason?: string): Transition {
  return { phase, attempt, time: at(ms), ...(reason ? { reason } : {}) };
}

/** Three attempts, two rate limits between them and an approval in the last: the trace test's run. */
const TOUR: Transition[] = [
  step("Queued", 1, 0, "Created"),
  step("Starting", 1, 10),
  step("Planning", 1, 500),
  step("ExecutingTool", 1, 600),
  step("Queued", 2, 900, "RateLimited"),
  step("Starting", 2, 5_900),
  step("ExecutingTool", 2, 6_200),
  step("Queued", 3, 6_500, "RateLimited"),
  step("Starting", 3, 11_500),
  step("Planning", 3, 11_800),
  step("AwaitingReply", 3, 12_000),
  step("Planning", 3, 20_000),
  step("Completed", 3, 21_000, "Completed"),
];
const APPROVAL: AgentRunStatus["approval"] = { id: "req-1", state: "Approved", requestedAt: at(12_000), decidedAt: at(19_500), answer: "yes" } as AgentRunStatus["approval"];

const status = (transitions: Transition[], extra: Partial<AgentRunStatus> = {}): AgentRunStatus => ({ transitions, ...extra }) as AgentRunStatus;
const byName = (spans: SpanRecord[]) => spans.map((s) => s.name).sort();

describe("a run's spans", () => {
  it("makes one root, a span per attempt linked to the one before, and the waits between them", () => {
    const spans = runSpans(RUN, status(TOUR, { approval: APPROVAL }), initialTraceState());
    expect(byName(spans)).toEqual(["agentrun tour", "invoke_agent tour", "invoke_agent tour", "invoke_agent tour", "wait approval", "wait rate_limit", "wait rate_limit"]);
    const root = spans.find((s) => s.name === "agentrun tour")!;
    expect(root).toMatchObject({ spanId: runSpanId(RUN.uid), start: RUN.createdAt, end: T0 + 21_000, status: { code: "ok" } });
    expect(root.parentSpanId).toBeUndefined();
    const attempts = spans.filter((s) => s.name.startsWith("invoke_agent")).sort((a, b) => a.start - b.start);
    expect(attempts.map((s) => [s.attributes["watchdog.attempt"], s.attributes["watchdog.outcome"], s.start - T0, s.end - T0])).toEqual([
      [1, "RateLimited", 10, 900],
      [2, "RateLimited", 5_900, 6_500],
      [3, "Completed", 11_500, 21_000],
    ]);
    for (const [i, attempt] of attempts.entries()) {
      expect(attempt.spanId).toBe(attemptSpanId(RUN.uid, i + 1));
      expect(attempt.parentSpanId).toBe(root.spanId);
      expect(attempt.attributes).toMatchObject({ "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "tour", "gen_ai.agent.id": RUN.uid });
      expect(attempt.links.map((l) => l.spanId)).toEqual(i === 0 ? [] : [attemptSpanId(RUN.uid, i)]);
    }
    const waits = spans.filter((s) => s.name === "wait rate_limit").sort((a, b) => a.start - b.start);
    expect(waits.map((s) => [s.start - T0, s.end - T0, s.parentSpanId])).toEqual([
      [900, 5_900, root.spanId],
      [6_500, 11_500, root.spanId],
    ]);
    expect(spans.find((s) => s.name === "wait approval")).toMatchObject({ start: T0 + 12_000, end: T0 + 19_500, attributes: { "watchdog.approval.id": "req-1", "watchdog.approval.state": "Approved" } });
  });

  it("marks a kill, a nudge and an intervention on the attempt, and waits for the person as a span", () => {
    const state = initialTraceState();
    const transitions = [step("Queued", 1, 0, "Created"), step("Starting", 1, 10), step("Planning", 1, 100)];
    expect(runSpans(RUN, status(transitions), state)).toEqual([]);
    expect(runSpans(RUN, status(transitions, { stall: { state: "Fired", nudges: 1, lastNudge: { time: at(400), message: "go on" } } }), state)).toEqual([]);
    const killed = [...transitions, step("Queued", 2, 1_000, "HeartbeatTimeout"), step("Starting", 2, 3_000), step("NeedsHumanIntervention", 2, 4_000, "ToolLoop"), step("Queued", 3, 9_000, "Resumed")];
    const spans = runSpans(RUN, status(killed), state);
    const first = spans.find((s) => s.spanId === attemptSpanId(RUN.uid, 1))!;
    expect(first.events.map((e) => [e.name, e.time - T0])).toEqual([
      ["watchdog.nudge", 400],
      ["watchdog.kill", 1_000],
    ]);
    expect(first.status).toEqual({ code: "error", message: "HeartbeatTimeout" });
    const second = spans.find((s) => s.spanId === attemptSpanId(RUN.uid, 2))!;
    expect(second.events.map((e) => e.name)).toEqual(["watchdog.kill", "watchdog.intervention"]);
    expect(byName(spans)).toEqual(["invoke_agent tour", "invoke_agent tour", "wait backoff", "wait intervention"]);
    expect(spans.find((s) => s.name === "wait intervention")).toMatchObject({ start: T0 + 4_000, end: T0 + 9_000, attributes: { "watchdog.wait.reason": "ToolLoop" } });
    // Not ended: no root span yet.
    expect(spans.some((s) => s.spanId === runSpanId(RUN.uid))).toBe(false);
  });

  it("exports each span once, whatever the observations a restarted operator splits the run into", () => {
    const phases: Phase[] = ["Queued", "Starting", "Planning", "ExecutingTool", "AwaitingReply", "NeedsHumanIntervention", "Suspended", "Completed", "Failed"];
    const reasons = ["Created", "RateLimited", "HeartbeatTimeout", "PodFailed", "Resumed", "ToolLoop", undefined];
    const transitionArb = fc.record({ phase: fc.constantFrom(...phases), reason: fc.constantFrom(...reasons), bump: fc.boolean(), gap: fc.integer({ min: 1, max: 5_000 }) });
    fc.assert(
      fc.property(fc.array(transitionArb, { minLength: 1, maxLength: 20 }), fc.array(fc.integer({ min: 0, max: 20 }), { maxLength: 4 }), (steps, cuts) => {
        // As the watchdog numbers them: every sandbox is a new attempt, and a terminal phase is the end.
        let attempt = 0;
        let ms = 0;
        let active = false;
        const end = steps.findIndex((s) => s.phase === "Completed" || s.phase === "Failed");
        const transitions = steps.slice(0, end < 0 ? steps.length : end + 1).map((s) => {
          ms += s.gap;
          const nowActive = ["Starting", "Planning", "ExecutingTool", "AwaitingReply"].includes(s.phase);
          if (nowActive && (!active || s.bump)) attempt++;
          active = nowActive;
          return { phase: s.phase, attempt, time: at(ms), ...(s.reason ? { reason: s.reason } : {}) } as Transition;
        });
        const whole = runSpans(RUN, status(transitions), initialTraceState());
        // An operator sees the run at each cut; one restarted at a cut replays what it finds.
        const points = [...new Set(cuts.map((c) => Math.min(c, transitions.length)))].sort((a, b) => a - b);
        const pieces: SpanRecord[] = [];
        let state = initialTraceState();
        let seen = 0;
        for (const [i, point] of [...points, transitions.length].entries()) {
          if (i % 2 === 1) {
            // a restart: a new state, rebuilt from what the run held
            state = initialTraceState();
            runSpans(RUN, status(transitions.slice(0, seen)), state);
          }
          pieces.push(...runSpans(RUN, status(transitions.slice(0, point)), state));
          seen = point;
        }
        const key = (s: SpanRecord) => `${s.spanId}@${s.start}-${s.end}`;
        const ids = pieces.map((s) => s.spanId);
        expect(new Set(ids).size).toBe(ids.length);
        // Nudges aside (none here), a restart loses nothing and adds nothing.
        expect(pieces.map(key).sort()).toEqual(whole.map(key).sort());
      }),
      { numRuns: RUNS },
    );
  });
});

describe("the run's trace context", () => {
  it("is derived from the uid alone, and valid W3C Trace Context", () => {
    expect(runTraceId(RUN.uid)).toMatch(/^[0-9a-f]{32}$/);
    expect(attemptTraceparent(RUN.uid, 2)).toBe(`00-${runTraceId(RUN.uid)}-${attemptSpanId(RUN.uid, 2)}-01`);
    expect(attemptSpanId(RUN.uid, 2)).not.toBe(attemptSpanId(RUN.uid, 3));
    expect(runTraceId("another")).not.toBe(runTraceId(RUN.uid));
  });

  it("reaches the pod as TRACEPARENT only when the operator traces runs", () => {
    const traced = decide({ run: run(), pods: [], now: T0, sandbox: { ...DEFAULT_SANDBOX_IDENTITY, traceparent: true } });
    const env = (traced.createPod!.spec as { containers: { env: { name: string; value: string }[] }[] }).containers[0]!.env;
    expect(env).toContainEqual({ name: "TRACEPARENT", value: attemptTraceparent("uid-r", 1) });
    const untraced = decide({ run: run(), pods: [], now: T0, sandbox: DEFAULT_SANDBOX_IDENTITY });
    expect(JSON.stringify(untraced.createPod!.spec)).not.toContain("TRACEPARENT");
  });
});
