// `npm run soak`: many runs of the example agent's behaviours under many faults at once, for a
// while, judged by an independent observer (measure/soak/observer.ts) that trusts none of the
// operator's own figures. Exits non-zero when any promise was broken: two sandboxes of one run at
// once, a run written by two replicas at once, a retry before its retry-after, a healthy sandbox
// killed, a run lost or stuck, a ledger row missing, a side effect not exactly once, or an operator
// that crashed by itself.
//
// The parts: world.ts (the cluster and the operator replicas behind TCP proxies), faults.ts (what
// breaks and when), observer.ts (what happened), audit.ts (what each replica wrote, from the API
// server's audit log), analyse.ts (what it means), report.ts (the table and the JSON line),
// self-test.ts (a record with one violation of each kind, and a clean one with a shard handoff).
import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { Client } from "pg";
import { parseDuration } from "../operator/api/duration.ts";
import { isAlreadyExists, paths, type Json } from "../operator/kube/client.ts";
import { emailsByRun } from "../harness/judge.ts";
import { FINAL_PHASES } from "../harness/driver.ts";
import { APPROVAL_ANSWER, manifestFor, type Behaviour } from "../harness/scenario.ts";
import { apply, random, schedule, type FaultContext } from "./soak/faults.ts";
import { ReplicaWrites } from "./soak/audit.ts";
import { Observer } from "./soak/observer.ts";
import type { AnswerRecord, FaultRecord, LedgerRecord, SoakRecord } from "./soak/record.ts";
import { checkHistoryCommand, judge } from "./soak/verdict.ts";
import { soakWorld, type SoakWorld } from "./soak/world.ts";
import { stateRoot } from "../harness/sandbox-runner.ts";
import { DEFECTS, REINTRODUCE_ENV, chosenDefect, type Defect } from "../operator/defects.ts";

const USAGE = `usage: npm run soak -- [--runs 60] [--duration 5m] [--node kubelet|kwok] [--seed N]
                     [--replicas 2] [--shards 1]

  --runs N          runs to create, spread over the first 60% of the duration (default 60)
  --replicas N      operator replicas running at once (default 2), each behind a TCP proxy of its
                    own and as a ServiceAccount of its own, so that the API server's audit log
                    tells their writes apart
  --shards S        shards of the runs (default 1: the replicas elect one leader, which supervises
                    every run); with S > 1 the replicas run with --shards=S and share the shards
  --duration D      how long faults are injected, e.g. 5m or 30m (default 5m); the soak then
                    heals every fault and waits for the runs to settle (up to --settle)
  --node KIND       kubelet: real pods of the project image on the real node (needs root);
                    kwok: the kwok node, with the local sandbox runner playing the kubelet
                    (default kubelet)
  --seed N          seed of the fault schedule and the choice of victims (default: random,
                    printed, so that a soak can be played again)
  --settle D        how long the runs may take to settle after the faults (default 5m)
  --namespace NAME  where the runs go (default agent-watchdog-soak); it is recreated
  --repeat N        run N soaks one after another, the first with --seed and the next with seeds
                    drawn from it; stop at the first that breaks a promise, keeping its history
  --reintroduce NAME
                    run the operator replicas with one fixed defect re-introduced (a development
                    switch the image does not have; names in operator/defects.ts), to show that
                    the checker flags what it does; the history records which
  --skewed-steps N  steps of the sandboxes whose clock is off (2 s each; default 8, as the others):
                    60 makes them work for twice their heartbeat timeout, so that a clock taken
                    for the server's has deadlines to get wrong
  --self-test       the checker's own test (as npm run check-history -- --self-test)
  --record FILE     judge again a history an earlier soak wrote (as npm run check-history -- FILE)

Faults: SIGKILL of the leading replica every 30 s (a graceful rollout every fourth time; sharded,
of a replica holding shards, drawn at random),
operator connections cut every 45 s, an agent process killed every 40 s; every five minutes a
409 storm on the runs' metadata, the leader's connections stalled for 20 s, kube-apiserver and
etcd killed and restarted, the node paused for 30 to 90 s (kubelet only), PostgreSQL stopped for
60 s; one healthy run in four has a sandbox clock 10 minutes off (slow and fast in turn); about half the approval requests first get
a stray answer naming another request, which must be refused.

Each soak writes its history (history.json: pods, containers as containerd ran them, heartbeats,
phases, tool calls, approvals asked and answered, the ledger's rows, faults, the tenures of the
leader or shard Leases and the replicas' writes to the runs and their pods from the API server's
audit log) to its directory and takes its verdict from the checker, \`npm run check-history\`, on
that file. A write of a replica outside its tenure of the run's Lease is a run written by two
replicas at once.

Output: a table, then one JSON line. Exit 0 when every invariant held and the runs settled.
`;

