// The operator's entry point (`npm start`): one process that watches AgentRuns and their sandbox
// pods, serves metrics and probes, and reconciles, behind a Lease when --leader-elect is given.
import type { Server } from "node:http";
import { Controller } from "../controller/controller.ts";
import { DEFECTS, chosenDefect } from "../defects.ts";
import { EventRecorder } from "../controller/events.ts";
import { LEADER_DEFAULTS, LeaderElector, RELEASE_TIMEOUT_MS } from "../controller/leader.ts";
import { Runnables } from "../controller/runnables.ts";
import { KubeClient } from "../kube/client.ts";
import { Ledger } from "../ledger/ledger.ts";
import { historyPathRoute, historyReads } from "../ledger/serve.ts";
import { historyApiRoute } from "../ledger/history-api.ts";
import { readFrontProxyTrust } from "../metrics/front-proxy.ts";
import { createLogger } from "../log.ts";
import { KubernetesAccess } from "../metrics/access.ts";
import { Metrics } from "../metrics/metrics.ts";
import { SpendingMetrics } from "../metrics/spending.ts";
import { guarded, listen, probe, type Route, type TlsFiles } from "../metrics/server.ts";
import { ShardedControllers } from "../sharding/sharded-controllers.ts";
import { ShardLeases, shardLeaseName } from "../sharding/shard-leases.ts";
import { RunTracer, tracingRequested } from "../tracing/tracer.ts";
import { OptionsError, parseOptions, type OperatorOptions } from "./options.ts";

/**
 * How long shutdown waits for reconciles and Events in flight. Their writes are refused once the
 * lease is back, so what is left is requests already sent; the new leader redoes any unfinished work.
 */
const SHUTDOWN_DRAIN_MS = 2_000;
/** How often the API server's front-proxy trust is read again (one GET of a ConfigMap). */
const FRONT_PROXY_REFRESH_MS = 60_000;

async function within(ms: number, work: Promise<unknown>): Promise<void> {
  let timer: NodeJS.Timeout | undefined;
  await Promise.race([work, new Promise((resolve) => (timer = setTimeout(resolve, ms)))]);
  clearTimeout(timer);
}

