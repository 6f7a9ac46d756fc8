// An in-memory stand-in for the API server, for unit tests of the sandbox's I/O shell: one
// AgentRun, merge patches applied as the server applies them, a watch that sees every change, and
// hooks to hold or fail writes. It also plays the operator's part in what the sandbox reads back
// (see reconcile()), unless a test holds it back to play it by hand. Integration tests use the
// real API server and the real operator.
import { ApiError, type Json, type SandboxApi } from "../../../operator/sandbox/api-client.ts";
import { APPROVAL_REQUEST_KEY } from "../../../operator/sandbox/protocol.ts";
import { applyMergePatch } from "../../../operator/watchdog/merge-patch.ts";

type Listener = (type: string, object: Json) => void;

/** The phases in which the phase mirrors what the sandbox reports. */
const ACTIVE = new Set(["Starting", "Planning", "ExecutingTool", "AwaitingReply"]);

const isoSeconds = (ms: number) => `${new Date(ms).toISOString().slice(0, 19)}Z`;

export class FakeApi {
  run: Json;
  /** Every status merge patch the sandbox sent, in order. */
  readonly patches: Json[] = [];
  private readonly listeners = new Set<Listener>();
  private rv = 1;
  private requests = 0;
  /** When set, each write waits for this before it is applied. */
  hold: Promise<void> | undefined;
  /** Errors the next writes fail with, in order. */
  readonly failures: ApiError[] = [];
  /** A server that refuses some content every time: the error for a patch it refuses. */
  refuse: ((patch: any) => ApiError | undefined) | undefined;
  /** Errors the next reads of the run fail with, in order (an API server restarting). */
  readonly readFailures: Error[] = [];
  /** Whether each sandbox write is followed by the operator's reconcile of it (see reconcile()). */
  reconciles = true;

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

  /**
   * The operator's part in what the sandbox reads back, after a write of the current attempt:
   * in an active phase the phase mirrors the state the sandbox reports; entering AwaitingReply
   * opens a new request (a new id, with the question and key of the checkpoint's request);
   * leaving it while the request is still pending withdraws the request.
   */
  private reconcile(): void {
    const status = this.status;
    const heartbeat = status.heartbeat;
    if (!this.reconciles || !heartbeat || heartbeat.attempt !== status.attempt || !ACTIVE.has(status.phase) || heartbeat.state === status.phase) return;
    const now = isoSeconds(Date.now());
    const patch: Json = { phase: heartbeat.state };
    if (heartbeat.state === "AwaitingReply") {
      const asked = status.checkpoint?.data?.[APPROVAL_REQUEST_KEY] ?? {};
      patch.approval = {
        id: `req-${++this.requests}`,
        state: "Pending",
        question: asked.question ?? null,
        requestKey: asked.key ?? null,
        attempt: status.attempt,
        requestedAt: now,
        answer: null,
        reason: null,
        decidedAt: null,
      };
    } else if (status.phase === "AwaitingReply" && status.approval?.state === "Pending") {
      patch.approval = { state: "Withdrawn", decidedAt: now };
    }
    this.operator(patch);
  }

  private apply(patch: Json): Json {
    this.run = applyMergePatch(this.run, patch) as Json;
    (this.run.metadata as Json).resourceVersion = String(++this.rv);
    const copy = structuredClone(this.run);
    for (const listener of this.listeners) listener("MODIFIED", structuredClone(copy));
    return copy;
  }

  /**
   * The CRD's transition rule on status.heartbeat (USAGE_MONOTONIC_RULE): within an attempt, a
   * write may not lower a usage figure the attempt already reported, nor drop one.
   */
  private lowersUsage(patch: Json): ApiError | undefined {
    const old = this.status.heartbeat;
    const next = (applyMergePatch(this.run, patch) as any).status?.heartbeat;
    if (!old?.usage || !next || next.attempt !== old.attempt) return undefined;
    const lowered = ["inputTokens", "outputTokens", "toolCalls", "cost"].filter((f) => {
      if (old.usage[f] === undefined) return false;
      const value = next.usage?.[f];
      return value === undefined || Number(value) < Number(old.usage[f]);
    });
    if (lowered.length === 0) return undefined;
    const message = `AgentRun.watchdog.dev "r" is invalid: status.heartbeat.usage: Invalid value: "object": heartbeat.usage may not go down within an attempt (${lowered.join(", ")})`;
    return new ApiError("PATCH", "/status", 422, { kind: "Status", status: "Failure", reason: "Invalid", code: 422, message }) as ApiError;
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
        const failure = this.failures.shift() ?? this.refuse?.(patch) ?? this.lowersUsage(patch as Json);
        if (failure) throw failure;
        this.patches.push(structuredClone(patch) as Json);
        const written = this.apply(patch as Json) as T;
        this.reconcile();
        return written;
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
