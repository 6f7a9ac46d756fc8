// What the console's run list and queue show of a run, and the run page its budget: a few fields,
// read defensively (a run's status is written by sandboxes too, and the console must show
// whatever is there without failing on it).
import { BUILTIN_WARN_AT } from "../api/defaults.ts";
import { budgetReport, lineCell, nearestLimit, type BudgetLine, type BudgetReport } from "../cli/budget.ts";
import type { Json } from "../kube/client.ts";
import { APPROVAL_REQUEST_KEY } from "../sandbox/protocol.ts";
import type { BudgetLineSummary, BudgetSummary, RunSummary } from "./contract.ts";

export type { BudgetSummary, RunSummary };

const obj = (v: unknown): Json => (v && typeof v === "object" && !Array.isArray(v) ? (v as Json) : {});
const str = (v: unknown): string | undefined => (typeof v === "string" && v !== "" ? v : undefined);
const num = (v: unknown): number | undefined => (typeof v === "number" && Number.isFinite(v) ? v : undefined);

/** The question the sandbox asked, as it saved it in the checkpoint beside its own data. */
export function approvalQuestion(status: Json): string | undefined {
  const request = obj(obj(obj(status.checkpoint).data)[APPROVAL_REQUEST_KEY]);
  return str(request.question);
}

/**
 * The run's budget and spending, with the figures the watchdog decides on; undefined when it has
 * no limit and has spent nothing. Never throws: one run's odd status must not cost the list the
 * others (the stream sends every run through here).
 */
export function budgetSummary(run: Json, now: number): BudgetSummary | undefined {
  let report: BudgetReport | undefined;
  try {
    report = budgetReport(run, now);
  } catch {
    return undefined;
  }
  if (!report) return undefined;
  // The threshold the operator warns at: a limit past it is shown as warned, before any Event says so.
  const stated = num(obj(obj(run.status).budget).warnAt);
  const warnAt = stated !== undefined && stated > 0 && stated <= 1 ? stated : BUILTIN_WARN_AT;
  const shown = (line: BudgetLine): BudgetLineSummary => ({ ...line, warned: line.fraction >= warnAt, cell: lineCell(line) });
  const nearest = nearestLimit(report);
  const summary: BudgetSummary = { limits: report.limits.map(shown), warnAt, total: report.total, ended: report.ended, current: report.current };
  if (nearest) summary.nearest = shown(nearest);
  if (report.currency) summary.currency = report.currency;
  if (report.elapsed) summary.elapsed = report.elapsed;
  if (report.elapsedMs !== undefined) {
    summary.elapsedMs = report.elapsedMs;
    summary.clockRunning = report.clockRunning === true;
  }
  return summary;
}

export function runSummary(run: Json): RunSummary {
  const meta = obj(run.metadata);
  const spec = obj(run.spec);
  const status = obj(run.status);
  const watchdog = obj(status.watchdog);
  const stall = obj(status.stall);
  const approval = obj(status.approval);
  const phase = str(status.phase);
  const summary: RunSummary = {
    namespace: str(meta.namespace) ?? "",
    name: str(meta.name) ?? "",
    uid: str(meta.uid) ?? "",
    createdAt: str(meta.creationTimestamp) ?? "",
    suspended: spec.suspend === true,
    needsPerson: phase === "NeedsHumanIntervention" || (phase === "AwaitingReply" && str(approval.state) === "Pending"),
  };
  const fields: Partial<RunSummary> = {
    phase,
    attempt: num(status.attempt),
    restarts: num(status.restarts),
    maxRestarts: num(watchdog.maxRestarts),
    heartbeatTime: str(obj(status.heartbeat).time),
    nudges: num(stall.nudges),
    maxNudges: num(obj(watchdog.stall).maxNudges),
    reason: str(status.reason),
    message: str(status.message),
  };
  for (const [key, value] of Object.entries(fields)) if (value !== undefined) (summary as unknown as Json)[key] = value;
  const state = str(approval.state);
  if (state) {
    summary.approval = { state };
    const id = str(approval.id);
    const question = approvalQuestion(status) ?? str(approval.question);
    const requestedAt = str(approval.requestedAt);
    if (id) summary.approval.id = id;
    if (question) summary.approval.question = question;
    if (requestedAt) summary.approval.requestedAt = requestedAt;
  }
  const budget = budgetSummary(run, Date.now());
  if (budget) summary.budget = budget;
  return summary;
}

/** The run as the run page shows it: everything but managedFields, which only the API needs. */
export function runForPage(run: Json): Json {
  const meta = { ...obj(run.metadata) };
  delete meta.managedFields;
  return { ...run, metadata: meta };
}
