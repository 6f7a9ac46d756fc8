// The operator's Prometheus series. Generic series carry controller-runtime's names so existing
// dashboards and alerts work; the watchdog's own series start with watchdog_.
import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from "prom-client";
import { BUDGET_LIMITS } from "../api/agentrun.ts";

/** What a work queue reports, as client-go's workqueue metrics name it (the controller's queue feeds it). */
export interface QueueMetrics {
  depth(n: number): void;
  add(): void;
  retry(): void;
  latency(seconds: number): void;
  workDuration(seconds: number): void;
}

export const CONTROLLER = "agentrun";

export class Metrics {
  readonly registry = new Registry();

  readonly reconcileTotal = new Counter({
    name: "controller_runtime_reconcile_total",
    help: "Total number of reconciliations per controller",
    labelNames: ["controller", "result"] as const,
    registers: [this.registry],
  });
  readonly reconcileErrors = new Counter({
    name: "controller_runtime_reconcile_errors_total",
    help: "Total number of reconciliation errors per controller",
    labelNames: ["controller"] as const,
    registers: [this.registry],
  });
  readonly reconcileTime = new Histogram({
    name: "controller_runtime_reconcile_time_seconds",
    help: "Length of time per reconciliation per controller",
    labelNames: ["controller"] as const,
    buckets: [0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60],
    registers: [this.registry],
  });
  readonly maxConcurrentReconciles = new Gauge({
    name: "controller_runtime_max_concurrent_reconciles",
    help: "Maximum number of concurrent reconciles per controller",
    labelNames: ["controller"] as const,
    registers: [this.registry],
  });
  readonly activeWorkers = new Gauge({
    name: "controller_runtime_active_workers",
    help: "Number of currently used workers per controller",
    labelNames: ["controller"] as const,
    registers: [this.registry],
  });
  readonly workqueueDepth = new Gauge({
    name: "workqueue_depth",
    help: "Current depth of workqueue",
    labelNames: ["name", "controller"] as const,
    registers: [this.registry],
  });
  readonly workqueueAdds = new Counter({
    name: "workqueue_adds_total",
    help: "Total number of adds handled by workqueue",
    labelNames: ["name", "controller"] as const,
    registers: [this.registry],
  });
  readonly workqueueRetries = new Counter({
    name: "workqueue_retries_total",
    help: "Total number of retries handled by workqueue",
    labelNames: ["name", "controller"] as const,
    registers: [this.registry],
  });
  readonly workqueueLatency = new Histogram({
    name: "workqueue_queue_duration_seconds",
    help: "How long in seconds an item stays in workqueue before being requested",
    labelNames: ["name", "controller"] as const,
    buckets: [1e-6, 1e-5, 1e-4, 1e-3, 0.01, 0.1, 1, 10, 100, 1000],
    registers: [this.registry],
  });
  readonly workqueueWorkDuration = new Histogram({
    name: "workqueue_work_duration_seconds",
    help: "How long in seconds processing an item from workqueue takes",
    labelNames: ["name", "controller"] as const,
    buckets: [1e-6, 1e-5, 1e-4, 1e-3, 0.01, 0.1, 1, 10, 100, 1000],
    registers: [this.registry],
  });
  readonly workqueueLongestRunning = new Gauge({
    name: "workqueue_longest_running_processor_seconds",
    help: "How many seconds has the longest running processor for workqueue been running",
    labelNames: ["name", "controller"] as const,
    registers: [this.registry],
  });
  readonly leaderStatus = new Gauge({
    name: "leader_election_master_status",
    help: "Gauge of if the reporting system is master of the relevant lease, 0 indicates backup, 1 indicates master",
    labelNames: ["name"] as const,
    registers: [this.registry],
  });
  readonly restRequests = new Counter({
    name: "rest_client_requests_total",
    help: "Number of HTTP requests, partitioned by status code, method, and host",
    labelNames: ["code", "method", "host"] as const,
    registers: [this.registry],
  });
  readonly restLatency = new Histogram({
    name: "rest_client_request_duration_seconds",
    help: "Request latency in seconds, as the operator saw it, partitioned by verb and host",
    labelNames: ["verb", "host"] as const,
    buckets: [0.005, 0.025, 0.1, 0.25, 0.5, 1, 2, 4, 8, 15, 30, 60],
    registers: [this.registry],
  });

