// `npm run demo`: the watchdog at work on a local cluster, from nothing, in two or three minutes.
//
// It starts what is not already running (the control plane with a kwok node, PostgreSQL for the
// ledger), installs the CRD, starts the operator and the local sandbox runner (which plays the
// kubelet for sandbox pods and runs the example agent as local processes), and applies one
// AgentRun per example behaviour with short watchdog timings. A live view shows the runs until
// every one has reached its final state; the demo approves the run that asks for approval. It ends
// with what the watchdog did (from the operator's metrics and the ledger) and whether each
// behaviour ended as the watchdog's rules say it must.
//
//   npm run demo                 live view, summary, then waits: Ctrl-C tears down what it started
//   npm run demo -- --once       runs to the end without interaction; exit 0 only when every
//                                behaviour ended in its expected state (for tests and CI)
//   --namespace=NAME             where the runs go (default agent-watchdog-demo)
//   --timeout=SECONDS            how long the runs may take to settle (default 300)
//
// Ctrl-C at any point stops the operator, the runner and the agents, and stops the control plane
// and PostgreSQL only if this demo started them.
//
// The parts (scenario, driver, judge, summary, terminal view) are modules in hack/demo/, which the
// end-to-end tests share.
import { mkdirSync, rmSync } from "node:fs";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { pino } from "pino";
import { isNotFound, type KubeClient } from "../operator/kube/client.ts";
import { formatHistory } from "../operator/ledger/format.ts";
import { applyCrds, clientFor, exported, freshNamespace, runScript, scriptOk } from "./demo/cluster.ts";
import { driveUntilSettled, isSettled } from "./demo/driver.ts";
import { emailsByRun, judge, type JudgeContext } from "./demo/judge.ts";
import { ledgerHistory, startOperator, type OperatorHandle } from "./demo/operator.ts";
import { parseMetrics } from "./demo/prometheus.ts";
import { APPROVAL_ANSWER, DEFAULT_NAMESPACE, DEMO_RUNS, EXAMPLE_ENV, applyRuns } from "./demo/scenario.ts";
import { sdkWrites, summaryLines } from "./demo/summary.ts";
import { LiveView, bold, dim, green, recentEvents, red, seconds, tty, yellow } from "./demo/view.ts";
import { SandboxRunner, stateRoot } from "./sandbox-runner.ts";

const USAGE = `usage: npm run demo -- [--once] [--namespace=NAME] [--timeout=SECONDS]

  --once            run to the end without interaction; exit 0 only when every behaviour
                    ended in its expected state
  --namespace=NAME  where the runs go (default ${DEFAULT_NAMESPACE}); it is recreated
  --timeout=SECONDS how long the runs may take to settle (default 300)
`;

interface Started {
  /** The demo started the control plane from nothing, so it takes it down again. */
  controlPlane: boolean;
  /** What undoes the demo's \`hack/postgres.sh up\`: down (it created the server), stop (it started a stopped one). */
  postgres?: "down" | "stop";
}

