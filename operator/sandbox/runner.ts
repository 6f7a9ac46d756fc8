// Runs an agent's main function under the protocol and turns its end into the pod's exit code,
// which is the final word on the run: 0 completes it, anything else is a crash the watchdog
// handles, but for the codes that say why (errors.ts). The agent's work promise is what keeps
// heartbeats going; when it settles, they stop.
import { EXIT_CODES, exitCodeFor, isBudgetExhausted } from "./errors.ts";
import { newestCallRateLimited } from "./protocol.ts";
import { Sandbox, type SandboxOptions } from "./sandbox.ts";
import { inAttempt } from "./tracing.ts";

export interface RunAgentOptions extends SandboxOptions {
  /** How the process ends; default process.exit. Tests pass a function and read the returned code. */
  exit?: (code: number) => void;
  /**
   * When the agent stops on its budget (BudgetExhaustedError), how long to wait, heartbeating,
   * for the operator to stop the run before exiting. Default 30 s.
   */
  budgetStopWaitMs?: number;
}

/**
 * The operator stops a run whose report reaches a limit within moments; an agent that stopped on
 * its budget waits that long for it, so that the run ends as BudgetExhausted and not as a crash
 * (which would spend a restart first). An operator that does not stop it (one without budgets,
 * or one that prices the usage differently) gets the crash after this wait.
 */
const BUDGET_STOP_WAIT_MS = 30_000;

/**
 * Starts a sandbox, runs `main` with it, and exits: 0 when `main` resolves, non-zero when it
 * throws (3 for an unconfirmed side effect, 4 when fenced, 5 when an approval was denied, 6 when
 * it gave up on a rate limit, 1 otherwise). Returns the exit code when `exit` does not end the
 * process. An agent that stopped on its budget (BudgetExhaustedError) first waits for the
 * operator to stop the run (budgetStopWaitMs), and then exits as fenced.
 */
export async function runAgent(main: (sandbox: Sandbox) => Promise<void> | void, options: RunAgentOptions = {}): Promise<number> {
  const exit = options.exit ?? ((code: number) => process.exit(code));
  let sandbox: Sandbox;
  try {
    sandbox = await Sandbox.start({ ...options, exit });
  } catch (err) {
    const code = exitCodeFor(err);
    process.stderr.write(`sandbox could not start: ${err instanceof Error ? err.message : String(err)}\n`);
    exit(code);
    return code;
  }

  // If the agent awaits something that can never settle and nothing else is pending, Node would
  // drain its event loop and exit 0, which reads as "Completed". That must never happen.
  let settled = false;
  const guard = () => {
    if (!settled) {
      process.stderr.write("the agent's work never settled; exiting non-zero\n");
      process.exitCode = EXIT_CODES.failed;
    }
  };
  process.once("beforeExit", guard);
  try {
    // Spans the agent (or its framework) starts nest under the attempt's span (TRACEPARENT).
    await inAttempt(() => main(sandbox));
    settled = true;
    await sandbox.complete();
    return sandbox.fenced ? EXIT_CODES.fenced : EXIT_CODES.completed;
  } catch (err) {
    settled = true;
    if (isBudgetExhausted(err) && !sandbox.fenced) await sandbox.waitForStop(options.budgetStopWaitMs ?? BUDGET_STOP_WAIT_MS);
    // Agent code that stops on the abort signal throws its own errors; fencing is still the cause.
    let code = exitCodeFor(err);
    if (code === EXIT_CODES.failed && sandbox.fenced) code = EXIT_CODES.fenced;
    // Giving up right after a rate-limited call is giving up on the rate limit, whatever the
    // agent threw: the watchdog then waits out the rate-limit backoff instead of a restart's.
    else if (code === EXIT_CODES.failed && newestCallRateLimited(sandbox.calls, sandbox.attempt)) code = EXIT_CODES.rateLimited;
    await sandbox.fail(err, code);
    return code;
  } finally {
    process.off("beforeExit", guard);
  }
}