/** The example agent's behaviours, in the proportions the soak creates them. */
const MIX = ["healthy", "hang-in-tool", "crash", "healthy", "rate-limited", "tool-loop", "await-approval", "side-effect-then-crash"] as const;

const SOAK_WATCHDOG = {
  heartbeatTimeout: "60s",
  maxRestarts: 3,
  killGracePeriod: "5s",
  backoff: { initial: "2s", factor: 2, max: "10s" },
  rateLimitBackoff: { initial: "2s", factor: 2, max: "10s" },
  stall: { timeout: "30s", maxNudges: 3 },
  releaseAwaitingAfter: "10s",
};


interface PlannedRun {
  name: string;
  behaviour: string;
  at: number;
  /** How far its sandbox's clock is off, ms (0: not at all). */
  skewMs: number;
}

function planRuns(count: number, durationMs: number, rand: () => number): PlannedRun[] {
  const window = durationMs * 0.6;
  let healthy = 0;
  return Array.from({ length: count }, (_, i) => {
    const behaviour = MIX[i % MIX.length] as string;
    // One healthy run in four has a sandbox clock ten minutes off, slow and fast in turn.
    const n = behaviour === "healthy" ? healthy++ : -1;
    const skewMs = n >= 0 && n % 4 === 0 ? (n % 8 === 0 ? -1 : 1) * 10 * 60_000 : 0;
    return { name: `r${i}-${behaviour}`, behaviour, at: Math.floor((i / count) * window + rand() * (window / count)), skewMs };
  });
}

