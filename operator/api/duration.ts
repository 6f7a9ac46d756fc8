// Durations are Go-style strings ("30s", "5m", "1h30m"), the same syntax the API server's CEL
// `duration()` accepts, so what the CRD admits is exactly what the operator can parse. CEL parses
// with Go's time.ParseDuration, so the arithmetic here is Go's, to the nanosecond: a fraction below
// a nanosecond is dropped (so "0.5ns" is zero) and anything past int64 nanoseconds is refused.

/** A positive Go duration: one or more <number><unit> groups, no sign. */
export const DURATION_PATTERN = /^([0-9]+([.][0-9]+)?(ns|us|µs|ms|s|m|h))+$/;

const UNIT_NS: Record<string, bigint> = {
  ns: 1n,
  us: 1_000n,
  µs: 1_000n,
  ms: 1_000_000n,
  s: 1_000_000_000n,
  m: 60_000_000_000n,
  h: 3_600_000_000_000n,
};

/** The longest Go duration, in nanoseconds (about 292 years). */
export const MAX_DURATION_NS = (1n << 63n) - 1n;
const LIMIT = 1n << 63n;

/** Go's leadingFraction: digits while they fit, and the power of ten they were scaled by. */
function fraction(digits: string): { value: bigint; scale: number } {
  let value = 0n;
  let scale = 1;
  for (const digit of digits) {
    if (value > MAX_DURATION_NS / 10n) break;
    const next = value * 10n + BigInt(digit);
    if (next > LIMIT) break;
    value = next;
    scale *= 10;
  }
  return { value, scale };
}

/**
 * Nanoseconds in `text` exactly as Go's time.ParseDuration computes them, or undefined where Go
 * refuses it (not the pattern, or past int64). Zero is a valid result here; the CRD wants more.
 */
export function durationNanos(text: string): bigint | undefined {
  if (!DURATION_PATTERN.test(text)) return undefined;
  let total = 0n;
  for (const match of text.matchAll(/([0-9]+)(?:[.]([0-9]+))?(ns|us|µs|ms|s|m|h)/g)) {
    const whole = BigInt(match[1] as string);
    const unit = UNIT_NS[match[3] as string] as bigint;
    if (whole >= LIMIT || whole > LIMIT / unit) return undefined;
    let part = whole * unit;
    if (match[2] !== undefined) {
      const f = fraction(match[2]);
      // Go multiplies in float64 and truncates; so must this, or 0.3h would differ by a nanosecond.
      if (f.value > 0n) part += BigInt(Math.trunc(Number(f.value) * (Number(unit) / f.scale)));
      if (part > LIMIT) return undefined;
    }
    total += part;
    if (total > LIMIT) return undefined;
  }
  return total > MAX_DURATION_NS ? undefined : total;
}

/** Milliseconds in a duration string; throws on anything the CRD rejects as a duration. */
export function parseDuration(text: string): number {
  const nanos = durationNanos(text);
  if (nanos === undefined) {
    throw new Error(`invalid duration ${JSON.stringify(text)}: use a form such as 30s, 5m or 1h30m`);
  }
  return Number(nanos) / 1e6;
}

/** Time elapsed in whole seconds, "3m12s": never rounded up past what has elapsed. */
export function formatElapsed(ms: number): string {
  return ms < 1000 ? "0s" : formatDuration(Math.floor(ms / 1000) * 1000);
}

/** The shortest readable form of a millisecond count, e.g. 90000 -> "1m30s". */
export function formatDuration(ms: number): string {
  if (ms < 1000) return `${Math.round(ms)}ms`;
  let seconds = Math.round(ms / 1000);
  const hours = Math.floor(seconds / 3600);
  seconds -= hours * 3600;
  const minutes = Math.floor(seconds / 60);
  seconds -= minutes * 60;
  return `${hours ? `${hours}h` : ""}${minutes ? `${minutes}m` : ""}${seconds || (!hours && !minutes) ? `${seconds}s` : ""}`;
}
