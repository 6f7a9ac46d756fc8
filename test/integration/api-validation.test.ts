// The CRD against the real API server: every sample is accepted, every invalid manifest is
// rejected by `kubectl apply --dry-run=server` with a message that names the field, and
// kubectl's discovery and explain show the API.
import { execFile } from "node:child_process";
import { readdirSync, readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { KubeClient } from "../../operator/kube/client.ts";
import { deleteNamespace, kube, kubeconfigPath, newNamespace } from "../support/cluster.ts";

const root = fileURLToPath(new URL("../..", import.meta.url));
const samples = `${root}test/manifests/samples/`;
const invalid = `${root}test/manifests/invalid/`;

let client: KubeClient;
let ns: string;

async function kubectl(...args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  try {
    const { stdout, stderr } = await promisify(execFile)("kubectl", args, { env: { ...process.env, KUBECONFIG: kubeconfigPath() } });
    return { code: 0, stdout, stderr };
  } catch (err) {
    const e = err as { code: number; stdout: string; stderr: string };
    return { code: e.code, stdout: e.stdout, stderr: e.stderr };
  }
}

beforeAll(async () => {
  client = kube();
  ns = await newNamespace(client, "validation");
});
afterAll(async () => deleteNamespace(client, ns));

describe("AgentRun validation at kubectl apply", () => {
  const sampleFiles = readdirSync(samples).filter((f) => f.endsWith(".yaml"));
  const invalidFiles = readdirSync(invalid).filter((f) => f.endsWith(".yaml"));

  it("has at least 20 invalid manifests and two samples", () => {
    expect(invalidFiles.length).toBeGreaterThanOrEqual(20);
    expect(sampleFiles).toEqual(expect.arrayContaining(["minimal.yaml", "full.yaml"]));
  });

  it.each(sampleFiles)("accepts sample %s", async (file) => {
    const result = await kubectl("apply", "--dry-run=server", "-n", ns, "-f", samples + file);
    expect(result.stderr).toBe("");
    expect(result.code).toBe(0);
  });

  it.each(invalidFiles)("rejects %s naming the field", async (file) => {
    const text = readFileSync(invalid + file, "utf8");
    const field = /^# expect-field: (\S+)$/m.exec(text)?.[1];
    expect(field, "each invalid manifest says which field its error must name").toBeDefined();
    const result = await kubectl("apply", "--dry-run=server", "-n", ns, "-f", invalid + file);
    expect(result.code).not.toBe(0);
    expect(result.stderr).toContain(field);
  });
});

describe("kubectl discovery", () => {
  it("lists agentruns with the short name ar", async () => {
    const result = await kubectl("api-resources", "--api-group=watchdog.dev");
    expect(result.stdout).toMatch(/agentruns\s+ar\s+watchdog\.dev\/v1alpha1\s+true\s+AgentRun/);
  });

  it("documents the watchdog fields in kubectl explain", async () => {
    const result = await kubectl("explain", "agentrun.spec.watchdog");
    for (const field of ["heartbeatTimeout", "maxRestarts", "backoff", "rateLimitBackoff", "maxConsecutiveToolFailures", "stall", "startTimeout", "agentContainer", "killGracePeriod", "unconfirmedAfter"]) {
      expect(result.stdout).toMatch(new RegExp(`^\\s+${field}\\s+<`, "m"));
    }
    expect(result.stdout).toContain("is hung");
    // What each new field means, as the API's own documentation.
    const explain = async (path: string) => (await kubectl("explain", path)).stdout.replace(/\s+/g, " ");
    expect(await explain("agentrun.spec.watchdog.startTimeout")).toContain("scheduling, image pull");
    expect(await explain("agentrun.spec.watchdog.agentContainer")).toContain("sidecars included, do not decide");
    expect(await explain("agentrun.spec.watchdog.killGracePeriod")).toContain("never force-deleted");
    expect(await explain("agentrun.spec.watchdog.unconfirmedAfter")).toContain("SandboxUnconfirmed");
    expect(await explain("agentrun.status.approval.id")).toContain("watchdog.dev/approval-id");
    expect(await explain("agentrun.status.podUID")).toContain("fences sandbox writes");
  });

  it("documents the run budget in kubectl explain", async () => {
    const result = await kubectl("explain", "agentrun.spec.budget");
    for (const field of ["tokens", "inputTokens", "outputTokens", "cost", "wallClock", "toolCalls", "warnAt", "prices"]) {
      expect(result.stdout).toMatch(new RegExp(`^\\s+${field}\\s+<`, "m"));
    }
    const explain = async (path: string) => (await kubectl("explain", path)).stdout.replace(/\s+/g, " ");
    expect(await explain("agentrun.spec.budget")).toContain("all attempts together");
    expect(await explain("agentrun.spec.budget.warnAt")).toContain("BudgetWarning");
    expect(await explain("agentrun.status.spent")).toContain("the sandbox cannot write it");
    expect(await explain("agentrun.status.heartbeat.usage")).toContain("Never goes down within an attempt");
  });

  it("shows the printer columns", async () => {
    await kubectl("apply", "-n", ns, "-f", samples + "minimal.yaml");
    const result = await kubectl("get", "ar", "-n", ns);
    expect(result.stdout.split("\n")[0]).toMatch(/NAME\s+PHASE\s+ATTEMPT\s+HEARTBEAT\s+REASON\s+AGE/);
  });
});
