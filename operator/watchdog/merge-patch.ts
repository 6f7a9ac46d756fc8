// JSON merge patches (RFC 7386), which is how both the operator and the sandbox write status:
// nested objects merge member by member, null removes a member, arrays are replaced whole.

import { isDeepStrictEqual } from "node:util";

type Json = Record<string, unknown>;

const isObject = (v: unknown): v is Json => typeof v === "object" && v !== null && !Array.isArray(v);

/** The merge patch that turns `before` into `after`, or undefined when they are equal as JSON. */
export function mergePatchDiff(before: unknown, after: unknown): unknown {
  if (isObject(before) && isObject(after)) {
    const patch: Json = {};
    for (const key of new Set([...Object.keys(before), ...Object.keys(after)])) {
      if (after[key] === undefined) {
        if (before[key] !== undefined) patch[key] = null;
        continue;
      }
      if (before[key] === undefined) {
        patch[key] = after[key];
        continue;
      }
      const child = mergePatchDiff(before[key], after[key]);
      if (child !== undefined) patch[key] = child;
    }
    return Object.keys(patch).length ? patch : undefined;
  }
  return isDeepStrictEqual(before, after) ? undefined : after;
}

/** Applies a merge patch, as the API server does. */
export function applyMergePatch(target: unknown, patch: unknown): unknown {
  if (!isObject(patch)) return patch;
  const result: Json = isObject(target) ? { ...target } : {};
  for (const [key, value] of Object.entries(patch)) {
    if (value === null) delete result[key];
    else result[key] = applyMergePatch(result[key], value);
  }
  return result;
}
