// One timeline of a run from every place its past is kept: the run's Events, the latest phase
// transitions in its status, and the ledger's full record (transitions, tool calls, what each
// attempt spent, and gaps).
// Each source alone is partial: status keeps only the latest transitions, Events expire after an
// hour, and the ledger may lag a moment behind the cluster.
import type { ToolCall, Transition } from "../../api/agentrun.ts";
import type { Json } from "../../kube/client.ts";
import { describeGap, describeUsage, timeline as ledgerTimeline } from "../../ledger/format.ts";
import type { AttemptUsageRecord, GapRecord, RunHistory, ToolCallRecord } from "../../ledger/read.ts";

export interface PhaseItem {
  kind: "phase";
  time: string;
  phase: string;
  from?: string;
  reason?: string;
  message?: string;
  attempt: number;
}
export interface EventItem {
  kind: "event";
  time: string;
  type: string;
  reason: string;
  note: string;
  count: number;
}
export interface NudgeItem {
  kind: "nudge";
  time: string;
  message: string;
  count: number;
}
/** What the timeline shows of a tool call, from the ledger or from status. */
export type TimelineCall = Pick<ToolCallRecord, "id" | "name" | "state" | "attempt" | "startedAt" | "finishedAt" | "error">;
export type TimelineItem =
  | PhaseItem
  | EventItem
  | NudgeItem
  | { kind: "tool"; time: string; call: TimelineCall }
  | { kind: "usage"; time: string; usage: AttemptUsageRecord }
  | { kind: "gap"; time: string; gap: GapRecord };

const ORDER: Record<TimelineItem["kind"], number> = { gap: 0, phase: 1, event: 2, tool: 3, usage: 4, nudge: 5 };

function iso(value: unknown): string | undefined {
  if (typeof value !== "string" || !value) return undefined;
  const ms = Date.parse(value);
  return Number.isNaN(ms) ? undefined : new Date(ms).toISOString();
}

/** An events.k8s.io/v1 Event as a timeline item; undefined when it carries no time at all. */
export function eventItem(event: Json): EventItem | undefined {
  const meta = (event.metadata ?? {}) as { creationTimestamp?: string };
  const time = iso(event.eventTime) ?? iso(event.deprecatedLastTimestamp) ?? iso(meta.creationTimestamp);
  if (!time) return undefined;
  const series = event.series as { count?: number } | undefined;
  return {
    kind: "event",
    time,
    type: String(event.type ?? "Normal"),
    reason: String(event.reason ?? ""),
    note: String(event.note ?? ""),
    count: Math.max(1, series?.count ?? Number(event.deprecatedCount ?? 1)),
  };
}

const phaseKey = (time: string, phase: string) => `${time} ${phase}`;

export interface TimelineSources {
  /** status.transitions of the run. */
  transitions?: readonly Transition[];
  /** The run's Events (events.k8s.io/v1). */
  events?: readonly Json[];
  /** The ledger's history of the run, already narrowed to the run's uid. */
  history?: RunHistory;
  /** status.toolCalls: the records the ledger may not have yet (or at all, without one). */
  toolCalls?: readonly ToolCall[];
  /** status.stall.lastNudge, with the count of nudges sent. */
  nudge?: { time: string; message: string; count: number };
}

