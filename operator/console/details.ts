// What the run page loads besides the run itself: its merged timeline (the same one `kubectl
// agentrun describe` prints) and its sandbox's recent log lines, both read as the user.
import { isDnsLabel, isDnsSubdomain } from "../api/names.ts";
import { explainFailure } from "../cli/plugin/cluster.ts";
import { runTimeline, type Context } from "../cli/plugin/commands.ts";
import { timelineLine, type TimelineItem } from "../cli/plugin/timeline.ts";
import { paths, type Json } from "../kube/client.ts";

export interface TimelineEntry {
  time: string;
  kind: TimelineItem["kind"];
  title: string;
  detail?: string;
  warning?: boolean;
}

/** One timeline item for the page: the describe line without its time and kind, and whether it is bad news. */
export function timelineEntry(item: TimelineItem): TimelineEntry {
  const line = timelineLine(item);
  // timelineLine starts with the time and a padded kind word.
  const title = line.slice(item.time.length).trim().replace(/^\S+\s+/, "");
  // The operator's bad news comes as Warning Events (a BudgetExhausted stop, a BudgetWarning, a
  // kill...), and as the phases a run ends in or stops for a person in.
  const warning =
    (item.kind === "event" && item.type === "Warning") ||
    item.kind === "gap" ||
    (item.kind === "tool" && item.call.state === "Failed") ||
    (item.kind === "phase" && (item.phase === "Failed" || item.phase === "NeedsHumanIntervention"));
  const result: TimelineEntry = { time: item.time, kind: item.kind, title };
  if (warning) result.warning = true;
  return result;
}

export async function runDetails(ctx: Context, namespace: string, name: string): Promise<{ timeline: TimelineEntry[]; notes: string[] }> {
  const run = await ctx.cluster.getRun(name, namespace);
  const { timeline, sources, notes } = await runTimeline(ctx, run, true);
  return { timeline: timeline.map(timelineEntry), notes: [`from ${sources}`, ...notes] };
}

const LOG_LINES = 200;

/** The last lines of the current sandbox's agent container, or why there are none. */
export async function runLogs(ctx: Context, namespace: string, name: string): Promise<{ pod: string; container: string; text: string } | { message: string }> {
  const run = await ctx.cluster.getRun(name, namespace);
  const status = (run.status ?? {}) as { podName?: string; watchdog?: { agentContainer?: string } };
  const pod = status.podName;
  if (!pod) return { message: "The run has no sandbox pod right now." };
  const spec = (run.spec ?? {}) as { template?: { spec?: { containers?: Json[] } } };
  const container = status.watchdog?.agentContainer ?? String(spec.template?.spec?.containers?.[0]?.name ?? "");
  // The pod's name comes from the run's status, which sandboxes write too: it goes into the
  // log's path only if it is a pod name.
  if (!isDnsSubdomain(pod) || !isDnsLabel(container)) return { message: "The run's status names no valid pod and container, so there are no logs to show." };
  try {
    const text = await ctx.cluster.client.request<string>("GET", `${paths.pod(namespace, pod)}/log`, {
      query: { container, tailLines: LOG_LINES, timestamps: true },
      text: true,
    });
    return { pod, container, text };
  } catch (err) {
    return { message: `The logs of pod ${pod} cannot be read: ${explainFailure(err, ctx.cluster.server)}` };
  }
}
