// bench:vs-job — AgentRuns beside Jobs on one local control plane (kwok node), in one process.
//
// Each round creates a batch of Jobs and a batch of AgentRuns, alternating which goes first, with
// pods of the same template. Every Job has activeDeadlineSeconds D; every run heartbeatTimeout D
// and a sandbox that never heartbeats, so both controllers create a pod, see it run, and delete it
// D after it started. From its own watches the bench measures:
// - create to pod: the create request sent to the pod first seen (p50, p99), and throughput: pods
//   a second from the batch's first create to its last pod;
// - deadline to deletion: job.status.startTime + D, or the agent container's startedAt + D, to
//   the pod's deletion first seen;
// - API requests per object, from the API server's audit log, by identity and user agent: the
//   Job controller's service account, and the operator's own (agent-watchdog-bench/operator),
//   split at the batch's first deadline into "to create" and "to kill";
// - the CPU time of the API server, etcd and the batch's controller (kube-controller-manager for
//   Jobs, the operator for AgentRuns) over the batch, per object, from /proc: where the time goes
//   when the API server is the bottleneck.
//
// Usage: npm run bench:vs-job -- [--runs 200] [--rounds 2] [--deadline 20s] [--concurrency N]
//        [--sandbox-service-account none|namespace|run]
import { parseArgs } from "node:util";
import { parseDuration } from "../../operator/api/duration.ts";
import { LABELS } from "../../operator/api/annotations.ts";
import { paths, type Json, type KubeClient } from "../../operator/kube/client.ts";
import {
  AuditLog,
  breakdown,
  componentPid,
  cpuSecondsOf,
  clientFor,
  controlPlaneUp,
  freshNamespace,
  JOB_CONTROLLER_USER,
  keepWatching,
  log as logAs,
  OPERATOR_USER,
  operatorKubeconfig,
  pool,
  round,
  startOperator,
  FROM_SOURCES_OPTION,
  operatorMain,
  summary,
  until,
  type AuditedRequest,
} from "./lib.ts";

const HELP = `usage: npm run bench:vs-job -- [--runs 200] [--rounds 2] [--deadline 20s] [--concurrency N]
                                   [--sandbox-service-account MODE]

  --runs N        objects of each kind per round (default 200)
  --rounds N      rounds; each creates a batch of Jobs and one of AgentRuns, alternating which
                  goes first (default 2)
  --deadline D    Jobs' activeDeadlineSeconds and runs' heartbeatTimeout (default 20s); it must
                  be longer than a batch takes to start
  --concurrency N the operator's --concurrency (default: its own default)
  --sandbox-service-account MODE
                  the operator's sandbox identity (default none: the operator's own cost; run,
                  the chart's default, adds a ServiceAccount, a Role and a RoleBinding per run)
  --from-sources  run the operator from its TypeScript sources, not as the image runs it

Needs the local control plane with a kwok node (started if it is not running). Prints a table and
one JSON line.
`;

const { values } = parseArgs({
  options: {
    runs: { type: "string", default: "200" },
    rounds: { type: "string", default: "2" },
    deadline: { type: "string", default: "20s" },
    concurrency: { type: "string" },
    "sandbox-service-account": { type: "string", default: "none" },
    ...FROM_SOURCES_OPTION,
    help: { type: "boolean", default: false },
  },
});
if (values.help) {
  process.stdout.write(HELP);
  process.exit(0);
}
const N = Number(values.runs);
const ROUNDS = Number(values.rounds);
const deadlineMs = parseDuration(values.deadline as string);
const log = (message: string) => logAs("bench:vs-job", message);

type Kind = "Job" | "AgentRun";
const CONCURRENT_CREATES = 16;
const POD_TEMPLATE = { containers: [{ name: "agent", image: "agent-watchdog:bench" }] };

/** What the bench's watches saw of one pod. */
interface PodSeen {
  owner: string;
  firstSeen: number;
  deletionSeen?: number;
  agentStartedAt?: number;
}

interface BatchResult {
  kind: Kind;
  round: number;
  createToPodMs: number[];
  podsPerSecond: number;
  deadlineToDeletionMs: number[];
  requestsToCreate: AuditedRequest[];
  requestsToKill: AuditedRequest[];
  /** CPU seconds each process spent from the batch's first create until its controller went quiet. */
  cpuSeconds: Record<Process, number>;
}

/** Whose CPU time a batch reads: the API server and etcd, and the controller of the batch's kind. */
type Process = "apiserver" | "etcd" | "controller";

