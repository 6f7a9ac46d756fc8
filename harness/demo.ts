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
//   npm run demo -- --kubelet    the same in real pods on a real node, with the operator from the
//                                project image installed with the chart (needs root)
//   npm run demo -- --once       runs to the end without interaction; exit 0 only when every
//                                behaviour ended in its expected state (for tests and CI)
//   --namespace=NAME             where the runs go (default agent-watchdog-demo)
//   --timeout=SECONDS            how long the runs may take to settle (default 300)
//
// Ctrl-C at any point stops the operator, the runner and the agents, and stops the control plane
// and PostgreSQL only if this demo started them.
//
// The parts (scenario, driver, judge, summary, terminal view) are modules in harness/, which the
// end-to-end tests share.
import { mkdirSync, rmSync } from "node:fs";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { formatHistory } from "../operator/ledger/format.ts";
import { setTimeout as sleep } from "node:timers/promises";
import { runTraceId } from "../operator/watchdog/trace-context.ts";
import { driveUntilSettled, isSettled, type Run } from "./driver.ts";
import { renderTrace, type Jaeger } from "./jaeger.ts";
import { emailsByRun, judge, type JudgeContext } from "./judge.ts";
import { historyReaderToken, ledgerHistory } from "./operator.ts";
import { parseMetrics } from "./prometheus.ts";
import { APPROVAL_ANSWER, DEFAULT_NAMESPACE, DEMO_RUNS, applyRuns } from "./scenario.ts";
import { sdkWrites, summaryLines } from "./summary.ts";
import { LiveView, bold, dim, green, recentEvents, red, seconds, tty, yellow } from "./view.ts";
import { lastPod, localWorld, realNodeWorld, type DemoWorld, type Step } from "./worlds.ts";
import { stateRoot } from "./sandbox-runner.ts";

const USAGE = `usage: npm run demo -- [--kubelet] [--traces] [--once] [--namespace=NAME] [--timeout=SECONDS]

  --kubelet         run the sandboxes in real pods on a real node (kubelet, containerd, runc;
                    needs root) and the operator from the project image, installed with the
                    chart; the default runs them as local processes beside a kwok node
  --traces          start Jaeger (built from its pinned Go module) and have the operator and the
                    agents export one trace per run to it; prints one run's trace and the query
                    URL of each (with the local sandboxes only, not --kubelet)
  --once            run to the end without interaction; exit 0 only when every behaviour
                    ended in its expected state
  --namespace=NAME  where the runs go (default ${DEFAULT_NAMESPACE}); it is recreated
  --timeout=SECONDS how long the runs may take to settle (default 300)
`;

/** One run's trace as Jaeger holds it, and where to query each run's. */
async function showTrace(jaeger: Jaeger, runs: readonly Run[], behaviour: string): Promise<void> {
  const shown = runs.find((r) => r.metadata.name === DEMO_RUNS.find((d) => d.behaviour === behaviour)?.name);
  if (!shown?.metadata.uid) return;
  const traceId = runTraceId(shown.metadata.uid);
  // The last spans are exported within moments of the run's end.
  let spans = await jaeger.trace(traceId);
  for (let tries = 0; tries < 20 && !spans.some((s) => s.operationName.startsWith("agentrun ")); tries++) {
    await sleep(250);
    spans = await jaeger.trace(traceId);
  }
  process.stdout.write(`\n${bold(`The trace of ${shown.metadata.name}`)} ${dim(`(${behaviour}; GET ${jaeger.queryUrl}/api/traces/${traceId})`)}\n`);
  process.stdout.write(`${renderTrace(spans).split("\n").map((l) => `  ${l}`).join("\n")}\n`);
  process.stdout.write(dim(`  every run's: ${runs.map((r) => `${r.metadata.name} ${runTraceId(r.metadata.uid ?? "")}`).join(", ")}\n`));
}

