// The test run's set-up, as one ordered list of steps shared by every suite's global setup: the
// kwok cluster, PostgreSQL, the console's pages, the real node. A step runs at most once per test
// run, and never beside another step: each starts only when the one before it has finished, so
// no two of them fight for the disk and the CPU (a cold kube-apiserver or kwok being paged in
// while the real node imports images, say), whichever order the suites ask in. A step that failed
// fails every suite that needs it, with its own error.
import { execFileSync } from "node:child_process";
import { fileURLToPath } from "node:url";
import { applyCrds, clientFor, exported, runScript } from "../../harness/cluster.ts";
import { realNodeUp, type RealNode } from "../../harness/real-node.ts";

const root = fileURLToPath(new URL("../..", import.meta.url));

interface Steps {
  /** Resolves when the newest step has ended (well or not). */
  tail: Promise<unknown>;
  started: Map<string, Promise<unknown>>;
}

// Kept on globalThis: each suite's setup file is loaded as a module of its own, but all of them run
// in the one process of the test runner, so they all see the same list.
const KEY = Symbol.for("agent-watchdog.test-setup-steps");
const steps: Steps = ((globalThis as Record<symbol, Steps | undefined>)[KEY] ??= { tail: Promise.resolve(), started: new Map() });

/** Runs `run` once per test run, after every step asked for before it has ended. */
export function step<T>(name: string, run: () => Promise<T>): Promise<T> {
  const known = steps.started.get(name);
  if (known) return known as Promise<T>;
  const started = Date.now();
  const result = steps.tail.then(run).then((value) => {
    process.stderr.write(`[setup] ${name} ready in ${Date.now() - started} ms\n`);
    return value;
  });
  steps.started.set(name, result);
  steps.tail = result.catch(() => undefined);
  return result;
}

async function script(name: string, args: string[], variable: string, env?: Record<string, string>): Promise<string> {
  const { code, stdout } = await runScript(name, args, env ? { env } : {});
  const value = exported(stdout, variable);
  if (code !== 0 || !value) throw new Error(`hack/${name} ${args.join(" ")} failed (exit ${code}): ${stdout}`);
  return value;
}

/** The control plane (API server, etcd, controller manager) with kube-scheduler, kwok and a fake node, and the CRDs: its kubeconfig. */
export const kwokCluster = () =>
  step("the control plane with a kwok node and the CRDs", async () => {
    const kubeconfig = await script("control-plane.sh", ["up", "--nodes"], "KUBECONFIG");
    await applyCrds(clientFor(kubeconfig));
    return kubeconfig;
  });

/** The shared PostgreSQL server: its URL. */
export const postgres = () => step("PostgreSQL", () => script("postgres.sh", ["up"], "DATABASE_URL"));

/** The console's pages, built as the package builds them (npm run build:console). */
export const consolePages = () =>
  step("the console's pages", async () => {
    execFileSync(process.execPath, [`${root}node_modules/vite/bin/vite.js`, "build", "--config", `${root}operator/console/ui/vite.config.ts`, "--logLevel", "warn"], {
      cwd: root,
      stdio: ["ignore", "inherit", "inherit"],
    });
  });

/** The real-node cluster, its node holding the project image, with the CRDs. */
export const realNode = () =>
  step("the real node, the project image and the CRDs", async (): Promise<RealNode> => {
    const node = await realNodeUp();
    await applyCrds(clientFor(node.kubeconfig));
    return node;
  });

/** The pinned helm and kubectl of the control plane's build. */
export const pinnedTools = () =>
  step("the pinned helm and kubectl", async () => {
    const bin = async (tool: string) => (await runScript("control-plane.sh", ["bin", tool])).stdout.trim();
    return { helm: await bin("helm"), kubectl: await bin("kubectl") };
  });