class Observer {
  readonly pods = new Map<string, PodSeen>();
  readonly jobStart = new Map<string, number>();
  private readonly aborts: AbortController[] = [];
  private readonly client: KubeClient;
  private readonly ns: string;

  constructor(client: KubeClient, ns: string) {
    this.client = client;
    this.ns = ns;
  }

  async start(): Promise<void> {
    const keep = (abort: AbortController) => this.aborts.push(abort);
    await keepWatching((onEnd) => this.client.watch(paths.pods(this.ns), {}, (type, pod) => this.onPod(type, pod), onEnd, 600_000), () => this.closed, keep);
    await keepWatching((onEnd) => this.client.watch(`/apis/batch/v1/namespaces/${this.ns}/jobs`, {}, (_type, job) => this.onJob(job), onEnd, 600_000), () => this.closed, keep);
  }

  private closed = false;
  stop(): void {
    this.closed = true;
    for (const a of this.aborts) a.abort();
  }

  private onPod(type: string, pod: Json): void {
    const now = Date.now();
    const meta = pod.metadata as { name: string; labels?: Record<string, string>; deletionTimestamp?: string };
    const owner = meta.labels?.["batch.kubernetes.io/job-name"] ?? meta.labels?.[LABELS.run];
    if (!owner) return;
    let seen = this.pods.get(meta.name);
    if (!seen) this.pods.set(meta.name, (seen = { owner, firstSeen: now }));
    if ((type === "DELETED" || meta.deletionTimestamp) && seen.deletionSeen === undefined) seen.deletionSeen = now;
    const statuses = ((pod.status as { containerStatuses?: { name: string; state?: { running?: { startedAt?: string } } }[] } | undefined)?.containerStatuses ?? []);
    const started = statuses.find((c) => c.name === "agent")?.state?.running?.startedAt;
    if (started) seen.agentStartedAt = Date.parse(started);
  }

  private onJob(job: Json): void {
    const name = (job.metadata as { name: string }).name;
    const start = (job.status as { startTime?: string } | undefined)?.startTime;
    if (start) this.jobStart.set(name, Date.parse(start));
  }

  podsOf(owners: ReadonlySet<string>): PodSeen[] {
    return [...this.pods.values()].filter((p) => owners.has(p.owner));
  }
}

function manifest(kind: Kind, name: string): Json {
  const seconds = Math.round(deadlineMs / 1000);
  if (kind === "Job") {
    return {
      apiVersion: "batch/v1",
      kind: "Job",
      metadata: { name },
      spec: { activeDeadlineSeconds: seconds, backoffLimit: 0, template: { spec: { ...POD_TEMPLATE, restartPolicy: "Never" } } },
    };
  }
  return {
    apiVersion: "watchdog.dev/v1alpha1",
    kind: "AgentRun",
    metadata: { name },
    spec: {
      template: { spec: POD_TEMPLATE },
      watchdog: { heartbeatTimeout: `${seconds}s`, maxRestarts: 0, stall: { enabled: false } },
    },
  };
}

/** The processes whose CPU time a batch of `kind` reads: the Job controller lives in kube-controller-manager. */
type Pids = Record<Kind, Record<Process, number | undefined>>;

