// The core's property scenarios played through the real Executor against an in-memory API server
// (api-world.ts) that refuses requests, races them with a sandbox's heartbeat and holds the
// executor to resourceVersion and uid preconditions. Whatever fails and in whatever order, the
// invariants of DESIGN.md hold for what the executor really wrote: never two sandboxes, never a
// force delete, no pod before retry-after or without the finalizer, attempts only go up, Completed
// and Failed stay, and a plan reported done has deleted the pods it meant to.
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { scenario, play } from "../watchdog/scenario.ts";
import { ApiWorld, type Fault, type Operation } from "./api-world.ts";

const RUNS = Math.max(1, Math.floor(Number(process.env.PROPERTY_RUNS ?? 1000) / 4));

// Refusals the API server really gives each request: an outage or overload anywhere, a conflict
// on a guarded write, a refusal for content on a status write.
const fault: fc.Arbitrary<Fault> = fc.oneof(
  fc.record({ operation: fc.constantFrom<Operation>("readRun", "listPods", "createPod", "writeStatus", "writeMetadata", "deletePod"), code: fc.constantFrom(500, 429) }),
  fc.record({ operation: fc.constantFrom<Operation>("writeStatus", "writeMetadata"), code: fc.constant(409) }),
  fc.record({ operation: fc.constant<Operation>("writeStatus"), code: fc.constant(422) }),
  fc.record({ operation: fc.constantFrom<Operation>("createPod", "writeStatus", "writeMetadata", "deletePod"), race: fc.constant(true as const) }),
);

// Each step's first reconcile carries out a plan made from a cache that is current, or that has
// not seen the step's change yet, or reads the run afresh.
const step = fc.record({ fault: fc.option(fault, { nil: undefined }), cache: fc.constantFrom("none", "current", "stale"), trustCache: fc.boolean() });
const faultyScenario = fc.tuple(scenario, fc.array(step, { minLength: 30, maxLength: 30 }));

describe("the executor under the core's scenarios and the API server's refusals", () => {
  it("keeps every invariant for what it writes", async () => {
    await fc.assert(
      fc.asyncProperty(faultyScenario, async ([s, steps]) => {
        const w = new ApiWorld({ watchdog: s.watchdog, ...(s.budget ? { budget: s.budget } : {}) });
        w.kubelet = s.kubelet;
        w.sandboxClockSkewMs = s.clockSkewMs;
        await w.settleThroughExecutor();
        for (const [i, c] of s.commands.entries()) {
          const before = structuredClone(w.status);
          const { fault: f, cache, trustCache } = steps[i] ?? { cache: "none", trustCache: false };
          const stale = w.snapshot(true);
          play(w, c);
          w.fault = f;
          w.trustCache = trustCache;
          await w.settleThroughExecutor(cache === "stale" ? stale : cache === "current" ? w.snapshot() : undefined);
          w.fault = undefined;
          // One more settle with nothing failing: what a refusal put off is done now.
          await w.settleThroughExecutor();
          const context = `after ${JSON.stringify(c)}; faults ${JSON.stringify(w.struck)}`;
          expect(w.violations, context).toEqual([]);
          expect(w.livePods.filter((p) => !p.metadata.deletionTimestamp).length, context).toBeLessThanOrEqual(1);
          expect(w.status.attempt ?? 0, context).toBeGreaterThanOrEqual(before.attempt ?? 0);
          if (before.phase === "Completed" || before.phase === "Failed") expect(w.status.phase, context).toBe(before.phase);
        }
      }),
      { numRuns: RUNS },
    );
  });
});
