// An in-memory stand-in for the API server, for unit tests of the sandbox's I/O shell: one
// AgentRun, merge patches applied as the server applies them, a watch that sees every change, and
// hooks to hold or fail writes. Integration tests use the real API server.
import type { ApiError, Json, SandboxApi } from "../../../operator/sandbox/api-client.ts";
import { applyMergePatch } from "../../../operator/watchdog/merge-patch.ts";

type Listener = (type: string, object: Json) => void;

export class FakeApi {
  run: Json;
  /** Every status merge patch the sandbox sent, in order. */
  readonly patches: Json[] = [];
  private readonly listeners = new Set<Listener>();
  private rv = 1;
  /** When set, each write waits for this before it is applied. */
  hold: Promise<void> | undefined;
  /** Errors the next writes fail with, in order. */
  readonly failures: ApiError[] = [];
  /** Errors the next reads of the run fail with, in order (an API server restarting). */
  readonly readFailures: Error[] = [];

  constructor(status: Json = {}, spec: Json = {}) {
    this.run = {
      apiVersion: "watchdog.dev/v1alpha1",
      kind: "AgentRun",
      metadata: { name: "r", namespace: "ns", uid: "uid-r", resourceVersion: "1" },
      spec: { template: { spec: { containers: [{ name: "agent" }] } }, ...spec },
      status: { phase: "Starting", attempt: 1, watchdog: { heartbeatTimeout: "4s" }, ...status },
    };
  }

  get status(): any {
    return this.run.status;
  }

  /** The operator's side: changes status and tells the watch. */
  operator(statusPatch: Json): void {
    this.apply({ status: statusPatch });
  }

  private apply(patch: Json): Json {
    this.run = applyMergePatch(this.run, patch) as Json;
    (this.run.metadata as Json).resourceVersion = String(++this.rv);
    const copy = structuredClone(this.run);
    for (const listener of this.listeners) listener("MODIFIED", structuredClone(copy));
    return copy;
  }

  client(): SandboxApi {
    const api: Partial<SandboxApi> = {
      get: async <T>(path: string) => {
        const failure = this.readFailures.shift();
        if (failure) throw failure;
        const run = structuredClone(this.run);
        // The collection, as the watch lists it (by field selector): one item, the list's version.
        if (path.endsWith("/agentruns")) return { metadata: { resourceVersion: String(this.rv) }, items: [run] } as T;
        return run as T;
      },
      mergePatch: async <T>(path: string, patch: unknown) => {
        if (!path.endsWith("/status")) throw new Error(`unexpected write to ${path}`);
        const hold = this.hold;
        if (hold) await hold;
        const failure = this.failures.shift();
        if (failure) throw failure;
        this.patches.push(structuredClone(patch) as Json);
        return this.apply(patch as Json) as T;
      },
      watch: async (_path, _query, onEvent) => {
        this.listeners.add(onEvent);
        const abort = new AbortController();
        abort.signal.addEventListener("abort", () => this.listeners.delete(onEvent));
        return abort;
      },
    };
    return api as SandboxApi;
  }
}
