// The alert path, end to end and for real: a Prometheus built from its Go module scrapes a real
// operator and loads the chart's rules; it sends to an Alertmanager, also built here, that runs
// the chart's Slack example (files/alertmanager-slack.yaml) with its timings shortened and its
// webhook pointed at a receiver this test runs. A run that needs a person must reach "Slack" as a
// message naming the run, its namespace and the reason, with the runbook link; resuming the run
// must resolve it.
import { createServer, type Server } from "node:http";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { parse as parseYaml, stringify as stringifyYaml } from "yaml";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startAlertPath, type AlertPath } from "../../harness/alert-path.ts";
import { ANNOTATIONS } from "../../operator/api/annotations.ts";
import { paths, type KubeClient } from "../../operator/kube/client.ts";
import { condition, createRun, deleteNamespace, getRun, kube, listPods, newNamespace, ofAttempt, runManifest } from "../support/cluster.ts";
import { startOperator, type OperatorProcess } from "../support/operator-process.ts";
import { setPodPhase } from "../support/sandbox.ts";
import { waitFor } from "../support/wait.ts";

const root = fileURLToPath(new URL("../..", import.meta.url));
const RULES = join(root, "charts/agent-watchdog/files/prometheus-rules.yaml");
const SLACK_EXAMPLE = join(root, "charts/agent-watchdog/files/alertmanager-slack.yaml");
const RUNBOOK = "https://github.com/agent-watchdog/agent-watchdog/blob/main/charts/agent-watchdog/files/RUNBOOK.md#runbook-agentrunneedshumanintervention";

interface SlackMessage {
  at: number;
  body: { channel?: string; attachments?: { title?: string; title_link?: string; text?: string }[] };
}

let client: KubeClient;
let ns: string;
let operator: OperatorProcess | undefined;
let alertPath: AlertPath | undefined;
let receiver: Server | undefined;
const messages: SlackMessage[] = [];
const dir = mkdtempSync(join(tmpdir(), "alert-path-"));

/** The chart's example as it is, but for the webhook (the test's receiver) and quicker grouping. */
function alertmanagerConfig(webhookFile: string): string {
  const config = parseYaml(readFileSync(SLACK_EXAMPLE, "utf8"));
  const slack = config.receivers.find((r: { name: string }) => r.name === "agent-watchdog-slack");
  slack.slack_configs[0].api_url_file = webhookFile;
  for (const route of config.route.routes) Object.assign(route, { group_wait: "1s", group_interval: "1s" });
  return stringifyYaml(config);
}

beforeAll(async () => {
  client = kube();
  ns = await newNamespace(client, "aw-alerts");
  receiver = createServer((req, res) => {
    let body = "";
    req.on("data", (chunk: Buffer) => (body += chunk.toString()));
    req.on("end", () => {
      messages.push({ at: Date.now(), body: JSON.parse(body) });
      res.writeHead(200).end("ok");
    });
  });
  await new Promise<void>((resolve) => receiver!.listen(0, "127.0.0.1", resolve));
  const webhookFile = join(dir, "slack-webhook");
  writeFileSync(webhookFile, `http://127.0.0.1:${(receiver.address() as { port: number }).port}/services/T000/B000/XXXX`);
  operator = await startOperator(ns);
  alertPath = await startAlertPath({
    dir,
    scrapeTarget: new URL(operator.metricsUrl).host,
    ruleFiles: [RULES],
    alertmanagerConfig: alertmanagerConfig(webhookFile),
  });
}, 600_000);

afterAll(async () => {
  await alertPath?.stop();
  await operator?.stop();
  receiver?.close();
  await deleteNamespace(client, ns);
  rmSync(dir, { recursive: true, force: true });
});

const about = (name: string) => (m: SlackMessage) => m.body.attachments?.some((a) => a.title?.includes(`${ns}/${name}`)) === true;

