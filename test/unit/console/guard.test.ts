// The console's guard and its reading of runs, without a server: which requests it lets through,
// and what a run with any status, however odd, shows in the list.
import type { IncomingMessage } from "node:http";
import { describe, expect, it } from "vitest";
import { Guard } from "../../../operator/console/guard.ts";
import { runForPage, runSummary } from "../../../operator/console/summary.ts";

const req = (headers: Record<string, string>) => ({ headers }) as unknown as IncomingMessage;

describe("the guard", () => {
  const guard = new Guard("s3cret-token");
  guard.listening(8090, ["127.0.0.1", "localhost", "[::1]"]);
  const host = { host: "127.0.0.1:8090" };

  it("lets through only its own host names with the token, by cookie or bearer", () => {
    expect(guard.check(req({ ...host, cookie: "other=1; agentrun_console_8090=s3cret-token" })).ok).toBe(true);
    expect(guard.check(req({ host: "localhost:8090", authorization: "Bearer s3cret-token" })).ok).toBe(true);
    expect(guard.check(req(host))).toMatchObject({ ok: false, status: 401 });
    expect(guard.check(req({ ...host, cookie: "agentrun_console_8090=s3cret-tokem" }))).toMatchObject({ ok: false, status: 401 });
    // A console on another port has another cookie.
    expect(guard.check(req({ ...host, cookie: "agentrun_console_8091=s3cret-token" }))).toMatchObject({ ok: false, status: 401 });
    expect(guard.check(req({ host: "attacker.example:8090", authorization: "Bearer s3cret-token" }))).toMatchObject({ ok: false, status: 403 });
    expect(guard.check(req({ host: "127.0.0.1:9999", authorization: "Bearer s3cret-token" }))).toMatchObject({ ok: false, status: 403 });
  });

  it("takes writes only from its own origin, as JSON", () => {
    const own = { ...host, origin: "http://127.0.0.1:8090", "content-type": "application/json" };
    expect(guard.checkWrite(req(own)).ok).toBe(true);
    expect(guard.checkWrite(req({ ...own, "sec-fetch-site": "same-origin" })).ok).toBe(true);
    expect(guard.checkWrite(req({ ...own, "sec-fetch-site": "same-site" }))).toMatchObject({ ok: false, status: 403 });
    expect(guard.checkWrite(req({ ...own, origin: "http://localhost:8090" }))).toMatchObject({ ok: false, status: 403 });
    expect(guard.checkWrite(req({ ...host, "content-type": "application/json" }))).toMatchObject({ ok: false, status: 403 });
    expect(guard.checkWrite(req({ ...own, "content-type": "text/plain" }))).toMatchObject({ ok: false, status: 415 });
  });

  it("takes any cookie of its own name that holds the token, so that one planted beside it locks no one out", () => {
    expect(guard.check(req({ ...host, cookie: "agentrun_console_8090=planted; agentrun_console_8090=s3cret-token" })).ok).toBe(true);
    expect(guard.check(req({ ...host, cookie: "agentrun_console_8090=planted; agentrun_console_8091=s3cret-token" }))).toMatchObject({ ok: false, status: 401 });
  });

  it("answers nothing before it listens, and has no cookie to give", () => {
    const early = new Guard("t");
    expect(early.check(req({ host: "127.0.0.1:8090", authorization: "Bearer t" }))).toMatchObject({ ok: false, status: 403 });
    expect(() => early.cookie()).toThrow(/before it listens/);
  });
});

describe("a run as the list shows it", () => {
  it("takes what it can use and ignores the rest", () => {
    const run = {
      metadata: { name: "r", namespace: "ns", uid: "u", creationTimestamp: "2026-12-01T00:00:00Z", managedFields: [{}] },
      spec: { suspend: "yes" },
      status: {
        phase: "AwaitingReply",
        attempt: 2,
        restarts: "three",
        watchdog: { maxRestarts: 3, stall: { maxNudges: 2 } },
        heartbeat: { time: 5 },
        approval: { state: "Pending", id: "2-ab" },
        checkpoint: { step: 1, data: { "watchdog.dev/approval-request": { question: "Go?" } } },
      },
    };
    expect(runSummary(run)).toEqual({
      namespace: "ns",
      name: "r",
      uid: "u",
      createdAt: "2026-12-01T00:00:00Z",
      phase: "AwaitingReply",
      attempt: 2,
      maxRestarts: 3,
      maxNudges: 2,
      suspended: false,
      needsPerson: true,
      approval: { state: "Pending", id: "2-ab", question: "Go?" },
    });
    expect(runSummary({})).toMatchObject({ name: "", needsPerson: false, suspended: false });
    expect(runSummary({ status: "garbage", metadata: [1] })).toMatchObject({ needsPerson: false });
    expect((runForPage(run).metadata as Record<string, unknown>).managedFields).toBeUndefined();
  });
});