  readonly runs = new Gauge({
    name: "watchdog_agentruns",
    help: "AgentRuns by phase, as the operator's cache sees them",
    labelNames: ["phase"] as const,
    registers: [this.registry],
  });
  // One series per run waiting for a person, so that the alert names the run and resolves when it
  // is resumed or deleted. Bounded by the runs that wait for a person, which people clear.
  readonly runWaitingForPerson = new Gauge({
    name: "watchdog_agentrun_needs_human_intervention",
    help: "1 for each AgentRun in NeedsHumanIntervention (namespace and agentrun name it, reason is its condition's), as the operator's cache sees them",
    labelNames: ["namespace", "agentrun", "reason"] as const,
    registers: [this.registry],
  });
  readonly staleHeartbeats = new Gauge({
    name: "watchdog_stale_heartbeats",
    help: "Active AgentRuns whose last heartbeat is older than half their heartbeat timeout",
    registers: [this.registry],
  });
  readonly unconfirmedSandboxes = new Gauge({
    name: "watchdog_unconfirmed_sandboxes",
    help: "AgentRuns with a deleted sandbox pod not confirmed gone past unconfirmedAfter (SandboxUnconfirmed=True): no replacement starts",
    registers: [this.registry],
  });
  readonly hungKilled = new Counter({
    name: "watchdog_hung_sandboxes_killed_total",
    help: "Sandbox pods deleted because their heartbeat timed out",
    registers: [this.registry],
  });
  readonly requeues = new Counter({
    name: "watchdog_requeues_total",
    help: "Runs requeued with backoff, by reason",
    labelNames: ["reason"] as const,
    registers: [this.registry],
  });
  readonly needsHuman = new Counter({
    name: "watchdog_needs_human_intervention_total",
    help: "Runs that moved to NeedsHumanIntervention, by reason",
    labelNames: ["reason"] as const,
    registers: [this.registry],
  });
  readonly budgetExhausted = new Counter({
    name: "watchdog_budget_exhausted_total",
    help: "Runs stopped for a person because spending reached a spec.budget limit, by the limit (the first reached, in the order tokens, inputTokens, outputTokens, cost, toolCalls, wallClock)",
    labelNames: ["limit"] as const,
    registers: [this.registry],
  });
  readonly nudges = new Counter({
    name: "watchdog_nudges_total",
    help: "Stall nudges recorded",
    registers: [this.registry],
  });
  readonly detectionLatency = new Histogram({
    name: "watchdog_detection_latency_seconds",
    help: "Time from a sandbox's heartbeat deadline to the deletion of its pod",
    buckets: [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30],
    registers: [this.registry],
  });
  readonly informerRestarts = new Counter({
    name: "watchdog_informer_restarts_total",
    help: "Informer restarts after a watch error or silence",
    labelNames: ["informer"] as const,
    registers: [this.registry],
  });

  readonly ledgerBuffered = new Gauge({
    name: "watchdog_ledger_buffered_rows",
    help: "Ledger rows waiting to be written to PostgreSQL",
    registers: [this.registry],
  });
  readonly ledgerWritten = new Counter({
    name: "watchdog_ledger_written_rows_total",
    help: "Ledger rows written to PostgreSQL",
    registers: [this.registry],
  });
  readonly ledgerLost = new Counter({
    name: "watchdog_ledger_lost_rows_total",
    help: "Ledger rows dropped before they could be written",
    registers: [this.registry],
  });
  readonly ledgerFailedFlushes = new Counter({
    name: "watchdog_ledger_failed_flushes_total",
    help: "Failed attempts to reach, migrate or write to PostgreSQL",
    registers: [this.registry],
  });
  readonly ledgerConnected = new Gauge({
    name: "watchdog_ledger_connected",
    help: "Whether the last attempt to reach PostgreSQL succeeded",
    registers: [this.registry],
  });
  readonly ledgerGaps = new Counter({
    name: "watchdog_ledger_gaps_total",
    help: "Gaps in the ledger's history that could not be recovered",
    registers: [this.registry],
  });

  constructor(options: { processMetrics?: boolean } = {}) {
    if (options.processMetrics !== false) collectDefaultMetrics({ register: this.registry });
    // Series that should exist from the start, so that rate() and absent() work from the first scrape.
    this.reconcileTotal.inc({ controller: CONTROLLER, result: "success" }, 0);
    this.reconcileTotal.inc({ controller: CONTROLLER, result: "error" }, 0);
    this.reconcileErrors.inc({ controller: CONTROLLER }, 0);
    this.hungKilled.inc(0);
    this.nudges.inc(0);
    // Every reason starts at 0, so increase() sees the first event after a restart.
    for (const reason of ["ToolLoop", "RecoveryBudgetExhausted", "StallUnresolved", "UnconfirmedSideEffect", "BudgetExhausted"]) this.needsHuman.inc({ reason }, 0);
    for (const limit of BUDGET_LIMITS) this.budgetExhausted.inc({ limit }, 0);
    for (const reason of ["HeartbeatTimeout", "PodFailed", "RateLimited", "StartTimeout"]) this.requeues.inc({ reason }, 0);
    this.staleHeartbeats.set(0);
    this.unconfirmedSandboxes.set(0);
  }

  private readonly mirrored = new Map<string, number>();

  /** Moves a counter up to a running total kept elsewhere (prom-client counters cannot be set). */
  mirror(key: string, counter: { inc(value: number): void }, total: number): void {
    const seen = this.mirrored.get(key) ?? 0;
    if (total > seen) counter.inc(total - seen);
    this.mirrored.set(key, Math.max(total, seen));
  }

  queueMetrics(name = CONTROLLER): QueueMetrics {
    const labels = { name, controller: CONTROLLER };
    this.workqueueDepth.set(labels, 0);
    this.workqueueAdds.inc(labels, 0);
    this.workqueueRetries.inc(labels, 0);
    return {
      depth: (n) => this.workqueueDepth.set(labels, n),
      add: () => this.workqueueAdds.inc(labels),
      retry: () => this.workqueueRetries.inc(labels),
      latency: (s) => this.workqueueLatency.observe(labels, s),
      workDuration: (s) => this.workqueueWorkDuration.observe(labels, s),
    };
  }
}
