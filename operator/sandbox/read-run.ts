// The run as the sandbox finds it at start: read with retries while the API server cannot be
// reached, and parsed exactly as the operator parses it (operator/api/read-run.ts).
import { RETRY, apiErrorCode, isNotFound, isTransient, runPaths, type Json, type SandboxApi } from "./api-client.ts";
import { FencedError } from "./errors.ts";
import type { SandboxLogger } from "./log.ts";
import type { SandboxIdentity } from "./protocol.ts";

export { readRun, type ReadRun } from "../api/read-run.ts";

/**
 * An API server that restarts, or a network still coming up in a new pod, is a matter of
 * seconds: the first read is retried like every write, up to the start deadline. So is a 403 at
 * start: the sandbox's RoleBinding is made just before its pod, and an authorizer that has not
 * seen it yet (its cache refilling after an API server restart, say) refuses the first read.
 */
export async function readOwnRun(client: SandboxApi, identity: SandboxIdentity, clock: () => number, deadlineMs: number, log: SandboxLogger): Promise<Json> {
  const startedAt = clock();
  const giveUpAt = startedAt + deadlineMs;
  // A sandbox that never reports in is killed as hung with nothing to say why unless it says so
  // here: the first refusal, then one line per WAIT_REPORT_MS while it lasts.
  let reportedAt: number | undefined;
  for (let tries = 1, wait: number = RETRY.firstMs; ; tries++, wait = Math.min(RETRY.maxMs, wait * 2)) {
    try {
      const run = await client.get(runPaths.run(identity.namespace, identity.runName));
      if (reportedAt !== undefined) log.info({ tries, waitedMs: clock() - startedAt }, "read the run");
      return run;
    } catch (err) {
      if (isNotFound(err)) throw new FencedError(`run ${identity.namespace}/${identity.runName} does not exist`);
      if (!(isTransient(err) || apiErrorCode(err) === 403) || clock() + wait > giveUpAt) throw err;
      if (reportedAt === undefined || clock() - reportedAt >= WAIT_REPORT_MS) {
        reportedAt = clock();
        log.warn({ tries, code: apiErrorCode(err), error: err instanceof Error ? err.message : String(err), giveUpInMs: giveUpAt - reportedAt }, "cannot read the run yet; trying again");
      }
      await new Promise((resolve) => setTimeout(resolve, wait));
    }
  }
}

const WAIT_REPORT_MS = 10_000;
