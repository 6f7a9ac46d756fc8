// kubectl agentrun against the real control plane and a real operator: every subcommand, the
// errors a user meets (an unknown run, no cluster, a cluster without the AgentRun API, bad
// usage), and the plugin installed from the npm tarball and found by kubectl on PATH.
import { execFile, spawn } from "node:child_process";
import { existsSync, mkdtempSync, readdirSync, readFileSync, realpathSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { KubeConfig } from "@kubernetes/client-node";
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from "vitest";
import { COMMANDS, usage } from "../../operator/cli/plugin/args.ts";
import { main } from "../../operator/cli/plugin/main.ts";
import { isNotFound, paths, type KubeClient } from "../../operator/kube/client.ts";
import { createDatabase, NODE, type TestDatabase } from "../ledger/support.ts";
import { createRun, deleteNamespace, getRun, kube, kubeconfigPath, listPods, newNamespace, runManifest, ofAttempt } from "../support/cluster.ts";
import { freePort, startOperator, type OperatorProcess } from "../support/operator-process.ts";
import { heartbeat, setPodPhase, writeToolCalls } from "../support/sandbox.ts";
import { waitFor } from "../support/wait.ts";

const root = fileURLToPath(new URL("../..", import.meta.url));
const CLI = `${root}operator/cli/kubectl-agentrun.ts`;
/** The directory of the project's Node, so that `#!/usr/bin/env node` finds it first. */
const NODE_DIR = dirname(realpathSync(NODE));

interface Result {
  code: number | null;
  stdout: string;
  stderr: string;
}

/** Runs a command to its end; never rejects, so tests can look at failures. */
function exec(file: string, args: string[], env: NodeJS.ProcessEnv, cwd = root, timeoutMs = 60_000): Promise<Result> {
  return new Promise((resolve) => {
    const child = spawn(file, args, { env, cwd, stdio: ["ignore", "pipe", "pipe"], timeout: timeoutMs });
    let stdout = "";
    let stderr = "";
    child.stdout.on("data", (c: Buffer) => (stdout += c.toString()));
    child.stderr.on("data", (c: Buffer) => (stderr += c.toString()));
    child.on("error", (err) => resolve({ code: -1, stdout, stderr: stderr + String(err) }));
    child.on("close", (code) => resolve({ code, stdout, stderr }));
  });
}

/** The environment the plugin sees: the test cluster's kubeconfig and no ledger unless given. */
function pluginEnv(env: NodeJS.ProcessEnv = {}): NodeJS.ProcessEnv {
  return { ...process.env, KUBECONFIG: kubeconfigPath(), DATABASE_URL: undefined, ...env };
}

/**
 * `kubectl agentrun ...` in this process: the same code against the same cluster, without the
 * seconds each new process spends loading the Kubernetes client. What only a process shows (the
 * exit status, no stack trace) is checked with agentrunProcess.
 */
async function agentrun(args: string[], env: NodeJS.ProcessEnv = {}): Promise<Result> {
  let stdout = "";
  let stderr = "";
  const code = await main(args, pluginEnv(env), { out: (t) => void (stdout += t), err: (t) => void (stderr += t) });
  return { code, stdout, stderr };
}

/** `kubectl agentrun ...` as run from a clone: `node operator/cli/kubectl-agentrun.ts ...`. */
function agentrunProcess(args: string[], env: NodeJS.ProcessEnv = {}): Promise<Result> {
  return exec(NODE, [CLI, ...args], pluginEnv(env));
}

/** Runs the plugin and insists that it succeeded. */
async function ok(args: string[], env: NodeJS.ProcessEnv = {}): Promise<string> {
  const result = await agentrun(args, env);
  if (result.code !== 0) throw new Error(`kubectl agentrun ${args.join(" ")} exited ${result.code}: ${result.stderr}`);
  return result.stdout;
}

/** The cells of one table row, by the header's column positions. */
function row(table: string, name: string, nameColumn = "NAME"): Record<string, string> | undefined {
  const [header = "", ...lines] = table.split("\n");
  const columns = [...header.matchAll(/\S+/g)].map((m) => ({ title: m[0], start: m.index }));
  for (const line of lines) {
    const cells: Record<string, string> = {};
    columns.forEach((c, i) => (cells[c.title] = line.slice(c.start, columns[i + 1]?.start ?? line.length).trim()));
    if (cells[nameColumn] === name) return cells;
  }
  return undefined;
}

function expectNoStackTrace(result: Result): void {
  expect(result.stderr).not.toMatch(/^\s+at /m);
  expect(result.stdout).toBe("");
}

// ---------------------------------------------------------------------------------------------

let client: KubeClient;
let ns: string;
let operator: OperatorProcess | undefined;

async function phaseOf(run: string, phase: string, timeoutMs = 30_000): Promise<any> {
  return waitFor(`${run} in phase ${phase}`, async () => {
    const r = await getRun(client, ns, run);
    return r.status?.phase === phase ? r : undefined;
  }, { timeoutMs });
}

async function runningPod(run: string, attempt = 1): Promise<any> {
  const pod = await waitFor(`pod ${run}-${attempt}`, async () => (await listPods(client, ns, run)).find(ofAttempt(attempt)));
  await setPodPhase(client, ns, pod.metadata.name, "Running");
  return pod;
}

function startCluster(operatorEnv: () => NodeJS.ProcessEnv = () => ({})): void {
  beforeEach(async (ctx) => {
    client = kube();
    ns = await newNamespace(client, `plugin-${ctx.task.name.toLowerCase().replace(/[^a-z0-9]+/g, "-").slice(0, 30).replace(/-$/, "")}`);
    operator = await startOperator(ns, [], operatorEnv());
  });
  afterEach(async (ctx) => {
    await operator?.stop();
    if (ctx.task.result?.state === "fail") console.error(operator?.logs.slice(-40).join("\n"));
    operator = undefined;
    await deleteNamespace(client, ns);
  });
}

describe("kubectl agentrun against a real cluster and operator", () => {
  startCluster();

  it("list shows phase, attempt, restarts of the allowance, heartbeat age, nudges and reason", async () => {
    await createRun(client, ns, runManifest("busy", { heartbeatTimeout: "5m", maxRestarts: 2, stall: { maxNudges: 4 } }));
    await createRun(client, ns, runManifest("crashed", { maxRestarts: 2, backoff: { initial: "5m" } }));
    await runningPod("busy");
    await heartbeat(client, ns, "busy", 1, "ExecutingTool");
    await phaseOf("busy", "ExecutingTool");
    const crashed = await runningPod("crashed");
    await setPodPhase(client, ns, crashed.metadata.name, "Failed", 7);
    await phaseOf("crashed", "Queued");

    const table = await ok(["list", "-n", ns]);
    expect(row(table, "busy")).toMatchObject({ PHASE: "ExecutingTool", ATTEMPT: "1", RESTARTS: "0/2", NUDGES: "0/4", REASON: "-" });
    expect(row(table, "busy")?.HEARTBEAT).toMatch(/^\d+s$/);
    expect(row(table, "busy")?.AGE).toMatch(/^\d+s$/);
    // a heartbeat is shown only when it comes from the current attempt
    expect(row(table, "crashed")).toMatchObject({ PHASE: "Queued", ATTEMPT: "2", RESTARTS: "1/2", HEARTBEAT: "-", NUDGES: "0/3", REASON: "PodFailed" });

    const wide = await ok(["list", "-n", ns, "-o", "wide"]);
    expect(row(wide, "busy")).toMatchObject({ POD: expect.stringMatching(/^busy-1-/), STALL: "Disarmed", RETRY: "-" });
    expect(row(wide, "crashed")?.RETRY).toMatch(/^in \d+m\d*s?$/);
    expect(row(wide, "crashed")?.MESSAGE).toContain("exit code 7");

    const json = JSON.parse(await ok(["list", "-n", ns, "-o", "json"]));
    expect(json.kind).toBe("List");
    expect(json.items.map((r: any) => r.metadata.name).sort()).toEqual(["busy", "crashed"]);
    expect(json.items.find((r: any) => r.metadata.name === "crashed").status.restarts).toBe(1);

    const all = await ok(["list", "-A"]);
    expect(row(all.split("\n").filter((l, i) => i === 0 || l.startsWith(`${ns} `)).join("\n"), ns, "NAMESPACE")).toMatchObject({ NAME: "busy", PHASE: "ExecutingTool" });

    const empty = await agentrun(["list", "-n", `${ns}-nothing`]);
    expect(empty).toEqual({ code: 0, stdout: "", stderr: `No agentruns found in namespace "${ns}-nothing".\n` });
  });

  it("defaults the namespace to the kubeconfig context's, and honours --kubeconfig and --context", async () => {
    await createRun(client, ns, runManifest("here"));
    await phaseOf("here", "Starting");
    const dir = mkdtempSync(join(tmpdir(), "agentrun-kubeconfig-"));
    try {
      const kc = new KubeConfig();
      kc.loadFromFile(kubeconfigPath());
      const current = kc.getContextObject(kc.getCurrentContext())!;
      kc.addContext({ ...current, name: "in-test-namespace", namespace: ns });
      const file = join(dir, "config");
      writeFileSync(file, kc.exportConfig());

      // the current context's namespace is "default", which holds no run of this test
      expect(row(await ok(["list"], { KUBECONFIG: file }), "here")).toBeUndefined();
      expect(row(await ok(["list", "--context", "in-test-namespace"], { KUBECONFIG: file }), "here")).toMatchObject({ PHASE: "Starting" });
      expect(row(await ok(["list", "--kubeconfig", file, "--context", "in-test-namespace"], { KUBECONFIG: "/nonexistent" }), "here")).toBeDefined();

      kc.setCurrentContext("in-test-namespace");
      writeFileSync(file, kc.exportConfig());
      expect(row(await ok(["list"], { KUBECONFIG: file }), "here")).toMatchObject({ PHASE: "Starting" });
      expect(await ok(["describe", "here"], { KUBECONFIG: file })).toMatch(new RegExp(`^Namespace: +${ns}$`, "m"));

      const missing = await agentrun(["list", "--context", "nope"], { KUBECONFIG: file });
      expect(missing).toEqual({ code: 1, stdout: "", stderr: 'error: context "nope" not found in the kubeconfig\n' });
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it("describe shows settings, state, conditions, the last failure and a timeline of transitions and Events", async () => {
    await createRun(client, ns, runManifest("hung", { heartbeatTimeout: "3s", backoff: { initial: "5m" } }, { goal: "index the repository" }));
    await runningPod("hung");
    await heartbeat(client, ns, "hung", 1, "ExecutingTool");
    await phaseOf("hung", "Queued", 30_000);

    // Events are written after the status: wait until the page shows the one for the requeue.
    const page = await waitFor("describe to show the HeartbeatTimeout Event", async () => {
      const out = await ok(["describe", "hung", "-n", ns]);
      return /event {2}Warning HeartbeatTimeout: attempt 1: no heartbeat/.test(out) ? out : undefined;
    });
    const expected = [
      /^Name: +hung$/m,
      new RegExp(`^Namespace: +${ns}$`, "m"),
      /^Goal: +index the repository$/m,
      /^Containers: +agent \(agent-watchdog:test\)$/m,
      /^Suspend: +false$/m,
      /^Watchdog \(spec\): +backoff.initial=5m, heartbeatTimeout=3s$/m,
      /^Phase: +Queued \(HeartbeatTimeout\)$/m,
      /^Attempt: +2$/m,
      /^Restarts: +1 of 3 allowed$/m,
      /^Retry after: +\S+Z \(in \d+m\d*s?\)$/m,
      /^Heartbeat: +\d+s ago \(ExecutingTool, from attempt 1, not the current one\)$/m,
      /^ {2}Heartbeat timeout: +3s$/m,
      /^ {2}Backoff: +5m, x2 per retry, at most 10m$/m,
      /^ {2}BackingOff +True +HeartbeatTimeout +\d+s +no heartbeat for/m,
      /^Last failure:\n {2}Reason: +HeartbeatTimeout\n {2}Time: .*\n {2}Attempt: +1, while ExecutingTool\n/m,
      /^Timeline \(status.transitions and Events; the full history needs the ledger: this cluster serves no history.watchdog.dev API, so set DATABASE_URL or pass --database-url-file\):$/m,
      /^ {2}\S+ {2}phase {2}Queued {2}\(attempt 1\) {2}Created/m,
      /^ {2}\S+ {2}phase {2}Starting -> ExecutingTool {2}\(attempt 1\)$/m,
      /^ {2}\S+ {2}phase {2}ExecutingTool -> Queued {2}\(attempt 2\) {2}HeartbeatTimeout: no heartbeat/m,
    ];
    for (const pattern of expected) expect(page).toMatch(pattern);
    // oldest first
    const times = [...page.matchAll(/^ {2}(\S+Z) {2}(phase|event) /gm)].map((m) => m[1] as string);
    expect(times.length).toBeGreaterThanOrEqual(5);
    expect([...times].sort()).toEqual(times);
  });

  it("resume refuses unless the run needs a person, sets the annotation with --force, and resumes one that does", async () => {
    await createRun(client, ns, runManifest("stuck", { maxRestarts: 0 }));
    const pod = await runningPod("stuck");
    await heartbeat(client, ns, "stuck", 1, "Planning");
    await phaseOf("stuck", "Planning");

    const refused = await agentrun(["resume", "stuck", "-n", ns]);
    expect(refused.code).toBe(1);
    expect(refused.stderr).toBe(
      'error: agentrun "stuck" is in phase Planning, not NeedsHumanIntervention: resume only acts on a run that needs a person (--force sets watchdog.dev/resume anyway)\n',
    );
    expect((await getRun(client, ns, "stuck")).metadata.annotations?.["watchdog.dev/resume"]).toBeUndefined();

    const forced = await ok(["resume", "stuck", "-n", ns, "--force"]);
    const forcedValue = (await getRun(client, ns, "stuck")).metadata.annotations["watchdog.dev/resume"];
    expect(new Date(forcedValue).toISOString()).toBe(forcedValue);
    expect(forced).toBe(`agentrun "stuck" resumed: watchdog.dev/resume=${forcedValue}; the run is Planning, so the watchdog only records the value and does not restart it\n`);
    // the operator records the value, so that it cannot fire later by surprise, and the run carries on
    await waitFor("the forced value recorded", async () => (await getRun(client, ns, "stuck")).status?.observedResume === forcedValue);
    expect((await getRun(client, ns, "stuck")).status).toMatchObject({ phase: "Planning", attempt: 1 });

    await setPodPhase(client, ns, pod.metadata.name, "Failed", 1);
    await phaseOf("stuck", "NeedsHumanIntervention");
    const resumed = await ok(["resume", "stuck", "-n", ns]);
    const value = (await getRun(client, ns, "stuck")).metadata.annotations["watchdog.dev/resume"];
    expect(value).not.toBe(forcedValue);
    expect(resumed).toBe(`agentrun "stuck" resumed: watchdog.dev/resume=${value}; the watchdog queues a new attempt with fresh budgets\n`);
    const restarted = await phaseOf("stuck", "Starting");
    expect(restarted.status).toMatchObject({ attempt: 2, restarts: 0, observedResume: value });
    expect(restarted.status.transitions.some((t: any) => t.from === "NeedsHumanIntervention" && t.attempt === 2)).toBe(true);
    await waitFor("describe to show the Resumed Event", async () =>
      /^ {2}\S+ {2}event {2}Normal Resumed: resumed with fresh budgets; attempt 2 is queued$/m.test(await ok(["describe", "stuck", "-n", ns])),
    );
  });

  it("approve answers a run awaiting a reply; approve and reject refuse when nothing is pending", async () => {
    await createRun(client, ns, runManifest("ask"));
    await runningPod("ask");
    await heartbeat(client, ns, "ask", 1, "Planning");
    await phaseOf("ask", "Planning");
    for (const verb of ["approve", "reject"]) {
      const refused = await agentrun([verb, "ask", "-n", ns]);
      expect(refused).toEqual({ code: 1, stdout: "", stderr: `error: agentrun "ask" is in phase Planning, not AwaitingReply: there is no request to ${verb}\n` });
    }
    const annotations = (await getRun(client, ns, "ask")).metadata.annotations ?? {};
    expect(annotations["watchdog.dev/approve"]).toBeUndefined();
    expect(annotations["watchdog.dev/reject"]).toBeUndefined();

    await heartbeat(client, ns, "ask", 1, "AwaitingReply");
    const awaiting = await phaseOf("ask", "AwaitingReply");
    expect(awaiting.status.approval.state).toBe("Pending");
    expect(await ok(["describe", "ask", "-n", ns])).toMatch(/^Approval: +Pending \(request [\w-]+\) since \S+ \(\d+s ago\); answer with: kubectl agentrun approve ask/m);

    const approved = await ok(["approve", "ask", "-n", ns, "--answer", "ship it"]);
    expect(approved).toMatch(/^agentrun "ask" approved request [\w-]+ with the answer "ship it": watchdog.dev\/approve set; the sandbox carries on\n$/);
    // The operator records the answer in status, then consumes the annotation (a second write).
    const done = await waitFor("the approval recorded and the annotation consumed", async () => {
      const r = await getRun(client, ns, "ask");
      return r.status?.approval?.state === "Approved" && r.metadata.annotations?.["watchdog.dev/approve"] === undefined ? r : undefined;
    });
    expect(done.status.approval.answer).toBe("ship it");

    // the sandbox has not moved on yet, but the request is answered: a second answer is refused
    const again = await agentrun(["approve", "ask", "-n", ns]);
    expect(again).toEqual({ code: 1, stdout: "", stderr: 'error: the request of agentrun "ask" was already answered (Approved); nothing is pending\n' });
  });

  it("reject ends a run awaiting a reply as Failed, with the reason", async () => {
    await createRun(client, ns, runManifest("deny"));
    await runningPod("deny");
    await heartbeat(client, ns, "deny", 1, "AwaitingReply");
    await phaseOf("deny", "AwaitingReply");
    const out = await ok(["reject", "deny", "-n", ns, "--reason", "too risky"]);
    expect(out).toMatch(/^agentrun "deny" rejected request [\w-]+ \("too risky"\): watchdog.dev\/reject set; the run ends as Failed\n$/);
    const failed = await phaseOf("deny", "Failed");
    expect(failed.status).toMatchObject({ reason: "Rejected", approval: { state: "Rejected", reason: "too risky" } });
    expect(row(await ok(["list", "-n", ns]), "deny")).toMatchObject({ PHASE: "Failed", REASON: "Rejected" });
  });

  it("suspend removes the sandbox and unsuspend queues a new attempt", async () => {
    await createRun(client, ns, runManifest("pausable"));
    await runningPod("pausable");
    await heartbeat(client, ns, "pausable", 1, "Planning");
    await phaseOf("pausable", "Planning");

    expect(await ok(["suspend", "pausable", "-n", ns])).toBe(
      'agentrun "pausable" suspended: its sandbox pod is removed, and no timer fires until it is unsuspended\n',
    );
    expect((await getRun(client, ns, "pausable") as any).spec.suspend).toBe(true);
    await phaseOf("pausable", "Suspended");
    await waitFor("pod pausable-1 gone", async () => (await listPods(client, ns, "pausable")).every((p) => p.metadata.deletionTimestamp));
    expect(await ok(["suspend", "pausable", "-n", ns])).toBe('agentrun "pausable" is already suspended\n');
    expect(row(await ok(["list", "-n", ns]), "pausable")).toMatchObject({ PHASE: "Suspended", REASON: "Suspended" });

    expect(await ok(["unsuspend", "pausable", "-n", ns])).toBe('agentrun "pausable" unsuspended: it is queued as a new attempt\n');
    expect((await getRun(client, ns, "pausable") as any).spec.suspend).toBe(false);
    const back = await phaseOf("pausable", "Starting");
    expect(back.status).toMatchObject({ attempt: 2, podName: expect.stringMatching(/^pausable-2-/) });
    expect(await ok(["unsuspend", "pausable", "-n", ns])).toBe('agentrun "pausable" is already not suspended\n');
  });

  it("history without a ledger shows status.transitions and Events, and says the full history needs the ledger", async () => {
    await createRun(client, ns, runManifest("short"));
    const pod = await runningPod("short");
    await heartbeat(client, ns, "short", 1, "Planning");
    await phaseOf("short", "Planning");
    await setPodPhase(client, ns, pod.metadata.name, "Succeeded", 0);
    const done = await phaseOf("short", "Completed");

    const out = await waitFor("history to show the Completed Event", async () => {
      const text = await ok(["history", "short", "-n", ns]);
      return text.includes("event  Normal Completed: attempt 1 completed") ? text : undefined;
    });
    const lines = out.split("\n");
    expect(lines[0]).toBe(`AgentRun ${ns}/short  (uid ${done.metadata.uid})`);
    expect(lines[1]).toBe(
      `Only what the cluster still holds: the latest ${done.status.transitions.length} status.transitions (status keeps at most 20) and the run's Events (the API server expires them); the full history needs the ledger: this cluster serves no history.watchdog.dev API, so set DATABASE_URL or pass --database-url-file.`,
    );
    expect(out).toMatch(/^\S+ {2}phase {2}Queued -> Starting {2}\(attempt 1\)$/m);
    expect(out).toMatch(/^\S+ {2}phase {2}Planning -> Completed {2}\(attempt 1\) {2}Completed: the agent container of sandbox pod short-1-\w+ exited 0$/m);

    const json = JSON.parse(await ok(["history", "short", "-n", ns, "-o", "json"]));
    expect(json).toMatchObject({ namespace: ns, name: "short", uid: done.metadata.uid, source: "cluster", complete: false });
    expect(json.timeline.filter((i: any) => i.kind === "phase").map((i: any) => i.phase)).toEqual(done.status.transitions.map((t: any) => t.phase));
  });

  it("every run command says so when the run does not exist", async () => {
    const message = `error: agentrun "ghost" not found in namespace "${ns}"\n`;
    for (const command of COMMANDS.filter((c) => c !== "list" && c !== "console")) {
      expect(await agentrun([command, "ghost", "-n", ns]), command).toEqual({ code: 1, stdout: "", stderr: message });
    }
    expect(await agentrunProcess(["describe", "ghost", "-n", ns])).toEqual({ code: 1, stdout: "", stderr: message });
  });

  it("installs from the npm tarball as a bin that kubectl finds on PATH", { timeout: 300_000 }, async () => {
    await createRun(client, ns, runManifest("packaged"));
    await phaseOf("packaged", "Starting");
    const dir = mkdtempSync(join(tmpdir(), "agentrun-pack-"));
    try {
      // npm runs under the project's Node, as must the installed bin.
      const npmEnv = { ...process.env, PATH: `${NODE_DIR}:${process.env.PATH}` };
      const packed = await exec("npm", ["pack", "--pack-destination", dir], npmEnv, root, 240_000);
      expect(packed.code, packed.stderr).toBe(0);
      const tarball = readdirSync(dir).find((f) => f.endsWith(".tgz"));
      expect(tarball).toBeDefined();
      const prefix = join(dir, "prefix");
      const installed = await exec("npm", ["install", "-g", "--prefix", prefix, "--no-audit", "--no-fund", join(dir, tarball!)], npmEnv, dir, 240_000);
      expect(installed.code, installed.stderr).toBe(0);

      const bin = join(prefix, "bin", "kubectl-agentrun");
      expect(existsSync(bin)).toBe(true);
      // The bin is compiled JavaScript inside node_modules (Node strips no types there).
      const target = realpathSync(bin);
      expect(target).toMatch(/\/node_modules\/agent-watchdog\/dist\/operator\/cli\/kubectl-agentrun\.js$/);
      expect(readFileSync(target, "utf8").startsWith("#!/usr/bin/env node\n")).toBe(true);

      const env = pluginEnv({ PATH: `${join(prefix, "bin")}:${NODE_DIR}:${process.env.PATH}` });
      const nodeVersion = await exec("node", ["--version"], env);
      const [major = 0, minor = 0] = nodeVersion.stdout.trim().slice(1).split(".").map(Number);
      expect(major > 22 || (major === 22 && minor >= 19), nodeVersion.stdout).toBe(true);

      const help = await exec(bin, ["--help"], env, dir);
      expect(help).toEqual({ code: 0, stdout: `${usage()}\n`, stderr: "" });
      const listed = await exec("kubectl", ["agentrun", "list", "-n", ns], env, dir);
      expect(listed.code, listed.stderr).toBe(0);
      expect(row(listed.stdout, "packaged")).toMatchObject({ PHASE: "Starting", ATTEMPT: "1" });

      // The console's pages are built into the package, and the installed console serves them.
      const pkg = join(dirname(target), "../..");
      expect(existsSync(join(pkg, "operator/console/ui/dist/index.html"))).toBe(true);
      const served = spawn(bin, ["console", "--port", "0", "-n", ns], { env, stdio: ["ignore", "pipe", "pipe"] });
      try {
        let out = "";
        served.stdout.on("data", (c: Buffer) => (out += c.toString()));
        const link = await waitFor("the console's link", () => /http:\/\/\S+\?token=\S+/.exec(out)?.[0], { timeoutMs: 30_000 });
        const opened = await fetch(link, { redirect: "manual" });
        expect(opened.status).toBe(303);
        const cookie = (opened.headers.get("set-cookie") ?? "").split(";")[0]!;
        const page = await fetch(new URL("/", link), { headers: { cookie } });
        expect(page.status).toBe(200);
        expect(await page.text()).toContain("<title>");
      } finally {
        served.kill("SIGTERM");
      }
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

// ---------------------------------------------------------------------------------------------
// with the ledger

/**
 * The shared PostgreSQL server's base URL. The ledger suite stops and restarts that server to
 * play an outage; while it is stopped this waits for it rather than starting it under that test.
 */
async function sharedPostgres(): Promise<string> {
  const script = `${root}hack/postgres.sh`;
  const run = (command: string) => promisify(execFile)("bash", [script, command], { encoding: "utf8" }).catch((err: { stdout?: string }) => ({ stdout: err.stdout ?? "", failed: true }));
  return waitFor(
    "the shared PostgreSQL server",
    async () => {
      const env = await run("env");
      const url = /export DATABASE_URL=(\S+)/.exec(env.stdout)?.[1];
      if (url) return url;
      const status = await run("status");
      if (status.stdout.includes("postgres: down")) {
        const up = await run("up");
        return /export DATABASE_URL=(\S+)/.exec(up.stdout)?.[1];
      }
      return undefined;
    },
    { timeoutMs: 120_000, intervalMs: 500 },
  );
}

describe("kubectl agentrun with the ledger", () => {
  let db: TestDatabase;
  let dir: string | undefined;
  /** The URL in a file, as a mounted Secret holds it: with a trailing newline. */
  let urlFile: string;
  beforeAll(async () => {
    db = await createDatabase(await sharedPostgres(), import.meta.filename);
    dir = mkdtempSync(join(tmpdir(), "agentrun-ledger-"));
    urlFile = join(dir, "database-url");
    writeFileSync(urlFile, `${db.url}\n`, { mode: 0o600 });
  }, 180_000);
  afterAll(async () => {
    await db?.drop();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });
  startCluster(() => ({ DATABASE_URL: db.url }));

  it("describe merges the ledger's tool calls, and history prints the full history, also after the run is deleted", async () => {
    await createRun(client, ns, runManifest("ledgered"));
    const pod = await runningPod("ledgered");
    await heartbeat(client, ns, "ledgered", 1, "Planning");
    const now = new Date().toISOString();
    await writeToolCalls(client, ns, "ledgered", [
      { id: "call-1", attempt: 1, name: "search", argsHash: "h1", state: "Failed", error: { httpStatus: 500, message: "boom" }, startedAt: now, finishedAt: now },
      { id: "call-2", attempt: 1, name: "fetch", argsHash: "h2", state: "Succeeded", startedAt: now, finishedAt: now, result: "{}" },
    ]);
    await phaseOf("ledgered", "Planning");
    await setPodPhase(client, ns, pod.metadata.name, "Succeeded", 0);
    const done = await phaseOf("ledgered", "Completed");
    const uid = done.metadata.uid as string;

    // The ledger writes behind the operator (and the ledger suite may have the server down for a
    // while): poll until it holds the whole run.
    const history = await waitFor("the ledger's history of the run", async () => {
      const text = await ok(["history", "ledgered", "-n", ns, "--database-url-file", urlFile]);
      return text.includes("phase  Planning -> Completed") && text.includes("tool   fetch [call-2] Succeeded") ? text : undefined;
    }, { timeoutMs: 90_000, intervalMs: 500 });
    expect(history).toMatch(new RegExp(`^AgentRun ${ns}/ledgered {2}\\(uid ${uid}\\)$`, "m"));
    expect(history).toMatch(/^\S+ {2}tool {3}search \[call-1\] Failed in 0ms: HTTP 500 boom {2}\(attempt 1\) {2}args h1$/m);
    expect(history).not.toContain("the full history needs the ledger");

    // DATABASE_URL works as well as the file; Events are written after the status, so wait for the last one.
    const page = await waitFor("describe to show the Completed Event", async () => {
      const text = await ok(["describe", "ledgered", "-n", ns], { DATABASE_URL: db.url });
      return text.includes("event  Normal Completed: attempt 1 completed") ? text : undefined;
    });
    expect(page).toMatch(/^Timeline \(the ledger, status.transitions and Events\):$/m);
    expect(page).toMatch(/^ {2}\S+ {2}tool {3}search \[call-1\] Failed in 0ms: HTTP 500 boom {2}\(attempt 1\)$/m);
    expect(page).toMatch(/^ {2}\S+ {2}phase {2}Planning -> Completed {2}\(attempt 1\)/m);
    // each transition once, though both status and the ledger hold it
    expect(page.match(/phase {2}Planning -> Completed/g)).toHaveLength(1);

    const json = JSON.parse(await ok(["history", "ledgered", "-n", ns, "-o", "json"], { DATABASE_URL: db.url }));
    expect(json).toMatchObject({ namespace: ns, name: "ledgered", uids: [uid] });
    expect(json.toolCalls.map((c: any) => c.id)).toEqual(["call-1", "call-2"]);

    await client.delete(paths.run(ns, "ledgered"));
    await waitFor("the run deleted", async () => client.get(paths.run(ns, "ledgered")).then(() => false, (err) => isNotFound(err)));
    const afterDelete = await ok(["history", "ledgered", "-n", ns], { DATABASE_URL: db.url });
    expect(afterDelete).toContain("phase  Planning -> Completed");
    const withoutLedger = await agentrun(["history", "ledgered", "-n", ns]);
    expect(withoutLedger).toEqual({ code: 1, stdout: "", stderr: `error: agentrun "ledgered" not found in namespace "${ns}"\n` });
  });
});

// ---------------------------------------------------------------------------------------------
// errors away from a working cluster

describe("kubectl agentrun's errors", () => {
  let dir: string;
  beforeEach(() => {
    dir = mkdtempSync(join(tmpdir(), "agentrun-errors-"));
  });
  afterEach(() => rmSync(dir, { recursive: true, force: true }));

  it("says which API server it cannot reach, and why, without a stack trace", async () => {
    const port = await freePort();
    const file = join(dir, "kubeconfig");
    writeFileSync(
      file,
      [
        "apiVersion: v1",
        "kind: Config",
        "current-context: closed",
        "clusters:\n- name: closed\n  cluster:\n    server: https://127.0.0.1:" + port + "\n    insecure-skip-tls-verify: true",
        "users:\n- name: u\n  user:\n    token: t",
        "contexts:\n- name: closed\n  context:\n    cluster: closed\n    user: u",
      ].join("\n"),
    );
    const refused = { code: 1, stdout: "", stderr: `error: cannot reach the Kubernetes API server at https://127.0.0.1:${port}: connection refused\n` };
    for (const args of [["list"], ["describe", "r"]]) expect(await agentrunProcess(args, { KUBECONFIG: file }), args.join(" ")).toEqual(refused);
    for (const args of [["resume", "r"], ["suspend", "r"], ["history", "r"], ["approve", "r"]]) {
      expect(await agentrun(args, { KUBECONFIG: file }), args.join(" ")).toEqual(refused);
    }
    const noConfig = await agentrunProcess(["list"], { KUBECONFIG: join(dir, "missing") });
    expect(noConfig).toEqual({ code: 1, stdout: "", stderr: `error: none of the files in KUBECONFIG exists: ${join(dir, "missing")}\n` });
  });

  it("says that the AgentRun API is not installed, on a real cluster without the CRD", { timeout: 180_000 }, async () => {
    // A second, empty control plane of the same build: the shared one has the CRD, and removing
    // it there would break every other test.
    const state = { ...process.env, AGENT_WATCHDOG_STATE: dir };
    const up = await exec("bash", [`${root}hack/control-plane.sh`, "up"], state, root, 150_000);
    try {
      expect(up.code, up.stderr).toBe(0);
      const kubeconfig = /export KUBECONFIG=(\S+)/.exec(up.stdout)?.[1] as string;
      expect(kubeconfig).toBeDefined();
      for (const [i, args] of [["list"], ["describe", "r"], ["list", "-A"], ["approve", "r"], ["unsuspend", "r"], ["history", "r"]].entries()) {
        const result = i < 2 ? await agentrunProcess(args, { KUBECONFIG: kubeconfig }) : await agentrun(args, { KUBECONFIG: kubeconfig });
        expect(result.code, args.join(" ")).toBe(1);
        expect(result.stderr, args.join(" ")).toMatch(/^error: the AgentRun API is not installed in this cluster \(no agentruns\.watchdog\.dev\/v1alpha1 at https:\/\/127\.0\.0\.1:\d+\); install the agent-watchdog CRD first\n$/);
        expectNoStackTrace(result);
      }
    } finally {
      await exec("bash", [`${root}hack/control-plane.sh`, "down"], state, root, 60_000);
    }
  });

  it("prints usage and exits 2 on bad usage, and prints each command's help", async () => {
    const none = await agentrunProcess([]);
    expect(none).toEqual({ code: 2, stdout: "", stderr: `error: no command given\n\n${usage()}\n` });
    const unknown = await agentrunProcess(["lsit"]);
    expect(unknown).toEqual({ code: 2, stdout: "", stderr: `error: unknown command "lsit"\n\n${usage()}\n` });
    const flag = await agentrunProcess(["list", "--frobnicate"]);
    expect(flag).toEqual({ code: 2, stdout: "", stderr: `error: unknown flag --frobnicate\n\n${usage("list")}\n` });
    const noRun = await agentrunProcess(["resume"]);
    expect(noRun).toEqual({ code: 2, stdout: "", stderr: `error: resume needs the name of a run\n\n${usage("resume")}\n` });
    for (const command of COMMANDS) {
      expect(await agentrunProcess([command, "--help"]), command).toEqual({ code: 0, stdout: `${usage(command)}\n`, stderr: "" });
    }
    expect(await agentrunProcess(["--help"])).toEqual({ code: 0, stdout: `${usage()}\n`, stderr: "" });
  });
});
