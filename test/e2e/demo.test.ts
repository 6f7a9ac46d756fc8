// `npm run demo -- --once` itself, as a user (or CI) runs it: it must reach its end and exit 0
// only because every behaviour ended as expected. It gets a namespace of its own; the control
// plane and PostgreSQL are already up (global setup), so it must leave them running.
import { spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import { rmSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { expect, it } from "vitest";
import { DEMO_RUNS } from "../../harness/scenario.ts";
import { stateRoot } from "../../harness/sandbox-runner.ts";
import { kube } from "../support/cluster.ts";
import { waitFor } from "../support/wait.ts";
import { NODE } from "./support.ts";

const root = fileURLToPath(new URL("../..", import.meta.url));

it("npm run demo -- --once exits 0 with every behaviour as expected, and cleans up after itself", async () => {
  const namespace = `e2e-demo-${randomBytes(3).toString("hex")}`;
  const child = spawn(NODE, [`${root}harness/demo.ts`, "--once", `--namespace=${namespace}`, "--timeout=240"], {
    cwd: root,
    env: { ...process.env, NO_COLOR: "1" },
    stdio: ["ignore", "pipe", "pipe"],
  });
  let output = "";
  child.stdout.on("data", (chunk: Buffer) => (output += chunk.toString()));
  child.stderr.on("data", (chunk: Buffer) => (output += chunk.toString()));
  const code = await new Promise<number | null>((resolve) => child.once("close", (c) => resolve(c)));
  expect({ code, output: code === 0 ? "" : output }).toEqual({ code: 0, output: "" });
  // Its logs are only worth keeping when it failed.
  rmSync(join(stateRoot(), "demo", namespace), { recursive: true, force: true });

  expect(output).toContain(`All ${DEMO_RUNS.length} behaviours ended as the watchdog's rules require.`);
  for (const run of DEMO_RUNS) expect(output).toMatch(new RegExp(`✓ ${run.name}\\s+${run.behaviour}\\s`));
  expect(output).toMatch(/e-mails in the outbox\s+1 /);
  // The SDK's cost for a healthy run: its writes and, of those, the throttled heartbeat-only ones.
  expect(output).toMatch(/status writes by the healthy sandbox\s+\d+\s+summarise-docs in \d+s: \d+ heartbeat-only \([\d.]+\/min; at most one per 15s\)/);
  expect(output).toContain("The ledger's history of email-report");
  // Not started by the demo, so not stopped by it either.
  expect(output).toContain("already running; it stays up afterwards");
  expect(output).not.toMatch(/stopped (the control plane|PostgreSQL)/);
  // Its runs go with the namespace it made.
  const client = kube();
  await waitFor(`namespace ${namespace} to be deleted`, async () => {
    const ns = await client.get<any>(`/api/v1/namespaces/${namespace}`).catch(() => undefined);
    return ns === undefined || ns.metadata.deletionTimestamp !== undefined;
  });
});
