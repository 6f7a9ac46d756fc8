// Integration tests share one real control plane per test run: this starts it (or reuses one
// that is already up), installs the CRD, and hands the kubeconfig to every test file.
import { execFileSync } from "node:child_process";
import { fileURLToPath } from "node:url";
import type { TestProject } from "vitest/node";

const root = fileURLToPath(new URL("../..", import.meta.url));

declare module "vitest" {
  export interface ProvidedContext {
    kubeconfig: string;
  }
}

export default function setup(project: TestProject): void {
  const started = Date.now();
  const out = execFileSync("bash", [`${root}hack/control-plane.sh`, "up"], { encoding: "utf8", stdio: ["ignore", "pipe", "inherit"] });
  const match = /export KUBECONFIG=(\S+)/.exec(out);
  if (!match) throw new Error(`hack/control-plane.sh up printed no KUBECONFIG: ${out}`);
  const kubeconfig = match[1] as string;
  execFileSync("kubectl", ["apply", "--server-side", "--force-conflicts", "-f", `${root}crds/`], {
    env: { ...process.env, KUBECONFIG: kubeconfig },
    stdio: ["ignore", "ignore", "inherit"],
  });
  execFileSync("kubectl", ["wait", "--for=condition=Established", "--timeout=60s", "crd/agentruns.watchdog.dev"], {
    env: { ...process.env, KUBECONFIG: kubeconfig },
    stdio: ["ignore", "ignore", "inherit"],
  });
  process.stderr.write(`control plane ready in ${Date.now() - started} ms\n`);
  project.provide("kubeconfig", kubeconfig);
}
