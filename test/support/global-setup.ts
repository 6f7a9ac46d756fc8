// Integration tests share one real control plane per test run: this starts it (or reuses one
// that is already up), installs the CRD, and hands the kubeconfig to every test file.
import type { TestProject } from "vitest/node";
import { controlPlane } from "./setup-steps.ts";

declare module "vitest" {
  export interface ProvidedContext {
    kubeconfig: string;
  }
}

export default async function setup(project: TestProject): Promise<void> {
  project.provide("kubeconfig", await controlPlane());
}
