// The subcommands of `kubectl agentrun`. Each reads what it needs, acts through the API server
// the way a user with kubectl would (annotations and merge patches the operator reacts to), and
// says in one line what happened or why it refused.
import type { AgentRunStatus } from "../../api/agentrun.ts";
import { ANNOTATIONS } from "../../api/annotations.ts";
import { isConflict, paths, type Json } from "../../kube/client.ts";
import { formatHistory } from "../../ledger/format.ts";
import type { RunHistory } from "../../ledger/read.ts";
import { escapeTerminal } from "../terminal.ts";
import type { Invocation } from "./args.ts";
import { Cluster, CliError, explainFailure, loadKubeConfig } from "./cluster.ts";
import { formatDescribe, formatList } from "./format.ts";
import { LedgerError, ledgerName, readLedger } from "./ledger.ts";
import { historyOfUid, mergeTimeline, timelineLine, type TimelineItem } from "./timeline.ts";

export interface Io {
  out(text: string): void;
  err(text: string): void;
}

/** What every command works with; the cluster is connected only when a command needs it. */
export class Context {
  readonly inv: Invocation;
  readonly env: NodeJS.ProcessEnv;
  readonly io: Io;
  readonly now: () => number;
  private connected?: Cluster;

  /** `cluster`: act as that connection instead of the kubeconfig's (the console's signed-in user). */
  constructor(inv: Invocation, env: NodeJS.ProcessEnv, io: Io, now: () => number = Date.now, cluster?: Cluster) {
    this.inv = inv;
    this.env = env;
    this.io = io;
    this.now = now;
    if (cluster) this.connected = cluster;
  }

  get cluster(): Cluster {
    this.connected ??= new Cluster(loadKubeConfig(this.inv, this.env), this.inv.namespace);
    return this.connected;
  }
  get namespace(): string {
    return this.inv.namespace ?? this.cluster.namespace;
  }
  get run(): string {
    return this.inv.run as string;
  }
  get databaseUrl(): string | undefined {
    return this.inv.databaseUrl;
  }
}

const statusOf = (run: Json) => (run.status ?? {}) as AgentRunStatus;
const metaOf = (run: Json) => run.metadata as { name: string; namespace: string; uid?: string; resourceVersion?: string; annotations?: Record<string, string> };
const phaseText = (status: AgentRunStatus) => (status.phase ? `in phase ${status.phase}` : "not yet acted on by the operator");

/** The run's Events; the uid keeps out those of an earlier run that bore the same name. */
async function runEvents(ctx: Context, run: Json): Promise<Json[]> {
  const meta = metaOf(run);
  const selector = [`regarding.kind=AgentRun`, `regarding.name=${meta.name}`, ...(meta.uid ? [`regarding.uid=${meta.uid}`] : [])];
  const list = await ctx.cluster.client.get<{ items: Json[] }>(paths.events(meta.namespace), { fieldSelector: selector.join(",") });
  return list.items;
}

/** Events if they can be read; otherwise none, and a note saying why. */
async function eventsOrNote(ctx: Context, run: Json, notes: string[]): Promise<Json[]> {
  try {
    return await runEvents(ctx, run);
  } catch (err) {
    notes.push(`Events unavailable: ${ctx.cluster.explain(err).message}`);
    return [];
  }
}

// ---------------------------------------------------------------------------------------------

async function list(ctx: Context): Promise<number> {
  const namespace = ctx.inv.allNamespaces ? undefined : ctx.namespace;
  const runs = await ctx.cluster.listRuns(namespace);
  if (ctx.inv.output === "json") {
    ctx.io.out(`${JSON.stringify({ apiVersion: "v1", kind: "List", items: runs }, null, 2)}\n`);
  } else if (runs.length === 0) {
    ctx.io.err(namespace ? `No agentruns found in namespace "${namespace}".\n` : "No agentruns found.\n");
  } else {
    ctx.io.out(formatList(runs, { allNamespaces: ctx.inv.allNamespaces, wide: ctx.inv.output === "wide" }, ctx.now()));
  }
  return 0;
}