/** Every source merged, oldest first; a transition held both in status and the ledger appears once. */
export function mergeTimeline(sources: TimelineSources): TimelineItem[] {
  const items: TimelineItem[] = [];
  const seen = new Set<string>();
  if (sources.history) {
    for (const entry of ledgerTimeline(sources.history)) {
      if (entry.kind === "transition") {
        const t = entry.transition;
        seen.add(phaseKey(iso(t.time) ?? t.time, t.phase));
        items.push(phaseItem({ ...t, time: entry.time }));
      } else if (entry.kind === "toolCall") {
        items.push({ kind: "tool", time: entry.time, call: entry.toolCall });
      } else if (entry.kind === "usage") {
        items.push({ kind: "usage", time: entry.time, usage: entry.usage });
      } else {
        items.push({ kind: "gap", time: entry.time, gap: entry.gap });
      }
    }
  }
  for (const t of sources.transitions ?? []) {
    const time = iso(t.time) ?? t.time;
    if (seen.has(phaseKey(time, t.phase))) continue;
    seen.add(phaseKey(time, t.phase));
    items.push(phaseItem({ ...t, time }));
  }
  for (const event of sources.events ?? []) {
    const item = eventItem(event);
    if (item) items.push(item);
  }
  // A status record the ledger already holds in the same state is the same step of the run.
  const recorded = new Set(items.flatMap((i) => (i.kind === "tool" ? [`${i.call.id} ${i.call.state}`] : [])));
  for (const call of sources.toolCalls ?? []) {
    const time = iso(call.finishedAt) ?? iso(call.startedAt);
    if (!time || recorded.has(`${call.id} ${call.state}`)) continue;
    items.push({ kind: "tool", time, call });
  }
  const nudgeTime = iso(sources.nudge?.time);
  if (sources.nudge && nudgeTime) items.push({ kind: "nudge", time: nudgeTime, message: sources.nudge.message, count: sources.nudge.count });
  // Stable: within one kind and one time, each source keeps its own order.
  return items.sort((a, b) => (a.time < b.time ? -1 : a.time > b.time ? 1 : ORDER[a.kind] - ORDER[b.kind]));
}

function phaseItem(t: { time: string; phase: string; from?: string; reason?: string; message?: string; attempt: number }): PhaseItem {
  const item: PhaseItem = { kind: "phase", time: t.time, phase: t.phase, attempt: t.attempt };
  if (t.from) item.from = t.from;
  if (t.reason) item.reason = t.reason;
  if (t.message) item.message = t.message;
  return item;
}

function took(from: string | undefined, to: string | undefined): string {
  const ms = from && to ? Date.parse(to) - Date.parse(from) : NaN;
  if (!(ms >= 0)) return "";
  return ms < 1000 ? ` in ${ms}ms` : ` in ${(ms / 1000).toFixed(1)}s`;
}

/** One line per item: time, kind, then what happened. */
export function timelineLine(item: TimelineItem): string {
  switch (item.kind) {
    case "phase": {
      const move = item.from ? `${item.from} -> ${item.phase}` : item.phase;
      const why = [item.reason, item.message].filter(Boolean).join(": ");
      return `${item.time}  phase  ${move}  (attempt ${item.attempt})${why ? `  ${why}` : ""}`;
    }
    case "event": {
      const count = item.count > 1 ? ` (x${item.count})` : "";
      return `${item.time}  event  ${item.type} ${item.reason}${count}: ${item.note}`;
    }
    case "tool": {
      const c = item.call;
      const error = c.error
        ? `: ${[c.error.httpStatus !== undefined ? `HTTP ${c.error.httpStatus}` : "", c.error.message ?? ""].filter(Boolean).join(" ")}`
        : "";
      const attempt = c.attempt === undefined ? "" : `  (attempt ${c.attempt})`;
      return `${item.time}  tool   ${c.name} [${c.id}] ${c.state}${took(c.startedAt, c.finishedAt)}${error}${attempt}`;
    }
    case "usage":
      return `${item.time}  usage  ${describeUsage(item.usage)}`;
    case "gap":
      return `${item.time}  GAP    ${describeGap(item.gap)}`;
    case "nudge":
      return `${item.time}  nudge  #${item.count}: ${item.message}`;
  }
}

/** The ledger's history of one of the runs that bore a name, or undefined when it holds nothing of it. */
export function historyOfUid(history: RunHistory | undefined, uid: string | undefined): RunHistory | undefined {
  if (!history || !uid || !history.uids.includes(uid)) return undefined;
  return {
    ...history,
    uids: [uid],
    transitions: history.transitions.filter((t) => t.runUid === uid),
    toolCalls: history.toolCalls.filter((c) => c.runUid === uid),
    gaps: history.gaps.filter((g) => g.runUid === uid),
    ...(history.usage ? { usage: history.usage.filter((u) => u.runUid === uid) } : {}),
  };
}
