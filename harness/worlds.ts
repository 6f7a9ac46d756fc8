// Where the demo's sandboxes run. Locally (the default, no root): the control plane with a kwok
// node, the operator as a local process and the local sandbox runner playing the kubelet. On the
// real node (--kubelet): kubelet, containerd and runc run each sandbox pod from the project image,
// and the operator runs from the same image, installed with the chart. Both give the demo the
// same things: a cluster, an operator serving /metrics and /history, where the outbox is, how a
// sandbox pod's spec looks, and each sandbox's log.
import { mkdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { pino } from "pino";
import { Outbox, serveOutbox } from "../operator/example-agent/outbox.ts";
import { isNotFound, paths, type KubeClient } from "../operator/kube/client.ts";
import { freePort } from "./free-port.ts";
import { SandboxRunner } from "./sandbox-runner.ts";
import { RESTRICTED_NAMESPACE, applyCrds, clientFor, exported, freshNamespace, runScript, scriptOk } from "./cluster.ts";
import type { Run } from "./driver.ts";
import { startOperator, type OperatorHandle } from "./operator.ts";
import { installOperator, nodeExpose, realNodeStateRoot, realNodeUp } from "./real-node.ts";
import { startJaeger, type Jaeger } from "./jaeger.ts";
import { EXAMPLE_ENV, type SandboxOptions } from "./scenario.ts";
import { dim } from "./view.ts";

export type Step = <T>(what: string, work: () => Promise<T>, detail?: (value: T) => string) => Promise<T>;

export interface WorldOptions {
  namespace: string;
  /** The demo's own files (logs, the outbox). */
  dir: string;
  signal: AbortSignal;
  step: Step;
  /** Start Jaeger and have the operator and the agents export their traces to it. */
  traces?: boolean;
}

export interface DemoWorld {
  kubeconfig: string;
  client: KubeClient;
  /** Serves /metrics and /history/<namespace>/<name>. */
  operatorUrl(): Promise<string>;
  /** A GET of one of those paths, over whatever transport and trust the operator serves with. */
  operatorFetch(path: string, headers?: Record<string, string>): Promise<Response>;
  /** How to look at the metrics afterwards, in a command. */
  metricsHint: string;
  /** What the operator's log is, in words, for when something goes wrong. */
  operatorLog: string;
  outboxDir: string;
  sandbox: SandboxOptions;
  /** The log of a sandbox pod, if it can still be had. */
  sandboxLog(pod: string): Promise<string | undefined>;
  /** Where the sandboxes' logs are, in words. */
  sandboxLogs: string;
  /** Commands to look around with afterwards. */
  hints: string[];
  /** The trace backend, when the demo was asked for traces. */
  jaeger?: Jaeger;
  /** A second Ctrl-C: stop every local process at once, waiting for nothing. */
  kill(): void;
  /** Stops what the demo started, newest first; `quietly` reports each part. */
  teardown(quietly: Quietly): Promise<void>;
}

type Quietly = (label: string, work: () => Promise<unknown>) => Promise<void>;

/** What the demo started, undone newest first: on a failure half-way just as at the end. */
class Undo {
  private readonly steps: { label: string; work: () => Promise<unknown> }[] = [];
  push(label: string, work: () => Promise<unknown>): void {
    this.steps.push({ label, work });
  }
  async run(quietly: Quietly): Promise<void> {
    while (this.steps.length > 0) {
      const step = this.steps.pop() as { label: string; work: () => Promise<unknown> };
      await quietly(step.label, step.work);
    }
  }
}

const silently: Quietly = async (_label, work) => void (await work().catch(() => undefined));

/** Starts the control plane (with `up` arguments) unless it runs; a demo that started it stops it. */
async function controlPlaneUp(step: Step, undo: Undo, what: string, args: string[], env: Record<string, string> = {}): Promise<{ started: boolean; stdout: string }> {
  let started = false;
  const stdout = await step(
    what,
    async () => {
      const before = await runScript("control-plane.sh", ["status"], { quiet: true, env });
      // Only a machine with no cluster state at all gets a cluster that the demo then removes.
      started = before.code !== 0 && before.stdout.includes("no state");
      if (started) {
        undo.push("the control plane", async () => {
          const { code } = await runScript("control-plane.sh", ["down"], { env });
          if (code !== 0) throw new Error(`hack/control-plane.sh down failed (exit ${code})`);
        });
      }
      const { code, stdout: out } = await runScript("control-plane.sh", args, { env });
      if (code !== 0) throw new Error(`hack/control-plane.sh ${args.join(" ")} failed (exit ${code})`);
      return out;
    },
    () => (started ? "started" : "already running; it stays up afterwards"),
  );
  return { started, stdout };
}

async function postgresUp(step: Step, undo: Undo): Promise<string> {
  let started = false;
  return step(
    "PostgreSQL for the ledger",
    async () => {
      const before = await runScript("postgres.sh", ["status"], { quiet: true });
      if (before.code !== 0) {
        // down: it created the server; stop: it started a stopped one.
        const reverse = before.stdout.includes("stopped") ? "stop" : "down";
        undo.push("PostgreSQL", () => scriptOk("postgres.sh", [reverse]));
        started = true;
      }
      const found = exported(await scriptOk("postgres.sh", ["up"]), "DATABASE_URL");
      if (!found) throw new Error("hack/postgres.sh up printed no DATABASE_URL");
      return found;
    },
    () => (started ? "started" : "already running; it stays up afterwards"),
  );
}

/** Makes a namespace afresh; on a cluster that stays up it is deleted afterwards. */
async function demoNamespace(client: KubeClient, namespace: string, options: WorldOptions, undo: Undo, clusterStays: boolean, labels?: Record<string, string>): Promise<void> {
  // On a cluster that goes down, the demo's runs go with it.
  if (clusterStays) undo.push(`namespace ${namespace} (deleting in the background)`, () => deleteNamespace(client, namespace));
  await freshNamespace(client, namespace, options.signal, labels);
}

/** The control plane with a kwok node, the operator as a process, the local sandbox runner. */
export async function localWorld(options: WorldOptions): Promise<DemoWorld> {
  const { namespace, dir, signal, step } = options;
  const undo = new Undo();
  let operator: OperatorHandle | undefined;
  let runner: SandboxRunner | undefined;
  try {
    const cluster = await controlPlaneUp(step, undo, "local control plane with a kwok node (the first run builds it from pinned Go modules)", ["up", "--nodes"]);
    const kubeconfig = exported(cluster.stdout, "KUBECONFIG");
    if (!kubeconfig) throw new Error("hack/control-plane.sh up printed no KUBECONFIG");
    const client = clientFor(kubeconfig);
    await step("AgentRun CRD", () => applyCrds(client));
    const databaseUrl = await postgresUp(step, undo);
    await step(`namespace ${namespace}`, () => demoNamespace(client, namespace, options, undo, !cluster.started));
    const jaeger = options.traces
      ? await step(
          "Jaeger, for the runs' traces (the first run builds it from its pinned Go module)",
          async () => {
            const started = await startJaeger(join(dir, "jaeger"));
            undo.push("Jaeger", () => started.stop());
            return started;
          },
          (j) => dim(`OTLP ${j.otlpEndpoint}, queries ${j.queryUrl}/api/traces/<trace id>`),
        )
      : undefined;
    // Both the operator and the agents export there; spans are sent every 200 ms.
    const otlp: Record<string, string> = jaeger ? { OTEL_EXPORTER_OTLP_ENDPOINT: jaeger.otlpEndpoint, OTEL_BSP_SCHEDULE_DELAY: "200" } : {};
    const outboxDir = join(dir, "outbox");
    const logDir = join(dir, "sandboxes");
    mkdirSync(logDir, { recursive: true });
    const operatorLog = join(dir, "operator.log");
    operator = await step(
      "operator",
      async () => {
        const op = await startOperator({ kubeconfig, namespace, databaseUrl, logFile: operatorLog, signal, env: otlp });
        undo.push("the operator", () => op.stop());
        return op;
      },
      (op) => dim(`metrics ${op.metricsUrl}, log ${op.logFile}`),
    );
    runner = await step(
      "sandbox runner (plays the kubelet: runs each sandbox pod's agent as a local process)",
      async () => {
        const r = new SandboxRunner({
          kubeconfig,
          namespaces: [namespace],
          env: { ...EXAMPLE_ENV, EXAMPLE_OUTBOX_DIR: outboxDir, ...otlp },
          logDir,
          log: pino({ name: "sandbox-runner", level: "info", timestamp: pino.stdTimeFunctions.isoTime }, pino.destination({ dest: join(dir, "runner.log"), sync: true })),
        });
        undo.push("the sandbox runner and its agents", () => r.stop());
        await r.start();
        return r;
      },
      () => dim(`agent logs in ${logDir}`),
    );
    const op = operator;
    return {
      kubeconfig,
      client,
      operatorUrl: async () => op.baseUrl,
      operatorFetch: (path, headers = {}) => fetch(`${op.baseUrl}${path}`, { headers }),
      metricsHint: `curl -s ${op.baseUrl}/metrics | grep ^watchdog_`,
      operatorLog,
      outboxDir,
      sandbox: {},
      async sandboxLog(pod) {
        try {
          return readFileSync(join(logDir, `${namespace}_${pod}.log`), "utf8");
        } catch {
          return undefined;
        }
      },
      sandboxLogs: logDir,
      hints: [`DATABASE_URL=${databaseUrl} ${process.execPath} operator/ledger/cli.ts history ${namespace} deploy-v2`],
      ...(jaeger ? { jaeger } : {}),
      kill() {
        for (const p of runner?.running() ?? []) {
          try {
            process.kill(-p.pid, "SIGKILL");
          } catch {
            // gone
          }
        }
        operator?.child.kill("SIGKILL");
      },
      teardown: (quietly) => undo.run(quietly),
    };
  } catch (err) {
    await undo.run(silently);
    throw err;
  }
}

/** The real node: sandbox pods and the operator's pods run from the project image. */
export async function realNodeWorld(options: WorldOptions): Promise<DemoWorld> {
  const { namespace, dir, step } = options;
  const state = realNodeStateRoot();
  const undo = new Undo();
  try {
    const cluster = await controlPlaneUp(
      step,
      undo,
      "local control plane with a real node: kubelet, containerd and runc",
      ["up", "--kubelet"],
      { AGENT_WATCHDOG_STATE: state },
    );
    const node = await step("the project image, built from the Dockerfile with no registry", () => realNodeUp(state), (n) => dim(n.image));
    const client = clientFor(node.kubeconfig);
    await step("AgentRun CRD", () => applyCrds(client));
    const databaseUrl = await postgresUp(step, undo);
    const hostAddress = await nodeExpose(state, Number(new URL(databaseUrl).port));

    const system = `${namespace}-system`;
    await step(`namespaces ${namespace} and ${system}, both enforcing restricted pod security`, () =>
      Promise.all([
        demoNamespace(client, namespace, options, undo, !cluster.started, RESTRICTED_NAMESPACE),
        demoNamespace(client, system, options, undo, !cluster.started, RESTRICTED_NAMESPACE),
      ]),
    );

    // Each attempt's pod has a filesystem of its own: the e-mail service is a server of this
    // machine, which the pods reach through the node.
    const outboxDir = join(dir, "outbox");
    const outboxPort = await freePort();
    const outboxUrl = `http://${hostAddress}:${outboxPort}`;
    await step(
      "outbox service (a fake e-mail service the sandboxes share)",
      async () => {
        const server = await serveOutbox(new Outbox(outboxDir), "127.0.0.1", outboxPort);
        undo.push("the outbox service", () => new Promise((resolve) => server.close(resolve)));
        await nodeExpose(state, outboxPort);
      },
      () => dim(`pods send to ${outboxUrl}`),
    );
    const operator = await step(
      "operator from the image, installed with the chart (two replicas, leader election, admission fencing)",
      async () => {
        const installed = await installOperator({
          node,
          client,
          release: "demo",
          namespace: system,
          watchNamespaces: [namespace],
          databaseUrl: databaseUrl.replace("127.0.0.1", hostAddress),
        });
        undo.push("the operator (helm uninstall)", () => installed.uninstall());
        return installed;
      },
      () => dim(`helm release demo in ${system}`),
    );
    return {
      kubeconfig: node.kubeconfig,
      client,
      operatorUrl: () => operator.baseUrl(),
      operatorFetch: (path, headers = {}) => operator.fetch(path, { headers }),
      // The metrics port speaks HTTPS with the chart's certificate: the API server's service
      // proxy reaches it with your own credentials.
      metricsHint: `kubectl get --raw /api/v1/namespaces/${system}/services/https:demo-agent-watchdog-metrics:metrics/proxy/metrics | grep ^watchdog_`,
      operatorLog: `kubectl logs -n ${system} -l app.kubernetes.io/name=agent-watchdog`,
      outboxDir,
      sandbox: { image: node.image, env: { ...EXAMPLE_ENV, EXAMPLE_OUTBOX_URL: outboxUrl } },
      async sandboxLog(pod) {
        try {
          return await client.request<string>("GET", `${paths.pod(namespace, pod)}/log`, { text: true });
        } catch {
          return undefined;
        }
      },
      sandboxLogs: `kubectl logs -n ${namespace} <pod>`,
      hints: [
        `kubectl get pods -n ${namespace} -o wide`,
        `kubectl get lease -n ${system}`,
        // The ledger's history through the API server, with nothing but the kubeconfig.
        `kubectl get --raw /apis/history.watchdog.dev/v1alpha1/namespaces/${namespace}/agentrunhistories/email-report`,
      ],
      kill() {
        // Nothing runs here but the outbox service, which ends with this process; the cluster's
        // pods are the next demo's to clean up.
      },
      teardown: (quietly) => undo.run(quietly),
    };
  } catch (err) {
    await undo.run(silently);
    throw err;
  }
}

async function deleteNamespace(client: KubeClient, namespace: string): Promise<void> {
  try {
    await client.delete(`/api/v1/namespaces/${namespace}`);
  } catch (err) {
    if (!isNotFound(err)) throw err;
  }
}

/** The name of the run's last sandbox pod (a finished run keeps naming it). */
export const lastPod = (run: Run): string => run.status?.podName ?? `${run.metadata.name}-${run.status?.attempt}`;