async function main(argv: string[]): Promise<number> {
  const { values } = parseArgs({
    args: argv,
    options: {
      kubelet: { type: "boolean" },
      traces: { type: "boolean" },
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
  const kubelet = values.kubelet ?? false;
  const traces = values.traces ?? false;
  if (traces && kubelet) throw new Error("--traces runs with the local sandboxes only: leave out --kubelet");
  const namespace = values.namespace ?? DEFAULT_NAMESPACE;
  const timeoutS = Number(values.timeout ?? 300);
  if (!/^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/.test(namespace)) throw new Error(`--namespace=${namespace} is not a namespace name`);
  if (!(timeoutS > 0)) throw new Error(`--timeout=${values.timeout} must be a positive number of seconds`);

  const abort = new AbortController();
  let world: DemoWorld | undefined;
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
    world?.kill();
    process.exit(130);
  };
  process.on("SIGINT", onSignal);
  process.on("SIGTERM", onSignal);

  const demoDir = join(stateRoot(), "demo", namespace);
  const t0 = Date.now();
  const step: Step = async (what, work, detail) => {
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
    const where = kubelet ? "in real pods on a real node" : "beside a kwok node, as local processes";
    process.stdout.write(`${bold("agent-watchdog demo")}: eight agent runs, one per behaviour the watchdog handles, ${where}\n\n`);
    rmSync(demoDir, { recursive: true, force: true });
    mkdirSync(demoDir, { recursive: true });
    const options = { namespace, dir: demoDir, signal: abort.signal, step, traces };
    world = kubelet ? await realNodeWorld(options) : await localWorld(options);
    const kube = world.client;
    const sandbox = world.sandbox;
    await step(`${DEMO_RUNS.length} AgentRuns`, () => applyRuns(kube, namespace, DEMO_RUNS, sandbox));
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
      onApprove: (name) => view.note(`the demo approves ${name}: annotate watchdog.dev/approve="${APPROVAL_ANSWER}" with the pending request's watchdog.dev/approval-id`),
    });
    process.stdout.write("\n");

    // -- the summary
    const emails = await emailsByRun(world.outboxDir);
    const context: JudgeContext = { emailsSent: (name) => emails.get(name) ?? 0, approvedAfterRelease: (name) => approved.has(name) };
    const verdicts = DEMO_RUNS.map((demo) => judge(demo, runs.find((r) => r.metadata.name === demo.name), context));
    const operatorUrl = await world.operatorUrl();
    const samples = parseMetrics(await (await world.operatorFetch("/metrics")).text());
    const healthy = runs.find((r) => r.metadata.name === DEMO_RUNS.find((d) => d.behaviour === "healthy")?.name);
    const sdk = healthy ? sdkWrites(healthy, await world.sandboxLog(lastPod(healthy))) : undefined;
    for (const line of summaryLines(samples, runs, verdicts, emails, sdk)) process.stdout.write(`${line}\n`);

    const shown = DEMO_RUNS.find((r) => r.behaviour === "side-effect-then-crash");
    const shownRun = runs.find((r) => r.metadata.name === shown?.name);
    if (shown && shownRun) {
      process.stdout.write(`\n${bold(`The ledger's history of ${shown.name}`)} ${dim(`(${shown.behaviour}; GET ${operatorUrl}/history/${namespace}/${shown.name} with a token that may get the run)`)}\n`);
      const fetchFromOperator = world.operatorFetch.bind(world);
      const history = await ledgerHistory(fetchFromOperator, namespace, shownRun, await historyReaderToken(kube, namespace));
      const text = history ? formatHistory(history) : "  the ledger holds nothing for it yet\n";
      process.stdout.write(text.split("\n").map((l) => (l ? `  ${l}` : l)).join("\n"));
    }

    if (world.jaeger) await showTrace(world.jaeger, runs, "crash");

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
      process.stdout.write(dim(`  logs: operator ${world.operatorLog}, agents ${world.sandboxLogs}\n`));
    }

    if (!once) {
      process.stdout.write(
        [
          "",
          "Everything is still running, so you can look around:",
          `  export KUBECONFIG=${world.kubeconfig}`,
          `  kubectl get agentruns -n ${namespace}`,
          `  kubectl describe agentrun -n ${namespace} build-release`,
          ...world.hints.map((h) => `  ${h}`),
          `  ${world.metricsHint}`,
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
    if (world) await teardown(world);
    process.off("SIGINT", onSignal);
    process.off("SIGTERM", onSignal);
  }
  return exitCode;
}

async function teardown(world: DemoWorld): Promise<void> {
  process.stdout.write(`\n${dim("cleaning up")}\n`);
  await world.teardown(async (label, work) => {
    try {
      await work();
      process.stdout.write(`${dim(`  stopped ${label}`)}\n`);
    } catch (err) {
      process.stdout.write(`${yellow(`  could not stop ${label}: ${err instanceof Error ? err.message : String(err)}`)}\n`);
    }
  });
}

if (import.meta.main) {
  process.exitCode = await main(process.argv.slice(2)).catch((err: unknown) => {
    process.stderr.write(`demo: ${err instanceof Error ? err.message : String(err)}\n`);
    return 2;
  });
}
