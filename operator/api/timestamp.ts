// Timestamps are RFC 3339 as both the operator's zod schemas and the API server check them: seconds
// always, at most nine fraction digits (Go keeps no more), and Z or a ±hh:mm offset. The API server
// checks the pattern and, through the date-time format, the calendar; zod checks the same two here.
// A bound on the length keeps every timestamp a sandbox writes small enough to copy (rule 12).

/** The shape of a timestamp, in a syntax JavaScript and the API server's RE2 read alike. */
export const TIMESTAMP_PATTERN =
  "^[0-9]{4}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])T([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9]([.][0-9]{1,9})?(Z|[+-]([01][0-9]|2[0-3]):[0-5][0-9])$";
export const TIMESTAMP_RE = new RegExp(TIMESTAMP_PATTERN);

function isLeap(year: number): boolean {
  return (year % 4 === 0 && year % 100 !== 0) || year % 400 === 0;
}

/** Whether a timestamp that matches the pattern names a real day (no 30 February, no 31 April). */
export function isCalendarDay(text: string): boolean {
  const year = Number(text.slice(0, 4));
  const month = Number(text.slice(5, 7));
  const day = Number(text.slice(8, 10));
  const days = [31, isLeap(year) ? 29 : 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31][month - 1] ?? 0;
  return day >= 1 && day <= days;
}

/** A time the API server wrote (an RFC 3339 string, or a Date from client-node), in ms; undefined when it is none. */
export function toMillis(value: unknown): number | undefined {
  if (value instanceof Date) return value.getTime();
  if (typeof value === "string") {
    const ms = Date.parse(value);
    return Number.isNaN(ms) ? undefined : ms;
  }
  return undefined;
}

/** A time as the API server's metav1.Time holds it: whole seconds, rounded down. */
export const isoSeconds = (ms: number) => new Date(Math.floor(ms / 1000) * 1000).toISOString().replace(".000Z", "Z");
/** Rounded up, so that a wait recorded in whole seconds is never shorter than decided. */
export const isoCeilSeconds = (ms: number) => new Date(Math.ceil(ms / 1000) * 1000).toISOString().replace(".000Z", "Z");