async function main(argv: string[]): Promise<number> {
  const { values } = parseArgs({
    args: argv,
    options: {
      once: { type: "boolean" },
      namespace: { type: "string" },
      timeout: { type: "string" },
      help: { type: "boolean", short: "h" },
    },
  });
  if (values.help) {
    process.stdout.write(USAGE);
    return 0;
  }
  const once = values.once ?? false;
  const namespace = values.namespace ?? DEFAULT_NAMESPACE;
  const timeoutS = Number(values.timeout ?? 300);
  if (!/^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/.test(namespace)) throw new Error(`--namespace=${namespace} is not a namespace name`);
  if (!(timeoutS > 0)) throw new Error(`--timeout=${values.timeout} must be a positive number of seconds`);

  const abort = new AbortController();
  const started: Started = { controlPlane: false };
  let operator: OperatorHandle | undefined;
  let runner: SandboxRunner | undefined;
  let client: KubeClient | undefined;
  let namespaceCreated = false;
  let interruptedAt = 0;
  const onSignal = (signal: NodeJS.Signals) => {
    // npm passes the terminal's Ctrl-C on to its script, which then gets it twice at once: only a
    // later one is a second Ctrl-C.
    if (interruptedAt && Date.now() - interruptedAt < 1000) return;
    if (!interruptedAt) {
      interruptedAt = Date.now();
      process.stdout.write(`\n${yellow(`${signal}: stopping the demo and cleaning up (again to stop at once)`)}\n`);
      abort.abort(new Error(signal));
      return;
    }
    // A second Ctrl-C: nothing is waited for, but no process of ours is left behind.
    for (const p of runner?.running() ?? []) {
      try {
        process.kill(-p.pid, "SIGKILL");
      } catch {
        // gone
      }
    }
    operator?.child.kill("SIGKILL");
    process.exit(130);
  };
  process.on("SIGINT", onSignal);
  process.on("SIGTERM", onSignal);

  const demoDir = join(stateRoot(), "demo", namespace);
  const outboxDir = join(demoDir, "outbox");
  const t0 = Date.now();
  const step = async <T>(what: string, work: () => Promise<T>, detail?: (value: T) => string): Promise<T> => {
    abort.signal.throwIfAborted();
    const at = Date.now();
    process.stdout.write(`${dim("→")} ${what}\n`);
    const value = await work();
    process.stdout.write(`${green("✓")} ${what} ${dim(`(${seconds(Date.now() - at)})`)}${detail ? `  ${detail(value)}` : ""}\n`);
    return value;
  };

  let exitCode = 1;
  let waitingForTheEnd = false;
  try {
    process.stdout.write(`${bold("agent-watchdog demo")}: eight agent runs, one per behaviour the watchdog handles\n\n`);
    rmSync(demoDir, { recursive: true, force: true });
    mkdirSync(join(demoDir, "sandboxes"), { recursive: true });

    const kubeconfig = await step(
      "local control plane with a kwok node (the first run builds it from pinned Go modules)",
      async () => {
        const before = await runScript("control-plane.sh", ["status"], { quiet: true });
        // Only a machine with no cluster state at all gets a cluster that the demo then removes.
        started.controlPlane = before.code !== 0 && before.stdout.includes("no state");
        const out = await scriptOk("control-plane.sh", ["up", "--nodes"]);
        const path = exported(out, "KUBECONFIG");
        if (!path) throw new Error("hack/control-plane.sh up printed no KUBECONFIG");
        return path;
      },
      () => (started.controlPlane ? "started" : "already running; it stays up afterwards"),
    );
    client = clientFor(kubeconfig);
    const kube = client;
    await step("AgentRun CRD", () => applyCrds(kube));
    const databaseUrl = await step(
      "PostgreSQL for the ledger",
      async () => {
        const before = await runScript("postgres.sh", ["status"], { quiet: true });
        if (before.code !== 0) started.postgres = before.stdout.includes("stopped") ? "stop" : "down";
        const url = exported(await scriptOk("postgres.sh", ["up"]), "DATABASE_URL");
        if (!url) throw new Error("hack/postgres.sh up printed no DATABASE_URL");
        return url;
      },
      () => (started.postgres ? "started" : "already running; it stays up afterwards"),
    );
    await step(`namespace ${namespace}`, async () => {
      namespaceCreated = true;
      await freshNamespace(kube, namespace, abort.signal);
    });
    operator = await step(
      "operator",
      () => startOperator({ kubeconfig, namespace, databaseUrl, logFile: join(demoDir, "operator.log"), signal: abort.signal }),
      (op) => dim(`metrics ${op.metricsUrl}, log ${op.logFile}`),
    );
    runner = await step(
      "sandbox runner (plays the kubelet: runs each sandbox pod's agent as a local process)",
      async () => {
        const r = new SandboxRunner({
          kubeconfig,
          namespaces: [namespace],
          env: { ...EXAMPLE_ENV, EXAMPLE_OUTBOX_DIR: outboxDir },
          logDir: join(demoDir, "sandboxes"),
          log: pino({ name: "sandbox-runner", level: "info", timestamp: pino.stdTimeFunctions.isoTime }, pino.destination({ dest: join(demoDir, "runner.log"), sync: true })),
        });
        await r.start();
        return r;
      },
      () => dim(`agent logs in ${join(demoDir, "sandboxes")}`),
    );
    await step(`${DEMO_RUNS.length} AgentRuns`, () => applyRuns(kube, namespace));
    process.stdout.write(`  ${dim(`ready in ${seconds(Date.now() - t0)}; watching the runs`)}\n\n`);

    // -- the live view
    const view = new LiveView(namespace, DEMO_RUNS);
    let eventsAt = 0;
    const { runs, settled, approved } = await driveUntilSettled({
      client: kube,
      namespace,
      deadline: Date.now() + timeoutS * 1000,
      signal: abort.signal,
      intervalMs: 1000,
      approveAfterMs: 3000,
      onTick: (current) => {
        if (tty && Date.now() - eventsAt >= 1000) {
          eventsAt = Date.now();
          recentEvents(kube, namespace).then((e) => view.setEvents(e), () => {});
        }
        view.update(current);
      },
      onApprove: (name) => view.note(`the demo approves ${name}: annotate watchdog.dev/approve="${APPROVAL_ANSWER}"`),
    });
    process.stdout.write("\n");

    // -- the summary
    const emails = await emailsByRun(outboxDir);
    const context: JudgeContext = { emailsSent: (name) => emails.get(name) ?? 0, approvedAfterRelease: (name) => approved.has(name) };
    const verdicts = DEMO_RUNS.map((demo) => judge(demo, runs.find((r) => r.metadata.name === demo.name), context));
    const samples = parseMetrics(await (await fetch(operator.metricsUrl)).text());
    const healthy = runs.find((r) => r.metadata.name === DEMO_RUNS.find((d) => d.behaviour === "healthy")?.name);
    const sdk = sdkWrites(join(demoDir, "sandboxes"), namespace, healthy);
    for (const line of summaryLines(samples, runs, verdicts, emails, sdk)) process.stdout.write(`${line}\n`);

    const shown = DEMO_RUNS.find((r) => r.behaviour === "side-effect-then-crash");
    const shownRun = runs.find((r) => r.metadata.name === shown?.name);
    if (shown && shownRun) {
      process.stdout.write(`\n${bold(`The ledger's history of ${shown.name}`)} ${dim(`(${shown.behaviour}; GET ${operator.baseUrl}/history/${namespace}/${shown.name})`)}\n`);
      const history = await ledgerHistory(operator.baseUrl, shownRun);
      const text = history ? formatHistory(history) : "  the ledger holds nothing for it yet\n";
      process.stdout.write(text.split("\n").map((l) => (l ? `  ${l}` : l)).join("\n"));
    }

    const failed = verdicts.filter((v) => !v.ok);
    process.stdout.write("\n");
    if (!settled) {
      const open = runs.filter((r) => !isSettled(r)).map((r) => `${r.metadata.name} (${r.status?.phase ?? "no phase"})`);
      process.stdout.write(`${red(`Not every run settled within ${timeoutS}s:`)} ${open.join(", ")}\n`);
    }
    if (failed.length === 0 && settled) {
      process.stdout.write(`${green(`All ${verdicts.length} behaviours ended as the watchdog's rules require.`)} ${dim(`(${seconds(Date.now() - t0)} in all)`)}\n`);
      exitCode = 0;
    } else {
      process.stdout.write(`${red(`${failed.length} of ${verdicts.length} behaviours did not end as expected:`)} ${failed.map((v) => v.name).join(", ")}\n`);
      process.stdout.write(dim(`  logs: operator ${operator.logFile}, agents ${join(demoDir, "sandboxes")}\n`));
    }

    if (!once) {
      process.stdout.write(
        [
          "",
          "Everything is still running, so you can look around:",
          `  export KUBECONFIG=${kubeconfig}`,
          `  kubectl get agentruns -n ${namespace}`,
          `  kubectl describe agentrun -n ${namespace} build-release`,
          `  DATABASE_URL=${databaseUrl} ${process.execPath} operator/ledger/cli.ts history ${namespace} deploy-v2`,
          `  curl -s ${operator.metricsUrl} | grep ^watchdog_`,
          "",
          bold("Press Ctrl-C to stop the demo and clean up."),
          "",
        ].join("\n"),
      );
      // Asked for: a Ctrl-C here is the normal end, and the exit status stays the verdict.
      waitingForTheEnd = !abort.signal.aborted;
      if (waitingForTheEnd) await new Promise<void>((resolve) => abort.signal.addEventListener("abort", () => resolve(), { once: true }));
    }
  } catch (err) {
    if (abort.signal.aborted) {
      exitCode = 130;
    } else {
      process.stdout.write(`\n${red("demo failed:")} ${err instanceof Error ? err.message : String(err)}\n`);
      exitCode = 1;
    }
  } finally {
    if (abort.signal.aborted && !waitingForTheEnd) exitCode = 130;
    await teardown({ runner, operator, client, namespace: namespaceCreated ? namespace : undefined, started });
    process.off("SIGINT", onSignal);
    process.off("SIGTERM", onSignal);
  }
  return exitCode;
}

async function teardown(what: { runner?: SandboxRunner; operator?: OperatorHandle; client?: KubeClient; namespace?: string; started: Started }): Promise<void> {
  const quietly = async (label: string, work: () => Promise<unknown>) => {
    try {
      await work();
      process.stdout.write(`${dim(`  stopped ${label}`)}\n`);
    } catch (err) {
      process.stdout.write(`${yellow(`  could not stop ${label}: ${err instanceof Error ? err.message : String(err)}`)}\n`);
    }
  };
  process.stdout.write(`\n${dim("cleaning up")}\n`);
  if (what.runner) await quietly("the sandbox runner and its agents", () => what.runner!.stop());
  if (what.operator) await quietly("the operator", () => what.operator!.stop());
  // On a cluster that stays up, the demo's runs go; on one that goes down, they go with it.
  if (what.namespace && what.client && !what.started.controlPlane) {
    await quietly(`namespace ${what.namespace} (deleting in the background)`, async () => {
      try {
        await what.client!.delete(`/api/v1/namespaces/${what.namespace}`);
      } catch (err) {
        if (!isNotFound(err)) throw err;
      }
    });
  }
  const postgres = what.started.postgres;
  if (postgres) await quietly("PostgreSQL", () => scriptOk("postgres.sh", [postgres]));
  if (what.started.controlPlane) await quietly("the control plane", () => scriptOk("control-plane.sh", ["down"]));
}

if (import.meta.main) {
  process.exitCode = await main(process.argv.slice(2)).catch((err: unknown) => {
    process.stderr.write(`demo: ${err instanceof Error ? err.message : String(err)}\n`);
    return 2;
  });
}
