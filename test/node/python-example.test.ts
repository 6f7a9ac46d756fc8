// The Python SDK in a real pod: the example agent (operator/python/example_agent.py) in its own
// image (operator/python/Dockerfile, built with no registry by hack/images.sh --python-example),
// run by the operator on the real node in a namespace that enforces the restricted pod security
// standard, with nothing but the pod's service-account token to reach the API server.
import { afterAll, beforeAll, expect, inject, it } from "vitest";
import { RESTRICTED_NAMESPACE } from "../../harness/cluster.ts";
import { command } from "../../harness/real-node.ts";
import { paths, type KubeClient } from "../../operator/kube/client.ts";
import { kubectl, ok } from "../chart/support.ts";
import { deleteNamespace, kube, newNamespace } from "../support/cluster.ts";
import { startOperator, type OperatorProcess } from "../support/operator-process.ts";
import { waitFor } from "../support/wait.ts";
import { containerdSocket, ensureSandboxRole, SANDBOX_FLAGS } from "./support.ts";

const root = new URL("../..", import.meta.url).pathname;

let client: KubeClient;
let ns: string;
let operator: OperatorProcess;
let image: string;

beforeAll(async () => {
  client = kube();
  const built = await command("bash", [`${root}hack/images.sh`, "--python-example"], { env: { AGENT_WATCHDOG_STATE: inject("nodeState") } });
  image = built.trim().split("\n").at(-1) ?? "";
  expect(image).toMatch(/^localhost\/agent-watchdog-python-example:/);
  // What the chart's sandbox ClusterRole grants; the operator binds each namespace's sandboxes to it.
  await ensureSandboxRole(client);
  ns = await newNamespace(client, "aw-python", RESTRICTED_NAMESPACE);
  operator = await startOperator(ns, SANDBOX_FLAGS);
}, 600_000);

afterAll(async () => {
  await operator?.stop();
  await deleteNamespace(client, ns);
});

it("completes a run with the Python example agent in a real pod, its tool calls and checkpoints in status", { timeout: 180_000 }, async () => {
  await client.create(paths.runs(ns), {
    apiVersion: "watchdog.dev/v1alpha1",
    kind: "AgentRun",
    metadata: { name: "python" },
    spec: {
      goal: "count the words of this goal",
      template: { spec: { containers: [{ name: "agent", image, env: [{ name: "EXAMPLE_REPORT_DIR", value: "/tmp" }] }] } },
      watchdog: { heartbeatTimeout: "30s" },
    },
  });
  const done = await waitFor("the run Completed", async () => {
    const r = await client.get<any>(paths.run(ns, "python"));
    if (r.status?.phase === "Failed" || r.status?.phase === "NeedsHumanIntervention") throw new Error(`the run ended ${r.status.phase}: ${r.status.reason} ${r.status.message}`);
    return r.status?.phase === "Completed" ? r : undefined;
  }, { timeoutMs: 150_000 });

  expect(done.status.toolCalls.map((c: any) => [c.name, c.state, c.attempt])).toEqual([
    ["count_words", "Succeeded", 1],
    ["write_report", "Succeeded", 1],
  ]);
  expect(done.status.toolCalls[0].result).toBe("6");
  expect(done.status.checkpoint).toEqual({ step: 2, data: { lines: ["the goal has 6 words"] } });
  expect(done.status.heartbeat).toMatchObject({ attempt: 1, activity: { kind: "text" } });

  // What ran on the node: the pod's container exited 0 from the Python image, its output is the
  // SDK's JSON log lines as the kubelet serves them, and containerd holds that container.
  const pods = (await client.get<{ items: any[] }>(paths.pods(ns), { labelSelector: "watchdog.dev/run=python" })).items;
  expect(pods).toHaveLength(1);
  const pod = pods[0];
  const agent = pod.status.containerStatuses.find((c: any) => c.name === "agent");
  expect(agent.state.terminated).toMatchObject({ exitCode: 0 });
  expect(agent.image).toContain("agent-watchdog-python-example");
  const logs = ok(await kubectl(["logs", "-n", ns, pod.metadata.name, "-c", "agent"]), "kubectl logs").stdout;
  const records = logs.split("\n").filter((l) => l.startsWith("{")).map((l) => JSON.parse(l));
  expect(records.length).toBeGreaterThan(0);
  expect(records.every((r) => r.run === "python" && r.attempt === 1)).toBe(true);
  const containers = await command("ctr", ["--address", containerdSocket(), "--namespace", "k8s.io", "containers", "ls", `labels."io.kubernetes.pod.name"==${pod.metadata.name}`]);
  expect(containers).toContain(image);
});
