// A healthy run, observed the way the controller observes it (every version, often repeatedly,
// sometimes an older cached version after a newer one), ends up in the ledger complete, in order
// and exactly once; and its history reads back the same through the API, HTTP and the CLI.
import { spawn } from "node:child_process";
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { fileURLToPath } from "node:url";
import { expect, it } from "vitest";
import type { Json } from "../../operator/kube/client.ts";
import type { Ledger } from "../../operator/ledger/ledger.ts";
import type { RunHistory } from "../../operator/ledger/read.ts";
import { historyRoute, type HistoryAccess } from "../../operator/ledger/serve.ts";
import { waitFor } from "../support/wait.ts";
import { fileDatabase, ledgerProblems, NODE, RunSim } from "./support.ts";

const root = fileURLToPath(new URL("../..", import.meta.url));

const file = fileDatabase(import.meta.filename);
const openLedger = file.openLedger.bind(file);

/** Queued -> Starting -> Planning -> ExecutingTool -> Planning -> Completed, one object per change. */
function healthyRun(name: string): { sim: RunSim; versions: Json[] } {
  const sim = new RunSim("team-a", name);
  const versions: Json[] = [];
  const step = () => versions.push(sim.object());
  sim.to("Queued");
  step();
  sim.to("Starting", "PodCreated", `created pod ${name}-1`);
  step();
  sim.to("Planning", "Heartbeat");
  step();
  const search = sim.startCall("search");
  step();
  sim.to("ExecutingTool", "ToolStarted");
  step();
  sim.finishCall(search);
  step();
  const fetch = sim.startCall("fetch");
  step();
  sim.finishCall(fetch);
  step();
  sim.to("Planning", "Heartbeat");
  step();
  sim.to("Completed", "PodSucceeded", "the sandbox exited 0");
  step();
  return { sim, versions };
}

async function settled(ledger: Ledger, sims: RunSim[]): Promise<void> {
  await waitFor(
    "the ledger to hold every row",
    async () => ledger.bufferedRows === 0 && (await ledgerProblems(file.db, sims)).length === 0,
    { timeoutMs: 20_000, intervalMs: 50 },
  ).catch(async (err: Error) => {
    throw new Error(`${err.message}\n${(await ledgerProblems(file.db, sims)).join("\n")}`);
  });
}

function expectedHistory(sim: RunSim): Pick<RunHistory, "namespace" | "name" | "uids" | "transitions" | "gaps"> {
  return {
    namespace: sim.namespace,
    name: sim.name,
    uids: [sim.uid],
    transitions: sim.history.map((t) => ({ runUid: sim.uid, namespace: sim.namespace, name: sim.name, ...t })),
    gaps: [],
  };
}

it("records a healthy run completely, in order, and once, however often it is observed", async () => {
  const ledger = openLedger();
  const { sim, versions } = healthyRun("healthy");
  // Each version several times (resyncs, wake-ups), then all of them again, out of order.
  for (const version of versions) for (let i = 0; i < 5; i++) ledger.observe(version);
  for (const version of [...versions].reverse()) ledger.observe(version);
  await settled(ledger, [sim]);

  const history = await ledger.history(sim.namespace, sim.name);
  expect(history).toMatchObject(expectedHistory(sim));
  expect(history?.transitions.map((t) => t.phase)).toEqual(["Queued", "Starting", "Planning", "ExecutingTool", "Planning", "Completed"]);
  expect(history?.toolCalls.map((c) => [c.name, c.state])).toEqual([
    ["search", "Succeeded"],
    ["fetch", "Succeeded"],
  ]);
  const search = sim.calls.get(history?.toolCalls[0]?.id ?? "");
  expect(history?.toolCalls[0]).toMatchObject({
    id: search?.id,
    argsHash: search?.argsHash,
    idempotencyKey: search?.idempotencyKey,
    idempotent: search?.idempotent,
    attempt: 1,
    startedAt: search?.startedAt,
    finishedAt: search?.finishedAt,
    result: search?.result,
  });
  expect(await ledger.historyByUid(sim.uid)).toEqual(history);
  expect(ledger.lostRows).toBe(0);

  // A second ledger (another replica, or a restart) observing it all again adds nothing.
  const again = openLedger();
  for (const version of versions) again.observe(version);
  await waitFor("the second ledger to write", () => again.bufferedRows === 0 && again.lastFlushTime !== undefined);
  expect(await ledger.history(sim.namespace, sim.name)).toEqual(history);
});

