// Two replicas with --leader-elect: only the leader writes; when it dies, the other takes over
// within 20 s (lease 15 s, retry 2 s).
import { afterEach, beforeEach, expect, it } from "vitest";
import { paths, type KubeClient } from "../../operator/kube/client.ts";
import { createRun, deleteNamespace, getRun, kube, listPods, newNamespace, runManifest } from "../support/cluster.ts";
import { metricValue, startOperator, type OperatorProcess } from "../support/operator-process.ts";
import { waitFor } from "../support/wait.ts";

let client: KubeClient;
let ns: string;
const operators: OperatorProcess[] = [];

beforeEach(async () => {
  client = kube();
  ns = await newNamespace(client, "leader");
});

afterEach(async (ctx) => {
  for (const op of operators.splice(0)) {
    if (ctx.task.result?.state === "fail") console.error(op.logs.slice(-30).join("\n"));
    await op.stop("SIGKILL");
  }
  await deleteNamespace(client, ns);
});

async function leaderOf(ops: OperatorProcess[]): Promise<OperatorProcess | undefined> {
  for (const op of ops) {
    if (op.child.exitCode !== null || op.child.signalCode !== null) continue;
    const text = await op.metrics().catch(() => "");
    if (metricValue(text, 'leader_election_master_status{name="agent-watchdog.watchdog.dev"}') === 1) return op;
  }
  return undefined;
}

it("lets only the leader write, and fails over within 20 s when it is killed", async () => {
  const args = ["--leader-elect", `--leader-election-namespace=${ns}`];
  const a = await startOperator(ns, args, { POD_NAME: "replica-a" });
  const b = await startOperator(ns, args, { POD_NAME: "replica-b" });
  operators.push(a, b);
  const leader = await waitFor("a leader", () => leaderOf([a, b]), { timeoutMs: 30_000 });
  const follower = leader === a ? b : a;
  const lease = await client.get<any>(paths.lease(ns, "agent-watchdog.watchdog.dev"));
  expect(lease.spec.holderIdentity).toBe(leader === a ? "replica-a" : "replica-b");

  await createRun(client, ns, runManifest("led", { heartbeatTimeout: "5m" }));
  await waitFor("pod led-1", async () => (await listPods(client, ns, "led")).length === 1);
  await waitFor("led Starting", async () => (await getRun(client, ns, "led")).status?.phase === "Starting");
  // Only the leader wrote: the follower made no write requests at all.
  const followerWrites = (await follower.metrics())
    .split("\n")
    .filter((l) => l.startsWith("rest_client_requests_total") && /method="(POST|PUT|PATCH|DELETE)"/.test(l))
    .reduce((sum, l) => sum + Number(l.slice(l.lastIndexOf(" ") + 1)), 0);
  expect(followerWrites).toBe(0);

  await leader.stop("SIGKILL");
  const killedAt = Date.now();
  const next = await waitFor("the follower to lead", () => leaderOf([follower]), { timeoutMs: 25_000, intervalMs: 200 });
  const takeover = Date.now() - killedAt;
  expect(next).toBe(follower);
  expect(takeover).toBeLessThan(20_000);

  // and the new leader reconciles
  await createRun(client, ns, runManifest("after-failover", { heartbeatTimeout: "5m" }));
  await waitFor("pod after-failover-1", async () => (await listPods(client, ns, "after-failover")).length === 1, { timeoutMs: 15_000 });
});

it("releases the lease on SIGTERM so the other replica takes over at once", async () => {
  const args = ["--leader-elect", `--leader-election-namespace=${ns}`];
  const a = await startOperator(ns, args, { POD_NAME: "replica-a" });
  operators.push(a);
  await waitFor("a leads", () => leaderOf([a]), { timeoutMs: 30_000 });
  const b = await startOperator(ns, args, { POD_NAME: "replica-b" });
  operators.push(b);
  expect(await a.stop("SIGTERM")).toBe(0);
  const stoppedAt = Date.now();
  await waitFor("b leads", () => leaderOf([b]), { timeoutMs: 15_000, intervalMs: 200 });
  expect(Date.now() - stoppedAt).toBeLessThan(6_000);
});
