// A local sandbox runner: the kubelet's part for sandbox pods on the local control plane.
//
// kwok schedules sandbox pods onto its fake node and marks them Running, but runs nothing and
// never ends them. This runner watches pods labelled watchdog.dev/run and, for each one kwok has
// marked Running, starts the agent (by default the example agent, under this Node) as a local
// process with the pod's environment, then reports how the process ended as the pod's phase
// (Succeeded for exit 0, Failed with the exit code otherwise), as a kubelet with
// restartPolicy Never would. When the operator deletes a pod, its process is killed at once.
//
//   KUBECONFIG=... node harness/sandbox-runner.ts [--namespaces=a,b] [--echo] [--log-dir=DIR]
//                                              [--outbox-dir=DIR] [--env=KEY=VALUE ...]
//                                              [-- command args...]
//
// EXAMPLE_* variables in the runner's own environment are handed to every agent (timings for
// fast runs); the pod's env (WATCHDOG_RUN_NAME, WATCHDOG_RUN_NAMESPACE, WATCHDOG_ATTEMPT and the
// template's own) is applied over them.
//
// Never two processes for one pod: before starting a process the runner claims the pod by
// writing its own id into the container's status, guarded by the pod's resourceVersion, so of two
// runners watching the same pods exactly one wins. A pod claimed by a runner that is gone (its
// process died with it, or it was killed) is reported Failed, as a kubelet would report a
// container it lost, and the operator replaces it.
import { spawn, type ChildProcess } from "node:child_process";
import { randomBytes } from "node:crypto";
import { createWriteStream, mkdirSync, readFileSync, type WriteStream } from "node:fs";
import { constants, hostname } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";
import { KubeConfig } from "@kubernetes/client-node";
import { pino, type Logger } from "pino";
import { LABELS, SANDBOX_ENV } from "../operator/api/annotations.ts";
import { Informer } from "../operator/controller/informer.ts";
import { ApiError, KubeClient, isConflict, isNotFound, paths, type Json } from "../operator/kube/client.ts";

const root = fileURLToPath(new URL("..", import.meta.url));

/** The example agent, under the Node that runs this file (the project's Node 24). */
export const EXAMPLE_AGENT = [process.execPath, join(root, "operator/example-agent/main.ts")];

/** Per-user runtime state, where the hack/ scripts keep theirs. */
export function stateRoot(env: NodeJS.ProcessEnv = process.env): string {
  return env.AGENT_WATCHDOG_STATE || join(env.XDG_RUNTIME_DIR || "/tmp", `agent-watchdog-${process.getuid?.() ?? 0}`);
}

export interface SandboxRunnerOptions {
  /** Path of the kubeconfig: the runner's client uses it, and every agent gets it as KUBECONFIG. */
  kubeconfig: string;
  /** Namespaces to watch; empty or absent means all. */
  namespaces?: string[];
  /** The agent's command line; default: the example agent. */
  command?: string[];
  /** Environment for every agent, below the pod's own env. */
  env?: Record<string, string>;
  /** One log file per pod is written here. */
  logDir: string;
  /** Each line an agent prints, prefixed with its namespace/pod, goes here too. */
  echo?: (line: string) => void;
  log?: Logger;
  /** Called for everything the runner does to a pod, for tests and displays. */
  onEvent?: (event: RunnerEvent) => void;
}

export type RunnerEvent =
  | { type: "started"; namespace: string; pod: string; uid: string; pid: number; logFile: string }
  /** Every process's end; `reported` is the phase written to its pod, absent when there was nobody to tell. */
  | { type: "exited"; namespace: string; pod: string; uid: string; code: number; reported?: "Succeeded" | "Failed" }
  | { type: "killed"; namespace: string; pod: string; uid: string; why: string }
  | { type: "lost"; namespace: string; pod: string; uid: string; owner: string };

interface Proc {
  namespace: string;
  pod: string;
  uid: string;
  child: ChildProcess;
  startedAt: string;
  containerId: string;
  /** Set when the runner killed it: its end is not the agent's answer and is not reported. */
  killedBecause?: string;
  logFile: string;
  /** The last error the agent logged, for the pod's termination message. */
  lastError?: string;
  /** The write that records the process in the pod; the final report must land after it. */
  recorded: Promise<void>;
  exited: Promise<void>;
}

const CONTAINER_ID_SCHEME = "sandbox-runner://";
const MAX_MESSAGE = 1024;
/** How long a status write is retried before the runner gives up on it. */
const WRITE_DEADLINE_MS = 60_000;