export async function runOperator(options: OperatorOptions): Promise<void> {
  const log = createLogger(options.logLevel);
  const client = new KubeClient();
  const host = new URL(client.server).host;
  const metrics = new Metrics();
  client.onRequest((method, code, ms) => {
    metrics.restRequests.inc({ code: String(code || "<error>"), method, host });
    metrics.restLatency.observe({ verb: method, host }, ms / 1000);
  });

  if (options.sandboxServiceAccount === "none") {
    // Chosen on purpose (the default is run, as in the chart). Said at every start, so that nobody
    // takes it for fenced, and so that a sandbox that cannot report has its reason in the log.
    log.warn(
      { sandboxServiceAccount: "none" },
      "sandboxes run as their template's service account: the admission fencing does not apply to them unless its name ends in -sandbox; --sandbox-service-account=run gives each run its own fenced identity, as the chart does",
    );
  }
  const defect = chosenDefect(process.env).defect;
  if (defect) log.warn({ defect, what: DEFECTS[defect] }, "a fixed defect is re-introduced on purpose (a development switch, for the checker's proof): never run this operator for real");
  const sharded = options.shards > 1;
  const elector = options.leaderElect && !sharded
    ? new LeaderElector(
        client,
        { namespace: options.leaderElectionNamespace, name: options.leaderElectionId, identity: options.identity, ...LEADER_DEFAULTS },
        log,
      )
    : undefined;
  // Every write of the controller and every Event first asks this: a replica past its renew
  // deadline, or one that has handed the lease back, writes nothing more, even before its workers
  // have noticed.
  // Sharded, each shard has its Lease (with leader election) and a write for a run asks its shard's.
  const shardLeases =
    options.leaderElect && sharded
      ? new ShardLeases(client, { namespace: options.leaderElectionNamespace, id: options.leaderElectionId, identity: options.identity, shards: options.shards, ...LEADER_DEFAULTS }, log)
      : undefined;
  const canWriteShard = (shard: number) => (shardLeases ? shardLeases.canWrite(shard) : true);
  const canWrite = () => (elector ? elector.canWrite() : shardLeases ? shardLeases.holds().some(canWriteShard) : true);
  const recorder = new EventRecorder(client, options.identity, log);
  recorder.canWrite = canWrite;
  const supervision = {
    namespaces: options.namespaces,
    concurrency: options.concurrency,
    resyncMs: options.resyncPeriod,
    watchSilenceMs: options.watchSilenceLimit,
    stuckReconcileMs: options.stuckReconcileLimit,
    defaults: options.defaults,
    sandbox: {
      serviceAccount: options.sandboxServiceAccount,
      clusterRole: options.sandboxClusterRole,
      tokenExpirationSeconds: Math.round(options.sandboxTokenExpiration / 1000),
      traceparent: tracingRequested(process.env),
    },
  };
  // The ledger reads the runs from the controller, made just below, only once it runs.
  const ledger = options.databaseUrl ? Ledger.open(options.databaseUrl, { log, listRuns: () => controller.listRuns(), installBudget: options.defaults.budget }) : undefined;
  const controller = sharded
    ? new ShardedControllers(client, metrics, recorder, log, { ...supervision, shards: options.shards, canWrite: canWriteShard, synced: () => ledger?.requestCatchUp() })
    : new Controller(client, metrics, recorder, log, { ...supervision, canWrite });

  if (ledger) controller.observe((run) => ledger.observe(run));
  const tracer = await RunTracer.start(log);
  if (tracer) controller.observe((run, _executed, before) => tracer.observe(run, before), (key) => tracer.forget(key));

  let leading = false;
  const leaderLabels = { name: options.leaderElectionId };
  // Sharded, every replica reports every shard's Lease (1 held, 0 not), so that the alerts on
  // leadership (none for 5 minutes, two at once) hold per shard.
  if (sharded) for (let shard = 0; shard < options.shards; shard++) metrics.leaderStatus.set({ name: shardLeaseName(options.leaderElectionId, shard) }, 0);
  else metrics.leaderStatus.set(leaderLabels, 0);

  const servers: (Server | undefined)[] = [];
  const spendingMetrics = new SpendingMetrics(metrics.registry, { maxNamespaces: options.metricsMaxNamespaces, installBudget: options.defaults.budget });
  const serveMetrics: Route = async (_req, res, url) => {
    if (url.pathname !== "/metrics") return false;
    const census = controller.census();
    // Spending is counted by the leader only, so that summing over replicas counts it once.
    const runs = leading ? controller.listRuns() : undefined;
    if (runs) spendingMetrics.observe(runs);
    for (const [phase, count] of Object.entries(census.phases)) metrics.runs.set({ phase }, count);
    metrics.staleHeartbeats.set(census.staleHeartbeats);
    metrics.unconfirmedSandboxes.set(census.unconfirmed);
    metrics.runWaitingForPerson.reset();
    for (const { namespace, name, reason } of census.waitingForPerson) metrics.runWaitingForPerson.set({ namespace, agentrun: name, reason }, 1);
    metrics.workqueueLongestRunning.set({ name: "agentrun", controller: "agentrun" }, controller.longestRunningMs() / 1000);
    for (const informer of controller.informers) {
      const name = informer.options.name;
      metrics.mirror(`informer/${name}`, metrics.informerRestarts.labels({ informer: name }), informer.restarts);
    }
    if (ledger) {
      const stats = ledger.stats();
      metrics.ledgerBuffered.set(stats.bufferedRows);
      metrics.ledgerConnected.set(stats.connected ? 1 : 0);
      metrics.mirror("ledger/written", metrics.ledgerWritten, stats.writtenRows);
      metrics.mirror("ledger/lost", metrics.ledgerLost, stats.lostRows);
      metrics.mirror("ledger/failed", metrics.ledgerFailedFlushes, stats.failedFlushes);
      metrics.mirror("ledger/gaps", metrics.ledgerGaps, stats.gapsRecorded);
    }
    res.writeHead(200, { "content-type": metrics.registry.contentType }).end(await metrics.registry.metrics());
    return true;
  };
  // Who may read what is the API server's to say: a TokenReview for the caller's token, a
  // SubjectAccessReview for the request. The history always goes through it; /metrics when
  // --metrics-secure is set (then a scraper needs `get` on the non-resource URL /metrics).
  const access = new KubernetesAccess(client);
  let tls: TlsFiles | undefined = options.tlsCertFile && options.tlsPrivateKeyFile ? { certFile: options.tlsCertFile, keyFile: options.tlsPrivateKeyFile } : undefined;
  // Over HTTPS the history is also an aggregated API, reached through the API server: requests
  // it proxies carry its front-proxy certificate and name the user it authenticated.
  // The trust is read again every minute, as aggregated API servers watch it: the API server
  // rewrites the ConfigMap when its front-proxy CA rotates.
  if (tls) {
    const { trust, problem } = await readFrontProxyTrust(client);
    if (trust) access.frontProxy = trust;
    else log.warn({ problem }, "the history is served to bearer tokens only: requests the API server proxies cannot be told from others");
    tls = { ...tls, clientCa: () => access.frontProxy?.clientCa };
    const refresh = setInterval(() => {
      void readFrontProxyTrust(client).then(({ trust: now, problem: why }) => {
        // A read that fails, or finds no CA, keeps what was trusted: an API server that is
        // briefly away, or a ConfigMap being rewritten, has not changed the CA.
        if (now) access.frontProxy = now;
        else if (why) log.debug({ problem: why }, "front-proxy trust not refreshed");
      });
    }, FRONT_PROXY_REFRESH_MS);
    refresh.unref();
  }
  const readHistory = historyReads(ledger, access);
  servers.push(
    await listen(
      options.metricsBindAddress,
      [
        options.metricsSecure ? guarded(access, "/metrics", { nonResource: { verb: "get", path: "/metrics" } }, serveMetrics) : serveMetrics,
        // The run history: GET /history/<namespace>/<name>, for a caller who may get that run.
        historyPathRoute(readHistory),
        // The same history through the API server: GET /apis/history.watchdog.dev/v1alpha1/...
        historyApiRoute(readHistory),
      ],
      tls,
    ),
  );
  servers.push(
    await listen(options.healthProbeBindAddress, [
      probe("/healthz", { watchdog: () => controller.healthProblems(leading) }),
      probe("/readyz", { informers: () => (controller.synced ? [] : ["informer caches are not synced yet"]) }),
    ]),
  );

  const runnables = new Runnables(log);
  runnables.add({ name: "informers", leaderOnly: false, start: () => controller.startInformers() });
  // Sharded, the ledger catches up as each shard's caches sync instead.
  if (ledger && !sharded) runnables.add({ name: "ledger catch-up", leaderOnly: true, start: () => ledger?.requestCatchUp() });
  if (controller instanceof Controller) runnables.add({
    name: "workers",
    leaderOnly: true,
    start: async () => {
      await controller.startWorkers();
      // What the runs had spent when this replica came to lead is a baseline, not new spending.
      const runs = controller.listRuns();
      if (runs) spendingMetrics.observe(runs);
      log.info({ concurrency: options.concurrency, namespaces: options.namespaces.length ? options.namespaces : "all" }, "caches synced; reconciling");
    },
  });
  runnables.start();
  const lead = () => {
    leading = true;
    metrics.leaderStatus.set(leaderLabels, 1);
    runnables.lead();
  };
  if (controller instanceof ShardedControllers) {
    // Each shard held is a leadership of its own, reported as the leader gauge of its Lease.
    const shardLease = (shard: number) => ({ name: shardLeaseName(options.leaderElectionId, shard) });
    const acquired = (shard: number) => {
      leading = true;
      metrics.leaderStatus.set(shardLease(shard), 1);
      controller.acquire(shard);
    };
    if (shardLeases) {
      shardLeases.run({
        acquired,
        lost: (shard, why) => {
          metrics.leaderStatus.set(shardLease(shard), 0);
          leading = shardLeases.holds().length > 0;
          log.warn({ shard, why }, "stopped supervising a shard");
          void controller.release(shard);
        },
      });
    } else {
      for (let shard = 0; shard < options.shards; shard++) acquired(shard);
    }
  } else if (elector) {
    elector.run(lead, () => {
      // Another replica may already be writing: stop at once, as controller-runtime does.
      metrics.leaderStatus.set(leaderLabels, 0);
      log.fatal("lost the lease; exiting");
      process.exit(1);
    });
  } else {
    lead();
  }

  let shuttingDown = false;
  const shutdown = async (signal: string) => {
    if (shuttingDown) return;
    shuttingDown = true;
    log.info({ signal }, "shutting down");
    // The other replica takes over at its next retry once the lease is back, so the lease goes
    // back before anything slow: stop taking work, refuse writes (release does that first), hand
    // the lease back, and only then let the work in flight drain.
    const drained = controller.stop();
    await elector?.release();
    await shardLeases?.release(RELEASE_TIMEOUT_MS);
    leading = false;
    if (!sharded) metrics.leaderStatus.set(leaderLabels, 0);
    await within(SHUTDOWN_DRAIN_MS, drained);
    await recorder.flush(SHUTDOWN_DRAIN_MS);
    await ledger?.close(5_000);
    await tracer?.shutdown();
    for (const server of servers) server?.close();
    log.info("stopped");
    process.exit(0);
  };
  // Started with --expose-gc (the scale bench does), SIGUSR2 collects garbage at once, so that
  // memory can be measured as what is live rather than what the collector has not reached yet.
  const collect = (globalThis as { gc?: () => void }).gc;
  if (collect) process.on("SIGUSR2", () => collect());
  process.on("SIGTERM", () => void shutdown("SIGTERM"));
  process.on("SIGINT", () => void shutdown("SIGINT"));
}

if (import.meta.main) {
  let options: OperatorOptions;
  try {
    options = parseOptions(process.argv.slice(2), process.env);
  } catch (err) {
    if (err instanceof OptionsError) {
      process.stderr.write(`${err.message}\n`);
      process.exit(2);
    }
    throw err;
  }
  runOperator(options).catch((err: unknown) => {
    process.stderr.write(`agent-watchdog: ${err instanceof Error ? err.message : String(err)}\n`);
    process.exit(1);
  });
}
