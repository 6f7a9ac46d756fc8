// The replicas' writes to the runs, as the API server saw them: its audit log records every request
// of the ServiceAccounts the replicas run as (hack/control-plane.sh's audit policy, at Metadata
// level). Followed as it grows, a few seconds at a time, and only the writes the checker needs are
// kept (create, update, patch and delete of the soak namespace's AgentRuns and pods), so that the
// soak's memory does not grow with the log. The log's file is held open: when the API server
// rotates it, the rest of the old file is read before the new one.
import { closeSync, fstatSync, openSync, readSync, statSync } from "node:fs";
import { join } from "node:path";
import { StringDecoder } from "node:string_decoder";
import { auditedRequest } from "../bench/lib.ts";
import type { WriteRecord } from "./record.ts";

const CHUNK_BYTES = 1 << 20;
const WRITE_VERBS = new Set(["create", "update", "patch", "delete"]);
const RUN_RESOURCES = /^(agentruns|pods)(\/|$)/;

/** Where the control plane of `kubeconfig` (hack/control-plane.sh's) writes its audit log. */
export const auditLogOf = (kubeconfig: string) => join(kubeconfig, "..", "logs", "audit.log");

export class ReplicaWrites {
  readonly writes: WriteRecord[] = [];
  /** How often the API server rotated its log while it was followed. */
  rotations = 0;
  private fd: number;
  private offset: number;
  private rest = "";
  private decoder = new StringDecoder("utf8");
  private readonly path: string;
  private readonly namespace: string;
  private readonly users: ReadonlySet<string>;

  /** Follows the log at `path` from its end, for the writes of `users` in `namespace`. */
  constructor(path: string, namespace: string, users: Iterable<string>) {
    this.path = path;
    this.namespace = namespace;
    this.users = new Set(users);
    try {
      this.fd = openSync(path, "r");
    } catch {
      throw new Error(`no audit log at ${path}: restart the control plane (hack/control-plane.sh down, then up) so that its API server writes one`);
    }
    this.offset = fstatSync(this.fd).size;
  }

  /** Reads what the log gained since the last call. */
  poll(): void {
    this.drain();
    let current: ReturnType<typeof statSync>;
    try {
      current = statSync(this.path);
    } catch {
      return; // renamed, the new one not made yet: next time
    }
    if (current.ino !== fstatSync(this.fd).ino) {
      // Rotated: what the old file held is read above; the new one from its start.
      closeSync(this.fd);
      this.fd = openSync(this.path, "r");
      this.offset = 0;
      this.rest = "";
      this.decoder = new StringDecoder("utf8");
      this.rotations++;
      this.drain();
    } else if (current.size < this.offset) {
      this.offset = 0; // truncated in place
      this.rest = "";
      this.drain();
    }
  }

  close(): void {
    closeSync(this.fd);
  }

  private drain(): void {
    const buffer = Buffer.alloc(CHUNK_BYTES);
    for (;;) {
      const n = readSync(this.fd, buffer, 0, CHUNK_BYTES, this.offset);
      if (n === 0) return;
      this.offset += n;
      const lines = (this.rest + this.decoder.write(buffer.subarray(0, n))).split("\n");
      this.rest = lines.pop() ?? "";
      for (const line of lines) this.take(line);
    }
  }

  private take(line: string): void {
    // Most lines are other namespaces' or other users': a look before the parse.
    if (!line.includes(`"${this.namespace}"`)) return;
    const request = auditedRequest(line);
    if (!request || !this.users.has(request.user) || !WRITE_VERBS.has(request.verb)) return;
    if (request.namespace !== this.namespace || !request.name || !RUN_RESOURCES.test(request.resource)) return;
    this.writes.push({ user: request.user, verb: request.verb, resource: request.resource, name: request.name, at: request.at, code: request.code });
  }
}
