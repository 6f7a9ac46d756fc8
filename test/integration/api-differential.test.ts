// zod and the CRD accept exactly the same values (rule 12). The operator and the SDK parse with
// zod, the API server admits with the generated CRD; a value one takes and the other refuses is
// either a run the operator cannot read or a write the API server refuses forever. Generated specs
// go through `kubectl apply --server-side --dry-run=server`, generated statuses through the same on
// the status subresource of runs that exist, and each verdict is compared with zod's.
import { execFile } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { AgentRunSpec, AgentRunStatus, API_VERSION, KIND } from "../../operator/api/agentrun.ts";
import { paths, type KubeClient } from "../../operator/kube/client.ts";
import { durationValue, sample, specValue, statusValue, textValue, timestampValue } from "../support/api-values.ts";
import { createRun, deleteNamespace, kube, kubeconfigPath, newNamespace, runManifest } from "../support/cluster.ts";

type Json = Record<string, unknown>;

/** Objects per kubectl call. */
const BATCH = 200;
const SEED = Number(process.env.DIFFERENTIAL_SEED ?? 20261201);

let client: KubeClient;
let ns: string;
const scratch = mkdtempSync(join(tmpdir(), "differential-"));

beforeAll(async () => {
  client = kube();
  ns = await newNamespace(client, "differential");
  // The runs whose status subresource the generated statuses are applied to (dry run: they stay as they are).
  for (let i = 0; i < BATCH; i += 20) {
    await Promise.all(Array.from({ length: 20 }, (_, j) => createRun(client, ns, runManifest(`t-${i + j}`))));
  }
});
afterAll(async () => {
  rmSync(scratch, { recursive: true, force: true });
  await deleteNamespace(client, ns);
});

interface Verdict {
  accepted: Set<string>;
  stderr: string;
}

/** Server-side dry-run apply of `objects`; the names the API server accepted. */
async function applyDryRun(objects: Json[], file: string, extra: string[]): Promise<Verdict> {
  // A stream of JSON objects, not a List: kubectl validates a List on the client, whole or not at all.
  writeFileSync(file, objects.map((o) => JSON.stringify(o)).join("\n"));
  const args = ["apply", "--server-side", "--dry-run=server", "--force-conflicts", "--field-manager=differential", "-n", ns, "-f", file, ...extra];
  const { stdout, stderr } = await promisify(execFile)("kubectl", args, { env: { ...process.env, KUBECONFIG: kubeconfigPath() }, maxBuffer: 64 << 20 }).catch(
    // kubectl exits 1 when any object was refused, and reports each of the others.
    (err: { stdout?: string; stderr?: string }) => ({ stdout: err.stdout ?? "", stderr: err.stderr ?? "" }),
  );
  const accepted = new Set([...stdout.matchAll(/^agentrun\.watchdog\.dev\/(\S+) serverside-applied/gm)].map((m) => m[1] as string));
  return { accepted, stderr };
}

interface Mismatch {
  value: unknown;
  zod: string;
  server: string;
}

function describeMismatch(name: string, zodOk: boolean, issues: string, verdict: Verdict, value: unknown): Mismatch {
  const said = verdict.stderr.split("\n").filter((line) => line.includes(`"${name}"`)).join("\n").slice(0, 600);
  return {
    value: JSON.stringify(value).slice(0, 600),
    zod: zodOk ? "accepted" : `refused: ${issues.slice(0, 400)}`,
    server: verdict.accepted.has(name) ? "accepted" : `refused: ${said || "(no message naming it)"}`,
  };
}

async function compare(kind: "spec" | "status", values: Json[]): Promise<{ accepted: number; refused: number; mismatches: Mismatch[] }> {
  const schema = kind === "spec" ? AgentRunSpec : AgentRunStatus;
  const mismatches: Mismatch[] = [];
  let accepted = 0;
  for (let start = 0; start < values.length; start += BATCH) {
    const batch = values.slice(start, start + BATCH);
    const names = batch.map((_, i) => (kind === "spec" ? `s-${start + i}` : `t-${i}`));
    const objects = batch.map((value, i) => ({ apiVersion: API_VERSION, kind: KIND, metadata: { name: names[i] }, [kind]: value }));
    const verdict = await applyDryRun(objects, join(scratch, `${kind}-${start}.json`), kind === "status" ? ["--subresource=status"] : []);
    batch.forEach((value, i) => {
      const name = names[i] as string;
      const parsed = schema.safeParse(value);
      const issues = parsed.success ? "" : parsed.error.issues.map((issue) => `${issue.path.join(".")}: ${issue.message}`).join("; ");
      if (parsed.success) accepted++;
      if (parsed.success !== verdict.accepted.has(name)) mismatches.push(describeMismatch(name, parsed.success, issues, verdict, value));
    });
  }
  return { accepted, refused: values.length - accepted, mismatches };
}

interface Case {
  title: string;
  kind: "spec" | "status";
  values: Json[];
  /** Both verdicts must each be at least this common, or the case tests little. */
  balance: number;
}

const cases: Case[] = [
  { title: "whole specs", kind: "spec", values: sample(specValue, 600, SEED), balance: 0.2 },
  { title: "whole statuses", kind: "status", values: sample(statusValue, 600, SEED + 1), balance: 0.2 },
  { title: "timestamps", kind: "status", values: sample(timestampValue, 400, SEED + 2), balance: 0.1 },
  { title: "durations", kind: "spec", values: sample(durationValue, 400, SEED + 3), balance: 0.1 },
  { title: "bounded strings", kind: "status", values: sample(textValue, 400, SEED + 4), balance: 0.1 },
];

describe("zod and the CRD agree", () => {
  it("on at least 1,000 values in all", () => {
    expect(cases.reduce((n, c) => n + c.values.length, 0)).toBeGreaterThanOrEqual(1000);
  });

  it.each(cases)("on $values.length generated $title", async ({ title, kind, values, balance }) => {
    const result = await compare(kind, values);
    console.log(`${title}: ${result.accepted} accepted and ${result.refused} refused by zod, ${result.mismatches.length} disagreements with the API server (seed ${SEED})`);
    expect(result.mismatches).toEqual([]);
    expect(Math.min(result.accepted, result.refused)).toBeGreaterThan(values.length * balance);
  }, 300_000);

  it("left the runs it applied statuses to as they were (dry run)", async () => {
    const list = await client.get<{ items: Json[] }>(paths.runs(ns));
    expect(list.items.filter((run) => (run.status as Json | undefined)?.heartbeat !== undefined)).toEqual([]);
  });
});