function manifest(world: SoakWorld, run: PlannedRun, skewedSteps: number | undefined): Json {
  // --skewed-steps: a skewed sandbox that works past its heartbeat timeout gives its clock deadlines
  // to get wrong (a slow clock taken for the server's kills it, a fast one keeps a dead one).
  const skew: Record<string, string> = run.skewMs ? { EXAMPLE_CLOCK_SKEW_MS: String(run.skewMs), ...(skewedSteps ? { EXAMPLE_STEPS: String(skewedSteps) } : {}) } : {};
  const env = { ...world.sandboxEnv, ...skew };
  const watchdog = run.behaviour === "hang-in-tool" ? { ...SOAK_WATCHDOG, maxRestarts: 1 } : SOAK_WATCHDOG;
  const out = manifestFor({ name: run.name, behaviour: run.behaviour as Behaviour, watchdog, expected: "" }, { image: world.image, env });
  (out.metadata as { labels: Record<string, string> }).labels = { "app.kubernetes.io/part-of": "agent-watchdog-soak" };
  return out;
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/**
 * Answers every pending approval a few seconds after it is asked, with the request's id. Before
 * about half of them it first gives a stray answer (rule 11's hostile case): one naming a request
 * that is not pending, with a text of its own, which the operator must refuse and never apply.
 * Every answer is written down before it is sent, for the checker.
 */
function approver(world: SoakWorld, rand: () => number, faults: FaultRecord[]): { answers: AnswerRecord[]; stop(): Promise<void> } {
  let stopped = false;
  const answers: AnswerRecord[] = [];
  const pendingSince = new Map<string, number>();
  const strayed = new Set<string>();
  const answer = (run: string, requestId: string, text: string, stray: boolean) => {
    answers.push({ run, requestId, answer: text, at: Date.now(), ...(stray ? { stray } : {}) });
    return world.client
      .mergePatch(paths.run(world.namespace, run), { metadata: { annotations: { "watchdog.dev/approve": text, "watchdog.dev/approval-id": requestId } } })
      .catch(() => undefined);
  };
  const loop = (async () => {
    while (!stopped) {
      try {
        const runs = (await world.client.get<{ items: Json[] }>(paths.runs(world.namespace))).items as { metadata: { name: string }; status?: { approval?: { id?: string; state?: string } } }[];
        for (const run of runs) {
          const approval = run.status?.approval;
          if (approval?.state !== "Pending" || !approval.id) continue;
          const key = `${run.metadata.name}/${approval.id}`;
          const since = pendingSince.get(key) ?? Date.now();
          pendingSince.set(key, since);
          if (!strayed.has(key)) {
            strayed.add(key);
            if (rand() < 0.5) {
              const named = `stray-${strayed.size}`;
              faults.push({ kind: "stray-answer", at: Date.now(), detail: `${run.metadata.name}: an answer naming ${named} while ${approval.id} is pending` });
              await answer(run.metadata.name, named, `stray answer ${strayed.size}`, true);
              continue;
            }
          }
          if (Date.now() - since < 3000) continue;
          await answer(run.metadata.name, approval.id, APPROVAL_ANSWER, false);
        }
      } catch {
        // the API server may be down for a moment: ask again
      }
      await sleep(1000);
    }
  })();
  return {
    answers,
    async stop() {
      stopped = true;
      await loop;
    },
  };
}

async function readLedger(databaseUrl: string, namespace: string): Promise<LedgerRecord[]> {
  const client = new Client({ connectionString: databaseUrl });
  await client.connect();
  try {
    const byRun = new Map<string, LedgerRecord>();
    const of = (uid: string) => byRun.get(uid) ?? (byRun.set(uid, { runUid: uid, transitions: [], toolCalls: [] }).get(uid) as LedgerRecord);
    const t = await client.query<{ run_uid: string; time: Date; to_phase: string }>("SELECT run_uid, time, to_phase FROM ledger_transitions WHERE namespace = $1", [namespace]);
    for (const row of t.rows) of(row.run_uid).transitions.push(`${row.time.getTime()}|${row.to_phase}`);
    const c = await client.query<{ run_uid: string; call_id: string }>("SELECT run_uid, call_id FROM ledger_tool_calls WHERE namespace = $1", [namespace]);
    for (const row of c.rows) of(row.run_uid).toolCalls.push(row.call_id);
    return [...byRun.values()];
  } finally {
    await client.end();
  }
}

interface SoakOptions {
  runs: number;
  durationMs: number;
  settleMs: number;
  node: "kubelet" | "kwok";
  seed: number;
  namespace: string;
  /** The fixed defect the operator replicas run with, if any. */
  reintroduced?: Defect;
  skewedSteps?: number;
  replicas: number;
  shards: number;
}

async function main(argv: string[]): Promise<number> {
  const { values } = parseArgs({
    args: argv,
    options: {
      runs: { type: "string" },
      duration: { type: "string" },
      node: { type: "string" },
      seed: { type: "string" },
      settle: { type: "string" },
      namespace: { type: "string" },
      repeat: { type: "string" },
      reintroduce: { type: "string" },
      "skewed-steps": { type: "string" },
      replicas: { type: "string" },
      shards: { type: "string" },
      record: { type: "string" },
      "self-test": { type: "boolean" },
      help: { type: "boolean", short: "h" },
    },
  });
  if (values.help) {
    process.stdout.write(USAGE);
    return 0;
  }
  // The offline modes are the checker's own.
  if (values["self-test"]) return checkHistoryCommand(["--self-test"]);
  if (values.record) return checkHistoryCommand([values.record]);
  const runs = Number(values.runs ?? 60);
  const node = values.node ?? "kubelet";
  const repeat = Number(values.repeat ?? 1);
  const firstSeed = values.seed !== undefined ? Number(values.seed) : Math.floor(Math.random() * 2 ** 31);
  if (!Number.isInteger(runs) || runs < 1) throw new Error(`--runs ${values.runs} must be a positive whole number`);
  if (node !== "kubelet" && node !== "kwok") throw new Error(`--node ${node} must be kubelet or kwok`);
  if (!Number.isInteger(firstSeed)) throw new Error(`--seed ${values.seed} must be a whole number`);
  if (!Number.isInteger(repeat) || repeat < 1) throw new Error(`--repeat ${values.repeat} must be a positive whole number`);
  const replicas = Number(values.replicas ?? 2);
  const shards = Number(values.shards ?? 1);
  if (!Number.isInteger(replicas) || replicas < 1 || replicas > 26) throw new Error(`--replicas ${values.replicas} must be a whole number from 1 to 26`);
  if (!Number.isInteger(shards) || shards < 1 || shards > 256) throw new Error(`--shards ${values.shards} must be a whole number from 1 to 256`);
  // The replicas inherit the soak's environment: the switch is set there, checked first.
  const chosen = chosenDefect({ [REINTRODUCE_ENV]: values.reintroduce ?? process.env[REINTRODUCE_ENV] });
  if (chosen.error) throw new Error(chosen.error);
  if (chosen.defect) process.env[REINTRODUCE_ENV] = chosen.defect;
  const skewedSteps = values["skewed-steps"] !== undefined ? Number(values["skewed-steps"]) : undefined;
  if (skewedSteps !== undefined && (!Number.isInteger(skewedSteps) || skewedSteps < 1)) throw new Error(`--skewed-steps ${values["skewed-steps"]} must be a positive whole number`);
  const options = { reintroduced: chosen.defect, skewedSteps, replicas, shards, runs, node, durationMs: parseDuration(values.duration ?? "5m"), settleMs: parseDuration(values.settle ?? "5m"), namespace: values.namespace ?? "agent-watchdog-soak" } as const;
  const seeds = random(firstSeed);
  for (let i = 1; i <= repeat; i++) {
    // The first soak takes the given seed; the next ones new seeds drawn from it, so that the
    // whole series plays again from one number.
    const seed = i === 1 ? firstSeed : Math.floor(seeds() * 2 ** 31);
    if (repeat > 1) process.stderr.write(`[soak] ${i} of ${repeat}, seed ${seed}\n`);
    const code = await soakOnce({ ...options, seed });
    if (code !== 0) {
      if (repeat > 1) process.stderr.write(`[soak] stopped at soak ${i} of ${repeat} (seed ${seed}): its history is kept for npm run check-history\n`);
      return code;
    }
  }
  if (repeat > 1) process.stderr.write(`[soak] all ${repeat} soaks broke no promise\n`);
  return 0;
}

/** One soak: its world, its runs and faults, its history written, then the checker's verdict. */
async function soakOnce({ runs, durationMs, settleMs, node, seed, namespace, reintroduced, skewedSteps, replicas, shards }: SoakOptions): Promise<number> {
  const dir = join(stateRoot(), "soak", `${Date.now()}`);
  const historyFile = join(dir, "history.json");
  mkdirSync(dir, { recursive: true });
  const log = (line: string) => process.stderr.write(`[soak ${new Date().toISOString().slice(11, 19)}] ${line}\n`);
  log(`seed ${seed}; files in ${dir}`);
  if (reintroduced) log(`the operator replicas run with a fixed defect re-introduced: ${reintroduced} (${DEFECTS[reintroduced]})`);
  const rand = random(seed);
  const world = await soakWorld({ node, namespace, dir, log, replicas, shards });
  stopOnSignal = () => world.teardown();
  const observer = new Observer(world.client, namespace, world.leases, world.nodeView, world.nodeEvents);
  let writes: ReplicaWrites | undefined;
  let following: NodeJS.Timeout | undefined;
  const faults: FaultRecord[] = [];
  let settled = false;
  let record: SoakRecord | undefined;
  // The log of every sandbox that failed, for whoever looks into an unexpected restart.
  observer.onFailedPod = (pod) => {
    void world.client
      .request<string>("GET", `${paths.pod(namespace, pod)}/log`, { text: true })
      .then((text) => writeFileSync(join(dir, `failed-${pod}.log`), text))
      .catch(() => undefined);
  };
  try {
    observer.start();
    // The Leases watched and the audit log followed before any replica starts: every tenure and
    // every write is seen from the first.
    await observer.leasesWatched();
    writes = new ReplicaWrites(world.auditLog, namespace, world.users);
    let unread = false;
    following = setInterval(() => {
      try {
        writes?.poll();
      } catch (err) {
        if (!unread) log(`reading the audit log failed (tried again every 2 s): ${err instanceof Error ? err.message : String(err)}`);
        unread = true;
      }
    }, 2000);
    await world.startReplicas();
    const startedAt = Date.now();
    const planned = planRuns(runs, durationMs, rand);
    // Behaviours that complete, so that a sandbox killed from outside costs one restart and no more.
    const completes = new Set(["healthy", "crash", "rate-limited", "side-effect-then-crash"]);
    const killable = new Set(planned.filter((r) => completes.has(r.behaviour)).map((r) => r.name));
    for (const r of planned.filter((p) => p.skewMs !== 0)) faults.push({ kind: "clock-skew", at: startedAt + r.at, detail: `${r.name}: sandbox clock ${Math.abs(r.skewMs) / 60_000} minutes ${r.skewMs > 0 ? "fast" : "slow"}` });
    const answering = approver(world, rand, faults);
    const creating = (async () => {
      for (const run of planned) {
        await sleep(Math.max(0, startedAt + run.at - Date.now()));
        for (let i = 0; ; i++) {
          try {
            await world.client.create(paths.runs(namespace), manifest(world, run, skewedSteps));
            break;
          } catch (err) {
            // An earlier try whose answer was lost may have created it: the plan's names are unique,
            // so the run that exists is this one.
            if (i > 0 && isAlreadyExists(err)) break;
            // the API server may be restarting: a user would apply again
            if (i > 60) throw err;
            await sleep(1000);
          }
        }
      }
    })();
    // Awaited only after the faults; until then a failure must not end the process unrecorded.
    creating.catch(() => undefined);
    const ctx: FaultContext = { world, observer, rand, log, killable };
    const running: Promise<void>[] = [];
    for (const fault of schedule(durationMs, node, rand)) {
      await sleep(Math.max(0, startedAt + fault.at - Date.now()));
      log(`fault ${fault.kind}${fault.forMs ? ` for ${fault.forMs / 1000} s` : ""}`);
      running.push(
        apply(ctx, fault).then(
          (r) => void faults.push(r),
          (err) => void faults.push({ kind: fault.kind, at: startedAt + fault.at, detail: `failed: ${err instanceof Error ? err.message : String(err)}`, skipped: "failed" }),
        ),
      );
    }
    await sleep(Math.max(0, startedAt + durationMs - Date.now()));
    log("faults over; waiting for the lasting ones to heal");
    await Promise.all(running);
    await creating;
    log("waiting for the runs to settle");
    const settleBy = Date.now() + settleMs;
    while (Date.now() < settleBy) {
      try {
        const items = (await world.client.get<{ items: { status?: { phase?: string } }[] }>(paths.runs(namespace))).items;
        if (items.length === runs && items.every((r) => FINAL_PHASES.has(r.status?.phase ?? ""))) {
          settled = true;
          break;
        }
      } catch {
        // ask again
      }
      await sleep(1000);
    }
    await answering.stop();
    // The last deletions and the ledger's last writes land a moment after the runs settle.
    await sleep(5000);
    // Writes are checked up to a second before the Leases' watch stops: a tenure that began
    // before then has been seen.
    const watchedUntil = Date.now() - 1000;
    await observer.stop();
    clearInterval(following);
    writes.poll();
    if (writes.rotations) log(`the API server rotated its audit log ${writes.rotations} times during the soak`);
    const runRecords = observer.runRecords();
    let ledger: LedgerRecord[] = [];
    const seen = runRecords.reduce((n, r) => n + r.transitionsSeen.length, 0);
    for (let i = 0; i < 60; i++) {
      ledger = await readLedger(world.databaseUrl, namespace).catch(() => []);
      if (ledger.reduce((n, l) => n + l.transitions.length, 0) >= seen) break;
      await sleep(1000);
    }
    record = {
      seed,
      startedAt,
      endedAt: Date.now(),
      durationMs,
      node,
      ...(reintroduced ? { reintroduced } : {}),
      pods: [...observer.pods.values()],
      containers: observer.containers,
      heartbeats: observer.heartbeats,
      attemptEnds: [...observer.attemptEnds.values()],
      phases: observer.phases,
      runs: runRecords,
      ledger,
      emails: Object.fromEntries(await emailsByRun(world.outboxDir)),
      leases: observer.leases,
      approvals: observer.approvals(),
      answers: answering.answers,
      faults: faults.sort((a, b) => a.at - b.at),
      operatorExits: world.operatorExits,
      sharding: world.sharding,
      replicas: world.replicaStarts,
      tenures: observer.tenures,
      writes: writes.writes.filter((w) => w.at < watchedUntil),
    };
    writeFileSync(historyFile, JSON.stringify(record));
  } finally {
    clearInterval(following);
    writes?.close();
    await observer.stop().catch(() => undefined);
    await world.teardown();
  }
  // The verdict is the checker's, on the history as written: `npm run check-history` on that file
  // says the same. The soak's own wait only tells whether the runs settled in time.
  const verdict = judge(record, { runs, samples: observer.samples, durationMs, path: historyFile });
  process.stdout.write(verdict.text);
  return settled && verdict.ok ? 0 : 1;
}

// Stopped early (Ctrl-C, or SIGTERM from a timeout), the soak still stops what it started: the
// operator replicas, the sandboxes' agents and its namespace, then exits as a signalled process.
let stopOnSignal: (() => Promise<void>) | undefined;
for (const [signal, code] of [["SIGINT", 130], ["SIGTERM", 143]] as const) {
  process.once(signal, () => {
    process.stderr.write(`[soak] ${signal}: stopping what the soak started\n`);
    void (stopOnSignal?.() ?? Promise.resolve()).catch(() => undefined).finally(() => process.exit(code));
  });
}

main(process.argv.slice(2)).then(
  (code) => process.exit(code),
  (err: unknown) => {
    process.stderr.write(`soak failed: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
    process.exit(2);
  },
);
