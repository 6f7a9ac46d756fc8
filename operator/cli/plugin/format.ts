// What `kubectl agentrun` prints: ages as kubectl writes them, the run table, and the describe
// page. Pure functions of the objects and the time, so that every line can be tested. Every cell
// and every line is escaped for the terminal (terminal.ts): runs carry text sandboxes wrote.
import type { AgentRunStatus, EffectiveWatchdog } from "../../api/agentrun.ts";
import { ANNOTATIONS } from "../../api/annotations.ts";
import type { Json } from "../../kube/client.ts";
import { budgetReport, lineCell, nearestLimit, type BudgetReport, type ShownFigures } from "../budget.ts";
import { escapeTerminal } from "../terminal.ts";
import { timelineLine, type TimelineItem } from "./timeline.ts";
import { HEARTBEAT_FIELD, serverWriteTime } from "../../api/managed-fields.ts";

/** A duration the way kubectl prints ages: 45s, 3m12s, 25m, 5h10m, 30h, 3d4h, 90d, 2y30d. */
export function humanDuration(ms: number): string {
  const s = Math.max(0, Math.floor(ms / 1000));
  const m = Math.floor(s / 60);
  const h = Math.floor(m / 60);
  const d = Math.floor(h / 24);
  const y = Math.floor(d / 365);
  const both = (a: number, ua: string, b: number, ub: string) => (b === 0 ? `${a}${ua}` : `${a}${ua}${b}${ub}`);
  if (s < 120) return `${s}s`;
  if (m < 10) return both(m, "m", s % 60, "s");
  if (h < 3) return `${m}m`;
  if (h < 8) return both(h, "h", m % 60, "m");
  if (h < 48) return `${h}h`;
  if (d < 8) return both(d, "d", h % 24, "h");
  if (y < 2) return `${d}d`;
  return both(y, "y", d % 365, "d");
}

/** "5s ago" for a past time, "in 5s" for a future one, "" when there is no time. */
export function relative(time: string | undefined, now: number): string {
  const at = time ? Date.parse(time) : NaN;
  if (Number.isNaN(at)) return "";
  return at > now ? `in ${humanDuration(at - now)}` : `${humanDuration(now - at)} ago`;
}

/** Age of a past time, or "-". */
function age(time: string | undefined, now: number): string {
  const at = time ? Date.parse(time) : NaN;
  return Number.isNaN(at) ? "-" : humanDuration(now - at);
}

interface RunView {
  namespace: string;
  name: string;
  created?: string;
  annotations: Record<string, string>;
  spec: Json;
  status: AgentRunStatus;
}

function view(run: Json): RunView {
  const meta = (run.metadata ?? {}) as { name?: string; namespace?: string; creationTimestamp?: string; annotations?: Record<string, string> };
  return {
    namespace: meta.namespace ?? "",
    name: meta.name ?? "",
    ...(meta.creationTimestamp ? { created: meta.creationTimestamp } : {}),
    annotations: meta.annotations ?? {},
    spec: (run.spec ?? {}) as Json,
    status: (run.status ?? {}) as AgentRunStatus,
  };
}

/** The current attempt's heartbeat; an earlier attempt's says nothing about the running one. */
/**
 * When the API server accepted the heartbeat (its managedFields time), as the watchdog measures it;
 * the sandbox's own clock only when the server's record is missing.
 */
function heartbeatTime(run: Json, sandboxTime: string): string {
  const server = serverWriteTime(run, HEARTBEAT_FIELD);
  return server !== undefined ? new Date(server).toISOString() : sandboxTime;
}

function currentHeartbeat(status: AgentRunStatus) {
  const hb = status.heartbeat;
  return hb && hb.attempt === status.attempt ? hb : undefined;
}

/** "spent/allowed", e.g. 2/3; the allowance is known once the operator has resolved it. */
export function restartsColumn(status: AgentRunStatus): string {
  if (status.phase === undefined) return "-";
  return `${status.restarts ?? 0}/${status.watchdog?.maxRestarts ?? "?"}`;
}

export function nudgesColumn(status: AgentRunStatus): string {
  if (status.phase === undefined) return "-";
  const stall = status.watchdog?.stall;
  if (stall && !stall.enabled) return "off";
  return `${status.stall?.nudges ?? 0}/${stall?.maxNudges ?? "?"}`;
}

