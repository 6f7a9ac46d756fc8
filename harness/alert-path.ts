// The alert path as users run it: a Prometheus that scrapes the operator and loads the chart's
// rules, and an Alertmanager it sends the alerts to, both built from their pinned Go modules by
// hack/ and started here on loopback, each in a directory of its own. Nothing is left running:
// stop() ends both (SIGTERM, then SIGKILL) and waits for them.
import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { stringify as stringifyYaml } from "yaml";
import { pollUntil } from "./cluster.ts";
import { freePort } from "./free-port.ts";
import { startTool, stopTool, toolBinary, toolReady } from "./tool-process.ts";

export interface AlertPathOptions {
  /** Where the configurations, the data and the logs go. */
  dir: string;
  /** host:port of the operator's /metrics. */
  scrapeTarget: string;
  /** Prometheus rule files to load. */
  ruleFiles: string[];
  /** Alertmanager's configuration, as YAML text. */
  alertmanagerConfig: string;
  /** Scrape and rule evaluation interval (Prometheus's duration syntax). */
  interval?: string;
}

export interface AlertPath {
  prometheusUrl: string;
  alertmanagerUrl: string;
  /** The alerts Prometheus holds now (pending and firing). */
  alerts(): Promise<{ labels: Record<string, string>; state: string; activeAt?: string }[]>;
  stop(): Promise<void>;
}

export async function startAlertPath(options: AlertPathOptions): Promise<AlertPath> {
  const interval = options.interval ?? "1s";
  const [prometheusBin, alertmanagerBin] = [await toolBinary("prometheus"), await toolBinary("alertmanager")];
  const [prometheusPort, alertmanagerPort] = [await freePort(), await freePort()];
  const prometheusUrl = `http://127.0.0.1:${prometheusPort}`;
  const alertmanagerUrl = `http://127.0.0.1:${alertmanagerPort}`;
  for (const sub of ["prometheus", "alertmanager"]) mkdirSync(join(options.dir, sub, "data"), { recursive: true });

  const alertmanagerConfigFile = join(options.dir, "alertmanager", "alertmanager.yaml");
  writeFileSync(alertmanagerConfigFile, options.alertmanagerConfig);
  const alertmanagerLog = join(options.dir, "alertmanager", "log");
  const alertmanager = startTool(
    alertmanagerBin,
    [
      `--config.file=${alertmanagerConfigFile}`,
      `--storage.path=${join(options.dir, "alertmanager", "data")}`,
      `--web.listen-address=127.0.0.1:${alertmanagerPort}`,
      // One Alertmanager, no gossip: an empty address turns clustering off.
      "--cluster.listen-address=",
    ],
    alertmanagerLog,
  );
  const started = [alertmanager];
  try {
    await toolReady("Alertmanager", `${alertmanagerUrl}/-/ready`, alertmanager);
    const prometheusConfigFile = join(options.dir, "prometheus", "prometheus.yaml");
    writeFileSync(
      prometheusConfigFile,
      stringifyYaml({
        global: { scrape_interval: interval, scrape_timeout: interval, evaluation_interval: interval },
        rule_files: options.ruleFiles,
        alerting: { alertmanagers: [{ static_configs: [{ targets: [`127.0.0.1:${alertmanagerPort}`] }] }] },
        // As the chart's ServiceMonitor scrapes: the job named after the Service, the operator's
        // own namespace label kept (honorLabels), and the target labels a ServiceMonitor adds.
        scrape_configs: [
          {
            job_name: "agent-watchdog",
            honor_labels: true,
            static_configs: [{ targets: [options.scrapeTarget], labels: { namespace: "agent-watchdog", pod: "agent-watchdog-0" } }],
          },
        ],
      }),
    );
    const prometheusLog = join(options.dir, "prometheus", "log");
    const prometheus = startTool(
      prometheusBin,
      [
        `--config.file=${prometheusConfigFile}`,
        `--storage.tsdb.path=${join(options.dir, "prometheus", "data")}`,
        `--web.listen-address=127.0.0.1:${prometheusPort}`,
        // A firing alert is sent again this often (default 1m); resolved ones are sent at once.
        "--rules.alert.resend-delay=1s",
      ],
      prometheusLog,
    );
    started.push(prometheus);
    await toolReady("Prometheus", `${prometheusUrl}/-/ready`, prometheus);
    // Ready is not yet scraping: service discovery hands over its first targets up to 5 s later.
    await pollUntil("Prometheus's first scrape of the operator", 60_000, async () => {
      const body = (await (await fetch(`${prometheusUrl}/api/v1/query?query=up`)).json()) as { data: { result: { value: [number, string] }[] } };
      return body.data.result.some((r) => r.value[1] === "1");
    });
  } catch (err) {
    await Promise.all(started.map(stopTool));
    throw err;
  }
  return {
    prometheusUrl,
    alertmanagerUrl,
    async alerts() {
      const body = (await (await fetch(`${prometheusUrl}/api/v1/alerts`)).json()) as { data: { alerts: { labels: Record<string, string>; state: string; activeAt?: string }[] } };
      return body.data.alerts;
    },
    async stop() {
      await Promise.all(started.reverse().map(stopTool));
    },
  };
}
