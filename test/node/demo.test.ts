// `npm run demo -- --kubelet --once` as a user runs it: every behaviour in real pods on the real
// node, the operator from the image, and the same summary as the default demo. The cluster and
// PostgreSQL are already up (global setup), so it must leave them running.
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

const root = fileURLToPath(new URL("../..", import.meta.url));

it("npm run demo -- --kubelet --once exits 0 with every behaviour as expected in real pods", async () => {
  const namespace = `node-demo-${randomBytes(3).toString("hex")}`;
  const child = spawn(process.execPath, [`${root}harness/demo.ts`, "--kubelet", "--once", `--namespace=${namespace}`, "--timeout=240"], {
    cwd: root,
    env: { ...process.env, NO_COLOR: "1" },
    stdio: ["ignore", "pipe", "pipe"],
  });
  let output = "";
  child.stdout.on("data", (chunk: Buffer) => (output += chunk.toString()));
  child.stderr.on("data", (chunk: Buffer) => (output += chunk.toString()));
  const code = await new Promise<number | null>((resolve) => child.once("close", (c) => resolve(c)));
  expect({ code, output: code === 0 ? "" : output }).toEqual({ code: 0, output: "" });
  rmSync(join(stateRoot(), "demo", namespace), { recursive: true, force: true });

  expect(output).toContain("in real pods on a real node");
  expect(output).toContain(`All ${DEMO_RUNS.length} behaviours ended as the watchdog's rules require.`);
  for (const run of DEMO_RUNS) expect(output).toMatch(new RegExp(`✓ ${run.name}\\s+${run.behaviour}\\s`));
  expect(output).toMatch(/e-mails in the outbox\s+1 /);
  expect(output).toMatch(/status writes by the healthy sandbox\s+\d+\s+summarise-docs in \d+s: \d+ heartbeat-only/);
  expect(output).toContain("The ledger's history of email-report");
  // Read from the operator over HTTPS, verified with the chart's CA: not an empty stand-in.
  expect(output).toMatch(/The ledger's history of email-report .*GET https:\/\//);
  expect(output).not.toContain("the ledger holds nothing for it yet");
  expect(output).toContain("stopped the operator (helm uninstall)");
  expect(output).not.toMatch(/stopped the control plane|stopped PostgreSQL/);
  const client = kube();
  await waitFor(`namespace ${namespace} to be deleted`, async () => {
    const ns = await client.get<any>(`/api/v1/namespaces/${namespace}`).catch(() => undefined);
    return ns === undefined || ns.metadata.deletionTimestamp !== undefined;
  });
});