/** Runner instances alive in this process, so a claim by one of them is never mistaken as lost. */
const liveInstances = new Set<string>();

type Pod = Json & {
  metadata: { name: string; namespace: string; uid: string; resourceVersion?: string; labels?: Record<string, string>; deletionTimestamp?: string };
  spec: { containers: { name: string; image?: string; env?: { name: string; value?: string }[] }[] };
  status?: { phase?: string; conditions?: Json[]; containerStatuses?: { name: string; imageID?: string; containerID?: string }[] };
};

/** Who claimed a pod, parsed from its container ID. */
interface Claim {
  host: string;
  pid: number;
  instance: string;
  childPid?: number;
}

export function parseClaim(containerId: string | undefined): Claim | undefined {
  if (!containerId?.startsWith(CONTAINER_ID_SCHEME)) return undefined;
  const [host, owner, child] = containerId.slice(CONTAINER_ID_SCHEME.length).split("/");
  const [pid, instance] = (owner ?? "").split(".");
  if (!host || !pid || !instance || !/^\d+$/.test(pid)) return undefined;
  const claim: Claim = { host, pid: Number(pid), instance };
  if (child && /^\d+$/.test(child)) claim.childPid = Number(child);
  return claim;
}

function pidAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === "EPERM";
  }
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

function podEnv(pod: Pod): Record<string, string> {
  const out: Record<string, string> = {};
  // Only literal values: valueFrom needs a kubelet's resolver, and sandbox pods do not use it.
  for (const e of pod.spec.containers[0]?.env ?? []) if (typeof e.value === "string") out[e.name] = e.value;
  return out;
}

/** What an agent inherits from the runner: its environment without any run's identity in it. */
function baseEnv(): Record<string, string> {
  const out: Record<string, string> = {};
  const identity = new Set<string>(Object.values(SANDBOX_ENV));
  for (const [key, value] of Object.entries(process.env)) {
    if (value === undefined || identity.has(key) || key.startsWith("EXAMPLE_") || key === "KUBECONFIG") continue;
    out[key] = value;
  }
  return out;
}

export class SandboxRunner {
  readonly id: string;
  private readonly options: SandboxRunnerOptions;
  private readonly client: KubeClient;
  private readonly log: Logger;
  private readonly informers: Informer[] = [];
  /** Running processes, by pod uid. */
  private readonly procs = new Map<string, Proc>();
  /** Pods this runner has started or judged: it never starts a second process for any of them. */
  private readonly handled = new Set<string>();
  /** Pods with a claim or a report in flight. */
  private readonly busy = new Set<string>();
  /** Claims of other live runners already logged, so a resync does not repeat them. */
  private readonly foreign = new Set<string>();
  private readonly writes = new Set<Promise<unknown>>();
  private stopping = false;
  private readonly onProcessExit = () => this.killAllNow();

  constructor(options: SandboxRunnerOptions) {
    this.options = options;
    const kc = new KubeConfig();
    kc.loadFromFile(options.kubeconfig);
    this.client = new KubeClient(kc);
    this.log = options.log ?? pino({ name: "sandbox-runner", level: "info" }, pino.destination(2));
    this.id = `${hostname()}/${process.pid}.${randomBytes(4).toString("hex")}`;
    mkdirSync(options.logDir, { recursive: true });
  }

  /** Starts watching; resolves once the first list of pods has been seen. */
  async start(timeoutMs = 30_000): Promise<void> {
    liveInstances.add(this.id);
    process.once("exit", this.onProcessExit);
    const scopes = this.options.namespaces?.length ? this.options.namespaces : [undefined];
    for (const namespace of scopes) {
      const informer = new Informer(this.client, {
        name: `sandbox-runner/pods${namespace ? `/${namespace}` : ""}`,
        path: paths.pods(namespace),
        labelSelector: LABELS.run,
        // A resync hands every pod over again: a claim lost to a conflict or a failed report is
        // retried from the pod as it stands, even if nothing else changes it.
        resyncMs: 10_000,
        silenceMs: 120_000,
        log: this.log,
      });
      informer.on((event, object) => this.onPod(event, object as Pod));
      this.informers.push(informer);
      informer.start();
    }
    const deadline = Date.now() + timeoutMs;
    while (!this.informers.every((i) => i.synced)) {
      if (Date.now() > deadline) {
        await this.stop();
        throw new Error(`the sandbox runner could not list pods within ${timeoutMs / 1000}s`);
      }
      await sleep(50);
    }
    this.log.info({ id: this.id, namespaces: this.options.namespaces?.length ? this.options.namespaces : "all" }, "sandbox runner started");
  }

