// Formatting shared by the pages: ages as kubectl prints them, times, counters.

/** An age as kubectl prints one (its HumanDuration): 4s, 2m10s, 15m, 3h20m, 2d4h. */
export function humanDuration(ms: number): string {
  const seconds = Math.floor(ms / 1000);
  if (seconds < 0) return "0s";
  if (seconds < 120) return `${seconds}s`;
  const minutes = Math.floor(seconds / 60);
  if (minutes < 10) return seconds % 60 === 0 ? `${minutes}m` : `${minutes}m${seconds % 60}s`;
  if (minutes < 180) return `${minutes}m`;
  const hours = Math.floor(minutes / 60);
  if (hours < 8) return minutes % 60 === 0 ? `${hours}h` : `${hours}h${minutes % 60}m`;
  if (hours < 48) return `${hours}h`;
  if (hours < 24 * 8) return hours % 24 === 0 ? `${Math.floor(hours / 24)}d` : `${Math.floor(hours / 24)}d${hours % 24}h`;
  const days = Math.floor(hours / 24);
  if (days < 365 * 2) return `${days}d`;
  const years = Math.floor(days / 365);
  if (years < 8) return days % 365 === 0 ? `${years}y` : `${years}y${days % 365}d`;
  return `${years}y`;
}

const parsed = new Map<string, number>();
/** Milliseconds since the epoch of an ISO time (cached: the tables parse the same strings every second). */
export function timeOf(iso: string | undefined): number | undefined {
  if (!iso) return undefined;
  let t = parsed.get(iso);
  if (t === undefined) {
    t = Date.parse(iso);
    if (parsed.size > 20_000) parsed.clear();
    parsed.set(iso, t);
  }
  return Number.isNaN(t) ? undefined : t;
}

/** The age of an ISO time at `now`, or "-" when there is none. */
export function ageAt(iso: string | undefined, now: number): string {
  const t = timeOf(iso);
  return t === undefined ? "-" : humanDuration(now - t);
}

const dateTime = new Intl.DateTimeFormat(undefined, {
  year: "numeric",
  month: "short",
  day: "numeric",
  hour: "2-digit",
  minute: "2-digit",
  second: "2-digit",
});

/** A time for people: local date and time. */
export function formatTime(iso: string | undefined): string {
  const t = timeOf(iso);
  return t === undefined ? (iso ?? "-") : dateTime.format(t);
}

/** "1/3" from a count and its limit; "-" when neither is known. */
export function ratio(count: number | undefined, limit: number | undefined): string {
  if (count === undefined && limit === undefined) return "-";
  return limit === undefined ? String(count ?? 0) : `${count ?? 0}/${limit}`;
}
