// A run's trace, named from its uid alone (W3C Trace Context ids): every replica and every restart
// of the operator names the same trace and the same spans, so a failed-over operator continues the
// trace its predecessor began, and an attempt's pod is told its span's id before that span exists.
import { createHash } from "node:crypto";

/** The first `hexChars` of sha256(text); never all zeros, which Trace Context calls invalid. */
function derivedId(text: string, hexChars: number): string {
  const hex = createHash("sha256").update(text).digest("hex").slice(0, hexChars);
  return /^0+$/.test(hex) ? `${hex.slice(0, -1)}1` : hex;
}

/** The trace of run `uid`: 32 hex characters. */
export const runTraceId = (uid: string): string => derivedId(`agentrun/${uid}`, 32);
/** The run's root span. */
export const runSpanId = (uid: string): string => derivedId(`agentrun/${uid}/run`, 16);
/** The span of attempt `attempt`, the parent of everything its sandbox traces. */
export const attemptSpanId = (uid: string, attempt: number): string => derivedId(`agentrun/${uid}/attempt/${attempt}`, 16);
/** A wait of the run that began at `startedAt` (a transition's time, unique per run). */
export const waitSpanId = (uid: string, kind: string, startedAt: string): string => derivedId(`agentrun/${uid}/wait/${kind}/${startedAt}`, 16);
/** The wait for the answer to approval request `id`. */
export const approvalSpanId = (uid: string, id: string): string => derivedId(`agentrun/${uid}/approval/${id}`, 16);

/** The `traceparent` of attempt `attempt`'s span, sampled: what its sandbox pod gets as TRACEPARENT. */
export function attemptTraceparent(uid: string, attempt: number): string {
  return `00-${runTraceId(uid)}-${attemptSpanId(uid, attempt)}-01`;
}
