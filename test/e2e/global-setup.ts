// End-to-end tests need the whole machinery: the control plane with a kwok node (scheduler and
// fake kubelet, so sandbox pods are scheduled and reach Running), PostgreSQL for the ledger, and
// the CRD. This starts what is not running (an `up --nodes` adds nodes to a running cluster) and
// reuses what is, and leaves it all up for the next run, as the integration setup does.
import type { TestProject } from "vitest/node";
// The provided keys are declared once, by the other suites' setups.
import type {} from "../support/global-setup.ts";
import type {} from "../support/postgres-setup.ts";
import { kwokCluster, postgres } from "../support/setup-steps.ts";

export default async function setup(project: TestProject): Promise<void> {
  project.provide("kubeconfig", await kwokCluster());
  project.provide("databaseUrl", await postgres());
}