async function batch(client: KubeClient, ns: string, observer: Observer, audit: AuditLog, kind: Kind, roundNo: number, pids: Pids): Promise<BatchResult> {
  const cpu = () => Object.fromEntries(Object.entries(pids[kind]).map(([name, pid]) => [name, cpuSecondsOf(pid)])) as Record<Process, number>;
  const user = kind === "Job" ? JOB_CONTROLLER_USER : OPERATOR_USER;
  const names = Array.from({ length: N }, (_, i) => `${kind === "Job" ? "job" : "run"}-${roundNo}-${i}`);
  const owners = new Set(names);
  const requests: AuditedRequest[] = [];
  // Watches are the informers' own, not any object's.
  const collect = () => requests.push(...audit.read().filter((r) => r.user === user && r.namespace === ns && r.verb !== "watch"));
  audit.read(); // what came before this batch is not its
  log(`round ${roundNo}: ${N} ${kind}s`);
  const sentAt = new Map<string, number>();
  const collection = kind === "Job" ? `/apis/batch/v1/namespaces/${ns}/jobs` : paths.runs(ns);
  const cpuBefore = cpu();
  const first = Date.now();
  await pool(names, CONCURRENT_CREATES, async (name) => {
    sentAt.set(name, Date.now());
    await client.create(collection, manifest(kind, name));
  });
  await until(`a pod for each ${kind}`, () => observer.podsOf(owners).length >= N, 300_000, 50);
  const pods = observer.podsOf(owners);
  const firstPods = new Map<string, PodSeen>();
  for (const pod of pods) if (!firstPods.has(pod.owner) || (firstPods.get(pod.owner) as PodSeen).firstSeen > pod.firstSeen) firstPods.set(pod.owner, pod);
  const createToPodMs = names.map((n) => (firstPods.get(n) as PodSeen).firstSeen - (sentAt.get(n) as number));
  const lastPod = Math.max(...[...firstPods.values()].map((p) => p.firstSeen));
  const podsPerSecond = N / ((lastPod - first) / 1000);

  await until(`every ${kind}'s pod deleted after its deadline`, () => observer.podsOf(owners).every((p) => p.deletionSeen !== undefined), deadlineMs + 300_000, 100);
  const deadlineOf = (pod: PodSeen) => (kind === "Job" ? observer.jobStart.get(pod.owner) : pod.agentStartedAt);
  const deadlines = new Map<string, number>();
  for (const pod of firstPods.values()) {
    const start = deadlineOf(pod);
    if (start === undefined) throw new Error(`no start time seen for ${kind} ${pod.owner}`);
    deadlines.set(pod.owner, start + deadlineMs);
  }
  const deadlineToDeletionMs = [...firstPods.values()].map((p) => (p.deletionSeen as number) - (deadlines.get(p.owner) as number));
  // The controller is done once it has sent nothing for five seconds.
  let last = -1;
  await until(
    `the ${kind} controller to go quiet`,
    async () => {
      collect();
      const newest = requests.at(-1)?.at ?? 0;
      const quiet = newest === last && Date.now() - newest > 5_000;
      last = newest;
      return quiet;
    },
    300_000,
    1000,
  );
  const firstDeadline = Math.min(...deadlines.values());
  const cpuAfter = cpu();
  const cpuSeconds = Object.fromEntries(Object.entries(cpuAfter).map(([name, after]) => [name, after - cpuBefore[name as Process]])) as Record<Process, number>;
  return {
    cpuSeconds,
    kind,
    round: roundNo,
    createToPodMs,
    podsPerSecond,
    deadlineToDeletionMs,
    requestsToCreate: requests.filter((r) => r.at < firstDeadline),
    requestsToKill: requests.filter((r) => r.at >= firstDeadline),
  };
}

function figures(results: BatchResult[]) {
  const perObject = (requests: AuditedRequest[]) => round(requests.length / (N * results.length));
  const all = (pick: (r: BatchResult) => number[]) => results.flatMap(pick);
  const create = all((r) => r.createToPodMs);
  const kill = all((r) => r.deadlineToDeletionMs);
  const toCreate = results.flatMap((r) => r.requestsToCreate);
  const toKill = results.flatMap((r) => r.requestsToKill);
  const cpuMsPerObject = (process: Process) => round((results.reduce((sum, r) => sum + r.cpuSeconds[process], 0) * 1000) / (N * results.length), 1);
  return {
    cpuMsPerObject: { apiserver: cpuMsPerObject("apiserver"), etcd: cpuMsPerObject("etcd"), controller: cpuMsPerObject("controller") },
    createToPodMs: summary(create),
    podsPerSecond: round(Math.min(...results.map((r) => r.podsPerSecond)), 1),
    podsPerSecondByRound: results.map((r) => round(r.podsPerSecond, 1)),
    deadlineToDeletionMs: summary(kill),
    requestsPerCreated: perObject(toCreate),
    requestsPerKilled: perObject(toKill),
    requestsToCreate: breakdown(toCreate),
    requestsToKill: breakdown(toKill),
    userAgents: [...new Set([...toCreate, ...toKill].map((r) => r.userAgent))],
  };
}

