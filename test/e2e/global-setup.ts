// End-to-end tests need the whole machinery: the control plane with a kwok node (scheduler and
// fake kubelet, so sandbox pods are scheduled and reach Running), PostgreSQL for the ledger, and
// the CRD. This starts what is not running (an `up --nodes` adds nodes to a running cluster) and
// reuses what is, and leaves it all up for the next run, as the integration setup does.
import type { TestProject } from "vitest/node";
// The provided keys are declared once, by the other suites' setups.
import type {} from "../support/global-setup.ts";
import type {} from "../support/postgres-setup.ts";
import { applyCrds, clientFor, exported, runScript } from "../../hack/demo/cluster.ts";

async function up(script: string, args: string[], variable: string): Promise<string> {
  const { code, stdout } = await runScript(script, args);
  const value = exported(stdout, variable);
  if (code !== 0 || !value) throw new Error(`hack/${script} ${args.join(" ")} failed (exit ${code}): ${stdout}`);
  return value;
}

export default async function setup(project: TestProject): Promise<void> {
  const started = Date.now();
  const [kubeconfig, databaseUrl] = await Promise.all([
    up("control-plane.sh", ["up", "--nodes"], "KUBECONFIG"),
    up("postgres.sh", ["up"], "DATABASE_URL"),
  ]);
  await applyCrds(clientFor(kubeconfig));
  process.stderr.write(`control plane with nodes, PostgreSQL and CRD ready in ${Date.now() - started} ms\n`);
  project.provide("kubeconfig", kubeconfig);
  project.provide("databaseUrl", databaseUrl);
}
