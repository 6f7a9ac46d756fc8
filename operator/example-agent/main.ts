// An example agent on the sandbox SDK, with one behaviour per thing the watchdog handles, so the
// operator can be shown (and tested) against a real sandbox process:
//
//   healthy                 a few steps, each with a tool call and a checkpoint, then exit 0
//   hang-in-tool            wedges inside a tool: no progress, so heartbeats stop and the
//                           watchdog replaces the sandbox (HeartbeatTimeout)
//   crash                   exits 1 after its first checkpoint on attempt 1; a later attempt
//                           resumes from the checkpoint and completes
//   tool-loop               calls the same failing tool with the same arguments until stopped
//                           (ToolLoop)
//   rate-limited            a tool fails with 429 and Retry-After on attempt 1 and the agent gives
//                           up: runAgent exits 6 (rate limited), so the watchdog requeues the run
//                           with the rate-limit backoff, no restart spent; a later attempt gets
//                           through and completes (RateLimited)
//   stall                   says its final text, then stays silent whatever the nudges say
//                           (StallUnresolved)
//   await-approval          asks a person, completes with the answer (also across a release of
//                           its pod: the next attempt resumes from the checkpoint)
//   rate-limited-approval   rate-limited (on attempts 1 and 2 by default), then await-approval:
//                           three attempts, two rate-limit waits and an approval in one run
//   side-effect-then-crash  sends an e-mail through an idempotent tool and crashes before the
//                           success is recorded; the next attempt sends again with the same key and
//                           the outbox returns the saved receipt: exactly one e-mail
//   runaway                 a model loop that never ends and never fails: a streamed step a second,
//                           each reporting a model call of 20,000 tokens with recordUsage(); it
//                           heartbeats, calls no tool and says no final text, so no rule but a run
//                           budget (spec.budget, BudgetExhausted) stops it. It does not check the
//                           budget itself: the operator's enforcement is what it shows
//
// The behaviour is env EXAMPLE_BEHAVIOUR, else the run's spec.goal when it names one, else healthy.
// Timings (for fast tests): EXAMPLE_STEPS (3), EXAMPLE_STEP_DELAY_MS (1000), EXAMPLE_LOOP_DELAY_MS
// (500), EXAMPLE_MAX_LOOPS (50), EXAMPLE_RETRY_AFTER_SECONDS (5), EXAMPLE_RATE_LIMITED_ATTEMPTS
// (the attempts that get a 429: 1 for rate-limited, 2 for rate-limited-approval), EXAMPLE_CLOCK_SKEW_MS (0: how far
// the sandbox's clock runs fast; negative: slow). The runaway's spending: EXAMPLE_TOKENS_PER_STEP (20000, three
// quarters input), EXAMPLE_MODEL (example-model: the name spec.budget.prices can price). The outbox: EXAMPLE_OUTBOX_URL
// (a shared outbox service, for pods) or EXAMPLE_OUTBOX_DIR (a directory; default a temp dir).
//
// Run it as `node operator/example-agent/main.ts` with WATCHDOG_RUN_NAME, WATCHDOG_RUN_NAMESPACE,
// WATCHDOG_ATTEMPT and a kubeconfig (or in-cluster credentials). With an OTLP endpoint set
// (OTEL_EXPORTER_OTLP_ENDPOINT) it exports its spans, under the attempt's TRACEPARENT.
import { setTimeout as sleep } from "node:timers/promises";
import { z } from "zod";
import { createLogger } from "../log.ts";
import { ToolError, runAgent, type Sandbox, type StreamHandle, type ToolOutcome } from "../sandbox/index.ts";
import { HttpOutbox, Outbox, defaultOutboxDir, type Mailer } from "./outbox.ts";
import { startAgentTracing } from "./tracing.ts";

const BEHAVIOURS = [
  "healthy",
  "hang-in-tool",
  "crash",
  "tool-loop",
  "rate-limited",
  "stall",
  "await-approval",
  "rate-limited-approval",
  "side-effect-then-crash",
  "runaway",
] as const;
type Behaviour = (typeof BEHAVIOURS)[number];

const log = createLogger(process.env.WATCHDOG_LOG_LEVEL ?? "info", "example-agent");

function intEnv(name: string, fallback: number): number {
  const text = process.env[name];
  if (text === undefined || text === "") return fallback;
  const value = Number(text);
  if (!Number.isFinite(value) || value < 0) throw new Error(`${name}=${text} is not a non-negative number`);
  return value;
}

function signedIntEnv(name: string, fallback: number): number {
  const text = process.env[name];
  if (text === undefined || text === "") return fallback;
  const value = Number(text);
  if (!Number.isInteger(value)) throw new Error(`${name}=${text} is not a whole number`);
  return value;
}

