// Every way kubectl agentrun prints a run, fed a run whose sandbox (and whoever else may write it
// or its Events) filled every text field with terminal escapes, bidi overrides and forged lines:
// list, list -o wide, list -A, list -o json, describe, history (the ledger's and the cluster's),
// and an error the API server sends back. Nothing may reach the terminal with any power left,
// and no value may start a line of its own.
import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import { main } from "../../../operator/cli/plugin/main.ts";
import { main as ledgerMain } from "../../../operator/ledger/cli.ts";
import { formatHistory } from "../../../operator/ledger/format.ts";
import type { RunHistory } from "../../../operator/ledger/read.ts";
import { ApiError, KubeClient, paths } from "../../../operator/kube/client.ts";
import { resolveWatchdog } from "../../../operator/api/defaults.ts";
import { iso, run, T0 } from "../fixtures.ts";
import { stubApi, type StubApi } from "../stub-api.ts";
import { ACTIVE_BUT_LAYOUT, ALL_HOSTILE, FORGED, WITH_FORGED_LINE } from "./hostile.ts";

const evil = WITH_FORGED_LINE;

function hostileRun() {
  const r = run({
    spec: { goal: evil, watchdog: { stall: { message: evil } } },
    annotations: { "watchdog.dev/approve": evil, "watchdog.dev/approval-id": evil },
    status: {
      phase: "NeedsHumanIntervention",
      reason: evil,
      message: evil,
      attempt: 2,
      restarts: 1,
      podName: evil,
      watchdog: { ...resolveWatchdog({}), agentContainer: evil },
      heartbeat: { time: iso(T0), attempt: 2, state: evil, activity: { kind: evil, time: iso(T0) } },
      conditions: [{ type: evil, status: "True", reason: evil, message: evil, lastTransitionTime: iso(T0) }],
      lastFailure: { reason: evil, message: evil, time: iso(T0), attempt: 1, state: evil, tool: { name: evil, argsHash: evil, state: evil } },
      stall: { state: evil, nudges: 1, lastNudge: { time: iso(T0), message: evil } },
      approval: { id: evil, state: "Approved", requestedAt: iso(T0), answer: evil, decidedAt: iso(T0) },
      transitions: [{ phase: "NeedsHumanIntervention", from: "Planning", attempt: 2, time: iso(T0), reason: evil, message: evil }],
      toolCalls: [{ id: evil, name: evil, argsHash: evil, state: "Failed", attempt: 2, error: { message: evil, httpStatus: 500 }, startedAt: iso(T0), result: evil }],
    },
  });
  r.metadata.namespace = "team-a";
  return r;
}

const hostileEvent = { metadata: { name: "r.1" }, eventTime: iso(T0 + 1000), type: "Warning", reason: evil, note: evil };

let api: StubApi;

beforeEach(() => {
  const r = hostileRun();
  api = stubApi({
    [paths.runs("team-a")]: { items: [r] },
    [paths.runs()]: { items: [r] },
    [paths.run("team-a", "r")]: r,
    [paths.events("team-a")]: { items: [hostileEvent] },
  });
});
afterEach(() => api.restore());

async function kubectlAgentrun(...argv: string[]) {
  let out = "";
  let err = "";
  const code = await main([...argv, "--kubeconfig", api.kubeconfig], {}, { out: (t) => void (out += t), err: (t) => void (err += t) }, () => T0 + 60_000);
  return { code, out, err };
}

/** Printed text with no power left: nothing a terminal acts on, and no value on a line of its own. */
function expectInert(text: string) {
  expect(text).not.toMatch(ACTIVE_BUT_LAYOUT);
  for (const line of text.split("\n")) expect(line.startsWith(FORGED), line).toBe(false);
  // The values are there, named rather than obeyed.
  expect(text).toContain("\\u001b[2J");
}

describe("what kubectl agentrun prints of a hostile run", () => {
  const commands = [["list"], ["list", "-o", "wide"], ["list", "-A", "-o", "wide"], ["describe", "r"], ["history", "r"]];
  it.each(commands.map((argv) => [argv.join(" "), argv] as const))("%s is inert", async (_, argv) => {
    const { code, out, err } = await kubectlAgentrun(...argv, ...(argv.includes("-A") ? [] : ["-n", "team-a"]));
    expect(code).toBe(0);
    expectInert(out);
    expect(err).not.toMatch(ACTIVE_BUT_LAYOUT);
  });

  it("keeps the table's columns aligned: a cell is measured as it is printed", async () => {
    const { out } = await kubectlAgentrun("list", "-n", "team-a");
    const [header, row] = out.split("\n") as [string, string];
    // AGE is the last column: its header starts where the row's age does.
    expect(row.slice(header.indexOf("AGE"))).toMatch(/^60s$/);
  });

  it("prints -o json as valid JSON with every value as the API server holds it", async () => {
    const { out } = await kubectlAgentrun("list", "-n", "team-a", "-o", "json");
    expect(out).not.toMatch(ACTIVE_BUT_LAYOUT);
    const items = (JSON.parse(out) as { items: { status: { message: string } }[] }).items;
    expect(items[0]!.status.message).toBe(evil);
  });

  it("echoes an error from the API server on one inert line", async () => {
    vi.mocked(KubeClient.prototype.request).mockRejectedValueOnce(new ApiError("GET", "/x", 500, { reason: "InternalError", message: evil }));
    const { code, out, err } = await kubectlAgentrun("describe", "r", "-n", "team-a");
    expect(code).toBe(1);
    expect(out).toBe("");
    expect(err).toMatch(/^error: the Kubernetes API server answered 500 InternalError: .*\n$/);
    expect(err.split("\n")).toHaveLength(2);
    expectInert(err);
  });

  it("echoes a hostile command line inert", async () => {
    const { code, err } = await kubectlAgentrun("describe", ALL_HOSTILE);
    expect(code).toBe(2);
    expect(err).not.toMatch(ACTIVE_BUT_LAYOUT);
  });
});

describe("what the ledger's history prints of a hostile run", () => {
  const base = { runUid: "uid-r", namespace: "team-a", name: "r" };
  const history: RunHistory = {
    namespace: "team-a",
    name: "r",
    uids: ["uid-r"],
    transitions: [{ ...base, phase: "Failed", from: "Planning", attempt: 1, time: iso(T0), reason: evil, message: evil }],
    toolCalls: [
      {
        runUid: "uid-r",
        namespace: "team-a",
        runName: "r",
        id: evil,
        name: evil,
        argsHash: evil,
        idempotencyKey: evil,
        state: "Failed",
        attempt: 1,
        error: { message: evil },
        startedAt: iso(T0),
        firstSeen: iso(T0),
        lastSeen: iso(T0),
      },
    ],
    gaps: [{ ...base, kind: "tool_call", cause: "dropped", callId: evil, detectedAt: iso(T0) }],
  };

  it("is inert, each entry on its own line", () => {
    expectInert(formatHistory(history));
  });

  it("the ledger's own CLI echoes a hostile command line inert", async () => {
    let err = "";
    const code = await ledgerMain([ALL_HOSTILE], { DATABASE_URL: "postgres://u@127.0.0.1:1/db" }, { out: () => undefined, err: (t) => void (err += t) });
    expect(code).toBe(2);
    expect(err).toContain("unknown command");
    expect(err).not.toMatch(ACTIVE_BUT_LAYOUT);
  });
});
