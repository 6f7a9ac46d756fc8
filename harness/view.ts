// The demo's terminal: colours, the live table of runs, and the recent watchdog events.
import { paths, type KubeClient } from "../operator/kube/client.ts";
import { FINAL_PHASES, type Run } from "./driver.ts";
import type { DemoRun } from "./scenario.ts";
import { budgetColumn } from "../operator/cli/plugin/format.ts";

/* eslint-disable @typescript-eslint/no-explicit-any -- runs and events are read as plain JSON here */
export const tty = process.stdout.isTTY === true;
const colour = tty && !process.env.NO_COLOR;
const paint = (code: number) => (text: string) => (colour ? `\x1b[${code}m${text}\x1b[0m` : text);
export const green = paint(32);
export const red = paint(31);
export const yellow = paint(33);
export const dim = paint(2);
export const bold = paint(1);

export function phaseColour(phase: string): (s: string) => string {
  if (phase === "Completed") return green;
  if (phase === "NeedsHumanIntervention" || phase === "Failed") return red;
  if (phase === "Queued" || phase === "AwaitingReply") return yellow;
  return (s) => s;
}

export const seconds = (ms: number) => `${(ms / 1000).toFixed(ms < 10_000 ? 1 : 0)}s`;
const ACTIVE = new Set(["Starting", "Planning", "ExecutingTool", "AwaitingReply"]);

interface Row {
  name: string;
  behaviour: string;
  phase: string;
  attempt: string;
  restarts: string;
  heartbeat: string;
  nudges: string;
  budget: string;
  reason: string;
}

function rowOf(run: Run, behaviours: Map<string, string>, now: number): Row {
  const s = run.status ?? {};
  const hb = s.heartbeat?.attempt === s.attempt && s.podName ? Date.parse(s.heartbeat.time) : NaN;
  const reason = s.reason ?? (s.lastFailure ? `after ${s.lastFailure.reason}` : "");
  return {
    name: run.metadata.name,
    behaviour: behaviours.get(run.metadata.name) ?? "?",
    phase: s.phase ?? "-",
    attempt: String(s.attempt ?? "-"),
    restarts: s.watchdog ? `${s.restarts ?? 0}/${s.watchdog.maxRestarts}` : "-",
    heartbeat: ACTIVE.has(s.phase) && Number.isFinite(hb) ? seconds(Math.max(0, now - hb)) : "-",
    nudges: s.watchdog ? `${s.stall?.nudges ?? 0}/${s.watchdog.stall.maxNudges}` : "-",
    budget: budgetColumn(run, now),
    reason,
  };
}

const COLUMNS: [keyof Row, string, number][] = [
  ["name", "NAME", 16],
  ["behaviour", "BEHAVIOUR", 24],
  ["phase", "PHASE", 24],
  ["attempt", "ATTEMPT", 9],
  ["restarts", "RESTARTS", 10],
  ["heartbeat", "HEARTBEAT", 11],
  ["nudges", "NUDGES", 8],
  ["budget", "BUDGET", 21],
  ["reason", "REASON", 0],
];

function tableLines(rows: Row[]): string[] {
  const line = (cells: (key: keyof Row, width: number) => string) => COLUMNS.map(([key, , width]) => cells(key, width)).join("");
  const header = bold(line((key, width) => (COLUMNS.find((c) => c[0] === key)?.[1] ?? "").padEnd(width)));
  const body = rows.map((row) =>
    line((key, width) => {
      const text = row[key].padEnd(width);
      return key === "phase" ? phaseColour(row.phase)(text) : text;
    }),
  );
  return [header, ...body];
}

interface EventLine {
  time: string;
  text: string;
}

export class LiveView {
  private drawn = 0;
  private readonly last = new Map<string, string>();
  private readonly started = Date.now();
  private readonly behaviours: Map<string, string>;
  private events: EventLine[] = [];
  private readonly notes: string[] = [];
  private readonly namespace: string;

  constructor(namespace: string, runs: readonly DemoRun[]) {
    this.namespace = namespace;
    this.behaviours = new Map(runs.map((r) => [r.name, r.behaviour]));
  }

