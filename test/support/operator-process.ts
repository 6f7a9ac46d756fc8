// Starts the real operator (`node operator/cli/operator.ts`) as a child process against the test
// control plane, scoped to the test's namespace, on free ports.
import { spawn, type ChildProcess } from "node:child_process";
import { freePort } from "../../harness/free-port.ts";
import { fileURLToPath } from "node:url";
import { kubeconfigPath } from "./cluster.ts";
import { waitFor } from "./wait.ts";

const root = fileURLToPath(new URL("../..", import.meta.url));

export { freePort };

export interface OperatorProcess {
  child: ChildProcess;
  metricsUrl: string;
  healthUrl: string;
  logs: string[];
  exited: Promise<number | null>;
  /** Sends a signal and waits for the process to exit. */
  stop(signal?: NodeJS.Signals): Promise<number | null>;
  metrics(): Promise<string>;
}

export async function startOperator(namespace: string, args: string[] = [], env: NodeJS.ProcessEnv = {}): Promise<OperatorProcess> {
  const metricsPort = await freePort();
  const healthPort = await freePort();
  const child = spawn(
    process.execPath,
    [
      `${root}operator/cli/operator.ts`,
      `--namespaces=${namespace}`,
      `--metrics-bind-address=127.0.0.1:${metricsPort}`,
      `--health-probe-bind-address=127.0.0.1:${healthPort}`,
      "--log-level=debug",
      // The template's own identity unless a test asks for another (kwok runs no sandbox that
      // would report, and the fencing tests choose theirs).
      "--sandbox-service-account=none",
      ...args,
    ],
    { env: { ...process.env, KUBECONFIG: kubeconfigPath(), POD_NAME: undefined, ...env }, stdio: ["ignore", "pipe", "pipe"] },
  );
  const logs: string[] = [];
  const collect = (chunk: Buffer) => logs.push(...chunk.toString().split("\n").filter(Boolean));
  child.stdout?.on("data", collect);
  child.stderr?.on("data", collect);
  const exited = new Promise<number | null>((resolve) => child.once("exit", (code) => resolve(code)));
  const proc: OperatorProcess = {
    child,
    metricsUrl: `http://127.0.0.1:${metricsPort}/metrics`,
    healthUrl: `http://127.0.0.1:${healthPort}`,
    logs,
    exited,
    async stop(signal = "SIGTERM") {
      if (child.exitCode === null && child.signalCode === null) child.kill(signal);
      return exited;
    },
    async metrics() {
      return (await fetch(proc.metricsUrl)).text();
    },
  };
  await waitFor("the operator to be ready", async () => {
    if (child.exitCode !== null) throw new Error(`operator exited with ${child.exitCode}: ${logs.slice(-20).join("\n")}`);
    const res = await fetch(`${proc.healthUrl}/readyz`).catch(() => undefined);
    return res?.ok ? true : undefined;
  }, { timeoutMs: 30_000 });
  return proc;
}

/** The value of one series in Prometheus text, or undefined. */
export function metricValue(text: string, series: string): number | undefined {
  for (const line of text.split("\n")) {
    if (line.startsWith(series + " ") || line.startsWith(series + "{") && line.slice(0, line.lastIndexOf(" ")) === series) {
      return Number(line.slice(line.lastIndexOf(" ") + 1));
    }
  }
  return undefined;
}
