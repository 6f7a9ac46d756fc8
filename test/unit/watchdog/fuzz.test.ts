// Fuzzing what sandboxes and users can write (rule 12): 100,000 random status payloads and
// annotations through decide(). It never throws; everything it would write fits the generated CRD;
// and whatever else the payload holds, a hung run's plan deletes its pod.
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { decide } from "../../../operator/watchdog/decide.ts";
import { applyMergePatch } from "../../../operator/watchdog/merge-patch.ts";
import { readRun } from "../../../operator/watchdog/observe.ts";
import { OPERATOR_STATUS_FIELDS } from "../../../operator/watchdog/plan.ts";
import { crdStatusProblems } from "../../support/crd-schema.ts";
import { T0, heartbeatManagedFields, iso, pod, run } from "../fixtures.ts";

const RUNS = Number(process.env.FUZZ_RUNS ?? 100_000);

const hostileString = fc.oneof(
  fc.string({ maxLength: 40 }),
  fc.string({ unit: "grapheme", maxLength: 20 }),
  fc.constantFrom("", "\u0000", "🧨".repeat(3000), "x".repeat(70_000), "2026-11-30T12:00:00Z", "not a time", `2026-11-30T12:00:00.${"1".repeat(4000)}Z`, "9999-12-31T23:59:59Z"),
);
const time = fc.oneof(
  fc.integer({ min: T0 - 86_400_000, max: T0 + 86_400_000 }).map(iso),
  fc.constantFrom("2026-11-30T12:00:00.123456789Z", "2026-11-30T12:00:00+14:00", "1970-01-01T00:00:00Z", `2026-11-30T11:00:00.${"9".repeat(2000)}Z`),
  hostileString,
);
const toolCall = fc.oneof(
  fc.record(
    {
      id: hostileString,
      name: hostileString,
      argsHash: hostileString,
      idempotencyKey: hostileString,
      idempotent: fc.boolean(),
      attempt: fc.integer({ min: -2, max: 5 }),
      state: fc.constantFrom("Started", "Succeeded", "Failed", "Exploded"),
      error: fc.record({ message: hostileString, httpStatus: fc.constantFrom(429, 500, 0, 99999), retryAfterSeconds: fc.double() }, { requiredKeys: [] }),
      startedAt: time,
      finishedAt: time,
      result: hostileString,
    },
    { requiredKeys: [] },
  ),
  fc.anything(),
);
const sandboxStatus = fc.record(
  {
    heartbeat: fc.oneof(
      fc.record(
        {
          time,
          attempt: fc.oneof(fc.integer({ min: -1, max: 4 }), fc.anything()),
          state: fc.constantFrom("Planning", "ExecutingTool", "AwaitingReply", "Dancing"),
          activity: fc.record({ kind: fc.constantFrom("text", "delta", "toolResult", "userMessage", "noReply", "emptyText", "?"), time }, { requiredKeys: [] }),
        },
        { requiredKeys: [] },
      ),
      fc.anything(),
    ),
    toolCalls: fc.oneof(fc.array(toolCall, { maxLength: 70 }), fc.anything()),
    checkpoint: fc.oneof(fc.record({ step: fc.integer({ min: -1, max: 10 }), data: fc.anything() }), fc.anything()),
  },
  { requiredKeys: [] },
);
// Operator fields as anyone else might have left them: not this operator's writes.
const foreignOperatorStatus = fc.record(
  {
    approval: fc.oneof(fc.record({ id: hostileString, state: fc.constantFrom("Pending", "Approved", "Rejected", "TimedOut"), requestedAt: time }, { requiredKeys: ["state"] }), fc.anything()),
    stall: fc.anything(),
    terminating: fc.oneof(fc.array(fc.record({ name: hostileString, uid: hostileString, since: time, nodeName: hostileString }), { maxLength: 10 }), fc.anything()),
    conditions: fc.anything(),
    transitions: fc.anything(),
    observedResume: hostileString,
  },
  { requiredKeys: [] },
);
const annotations = fc.dictionary(
  fc.constantFrom("watchdog.dev/resume", "watchdog.dev/approve", "watchdog.dev/reject", "watchdog.dev/approval-id", "watchdog.dev/retry-after", "watchdog.dev/attempt", "other"),
  hostileString,
);

/** The operator fields after the plan: what it would store. */
function written(input: unknown, status: Record<string, unknown> | undefined): Record<string, unknown> {
  const read = readRun(input);
  const before: Record<string, unknown> = {};
  if (read.ok) for (const field of OPERATOR_STATUS_FIELDS) if (read.run.status?.[field] !== undefined) before[field] = read.run.status[field];
  return applyMergePatch(before, status ?? {}) as Record<string, unknown>;
}

describe(`decide() fuzzed with ${RUNS} random payloads`, () => {
  it("never throws, writes only what fits the CRD, and always deletes a hung run's pod", () => {
    const timeoutMs = 60_000;
    let hung = 0;
    fc.assert(
      fc.property(
        sandboxStatus,
        foreignOperatorStatus,
        annotations,
        fc.constantFrom("Starting", "Planning", "ExecutingTool"),
        fc.boolean(),
        (sandbox, foreign, notes, phase, isHung) => {
          const status: Record<string, unknown> = { ...foreign, ...sandbox, phase, attempt: 1, restarts: 0, podName: "r-1", podUID: "uid-pod-1" };
          const r = run({ spec: { watchdog: { heartbeatTimeout: "1m" } }, status, annotations: notes });
          const p = pod(1, { created: T0 - 10 * 60_000 });
          p.status.containerStatuses = [{ name: "agent", state: { running: { startedAt: iso(T0 - 10 * 60_000) } } }];
          // The server accepted the last heartbeat write either just now or well past the timeout.
          r.metadata.managedFields = heartbeatManagedFields(isHung ? T0 - timeoutMs - 5_000 : T0 - 1_000);
          const forcedHung = isHung && typeof sandbox.heartbeat === "object" && sandbox.heartbeat !== null;
          // A hung run: a live pod, and its current attempt's heartbeat accepted long ago (and not
          // awaiting a reply, which is never hung).
          if (forcedHung) (sandbox.heartbeat as Record<string, unknown>).attempt = 1;
          if (forcedHung) (sandbox.heartbeat as Record<string, unknown>).state = "Planning";
          if (forcedHung) status.heartbeat = sandbox.heartbeat;
          const plan = decide({ run: r, pods: [p], now: T0 });
          expect(crdStatusProblems(written(r, plan.status as Record<string, unknown> | undefined))).toEqual([]);
          for (const deletion of plan.deletePods) expect(deletion.gracePeriodSeconds ?? 30).toBeGreaterThan(0);
          // Hung either way: its heartbeat was accepted long ago, or is unreadable (dropped and
          // reported) and its agent container started long ago.
          if (forcedHung && readRun(r).ok) {
            hung++;
            expect(plan.deletePods.map((d) => d.name)).toEqual(["r-1"]);
          }
        },
      ),
      { numRuns: RUNS },
    );
    console.log(`decide() fuzz: ${RUNS} payloads, none threw, every plan fit the CRD, ${hung} hung runs and each plan deleted the pod`);
    // The property must have exercised hung runs, not only skipped them.
    expect(hung).toBeGreaterThan(RUNS / 20);
  }, 600_000);
});
