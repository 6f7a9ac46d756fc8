// The sandbox SDK as its users get it: `npm pack -w operator/sandbox`, installed from the tarball
// into an empty project outside the repository, imported by name from a plain ESM agent, and run
// as a local process with the environment a sandbox pod gets, against the real API server and a
// real operator process. No kubelet runs, so the test plays it around the agent's process.
import { spawn, type ChildProcess } from "node:child_process";
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { SANDBOX_FIELD_MANAGER } from "../../operator/api/annotations.ts";
import type { KubeClient } from "../../operator/kube/client.ts";
import { argsHash, idempotencyKey } from "../../operator/sandbox/keys.ts";
import { createRun, deleteNamespace, getRun, kube, kubeconfigPath, listPods, newNamespace, ofAttempt, runManifest } from "../support/cluster.ts";
import { startOperator, type OperatorProcess } from "../support/operator-process.ts";
import { setPodPhase } from "../support/sandbox.ts";
import { waitFor } from "../support/wait.ts";

const root = fileURLToPath(new URL("../..", import.meta.url));
/** npm and the agent run under the Node that runs the tests: the project's Node 24. */
const NODE_DIR = dirname(process.execPath);

// The agent, as a user would write it. Its tool holds until the file named by GO_FILE exists, so
// the test can see the Started record on the API server while the tool is still running.
const AGENT = `import { existsSync } from "node:fs";
import { setTimeout as sleep } from "node:timers/promises";
import { runAgent } from "@agent-watchdog/sandbox";

async function lookup(args, ctx) {
  while (!existsSync(process.env.GO_FILE)) {
    ctx.progress();
    await sleep(50, undefined, { signal: ctx.signal });
  }
  return { fact: \`a fact about \${args.topic}\` };
}

await runAgent(async (sandbox) => {
  const found = await sandbox.tool("lookup", { topic: sandbox.goal }, lookup, { idempotent: true });
  if (!found.ok) throw new Error(found.error.message);
  await sandbox.saveCheckpoint(1, found.value);
  await sandbox.say(\`Done: \${found.value.fact}.\`);
});
`;

interface Result {
  code: number | null;
  stdout: string;
  stderr: string;
}

function start(file: string, args: string[], cwd: string, env: NodeJS.ProcessEnv, timeoutMs: number): { child: ChildProcess; done: Promise<Result> } {
  const child = spawn(file, args, { cwd, env, stdio: ["ignore", "pipe", "pipe"], timeout: timeoutMs });
  let stdout = "";
  let stderr = "";
  child.stdout?.on("data", (c: Buffer) => (stdout += c.toString()));
  child.stderr?.on("data", (c: Buffer) => (stderr += c.toString()));
  const done = new Promise<Result>((resolve) => child.once("close", (code) => resolve({ code, stdout, stderr })));
  return { child, done };
}

const exec = (file: string, args: string[], cwd: string, env: NodeJS.ProcessEnv, timeoutMs: number) => start(file, args, cwd, env, timeoutMs).done;

let client: KubeClient;
let ns: string;
let operator: OperatorProcess | undefined;
let dir: string;
let cleanups: (() => unknown)[] = [];

beforeEach(async () => {
  client = kube();
  ns = await newNamespace(client, "sdk-package");
  operator = await startOperator(ns);
  dir = mkdtempSync(join(tmpdir(), "agent-watchdog-sdk-"));
});

afterEach(async (ctx) => {
  for (const cleanup of cleanups.reverse()) await cleanup();
  cleanups = [];
  await operator?.stop();
  if (ctx.task.result?.state === "fail") console.error(operator?.logs.slice(-40).join("\n"));
  await deleteNamespace(client, ns);
  rmSync(dir, { recursive: true, force: true });
});

