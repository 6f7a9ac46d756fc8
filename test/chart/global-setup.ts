// The chart tests need a control plane that runs pods: this starts it with kube-scheduler, kwok and
// a fake node (or reuses a running one and adds them), installs the CRD the way users do before a
// chart with crds.enabled=false, and hands the kubeconfig and the pinned helm and kubectl binaries
// to every test file.
import type { TestProject } from "vitest/node";
import { kwokCluster, pinnedTools } from "../support/setup-steps.ts";

// `kubeconfig` is declared by test/support/global-setup.ts, which the integration tests share.
declare module "vitest" {
  export interface ProvidedContext {
    helm: string;
    kubectl: string;
  }
}

export default async function setup(project: TestProject): Promise<void> {
  const kubeconfig = await kwokCluster();
  // The pinned versions, not whatever is on PATH: the tests read helm's and kubectl's output.
  const { helm, kubectl } = await pinnedTools();
  project.provide("kubeconfig", kubeconfig);
  project.provide("helm", helm);
  project.provide("kubectl", kubectl);
}