const settings = {
  steps: intEnv("EXAMPLE_STEPS", 3),
  stepDelayMs: intEnv("EXAMPLE_STEP_DELAY_MS", 1000),
  loopDelayMs: intEnv("EXAMPLE_LOOP_DELAY_MS", 500),
  maxLoops: intEnv("EXAMPLE_MAX_LOOPS", 50),
  retryAfterSeconds: intEnv("EXAMPLE_RETRY_AFTER_SECONDS", 5),
  rateLimitedAttempts: process.env.EXAMPLE_RATE_LIMITED_ATTEMPTS ? intEnv("EXAMPLE_RATE_LIMITED_ATTEMPTS", 1) : undefined,
  tokensPerStep: intEnv("EXAMPLE_TOKENS_PER_STEP", 20_000),
  model: process.env.EXAMPLE_MODEL || "example-model",
  outboxDir: process.env.EXAMPLE_OUTBOX_DIR || defaultOutboxDir(),
  outboxUrl: process.env.EXAMPLE_OUTBOX_URL,
};

/** Pods of different attempts share no filesystem: there the outbox is a service. */
const mailer = (): Mailer => (settings.outboxUrl ? new HttpOutbox(settings.outboxUrl) : new Outbox(settings.outboxDir));

const isBehaviour = (value: string | undefined): value is Behaviour => (BEHAVIOURS as readonly string[]).includes(value ?? "");

function chooseBehaviour(fromEnv: string | undefined, goal: string | undefined): Behaviour {
  if (fromEnv) {
    if (!isBehaviour(fromEnv)) throw new Error(`EXAMPLE_BEHAVIOUR=${fromEnv} is not one of ${BEHAVIOURS.join(", ")}`);
    return fromEnv;
  }
  const fromGoal = goal?.trim();
  return isBehaviour(fromGoal) ? fromGoal : "healthy";
}

/** Thinking: streamed output with progress, interruptible when the sandbox is fenced. */
async function think(sandbox: Sandbox, ms: number, stream: StreamHandle, about: string): Promise<void> {
  const slice = 200;
  for (let spent = 0; spent < ms; spent += slice) {
    await sleep(Math.min(slice, ms - spent), undefined, { signal: sandbox.signal });
    stream.chunk(`${about}… `);
  }
}

function expectOk<T>(outcome: ToolOutcome<T>, what: string): T {
  if (!outcome.ok) throw new Error(`${what}: ${outcome.error.message}`);
  return outcome.value;
}

const LookupArgs = z.strictObject({ topic: z.string().min(1), step: z.int().min(1) });
const lookup = (args: z.infer<typeof LookupArgs>) => ({ step: args.step, fact: `fact ${args.step} about ${args.topic}` });

/** Steps from the checkpoint on, each a streamed thought, a lookup and a checkpoint. */
async function steps(sandbox: Sandbox, topic: string, until: number, afterStep?: (step: number) => void): Promise<string[]> {
  const checkpoint = sandbox.loadCheckpoint();
  const notes = [...(((checkpoint?.data as { notes?: string[] } | undefined)?.notes) ?? [])];
  if (checkpoint) log.info({ step: checkpoint.step }, "resuming from the checkpoint");
  for (let step = (checkpoint?.step ?? 0) + 1; step <= until; step++) {
    const stream = sandbox.beginStream();
    await think(sandbox, settings.stepDelayMs, stream, `step ${step}`);
    const found = expectOk(await sandbox.tool("lookup", { topic, step }, lookup, { idempotent: true, schema: LookupArgs }), "lookup");
    notes.push(found.fact);
    await sandbox.saveCheckpoint(step, { notes });
    log.info({ step }, "step committed");
    afterStep?.(step);
  }
  return notes;
}

/**
 * Asks the fake model, which is busy (429 with Retry-After) on attempts up to `busyAttempts`, and
 * says its answer.
 */
async function answerDespiteRateLimits(sandbox: Sandbox, busyAttempts: number): Promise<void> {
  const outcome = await sandbox.tool(
    "call_model",
    { prompt: sandbox.goal ?? "" },
    () => {
      if (sandbox.attempt <= busyAttempts) throw new ToolError("429 Too Many Requests", { httpStatus: 429, retryAfterSeconds: settings.retryAfterSeconds });
      return { text: "The model answered." };
    },
    { idempotent: true },
  );
  // Giving up right after a 429: runAgent exits with EXIT_CODES.rateLimited, and the watchdog
  // waits out the rate limit (the call's Retry-After) instead of spending a restart.
  if (!outcome.ok) throw new Error(`giving up this attempt: ${outcome.error.message}`);
  await sandbox.say(outcome.value.text);
}

/** Prepares a release, asks a person whether to deploy it, and deploys with the answer. */
async function deployWithApproval(sandbox: Sandbox): Promise<void> {
  const version = "v2.0.0";
  if (!sandbox.loadCheckpoint()) {
    expectOk(await sandbox.tool("prepare_release", { version }, () => ({ prepared: version }), { idempotent: true }), "prepare_release");
  }
  const answer = await sandbox.awaitApproval(`Deploy ${version} to production?`, { step: 1, data: { version } });
  log.info({ answer }, "approval received");
  expectOk(await sandbox.tool("deploy", { version, answer }, () => ({ deployed: version }), { idempotent: true }), "deploy");
  await sandbox.say(`Deployed ${version}; the approver said: ${answer}`);
}

