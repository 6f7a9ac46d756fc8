// The five-minute chaos soak on the real node, as CI runs it: `npm run soak` with every fault on
// its schedule, its history recorded by an independent observer and judged by the checker. It
// passes only when no promise was broken and every run settled, and when `npm run check-history`
// on the written history says the same offline; the table and the JSON line are printed.
import { execFile, spawn } from "node:child_process";
import { fileURLToPath } from "node:url";
import { expect, it } from "vitest";

const root = fileURLToPath(new URL("../..", import.meta.url));
const RUNS = process.env.SOAK_RUNS ?? "30";
const DURATION = process.env.SOAK_DURATION ?? "5m";

it(`a ${DURATION} soak of ${RUNS} runs on the real node breaks no promise`, async () => {
  const child = spawn(process.execPath, [`${root}measure/soak.ts`, `--runs=${RUNS}`, `--duration=${DURATION}`, "--node=kubelet"], { cwd: root, stdio: ["ignore", "pipe", "pipe"] });
  let stdout = "";
  let stderr = "";
  child.stdout.on("data", (c: Buffer) => (stdout += c.toString()));
  child.stderr.on("data", (c: Buffer) => (stderr += c.toString()));
  const code = await new Promise<number | null>((resolve) => child.once("close", resolve));
  console.log(stdout);
  if (code !== 0) console.error(stderr.slice(-8000));
  const json = stdout.trim().split("\n").at(-1) ?? "";
  const result = JSON.parse(json.startsWith("{") ? json : "{}") as { violations?: Record<string, number>; soak?: { settled?: boolean; history?: string } };
  expect(result.soak?.settled, "every run settled").toBe(true);
  expect(Object.values(result.violations ?? { missing: 1 }).every((n) => n === 0), `no violations: ${JSON.stringify(result.violations)}`).toBe(true);
  expect(code).toBe(0);
  // The verdict is the checker's: judged again offline from the file alone, it is the same.
  const offline = await new Promise<{ code: number; stdout: string }>((resolve) =>
    execFile(process.execPath, [`${root}measure/check-history.ts`, result.soak?.history ?? "missing"], { cwd: root }, (err, out) => resolve({ code: err ? Number(err.code ?? 1) : 0, stdout: out })),
  );
  const again = JSON.parse(offline.stdout.trim().split("\n").at(-1) ?? "{}") as { violations?: Record<string, number> };
  expect(again.violations, "check-history on the history file").toEqual(result.violations);
  expect(offline.code).toBe(0);
}, 20 * 60_000);
