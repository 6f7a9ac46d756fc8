// The real-node suite's cluster: the control plane with one real kubelet node (containerd, runc,
// a CNI bridge), in a state root of its own beside the kwok cluster's, and the project image built
// from the Dockerfile and imported into the node. Started once per test run (or reused), and left
// up for the next run, like the other suites' clusters.
import type { TestProject } from "vitest/node";
import { realNode } from "../support/setup-steps.ts";
// `kubeconfig`, `helm` and `kubectl` are declared by the other suites' setups.
import type {} from "../support/global-setup.ts";
import type {} from "../chart/global-setup.ts";

declare module "vitest" {
  export interface ProvidedContext {
    /** The project image, as imported into the real node. */
    image: string;
    /** AGENT_WATCHDOG_STATE of the real-node cluster. */
    nodeState: string;
  }
}

export default async function setup(project: TestProject): Promise<void> {
  const node = await realNode();
  project.provide("kubeconfig", node.kubeconfig);
  project.provide("image", node.image);
  project.provide("nodeState", node.state);
  project.provide("helm", node.helm);
  project.provide("kubectl", node.kubectl);
}
