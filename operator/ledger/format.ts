// A run's history as people read it: one time-ordered timeline of phase transitions, tool calls
// and the gaps the ledger could not fill.
import { escapeTerminal } from "../cli/terminal.ts";
import type { GapRecord, RunHistory, ToolCallRecord, TransitionRecord } from "./read.ts";

export type TimelineEntry =
  | { kind: "transition"; time: string; transition: TransitionRecord }
  | { kind: "toolCall"; time: string; toolCall: ToolCallRecord }
  | { kind: "gap"; time: string; gap: GapRecord };

// Where a gap belongs: just before the first transition after it, else after the last before it.
function gapTime(g: GapRecord): string {
  return g.before?.time ?? g.after?.time ?? g.detectedAt;
}

const ORDER: Record<TimelineEntry["kind"], number> = { gap: 0, transition: 1, toolCall: 2 };

/** Everything in the history, oldest first; a gap comes before the transition that ends it. */
export function timeline(history: RunHistory): TimelineEntry[] {
  const entries: TimelineEntry[] = [
    ...history.transitions.map((t) => ({ kind: "transition" as const, time: t.time, transition: t })),
    ...history.toolCalls.map((c) => ({ kind: "toolCall" as const, time: c.startedAt ?? c.firstSeen, toolCall: c })),
    ...history.gaps.map((g) => ({ kind: "gap" as const, time: gapTime(g), gap: g })),
  ];
  // Stable sort keeps each kind's own order among equal times.
  return entries.sort((a, b) => (a.time < b.time ? -1 : a.time > b.time ? 1 : ORDER[a.kind] - ORDER[b.kind]));
}

/** One sentence saying what the ledger could not recover. */
export function describeGap(g: GapRecord): string {
  if (g.kind === "tool_call") return `could not recover tool call ${g.callId ?? "?"}: it was seen but never stored`;
  const count = g.missing === undefined ? "one or more transitions" : `${g.missing} transition${g.missing === 1 ? "" : "s"}`;
  const after = g.after ? `after ${g.after.phase} at ${g.after.time}` : "at the start of the run";
  const before = g.before
    ? `before ${g.before.from ?? "?"} -> ${g.before.phase} at ${g.before.time}`
    : "with nothing stored after them";
  const why = g.cause === "dropped" ? "the buffer dropped them and the run no longer holds them" : "the stored transitions do not chain";
  return `could not recover ${count} ${after}, ${before} (${why})`;
}

function duration(from: string | undefined, to: string | undefined): string {
  if (!from || !to) return "";
  const ms = Date.parse(to) - Date.parse(from);
  if (!(ms >= 0)) return "";
  return ms < 1000 ? ` in ${ms}ms` : ` in ${(ms / 1000).toFixed(1)}s`;
}

function runUid(e: TimelineEntry): string {
  return e.kind === "transition" ? e.transition.runUid : e.kind === "toolCall" ? e.toolCall.runUid : e.gap.runUid;
}

function line(e: TimelineEntry): string {
  switch (e.kind) {
    case "transition": {
      const t = e.transition;
      const move = t.from ? `${t.from} -> ${t.phase}` : t.phase;
      const why = t.reason ? `  ${t.reason}${t.message ? `: ${t.message}` : ""}` : t.message ? `  ${t.message}` : "";
      return `${e.time}  phase  ${move}  (attempt ${t.attempt})${why}`;
    }
    case "toolCall": {
      const c = e.toolCall;
      const attempt = c.attempt === undefined ? "" : `  (attempt ${c.attempt})`;
      const error = c.error
        ? `: ${[c.error.httpStatus !== undefined ? `HTTP ${c.error.httpStatus}` : "", c.error.message ?? ""].filter(Boolean).join(" ")}`
        : "";
      const key = c.idempotencyKey ? `  key ${c.idempotencyKey}` : "";
      return `${e.time}  tool   ${c.name} [${c.id}] ${c.state}${duration(c.startedAt, c.finishedAt)}${error}${attempt}  args ${c.argsHash}${key}`;
    }
    case "gap":
      return `${e.time}  GAP    ${describeGap(e.gap)}`;
  }
}

/** The readable timeline the CLI prints. */
export function formatHistory(history: RunHistory): string {
  const header = `AgentRun ${history.namespace}/${history.name}  (uid ${history.uids.join(", ")})`;
  const counts = `${history.transitions.length} transitions, ${history.toolCalls.length} tool calls, ${history.gaps.length} gaps`;
  // A name reused after a delete has several runs: then each line says which one it belongs to.
  const several = history.uids.length > 1;
  const lines = timeline(history).map((e) => (several ? `${line(e)}  [run ${runUid(e).slice(0, 8)}]` : line(e)));
  // Printed to a terminal, and tool names, errors and messages come from sandboxes: each entry
  // stays one line and drives nothing.
  return [header, counts, "", ...lines].map((l) => escapeTerminal(l)).join("\n") + "\n";
}