export interface RunTimeline {
  timeline: TimelineItem[];
  /** Where the timeline comes from, and what it lacks and why. */
  sources: string;
  notes: string[];
}

/**
 * A run's timeline from its Events, status.transitions and, with a ledger, the ledger's history.
 * `fromStatus` adds the tool records and the last nudge that status holds (the console shows
 * them; describe prints them in sections of their own).
 */
export async function runTimeline(ctx: Context, run: Json, fromStatus = false): Promise<RunTimeline> {
  const meta = metaOf(run);
  const notes: string[] = [];
  const url = ctx.databaseUrl;
  const [events, history] = await Promise.all([
    eventsOrNote(ctx, run, notes),
    url
      ? readLedger(url, { namespace: meta.namespace, name: meta.name }).then(
          (h) => {
            const mine = historyOfUid(h, meta.uid);
            if (!mine) notes.push(`the ledger at ${ledgerName(url)} holds nothing for this run yet`);
            return mine;
          },
          (err: unknown) => {
            if (!(err instanceof LedgerError)) throw err;
            notes.push(`ledger unavailable: ${err.message}`);
            return undefined;
          },
        )
      : ctx.cluster.getHistory(meta.name, meta.namespace).then(({ history: h, problem }) => {
          const mine = historyOfUid(h, meta.uid);
          if (problem) notes.push(problem);
          else if (!mine) notes.push("the ledger holds nothing for this run yet");
          return mine;
        }),
  ]);
  const sources = history ? "the ledger, status.transitions and Events" : "status.transitions and Events";
  const status = statusOf(run);
  const lastNudge = status.stall?.lastNudge;
  const timeline = mergeTimeline({
    transitions: status.transitions ?? [],
    events,
    ...(history ? { history } : {}),
    ...(fromStatus ? { toolCalls: status.toolCalls ?? [] } : {}),
    ...(fromStatus && lastNudge ? { nudge: { time: lastNudge.time, message: lastNudge.message, count: status.stall?.nudges ?? 0 } } : {}),
  });
  return { timeline, sources, notes };
}

async function describe(ctx: Context): Promise<number> {
  const run = await ctx.cluster.getRun(ctx.run, ctx.namespace);
  const { timeline, sources, notes } = await runTimeline(ctx, run);
  ctx.io.out(formatDescribe({ run, timeline, timelineSource: [sources, ...notes].join("; "), now: ctx.now() }));
  return 0;
}

async function history(ctx: Context): Promise<number> {
  const url = ctx.databaseUrl;
  const notes: string[] = [];
  // The ledger answers for runs the cluster no longer has, so it is asked first: at the URL when
  // one is given, else through the API server with the user's own credentials.
  let found: RunHistory | undefined;
  if (url) {
    try {
      found = await readLedger(url, { namespace: ctx.namespace, name: ctx.run });
      if (!found) notes.push(`the ledger at ${ledgerName(url)} holds no history for ${ctx.namespace}/${ctx.run}`);
    } catch (err) {
      if (!(err instanceof LedgerError)) throw err;
      ctx.io.err(`warning: ${escapeTerminal(err.message)}; showing what the cluster still holds\n`);
      notes.push(`the ledger could not be read`);
    }
  } else {
    const answer = await ctx.cluster.getHistory(ctx.run, ctx.namespace);
    found = answer.history;
    if (answer.problem) notes.push(answer.problem);
  }
  if (found) {
    ctx.io.out(ctx.inv.output === "json" ? `${JSON.stringify(found, null, 2)}\n` : formatHistory(found));
    return 0;
  }

  const run = await ctx.cluster.getRun(ctx.run, ctx.namespace);
  const meta = metaOf(run);
  const events = await eventsOrNote(ctx, run, notes);
  const transitions = statusOf(run).transitions ?? [];
  const items: TimelineItem[] = mergeTimeline({ transitions, events });
  const note = `Only what the cluster still holds: the latest ${transitions.length} status.transitions (status keeps at most 20) and the run's Events (the API server expires them); ${notes.join("; ")}.`;
  if (ctx.inv.output === "json") {
    ctx.io.out(`${JSON.stringify({ namespace: meta.namespace, name: meta.name, uid: meta.uid, source: "cluster", complete: false, note, timeline: items }, null, 2)}\n`);
    return 0;
  }
  const lines = [`AgentRun ${meta.namespace}/${meta.name}  (uid ${meta.uid ?? "?"})`, note, "", ...(items.length ? items.map(timelineLine) : ["(nothing recorded)"])];
  // Each entry is one line: a newline in an Event's note or a message must not start another.
  ctx.io.out(lines.map((line) => escapeTerminal(line)).join("\n") + "\n");
  return 0;
}

