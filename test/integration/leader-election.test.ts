// Two replicas with --leader-elect: only the leader writes; when it dies, the other takes over
// within 20 s (lease 15 s, retry 2 s); a leader cut off from the API server stops before the other
// can take over; a graceful stop hands over at once.
import { afterEach, beforeEach, expect, it } from "vitest";
import { LEADER_DEFAULTS } from "../../operator/controller/leader.ts";
import { paths, type KubeClient } from "../../operator/kube/client.ts";
import { createRun, deleteNamespace, getRun, kube, listPods, newNamespace, runManifest } from "../support/cluster.ts";
import { metricValue, startOperator, type OperatorProcess } from "../support/operator-process.ts";
import { startApiProxy, type TcpProxy } from "../support/tcp-proxy.ts";
import { waitFor } from "../support/wait.ts";

let client: KubeClient;
let ns: string;
const operators: OperatorProcess[] = [];
const proxies: TcpProxy[] = [];
const LEASE = "agent-watchdog.watchdog.dev";

beforeEach(async () => {
  client = kube();
  ns = await newNamespace(client, "leader");
});

afterEach(async (ctx) => {
  for (const op of operators.splice(0)) {
    if (ctx.task.result?.state === "fail") console.error(op.logs.slice(-30).join("\n"));
    await op.stop("SIGKILL");
  }
  for (const proxy of proxies.splice(0)) await proxy.close();
  await deleteNamespace(client, ns);
});

async function leaderOf(ops: OperatorProcess[]): Promise<OperatorProcess | undefined> {
  for (const op of ops) {
    if (op.child.exitCode !== null || op.child.signalCode !== null) continue;
    const text = await op.metrics().catch(() => "");
    if (metricValue(text, `leader_election_master_status{name="${LEASE}"}`) === 1) return op;
  }
  return undefined;
}

/** When the operator logged `msg` first, by its own clock (the same machine's as the test's). */
function loggedAt(op: OperatorProcess, msg: string): number | undefined {
  for (const line of op.logs) {
    if (!line.includes(msg)) continue;
    try {
      const entry = JSON.parse(line) as { msg?: string; time?: string };
      if (entry.msg === msg && entry.time) return Date.parse(entry.time);
    } catch {
      // not a log line of the operator's
    }
  }
  return undefined;
}

interface LeaseSpec {
  holderIdentity?: string;
  renewTime?: string;
  acquireTime?: string;
}

const leaseSpec = async () => (await client.get<{ spec: LeaseSpec }>(paths.lease(ns, LEASE))).spec;

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

it("a leader whose API traffic stalls stops writing before another replica can take over", async () => {
  const { leaseDurationMs, renewDeadlineMs } = LEADER_DEFAULTS;
  const proxy = await startApiProxy();
  proxies.push(proxy);
  const args = ["--leader-elect", `--leader-election-namespace=${ns}`];
  const a = await startOperator(ns, args, { POD_NAME: "replica-a", KUBECONFIG: proxy.kubeconfig });
  operators.push(a);
  let exitedAt: number | undefined;
  void a.exited.then(() => (exitedAt = Date.now()));
  await waitFor("a leads", () => leaderOf([a]), { timeoutMs: 30_000 });
  const b = await startOperator(ns, args, { POD_NAME: "replica-b" });
  operators.push(b);
  // Work for the leader: it creates the pod and writes the status, through the proxy.
  await createRun(client, ns, runManifest("stalled", { heartbeatTimeout: "5m" }));
  await waitFor("stalled Starting", async () => (await getRun(client, ns, "stalled")).status?.phase === "Starting");

  proxy.stall();
  const stalledAt = Date.now();
  // The newest record of A's that reached the server: a renew already on its way when the stall
  // began may still land, and B counts its lease duration from the last change it saw.
  let lastRenewTime = 0;
  const lostAt = await waitFor(
    "a to give up the lease",
    async () => {
      const spec = await leaseSpec();
      if (spec.holderIdentity === "replica-a" && spec.renewTime) lastRenewTime = Math.max(lastRenewTime, Date.parse(spec.renewTime));
      return loggedAt(a, "could not renew the lease within the renew deadline");
    },
    { timeoutMs: renewDeadlineMs + 10_000, intervalMs: 100 },
  );
  expect(lostAt - stalledAt).toBeLessThanOrEqual(renewDeadlineMs + 2_000);
  expect(lostAt - lastRenewTime).toBeLessThanOrEqual(renewDeadlineMs + 1_000);
  expect(await a.exited).toBe(1);

  await waitFor("b leads", () => leaderOf([b]), { timeoutMs: leaseDurationMs + 10_000, intervalMs: 200 });
  const taken = await leaseSpec();
  expect(taken.holderIdentity).toBe("replica-b");
  const acquiredAt = Date.parse(taken.acquireTime ?? "");
  // B waited a whole lease duration from A's last record (a wall clock may slew a few ms against
  // the monotonic one B measures with) ...
  expect(acquiredAt - lastRenewTime).toBeGreaterThan(leaseDurationMs - 100);
  // ... and by then A had stopped leading and its process was gone: it can write nothing more.
  expect(acquiredAt).toBeGreaterThan(lostAt);
  expect(exitedAt).toBeDefined();
  expect(exitedAt!).toBeLessThan(acquiredAt);

  // What A had sent into the stalled connections now reaches the server; the lease stays B's and
  // B goes on reconciling.
  proxy.resume();
  await createRun(client, ns, runManifest("after-stall", { heartbeatTimeout: "5m" }));
  await waitFor("pod after-stall-1", async () => (await listPods(client, ns, "after-stall")).length === 1, { timeoutMs: 15_000 });
  expect((await leaseSpec()).holderIdentity).toBe("replica-b");
  console.info(`stall -> A stops: ${lostAt - stalledAt} ms; A's last renew -> B acquires: ${acquiredAt - lastRenewTime} ms`);
});

it("a graceful SIGTERM hands over in at most 3 s", async () => {
  const args = ["--leader-elect", `--leader-election-namespace=${ns}`];
  const a = await startOperator(ns, args, { POD_NAME: "replica-a" });
  operators.push(a);
  await waitFor("a leads", () => leaderOf([a]), { timeoutMs: 30_000 });
  const b = await startOperator(ns, args, { POD_NAME: "replica-b" });
  operators.push(b);
  await createRun(client, ns, runManifest("handed-over", { heartbeatTimeout: "5m" }));
  await waitFor("handed-over Starting", async () => (await getRun(client, ns, "handed-over")).status?.phase === "Starting");

  const signalledAt = Date.now();
  a.child.kill("SIGTERM");
  await waitFor("b leads", () => leaderOf([b]), { timeoutMs: 10_000, intervalMs: 50 });
  const handover = Date.now() - signalledAt;
  expect(handover).toBeLessThan(3_000);
  expect((await leaseSpec()).holderIdentity).toBe("replica-b");
  expect(await a.exited).toBe(0);
  // The lease went back before anything slow was waited for: B's retry period is the rest.
  const released = loggedAt(a, "released the lease");
  expect(released).toBeDefined();
  expect(released! - signalledAt).toBeLessThan(1_000);
  console.info(`SIGTERM -> A released: ${released! - signalledAt} ms; SIGTERM -> B leads: ${handover} ms`);
});
