import pino from "pino";
import { describe, expect, it } from "vitest";
import { WorkQueue } from "../../../operator/controller/queue.ts";
import { Wakeups } from "../../../operator/controller/wakeups.ts";
import { dueOnlyWorkers, WorkerPool } from "../../../operator/controller/workers.ts";
import { Metrics } from "../../../operator/metrics/metrics.ts";

const log = pino({ level: "silent" });

/** Waits until `probe` holds, or fails after `ms`. */
async function until(probe: () => boolean, ms = 2000): Promise<void> {
  const deadline = Date.now() + ms;
  while (!probe()) {
    if (Date.now() > deadline) throw new Error("timed out");
    await new Promise((r) => setTimeout(r, 5));
  }
}

describe("WorkerPool", () => {
  it("reserves a quarter of its workers, at least one of two or more, for runs whose deadline came", () => {
    expect([1, 2, 3, 4, 7, 8, 16, 64].map(dueOnlyWorkers)).toEqual([0, 1, 1, 1, 1, 2, 4, 16]);
  });

  it("kills a run whose deadline came while every other worker is held by a routine write that does not return", async () => {
    const queue = new WorkQueue();
    const started: string[] = [];
    const held: (() => void)[] = [];
    // Routine reconciles wait on an API server that does not answer; a kill's returns at once.
    const pool = new WorkerPool(
      queue,
      new Wakeups(() => {}),
      async (key) => {
        started.push(key);
        if (key.startsWith("routine")) await new Promise<void>((resolve) => held.push(resolve));
        return {};
      },
      new Metrics(),
      log,
      { concurrency: 4, stuckReconcileMs: 60_000 },
    );
    pool.start();
    for (let i = 0; i < 5; i++) queue.add(`routine-${i}`);
    await until(() => started.length === 3);
    expect(started).toEqual(["routine-0", "routine-1", "routine-2"]);
    queue.addDue("hung");
    await until(() => started.includes("hung"));
    // The routine keys still wait for a general worker; the reserved one went back to waiting.
    expect(queue.length).toBe(2);
    for (const release of held.splice(0)) release();
    await until(() => started.length === 6);
    queue.shutDown();
    for (const release of held.splice(0)) release();
    await pool.stop(1000);
  });
});
