// The sandbox's I/O shell against an in-memory API (fake-api.ts) and fake timers: what it writes,
// in which order, when, and when it stops writing.
import { mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import { z } from "zod";
import { MAX_CHECKPOINT_BYTES, MAX_SANDBOX_STATUS_BYTES } from "../../../operator/api/limits.ts";
import { ApiError } from "../../../operator/sandbox/api-client.ts";
import { createLogger } from "../../../operator/log.ts";
import { BudgetExhaustedError, CheckpointTooLargeError, EXIT_CODES, FencedError, ToolError, UnconfirmedSideEffectError } from "../../../operator/sandbox/errors.ts";
import { argsHash, idempotencyKey } from "../../../operator/sandbox/keys.ts";
import { APPROVAL_REQUEST_KEY } from "../../../operator/sandbox/protocol.ts";
import { runAgent } from "../../../operator/sandbox/runner.ts";
import { Sandbox, type SandboxOptions } from "../../../operator/sandbox/sandbox.ts";
import { FakeApi } from "./fake-api.ts";

const S = 1000;
const T0 = Date.parse("2026-11-30T12:00:00Z");

let sandboxes: Sandbox[] = [];

beforeEach(() => {
  vi.useFakeTimers({ now: T0 });
});

afterEach(() => {
  for (const s of sandboxes) s.abandon();
  sandboxes = [];
  vi.useRealTimers();
});

async function start(api: FakeApi, options: Partial<SandboxOptions> = {}): Promise<Sandbox> {
  const sandbox = await Sandbox.start({
    client: api.client(),
    identity: { runName: "r", namespace: "ns", attempt: 1 },
    logger: createLogger("silent"),
    exit: () => {},
    ...options,
  });
  sandboxes.push(sandbox);
  return sandbox;
}

const heartbeatOnly = (patch: any) => Object.keys(patch.status).length === 1 && patch.status.heartbeat && !("activity" in patch.status.heartbeat);

describe("reporting in", () => {
  it("first says it is alive and planning, for its own attempt, with zero usage, and clears an earlier attempt's activity and usage", async () => {
    const earlier = { time: "2026-11-30T11:00:00Z", attempt: 1, state: "Planning", activity: { kind: "text", time: "2026-11-30T11:00:00Z" } };
    const api = new FakeApi({ attempt: 2, heartbeat: { ...earlier, usage: { inputTokens: 9000, outputTokens: 900, cost: "1.25", toolCalls: 4, model: "m" } } });
    await start(api, { identity: { runName: "r", namespace: "ns", attempt: 2 } });
    expect(api.patches).toHaveLength(1);
    expect(api.patches[0]).toEqual({
      status: {
        heartbeat: {
          time: new Date(T0).toISOString(),
          attempt: 2,
          state: "Planning",
          activity: null,
          usage: { inputTokens: 0, outputTokens: 0, toolCalls: 0, cost: null, model: null },
        },
      },
    });
    expect(api.status.heartbeat.activity).toBeUndefined();
    expect(api.status.heartbeat.usage).toEqual({ inputTokens: 0, outputTokens: 0, toolCalls: 0 });
  });

  it("goes on from what its own attempt already reported, when the same attempt starts again", async () => {
    const earlier = { time: "2026-11-30T11:00:00Z", attempt: 1, state: "Planning", usage: { inputTokens: 9000, outputTokens: 900, cost: "1.25", toolCalls: 4, model: "m" } };
    const api = new FakeApi({ heartbeat: earlier });
    const sandbox = await start(api);
    expect(api.status.heartbeat.usage).toEqual(earlier.usage);
    sandbox.recordUsage({ inputTokens: 1000, cost: "0.75" });
    expect(sandbox.usage).toEqual({ inputTokens: 10_000, outputTokens: 900, cost: "2", toolCalls: 4, model: "m" });
  });

  it("waits out an API server that cannot be reached at start, and gives up after its start deadline", async () => {
    const api = new FakeApi();
    api.readFailures.push(new TypeError("fetch failed"), new ApiError("GET", "/run", 503, { message: "etcd is down" }));
    const starting = start(api);
    await vi.advanceTimersByTimeAsync(1000);
    await starting;
    expect(api.patches).toHaveLength(1);

    const down = new FakeApi();
    for (let i = 0; i < 100; i++) down.readFailures.push(new TypeError("fetch failed"));
    const failing = start(down, { startDeadlineMs: 10_000 }).catch((err: unknown) => err);
    await vi.advanceTimersByTimeAsync(10_000);
    expect(String(await failing)).toContain("fetch failed");
    expect(down.readFailures.length).toBeGreaterThan(90);
  });

  it("waits out a 403 at start (its RoleBinding not yet seen by the authorizer), up to its start deadline", async () => {
    const api = new FakeApi();
    api.readFailures.push(new ApiError("GET", "/run", 403, { message: "forbidden" }), new ApiError("GET", "/run", 403, { message: "forbidden" }));
    const starting = start(api);
    await vi.advanceTimersByTimeAsync(1000);
    await starting;
    expect(api.patches).toHaveLength(1);

    const refused = new FakeApi();
    for (let i = 0; i < 100; i++) refused.readFailures.push(new ApiError("GET", "/run", 403, { message: "forbidden" }));
    const failing = start(refused, { startDeadlineMs: 5_000 }).catch((err: unknown) => err);
    await vi.advanceTimersByTimeAsync(5_000);
    expect(String(await failing)).toContain("403");
  });

  it("says why it cannot read its run while it waits: the first refusal, then a line per 10 s", async () => {
    const lines: { level: string; fields: Record<string, unknown>; msg?: string }[] = [];
    const recorder = (level: string) => (fields: object | string, msg?: string) => lines.push(typeof fields === "string" ? { level, fields: {}, msg: fields } : { level, fields: fields as Record<string, unknown>, msg });
    const logger = { debug: recorder("debug"), info: recorder("info"), warn: recorder("warn"), error: recorder("error"), child: () => logger };
    const api = new FakeApi();
    for (let i = 0; i < 8; i++) api.readFailures.push(new ApiError("GET", "/run", 401, { message: "Unauthorized" }));
    const starting = start(api, { logger });
    await vi.advanceTimersByTimeAsync(30_000);
    await starting;
    const waits = lines.filter((l) => l.msg === "cannot read the run yet; trying again");
    // 8 refusals at 0, 0.2, 0.6, 1.4, 3, 6.2, 11.2 and 16.2 s (200 ms doubling to 5 s): reported
    // at the first and at the first 10 s later.
    expect(waits.map((l) => l.fields.tries)).toEqual([1, 7]);
    expect(waits[0]?.fields).toMatchObject({ code: 401 });
    expect(String(waits[0]?.fields.error)).toContain("401");
    expect(lines.find((l) => l.msg === "read the run")?.fields).toMatchObject({ tries: 9 });
  });

  it("refuses to start for an attempt that is already over", async () => {
    const api = new FakeApi({ attempt: 2 });
    await expect(start(api)).rejects.toThrow(FencedError);
    expect(api.patches).toHaveLength(0);
  });
});

describe("heartbeats", () => {
  it("writes heartbeat-only patches at most once per timeout/4 while the agent makes progress", async () => {
    const api = new FakeApi(); // heartbeatTimeout 4s: interval 1s
    const sandbox = await start(api);
    for (let i = 0; i < 100; i++) {
      sandbox.progress();
      await vi.advanceTimersByTimeAsync(100);
    }
    const beats = api.patches.filter(heartbeatOnly);
    expect(beats).toHaveLength(10);
    expect(sandbox.stats()).toMatchObject({ writes: 11, heartbeatWrites: 10, heartbeatIntervalMs: 1000, heartbeatTimeoutMs: 4000 });
    const times = beats.map((p: any) => Date.parse(p.status.heartbeat.time));
    for (let i = 1; i < times.length; i++) expect(times[i]! - times[i - 1]!).toBeGreaterThanOrEqual(1000);
  });

  it("sends state changes, tool records and activity at once, and they count as heartbeats", async () => {
    const api = new FakeApi();
    const sandbox = await start(api);
    await vi.advanceTimersByTimeAsync(900);
    void sandbox.say("hello");
    await vi.advanceTimersByTimeAsync(0);
    expect(api.patches.at(-1)).toMatchObject({ status: { heartbeat: { activity: { kind: "text" } } } });
    // The next heartbeat-only write is an interval after the activity write, not after the first.
    await vi.advanceTimersByTimeAsync(900);
    expect(api.patches.filter(heartbeatOnly)).toHaveLength(0);
    await vi.advanceTimersByTimeAsync(200);
    expect(api.patches.filter(heartbeatOnly)).toHaveLength(1);
  });

  it("stops when the agent makes no progress for longer than the timeout, and resumes when it does", async () => {
    const api = new FakeApi();
    const sandbox = await start(api);
    await vi.advanceTimersByTimeAsync(10 * S);
    const beats = api.patches.filter(heartbeatOnly).map((p: any) => Date.parse(p.status.heartbeat.time) - T0);
    expect(beats).toEqual([1000, 2000, 3000, 4000]); // no progress after 4 s: nothing more
    expect(Date.parse(api.status.heartbeat.time)).toBe(T0 + 4 * S);
    sandbox.progress();
    await vi.advanceTimersByTimeAsync(1100);
    expect(Date.parse(api.status.heartbeat.time)).toBeGreaterThan(T0 + 10 * S);
  });

  it("keeps going while the agent waits on the SDK for input", async () => {
    const api = new FakeApi();
    const sandbox = await start(api);
    void sandbox.nextNudge().catch(() => {});
    await vi.advanceTimersByTimeAsync(20 * S);
    expect(api.patches.filter(heartbeatOnly).length).toBeGreaterThanOrEqual(19);
  });

  it("follows a change of the heartbeat timeout", async () => {
    const api = new FakeApi();
    const sandbox = await start(api);
    api.operator({ watchdog: { heartbeatTimeout: "40s" } });
    expect(sandbox.stats().heartbeatIntervalMs).toBe(10 * S);
  });

  it("does not spin on a huge heartbeat timeout, and still heartbeats every 75 s", async () => {
    const api = new FakeApi({ watchdog: { heartbeatTimeout: "100000h" } });
    const sandbox = await start(api);
    expect(sandbox.stats()).toMatchObject({ heartbeatTimeoutMs: 100_000 * 3600 * S, heartbeatIntervalMs: 75 * S });
    const timers = vi.spyOn(globalThis, "setTimeout");
    for (let i = 0; i < 80; i++) {
      sandbox.progress();
      await vi.advanceTimersByTimeAsync(S);
    }
    // A timer past 2^31-1 ms fires after 1 ms: thousands of wake-ups in 80 s. A few is all it takes.
    expect(timers.mock.calls.length).toBeLessThan(10);
    expect(api.patches.filter(heartbeatOnly).map((p: any) => Date.parse(p.status.heartbeat.time) - T0)).toEqual([75 * S]);
  });

  it("heartbeats by a new, shorter timeout at once, not after the old interval", async () => {
    const api = new FakeApi({ watchdog: { heartbeatTimeout: "10m" } }); // interval 75 s
    const sandbox = await start(api);
    sandbox.progress();
    await vi.advanceTimersByTimeAsync(5 * S);
    expect(api.patches.filter(heartbeatOnly)).toHaveLength(0);
    api.operator({ watchdog: { heartbeatTimeout: "4s" } }); // interval 1 s, due since the first write
    sandbox.progress();
    await vi.advanceTimersByTimeAsync(10);
    expect(api.patches.filter(heartbeatOnly).map((p: any) => Date.parse(p.status.heartbeat.time) - T0)).toEqual([5 * S]);
    await vi.advanceTimersByTimeAsync(S);
    expect(api.patches.filter(heartbeatOnly)).toHaveLength(2);
  });

  it("retries a failed write", async () => {
    const api = new FakeApi();
    const sandbox = await start(api);
    api.failures.push(new ApiError("PATCH", "/status", 503, { message: "unavailable" }));
    const said = sandbox.say("hello");
    await vi.advanceTimersByTimeAsync(1000);
    await said;
    expect(sandbox.stats().failedWrites).toBe(1);
    expect(api.status.heartbeat.activity.kind).toBe("text");
  });

  it("waits out the Retry-After of a 429 before it writes again", async () => {
    const api = new FakeApi();
    const sandbox = await start(api);
    api.failures.push(new ApiError("PATCH", "/status", 429, { reason: "TooManyRequests", message: "too many requests" }, "3"));
    const said = sandbox.say("hello");
    await vi.advanceTimersByTimeAsync(2900);
    expect(api.patches).toHaveLength(1); // only the first write of all
    await vi.advanceTimersByTimeAsync(200);
    await said;
    expect(api.patches).toHaveLength(2);
    expect(api.status.heartbeat.activity.kind).toBe("text");
  });
});

describe("a pod the run does not name yet", () => {
  it("keeps its writes until the run names it, for as long as a failover and a storm of conflicts can take", async () => {
    // Admission refuses a sandbox whose pod status.podName does not name yet; the next leader may
    // name it most of a minute after it started (the Lease's duration, then its own retries).
    const notNamed = new ApiError("PATCH", "/status", 403, { reason: "Forbidden", message: "ValidatingAdmissionPolicy 'fencing' with binding 'fencing' denied request: pod r-1 is not the current sandbox of AgentRun r (status.podName is unset)" });
    const api = new FakeApi();
    const sandbox = await start(api);
    for (let i = 0; i < 30; i++) api.failures.push(notNamed);
    let outcome: unknown = "pending";
    sandbox.saveCheckpoint(1, { done: "step 1" }).then(
      () => (outcome = "saved"),
      (err: unknown) => (outcome = err),
    );
    await vi.advanceTimersByTimeAsync(75 * S);
    expect(api.failures.length).toBeLessThan(30); // it was refused, and kept trying
    expect(outcome).toBe("pending");
    api.failures.length = 0; // named
    await vi.advanceTimersByTimeAsync(6 * S);
    expect(outcome).toBe("saved");
    expect(api.status.checkpoint).toEqual({ step: 1, data: { done: "step 1" } });
  });
});

describe("an API server whose authorizer has not loaded the roles yet", () => {
  it("tries its first writes again after RBAC's 403, as after any refusal that is not about what they carry", async () => {
    // Just after a restart the API server refuses everyone until its authorizer has the roles.
    const rbac = new ApiError("PATCH", "/status", 403, {
      reason: "Forbidden",
      message: 'agentruns.watchdog.dev "r" is forbidden: User "system:serviceaccount:ns:r-sandbox" cannot patch resource "agentruns/status": RBAC: clusterrole.rbac.authorization.k8s.io "system:basic-user" not found',
    });
    const api = new FakeApi();
    for (let i = 0; i < 4; i++) api.failures.push(rbac);
    const starting = start(api).then(
      () => "started",
      (err: unknown) => err,
    );
    await vi.advanceTimersByTimeAsync(10 * S);
    expect(await starting).toBe("started");
    expect(api.status.heartbeat).toMatchObject({ attempt: 1, state: "Planning" });
    // A policy's refusal of what a write carries stays a verdict.
    const sandbox = sandboxes[0]!;
    api.refuse = (patch) => (patch.status.checkpoint ? new ApiError("PATCH", "/status", 403, { reason: "Forbidden", message: "ValidatingAdmissionPolicy 'fencing' with binding 'fencing' denied request: a sandbox may only write status.heartbeat" }) : undefined);
    await expect(sandbox.saveCheckpoint(1, { x: 1 })).rejects.toThrow("ValidatingAdmissionPolicy");
  });
});

describe("writes the server refuses for good", () => {
  const refusals = [
    ["422 Invalid", new ApiError("PATCH", "/status", 422, { kind: "Status", reason: "Invalid", message: "status.checkpoint.data: Invalid value" })],
    ["etcd's too-large 500", new ApiError("PATCH", "/status", 500, { kind: "Status", reason: "InternalError", message: "etcdserver: request is too large" })],
  ] as const;

  it.each(refusals)("fail the call that saved the checkpoint (%s), keep the last one, and heartbeats go on", async (_what, refusal) => {
    const api = new FakeApi();
    api.refuse = (patch) => (patch.status.checkpoint?.data?.big ? refusal : undefined); // every time
    const sandbox = await start(api);
    await sandbox.saveCheckpoint(1, { small: true });
    let outcome: unknown = "pending";
    sandbox.saveCheckpoint(2, { big: "x".repeat(1000) }).then(
      () => (outcome = "saved"),
      (err: unknown) => (outcome = err),
    );
    await vi.advanceTimersByTimeAsync(100);
    expect(outcome).toBe(refusal);
    expect(String(outcome)).toContain(`${refusal.code} ${refusal.reason} ${(refusal.body as { message: string }).message}`);
    expect(sandbox.loadCheckpoint()).toEqual({ step: 1, data: { small: true } });
    expect(sandbox.step).toBe(2);
    const written = api.patches.length;
    for (let i = 0; i < 5; i++) {
      sandbox.progress();
      await vi.advanceTimersByTimeAsync(S);
    }
    expect(api.patches.slice(written).filter(heartbeatOnly).length).toBeGreaterThanOrEqual(4);
    expect(api.patches.some((p: any) => p.status.checkpoint?.data?.big)).toBe(false);
    expect(api.status.checkpoint).toEqual({ step: 1, data: { small: true } });
  });

  it("fail a tool call whose Started record is refused, without running it, and the next calls are recorded", async () => {
    const api = new FakeApi();
    const sandbox = await start(api);
    api.failures.push(new ApiError("PATCH", "/status", 422, { reason: "Invalid", message: "status.toolCalls[0].name: Too long" }));
    const fn = vi.fn();
    await expect(sandbox.tool("x".repeat(300), {}, fn)).rejects.toThrow("422 Invalid status.toolCalls[0].name: Too long");
    expect(fn).not.toHaveBeenCalled();
    const next = await sandbox.tool("lookup", { q: 1 }, () => "found", { idempotent: true });
    expect(next.ok).toBe(true);
    // Never a Started record of a call that never ran: the watchdog would take it for one in flight.
    expect(api.status.toolCalls.map((c: any) => [c.name, c.state])).toEqual([["lookup", "Succeeded"]]);
    expect(sandbox.calls.map((c) => c.name)).toEqual(["lookup"]);
  });
});

describe("checkpoint size", () => {
  it("refuses a checkpoint over the limit at the call: nothing is written, the last one stands, and heartbeats go on", async () => {
    const api = new FakeApi();
    const sandbox = await start(api);
    await sandbox.saveCheckpoint(1, { notes: ["a"] });
    const written = api.patches.length;
    const data = { notes: ["a", "x".repeat(MAX_CHECKPOINT_BYTES)] };
    let thrown: unknown;
    try {
      void sandbox.saveCheckpoint(2, data);
    } catch (err) {
      thrown = err; // synchronously, at the call
    }
    expect(thrown).toBeInstanceOf(CheckpointTooLargeError);
    const bytes = Buffer.byteLength(JSON.stringify({ step: 2, data }));
    expect((thrown as Error).message).toBe(`the checkpoint of step 2 is ${bytes} bytes as JSON, over the limit of ${MAX_CHECKPOINT_BYTES} bytes; nothing was written`);
    await vi.advanceTimersByTimeAsync(10);
    expect(api.patches).toHaveLength(written);
    expect(sandbox.loadCheckpoint()).toEqual({ step: 1, data: { notes: ["a"] } });
    expect(sandbox.step).toBe(2);
    for (let i = 0; i < 3; i++) {
      sandbox.progress();
      await vi.advanceTimersByTimeAsync(S);
    }
    expect(api.patches.slice(written).filter(heartbeatOnly)).toHaveLength(3);
  });

  it("refuses a checkpoint that would make the sandbox's part of status too large with its tool records", async () => {
    const api = new FakeApi();
    const sandbox = await start(api, { maxToolCalls: 40 });
    for (let i = 0; i < 40; i++) await sandbox.tool("read", { i }, () => "r".repeat(9000), { idempotent: true }); // 8 KiB each, saved
    const data = "x".repeat(200 * 1024);
    expect(() => sandbox.saveCheckpoint(1, data)).toThrow(CheckpointTooLargeError);
    expect(() => sandbox.saveCheckpoint(1, data)).toThrow(`over the limit of ${MAX_SANDBOX_STATUS_BYTES} bytes`);
    expect(api.status.checkpoint).toBeUndefined();
    await sandbox.saveCheckpoint(1, "x".repeat(100 * 1024)); // what fits beside them is written
    expect(api.status.checkpoint.step).toBe(1);
  });

  it("counts the question the SDK wraps around the data when it asks for approval", async () => {
    const api = new FakeApi({ phase: "Planning" });
    const sandbox = await start(api);
    const data = "x".repeat(MAX_CHECKPOINT_BYTES - 100);
    let outcome: unknown;
    sandbox.awaitApproval("Deploy?", { step: 1, data }).then(
      (answer) => (outcome = answer),
      (err: unknown) => (outcome = err),
    );
    await vi.advanceTimersByTimeAsync(10);
    expect(outcome).toBeInstanceOf(CheckpointTooLargeError);
    expect(api.patches.some((p: any) => p.status.heartbeat.state === "AwaitingReply")).toBe(false);
    expect(sandbox.loadCheckpoint()).toBeUndefined();
  });
});

describe("tool calls", () => {
  it("commits Started before the tool runs, then Succeeded with the result", async () => {
    const api = new FakeApi();
    const sandbox = await start(api);
    let release!: () => void;
    api.hold = new Promise<void>((r) => (release = r));
    let ranWith: unknown;
    const fn = vi.fn((_args: { q: string }, ctx: { idempotencyKey: string }) => {
      ranWith = structuredClone(api.status.toolCalls);
      return { answer: 42, key: ctx.idempotencyKey };
    });
    const outcome = sandbox.tool("search", { q: "x" }, fn, { idempotent: true });
    await vi.advanceTimersByTimeAsync(50);
    expect(fn).not.toHaveBeenCalled(); // the Started write is not yet acknowledged
    api.hold = undefined;
    release();
    const result = await outcome;
    expect(ranWith).toEqual([expect.objectContaining({ name: "search", state: "Started", attempt: 1, idempotent: true })]);
    expect(result).toMatchObject({ ok: true, value: { answer: 42 }, replayed: false });
    const [record] = api.status.toolCalls;
    expect(record).toMatchObject({ state: "Succeeded", idempotencyKey: result.idempotencyKey, result: JSON.stringify({ answer: 42, key: result.idempotencyKey }) });
    expect(api.status.heartbeat).toMatchObject({ state: "Planning", activity: { kind: "toolResult" } });
    expect(api.patches.map((p: any) => p.status.heartbeat.state)).toContain("ExecutingTool");
  });

  it("records a failure with status and Retry-After", async () => {
    const api = new FakeApi();
    const sandbox = await start(api);
    const outcome = await sandbox.tool("llm", { p: 1 }, () => {
      throw Object.assign(new Error("Too Many Requests"), { status: 429, headers: { "retry-after": "30" } });
    });
    expect(outcome).toMatchObject({ ok: false, error: { kind: "error", httpStatus: 429, retryAfterSeconds: 30 } });
    expect(api.status.toolCalls[0]).toMatchObject({ state: "Failed", error: { message: "Too Many Requests", httpStatus: 429, retryAfterSeconds: 30 } });
  });

  it("hands invalid arguments back as a readable failure without running the tool", async () => {
    const api = new FakeApi();
    const sandbox = await start(api);
    const fn = vi.fn();
    const schema = z.strictObject({ to: z.email(), subject: z.string() });
    const outcome = await sandbox.tool("send_email", { to: "nobody", subject: 3 } as unknown as z.infer<typeof schema>, fn, { schema });
    expect(fn).not.toHaveBeenCalled();
    expect(outcome.ok).toBe(false);
    if (outcome.ok) return;
    expect(outcome.error.kind).toBe("validation");
    expect(outcome.error.message).toContain("invalid arguments for send_email: to: Invalid email address; subject: Invalid input: expected string, received number");
    expect(api.status.toolCalls[0]).toMatchObject({ name: "send_email", state: "Failed", error: { message: outcome.error.message } });
  });

  it("keys calls by step and position: the same call twice in a step gets two keys, a checkpoint starts over", async () => {
    const api = new FakeApi();
    const sandbox = await start(api);
    const a = await sandbox.tool("t", { x: 1 }, () => 1, { idempotent: true });
    const b = await sandbox.tool("t", { x: 1 }, () => 1, { idempotent: true });
    expect(a.idempotencyKey).not.toBe(b.idempotencyKey);
    expect(sandbox.step).toBe(1);
    await sandbox.saveCheckpoint(1, { n: 1 });
    expect(sandbox.step).toBe(2);
    expect(api.status.checkpoint).toEqual({ step: 1, data: { n: 1 } });
    const c = await sandbox.tool("t", { x: 1 }, () => 1, { idempotent: true });
    expect(c.idempotencyKey).not.toBe(a.idempotencyKey);
  });

  it("writes the whole bounded list every time, newest last", async () => {
    const api = new FakeApi();
    const sandbox = await start(api, { maxToolCalls: 5 });
    for (let i = 0; i < 8; i++) await sandbox.tool("t", { i }, () => i, { idempotent: true });
    expect(api.status.toolCalls.map((c: any) => c.result)).toEqual(["3", "4", "5", "6", "7"]);
  });
});

describe("a new attempt replaying the calls of the last one", () => {
  /** Runs attempt 1 until `crashAt`, then starts attempt 2 on the same status. */
  async function secondAttempt(api: FakeApi, first: (s: Sandbox) => Promise<void>): Promise<Sandbox> {
    const one = await start(api);
    await first(one);
    one.abandon();
    api.operator({ attempt: 2, phase: "Starting" });
    return start(api, { identity: { runName: "r", namespace: "ns", attempt: 2 } });
  }

  it("returns the saved result of a call that succeeded, without running it", async () => {
    const api = new FakeApi();
    const two = await secondAttempt(api, async (s) => {
      await s.tool("lookup", { q: "x" }, () => ({ found: "it" }), { idempotent: true });
    });
    const fn = vi.fn();
    const outcome = await two.tool("lookup", { q: "x" }, fn, { idempotent: true });
    expect(fn).not.toHaveBeenCalled();
    expect(outcome).toMatchObject({ ok: true, replayed: true, value: { found: "it" } });
  });

  it("reruns an unfinished idempotent call with the same key", async () => {
    const api = new FakeApi();
    let firstKey = "";
    const two = await secondAttempt(api, async (s) => {
      void s.tool("send", { to: "a" }, (_a, ctx) => {
        firstKey = ctx.idempotencyKey;
        return new Promise(() => {}); // the process dies while the tool runs
      }, { idempotent: true });
      await vi.advanceTimersByTimeAsync(10);
    });
    expect(firstKey).not.toBe("");
    const seen: { key: string; rerun: boolean }[] = [];
    const outcome = await two.tool("send", { to: "a" }, (_a, ctx) => {
      seen.push({ key: ctx.idempotencyKey, rerun: ctx.rerun });
      return "sent";
    }, { idempotent: true });
    expect(seen).toEqual([{ key: firstKey, rerun: true }]);
    expect(outcome).toMatchObject({ ok: true, replayed: false });
    expect(api.status.toolCalls.map((c: any) => [c.attempt, c.state, c.idempotencyKey === firstKey])).toEqual([
      [1, "Started", true],
      [2, "Succeeded", true],
    ]);
  });

  it("refuses an unfinished non-idempotent call", async () => {
    const api = new FakeApi();
    const two = await secondAttempt(api, async (s) => {
      void s.tool("charge", { cents: 100 }, () => new Promise(() => {}), { idempotent: false });
      await vi.advanceTimersByTimeAsync(10);
    });
    const fn = vi.fn();
    await expect(two.tool("charge", { cents: 100 }, fn)).rejects.toThrow(UnconfirmedSideEffectError);
    expect(fn).not.toHaveBeenCalled();
  });

  it("resumes from the checkpoint and shows why the last attempt ended", async () => {
    const api = new FakeApi();
    const two = await secondAttempt(api, async (s) => {
      await s.saveCheckpoint(3, { notes: ["a"] });
    });
    api.operator({ lastFailure: { reason: "PodFailed", message: "exit code 1", time: new Date(T0).toISOString(), attempt: 1 } });
    expect(two.loadCheckpoint()).toEqual({ step: 3, data: { notes: ["a"] } });
    expect(two.step).toBe(4);
    const three = await (async () => {
      two.abandon();
      api.operator({ attempt: 3 });
      return start(api, { identity: { runName: "r", namespace: "ns", attempt: 3 } });
    })();
    expect(three.lastFailure).toMatchObject({ reason: "PodFailed", message: "exit code 1" });
  });
});

describe("nudges", () => {
  it("hands each new nudge to the agent once, and ignores the one standing at start", async () => {
    const api = new FakeApi({ stall: { state: "Fired", nudges: 1, lastNudge: { time: new Date(T0 - 5 * S).toISOString(), message: "old" } } });
    const got: string[] = [];
    const sandbox = await start(api, { onNudge: (n) => got.push(n.message) });
    api.operator({ phase: "Planning" });
    expect(got).toEqual([]);
    api.operator({ stall: { state: "Fired", nudges: 1, lastNudge: { time: new Date(T0 + S).toISOString(), message: "wake up" } } });
    api.operator({ phase: "Planning", reason: null });
    await vi.advanceTimersByTimeAsync(3 * S); // heartbeats: the watch sees the same nudge again and again
    expect(got).toEqual(["wake up"]);
    expect(sandbox.transcript.filter((e) => e.kind === "nudge").map((e) => e.text)).toEqual(["wake up"]);
  });
});

describe("self-fencing", () => {
  it("stops the agent and all writes when the attempt moves on", async () => {
    const api = new FakeApi();
    const fenced = vi.fn();
    const sandbox = await start(api, { onFenced: fenced });
    let toolSignal: AbortSignal | undefined;
    const running = sandbox.tool("slow", {}, (_a, ctx) => {
      toolSignal = ctx.signal;
      return new Promise((resolve) => setTimeout(resolve, 5 * S));
    }, { idempotent: true });
    running.catch(() => {});
    await vi.advanceTimersByTimeAsync(100);
    const writes = api.patches.length;
    api.operator({ attempt: 2, phase: "Queued" });
    expect(fenced).toHaveBeenCalledWith("attempt 1 was superseded by attempt 2");
    expect(sandbox.signal.aborted).toBe(true);
    expect(toolSignal?.aborted).toBe(true);
    expect(sandbox.fenced).toBe("attempt 1 was superseded by attempt 2");
    for (let i = 0; i < 50; i++) {
      sandbox.progress();
      await vi.advanceTimersByTimeAsync(200);
    }
    await expect(running).rejects.toThrow(FencedError);
    expect(api.patches.length).toBe(writes);
    expect(() => sandbox.say("still here?")).toThrow(FencedError);
  });

  it("stops when the operator stops the run", async () => {
    const api = new FakeApi();
    const sandbox = await start(api);
    api.operator({ phase: "NeedsHumanIntervention" });
    expect(sandbox.fenced).toBe("the run is NeedsHumanIntervention");
  });
});

describe("approvals", () => {
  const askedKey = (api: FakeApi): string => api.status.checkpoint.data[APPROVAL_REQUEST_KEY].key;
  const asked = (api: FakeApi) => api.patches.filter((p: any) => p.status.heartbeat.state === "AwaitingReply");
  /** A run an earlier attempt left waiting on "Deploy?" under key k1, and where request req-1 stands. */
  const resumedRun = (approval: Record<string, unknown>) =>
    new FakeApi({
      attempt: 2,
      approval: { id: "req-1", requestKey: "k1", question: "Deploy?", attempt: 1, requestedAt: new Date(T0 - 60 * S).toISOString(), ...approval },
      checkpoint: { step: 1, data: { [APPROVAL_REQUEST_KEY]: { question: "Deploy?", askedAt: new Date(T0 - 61 * S).toISOString(), key: "k1" }, data: { v: 2 } } },
    });
  const startAttempt2 = (api: FakeApi) => start(api, { identity: { runName: "r", namespace: "ns", attempt: 2 } });

  it("asks with a checkpoint and a new key, reports AwaitingReply, and resolves with the answer", async () => {
    const api = new FakeApi({ phase: "Planning" });
    const sandbox = await start(api);
    const answer = sandbox.awaitApproval("Deploy?", { step: 2, data: { v: 2 } });
    await vi.advanceTimersByTimeAsync(0);
    expect(api.status.heartbeat.state).toBe("AwaitingReply");
    expect(api.status.checkpoint).toMatchObject({ step: 2, data: { data: { v: 2 }, [APPROVAL_REQUEST_KEY]: { question: "Deploy?", key: expect.stringMatching(/^[0-9a-f]{32}$/) } } });
    // The operator opened the request with the question and its key.
    expect(api.status.approval).toMatchObject({ id: "req-1", state: "Pending", question: "Deploy?", requestKey: askedKey(api) });
    await vi.advanceTimersByTimeAsync(10 * S);
    api.operator({ approval: { state: "Approved", answer: "go", decidedAt: new Date(T0 + 10 * S).toISOString() } });
    await expect(answer).resolves.toBe("go");
    expect(api.status.heartbeat.state).toBe("Planning");
    expect(sandbox.loadCheckpoint()).toEqual({ step: 2, data: { v: 2 } });
  });

  it("gets its own answer to each of two requests asked and answered within one second", async () => {
    const api = new FakeApi({ phase: "Planning" });
    const sandbox = await start(api);
    const decide = (answer: string) => api.operator({ approval: { state: "Approved", answer, decidedAt: new Date(T0).toISOString() } });

    const first = sandbox.awaitApproval("Deploy?");
    await vi.advanceTimersByTimeAsync(0);
    const firstKey = askedKey(api);
    decide("yes, deploy");
    await expect(first).resolves.toBe("yes, deploy");

    const second = sandbox.awaitApproval("Migrate the database?");
    await vi.advanceTimersByTimeAsync(0);
    expect(askedKey(api)).not.toBe(firstKey);
    expect(api.status.approval).toMatchObject({ id: "req-2", state: "Pending", question: "Migrate the database?", requestedAt: "2026-11-30T12:00:00Z" }); // in whole seconds, as the operator writes it
    decide("yes, migrate");
    await expect(second).resolves.toBe("yes, migrate");
    expect(Date.now() - T0).toBeLessThan(S);
  });

  it("never settles on the decision of another request", async () => {
    const api = new FakeApi({ phase: "Planning" });
    const sandbox = await start(api);
    let settled: unknown;
    const answer = sandbox.awaitApproval("Deploy?").then((a) => (settled = a));
    await vi.advanceTimersByTimeAsync(0);
    const key = askedKey(api);
    const at = new Date(T0).toISOString();
    api.operator({ approval: { id: "req-0", requestKey: "someone-else", state: "Approved", answer: "not yours", decidedAt: at } });
    api.operator({ approval: { id: "req-7", requestKey: key, state: "Approved", answer: "another request's", decidedAt: at } });
    api.operator({ approval: { id: "req-8", requestKey: null, state: "Rejected", reason: "not yours either", decidedAt: at } });
    await vi.advanceTimersByTimeAsync(5 * S);
    expect(settled).toBeUndefined();
    api.operator({ approval: { id: "req-1", requestKey: key, state: "Approved", answer: "yours", reason: null } });
    await answer;
    expect(settled).toBe("yours");
  });

  it("in a new attempt, answers the same question from the approval found at start without asking again", async () => {
    const api = resumedRun({ state: "Approved", decidedAt: new Date(T0 - S).toISOString(), answer: "ship it" });
    const sandbox = await startAttempt2(api);
    expect(sandbox.pendingApproval).toEqual({ question: "Deploy?", outcome: { state: "Approved", answer: "ship it" } });
    expect(sandbox.loadCheckpoint()).toEqual({ step: 1, data: { v: 2 } });
    await expect(sandbox.awaitApproval("Deploy?", { step: 1, data: { v: 2 } })).resolves.toBe("ship it");
    expect(asked(api)).toHaveLength(0);
  });

  it("in a new attempt, asks anew when the agent's first question is a different one", async () => {
    const api = resumedRun({ state: "Approved", decidedAt: new Date(T0 - S).toISOString(), answer: "ship it" });
    const sandbox = await startAttempt2(api);
    let settled: unknown;
    const answer = sandbox.awaitApproval("Delete the old index?").then((a) => (settled = a));
    await vi.advanceTimersByTimeAsync(0);
    expect(settled).toBeUndefined(); // not "ship it": that answers "Deploy?"
    expect(api.status.checkpoint.data[APPROVAL_REQUEST_KEY]).toMatchObject({ question: "Delete the old index?" });
    expect(askedKey(api)).not.toBe("k1");
    expect(api.status.approval).toMatchObject({ state: "Pending", question: "Delete the old index?" });
    api.operator({ approval: { state: "Approved", answer: "yes, delete it", decidedAt: new Date(T0).toISOString() } });
    await answer;
    expect(settled).toBe("yes, delete it");
    expect(sandbox.pendingApproval).toBeUndefined(); // the resumed request was dropped
  });

  it("in a new attempt, waits on the request still pending under its key", async () => {
    const api = resumedRun({ state: "Pending" });
    const sandbox = await startAttempt2(api);
    await sandbox.saveCheckpoint(1, { v: 3 }); // a checkpoint of the agent's own replaces the one with the question
    const answer = sandbox.awaitApproval("Deploy?");
    await vi.advanceTimersByTimeAsync(0);
    const [awaiting] = asked(api) as any[];
    expect(awaiting.status.checkpoint).toEqual({ step: 1, data: { [APPROVAL_REQUEST_KEY]: expect.objectContaining({ question: "Deploy?", key: "k1" }), data: { v: 3 } } });
    expect(api.status.approval).toMatchObject({ id: "req-1", state: "Pending" }); // the same request
    api.operator({ approval: { state: "Approved", answer: "go", decidedAt: new Date(T0).toISOString() } });
    await expect(answer).resolves.toBe("go");
  });

  it("asks again, under a new key, when the request it resumes was withdrawn", async () => {
    const api = resumedRun({ state: "Withdrawn", decidedAt: new Date(T0 - S).toISOString() });
    const sandbox = await startAttempt2(api);
    expect(sandbox.pendingApproval?.outcome).toEqual({ state: "Withdrawn" });
    const answer = sandbox.awaitApproval("Deploy?");
    await vi.advanceTimersByTimeAsync(0);
    expect(asked(api)).toHaveLength(1);
    expect(askedKey(api)).not.toBe("k1");
    expect(api.status.approval).toMatchObject({ id: "req-1", state: "Pending", requestKey: askedKey(api) }); // the fake's first request
    api.operator({ approval: { state: "Approved", answer: "go", decidedAt: new Date(T0).toISOString() } });
    await expect(answer).resolves.toBe("go");
  });

  it("asks again, under a new key, when its request is withdrawn while it waits", async () => {
    const api = new FakeApi({ phase: "Planning" });
    const sandbox = await start(api);
    const answer = sandbox.awaitApproval("Deploy?");
    await vi.advanceTimersByTimeAsync(0);
    const first = askedKey(api);
    api.operator({ approval: { state: "Withdrawn", decidedAt: new Date(T0).toISOString() } });
    await vi.advanceTimersByTimeAsync(0);
    // It left the wait (so the operator sees it), then asked again.
    expect(api.patches.map((p: any) => p.status.heartbeat.state).slice(-3)).toEqual(["AwaitingReply", "Planning", "AwaitingReply"]);
    expect(askedKey(api)).not.toBe(first);
    expect(api.status.approval).toMatchObject({ id: "req-2", state: "Pending", requestKey: askedKey(api) });
    api.operator({ approval: { state: "Approved", answer: "go", decidedAt: new Date(T0).toISOString() } });
    await expect(answer).resolves.toBe("go");
  });

  it("asks an older SDK's request without a key again", async () => {
    const api = new FakeApi({
      attempt: 2,
      approval: { state: "Approved", requestedAt: new Date(T0 - 60 * S).toISOString(), decidedAt: new Date(T0 - S).toISOString(), answer: "whose?" },
      checkpoint: { step: 1, data: { [APPROVAL_REQUEST_KEY]: { question: "Deploy?", askedAt: new Date(T0 - 61 * S).toISOString() } } },
    });
    const sandbox = await startAttempt2(api);
    const answer = sandbox.awaitApproval("Deploy?");
    await vi.advanceTimersByTimeAsync(0);
    expect(asked(api)).toHaveLength(1);
    api.operator({ approval: { state: "Approved", answer: "this one's", decidedAt: new Date(T0).toISOString() } });
    await expect(answer).resolves.toBe("this one's");
  });

  it("waits for the operator to see it leave the previous wait before it asks again", async () => {
    const api = new FakeApi({ phase: "AwaitingReply" });
    api.reconciles = false; // an operator that has not caught up yet
    const sandbox = await start(api);
    const answer = sandbox.awaitApproval("Next?");
    await vi.advanceTimersByTimeAsync(3 * S);
    expect(asked(api)).toHaveLength(0);
    api.operator({ phase: "Planning" });
    await vi.advanceTimersByTimeAsync(0);
    expect(asked(api)).toHaveLength(1);
    api.operator({ phase: "AwaitingReply", approval: { id: "req-1", state: "Pending", requestKey: askedKey(api), requestedAt: new Date(T0).toISOString() } });
    api.operator({ approval: { state: "Approved", answer: "go", decidedAt: new Date(T0).toISOString() } });
    await expect(answer).resolves.toBe("go");
  });

  it("ends with the rejection", async () => {
    const api = new FakeApi({ phase: "Planning" });
    const sandbox = await start(api);
    const answer = sandbox.awaitApproval("Deploy?");
    await vi.advanceTimersByTimeAsync(0);
    api.operator({ phase: "Failed", approval: { state: "Rejected", reason: "not today", decidedAt: new Date(T0).toISOString() } });
    await expect(answer).rejects.toThrow("approval rejected: not today");
  });
});

describe("usage", () => {
  const usageOf = (api: FakeApi) => api.status.heartbeat.usage;

  it("rides the next heartbeat, adds costs exactly, and counts each recorded tool call once", async () => {
    const api = new FakeApi(); // heartbeat interval 1 s
    const sandbox = await start(api);
    const writes = api.patches.length;
    for (const cost of ["0.1", 0.1, 0.1]) sandbox.recordUsage({ inputTokens: 100, outputTokens: 20, cost });
    await vi.advanceTimersByTimeAsync(0);
    // A change of usage alone is no reason to write.
    expect(api.patches.length).toBe(writes);
    expect(sandbox.usage).toEqual({ inputTokens: 300, outputTokens: 60, cost: "0.3", toolCalls: 0 });
    await vi.advanceTimersByTimeAsync(1 * S);
    expect(api.patches.slice(writes).filter(heartbeatOnly)).toHaveLength(1);
    expect(usageOf(api)).toEqual({ inputTokens: 300, outputTokens: 60, cost: "0.3", toolCalls: 0 });

    expect((await sandbox.tool("lookup", { q: 1 }, () => "found", { idempotent: true })).ok).toBe(true);
    // Invalid arguments are recorded (Failed) too, and count.
    const schema = z.object({ q: z.string() });
    expect((await sandbox.tool("lookup", { q: 2 } as never, () => "found", { schema })).ok).toBe(false);
    await vi.advanceTimersByTimeAsync(1 * S);
    expect(usageOf(api)).toMatchObject({ toolCalls: 2 });
    // Every write carries it, whatever else it carries.
    expect(api.patches.slice(writes).every((p: any) => p.status.heartbeat.usage.inputTokens === 300)).toBe(true);
  });

  it("does not count a saved result an earlier attempt left, only calls it records", async () => {
    const key = idempotencyKey({ runUid: "uid-r", step: 1, index: 0, name: "t", argsHash: argsHash({}) });
    const api = new FakeApi({ attempt: 2, toolCalls: [{ id: "a1-1", name: "t", argsHash: argsHash({}), idempotencyKey: key, state: "Succeeded", attempt: 1, result: '"saved"' }] });
    const sandbox = await start(api, { identity: { runName: "r", namespace: "ns", attempt: 2 } });
    expect(await sandbox.tool("t", {}, () => "again")).toMatchObject({ ok: true, replayed: true, value: "saved" });
    expect(await sandbox.tool("t", { n: 2 }, () => "new")).toMatchObject({ ok: true, replayed: false });
    expect(usageOf(api)).toMatchObject({ toolCalls: 1 });
  });

  it("leaves the cost to the operator while one model and no cost are reported, then reports it for the whole attempt", async () => {
    const prices = [
      { model: "small", inputPerMillion: "0.15", outputPerMillion: "0.60" },
      { model: "large", inputPerMillion: "3.00", outputPerMillion: "15.00" },
    ];
    const api = new FakeApi({}, { budget: { prices } });
    const sandbox = await start(api);
    sandbox.recordUsage({ inputTokens: 1_000_000, outputTokens: 1_000_000, model: "small" });
    sandbox.recordUsage({ inputTokens: 1_000_000 });
    await vi.advanceTimersByTimeAsync(1 * S);
    expect(usageOf(api)).toEqual({ inputTokens: 2_000_000, outputTokens: 1_000_000, toolCalls: 0, model: "small" });
    expect(sandbox.spending()).toMatchObject({ cost: "0.9" }); // as the operator prices it
    // A second model cannot be priced by one name: the cost is reported from here on, exactly.
    sandbox.recordUsage({ inputTokens: 100_000, outputTokens: 10_000, model: "large" });
    await vi.advanceTimersByTimeAsync(1 * S);
    expect(usageOf(api)).toEqual({ inputTokens: 2_100_000, outputTokens: 1_010_000, cost: "1.35", toolCalls: 0, model: "small" });
    sandbox.recordUsage({ inputTokens: 1, cost: "0.000000000000000001" });
    await vi.advanceTimersByTimeAsync(1 * S);
    expect(usageOf(api).cost).toBe("1.350000000000000001");
  });

  it("refuses a malformed report without adding any of it", async () => {
    const sandbox = await start(new FakeApi());
    sandbox.recordUsage({ inputTokens: 5, cost: "0.5" });
    for (const bad of [{ inputTokens: -1 }, { outputTokens: 1.5 }, { inputTokens: 1, cost: "-0.1" }, { inputTokens: 1, cost: "1e3" }, { inputTokens: 1, cost: Number.NaN }, { inputTokens: 1, model: "" }]) {
      expect(() => sandbox.recordUsage(bad as never)).toThrow(RangeError);
    }
    expect(sandbox.usage).toEqual({ inputTokens: 5, outputTokens: 0, cost: "0.5", toolCalls: 0 });
  });

  it("sends usage recorded just before the end with the last write", async () => {
    const api = new FakeApi();
    const code = await runAgent(async (s) => void s.recordUsage({ inputTokens: 7, outputTokens: 3, model: "m" }), {
      client: api.client(),
      identity: { runName: "r", namespace: "ns", attempt: 1 },
      logger: createLogger("silent"),
      exit: () => {},
    });
    expect(code).toBe(0);
    expect(usageOf(api)).toEqual({ inputTokens: 7, outputTokens: 3, toolCalls: 0, model: "m" });
  });

  it("a new attempt starts from zero, and never reports an earlier attempt's cost or model as its own", async () => {
    const api = new FakeApi();
    const one = await start(api);
    one.recordUsage({ inputTokens: 10, cost: "2.5", model: "m" });
    await vi.advanceTimersByTimeAsync(1 * S);
    expect(usageOf(api)).toMatchObject({ cost: "2.5", model: "m" });
    one.abandon();
    api.operator({ attempt: 2, phase: "Starting", spent: { inputTokens: 10, outputTokens: 0, cost: "2.5", toolCalls: 0, throughAttempt: 1 } });
    const two = await start(api, { identity: { runName: "r", namespace: "ns", attempt: 2 } });
    expect(usageOf(api)).toEqual({ inputTokens: 0, outputTokens: 0, toolCalls: 0 });
    two.recordUsage({ inputTokens: 1 });
    expect(two.spending()).toEqual({ inputTokens: 11, outputTokens: 0, tokens: 11, cost: "2.5", toolCalls: 0 });
  });
});

describe("the run's budget", () => {
  const attempt2 = { identity: { runName: "r", namespace: "ns", attempt: 2 } };
  const spent = (f: Partial<{ inputTokens: number; outputTokens: number; cost: string; toolCalls: number }> = {}) => ({
    spent: { inputTokens: 0, outputTokens: 0, cost: "0", toolCalls: 0, throughAttempt: 1, ...f },
  });

  it("adds this attempt's usage to what ended attempts spent, and refuses more work once a limit is reached", async () => {
    const api = new FakeApi({ attempt: 2, ...spent({ inputTokens: 500 }) }, { budget: { tokens: 1000 } });
    const sandbox = await start(api, attempt2);
    sandbox.recordUsage({ inputTokens: 400, outputTokens: 99 });
    expect(sandbox.checkBudget()).toEqual([]);
    expect(() => sandbox.assertWithinBudget()).not.toThrow();
    const writes = api.patches.length;

    sandbox.recordUsage({ outputTokens: 1 });
    // The report that reaches a limit goes out at once, not with the next heartbeat.
    await vi.advanceTimersByTimeAsync(0);
    expect(api.patches.length).toBe(writes + 1);
    expect(api.status.heartbeat.usage).toMatchObject({ inputTokens: 400, outputTokens: 100 });
    expect(sandbox.spending()).toMatchObject({ tokens: 1000 });
    expect(sandbox.checkBudget()).toEqual([{ limit: "tokens", used: "1000", allowed: "1000", message: "token budget exhausted: 1000 of 1000 tokens spent" }]);
    const refusal = (() => {
      try {
        sandbox.assertWithinBudget();
      } catch (err) {
        return err;
      }
    })();
    expect(refusal).toBeInstanceOf(BudgetExhaustedError);
    expect(refusal).toMatchObject({ name: "BudgetExhaustedError", limit: "tokens" });
    expect((refusal as Error).message).toMatch(/token budget: 1000 of 1000 tokens spent.*spec\.budget\.tokens/);

    // A tool call that would run is refused before anything is recorded.
    const fn = vi.fn();
    await expect(sandbox.tool("lookup", {}, fn)).rejects.toThrow(BudgetExhaustedError);
    expect(fn).not.toHaveBeenCalled();
    expect(api.status.toolCalls ?? []).toEqual([]);
  });

  it("follows the effective limits the operator publishes over the run's own", async () => {
    const api = new FakeApi({ attempt: 2, ...spent({ toolCalls: 2 }) }, { budget: { toolCalls: 2 } });
    const sandbox = await start(api, attempt2);
    expect(sandbox.checkBudget().map((b) => b.limit)).toEqual(["toolCalls"]);
    api.operator({ budget: { toolCalls: 3, warnAt: 0.8 } });
    expect(sandbox.checkBudget()).toEqual([]);
    expect((await sandbox.tool("t", {}, () => 1)).ok).toBe(true);
    expect(sandbox.checkBudget()).toEqual([{ limit: "toolCalls", used: "3", allowed: "3", message: "tool call budget exhausted: 3 of 3 tool calls made" }]);
  });

  it("compares cost exactly: 0.7 and 0.1 reach a limit of 0.8", async () => {
    const api = new FakeApi({}, { budget: { cost: { amount: "0.80", currency: "USD" } } });
    const sandbox = await start(api);
    expect(0.7 + 0.1 < 0.8).toBe(true); // what floats would say
    sandbox.recordUsage({ inputTokens: 1, cost: 0.7 });
    expect(sandbox.checkBudget()).toEqual([]);
    sandbox.recordUsage({ inputTokens: 1, cost: "0.1" });
    expect(sandbox.checkBudget()).toEqual([{ limit: "cost", used: "0.8", allowed: "0.8", message: "cost budget exhausted: 0.8 of 0.80 USD spent" }]);
  });

  it("prices tokens reported without a cost by the run's prices, as the operator does", async () => {
    const api = new FakeApi({}, { budget: { cost: { amount: "3", currency: "USD" }, prices: [{ model: "large", inputPerMillion: "3.00", outputPerMillion: "15.00" }] } });
    const sandbox = await start(api);
    sandbox.recordUsage({ inputTokens: 500_000, outputTokens: 99_999, model: "large" });
    expect(sandbox.spending().cost).toBe("2.999985");
    expect(sandbox.checkBudget()).toEqual([]);
    sandbox.recordUsage({ outputTokens: 1 });
    expect(sandbox.checkBudget().map((b) => b.limit)).toEqual(["cost"]);
  });

  it("no budget, no limit: nothing is ever refused", async () => {
    const sandbox = await start(new FakeApi());
    sandbox.recordUsage({ inputTokens: Number.MAX_SAFE_INTEGER, outputTokens: 5, cost: "999999999999999999" });
    sandbox.recordUsage({ inputTokens: 5, cost: "5" });
    expect(sandbox.checkBudget()).toEqual([]);
    // Capped at what the CRD admits, never wrapped around.
    expect(sandbox.usage).toMatchObject({ inputTokens: Number.MAX_SAFE_INTEGER, cost: "999999999999999999.999999999999999999" });
  });
});

describe("ending the process", () => {
  const identity = { runName: "r", namespace: "ns", attempt: 1 };
  const run = (api: FakeApi, main: Parameters<typeof runAgent>[0], exit = vi.fn(), attempt = 1) =>
    runAgent(main, { client: api.client(), identity: { ...identity, attempt }, logger: createLogger("silent"), exit, terminationLogPath: join(tmpdir(), "none", "x") });

  it("exits 0 when the agent's work resolves, after flushing what it reported", async () => {
    const api = new FakeApi();
    const exit = vi.fn();
    const code = await run(api, async (s) => void s.say("bye"), exit);
    expect(code).toBe(0);
    expect(exit).toHaveBeenCalledWith(0);
    expect(api.status.heartbeat.activity.kind).toBe("text");
  });

  it("exits non-zero when it throws, with a code that says why", async () => {
    expect(await run(new FakeApi(), () => Promise.reject(new Error("boom")))).toBe(EXIT_CODES.failed);
    // Attempt 1 started t({}) as the first call of step 1 and died; attempt 2 makes the same call.
    const key = idempotencyKey({ runUid: "uid-r", step: 1, index: 0, name: "t", argsHash: argsHash({}) });
    const refused = new FakeApi({ attempt: 2, toolCalls: [{ id: "a1-1", name: "t", argsHash: argsHash({}), idempotencyKey: key, state: "Started", attempt: 1, idempotent: false }] });
    const fn = vi.fn();
    expect(await run(refused, async (s) => void (await s.tool("t", {}, fn)), vi.fn(), 2)).toBe(EXIT_CODES.unconfirmedSideEffect);
    expect(fn).not.toHaveBeenCalled();
  });

  it("exits as fenced when the agent stops because it was fenced", async () => {
    const api = new FakeApi();
    const code = await run(api, async (s) => {
      const stopped = new Promise((_, reject) => s.signal.addEventListener("abort", () => reject(new Error("aborted by the agent's own code"))));
      api.operator({ attempt: 2 });
      await stopped;
    });
    expect(code).toBe(EXIT_CODES.fenced);
  });

  it("stops on its budget: waits, heartbeating, for the operator to stop the run, then exits as fenced", async () => {
    const api = new FakeApi({}, { budget: { tokens: 100 } });
    const exit = vi.fn();
    const ending = runAgent(
      async (s) => {
        s.recordUsage({ inputTokens: 60, outputTokens: 40 });
        s.assertWithinBudget();
      },
      { client: api.client(), identity, logger: createLogger("silent"), exit, budgetStopWaitMs: 60 * S },
    );
    await vi.advanceTimersByTimeAsync(10 * S);
    expect(exit).not.toHaveBeenCalled();
    expect(api.status.heartbeat.usage).toMatchObject({ inputTokens: 60, outputTokens: 40 });
    // Waiting for the operator is not being wedged: the heartbeats go on.
    expect(Date.parse(api.status.heartbeat.time)).toBeGreaterThanOrEqual(T0 + 9 * S);
    api.operator({ phase: "NeedsHumanIntervention" });
    expect(await ending).toBe(EXIT_CODES.fenced);
  });

  it("stops on its budget: exits as failed when no operator stops the run within the wait", async () => {
    const api = new FakeApi({}, { budget: { tokens: 100 } });
    const ending = runAgent(
      async (s) => {
        s.recordUsage({ inputTokens: 100 });
        await s.tool("t", {}, () => 1);
      },
      { client: api.client(), identity, logger: createLogger("silent"), exit: () => {}, budgetStopWaitMs: 5 * S, terminationLogPath: join(tmpdir(), "none", "x") },
    );
    await vi.advanceTimersByTimeAsync(6 * S);
    expect(await ending).toBe(EXIT_CODES.failed);
    expect(api.status.heartbeat.usage).toMatchObject({ inputTokens: 100 });
  });

  it("exits as denied when an approval is rejected, even though the run is then over", async () => {
    const api = new FakeApi({ phase: "Planning" });
    const code = await run(api, async (s) => {
      const answer = s.awaitApproval("Deploy?");
      await vi.advanceTimersByTimeAsync(0);
      api.operator({ phase: "Failed", approval: { state: "Rejected", decidedAt: new Date(T0).toISOString() } });
      await answer;
    });
    expect(code).toBe(EXIT_CODES.approvalDenied);
  });

  const rateLimited = () => {
    throw new ToolError("429 Too Many Requests", { httpStatus: 429, retryAfterSeconds: 5 });
  };

  it("exits as rate limited when the agent gives up right after a call failed with 429", async () => {
    const exit = vi.fn();
    const code = await run(
      new FakeApi(),
      async (s) => {
        const outcome = await s.tool("call_model", { prompt: "hi" }, rateLimited, { idempotent: true });
        if (!outcome.ok) throw new Error(`giving up this attempt: ${outcome.error.message}`);
      },
      exit,
    );
    expect(code).toBe(EXIT_CODES.rateLimited);
    expect(exit).toHaveBeenCalledWith(6);
    // Thrown by the agent itself, or wrapped: the same.
    expect(await run(new FakeApi(), () => Promise.reject(new Error("the model gave up", { cause: new ToolError("busy", { httpStatus: 429 }) })))).toBe(EXIT_CODES.rateLimited);
  });

  it("exits as failed when the rate-limited call is not this attempt's newest", async () => {
    const code = await run(new FakeApi(), async (s) => {
      await s.tool("call_model", { prompt: "hi" }, rateLimited, { idempotent: true });
      await s.tool("call_model", { prompt: "again" }, () => "answered", { idempotent: true });
      throw new Error("something else went wrong");
    });
    expect(code).toBe(EXIT_CODES.failed);
    // An earlier attempt's 429 is not this attempt's reason to give up.
    const earlier = new FakeApi({ attempt: 2, toolCalls: [{ id: "a1-1", name: "call_model", argsHash: "h", state: "Failed", attempt: 1, error: { message: "429", httpStatus: 429 } }] });
    expect(await run(earlier, () => Promise.reject(new Error("boom")), vi.fn(), 2)).toBe(EXIT_CODES.failed);
  });

  it("leaves the failure message for the kubelet only in a file that exists", async () => {
    const dir = await mkdtemp(join(tmpdir(), "termination-"));
    try {
      const existing = join(dir, "termination-log");
      await writeFile(existing, "x".repeat(100));
      const missing = join(dir, "absent");
      for (const path of [existing, missing]) {
        await runAgent(() => Promise.reject(new Error("out of tokens")), { client: new FakeApi().client(), identity, logger: createLogger("silent"), exit: () => {}, terminationLogPath: path });
      }
      expect(await readFile(existing, "utf8")).toBe("Error: out of tokens");
      await expect(readFile(missing, "utf8")).rejects.toThrow(/ENOENT/);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });
});
