// The random scenarios the property tests play: what the sandbox, the kubelet, the user and the
// clock may do to a run, as commands on the in-memory world (test/unit/world.ts). Shared by the
// core's properties and the executor's, which play the same scenarios through the real executor.
import fc from "fast-check";
import { parseDecimal } from "../../../operator/api/decimal.ts";
import type { World, Kubelet } from "../world.ts";

export type Command =
  | { kind: "advance"; ms: number }
  | { kind: "heartbeat"; state: "Planning" | "ExecutingTool" | "AwaitingReply"; activity?: string }
  | { kind: "staleHeartbeat" }
  | { kind: "toolCall"; name: string; args: string; state: "Started" | "Succeeded" | "Failed"; rateLimited: boolean; retryAfter?: number; idempotent?: boolean }
  | { kind: "podRunning" }
  | { kind: "podExit"; code: number }
  | { kind: "podDeletedByOthers" }
  | { kind: "finalizePods" }
  | { kind: "forceDelete" }
  | { kind: "nodeBack" }
  | { kind: "suspend"; value: boolean }
  | { kind: "resume"; token: string }
  | { kind: "garbage" }
  | { kind: "answer"; approve: boolean }
  | { kind: "deleteRun" }
  | { kind: "quarantine" }
  | { kind: "heartbeatTimeout"; seconds: number }
  | { kind: "usage"; tokens: number; calls: number; cost: string }
  | { kind: "budget"; tokens: number }
  | { kind: "wake" };

export const command: fc.Arbitrary<Command> = fc.oneof(
  { weight: 4, arbitrary: fc.record({ kind: fc.constant("advance" as const), ms: fc.integer({ min: 0, max: 180_000 }) }) },
  {
    weight: 4,
    arbitrary: fc.record(
      {
        kind: fc.constant("heartbeat" as const),
        state: fc.constantFrom("Planning" as const, "ExecutingTool" as const, "AwaitingReply" as const),
        activity: fc.constantFrom("text", "delta", "toolResult", "userMessage", "noReply", "emptyText"),
      },
      { requiredKeys: ["kind", "state"] },
    ),
  },
  { weight: 1, arbitrary: fc.constant({ kind: "staleHeartbeat" as const }) },
  {
    weight: 3,
    arbitrary: fc.record(
      {
        kind: fc.constant("toolCall" as const),
        name: fc.constantFrom("search", "email"),
        args: fc.constantFrom("a", "b"),
        state: fc.constantFrom("Started" as const, "Succeeded" as const, "Failed" as const),
        rateLimited: fc.boolean(),
        retryAfter: fc.integer({ min: 0, max: 3600 }),
        idempotent: fc.boolean(),
      },
      { requiredKeys: ["kind", "name", "args", "state", "rateLimited"] },
    ),
  },
  { weight: 2, arbitrary: fc.constant({ kind: "podRunning" as const }) },
  { weight: 2, arbitrary: fc.record({ kind: fc.constant("podExit" as const), code: fc.constantFrom(0, 1, 3, 6, 137) }) },
  { weight: 1, arbitrary: fc.constant({ kind: "podDeletedByOthers" as const }) },
  { weight: 2, arbitrary: fc.constant({ kind: "finalizePods" as const }) },
  { weight: 1, arbitrary: fc.constant({ kind: "forceDelete" as const }) },
  { weight: 1, arbitrary: fc.constant({ kind: "nodeBack" as const }) },
  { weight: 1, arbitrary: fc.record({ kind: fc.constant("suspend" as const), value: fc.boolean() }) },
  { weight: 1, arbitrary: fc.record({ kind: fc.constant("resume" as const), token: fc.constantFrom("r1", "r2", "r3") }) },
  { weight: 1, arbitrary: fc.constant({ kind: "garbage" as const }) },
  { weight: 1, arbitrary: fc.record({ kind: fc.constant("answer" as const), approve: fc.boolean() }) },
  { weight: 1, arbitrary: fc.constant({ kind: "deleteRun" as const }) },
  { weight: 1, arbitrary: fc.constant({ kind: "quarantine" as const }) },
  { weight: 1, arbitrary: fc.record({ kind: fc.constant("heartbeatTimeout" as const), seconds: fc.integer({ min: 5, max: 600 }) }) },
  {
    weight: 3,
    arbitrary: fc.record({
      kind: fc.constant("usage" as const),
      tokens: fc.integer({ min: 0, max: 40_000 }),
      calls: fc.integer({ min: 0, max: 3 }),
      cost: fc.constantFrom("0", "0.1", "0.25", "1"),
    }),
  },
  { weight: 1, arbitrary: fc.record({ kind: fc.constant("budget" as const), tokens: fc.integer({ min: 0, max: 200_000 }) }) },
  { weight: 4, arbitrary: fc.constant({ kind: "wake" as const }) },
);