/**
 * The limit nearest to being reached, as spent/limit ("82000/100000 tokens"); without limits, the
 * tokens spent; "-" when there is neither.
 */
export function budgetColumn(run: Json, now: number): string {
  const report = budgetReport(run, now);
  if (!report) return "-";
  const nearest = nearestLimit(report);
  if (nearest) return lineCell(nearest);
  return `${report.total.inputTokens + report.total.outputTokens} tokens`;
}

function truncate(text: string, max: number): string {
  const line = text.replace(/\s+/g, " ").trim();
  return line.length <= max ? line : `${line.slice(0, max - 3)}...`;
}

/**
 * Columns padded to their widest cell, three spaces apart, as kubectl's tables are. Cells are
 * escaped first, so that they are measured as they are printed and none spans two lines.
 */
export function table(header: string[], unescaped: string[][]): string {
  const rows = unescaped.map((r) => r.map((cell) => escapeTerminal(cell)));
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => (r[i] ?? "").length)));
  const line = (cells: string[]) =>
    cells
      .map((c, i) => (i === cells.length - 1 ? c : c.padEnd(widths[i] as number)))
      .join("   ")
      .trimEnd();
  return [line(header), ...rows.map(line)].join("\n") + "\n";
}

export interface ListOptions {
  allNamespaces: boolean;
  wide: boolean;
}

export function formatList(runs: readonly Json[], options: ListOptions, now: number): string {
  const header = ["NAME", "PHASE", "ATTEMPT", "RESTARTS", "HEARTBEAT", "NUDGES", "APPROVAL", "BUDGET", "REASON", "AGE"];
  if (options.wide) header.push("POD", "STALL", "RETRY", "MESSAGE");
  if (options.allNamespaces) header.unshift("NAMESPACE");
  const rows = runs.map((run) => {
    const r = view(run);
    const s = r.status;
    const hb = currentHeartbeat(s);
    const row = [
      r.name,
      s.phase ?? "-",
      s.attempt !== undefined ? String(s.attempt) : "-",
      restartsColumn(s),
      hb ? age(heartbeatTime(run, hb.time), now) : "-",
      nudgesColumn(s),
      // The pending request's id: what an answer must name (watchdog.dev/approval-id).
      s.approval?.state === "Pending" && s.approval.id ? s.approval.id : "-",
      budgetColumn(run, now),
      s.reason ?? "-",
      age(r.created, now),
    ];
    if (options.wide) {
      const retry = s.phase === "Queued" && s.retryAfter && Date.parse(s.retryAfter) > now ? relative(s.retryAfter, now) : "-";
      row.push(s.podName ?? "-", s.stall?.state ?? "-", retry, s.message ? truncate(s.message, 100) : "-");
    }
    if (options.allNamespaces) row.unshift(r.namespace);
    return row;
  });
  return table(header, rows);
}

// ---------------------------------------------------------------------------------------------
// describe

/** Key: value lines with the values aligned; empty values are left out. */
function fields(pairs: [string, string | undefined][], indent = ""): string[] {
  const shown = pairs.filter((p): p is [string, string] => p[1] !== undefined && p[1] !== "");
  const width = Math.max(0, ...shown.map(([k]) => k.length + 1));
  return shown.map(([k, v]) => `${indent}${`${k}:`.padEnd(width)}  ${v}`);
}

const at = (time: string | undefined, now: number) => (time ? `${time} (${relative(time, now)})` : undefined);

function backoffText(b: EffectiveWatchdog["backoff"]): string {
  return `${b.initial}, x${b.factor} per retry, at most ${b.max}`;
}

/** The spec.watchdog fields a run sets itself, flattened: heartbeatTimeout=4s, backoff.initial=2s. */
export function watchdogOverrides(spec: Json): string {
  const out: string[] = [];
  const walk = (value: unknown, path: string) => {
    if (value !== null && typeof value === "object" && !Array.isArray(value)) {
      for (const [k, v] of Object.entries(value)) walk(v, path ? `${path}.${k}` : k);
    } else if (value !== undefined) {
      out.push(`${path}=${typeof value === "string" ? value : JSON.stringify(value)}`);
    }
  };
  walk(spec.watchdog, "");
  return out.length ? out.join(", ") : "none (the install's defaults apply)";
}