/**
 * Sets annotations after checking the run's state, with the run's resourceVersion as a
 * precondition so that the check and the write see the same run; a conflict reads it again.
 */
async function annotateChecked(
  ctx: Context,
  check: (run: Json) => void,
  annotations: (run: Json) => Record<string, string | null>,
  precondition = true,
): Promise<Json> {
  for (let tries = 1; ; tries++) {
    const run = await ctx.cluster.getRun(ctx.run, ctx.namespace);
    check(run);
    const metadata: Json = { annotations: annotations(run) };
    if (precondition) metadata.resourceVersion = metaOf(run).resourceVersion;
    try {
      return await ctx.cluster.patchRun(ctx.run, { metadata }, ctx.namespace);
    } catch (err) {
      if (!isConflict(err) || tries >= 5) throw ctx.cluster.explain(err);
    }
  }
}

async function resume(ctx: Context): Promise<number> {
  let value = "";
  let phase: string | undefined;
  await annotateChecked(
    ctx,
    (run) => {
      const status = statusOf(run);
      phase = status.phase;
      if (!ctx.inv.force && status.phase !== "NeedsHumanIntervention") {
        throw new CliError(
          `agentrun "${ctx.run}" is ${phaseText(status)}, not NeedsHumanIntervention: resume only acts on a run that needs a person (--force sets ${ANNOTATIONS.resume} anyway)`,
        );
      }
    },
    (run) => {
      // A resume takes effect when the value is new, so it must differ from the last one seen.
      const previous = [metaOf(run).annotations?.[ANNOTATIONS.resume], statusOf(run).observedResume];
      let at = ctx.now();
      do value = new Date(at++).toISOString();
      while (previous.includes(value));
      return { [ANNOTATIONS.resume]: value };
    },
    !ctx.inv.force,
  );
  const effect =
    phase === "NeedsHumanIntervention"
      ? "the watchdog queues a new attempt with fresh budgets"
      : `the run is ${phase ?? "not yet acted on"}, so the watchdog only records the value and does not restart it`;
  ctx.io.out(`agentrun "${ctx.run}" resumed: ${ANNOTATIONS.resume}=${value}; ${effect}\n`);
  return 0;
}

/** The id of the request the answer is for: it is set beside the answer, so it can answer no other. */
function requirePendingRequest(ctx: Context, run: Json, verb: string): string {
  const status = statusOf(run);
  if (status.phase !== "AwaitingReply") {
    throw new CliError(`agentrun "${ctx.run}" is ${phaseText(status)}, not AwaitingReply: there is no request to ${verb}`);
  }
  if (status.approval && status.approval.state !== "Pending") {
    throw new CliError(`the request of agentrun "${ctx.run}" was already answered (${status.approval.state}); nothing is pending`);
  }
  if (!status.approval?.id) {
    throw new CliError(`agentrun "${ctx.run}" awaits a reply, but the watchdog has not recorded the request yet; try again in a moment`);
  }
  if (ctx.inv.approvalId !== undefined && ctx.inv.approvalId !== status.approval.id) {
    throw new CliError(
      `the pending request of agentrun "${ctx.run}" is ${status.approval.id}, not ${ctx.inv.approvalId}: the question changed; read the new one before you answer`,
    );
  }
  return status.approval.id;
}