export const durationS = (min: number, max: number) => fc.integer({ min, max }).map((s) => `${s}s`);
const settings = fc.record({
  heartbeatTimeout: durationS(5, 300),
  maxRestarts: fc.integer({ min: 0, max: 4 }),
  backoff: fc.record({ initial: durationS(1, 60), factor: fc.constantFrom(1, 1.5, 2, 3), max: durationS(60, 600) }),
  rateLimitBackoff: fc.record({ initial: durationS(1, 10), factor: fc.constantFrom(1, 2), max: durationS(10, 300) }),
  maxConsecutiveToolFailures: fc.integer({ min: 1, max: 4 }),
  stall: fc.record({ enabled: fc.boolean(), timeout: durationS(5, 60), maxNudges: fc.integer({ min: 0, max: 3 }) }),
  releaseAwaitingAfter: durationS(5, 600),
  approvalTimeout: durationS(60, 3600),
});

// A run budget, or none; its limits small enough for random usage to reach them.
const budget = fc.option(
  fc.record(
    {
      tokens: fc.integer({ min: 0, max: 150_000 }),
      outputTokens: fc.integer({ min: 0, max: 100_000 }),
      toolCalls: fc.integer({ min: 0, max: 12 }),
      cost: fc.constantFrom({ amount: "0.8", currency: "USD" }, { amount: "3", currency: "USD" }),
      wallClock: durationS(60, 3600),
      warnAt: fc.constantFrom(0.5, 0.8, 1),
    },
    { requiredKeys: [] },
  ),
  { nil: undefined },
);

export const scenario = fc.record({
  watchdog: settings,
  budget,
  kubelet: fc.constantFrom<Kubelet>("prompt", "slow", "cutOff"),
  // The sandbox's clock may be off by up to an hour either way: it must not matter.
  clockSkewMs: fc.oneof(fc.constant(0), fc.integer({ min: -3_600_000, max: 3_600_000 })),
  commands: fc.array(command, { minLength: 1, maxLength: 30 }),
});

export function play(w: World, c: Command): void {
  switch (c.kind) {
    case "advance":
      w.advance(c.ms);
      break;
    case "heartbeat":
      w.heartbeat(c.state, c.activity ? { kind: c.activity } : undefined);
      break;
    case "staleHeartbeat":
      if ((w.status.attempt ?? 0) > 1) w.heartbeat("Planning", { kind: "delta" }, w.status.attempt - 1);
      break;
    case "toolCall":
      w.toolCall({
        name: c.name,
        argsHash: c.args,
        state: c.state,
        ...(c.state === "Failed" && c.rateLimited ? { httpStatus: 429 } : {}),
        ...(c.state === "Failed" && c.rateLimited && c.retryAfter !== undefined ? { retryAfterSeconds: c.retryAfter } : {}),
      });
      if (c.idempotent !== undefined) w.run.status.toolCalls.at(-1).idempotent = c.idempotent;
      break;
    case "podRunning":
      if (w.currentPod() && !w.currentPod()!.metadata.deletionTimestamp) w.podRunning();
      break;
    case "podExit":
      w.podExit(c.code);
      break;
    case "podDeletedByOthers":
      w.podDeletedByOthers();
      break;
    case "finalizePods":
      w.finalizePods();
      break;
    case "forceDelete":
      w.forceDeleteByOthers();
      break;
    case "nodeBack":
      w.nodeBack();
      break;
    case "suspend":
      w.setSpec({ suspend: c.value });
      break;
    case "resume":
      w.annotate("watchdog.dev/resume", c.token);
      break;
    case "garbage":
      w.run.status = { ...w.status, heartbeat: { time: "not a time", attempt: -3, state: 42 }, toolCalls: "nope" };
      break;
    case "answer":
      w.answer(c.approve ? "approve" : "reject", "from a person");
      break;
    case "deleteRun":
      w.deleteRun();
      break;
    case "quarantine": {
      // Someone takes the current pod out for debugging: its label and owner reference go.
      const pod = w.currentPod();
      if (pod) {
        delete pod.metadata.labels["watchdog.dev/run"];
        delete pod.metadata.ownerReferences;
      }
      break;
    }
    case "heartbeatTimeout":
      w.setSpec({ watchdog: { ...(w.run.spec.watchdog ?? {}), heartbeatTimeout: `${c.seconds}s` } });
      break;
    case "usage": {
      // The sandbox reports its attempt's cumulative usage: never lower within the attempt (the
      // CRD's transition rule refuses that).
      const attempt = w.status.attempt ?? 1;
      const hb = w.status.heartbeat;
      const before = hb && typeof hb === "object" && hb.attempt === attempt && hb.usage ? hb.usage : {};
      const cost = (parseDecimal(before.cost ?? "0") ?? 0n) + (parseDecimal(c.cost) ?? 0n);
      w.report(
        {
          inputTokens: (before.inputTokens ?? 0) + Math.floor(c.tokens / 2),
          outputTokens: (before.outputTokens ?? 0) + Math.ceil(c.tokens / 2),
          toolCalls: (before.toolCalls ?? 0) + c.calls,
          cost: (Number(cost / 10n ** 16n) / 100).toFixed(2),
        },
        attempt,
      );
      break;
    }
    case "budget":
      w.setSpec({ budget: { ...(w.run.spec.budget ?? {}), tokens: c.tokens } });
      break;
    case "wake": {
      const wake = w.plans.at(-1)?.wakeAt;
      if (wake !== undefined && wake > w.now) w.advance(wake - w.now);
      break;
    }
  }
}