  /** Stops watching and kills every process it started; pods are left as they are. */
  async stop(): Promise<void> {
    if (this.stopping) return;
    this.stopping = true;
    for (const informer of this.informers) informer.stop();
    const exits = [...this.procs.values()].map((p) => {
      this.kill(p, "the sandbox runner is stopping");
      return p.exited;
    });
    await Promise.race([Promise.all(exits), sleep(5_000)]);
    await Promise.race([Promise.allSettled([...this.writes]), sleep(5_000)]);
    process.off("exit", this.onProcessExit);
    liveInstances.delete(this.id);
    this.log.info("sandbox runner stopped");
  }

  /** The processes running now. */
  running(): { namespace: string; pod: string; pid: number }[] {
    return [...this.procs.values()].map((p) => ({ namespace: p.namespace, pod: p.pod, pid: p.child.pid ?? 0 }));
  }

  private emit(event: RunnerEvent): void {
    try {
      this.options.onEvent?.(event);
    } catch (err) {
      this.log.error({ err: String(err) }, "runner event listener threw");
    }
  }

  private track<T>(p: Promise<T>): Promise<T> {
    this.writes.add(p);
    void p.finally(() => this.writes.delete(p)).catch(() => {});
    return p;
  }

  private onPod(event: string, pod: Pod): void {
    if (this.stopping) return;
    const uid = pod.metadata.uid;
    const proc = this.procs.get(uid);
    if (event === "delete") {
      if (proc) this.kill(proc, "its pod was deleted");
      // A uid never comes back, so what was remembered about it can go.
      this.handled.delete(uid);
      this.foreign.delete(uid);
      return;
    }
    if (pod.metadata.deletionTimestamp) {
      if (proc) this.kill(proc, "its pod is being deleted");
      return;
    }
    const phase = pod.status?.phase;
    if (proc) {
      // Someone else ended the pod (an eviction, a person): its containers stop, as on a node.
      if (phase === "Succeeded" || phase === "Failed") this.kill(proc, `its pod became ${phase}`);
      return;
    }
    if (phase !== "Running" || this.handled.has(uid) || this.busy.has(uid)) return;
    this.busy.add(uid);
    void this.track(this.claimAndStart(pod))
      .catch((err: unknown) => this.log.error({ pod: pod.metadata.name, err: String(err) }, "could not start the sandbox"))
      .finally(() => this.busy.delete(uid));
  }

  private containerStatuses(pod: Pod, containerId: string, state: Json, ready: boolean): Json[] {
    const known = new Map((pod.status?.containerStatuses ?? []).map((s) => [s.name, s]));
    return pod.spec.containers.map((c) => ({
      name: c.name,
      image: c.image ?? "",
      imageID: known.get(c.name)?.imageID ?? c.image ?? "",
      containerID: containerId,
      restartCount: 0,
      ready,
      started: ready,
      state,
    }));
  }

