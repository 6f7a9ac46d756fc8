// Where the shell asks the core: the one call of decide(). The executor only carries out the plan
// this returns, on the run and pods it was made from.
import type { Json } from "../kube/client.ts";
import { decide, type DecideInput } from "../watchdog/decide.ts";
import type { Plan } from "../watchdog/plan.ts";

/** A plan, with the run and pods it was made from (the executor's preconditions come from them). */
export interface Decision {
  run: Json;
  pods: Json[];
  plan: Plan;
}

export interface PlanSources {
  /** The time now on the API server's clock. */
  now: () => number;
  /** What the core needs beyond the run and its pods (reconciler.ts, inputs.ts): defaults, nodes, sightings. */
  inputs: (run: Json, pods: readonly Json[]) => Omit<DecideInput, "run" | "pods" | "now">;
  /**
   * Whether the pods given are known to show every pod of the run that may still run (the caches
   * have caught up with the start of this replica's leadership: Controller.cacheCurrent). Asked
   * only for a plan that creates a pod, never on a heartbeat's quiet decision.
   */
  podsComplete: () => boolean;
  /** Lists the run's pods live from the API server. */
  listPods: () => Promise<Json[]>;
}

/**
 * Decides what to do with a run from what the caller holds. A plan that would create a pod from
 * pods not known to be complete is made again from a live list: a cache could miss a pod that
 * another replica created, and a second sandbox is the one mistake that cannot be taken back.
 */
export async function planRun(run: Json, pods: Json[], sources: PlanSources): Promise<Decision> {
  let listed = false;
  for (;;) {
    const plan = decide({ run, pods, now: sources.now(), ...sources.inputs(run, pods) });
    if (!plan.createPod || listed || sources.podsComplete()) return { run, pods, plan };
    pods = await sources.listPods();
    listed = true;
  }
}