  note(text: string): void {
    if (tty) this.notes.push(text);
    else process.stdout.write(`${this.stamp()}  ${text}\n`);
  }

  setEvents(events: EventLine[]): void {
    this.events = events;
  }

  private stamp(): string {
    return `+${seconds(Date.now() - this.started)}`.padStart(7);
  }

  update(runs: Run[]): void {
    const now = Date.now();
    const sorted = [...runs].sort((a, b) => this.order(a) - this.order(b));
    const rows = sorted.map((r) => rowOf(r, this.behaviours, now));
    if (tty) {
      this.redraw(rows);
      return;
    }
    // Not a terminal: one line per change of what matters, never a redraw.
    for (const [i, row] of rows.entries()) {
      const s = sorted[i]?.status ?? {};
      const key = [row.phase, row.attempt, row.reason, row.nudges].join("|");
      if (this.last.get(row.name) === key) continue;
      this.last.set(row.name, key);
      const detail = s.message && !ACTIVE.has(row.phase) ? `  ${String(s.message).slice(0, 140)}` : "";
      process.stdout.write(
        `${this.stamp()}  ${row.name.padEnd(15)} ${row.behaviour.padEnd(23)} ${row.phase.padEnd(23)} attempt ${row.attempt}  restarts ${row.restarts}  nudges ${row.nudges}${row.reason ? `  ${row.reason}` : ""}${detail}\n`,
      );
    }
  }

  private order(run: Run): number {
    const i = [...this.behaviours.keys()].indexOf(run.metadata.name);
    return i < 0 ? 99 : i;
  }

  private redraw(rows: Row[]): void {
    const width = Math.max(40, (process.stdout.columns ?? 120) - 1);
    const settled = rows.filter((r) => FINAL_PHASES.has(r.phase)).length;
    const lines = [
      `${bold("agent-watchdog demo")}  namespace ${this.namespace}  ${seconds(Date.now() - this.started)}  ${settled}/${rows.length} runs settled`,
      "",
      ...tableLines(rows),
      "",
      bold("recent watchdog events"),
      ...(this.events.length ? this.events.slice(-7).map((e) => `  ${dim(e.time)}  ${e.text}`) : [dim("  (none yet)")]),
      ...(this.notes.length ? ["", ...this.notes.slice(-3).map((n) => `  ${yellow(n)}`)] : []),
      "",
      dim("Ctrl-C stops the demo and cleans up."),
    ].map((l) => clip(l, width));
    let out = this.drawn ? `\x1b[${this.drawn}A\r` : "";
    out += lines.map((l) => `${l}\x1b[K`).join("\n") + "\n\x1b[J";
    process.stdout.write(out);
    this.drawn = lines.length;
  }
}

/** Cuts a line to the terminal's width, counting only visible characters. */
function clip(line: string, width: number): string {
  let visible = 0;
  let out = "";
  for (let i = 0; i < line.length; i++) {
    if (line[i] === "\x1b") {
      const end = line.indexOf("m", i);
      out += line.slice(i, end + 1);
      i = end;
      continue;
    }
    if (visible >= width) continue;
    out += line[i];
    visible++;
  }
  return out;
}

export async function recentEvents(client: KubeClient, namespace: string): Promise<EventLine[]> {
  const list = await client.get<{ items: any[] }>(paths.events(namespace));
  return list.items
    .filter((e) => e.regarding?.kind === "AgentRun")
    .map((e) => ({ at: e.eventTime ?? e.deprecatedLastTimestamp ?? e.metadata?.creationTimestamp ?? "", e }))
    .sort((a, b) => (a.at < b.at ? -1 : a.at > b.at ? 1 : 0))
    .map(({ at, e }) => ({
      time: at ? new Date(at).toISOString().slice(11, 19) : "--:--:--",
      text: `${String(e.regarding.name).padEnd(15)} ${e.type === "Warning" ? yellow(e.reason) : e.reason}: ${e.note}`,
    }));
}
