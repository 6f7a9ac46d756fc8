// `npm run check-history` judges a history file offline exactly as the soak judged it: the self-test
// history's violations are each counted once, a clean history passes, and a file it cannot read is
// an error of its own, never a pass.
import { execFile } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { afterAll, describe, expect, it } from "vitest";
import { INVARIANTS } from "../../../measure/soak/analyse.ts";
import type { SoakRecord } from "../../../measure/soak/record.ts";
import { selfTestRecord } from "../../../measure/soak/self-test.ts";

const script = fileURLToPath(new URL("../../../measure/check-history.ts", import.meta.url));
const dir = mkdtempSync(join(tmpdir(), "check-history-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

function check(...args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  return new Promise((resolve) =>
    execFile(process.execPath, [script, ...args], (err, stdout, stderr) => resolve({ code: err ? Number(err.code ?? 1) : 0, stdout, stderr })),
  );
}

function write(name: string, history: SoakRecord): string {
  const path = join(dir, name);
  writeFileSync(path, JSON.stringify(history));
  return path;
}

const verdictOf = (stdout: string) => JSON.parse(stdout.trim().split("\n").at(-1) ?? "{}") as { violations: Record<string, number> };

describe("npm run check-history", () => {
  it("passes its self-test", async () => {
    const { code, stdout } = await check("--self-test");
    expect(stdout).toContain("self-test passed");
    expect(code).toBe(0);
  });

  it("finds each violation of the self-test's history once, prints the events, and fails", async () => {
    const { code, stdout } = await check(write("violations.json", selfTestRecord()));
    expect(verdictOf(stdout).violations).toEqual(Object.fromEntries(INVARIANTS.map((i) => [i, 1])));
    expect(stdout).toContain("misappliedAnswers misapplied");
    expect(stdout).toContain("sharedRuns shared");
    expect(code).toBe(1);
  });

  it("passes a history that broke nothing, given as the soak's directory", async () => {
    const history = selfTestRecord();
    history.runs = history.runs.filter((r) => r.name === "clean");
    history.pods = history.pods.filter((p) => p.run === "clean");
    history.containers = history.containers.filter((c) => c.run === "clean");
    history.attemptEnds = history.attemptEnds.filter((e) => e.runUid === "uid-clean");
    history.phases = [];
    history.emails = {};
    history.approvals = [];
    history.answers = [];
    history.operatorExits = history.operatorExits.filter((e) => e.bySoak);
    history.writes = history.writes?.filter((w) => w.name.startsWith("clean"));
    const soakDir = mkdtempSync(join(dir, "soak-"));
    write(join(soakDir.slice(dir.length + 1), "history.json"), history);
    const { code, stdout } = await check(soakDir);
    expect(verdictOf(stdout).violations).toEqual(Object.fromEntries(INVARIANTS.map((i) => [i, 0])));
    expect(code).toBe(0);
  });

  it("exits 2, not 0, for a file it cannot read", async () => {
    expect((await check(join(dir, "missing.json"))).code).toBe(2);
    writeFileSync(join(dir, "garbage.json"), "{not json");
    expect((await check(join(dir, "garbage.json"))).code).toBe(2);
  });
});
