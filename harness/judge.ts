// Judging the end states: each run against what the watchdog's rules require of its behaviour.
import { Outbox } from "../operator/example-agent/outbox.ts";
import type { Run } from "./driver.ts";
import { APPROVAL_ANSWER, RUNAWAY_REPORTS_OVER, type Behaviour, type DemoRun } from "./scenario.ts";

/** What the example agent's runaway reports per model call (EXAMPLE_TOKENS_PER_STEP's default). */
const RUNAWAY_TOKENS_PER_REPORT = 20_000;

/* eslint-disable @typescript-eslint/no-explicit-any -- runs are read as plain JSON here */
export interface Verdict {
  name: string;
  behaviour: Behaviour;
  phase: string;
  ok: boolean;
  expected: string;
  problems: string[];
}

export interface JudgeContext {
  /** E-mails in the outbox sent on behalf of the run. */
  emailsSent(run: string): number;
  /** Whether the run was approved once it had been seen with its pod released. */
  approvedAfterRelease(run: string): boolean;
}

function transitionedFor(run: Run, phase: string, reason: string): boolean {
  return (run.status?.transitions ?? []).some((t: any) => t.phase === phase && t.reason === reason);
}

/** Checks one run against what the watchdog's rules require of its behaviour. */
export function judge(demo: DemoRun, run: Run | undefined, context: JudgeContext): Verdict {
  const problems: string[] = [];
  const status = run?.status ?? {};
  const want = (cond: boolean, problem: string) => {
    if (!cond) problems.push(problem);
  };
  const phase = (expected: string, reason?: string) => {
    want(status.phase === expected, `phase is ${status.phase ?? "unset"}, expected ${expected}`);
    if (reason) want(status.reason === reason, `reason is ${status.reason ?? "unset"}, expected ${reason}`);
  };
  if (!run) {
    problems.push("the run does not exist");
  } else {
    switch (demo.behaviour) {
      case "healthy":
        phase("Completed");
        want(status.restarts === 0 && status.attempt === 1, `attempt ${status.attempt} with ${status.restarts} restarts, expected attempt 1 with none`);
        break;
      case "hang-in-tool": {
        const allowance = (demo.watchdog as { maxRestarts?: number }).maxRestarts ?? 3;
        phase("NeedsHumanIntervention", "RecoveryBudgetExhausted");
        want(status.lastFailure?.reason === "HeartbeatTimeout", `last failure is ${status.lastFailure?.reason ?? "unset"}, expected HeartbeatTimeout`);
        want(transitionedFor(run, "Queued", "HeartbeatTimeout"), "no HeartbeatTimeout requeue in its transitions");
        want(status.restarts === allowance, `${status.restarts} restarts, expected the whole allowance of ${allowance}`);
        break;
      }
      case "crash":
        phase("Completed");
        want(transitionedFor(run, "Queued", "PodFailed"), "no PodFailed requeue in its transitions");
        want(status.restarts === 1, `${status.restarts} restarts, expected 1`);
        break;
      case "tool-loop":
        phase("NeedsHumanIntervention", "ToolLoop");
        break;
      case "rate-limited":
        phase("Completed");
        want(transitionedFor(run, "Queued", "RateLimited"), "no RateLimited requeue in its transitions");
        want(status.restarts === 0, `${status.restarts} restarts, expected 0 (a rate limit spends none)`);
        break;
      case "stall": {
        const nudges = ((demo.watchdog as { stall?: { maxNudges?: number } }).stall?.maxNudges ?? 3);
        phase("NeedsHumanIntervention", "StallUnresolved");
        want(status.stall?.nudges === nudges, `${status.stall?.nudges ?? 0} nudges, expected ${nudges}`);
        break;
      }
      case "await-approval":
        phase("Completed");
        want(context.approvedAfterRelease(demo.name), "it was never seen awaiting a reply with its pod released");
        want(status.approval?.state === "Approved" && status.approval?.answer === APPROVAL_ANSWER, `approval is ${JSON.stringify(status.approval)}`);
        // The release ends attempt 1 without spending a restart; the answer starts attempt 2.
        want(status.attempt === 2 && status.restarts === 0, `attempt ${status.attempt} with ${status.restarts} restarts, expected attempt 2 with none`);
        want(
          (status.transitions ?? []).some((t: any) => t.from === "AwaitingReply" && t.attempt === 2),
          "no new sandbox resumed after the answer",
        );
        break;
      case "side-effect-then-crash": {
        phase("Completed");
        want(transitionedFor(run, "Queued", "PodFailed"), "no PodFailed requeue in its transitions");
        const sent = context.emailsSent(demo.name);
        want(sent === 1, `${sent} e-mails in the outbox, expected exactly 1`);
        break;
      }
      case "runaway": {
        phase("NeedsHumanIntervention", "BudgetExhausted");
        const limit = (demo.budget as { tokens?: number } | undefined)?.tokens ?? 0;
        const spent = (status.spent?.inputTokens ?? 0) + (status.spent?.outputTokens ?? 0);
        // Never stopped before the limit; stopped within RUNAWAY_REPORTS_OVER reports past it.
        const most = limit + RUNAWAY_REPORTS_OVER * RUNAWAY_TOKENS_PER_REPORT;
        want(spent >= limit && spent <= most, `${spent} tokens spent, expected ${limit} to ${most}`);
        want(status.attempt === 1 && status.restarts === 0, `attempt ${status.attempt} with ${status.restarts} restarts, expected attempt 1 with none`);
        break;
      }
    }
  }
  return { name: demo.name, behaviour: demo.behaviour, phase: status.phase ?? "-", ok: problems.length === 0, expected: demo.expected, problems };
}

/** E-mails in the example agent's outbox, counted per run (the subject names the run). */
export async function emailsByRun(outboxDir: string): Promise<Map<string, number>> {
  const counts = new Map<string, number>();
  for (const email of await new Outbox(outboxDir).sent()) {
    const run = /^Report for (.+)$/.exec(email.subject)?.[1] ?? "?";
    counts.set(run, (counts.get(run) ?? 0) + 1);
  }
  return counts;
}
