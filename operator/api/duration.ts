// Durations are Go-style strings ("30s", "5m", "1h30m"), the same syntax the API server's CEL
// `duration()` accepts, so what the CRD admits is exactly what the operator can parse.

/** A positive Go duration: one or more <number><unit> groups, no sign. */
export const DURATION_PATTERN = /^([0-9]+([.][0-9]+)?(ns|us|µs|ms|s|m|h))+$/;

const UNIT_MS: Record<string, number> = {
  ns: 1e-6,
  us: 1e-3,
  µs: 1e-3,
  ms: 1,
  s: 1000,
  m: 60_000,
  h: 3_600_000,
};

/** Milliseconds in a duration string; throws on anything DURATION_PATTERN rejects. */
export function parseDuration(text: string): number {
  if (!DURATION_PATTERN.test(text)) {
    throw new Error(`invalid duration ${JSON.stringify(text)}: use a form such as 30s, 5m or 1h30m`);
  }
  let total = 0;
  for (const match of text.matchAll(/([0-9]+(?:[.][0-9]+)?)(ns|us|µs|ms|s|m|h)/g)) {
    total += Number(match[1]) * (UNIT_MS[match[2] as string] as number);
  }
  return total;
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
