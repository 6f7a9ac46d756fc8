import { afterEach, describe, expect, it, vi } from "vitest";
import { ItemBackoff, TokenBucket, WorkQueue } from "../../../operator/controller/queue.ts";
import { Wakeups } from "../../../operator/controller/wakeups.ts";

afterEach(() => vi.useRealTimers());

describe("WorkQueue", () => {
  it("queues a key once however often it is added", async () => {
    const q = new WorkQueue();
    q.add("a");
    q.add("a");
    q.add("b");
    expect(q.length).toBe(2);
    expect(await q.get()).toBe("a");
    expect(await q.get()).toBe("b");
  });

  it("never hands a key being processed to a second worker, and requeues it after done", async () => {
    const q = new WorkQueue();
    q.add("a");
    const first = await q.get();
    q.add("a"); // an update arrives while "a" is processed
    expect(q.length).toBe(0);
    let second: string | undefined;
    void q.get().then((k) => (second = k));
    await Promise.resolve();
    expect(second).toBeUndefined();
    q.done(first!);
    await Promise.resolve();
    expect(second).toBe("a");
  });

  it("hands out keys added when idle only when no other key waits, and makes them urgent on a plain add", async () => {
    const q = new WorkQueue();
    q.addWhenIdle("mirror");
    q.add("a");
    q.addWhenIdle("later");
    q.add("b");
    expect(q.length).toBe(4);
    expect(await q.get()).toBe("a");
    expect(await q.get()).toBe("b");
    q.add("later"); // an event for it: urgent now, ahead of the other idle key
    expect(await q.get()).toBe("later");
    expect(await q.get()).toBe("mirror");
    expect(q.length).toBe(0);
  });

  it("keeps a key added when idle while it is processed for after it is done, at idle priority", async () => {
    const q = new WorkQueue();
    q.add("a");
    const first = await q.get();
    q.addWhenIdle("a");
    q.add("b");
    q.done(first!);
    expect(await q.get()).toBe("b");
    expect(await q.get()).toBe("a");
  });

  it("hands out a key whose deadline came before every other, even one already waiting behind a flood", async () => {
    const q = new WorkQueue();
    for (let i = 0; i < 100; i++) q.add(`heartbeat-${i}`);
    q.addWhenIdle("mirror");
    q.add("hung");
    q.addDue("hung"); // its deadline: it leaves its place at the back
    q.addDue("backoff-over");
    expect(q.length).toBe(103);
    expect(await q.get()).toBe("hung");
    expect(await q.get()).toBe("backoff-over");
    expect(await q.get()).toBe("heartbeat-0");
    // An idle key whose deadline comes is due, not idle.
    q.addDue("mirror");
    expect(await q.get()).toBe("mirror");
    // Due twice is queued once; a plain add does not demote it.
    q.addDue("x");
    q.addDue("x");
    q.add("x");
    expect(q.length).toBe(99 + 1);
    expect(await q.get()).toBe("x");
  });

  it("gives a worker that asks for due keys only those, and a waiting due key to such a worker first", async () => {
    const q = new WorkQueue();
    for (let i = 0; i < 3; i++) q.add(`heartbeat-${i}`);
    // Nothing due: a due-only worker waits, although routine keys are queued.
    let dueOnly: string | undefined = "none yet";
    void q.get(true).then((k) => (dueOnly = k));
    await Promise.resolve();
    expect(dueOnly).toBe("none yet");
    q.addDue("hung");
    await Promise.resolve();
    expect(dueOnly).toBe("hung");
    expect(q.length).toBe(3);
    // Both kinds waiting: a routine key goes to the general worker, a due one to the due-only worker.
    for (let i = 0; i < 3; i++) expect(await q.get()).toBe(`heartbeat-${i}`);
    const general: (string | undefined)[] = [];
    const reserved: (string | undefined)[] = [];
    void q.get().then((k) => general.push(k));
    void q.get(true).then((k) => reserved.push(k));
    await Promise.resolve();
    q.add("routine");
    q.addDue("another-hung");
    await Promise.resolve();
    expect(general).toEqual(["routine"]);
    expect(reserved).toEqual(["another-hung"]);
    // With no due-only worker waiting, a general one takes a due key.
    void q.get().then((k) => general.push(k));
    await Promise.resolve();
    q.addDue("third-hung");
    await Promise.resolve();
    expect(general).toEqual(["routine", "third-hung"]);
    // A due-only waiter is told the queue shut down.
    void q.get(true).then((k) => reserved.push(k));
    await Promise.resolve();
    q.shutDown();
    await Promise.resolve();
    expect(reserved).toEqual(["another-hung", undefined]);
  });

  it("keeps a due key that is being processed due for after it is done", async () => {
    const q = new WorkQueue();
    q.add("a");
    const taken = await q.get();
    q.add("b");
    q.addDue("a");
    q.done(taken!);
    expect(await q.get()).toBe("a");
    expect(await q.get()).toBe("b");
  });

  it("backs a failing key off exponentially and forgets it on success", () => {
    const b = new ItemBackoff(5, 1000);
    expect([b.when("k"), b.when("k"), b.when("k"), b.when("k")]).toEqual([5, 10, 20, 40]);
    for (let i = 0; i < 20; i++) b.when("k");
    expect(b.when("k")).toBe(1000);
    b.forget("k");
    expect(b.when("k")).toBe(5);
  });

  it("limits the overall retry rate with a token bucket", () => {
    let now = 0;
    const bucket = new TokenBucket(10, 2, () => now);
    expect([bucket.reserve(), bucket.reserve()]).toEqual([0, 0]);
    expect(bucket.reserve()).toBeCloseTo(100);
    now += 1000;
    expect(bucket.reserve()).toBe(0);
  });

  it("reports how long the oldest item has been processed (the stuck-loop health check)", async () => {
    const q = new WorkQueue();
    q.add("a");
    await q.get();
    expect(q.longestRunningMs(performance.now() + 5000)).toBeGreaterThanOrEqual(5000);
    q.done("a");
    expect(q.longestRunningMs()).toBe(0);
  });
});

describe("Wakeups", () => {
  it("replaces a run's wake-up instead of adding one, so a moved deadline fires once", () => {
    vi.useFakeTimers({ now: 0 });
    const fired: string[] = [];
    const w = new Wakeups((k) => fired.push(k), () => Date.now());
    w.set("r", 1000);
    w.set("r", 3000); // a heartbeat moved the deadline
    vi.advanceTimersByTime(1500);
    expect(fired).toEqual([]);
    vi.advanceTimersByTime(1600);
    expect(fired).toEqual(["r"]);
    w.set("s", 5000);
    w.set("s", undefined);
    vi.advanceTimersByTime(10_000);
    expect(fired).toEqual(["r"]);
  });
});
