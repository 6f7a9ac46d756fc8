// The operator as a local process, for the demo and the end-to-end tests, and its ledger's view
// of a run.
import { spawn, type ChildProcess } from "node:child_process";
import { closeSync, openSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import type { KubeClient } from "../operator/kube/client.ts";
import type { RunHistory } from "../operator/ledger/read.ts";
import { freePort } from "./free-port.ts";
import { pollUntil } from "./cluster.ts";
import { serviceAccountToken } from "./service-account.ts";
import type { Run } from "./driver.ts";

const root = fileURLToPath(new URL("..", import.meta.url));

export interface OperatorHandle {
  child: ChildProcess;
  metricsUrl: string;
  baseUrl: string;
  logFile: string;
  stop(): Promise<void>;
}

/** Starts `node operator/cli/operator.ts` for one namespace, with the ledger, logging to a file. */
export async function startOperator(options: {
  kubeconfig: string;
  namespace: string;
  databaseUrl: string;
  logFile: string;
  signal?: AbortSignal;
  /** More environment (OTEL_* for traces). */
  env?: Record<string, string>;
}): Promise<OperatorHandle> {
  const metricsPort = await freePort();
  const healthPort = await freePort();
  const fd = openSync(options.logFile, "a");
  // The ledger's URL in the environment: on the command line ps would show its password.
  const env: NodeJS.ProcessEnv = { ...process.env, ...options.env, KUBECONFIG: options.kubeconfig, DATABASE_URL: options.databaseUrl };
  delete env.POD_NAME;
  const child = spawn(
    process.execPath,
    [
      join(root, "operator/cli/operator.ts"),
      `--namespaces=${options.namespace}`,
      `--metrics-bind-address=127.0.0.1:${metricsPort}`,
      `--health-probe-bind-address=127.0.0.1:${healthPort}`,
      "--log-level=info",
      // The demo's sandboxes are local processes started by the sandbox runner, with its
      // credentials: no pod-bound identity to make for them.
      "--sandbox-service-account=none",
    ],
    // Its own process group: a Ctrl-C reaches the demo, which stops the operator in order.
    { env, stdio: ["ignore", fd, fd], detached: true },
  );
  closeSync(fd);
  const exited = new Promise<void>((resolve) => child.once("close", () => resolve()));
  const handle: OperatorHandle = {
    child,
    baseUrl: `http://127.0.0.1:${metricsPort}`,
    metricsUrl: `http://127.0.0.1:${metricsPort}/metrics`,
    logFile: options.logFile,
    async stop() {
      if (child.exitCode !== null || child.signalCode !== null) return;
      child.kill("SIGTERM");
      const timer = setTimeout(() => child.kill("SIGKILL"), 10_000);
      await exited;
      clearTimeout(timer);
    },
  };
  try {
    await pollUntil("the operator to be ready", 60_000, async () => {
      if (child.exitCode !== null) throw new Error(`the operator exited with ${child.exitCode}; see ${options.logFile}`);
      const res = await fetch(`http://127.0.0.1:${healthPort}/readyz`).catch(() => undefined);
      return res?.ok === true;
    }, options.signal);
  } catch (err) {
    await handle.stop();
    throw err;
  }
  return handle;
}

/**
 * A token the demo reads histories with: a ServiceAccount of the demo's namespace whose only
 * permission is `get` on its AgentRuns. The operator serves a run's history only to a caller the
 * API server lets get that run, so this is what any reader of the history needs.
 */
export function historyReaderToken(client: KubeClient, namespace: string): Promise<string> {
  return serviceAccountToken(client, namespace, "demo-history-reader", [{ apiGroups: ["watchdog.dev"], resources: ["agentruns"], verbs: ["get"] }]);
}

/** A run's history as the operator's ledger serves it, once it has caught up with the run. */
export async function ledgerHistory(
  operatorFetch: (path: string, headers: Record<string, string>) => Promise<Response>,
  namespace: string,
  run: Run,
  token: string,
  timeoutMs = 20_000,
): Promise<RunHistory | undefined> {
  let history: RunHistory | undefined;
  const want = (run.status?.transitions ?? []) as { phase: string }[];
  const { name, uid } = run.metadata;
  try {
    await pollUntil(`the ledger to hold ${name}'s history`, timeoutMs, async () => {
      const res = await operatorFetch(`/history/${encodeURIComponent(namespace)}/${encodeURIComponent(name)}?uid=${encodeURIComponent(uid)}`, { authorization: `Bearer ${token}` });
      if (!res.ok) return false;
      history = (await res.json()) as RunHistory;
      return history.transitions.length >= want.length && history.transitions.at(-1)?.phase === run.status?.phase;
    });
  } catch {
    // What the ledger has so far is still worth showing.
  }
  return history;
}
