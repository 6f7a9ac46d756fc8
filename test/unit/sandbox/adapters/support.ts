// What the adapters' unit tests share: sandboxes on the in-memory API (fake-api.ts), abandoned
// after each test, a second attempt on the same status, and a bounded wait on a condition.
import { createLogger } from "../../../../operator/log.ts";
import { Sandbox, type SandboxOptions } from "../../../../operator/sandbox/sandbox.ts";
import type { FakeApi } from "../fake-api.ts";

let started: Sandbox[] = [];

/** For afterEach: stops every sandbox the test started. */
export function abandonSandboxes(): void {
  for (const s of started) s.abandon();
  started = [];
}

/** A sandbox of `attempt` on the fake API, with a heartbeat timeout no test waits out. */
export async function startSandbox(api: FakeApi, attempt = 1, options: Partial<SandboxOptions> = {}): Promise<Sandbox> {
  const sandbox = await Sandbox.start({
    client: api.client(),
    identity: { runName: "r", namespace: "ns", attempt },
    logger: createLogger("silent"),
    exit: () => {},
    heartbeatTimeoutMs: 60_000,
    ...options,
  });
  started.push(sandbox);
  return sandbox;
}

/** Ends `one` as a crash would (no flush, no exit) and starts attempt 2 on the same status. */
export async function nextAttempt(api: FakeApi, one: Sandbox): Promise<Sandbox> {
  one.abandon();
  api.operator({ attempt: 2, phase: "Starting" });
  return startSandbox(api, 2);
}

/** Runs attempt 1 with `first`, then crashes it and starts attempt 2. */
export async function secondAttempt(api: FakeApi, first: (s: Sandbox) => Promise<void>): Promise<Sandbox> {
  const one = await startSandbox(api);
  await first(one);
  return nextAttempt(api, one);
}

/** Waits until `test` holds, failing after `ms`. */
export async function until(what: string, test: () => boolean, ms = 5000): Promise<void> {
  const deadline = Date.now() + ms;
  while (!test()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 5));
  }
}