  private async claimAndStart(pod: Pod): Promise<void> {
    const { name, namespace, uid } = pod.metadata;
    const claim = parseClaim(pod.status?.containerStatuses?.[0]?.containerID);
    if (claim) {
      await this.judgeForeignClaim(pod, claim);
      return;
    }

    // The claim: only one runner's write can succeed against this resourceVersion.
    const startedAt = new Date().toISOString();
    const claimed = `${CONTAINER_ID_SCHEME}${this.id}`;
    try {
      await this.client.mergePatch(paths.podStatus(namespace, name), {
        metadata: { uid, resourceVersion: pod.metadata.resourceVersion },
        status: { containerStatuses: this.containerStatuses(pod, claimed, { running: { startedAt } }, true) },
      });
    } catch (err) {
      // A conflict means the pod changed meanwhile (perhaps another runner claimed it): the
      // informer brings the newer pod, and it is judged again.
      if (isConflict(err) || isNotFound(err)) return;
      throw err;
    }
    this.handled.add(uid);
    if (this.stopping) return;

    const logFile = join(this.options.logDir, `${namespace}_${name}.log`);
    const env = {
      // Node's compile cache, shared by every agent: most of an agent's start-up is compiling the
      // same modules, and a burst of starts on a small machine is what the watchdog then waits on.
      NODE_COMPILE_CACHE: join(stateRoot(), "sandbox-runner", "compile-cache"),
      ...baseEnv(),
      ...(this.options.env ?? {}),
      ...podEnv(pod),
      KUBECONFIG: this.options.kubeconfig,
    };
    const [command, ...args] = this.options.command ?? EXAMPLE_AGENT;
    // Its own process group: a Ctrl-C at the terminal reaches the runner, which decides what
    // happens to the agents, and a kill reaches anything the agent started.
    const child = spawn(command as string, args, { env, stdio: ["ignore", "pipe", "pipe"], detached: true });
    const out = createWriteStream(logFile, { flags: "a" });
    const proc: Proc = {
      namespace,
      pod: name,
      uid,
      child,
      startedAt,
      containerId: `${claimed}/${child.pid ?? 0}`,
      logFile,
      recorded: Promise.resolve(),
      exited: Promise.resolve(),
    };
    // Where the process is, so a later runner can find it if this one dies without stopping it.
    proc.recorded = this.client
      .mergePatch(paths.podStatus(namespace, name), {
        metadata: { uid },
        status: { containerStatuses: this.containerStatuses(pod, proc.containerId, { running: { startedAt } }, true) },
      })
      .then(
        () => undefined,
        (err: unknown) => {
          if (!isNotFound(err) && !isInvalidUid(err)) this.log.warn({ pod: name, err: String(err) }, "could not record the sandbox's pid");
        },
      );
    proc.exited = new Promise<void>((resolve) => {
      child.once("close", (code, signal) => {
        out.end();
        this.procs.delete(uid);
        void this.track(this.onExit(proc, pod, code, signal)).finally(resolve);
      });
    });
    child.once("error", (err) => {
      out.write(`sandbox-runner: cannot start ${command}: ${err.message}\n`);
      proc.lastError = `cannot start the agent: ${err.message}`;
    });
    this.capture(proc, child, out);
    this.procs.set(uid, proc);
    this.log.info({ pod: `${namespace}/${name}`, agentPid: child.pid, logFile }, "started the sandbox");
    this.emit({ type: "started", namespace, pod: name, uid, pid: child.pid ?? 0, logFile });
    await proc.recorded;
  }

  private capture(proc: Proc, child: ChildProcess, out: WriteStream): void {
    const prefix = `[${proc.namespace}/${proc.pod}] `;
    for (const stream of [child.stdout, child.stderr]) {
      let partial = "";
      stream?.on("data", (chunk: Buffer) => {
        out.write(chunk);
        const lines = (partial + chunk.toString()).split("\n");
        partial = lines.pop() ?? "";
        for (const line of lines) this.line(proc, prefix, line);
      });
      stream?.on("end", () => {
        if (partial) this.line(proc, prefix, partial);
        partial = "";
      });
    }
  }

  private line(proc: Proc, prefix: string, line: string): void {
    if (!line) return;
    this.options.echo?.(prefix + line);
    // The kubelet's FallbackToLogsOnError, roughly: the last error the agent logged says why it
    // ended. Agent logs are pino JSON; anything else counts as an error only on its own.
    try {
      const record = JSON.parse(line) as { level?: unknown; msg?: unknown };
      if ((record.level === "error" || record.level === "fatal" || (typeof record.level === "number" && record.level >= 50)) && typeof record.msg === "string") {
        proc.lastError = record.msg;
      }
    } catch {
      proc.lastError = line;
    }
  }

  private kill(proc: Proc, why: string): void {
    if (proc.killedBecause) return;
    proc.killedBecause = why;
    this.log.info({ pod: `${proc.namespace}/${proc.pod}`, agentPid: proc.child.pid, why }, "killing the sandbox");
    killGroup(proc.child);
    this.emit({ type: "killed", namespace: proc.namespace, pod: proc.pod, uid: proc.uid, why });
  }

  private killAllNow(): void {
    for (const proc of this.procs.values()) killGroup(proc.child);
  }