const behaviours: Record<Behaviour, (sandbox: Sandbox) => Promise<void>> = {
  async healthy(sandbox) {
    const notes = await steps(sandbox, sandbox.goal || "the task", settings.steps);
    await sandbox.say(`Finished ${settings.steps} steps: ${notes.join("; ")}.`);
  },

  async "hang-in-tool"(sandbox) {
    await steps(sandbox, "the build", 1);
    await sandbox.tool(
      "compile",
      { target: "all" },
      // Wedged: a request that never returns and reports no progress. Only fencing ends it.
      (_args, ctx) => new Promise<never>((_resolve, reject) => ctx.signal.addEventListener("abort", () => reject(ctx.signal.reason))),
      { idempotent: true },
    );
  },

  async crash(sandbox) {
    if (sandbox.lastFailure) log.info({ lastFailure: sandbox.lastFailure }, "the previous attempt ended");
    const notes = await steps(sandbox, "the crash", settings.steps, (step) => {
      if (sandbox.attempt === 1 && step === 1) {
        log.warn("crashing on purpose after the first checkpoint");
        process.exit(1);
      }
    });
    await sandbox.say(`Recovered and finished: ${notes.join("; ")}.`);
  },

  async "tool-loop"(sandbox) {
    for (let i = 1; i <= settings.maxLoops; i++) {
      const outcome = await sandbox.tool(
        "fetch_url",
        { url: "https://example.invalid/report" },
        () => {
          throw new ToolError("upstream returned 500 Internal Server Error", { httpStatus: 500 });
        },
        { idempotent: true },
      );
      if (!outcome.ok) log.info({ try: i, error: outcome.error.message }, "fetch failed; trying the same again");
      await sleep(settings.loopDelayMs, undefined, { signal: sandbox.signal });
    }
    throw new Error(`fetch_url failed ${settings.maxLoops} times`);
  },

  async "rate-limited"(sandbox) {
    await answerDespiteRateLimits(sandbox, settings.rateLimitedAttempts ?? 1);
  },

  async "rate-limited-approval"(sandbox) {
    if (!sandbox.loadCheckpoint()) await answerDespiteRateLimits(sandbox, settings.rateLimitedAttempts ?? 2);
    await deployWithApproval(sandbox);
  },

  async stall(sandbox) {
    await sandbox.say("Here is my final answer.");
    // Silent from here on: each nudge reaches the agent, and it answers none of them.
    for (;;) {
      const nudge = await sandbox.nextNudge();
      log.info({ nudge: nudge.count, message: nudge.message }, "nudged; staying silent");
    }
  },

  async "await-approval"(sandbox) {
    await deployWithApproval(sandbox);
  },

  async "side-effect-then-crash"(sandbox) {
    const outbox = mailer();
    const EmailArgs = z.strictObject({ to: z.email(), subject: z.string().min(1), body: z.string() });
    const email = { to: "ops@example.com", subject: `Report for ${sandbox.runName}`, body: "All checks passed." };
    const outcome = await sandbox.tool(
      "send_email",
      email,
      async (args, ctx) => {
        const receipt = await outbox.send(ctx.idempotencyKey, args);
        log.info({ receipt, rerun: ctx.rerun }, receipt.duplicate ? "the outbox already had this e-mail" : "e-mail sent");
        if (sandbox.attempt === 1) {
          log.warn("crashing on purpose before the success is recorded");
          process.exit(1);
        }
        return receipt;
      },
      { idempotent: true, schema: EmailArgs },
    );
    const receipt = expectOk(outcome, "send_email");
    await sandbox.say(`Sent the report (${receipt.messageId}).`);
  },

  async runaway(sandbox) {
    const inputTokens = Math.round(settings.tokensPerStep * 0.75);
    const outputTokens = settings.tokensPerStep - inputTokens;
    // Never done, never failing: each pass "calls the model" again. Streamed output is progress
    // (heartbeats go on) and its delta write carries the usage so far; no final text arms the
    // stall watchdog, no tool fails. Only fencing (the operator stopping the run) ends the loop.
    for (let pass = 1; ; pass++) {
      const stream = sandbox.beginStream();
      await think(sandbox, settings.stepDelayMs, stream, `pass ${pass}`);
      sandbox.recordUsage({ inputTokens, outputTokens, model: settings.model });
      const { tokens, cost } = sandbox.spending();
      log.info({ pass, tokens, cost }, "one more pass; the answer is nearly there");
    }
  },
};

// A sandbox whose clock is off (EXAMPLE_CLOCK_SKEW_MS, for the soak): the watchdog must measure
// its heartbeats on the API server's clock, never on this one.
const skewMs = signedIntEnv("EXAMPLE_CLOCK_SKEW_MS", 0);
startAgentTracing();
await runAgent(
  async (sandbox) => {
    const behaviour = chooseBehaviour(process.env.EXAMPLE_BEHAVIOUR, sandbox.goal);
    log.info({ behaviour, attempt: sandbox.attempt, run: sandbox.runName, skewMs }, "example agent starting");
    await behaviours[behaviour](sandbox);
  },
  skewMs ? { clock: () => Date.now() + skewMs } : {},
);
