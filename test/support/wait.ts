// Waiting on conditions with a deadline. Tests never sleep and hope: they poll what they expect
// and fail with the last thing they saw.

export interface WaitOptions {
  timeoutMs?: number;
  intervalMs?: number;
}

export async function waitFor<T>(
  description: string,
  probe: () => Promise<T | undefined | false> | T | undefined | false,
  { timeoutMs = 30_000, intervalMs = 100 }: WaitOptions = {},
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  let last: unknown;
  for (;;) {
    try {
      const value = await probe();
      if (value !== undefined && value !== false) return value;
      last = value;
    } catch (err) {
      last = err;
    }
    if (Date.now() > deadline) {
      throw new Error(`timed out after ${timeoutMs} ms waiting for ${description}; last: ${last instanceof Error ? last.message : JSON.stringify(last)}`);
    }
    await new Promise((resolve) => setTimeout(resolve, intervalMs));
  }
}

/** Checks that `probe` stays true for the whole of `forMs` (e.g. "no pod before retry-after"). */
export async function holds(description: string, probe: () => Promise<boolean> | boolean, forMs: number, intervalMs = 100): Promise<void> {
  const until = Date.now() + forMs;
  while (Date.now() < until) {
    const ok = await probe();
    // A probe that finished after the period may have seen what happened after it: only a
    // failure seen within the period counts.
    if (!ok && Date.now() <= until) throw new Error(`expected ${description} to hold for ${forMs} ms, but it did not`);
    await new Promise((resolve) => setTimeout(resolve, intervalMs));
  }
}