it("never moves a tool call's state backwards", async () => {
  const sim = new RunSim("team-a", "forward");
  sim.to("Queued").to("Starting").to("Planning");
  const ok = sim.startCall("search");
  const bad = sim.startCall("deploy");
  const started = sim.object();
  sim.finishCall(ok).finishCall(bad, { httpStatus: 429, message: "slow down" });
  const finished = sim.object();

  const ledger = openLedger();
  ledger.observe(finished);
  ledger.observe(started); // a stale cached version after the newer one
  await settled(ledger, [sim]);

  // A fresh ledger has no memory of the calls: only the database can refuse the step back.
  const fresh = openLedger();
  fresh.observe(started);
  await waitFor("the fresh ledger to write", () => fresh.bufferedRows === 0 && fresh.lastFlushTime !== undefined);
  const history = await fresh.history(sim.namespace, sim.name);
  expect(history?.toolCalls.map((c) => [c.name, c.state, c.error])).toEqual([
    ["search", "Succeeded", undefined],
    ["deploy", "Failed", { httpStatus: 429, message: "slow down" }],
  ]);
  expect(await ledgerProblems(file.db, [sim])).toEqual([]);
});

it("keeps runs that reuse a name apart", async () => {
  const ledger = openLedger();
  const first = new RunSim("team-b", "reused", Date.now() - 60_000).to("Queued").to("Starting").to("Failed", "PodFailed");
  const second = new RunSim("team-b", "reused").to("Queued");
  ledger.observe(first.object());
  ledger.observe(second.object());
  await settled(ledger, [first, second]);
  const history = await ledger.history("team-b", "reused");
  expect(history?.uids).toEqual([first.uid, second.uid]);
  expect(history?.transitions.map((t) => [t.runUid, t.phase])).toEqual([
    [first.uid, "Queued"],
    [first.uid, "Starting"],
    [first.uid, "Failed"],
    [second.uid, "Queued"],
  ]);
  expect((await ledger.historyByUid(second.uid))?.transitions).toHaveLength(1);
  expect(await ledger.history("team-b", "never-existed")).toBeUndefined();
});

it("ignores objects and entries it cannot make sense of", async () => {
  const ledger = openLedger();
  const sim = new RunSim("team-a", "odd").to("Queued").to("Starting");
  const object = sim.object() as any;
  object.status.transitions.push({ phase: "Planning", time: "not a time", attempt: 1 }, null, "text");
  object.status.toolCalls = [{ id: "x", name: "t", state: "Exploded" }, { name: "no id", state: "Started" }];
  object.status.transitions[0].message = "nul\u0000byte";
  // observe() never throws on the reconcile path, whatever the object holds.
  expect(() => {
    ledger.observe(object);
    ledger.observe({ metadata: {} });
    ledger.observe({ metadata: { uid: "u", namespace: "n", name: "x" }, status: { transitions: "nope" } });
  }).not.toThrow();
  await settled(ledger, [sim]);
  expect((await ledger.history(sim.namespace, sim.name))?.transitions[0]?.message).toBe("nulbyte");
  expect(ledger.lostRows).toBe(0);
  expect(ledger.failedFlushes).toBe(0);
});

// The API server's part (TokenReview, SubjectAccessReview) is tested against a real one in the
// integration suite; here a stand-in lets one token read one run, so that what the route does
// with the ledger is what is tested.
const READER_TOKEN = "reader-token";
const standInAccess = (allowed: { namespace: string; name: string }): HistoryAccess => ({
  async check(req, attributes) {
    const token = req.headers.authorization?.replace(/^Bearer /, "");
    if (!token) return { allowed: false, code: 401, reason: "a bearer token is required" };
    const r = "resource" in attributes ? attributes.resource : undefined;
    if (token !== READER_TOKEN || r?.namespace !== allowed.namespace || r.name !== allowed.name) return { allowed: false, code: 403, reason: "not this one" };
    return { allowed: true, caller: { username: "reader", groups: [] } };
  },
});