function containers(spec: Json): string | undefined {
  const list = ((spec.template as Json | undefined)?.spec as { containers?: { name?: string; image?: string }[] } | undefined)?.containers;
  return list?.map((c) => `${c.name ?? "?"} (${c.image ?? "no image"})`).join(", ");
}

function effectiveWatchdog(w: EffectiveWatchdog | undefined): string[] {
  if (!w) return ["  (not resolved yet: the operator has not acted on this run)"];
  return fields(
    [
      ["Heartbeat timeout", w.heartbeatTimeout],
      ["Max restarts", String(w.maxRestarts)],
      ["Backoff", backoffText(w.backoff)],
      ["Rate-limit backoff", `${backoffText(w.rateLimitBackoff)}; spends no restart`],
      ["Tool loop limit", `${w.maxConsecutiveToolFailures} identical failed calls in a row`],
      ["Stall nudges", w.stall.enabled ? `after ${w.stall.timeout} of silence, at most ${w.stall.maxNudges}` : "off"],
      ["Release awaiting after", w.releaseAwaitingAfter],
      ["Approval timeout", w.approvalTimeout ?? "none (waits for a reply forever)"],
    ],
    "  ",
  );
}

function conditions(status: AgentRunStatus, now: number): string[] {
  const list = status.conditions ?? [];
  if (list.length === 0) return ["  (none)"];
  const rendered = table(
    ["TYPE", "STATUS", "REASON", "AGE", "MESSAGE"],
    list.map((c) => [c.type, c.status, c.reason, age(c.lastTransitionTime, now), c.message ? truncate(c.message, 120) : "-"]),
  );
  return rendered.trimEnd().split("\n").map((l) => `  ${l}`);
}

const figuresText = (f: ShownFigures, currency: string | undefined) =>
  `${f.inputTokens} input + ${f.outputTokens} output tokens, ${f.cost}${currency ? ` ${currency}` : ""}, ${f.toolCalls} tool call${f.toolCalls === 1 ? "" : "s"}`;

/** Each limit with what is spent of it, then where the spending comes from. */
function budgetSection(report: BudgetReport | undefined, status: AgentRunStatus): string[] {
  if (!report) return [];
  const limits = report.limits.map((l): [string, string] => [
    l.limit,
    `${l.text} (${Math.floor(l.fraction * 100)}%)${l.exhausted ? ", exhausted" : ""}`,
  ]);
  const warnAt = status.budget?.warnAt;
  return [
    "Budget:",
    ...fields(
      [
        ...limits,
        ["Warn at", warnAt !== undefined && limits.length ? `${Number((warnAt * 100).toFixed(2))}% of each limit` : undefined],
        ["Spent", figuresText(report.total, report.currency)],
        ["Ended attempts", report.ended.throughAttempt ? `${figuresText(report.ended, report.currency)} (${report.ended.throughAttempt === 1 ? "attempt 1" : `attempts 1-${report.ended.throughAttempt}`})` : undefined],
        ["This attempt", figuresText(report.current, report.currency)],
        ["Wall clock", report.elapsed ? `${report.elapsed} since the first start` : undefined],
      ],
      "  ",
    ),
  ];
}

function lastFailure(status: AgentRunStatus, now: number): string[] {
  const f = status.lastFailure;
  if (!f) return [];
  const attempt = f.attempt !== undefined ? `${f.attempt}${f.state ? `, while ${f.state}` : ""}` : f.state;
  return [
    "Last failure:",
    ...fields(
      [
        ["Reason", f.reason],
        ["Time", at(f.time, now)],
        ["Attempt", attempt],
        ["Tool", f.tool ? `${f.tool.name} (args ${f.tool.argsHash}), ${f.tool.state}` : undefined],
        ["Message", f.message],
      ],
      "  ",
    ),
  ];
}

function stallLine(status: AgentRunStatus, now: number): string | undefined {
  const stall = status.stall;
  const settings = status.watchdog?.stall;
  if (settings && !settings.enabled) return "off";
  if (!stall) return undefined;
  const parts: string[] = [stall.state];
  if (stall.state === "Armed" && stall.armedAt) parts[0] = `Armed since ${stall.armedAt} (${relative(stall.armedAt, now)})`;
  parts.push(`${stall.nudges} of ${settings?.maxNudges ?? "?"} nudges`);
  if (stall.lastNudge) parts.push(`last nudge ${relative(stall.lastNudge.time, now)}: ${JSON.stringify(stall.lastNudge.message)}`);
  return parts.join("; ");
}

