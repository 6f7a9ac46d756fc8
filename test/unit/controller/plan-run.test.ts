// The shell's one call of the core: a plan is made from what the caller holds, and made again
// from a live list of pods only when it would create a pod from pods not known to be complete.
import { describe, expect, it } from "vitest";
import { planRun, type PlanSources } from "../../../operator/controller/plan-run.ts";
import { ApiWorld } from "./api-world.ts";

type Json = Record<string, any>;

function sources(w: ApiWorld, podsComplete: boolean, live: Json[]): PlanSources & { lists: number } {
  const s = {
    lists: 0,
    now: () => w.now,
    inputs: () => ({ defaults: w.defaults }),
    podsComplete: () => podsComplete,
    listPods: async () => {
      s.lists++;
      return live;
    },
  };
  return s;
}

describe("planRun", () => {
  it("lists the pods live before a create planned from pods not known to be complete, and plans from what it listed", async () => {
    const w = new ApiWorld({ watchdog: { heartbeatTimeout: "30s" } });
    const { run } = w.snapshot();
    const s = sources(w, false, []);
    const decision = await planRun(run, [], s);
    expect(s.lists).toBe(1);
    expect(decision.plan.createPod).toBeDefined();
    expect(decision.run).toBe(run);
  });

  it("takes complete pods as they are: no list", async () => {
    const w = new ApiWorld({ watchdog: { heartbeatTimeout: "30s" } });
    const s = sources(w, true, []);
    const decision = await planRun(w.snapshot().run, [], s);
    expect(s.lists).toBe(0);
    expect(decision.plan.createPod).toBeDefined();
  });

  it("lists nothing for a plan that creates no pod", async () => {
    const w = new ApiWorld({ watchdog: { heartbeatTimeout: "30s" } });
    await w.settleThroughExecutor();
    w.podRunning();
    w.heartbeat("Planning");
    await w.settleThroughExecutor();
    const { run, pods } = w.snapshot();
    const s = sources(w, false, []);
    const decision = await planRun(run, pods, s);
    expect(s.lists).toBe(0);
    expect(decision.pods).toBe(pods);
    expect(decision.plan.createPod).toBeUndefined();
  });

  it("creates no second sandbox when the live list shows a pod the cache missed", async () => {
    const w = new ApiWorld({ watchdog: { heartbeatTimeout: "30s" } });
    const before = w.snapshot(true);
    await w.settleThroughExecutor(); // another replica started the run meanwhile
    const live = w.snapshot().pods;
    expect(live).toHaveLength(1);
    const s = sources(w, false, live);
    const decision = await planRun(before.run, before.pods, s);
    expect(s.lists).toBe(1);
    expect(decision.pods).toBe(live);
    expect(decision.plan.createPod).toBeUndefined();
  });
});
