// The five-minute chaos soak on the real node, as CI runs it: `npm run soak` with every fault on
// its schedule, judged by its independent observer. It passes only when no promise was broken and
// every run settled; the table and the JSON line are printed for the record.
import { spawn } from "node:child_process";
import { fileURLToPath } from "node:url";
import { expect, it } from "vitest";

const root = fileURLToPath(new URL("../..", import.meta.url));
const RUNS = process.env.SOAK_RUNS ?? "30";
const DURATION = process.env.SOAK_DURATION ?? "5m";

it(`a ${DURATION} soak of ${RUNS} runs on the real node breaks no promise`, async () => {
  const child = spawn(process.execPath, [`${root}hack/soak.ts`, `--runs=${RUNS}`, `--duration=${DURATION}`, "--node=kubelet"], { cwd: root, stdio: ["ignore", "pipe", "pipe"] });
  let stdout = "";
  let stderr = "";
  child.stdout.on("data", (c: Buffer) => (stdout += c.toString()));
  child.stderr.on("data", (c: Buffer) => (stderr += c.toString()));
  const code = await new Promise<number | null>((resolve) => child.once("close", resolve));
  console.log(stdout);
  if (code !== 0) console.error(stderr.slice(-8000));
  const json = stdout.trim().split("\n").at(-1) ?? "";
  const result = JSON.parse(json.startsWith("{") ? json : "{}") as { violations?: Record<string, number>; soak?: { settled?: boolean } };
  expect(result.soak?.settled, "every run settled").toBe(true);
  expect(Object.values(result.violations ?? { missing: 1 }).every((n) => n === 0), `no violations: ${JSON.stringify(result.violations)}`).toBe(true);
  expect(code).toBe(0);
}, 20 * 60_000);
