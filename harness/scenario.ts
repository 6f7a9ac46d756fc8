// The demo's scenario: one AgentRun per behaviour the watchdog handles, with short timings, and
// the end state each must reach. The demo, the end-to-end tests and the real-node suite all drive
// exactly this.
import { paths, type Json, type KubeClient } from "../operator/kube/client.ts";

export type Behaviour =
  | "healthy"
  | "hang-in-tool"
  | "crash"
  | "tool-loop"
  | "rate-limited"
  | "stall"
  | "await-approval"
  | "rate-limited-approval"
  | "side-effect-then-crash"
  | "runaway";

export interface DemoRun {
  name: string;
  behaviour: Behaviour;
  /** spec.watchdog */
  watchdog: Json;
  /** spec.budget, if the run has one */
  budget?: Json;
  /** The end state the watchdog's rules require, in words. */
  expected: string;
}

/**
 * Short timings, so the whole demo takes a couple of minutes. The heartbeat timeout is the one
 * generous value: only the hanging run waits on it (with a shorter one of its own), and the others
 * must not be mistaken for hung while a loaded two-core machine starts nine Node processes at once
 * (a sandbox's first write over 30 s after its container started has been seen on the real node).
 */
export const DEMO_WATCHDOG = {
  heartbeatTimeout: "60s",
  maxRestarts: 2,
  backoff: { initial: "3s", factor: 2, max: "12s" },
  rateLimitBackoff: { initial: "2s", factor: 2, max: "10s" },
  stall: { timeout: "5s", maxNudges: 2 },
  releaseAwaitingAfter: "10s",
};

/** The runaway run's token budget; no other rule stops it. */
export const RUNAWAY_TOKEN_LIMIT = 100_000;
/**
 * How many of its reports (one a second) may land past the limit before the stop is written. The
 * integration suite holds the operator to the first report at or over a limit; on a loaded
 * two-core machine, with the operator in a pod on the same node, the demo allows two more.
 */
export const RUNAWAY_REPORTS_OVER = 3;

export const DEMO_RUNS: DemoRun[] = [
  { name: "summarise-docs", behaviour: "healthy", watchdog: DEMO_WATCHDOG, expected: "Completed on attempt 1, no restarts" },
  {
    name: "build-release",
    behaviour: "hang-in-tool",
    // The example wedges in the same tool on every attempt, so each attempt is killed as hung
    // until the allowance is spent. One restart keeps that to two attempts of about 25 s each
    // (no progress for a timeout, then no heartbeat for another).
    watchdog: { ...DEMO_WATCHDOG, heartbeatTimeout: "15s", maxRestarts: 1 },
    expected: "NeedsHumanIntervention (RecoveryBudgetExhausted) after a HeartbeatTimeout requeue: it hangs on every attempt",
  },
  { name: "index-repo", behaviour: "crash", watchdog: DEMO_WATCHDOG, expected: "Completed after one PodFailed restart, resumed from its checkpoint" },
  { name: "fetch-report", behaviour: "tool-loop", watchdog: DEMO_WATCHDOG, expected: "NeedsHumanIntervention (ToolLoop)" },
  { name: "ask-model", behaviour: "rate-limited", watchdog: DEMO_WATCHDOG, expected: "Completed after a RateLimited requeue, restarts 0" },
  { name: "answer-ticket", behaviour: "stall", watchdog: DEMO_WATCHDOG, expected: "NeedsHumanIntervention (StallUnresolved) after 2 nudges" },
  { name: "deploy-v2", behaviour: "await-approval", watchdog: DEMO_WATCHDOG, expected: "Completed after its pod was released and the demo approved" },
  {
    name: "email-report",
    behaviour: "side-effect-then-crash",
    watchdog: DEMO_WATCHDOG,
    expected: "Completed after one PodFailed restart, with exactly one e-mail sent",
  },
  {
    name: "research-loop",
    behaviour: "runaway",
    // 20,000 tokens a step (the example agent's default): the fifth report reaches the limit.
    watchdog: DEMO_WATCHDOG,
    budget: { tokens: RUNAWAY_TOKEN_LIMIT },
    expected: `NeedsHumanIntervention (BudgetExhausted) once it reaches its ${RUNAWAY_TOKEN_LIMIT}-token budget, within ${RUNAWAY_REPORTS_OVER} reports, no restart`,
  },
];

/** Example-agent settings for every sandbox (see operator/example-agent/main.ts). */
export const EXAMPLE_ENV = {
  EXAMPLE_STEPS: "3",
  EXAMPLE_STEP_DELAY_MS: "1000",
  EXAMPLE_LOOP_DELAY_MS: "500",
  EXAMPLE_RETRY_AFTER_SECONDS: "4",
};

export const APPROVAL_ANSWER = "ship it";
export const DEFAULT_NAMESPACE = "agent-watchdog-demo";

/** How sandboxes run: on the local sandbox runner (the default) or in real pods of an image. */
export interface SandboxOptions {
  /** The image of the sandbox pods. Default agent-watchdog:0.1.0 (the runner ignores it). */
  image?: string;
  /** Environment of the agent container (a real pod gets nothing from the runner). */
  env?: Record<string, string>;
}

export function manifestFor(run: DemoRun, sandbox: SandboxOptions = {}): Json {
  const container: Json = { name: "agent", image: sandbox.image ?? "agent-watchdog:0.1.0", args: ["example-agent"] };
  if (sandbox.env) container.env = Object.entries(sandbox.env).map(([name, value]) => ({ name, value }));
  return {
    apiVersion: "watchdog.dev/v1alpha1",
    kind: "AgentRun",
    metadata: { name: run.name, labels: { "app.kubernetes.io/part-of": "agent-watchdog-demo" } },
    spec: {
      // The example agent takes its behaviour from the goal.
      goal: run.behaviour,
      template: { spec: { containers: [container] } },
      watchdog: run.watchdog,
      ...(run.budget ? { budget: run.budget } : {}),
    },
  };
}

export async function applyRuns(client: KubeClient, namespace: string, runs: readonly DemoRun[] = DEMO_RUNS, sandbox: SandboxOptions = {}): Promise<void> {
  for (const run of runs) await client.create(paths.runs(namespace), manifestFor(run, sandbox));
}
