// The run as the sandbox finds it at start: read with retries while the API server cannot be
// reached, and parsed exactly as the operator parses it (operator/api/read-run.ts).
import { RETRY, apiErrorCode, isNotFound, isTransient, runPaths, type Json, type SandboxApi } from "./api-client.ts";
import { FencedError } from "./errors.ts";
import type { SandboxIdentity } from "./protocol.ts";

export { readRun, type ReadRun } from "../api/read-run.ts";

/**
 * An API server that restarts, or a network still coming up in a new pod, is a matter of
 * seconds: the first read is retried like every write, up to the start deadline. So is a 403 at
 * start: the sandbox's RoleBinding is made just before its pod, and an authorizer that has not
 * seen it yet (its cache refilling after an API server restart, say) refuses the first read.
 */
export async function readOwnRun(client: SandboxApi, identity: SandboxIdentity, clock: () => number, deadlineMs: number): Promise<Json> {
  const giveUpAt = clock() + deadlineMs;
  for (let wait: number = RETRY.firstMs; ; wait = Math.min(RETRY.maxMs, wait * 2)) {
    try {
      return await client.get(runPaths.run(identity.namespace, identity.runName));
    } catch (err) {
      if (isNotFound(err)) throw new FencedError(`run ${identity.namespace}/${identity.runName} does not exist`);
      if (!(isTransient(err) || apiErrorCode(err) === 403) || clock() + wait > giveUpAt) throw err;
      await new Promise((resolve) => setTimeout(resolve, wait));
    }
  }
}