async function serve(ledger: Ledger, access: HistoryAccess): Promise<{ server: Server; base: string; reads: () => number }> {
  let reads = 0;
  const counted = {
    history: (namespace: string, name: string) => (reads++, ledger.history(namespace, name)),
    historyByUid: (uid: string) => (reads++, ledger.historyByUid(uid)),
  };
  const route = historyRoute(counted, access);
  const server = createServer((req, res) => {
    const url = new URL(req.url ?? "/", "http://localhost");
    void route(req, res, url).then((served) => {
      if (!served) res.writeHead(418).end("not the ledger's\n");
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  return { server, base: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, reads: () => reads };
}

it("serves a run's history over HTTP to a caller who may read the run, and reads the ledger only then", async () => {
  const ledger = openLedger();
  const { sim, versions } = healthyRun("served");
  for (const version of versions) ledger.observe(version);
  const other = healthyRun("other-run");
  for (const version of other.versions) ledger.observe(version);
  await settled(ledger, [sim, other.sim]);
  const { server, base, reads } = await serve(ledger, standInAccess({ namespace: sim.namespace, name: sim.name }));
  const as = { headers: { authorization: `Bearer ${READER_TOKEN}` } };
  try {
    const refusedAnonymous = await fetch(`${base}/history/${sim.namespace}/${sim.name}`);
    expect(refusedAnonymous.status).toBe(401);
    expect(refusedAnonymous.headers.get("www-authenticate")).toMatch(/^Bearer/);
    expect((await fetch(`${base}/history/${sim.namespace}/${other.sim.name}`, as)).status).toBe(403);
    expect(reads(), "the ledger is not read for a refused caller").toBe(0);

    const response = await fetch(`${base}/history/${sim.namespace}/${sim.name}`, as);
    expect(response.status).toBe(200);
    expect(response.headers.get("content-type")).toBe("application/json");
    const body = (await response.json()) as RunHistory;
    expect(body).toEqual(await ledger.history(sim.namespace, sim.name));
    expect(body).toMatchObject(expectedHistory(sim));

    expect(await (await fetch(`${base}/history/${sim.namespace}/${sim.name}?uid=${sim.uid}`, as)).json()).toEqual(body);
    // A uid of a run the caller was not checked for is answered as one never recorded.
    const elsewhere = await fetch(`${base}/history/${sim.namespace}/${sim.name}?uid=${other.sim.uid}`, as);
    expect(elsewhere.status).toBe(404);
    expect(JSON.stringify(await elsewhere.json())).not.toContain(other.sim.name);
    expect((await fetch(`${base}/history?uid=${sim.uid}`, as)).status).toBe(400);
    expect((await fetch(`${base}/history/${sim.namespace}/Not_A_Name`, as)).status).toBe(400);
    expect((await fetch(`${base}/history/${sim.namespace}/${sim.name}`, { ...as, method: "POST" })).status).toBe(405);
    expect((await fetch(`${base}/metrics`)).status).toBe(418);
    expect((await fetch(`${base}/history/only-one-segment`)).status).toBe(418);
  } finally {
    await new Promise((resolve) => server.close(resolve));
  }
});

function cli(args: string[], env: NodeJS.ProcessEnv): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn(NODE, [`${root}operator/ledger/cli.ts`, ...args], {
      env: { ...process.env, ...env },
      stdio: ["ignore", "pipe", "pipe"],
    });
    let stdout = "";
    let stderr = "";
    child.stdout.on("data", (d: Buffer) => (stdout += d.toString()));
    child.stderr.on("data", (d: Buffer) => (stderr += d.toString()));
    child.once("error", reject);
    child.once("exit", (code) => resolve({ code, stdout, stderr }));
  });
}

it("prints a run's history from the command line", async () => {
  const ledger = openLedger();
  const { sim, versions } = healthyRun("printed");
  for (const version of versions) ledger.observe(version);
  await settled(ledger, [sim]);
  const env = { DATABASE_URL: file.db.url };

  const text = await cli(["history", sim.namespace, sim.name], env);
  expect(text.stderr).toBe("");
  expect(text.code).toBe(0);
  const lines = text.stdout.split("\n");
  expect(lines[0]).toBe(`AgentRun ${sim.namespace}/${sim.name}  (uid ${sim.uid})`);
  expect(lines[1]).toBe("6 transitions, 2 tool calls, 0 gaps");
  const events = lines.slice(3).filter(Boolean);
  const expected = [
    /phase {2}Queued {2}\(attempt 1\)$/,
    /phase {2}Queued -> Starting {2}\(attempt 1\) {2}PodCreated: created pod printed-1$/,
    /phase {2}Starting -> Planning {2}\(attempt 1\) {2}Heartbeat$/,
    /tool {3}search \[printed-call-1\] Succeeded in \d+ms {2}\(attempt 1\) {2}args sha256:printed-call-1 {2}key key-printed-call-1$/,
    /phase {2}Planning -> ExecutingTool {2}\(attempt 1\) {2}ToolStarted$/,
    /tool {3}fetch \[printed-call-2\] Succeeded in \d+ms/,
    /phase {2}ExecutingTool -> Planning/,
    /phase {2}Planning -> Completed {2}\(attempt 1\) {2}PodSucceeded: the sandbox exited 0$/,
  ];
  expect(events).toHaveLength(expected.length);
  events.forEach((line, i) => expect(line).toMatch(expected[i]!));
  // every line starts with its time, in order
  const times = events.map((l) => l.split(" ")[0] as string);
  expect(times).toEqual([...times].sort());

  const json = await cli(["history", sim.namespace, sim.name, "--json"], env);
  expect(json.code).toBe(0);
  expect(JSON.parse(json.stdout)).toEqual(await ledger.history(sim.namespace, sim.name));
  expect(JSON.parse((await cli(["history", "--uid", sim.uid, "--json"], env)).stdout)).toEqual(JSON.parse(json.stdout));

  const missing = await cli(["history", sim.namespace, "nobody"], env);
  expect(missing).toMatchObject({ code: 1, stdout: "", stderr: `no history recorded for ${sim.namespace}/nobody\n` });
  expect((await cli(["history", sim.namespace], env)).code).toBe(2);
  expect((await cli(["history", sim.namespace, sim.name], { DATABASE_URL: "" })).code).toBe(2);
});