async function main(): Promise<void> {
  const kubeconfig = controlPlaneUp("--nodes");
  const client = clientFor(kubeconfig);
  const audit = new AuditLog(kubeconfig);
  const ns = await freshNamespace(client, "bench-vs-job", "bench:vs-job");
  const operatorArgs = [...(values.concurrency ? [`--concurrency=${values.concurrency}`] : []), `--sandbox-service-account=${values["sandbox-service-account"]}`];
  const operator = await startOperator(operatorMain(values["from-sources"]), await operatorKubeconfig(client, kubeconfig), [ns], operatorArgs);
  const server = { apiserver: componentPid(kubeconfig, "kube-apiserver"), etcd: componentPid(kubeconfig, "etcd") };
  const pids: Pids = { Job: { ...server, controller: componentPid(kubeconfig, "kube-controller-manager") }, AgentRun: { ...server, controller: operator.child.pid } };
  const observer = new Observer(client, ns);
  await observer.start();
  const results: BatchResult[] = [];
  try {
    for (let r = 1; r <= ROUNDS; r++) {
      const order: Kind[] = r % 2 === 1 ? ["Job", "AgentRun"] : ["AgentRun", "Job"];
      for (const kind of order) results.push(await batch(client, ns, observer, audit, kind, r, pids));
    }
  } finally {
    observer.stop();
    await operator.stop();
    await client.delete(`/api/v1/namespaces/${ns}`).catch(() => {});
  }
  const job = figures(results.filter((r) => r.kind === "Job"));
  const run = figures(results.filter((r) => r.kind === "AgentRun"));
  const ratio = (a: number, b: number) => round(a / b);
  const ratios = {
    createToPodP50: ratio(run.createToPodMs.p50, job.createToPodMs.p50),
    createToPodP99: ratio(run.createToPodMs.p99, job.createToPodMs.p99),
    throughput: ratio(run.podsPerSecond, job.podsPerSecond),
    deadlineToDeletionP50: ratio(run.deadlineToDeletionMs.p50, job.deadlineToDeletionMs.p50),
    deadlineToDeletionP99: ratio(run.deadlineToDeletionMs.p99, job.deadlineToDeletionMs.p99),
    requestsPerCreated: ratio(run.requestsPerCreated, job.requestsPerCreated),
    requestsPerKilled: ratio(run.requestsPerKilled, job.requestsPerKilled),
  };
  const row = (label: string, j: string | number, a: string | number, x: number) => `${label.padEnd(34)}${String(j).padStart(16)}${String(a).padStart(16)}${String(x).padStart(10)}`;
  const dist = (d: { p50: number; p99: number }) => `${d.p50} / ${d.p99}`;
  process.stdout.write(
    [
      `${N} objects of each kind a round, ${ROUNDS} rounds, deadline ${values.deadline}, sandbox identity ${values["sandbox-service-account"]}`,
      row("", "Job", "AgentRun", 0).replace(/0$/, "ratio"),
      row("create to pod ms (p50 / p99)", dist(job.createToPodMs), dist(run.createToPodMs), ratios.createToPodP50),
      row("pods a second (slowest round)", job.podsPerSecond, run.podsPerSecond, ratios.throughput),
      row("deadline to deletion ms (p50/p99)", dist(job.deadlineToDeletionMs), dist(run.deadlineToDeletionMs), ratios.deadlineToDeletionP99),
      row("API requests per created object", job.requestsPerCreated, run.requestsPerCreated, ratios.requestsPerCreated),
      row("API requests per kill", job.requestsPerKilled, run.requestsPerKilled, ratios.requestsPerKilled),
      row("API server CPU ms per object", job.cpuMsPerObject.apiserver, run.cpuMsPerObject.apiserver, ratio(run.cpuMsPerObject.apiserver, job.cpuMsPerObject.apiserver)),
      row("etcd CPU ms per object", job.cpuMsPerObject.etcd, run.cpuMsPerObject.etcd, ratio(run.cpuMsPerObject.etcd, job.cpuMsPerObject.etcd)),
      row("controller CPU ms per object", job.cpuMsPerObject.controller, run.cpuMsPerObject.controller, ratio(run.cpuMsPerObject.controller, job.cpuMsPerObject.controller)),
      `Job controller requests to create: ${JSON.stringify(job.requestsToCreate)}; to kill: ${JSON.stringify(job.requestsToKill)}`,
      `operator requests to create: ${JSON.stringify(run.requestsToCreate)}; to kill: ${JSON.stringify(run.requestsToKill)}`,
      `user agents: Job controller ${job.userAgents.join(", ")}; operator ${run.userAgents.join(", ")}`,
      `targets: create to pod p50 and throughput at least 1.0x the Job's: ${ratios.createToPodP50 <= 1 && ratios.throughput >= 1 ? "met" : "missed"}; ` +
        `at most 3 requests per created run: ${run.requestsPerCreated <= 3 ? "met" : "missed"}; at most 3 per kill: ${run.requestsPerKilled <= 3 ? "met" : "missed"}; ` +
        `deadline to deletion ahead of the Job's: ${run.deadlineToDeletionMs.p99 <= job.deadlineToDeletionMs.p99 ? "met" : "missed"}`,
      `json ${JSON.stringify({ runs: N, rounds: ROUNDS, deadlineMs, job, agentRun: run, ratios })}`,
      "",
    ].join("\n"),
  );
}

main().catch((err: unknown) => {
  process.stderr.write(`bench:vs-job failed: ${err instanceof Error ? err.stack : String(err)}\n`);
  process.exit(1);
});
