// Budgets enforced outside the agent, against a real API server and a real operator process: the
// sandbox reports its attempt's cumulative usage in heartbeats (played here as the SDK writes
// them), and the operator stops the run at the first report at or over a limit, on a wall-clock
// deadline with a silent sandbox, after its own SIGKILL, and keeps the totals across attempts.
import { describe, expect, it } from "vitest";
import { paths, type Json } from "../../operator/kube/client.ts";
import { condition, createRun, getRun, listEvents, runManifest } from "../support/cluster.ts";
import { cluster, deletionOf, phaseOf, podOf, running, untouched } from "../support/guarantees.ts";
import { startOperator } from "../support/operator-process.ts";
import { setPodPhase } from "../support/sandbox.ts";
import { holds, waitFor } from "../support/wait.ts";
import { SANDBOX_FIELD_MANAGER } from "../../operator/api/annotations.ts";

const S = 1000;
// Long enough that nothing but the budget stops these runs.
const patient = { heartbeatTimeout: "5m", startTimeout: "10m", backoff: { initial: "1s", factor: 1, max: "1s" }, stall: { enabled: false } };

describe("budgets", () => {
  const env = cluster("budget");

  /** One heartbeat reporting the attempt's cumulative usage, as the SDK writes it. */
  const report = (run: string, attempt: number, usage: Json) =>
    env.client.mergePatch(paths.runStatus(env.ns, run), { status: { heartbeat: { time: new Date().toISOString(), attempt, state: "Planning", usage } } }, { fieldManager: SANDBOX_FIELD_MANAGER });
  const stillRunning = async (run: string, pod: string) => {
    const r = await getRun(env.client, env.ns, run);
    return ["Starting", "Planning", "ExecutingTool"].includes(r.status?.phase) && (await untouched(env, pod));
  };
  const stopped = (run: string) => phaseOf(env, run, "NeedsHumanIntervention", 20_000);

  /** Reports 10,000 tokens more per heartbeat from `from` to `to` (in tens of thousands), each one seen by the operator before the next. */
  async function spend(run: string, pod: string, from: number, to: number) {
    for (let k = from; k <= to; k++) {
      await report(run, 1, { inputTokens: k * 10_000, outputTokens: 0 });
      await holds(`${run} running after ${k * 10_000} tokens`, () => stillRunning(run, pod), 700);
    }
  }

  it("stops a run at the first report at or over its token limit, not one before, with the figures", async () => {
    await createRun(env.client, env.ns, runManifest("tokens", patient, { budget: { tokens: 100_000 } }));
    const pod = (await running(env, "tokens")).metadata.name as string;
    await spend("tokens", pod, 1, 9);
    await report("tokens", 1, { inputTokens: 100_000, outputTokens: 0 });
    const run = await stopped("tokens");
    expect(condition(run, "NeedsHumanIntervention")).toMatchObject({ status: "True", reason: "BudgetExhausted" });
    expect(condition(run, "NeedsHumanIntervention").message).toMatch(/token budget exhausted: 100,?000 of 100,?000 tokens/);
    await deletionOf(env, pod);
    // What the attempt spent is the operator's record now: the report that crossed, no more.
    expect(run.status.spent).toMatchObject({ inputTokens: 100_000 });
    // Events are recorded after the status write that they tell of.
    const events = await waitFor("the BudgetExhausted Event", async () => {
      const all = await listEvents(env.client, env.ns);
      return all.some((e: any) => e.regarding?.name === "tokens" && e.reason === "BudgetExhausted") ? all : undefined;
    });
    expect(events.filter((e: any) => e.regarding?.name === "tokens" && e.reason === "BudgetWarning")).toHaveLength(1);
    expect(await env.operator.metrics()).toMatch(/^watchdog_budget_exhausted_total\{limit="tokens"\} 1$/m);
  });

  it("stops it at the same report when the operator was SIGKILLed at 90% and another took over", async () => {
    await createRun(env.client, env.ns, runManifest("failover", patient, { budget: { tokens: 100_000 } }));
    const pod = (await running(env, "failover")).metadata.name as string;
    await spend("failover", pod, 1, 9);
    await env.operator.stop("SIGKILL");
    env.operator = await startOperator(env.ns);
    await holds("failover running under the new operator at 90%", () => stillRunning("failover", pod), 1500);
    await report("failover", 1, { inputTokens: 100_000, outputTokens: 0 });
    const run = await stopped("failover");
    expect(condition(run, "NeedsHumanIntervention").reason).toBe("BudgetExhausted");
    await deletionOf(env, pod);
    // The warning was sent once, by the first operator; the second knew it from status.
    const warnings = (await listEvents(env.client, env.ns)).filter((e: any) => e.regarding?.name === "failover" && e.reason === "BudgetWarning");
    expect(warnings).toHaveLength(1);
  });

  it("fires a wall-clock limit within 2 s of its deadline on the server's clock, with a silent sandbox", async () => {
    await createRun(env.client, env.ns, runManifest("silent", patient, { budget: { wallClock: "6s" } }));
    const pod = (await running(env, "silent")).metadata.name as string;
    const started = await waitFor("the run's start time", async () => (await getRun(env.client, env.ns, "silent")).status?.startTime as string | undefined);
    const deadline = Date.parse(started) + 6 * S;
    const deleted = await deletionOf(env, pod, 30_000);
    // startTime is in whole seconds, rounded down: the true deadline is up to a second later.
    expect(deleted.lastAliveAt, "not killed before its deadline").toBeLessThanOrEqual(deadline + 1 * S);
    expect(deleted.seenAt, "killed within 2 s of its deadline").toBeLessThanOrEqual(deadline + 1 * S + 2 * S);
    const run = await stopped("silent");
    expect(condition(run, "NeedsHumanIntervention").reason).toBe("BudgetExhausted");
    expect(await env.operator.metrics()).toMatch(/^watchdog_budget_exhausted_total\{limit="wallClock"\} 1$/m);
  });

  it("counts ended attempts in status.spent, which no stale or lowered report can lower, and resumes with the totals kept once the limit is raised", async () => {
    await createRun(env.client, env.ns, runManifest("attempts", patient, { budget: { tokens: 100_000 } }));
    const first = (await running(env, "attempts")).metadata.name as string;
    await report("attempts", 1, { inputTokens: 40_000, outputTokens: 20_000 });
    // Within an attempt a report never goes down: the API server refuses it.
    await expect(report("attempts", 1, { inputTokens: 1, outputTokens: 0 })).rejects.toThrow(/may not go down/);
    // The sandbox crashes; its attempt's 60,000 are the operator's to keep.
    await setPodPhase(env.client, env.ns, first, "Failed", 1);
    const second = (await running(env, "attempts", 2)).metadata.name as string;
    await waitFor("attempt 1's usage folded into status.spent", async () => {
      const r = await getRun(env.client, env.ns, "attempts");
      return r.status?.spent?.inputTokens === 40_000 && r.status.spent.outputTokens === 20_000 ? r : undefined;
    });
    // A stale attempt's report counts for nothing beyond its own attempt.
    await report("attempts", 1, { inputTokens: 0, outputTokens: 0 }).catch(() => undefined);
    await report("attempts", 2, { inputTokens: 30_000, outputTokens: 0 });
    await holds("attempts running at 90,000 tokens", () => stillRunning("attempts", second), 1000);
    await report("attempts", 2, { inputTokens: 40_000, outputTokens: 0 });
    const exhausted = await stopped("attempts");
    expect(condition(exhausted, "NeedsHumanIntervention").reason).toBe("BudgetExhausted");
    expect(exhausted.status.spent).toMatchObject({ inputTokens: 80_000, outputTokens: 20_000 });
    await deletionOf(env, second);

    // Resumed without raising the limit: straight back to a person, no pod.
    await env.client.mergePatch(paths.run(env.ns, "attempts"), { metadata: { annotations: { "watchdog.dev/resume": "not-raised" } } });
    await holds("no third attempt while the limit is spent", async () => !(await env.client.get<any>(paths.pods(env.ns), { labelSelector: "watchdog.dev/run=attempts,watchdog.dev/attempt=3" })).items.length, 3000);
    // Raised and resumed: a new attempt, the totals kept.
    await env.client.mergePatch(paths.run(env.ns, "attempts"), { spec: { budget: { tokens: 200_000 } }, metadata: { annotations: { "watchdog.dev/resume": "raised" } } });
    await podOf(env, "attempts", 3);
    const resumed = await getRun(env.client, env.ns, "attempts");
    expect(resumed.status.spent).toMatchObject({ inputTokens: 80_000, outputTokens: 20_000 });
  });
});