  private async onExit(proc: Proc, pod: Pod, code: number | null, signal: NodeJS.Signals | null): Promise<void> {
    // As a shell reports them: 127 when the command could not be started, 128+n for signal n.
    const exitCode = proc.child.pid === undefined ? 127 : (code ?? 128 + (signal ? (constants.signals[signal] ?? 9) : 9));
    this.log.info({ pod: `${proc.namespace}/${proc.pod}`, exitCode, signal, killed: proc.killedBecause }, "the sandbox exited");
    const ended = { type: "exited" as const, namespace: proc.namespace, pod: proc.pod, uid: proc.uid, code: exitCode };
    // Killed because its pod is gone or going: there is nobody left to tell.
    if (proc.killedBecause || this.stopping) {
      this.emit(ended);
      return;
    }
    await proc.recorded;
    const phase = exitCode === 0 ? "Succeeded" : "Failed";
    const terminated: Json = {
      exitCode,
      reason: exitCode === 0 ? "Completed" : signal ? "Killed" : "Error",
      startedAt: proc.startedAt,
      finishedAt: new Date().toISOString(),
      containerID: proc.containerId,
    };
    if (exitCode !== 0 && proc.lastError) terminated.message = proc.lastError.slice(0, MAX_MESSAGE);
    const reported = await this.report(pod, phase, this.containerStatuses(pod, proc.containerId, { terminated }, false));
    this.emit(reported ? { ...ended, reported: phase } : ended);
  }

  /** Writes the pod's final phase, retrying transient failures; false when the pod is gone. */
  private async report(pod: Pod, phase: "Succeeded" | "Failed", containerStatuses: Json[]): Promise<boolean> {
    const { name, namespace, uid } = pod.metadata;
    const now = new Date().toISOString();
    // A merge patch replaces lists whole, so the conditions kwok wrote are kept with the
    // readiness ones turned off, as a kubelet reports a pod whose containers have stopped.
    const conditions = (pod.status?.conditions ?? []).map((c) =>
      c.type === "Ready" || c.type === "ContainersReady" ? { ...c, status: "False", reason: "PodCompleted", lastTransitionTime: now } : c,
    );
    const patch = { metadata: { uid }, status: { phase, conditions, containerStatuses } };
    const deadline = Date.now() + WRITE_DEADLINE_MS;
    for (let delay = 200; ; delay = Math.min(5_000, delay * 2)) {
      try {
        await this.client.mergePatch(paths.podStatus(namespace, name), patch);
        return true;
      } catch (err) {
        // Gone, or the name now belongs to a newer pod (the uid in the patch no longer matches).
        if (isNotFound(err) || isInvalidUid(err)) return false;
        if (Date.now() > deadline || this.stopping) {
          this.log.error({ pod: `${namespace}/${name}`, err: String(err) }, "gave up reporting how the sandbox ended");
          return false;
        }
        this.log.warn({ pod: `${namespace}/${name}`, err: String(err) }, "reporting how the sandbox ended failed; retrying");
        await sleep(delay);
      }
    }
  }

  /** A pod another runner claimed: leave it to that runner, unless that runner is gone. */
  private async judgeForeignClaim(pod: Pod, claim: Claim): Promise<void> {
    const { name, namespace, uid } = pod.metadata;
    const owner = `${claim.host}/${claim.pid}.${claim.instance}`;
    const alive = claim.host !== hostname() ? undefined : claim.pid === process.pid ? liveInstances.has(owner) : pidAlive(claim.pid);
    if (alive !== false) {
      if (!this.foreign.has(uid)) {
        this.foreign.add(uid);
        this.log.info({ pod: `${namespace}/${name}`, owner, alive }, "pod is another runner's; leaving it alone");
      }
      return;
    }
    this.handled.add(uid);
    // The agent may have outlived its runner. Kill it only if it is provably this pod's agent.
    if (claim.childPid && pidAlive(claim.childPid) && processServes(claim.childPid, pod)) {
      try {
        process.kill(claim.childPid, "SIGKILL");
      } catch {
        // gone meanwhile
      }
    }
    this.log.warn({ pod: `${namespace}/${name}`, owner }, "the runner that started this sandbox is gone; reporting it lost");
    const now = new Date().toISOString();
    const status = pod.status?.containerStatuses?.[0] as { containerID?: string; state?: { running?: { startedAt?: string } } } | undefined;
    const containerId = status?.containerID ?? "";
    const terminated = {
      exitCode: 137,
      reason: "ContainerStatusUnknown",
      message: `the sandbox runner that started it (${owner}) is gone`,
      startedAt: status?.state?.running?.startedAt ?? now,
      finishedAt: now,
      containerID: containerId,
    };
    if (await this.report(pod, "Failed", this.containerStatuses(pod, containerId, { terminated }, false))) {
      this.emit({ type: "lost", namespace, pod: name, uid, owner });
    }
  }
}