describe("the alert path: operator, Prometheus, Alertmanager, Slack", () => {
  it("tells Slack which run needs a person and why, with the runbook, and that it is resolved once the run is resumed", async () => {
    await createRun(client, ns, runManifest("stuck", { maxRestarts: 0, heartbeatTimeout: "5m" }));
    const pod = await waitFor("the sandbox pod", async () => (await listPods(client, ns, "stuck")).find(ofAttempt(1)));
    await setPodPhase(client, ns, pod.metadata.name, "Running");
    await setPodPhase(client, ns, pod.metadata.name, "Failed", 1);
    const stopped = await waitFor("the run to need a person", async () => {
      const run = await getRun(client, ns, "stuck");
      return run.status?.phase === "NeedsHumanIntervention" ? run : undefined;
    });
    const stoppedAt = Date.now();
    expect(condition(stopped, "NeedsHumanIntervention")).toMatchObject({ status: "True", reason: "RecoveryBudgetExhausted" });

    const exposed = await waitFor("the operator to expose the run", async () => (await operator!.metrics()).includes(`agentrun="stuck"`) && Date.now(), { intervalMs: 20 });
    // The group waits 1 s, scrape and evaluation are 1 s each: a generous deadline, and the
    // figures are printed.
    const firing = await waitFor("the Slack message", () => messages.find(about("stuck")), { timeoutMs: 60_000, intervalMs: 50 });
    const [active] = (await alertPath!.alerts()).filter((a) => a.labels.alertname === "AgentRunNeedsHumanIntervention");
    console.log(
      `alert path: NeedsHumanIntervention seen -> Slack message in ${firing.at - stoppedAt} ms (in /metrics after ${exposed - stoppedAt} ms, the alert active in Prometheus after ${Date.parse(active?.activeAt ?? "") - stoppedAt} ms)`,
    );
    expect(firing.body.channel).toBe("#agent-runs");
    const [attachment] = firing.body.attachments!;
    expect(attachment!.title).toBe(`[FIRING] AgentRun ${ns}/stuck needs a person (RecoveryBudgetExhausted)`);
    expect(attachment!.title_link).toBe(RUNBOOK);
    expect(attachment!.text).toContain(`AgentRun stuck in namespace ${ns} is in NeedsHumanIntervention with reason RecoveryBudgetExhausted`);
    expect(attachment!.text).toContain(`kubectl describe agentrun -n ${ns} stuck`);
    expect(attachment!.text).toContain(`Runbook: ${RUNBOOK}`);
    // The run's namespace, not the operator's (the target label the scrape adds).
    const [alert] = (await alertPath!.alerts()).filter((a) => a.labels.alertname === "AgentRunNeedsHumanIntervention");
    expect(alert).toMatchObject({ state: "firing", labels: { namespace: ns, agentrun: "stuck", reason: "RecoveryBudgetExhausted", severity: "warning" } });

    await client.mergePatch(paths.run(ns, "stuck"), { metadata: { annotations: { [ANNOTATIONS.resume]: "fixed" } } });
    await waitFor("the run to leave NeedsHumanIntervention", async () => (await getRun(client, ns, "stuck")).status?.phase !== "NeedsHumanIntervention");
    const resumedAt = Date.now();
    const resolved = await waitFor("the resolved message", () => messages.find((m) => about("stuck")(m) && m.body.attachments![0]!.title!.startsWith("[RESOLVED]")), {
      timeoutMs: 60_000,
      intervalMs: 50,
    });
    console.log(`alert path: resumed -> resolved message in ${resolved.at - resumedAt} ms`);
    expect(resolved.body.attachments![0]!.title).toBe(`[RESOLVED] AgentRun ${ns}/stuck needs a person (RecoveryBudgetExhausted)`);
    expect(await alertPath!.alerts()).not.toContainEqual(expect.objectContaining({ labels: expect.objectContaining({ agentrun: "stuck" }) }));
    // One message for the run's trouble and one for its end, nothing about any other run.
    expect(messages.filter(about("stuck")).map((m) => m.body.attachments![0]!.title!.split("]")[0])).toEqual(["[FIRING", "[RESOLVED"]);
  });
});
