// Exponential backoff, computed from counts kept in the run's status so that a restarted operator
// computes the same wait.
import type { BackoffSettings } from "../api/defaults.ts";

/** Wait before retry n (1-based): min(max, initial * factor^(n-1)). */
export function backoffDelay(backoff: BackoffSettings, n: number): number {
  const exponent = Math.max(0, n - 1);
  const raw = backoff.initialMs * Math.pow(backoff.factor, exponent);
  return Math.min(backoff.maxMs, Number.isFinite(raw) ? raw : backoff.maxMs);
}

/**
 * Wait after a rate limit: the server's Retry-After wins over the computed backoff, but no wait is
 * longer than the configured max, so a hostile or broken server cannot park a run for days.
 */
export function rateLimitDelay(backoff: BackoffSettings, n: number, retryAfterSeconds?: number): number {
  if (retryAfterSeconds !== undefined && Number.isFinite(retryAfterSeconds) && retryAfterSeconds >= 0) {
    return Math.min(backoff.maxMs, retryAfterSeconds * 1000);
  }
  return backoffDelay(backoff, n);
}
