// Running the operator: options are validated at start, probes and metrics are served with the
// contract's names, and logs are JSON.
import { execFile } from "node:child_process";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { afterEach, beforeEach, expect, it } from "vitest";
import type { KubeClient } from "../../operator/kube/client.ts";
import { createRun, deleteNamespace, kube, kubeconfigPath, listPods, newNamespace, runManifest } from "../support/cluster.ts";
import { startOperator, type OperatorProcess } from "../support/operator-process.ts";
import { waitFor } from "../support/wait.ts";

const root = fileURLToPath(new URL("../..", import.meta.url));
let client: KubeClient;
let ns: string;
let operator: OperatorProcess | undefined;

beforeEach(async () => {
  client = kube();
  ns = await newNamespace(client, "process");
});

afterEach(async () => {
  await operator?.stop();
  operator = undefined;
  await deleteNamespace(client, ns);
});

it("refuses bad options at start with a message that names the option", async () => {
  const run = (args: string[], env: NodeJS.ProcessEnv = {}) =>
    promisify(execFile)(process.execPath, [`${root}operator/cli/operator.ts`, ...args], { env: { ...process.env, KUBECONFIG: kubeconfigPath(), ...env } }).then(
      () => ({ code: 0, stderr: "" }),
      (err: { code: number; stderr: string }) => ({ code: err.code, stderr: err.stderr }),
    );
  const concurrency = await run(["--concurrency=zero"]);
  expect(concurrency.code).toBe(2);
  expect(concurrency.stderr).toContain("--concurrency");
  const silence = await run(["--watch-silence-limit=soon"]);
  expect(silence.stderr).toContain("--watch-silence-limit");
  const unknown = await run(["--frobnicate"]);
  expect(unknown.stderr).toMatch(/frobnicate/);
  // The ledger's URL carries a password: refused on the command line, and never echoed.
  const url = await run(["--database-url=postgres://watchdog:hunter2@127.0.0.1:1/db"]);
  expect(url.code).toBe(2);
  expect(url.stderr).toContain("--database-url is not accepted: a password on the command line is visible to every user in ps");
  expect(url.stderr).not.toContain("hunter2");
  const defaults = await run([], { WATCHDOG_DEFAULTS: JSON.stringify({ heartbeatTimeout: "5 minutes" }) });
  expect(defaults.code).toBe(2);
  expect(defaults.stderr).toContain("heartbeatTimeout");
});

it("serves probes and the contract's metrics, and logs JSON", async () => {
  operator = await startOperator(ns, [], { WATCHDOG_DEFAULTS: JSON.stringify({ maxRestarts: 7 }) });
  expect((await fetch(`${operator.healthUrl}/healthz`)).status).toBe(200);
  expect((await fetch(`${operator.healthUrl}/readyz`)).status).toBe(200);
  await createRun(client, ns, runManifest("metrics", { heartbeatTimeout: "5m" }));
  await waitFor("pod", async () => (await listPods(client, ns, "metrics")).length === 1);
  const text = await waitFor("phase gauge", async () => {
    const t = await operator!.metrics();
    return /watchdog_agentruns\{phase="Starting"\} 1/.test(t) ? t : undefined;
  });
  for (const series of [
    "controller_runtime_reconcile_total",
    "controller_runtime_reconcile_time_seconds",
    "workqueue_depth",
    "workqueue_adds_total",
    "workqueue_retries_total",
    "leader_election_master_status",
    "watchdog_agentruns",
    "watchdog_hung_sandboxes_killed_total",
    "watchdog_nudges_total",
    "watchdog_detection_latency_seconds",
  ]) {
    expect(text, series).toContain(`# TYPE ${series} `);
  }
  const run = await client.get<any>(`/apis/watchdog.dev/v1alpha1/namespaces/${ns}/agentruns/metrics`);
  expect(run.status.watchdog.maxRestarts).toBe(7); // install defaults reach the run, visibly
  const lines = operator.logs.filter((l) => l.startsWith("{"));
  expect(lines.length).toBeGreaterThan(0);
  for (const line of lines) {
    expect(() => JSON.parse(line)).not.toThrow();
    // JSON.parse keeps the last of two equal keys; a log shipper may keep either.
    const keys = topLevelKeys(line);
    expect(new Set(keys).size, line).toBe(keys.length);
  }
  const reconciled = lines.map((l) => JSON.parse(l)).find((l) => l.reconcileID && l.namespace === ns);
  expect(reconciled).toMatchObject({ logger: "agent-watchdog", name: "metrics" });
  // started with the template's own sandbox identity (the default outside the chart), it says so
  const unfenced = lines.map((l) => JSON.parse(l)).find((l) => l.sandboxServiceAccount === "none");
  expect(unfenced?.level, "a warning that sandboxes run unfenced").toBe("warn");
});

it("runs sandboxes under a per-namespace ServiceAccount with a pod-bound token", async () => {
  operator = await startOperator(ns, ["--sandbox-service-account=namespace"]);
  await createRun(client, ns, runManifest("identity", { heartbeatTimeout: "5m" }));
  const pod = await waitFor("pod", async () => (await listPods(client, ns, "identity"))[0]);
  expect(pod.spec.serviceAccountName).toBe("agent-watchdog-sandbox");
  expect(pod.spec.automountServiceAccountToken).toBe(false);
  expect(pod.spec.volumes.some((v: any) => v.projected?.sources?.some((s: any) => s.serviceAccountToken))).toBe(true);
  expect(pod.spec.securityContext).toMatchObject({ runAsNonRoot: true, seccompProfile: { type: "RuntimeDefault" } });
  const sa = await client.get<any>(`/api/v1/namespaces/${ns}/serviceaccounts/agent-watchdog-sandbox`);
  expect(sa.automountServiceAccountToken).toBe(false);
  const binding = await client.get<any>(`/apis/rbac.authorization.k8s.io/v1/namespaces/${ns}/rolebindings/agent-watchdog-sandbox`);
  expect(binding.roleRef).toMatchObject({ kind: "ClusterRole", name: "agent-watchdog-sandbox" });
  expect(operator.logs.filter((l) => l.includes('"sandboxServiceAccount":"none"')), "no unfenced warning with an identity of the operator's").toEqual([]);
});

/** The keys of a JSON object's outermost level, duplicates included (JSON.parse drops them). */
function topLevelKeys(json: string): string[] {
  const keys: string[] = [];
  let depth = 0;
  for (let i = 0; i < json.length; i++) {
    const c = json[i];
    if (c === "{" || c === "[") depth++;
    else if (c === "}" || c === "]") depth--;
    else if (c === '"') {
      let end = i + 1;
      while (json[end] !== '"') end += json[end] === "\\" ? 2 : 1;
      if (depth === 1 && json[end + 1] === ":") keys.push(json.slice(i + 1, end));
      i = end;
    }
  }
  return keys;
}