function isInvalidUid(err: unknown): boolean {
  return err instanceof ApiError && err.code === 422 && err.message.includes("metadata.uid");
}

function killGroup(child: ChildProcess): void {
  if (child.pid === undefined || child.exitCode !== null || child.signalCode !== null) return;
  try {
    process.kill(-child.pid, "SIGKILL");
  } catch {
    try {
      child.kill("SIGKILL");
    } catch {
      // already gone
    }
  }
}

/** Whether process `pid` carries this pod's identity in its environment (Linux /proc). */
function processServes(pid: number, pod: Pod): boolean {
  let environ: string[];
  try {
    environ = readFileSync(`/proc/${pid}/environ`, "utf8").split("\0");
  } catch {
    return false;
  }
  const env = podEnv(pod);
  return [SANDBOX_ENV.runName, SANDBOX_ENV.runNamespace, SANDBOX_ENV.attempt].every((key) => env[key] !== undefined && environ.includes(`${key}=${env[key]}`));
}

// ---------------------------------------------------------------------------------------------
// the command line

const USAGE = `usage: KUBECONFIG=... node harness/sandbox-runner.ts [flags] [-- command args...]

  --namespaces=a,b     namespaces to watch (default: all)
  --log-dir=DIR        one log file per pod (default: <state>/sandbox-runner/logs)
  --outbox-dir=DIR     EXAMPLE_OUTBOX_DIR for the agents (default: <state>/sandbox-runner/outbox)
  --env=KEY=VALUE      environment for every agent (repeatable); EXAMPLE_* of this process are passed on
  --echo               print every agent's output, prefixed with its namespace/pod
  --log-level=LEVEL    the runner's own log level (default info)

The command defaults to the example agent (node operator/example-agent/main.ts).
`;

async function main(argv: string[]): Promise<number> {
  let parsed;
  try {
    parsed = parseArgs({
      args: argv,
      allowPositionals: true,
      options: {
        namespaces: { type: "string" },
        "log-dir": { type: "string" },
        "outbox-dir": { type: "string" },
        env: { type: "string", multiple: true },
        echo: { type: "boolean" },
        "log-level": { type: "string" },
        help: { type: "boolean", short: "h" },
      },
    });
  } catch (err) {
    process.stderr.write(`${(err as Error).message}\n\n${USAGE}`);
    return 2;
  }
  const { values, positionals } = parsed;
  if (values.help) {
    process.stdout.write(USAGE);
    return 0;
  }
  const kubeconfig = process.env.KUBECONFIG;
  if (!kubeconfig) {
    process.stderr.write(`KUBECONFIG must name the cluster's kubeconfig (eval "$(hack/control-plane.sh up --nodes)")\n\n${USAGE}`);
    return 2;
  }
  const state = join(stateRoot(), "sandbox-runner");
  const env: Record<string, string> = { EXAMPLE_OUTBOX_DIR: values["outbox-dir"] ?? join(state, "outbox") };
  for (const [key, value] of Object.entries(process.env)) if (key.startsWith("EXAMPLE_") && value !== undefined) env[key] = value;
  for (const pair of values.env ?? []) {
    const at = pair.indexOf("=");
    if (at <= 0) {
      process.stderr.write(`--env=${pair}: expected KEY=VALUE\n`);
      return 2;
    }
    env[pair.slice(0, at)] = pair.slice(at + 1);
  }
  const log = pino({ name: "sandbox-runner", level: values["log-level"] ?? "info", timestamp: pino.stdTimeFunctions.isoTime }, pino.destination(2));
  const runner = new SandboxRunner({
    kubeconfig,
    namespaces: (values.namespaces ?? "").split(",").map((n) => n.trim()).filter(Boolean),
    command: positionals.length ? positionals : undefined,
    env,
    logDir: values["log-dir"] ?? join(state, "logs"),
    echo: values.echo ? (line) => process.stdout.write(`${line}\n`) : undefined,
    log,
  });
  await runner.start();
  await new Promise<void>((resolve) => {
    process.once("SIGINT", () => resolve());
    process.once("SIGTERM", () => resolve());
  });
  await runner.stop();
  return 0;
}

if (import.meta.main) {
  process.exitCode = await main(process.argv.slice(2)).catch((err: unknown) => {
    process.stderr.write(`sandbox-runner: ${err instanceof Error ? err.message : String(err)}\n`);
    return 1;
  });
}