describe("the SDK as an npm package", () => {
  it("packs, installs into an empty project, and runs an agent whose tool call is recorded Started, then Succeeded", { timeout: 300_000 }, async () => {
    const npmEnv = { ...process.env, PATH: `${NODE_DIR}:${process.env.PATH}` };
    const packed = await exec("npm", ["pack", "-w", "operator/sandbox", "--pack-destination", dir], root, npmEnv, 240_000);
    expect(packed.code, packed.stderr).toBe(0);
    const tarball = readdirSync(dir).find((f) => f.endsWith(".tgz"));
    expect(tarball).toBeDefined();
    expect(existsSync(join(root, "operator/sandbox/dist")), "postpack removes the build").toBe(false);

    const app = join(dir, "app");
    mkdirSync(app);
    const init = await exec("npm", ["init", "-y"], app, npmEnv, 60_000);
    expect(init.code, init.stderr).toBe(0);
    const installed = await exec("npm", ["install", "--no-audit", "--no-fund", "--prefer-offline", join(dir, tarball!)], app, npmEnv, 240_000);
    expect(installed.code, installed.stderr).toBe(0);
    // Compiled JavaScript and declarations: Node strips no types under node_modules.
    const pkg = join(app, "node_modules/@agent-watchdog/sandbox");
    expect(existsSync(join(pkg, "dist/sandbox/index.js"))).toBe(true);
    expect(existsSync(join(pkg, "dist/sandbox/index.d.ts"))).toBe(true);
    expect(existsSync(join(pkg, "dist/sandbox/index.ts"))).toBe(false);
    // The framework adapters are subpath exports, compiled the same way, their frameworks optional
    // peers: the agent above runs with none installed; with MCP's SDK beside it, its adapter loads.
    for (const adapter of ["ai", "langchain", "openai-agents", "mcp"]) {
      expect(existsSync(join(pkg, `dist/sandbox/adapters/${adapter}.js`)), adapter).toBe(true);
      expect(existsSync(join(pkg, `dist/sandbox/adapters/${adapter}.d.ts`)), adapter).toBe(true);
    }
    const mcpVersion = JSON.parse(readFileSync(join(root, "package.json"), "utf8")).devDependencies["@modelcontextprotocol/sdk"];
    const peer = await exec("npm", ["install", "--no-audit", "--no-fund", "--prefer-offline", `@modelcontextprotocol/sdk@${mcpVersion}`], app, npmEnv, 240_000);
    expect(peer.code, peer.stderr).toBe(0);
    const loaded = await exec(process.execPath, ["--input-type=module", "-e", 'const m = await import("@agent-watchdog/sandbox/mcp"); console.log(typeof m.watchdogClient);'], app, npmEnv, 60_000);
    expect(loaded.stdout.trim(), loaded.stderr).toBe("function");
    writeFileSync(join(app, "agent.mjs"), AGENT);

    await createRun(client, ns, runManifest("packaged", { heartbeatTimeout: "30s" }, { goal: "the weather" }));
    // The kubelet's part: the pod is Running, and its agent container is this process.
    const pod = await waitFor("the sandbox pod", async () => (await listPods(client, ns, "packaged")).find(ofAttempt(1)));
    await setPodPhase(client, ns, pod.metadata.name, "Running");
    const podEnv = Object.fromEntries(pod.spec.containers[0].env.map((e: any) => [e.name, e.value])) as Record<string, string>;
    expect(Object.keys(podEnv)).toEqual(expect.arrayContaining(["WATCHDOG_RUN_NAME", "WATCHDOG_RUN_NAMESPACE", "WATCHDOG_ATTEMPT"]));
    const goFile = join(dir, "go");
    // What a sandbox pod gives its agent: the run's identity and credentials (a kubeconfig here,
    // where a pod has its token), and nothing of the test's own environment.
    const env = { PATH: process.env.PATH, HOME: dir, ...podEnv, KUBECONFIG: kubeconfigPath(), GO_FILE: goFile };
    const { child, done: agent } = start(process.execPath, ["agent.mjs"], app, env, 120_000);
    let exited = false;
    void agent.then(() => (exited = true));
    cleanups.push(() => {
      if (child.exitCode === null && child.signalCode === null) child.kill("SIGKILL");
    });

    const started = await waitFor("the Started record while the tool runs", async () => {
      if (exited) throw new Error(`the agent exited early: ${JSON.stringify(await agent)}`);
      const run = await getRun(client, ns, "packaged");
      return run.status?.toolCalls?.find((c: any) => c.name === "lookup");
    });
    expect(started).toMatchObject({ state: "Started", attempt: 1, idempotent: true });
    await waitFor("the run executing the tool", async () => (await getRun(client, ns, "packaged")).status?.phase === "ExecutingTool");
    writeFileSync(goFile, "");

    const result = await agent;
    expect(result.code, `${result.stdout}\n${result.stderr}`).toBe(0);
    await setPodPhase(client, ns, pod.metadata.name, "Succeeded", 0);
    const done = await waitFor("the run Completed", async () => {
      const run = await getRun(client, ns, "packaged");
      return run.status?.phase === "Completed" ? run : undefined;
    }, { timeoutMs: 60_000 });

    const hash = argsHash({ topic: "the weather" });
    expect(done.status.toolCalls).toEqual([
      expect.objectContaining({
        id: started.id,
        name: "lookup",
        argsHash: hash,
        idempotencyKey: idempotencyKey({ runUid: done.metadata.uid, step: 1, index: 0, name: "lookup", argsHash: hash }),
        state: "Succeeded",
        result: JSON.stringify({ fact: "a fact about the weather" }),
      }),
    ]);
    expect(done.status.checkpoint).toEqual({ step: 1, data: { fact: "a fact about the weather" } });
    expect(done.status.heartbeat).toMatchObject({ attempt: 1, activity: { kind: "text" } });
    // Written under the SDK's own field manager, on the status subresource.
    const managers = (done.metadata.managedFields ?? []).filter((m: any) => m.subresource === "status").map((m: any) => m.manager);
    expect(managers).toContain(SANDBOX_FIELD_MANAGER);
  });
});
