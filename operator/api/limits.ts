// Size limits of the sandbox protocol. The API server stores an object only up to etcd's request
// limit (1.5 MiB by default); a sandbox that filled its run's status up to that limit would leave
// no room for the operator's next write (a kill's record, a long answer, a new transition) and
// wedge the run. So the sandbox's own part of status is bounded well below it: the SDKs refuse,
// at the call, a checkpoint that would not fit, and the operator treats a status whose sandbox
// part is larger as a broken sandbox (SandboxReportValid False, reason SandboxReportTooLarge).

/** The largest checkpoint (status.checkpoint as JSON, UTF-8 bytes) a sandbox may write. */
export const MAX_CHECKPOINT_BYTES = 256 * 1024;

/**
 * The largest sandbox part of status (heartbeat, toolCalls and checkpoint together, as JSON,
 * UTF-8 bytes). With the spec's and the operator's own parts, the object stays well under etcd's
 * 1.5 MiB, managedFields included.
 */
export const MAX_SANDBOX_STATUS_BYTES = 512 * 1024;

const utf8 = new TextEncoder();

/** UTF-8 bytes of a value as JSON: what the API server stores of it. */
export function jsonBytes(value: unknown): number {
  return value === undefined ? 0 : utf8.encode(JSON.stringify(value)).length;
}

/**
 * `text` cut to at most `maxBytes` UTF-8 bytes, at a code point boundary: where the API limits a
 * field by bytes (an Event's note: 1 kB), a cut by characters would leave non-ASCII text too long,
 * and the whole write refused.
 */
export function cutToBytes(text: string, maxBytes: number): string {
  if (utf8.encode(text).length <= maxBytes) return text;
  let bytes = 0;
  let out = "";
  for (const point of text) {
    const size = utf8.encode(point).length;
    if (bytes + size > maxBytes) break;
    bytes += size;
    out += point;
  }
  return out;
}

/**
 * `text` cut to at most `max` characters as the API server counts them (code points), never inside
 * a surrogate pair: a lone half would be stored as U+FFFD, differ from what the operator computes
 * next time, and be written again at every decision.
 */
export function cutToCodePoints(text: string, max: number): string {
  if (text.length <= max) return text;
  const points = Array.from(text);
  return points.length > max ? points.slice(0, max).join("") : text;
}