async function approve(ctx: Context): Promise<number> {
  const answer = ctx.inv.answer ?? "";
  let released = false;
  let id = "";
  await annotateChecked(
    ctx,
    (run) => {
      id = requirePendingRequest(ctx, run, "approve");
      released = !statusOf(run).podName;
    },
    () => ({ [ANNOTATIONS.approve]: answer, [ANNOTATIONS.approvalId]: id, [ANNOTATIONS.reject]: null }),
  );
  const next = released ? "a new sandbox resumes from the checkpoint" : "the sandbox carries on";
  ctx.io.out(`agentrun "${ctx.run}" approved request ${id}${answer ? ` with the answer ${JSON.stringify(answer)}` : ""}: ${ANNOTATIONS.approve} set; ${next}\n`);
  return 0;
}

async function reject(ctx: Context): Promise<number> {
  const reason = ctx.inv.reason ?? "";
  let id = "";
  await annotateChecked(
    ctx,
    (run) => {
      id = requirePendingRequest(ctx, run, "reject");
    },
    () => ({ [ANNOTATIONS.reject]: reason, [ANNOTATIONS.approvalId]: id, [ANNOTATIONS.approve]: null }),
  );
  ctx.io.out(`agentrun "${ctx.run}" rejected request ${id}${reason ? ` (${JSON.stringify(reason)})` : ""}: ${ANNOTATIONS.reject} set; the run ends as Failed\n`);
  return 0;
}

async function setSuspend(ctx: Context, suspend: boolean): Promise<number> {
  const run = await ctx.cluster.getRun(ctx.run, ctx.namespace);
  const current = (run.spec as { suspend?: boolean } | undefined)?.suspend === true;
  if (current === suspend) {
    ctx.io.out(`agentrun "${ctx.run}" is already ${suspend ? "suspended" : "not suspended"}\n`);
    return 0;
  }
  await ctx.cluster.patchRun(ctx.run, { spec: { suspend } }, ctx.namespace);
  ctx.io.out(
    suspend
      ? `agentrun "${ctx.run}" suspended: its sandbox pod is removed, and no timer fires until it is unsuspended\n`
      : `agentrun "${ctx.run}" unsuspended: it is queued as a new attempt\n`,
  );
  return 0;
}

/**
 * A command served by a module above this one (the console), handed in by the entry point, so that
 * the console can run this module's commands without the two importing each other.
 */
export type CommandHandler = (ctx: Context) => Promise<number>;

function dispatch(ctx: Context, handlers: { console?: CommandHandler }): Promise<number> {
  switch (ctx.inv.command) {
    case "list":
      return list(ctx);
    case "describe":
      return describe(ctx);
    case "history":
      return history(ctx);
    case "resume":
      return resume(ctx);
    case "approve":
      return approve(ctx);
    case "reject":
      return reject(ctx);
    case "suspend":
      return setSuspend(ctx, true);
    case "unsuspend":
      return setSuspend(ctx, false);
    case "console":
      if (!handlers.console) throw new CliError("the console is not served from here");
      return handlers.console(ctx);
  }
}

/**
 * Runs one command; every failure becomes one line on stderr and exit code 1. `cluster`, when
 * given, is who the command acts as (the console hands in the user it serves).
 */
export async function execute(inv: Invocation, env: NodeJS.ProcessEnv, io: Io, now: () => number = Date.now, handlers: { console?: CommandHandler; cluster?: Cluster } = {}): Promise<number> {
  const ctx = new Context(inv, env, io, now, handlers.cluster);
  try {
    return await dispatch(ctx, handlers);
  } catch (err) {
    // Anything unforeseen still gets one line: a stack trace tells a kubectl user nothing.
    const message = err instanceof CliError || err instanceof LedgerError ? err.message : explainFailure(err, "the API server");
    // One line, whatever the API server or the ledger put in the message.
    io.err(`error: ${escapeTerminal(message)}\n`);
    return 1;
  }
}
