// The chart tests need a control plane that runs pods: this starts it with kube-scheduler, kwok and
// a fake node (or reuses a running one and adds them), installs the CRD the way users do before a
// chart with crds.enabled=false, and hands the kubeconfig and the pinned helm and kubectl binaries
// to every test file.
import { execFileSync } from "node:child_process";
import { fileURLToPath } from "node:url";
import type { TestProject } from "vitest/node";

const root = fileURLToPath(new URL("../..", import.meta.url));

// `kubeconfig` is declared by test/support/global-setup.ts, which the integration tests share.
declare module "vitest" {
  export interface ProvidedContext {
    helm: string;
    kubectl: string;
  }
}

function controlPlane(...args: string[]): string {
  return execFileSync("bash", [`${root}hack/control-plane.sh`, ...args], { encoding: "utf8", stdio: ["ignore", "pipe", "inherit"] }).trim();
}

export default function setup(project: TestProject): void {
  const started = Date.now();
  const out = controlPlane("up", "--nodes");
  const match = /export KUBECONFIG=(\S+)/.exec(out);
  if (!match) throw new Error(`hack/control-plane.sh up --nodes printed no KUBECONFIG: ${out}`);
  const kubeconfig = match[1] as string;
  // The pinned versions, not whatever is on PATH: the tests read helm's and kubectl's output.
  const helm = controlPlane("bin", "helm");
  const kubectl = controlPlane("bin", "kubectl");
  const env = { ...process.env, KUBECONFIG: kubeconfig };
  execFileSync(kubectl, ["apply", "--server-side", "--force-conflicts", "-f", `${root}crds/`], { env, stdio: ["ignore", "ignore", "inherit"] });
  execFileSync(kubectl, ["wait", "--for=condition=Established", "--timeout=60s", "crd/agentruns.watchdog.dev"], { env, stdio: ["ignore", "ignore", "inherit"] });
  process.stderr.write(`control plane with nodes ready in ${Date.now() - started} ms\n`);
  project.provide("kubeconfig", kubeconfig);
  project.provide("helm", helm);
  project.provide("kubectl", kubectl);
}