function approvalLine(name: string, status: AgentRunStatus, now: number): string | undefined {
  const a = status.approval;
  if (!a) return undefined;
  if (a.state === "Pending") {
    const released = status.phase === "AwaitingReply" && !status.podName ? "; its sandbox pod was released" : "";
    return `Pending${a.id ? ` (request ${a.id})` : ""} since ${a.requestedAt} (${relative(a.requestedAt, now)})${released}; answer with: kubectl agentrun approve ${name} [--answer TEXT], or reject ${name} [--reason TEXT]`;
  }
  const detail = a.state === "Approved" ? (a.answer ? `, answer ${JSON.stringify(a.answer)}` : "") : a.state === "Rejected" && a.reason ? `, reason ${JSON.stringify(a.reason)}` : "";
  return `${a.state}${a.decidedAt ? ` ${relative(a.decidedAt, now)}` : ""}${detail} (request ${a.id ?? "-"}, made ${a.requestedAt})`;
}

function heartbeatLine(status: AgentRunStatus, now: number): string | undefined {
  const hb = status.heartbeat;
  if (!hb) return undefined;
  const stale = hb.attempt !== status.attempt ? `, from attempt ${hb.attempt}, not the current one` : "";
  const activity = hb.activity ? `; last activity ${hb.activity.kind} ${relative(hb.activity.time, now)}` : "";
  return `${relative(hb.time, now)} (${hb.state}${stale})${activity}`;
}

export interface DescribeInput {
  run: Json;
  timeline: readonly TimelineItem[];
  /** Where the timeline comes from, and what it lacks. */
  timelineSource: string;
  now: number;
}

export function formatDescribe({ run, timeline, timelineSource, now }: DescribeInput): string {
  const r = view(run);
  const s = r.status;
  const spec = r.spec;
  const suspended = spec.suspend === true;
  const userAnnotations = [ANNOTATIONS.resume, ANNOTATIONS.approve, ANNOTATIONS.reject, ANNOTATIONS.approvalId]
    .filter((k) => r.annotations[k] !== undefined)
    .map((k) => `${k}=${JSON.stringify(r.annotations[k])}`)
    .join(", ");
  const retry = s.phase === "Queued" && s.retryAfter ? at(s.retryAfter, now) : undefined;
  const lines = [
    ...fields([
      ["Name", r.name],
      ["Namespace", r.namespace],
      ["Created", at(r.created, now)],
      ["Goal", typeof spec.goal === "string" ? truncate(spec.goal, 200) : undefined],
      ["Containers", containers(spec)],
      ["Suspend", suspended ? "true (the sandbox pod is removed and no timer fires)" : "false"],
      ["Watchdog (spec)", watchdogOverrides(spec)],
      ["Annotations", userAnnotations || undefined],
      ["Phase", s.phase ? `${s.phase}${s.reason ? ` (${s.reason})` : ""}` : "<none>: the operator has not acted on this run yet"],
      ["Message", s.message],
      ["Attempt", s.attempt !== undefined ? String(s.attempt) : undefined],
      ["Restarts", s.phase ? `${s.restarts ?? 0} of ${s.watchdog?.maxRestarts ?? "?"} allowed` : undefined],
      ["Rate-limit requeues", s.rateLimitRequeues ? String(s.rateLimitRequeues) : undefined],
      ["Pod", s.podName ?? (s.phase ? "<none>" : undefined)],
      ["Retry after", retry],
      ["Heartbeat", heartbeatLine(s, now)],
      ["Started", at(s.startTime, now)],
      ["Completed", at(s.completionTime, now)],
      ["Stall", stallLine(s, now)],
      ["Approval", approvalLine(r.name, s, now)],
    ]),
    "Effective watchdog settings:",
    ...effectiveWatchdog(s.watchdog),
    ...budgetSection(budgetReport(run, now), s),
    "Conditions:",
    ...conditions(s, now),
    ...lastFailure(s, now),
    `Timeline (${timelineSource}):`,
    ...(timeline.length ? timeline.map((i) => `  ${timelineLine(i)}`) : ["  (nothing recorded)"]),
  ];
  // Each entry is one line: a newline in a value must not start another.
  return lines.map((line) => escapeTerminal(line)).join("\n") + "\n";
}
