// Stable names for tool calls. A replacement sandbox must recognise a call it (or an earlier
// attempt) already made, so the idempotency key is derived only from things that are the same
// when the agent replays its work from the last checkpoint: the run, the step in progress, the
// position of the call within that step, the tool and its arguments. Nothing random, no clock.
import { createHash } from "node:crypto";

const sha256 = (text: string) => createHash("sha256").update(text).digest("hex");

/** How many hex digits of the arguments' sha256 are kept: short enough to read, 64 bits wide. */
export const ARGS_HASH_LENGTH = 16;

const isPlainObject = (value: unknown): value is Record<string, unknown> =>
  typeof value === "object" && value !== null && !Array.isArray(value);

/**
 * JSON with object keys sorted at every depth, so that `{a, b}` and `{b, a}` hash alike. Values
 * are reduced exactly as JSON.stringify reduces them (toJSON, undefined members dropped, NaN to
 * null), because JSON is what a replay compares against; bigints become decimal strings.
 */
export function canonicalJson(value: unknown): string {
  const text = JSON.stringify(value, (_key, v: unknown) => {
    if (typeof v === "bigint") return v.toString();
    if (!isPlainObject(v)) return v;
    const sorted: Record<string, unknown> = {};
    for (const key of Object.keys(v).sort()) sorted[key] = v[key];
    return sorted;
  });
  return text ?? "null"; // undefined and functions have no JSON form; treat them as "no arguments"
}

/** Short hex sha256 of the canonical JSON of a call's arguments. */
export function argsHash(args: unknown): string {
  return sha256(canonicalJson(args)).slice(0, ARGS_HASH_LENGTH);
}

export interface CallIdentity {
  /** metadata.uid of the AgentRun: a run recreated under the same name gets new keys. */
  runUid: string;
  /** The step in progress: the one after the last committed checkpoint. */
  step: number;
  /** 0-based position of the call among the calls made in this step. */
  index: number;
  name: string;
  argsHash: string;
}

/** The key handed to a tool so that the service behind it can recognise a repeated request. */
export function idempotencyKey(call: CallIdentity): string {
  return sha256(`${call.runUid}/${call.step}/${call.index}/${call.name}/${call.argsHash}`);
}
