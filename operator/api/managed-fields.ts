// What the API server records of who wrote which field when (metadata.managedFields): its own
// clock's time of each manager's newest write, whatever clock the writer has. The watchdog reads a
// heartbeat's age from it (rule 2), and so do the plugin and the soak's observer.
import { toMillis } from "./timestamp.ts";

type Json = Record<string, unknown>;

/**
 * When the API server accepted the newest write of the field at `path` (fieldsV1 keys), from the
 * object's managedFields: the server's own clock, whatever clock the writer has, in whole seconds
 * (the true time is up to a second later).
 */
export function serverWriteTime(object: unknown, path: string[]): number | undefined {
  const entries = (((object as Json).metadata as Json | undefined)?.managedFields as Json[] | undefined) ?? [];
  let newest: number | undefined;
  for (const entry of entries) {
    let fields = entry.fieldsV1 as Json | undefined;
    for (const key of path) fields = (fields?.[key] ?? undefined) as Json | undefined;
    if (fields === undefined) continue;
    const time = toMillis(entry.time);
    if (time !== undefined && (newest === undefined || time > newest)) newest = time;
  }
  return newest;
}

/** Where the sandbox's heartbeat time lives in managedFields. */
export const HEARTBEAT_FIELD = ["f:status", "f:heartbeat", "f:time"];
