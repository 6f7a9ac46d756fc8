// The run page's timeline (details.ts): the operator's Events about a run's budget reach it from
// the API server, and the stop is shown as bad news, as every Warning is.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { parse } from "../../../operator/cli/plugin/args.ts";
import { Context } from "../../../operator/cli/plugin/commands.ts";
import { eventItem } from "../../../operator/cli/plugin/timeline.ts";
import { runDetails, timelineEntry } from "../../../operator/console/details.ts";
import { paths } from "../../../operator/kube/client.ts";
import { T0, iso, run } from "../fixtures.ts";
import { stubApi, type StubApi } from "../stub-api.ts";

/** An Event as the operator's recorder writes it (controller/events.ts). */
function event(type: string, reason: string, note: string, at: number) {
  return {
    metadata: { name: `r.${at.toString(16)}`, namespace: "ns", creationTimestamp: iso(at) },
    eventTime: iso(at),
    type,
    reason,
    action: "Escalate",
    note,
    regarding: { apiVersion: "watchdog.dev/v1alpha1", kind: "AgentRun", name: "r", namespace: "ns", uid: "uid-r" },
  };
}

const EXHAUSTED = event(
  "Warning",
  "BudgetExhausted",
  "token budget exhausted: 100000 of 100000 tokens spent; raise spec.budget.tokens, then resume; the run needs a person (annotate watchdog.dev/resume to resume)",
  T0 + 60_000,
);
const WARNED = event("Warning", "BudgetWarning", "token budget 80% spent: 80000 of 100000 tokens spent", T0 + 30_000);

describe("a budget Event's timeline entry", () => {
  it("flags a BudgetExhausted stop as bad news, with its reason and note", () => {
    expect(timelineEntry(eventItem(EXHAUSTED)!)).toEqual({
      time: iso(T0 + 60_000),
      kind: "event",
      title: `Warning BudgetExhausted: ${EXHAUSTED.note}`,
      warning: true,
    });
  });

  it("flags a BudgetWarning too; a Normal Event is not flagged", () => {
    expect(timelineEntry(eventItem(WARNED)!)).toMatchObject({ title: `Warning BudgetWarning: ${WARNED.note}`, warning: true });
    expect(timelineEntry(eventItem(event("Normal", "SandboxRunning", "pod r-1 is running", T0))!)).not.toHaveProperty("warning");
  });
});

describe("runDetails", () => {
  let api: StubApi;
  beforeAll(() => {
    const stopped = run({
      status: {
        phase: "NeedsHumanIntervention",
        reason: "BudgetExhausted",
        attempt: 1,
        transitions: [{ phase: "NeedsHumanIntervention", from: "Planning", reason: "BudgetExhausted", message: "token budget exhausted", attempt: 1, time: iso(T0 + 60_000) }],
      },
    });
    api = stubApi({ [paths.run("ns", "r")]: stopped, [paths.events("ns")]: { items: [EXHAUSTED, WARNED] } });
  });
  afterAll(() => api.restore());

  it("brings the run's budget Events into its timeline, the stop flagged", async () => {
    const parsed = parse(["console", "--kubeconfig", api.kubeconfig], {});
    if (!("invocation" in parsed)) throw new Error("not an invocation");
    const ctx = new Context(parsed.invocation, {}, { out: () => undefined, err: () => undefined });
    const { timeline } = await runDetails(ctx, "ns", "r");
    expect(timeline.map((e) => [e.kind, e.title.split(":")[0], e.warning ?? false])).toEqual([
      ["event", "Warning BudgetWarning", true],
      ["phase", "Planning -> NeedsHumanIntervention  (attempt 1)  BudgetExhausted", true],
      ["event", "Warning BudgetExhausted", true],
    ]);
    // Asked for this run's Events only.
    expect(api.calls.find((c) => c.path === paths.events("ns"))?.query).toMatchObject({ fieldSelector: "regarding.kind=AgentRun,regarding.name=r,regarding.uid=uid-r" });
  });
});
