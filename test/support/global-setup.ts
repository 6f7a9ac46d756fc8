// Integration tests share one real control plane per test run: this starts it (or reuses one
// that is already up), installs the CRD, and hands the kubeconfig to every test file. It has a
// kwok node: some files need their sandbox pods to reach Running (a heartbeat timeout counts from
// the container's start). Run alone, without one, they waited forever for a start that never came.
import type { TestProject } from "vitest/node";
import { kwokCluster } from "./setup-steps.ts";

declare module "vitest" {
  export interface ProvidedContext {
    kubeconfig: string;
  }
}

export default async function setup(project: TestProject): Promise<void> {
  project.provide("kubeconfig", await kwokCluster());
}
