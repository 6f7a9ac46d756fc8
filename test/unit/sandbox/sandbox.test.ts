// The sandbox's I/O shell against an in-memory API (fake-api.ts) and fake timers: what it writes,
// in which order, when, and when it stops writing.
import { mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import { z } from "zod";
import { ApiError } from "../../../operator/sandbox/api-client.ts";
import { createLogger } from "../../../operator/log.ts";
import { EXIT_CODES, FencedError, UnconfirmedSideEffectError } from "../../../operator/sandbox/errors.ts";
import { argsHash, idempotencyKey } from "../../../operator/sandbox/keys.ts";
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
  it("first says it is alive and planning, for its own attempt, and clears an earlier attempt's activity", async () => {
    const api = new FakeApi({ heartbeat: { time: "2026-11-30T11:00:00Z", attempt: 1, state: "Planning", activity: { kind: "text", time: "2026-11-30T11:00:00Z" } } });
    await start(api);
    expect(api.patches).toHaveLength(1);
    expect(api.patches[0]).toEqual({ status: { heartbeat: { time: new Date(T0).toISOString(), attempt: 1, state: "Planning", activity: null } } });
    expect(api.status.heartbeat.activity).toBeUndefined();
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
  it("asks with a checkpoint, reports AwaitingReply, and resolves with the answer", async () => {
    const api = new FakeApi({ phase: "Planning" });
    const sandbox = await start(api);
    const answer = sandbox.awaitApproval("Deploy?", { step: 2, data: { v: 2 } });
    await vi.advanceTimersByTimeAsync(0);
    expect(api.status.heartbeat.state).toBe("AwaitingReply");
    expect(api.status.checkpoint).toMatchObject({ step: 2, data: { data: { v: 2 }, "watchdog.dev/approval-request": { question: "Deploy?" } } });
    api.operator({ phase: "AwaitingReply", approval: { state: "Pending", requestedAt: new Date(T0).toISOString() } });
    await vi.advanceTimersByTimeAsync(10 * S);
    api.operator({ approval: { state: "Approved", answer: "go", decidedAt: new Date(T0 + 10 * S).toISOString() } });
    await expect(answer).resolves.toBe("go");
    expect(api.status.heartbeat.state).toBe("Planning");
    expect(sandbox.loadCheckpoint()).toEqual({ step: 2, data: { v: 2 } });
  });

  it("in a new attempt, answers from the approval found at start without asking again", async () => {
    const api = new FakeApi({
      attempt: 2,
      approval: { state: "Approved", requestedAt: new Date(T0 - 60 * S).toISOString(), decidedAt: new Date(T0 - S).toISOString(), answer: "ship it" },
      checkpoint: { step: 1, data: { "watchdog.dev/approval-request": { question: "Deploy?", askedAt: new Date(T0 - 61 * S).toISOString() }, data: { v: 2 } } },
    });
    const sandbox = await start(api, { identity: { runName: "r", namespace: "ns", attempt: 2 } });
    expect(sandbox.pendingApproval).toEqual({ question: "Deploy?", outcome: { state: "Approved", answer: "ship it" } });
    expect(sandbox.loadCheckpoint()).toEqual({ step: 1, data: { v: 2 } });
    await expect(sandbox.awaitApproval("Deploy?", { step: 1, data: { v: 2 } })).resolves.toBe("ship it");
    expect(api.patches.some((p: any) => p.status.heartbeat.state === "AwaitingReply")).toBe(false);
  });

  it("does not take the answer to an earlier question", async () => {
    const earlier = { state: "Approved", requestedAt: new Date(T0 - 60 * S).toISOString(), decidedAt: new Date(T0 - 50 * S).toISOString(), answer: "yes to the first" };
    const api = new FakeApi({ phase: "Planning", approval: earlier });
    const sandbox = await start(api);
    let settled = false;
    const answer = sandbox.awaitApproval("Second question?").finally(() => (settled = true));
    await vi.advanceTimersByTimeAsync(5 * S);
    expect(settled).toBe(false);
    api.operator({ phase: "AwaitingReply", approval: { state: "Pending", requestedAt: new Date(T0 + 5 * S).toISOString(), answer: null, decidedAt: null } });
    api.operator({ approval: { state: "Approved", answer: "yes to the second", decidedAt: new Date(T0 + 6 * S).toISOString() } });
    await expect(answer).resolves.toBe("yes to the second");
  });

  it("ends with the rejection", async () => {
    const api = new FakeApi({ phase: "Planning" });
    const sandbox = await start(api);
    const answer = sandbox.awaitApproval("Deploy?");
    await vi.advanceTimersByTimeAsync(0);
    api.operator({ phase: "Failed", approval: { state: "Rejected", requestedAt: new Date(T0).toISOString(), reason: "not today", decidedAt: new Date(T0).toISOString() } });
    await expect(answer).rejects.toThrow("approval rejected: not today");
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

  it("exits as denied when an approval is rejected, even though the run is then over", async () => {
    const api = new FakeApi({ phase: "Planning" });
    const code = await run(api, async (s) => {
      const answer = s.awaitApproval("Deploy?");
      await vi.advanceTimersByTimeAsync(0);
      api.operator({ phase: "Failed", approval: { state: "Rejected", requestedAt: new Date(T0).toISOString(), decidedAt: new Date(T0).toISOString() } });
      await answer;
    });
    expect(code).toBe(EXIT_CODES.approvalDenied);
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
