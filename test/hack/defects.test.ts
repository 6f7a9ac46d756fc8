// The switch that re-introduces fixed defects (operator/defects.ts) really re-introduces them: with
// each defect on, the regression test that BUGS.md names for it fails, and with none on it
// passes (the rest of the suite runs it so). A switch that did nothing would make a soak with it
// prove nothing about the checker.
import { spawnSync } from "node:child_process";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";
import { DEFECTS, chosenDefect, REINTRODUCE_ENV, type Defect } from "../../operator/defects.ts";
import { parseOptions } from "../../operator/cli/options.ts";

const root = fileURLToPath(new URL("../..", import.meta.url));

/** Each defect's regression test, as BUGS.md gives it. */
const REGRESSIONS: Record<Defect, { file: string; name: string }> = {
  "sandbox-clock": { file: "test/unit/watchdog/guarantees.test.ts", name: "never kills a heartbeating sandbox whose clock" },
  "unbound-answers": { file: "test/unit/watchdog/guarantees.test.ts", name: "refuses and removes an answer given while nothing is pending" },
  "resurrected-pod": { file: "test/unit/controller/cache.test.ts", name: "never brings back a pod" },
  "late-naming": { file: "test/unit/watchdog/hostile.test.ts", name: "write that named it came late" },
};

function regression(defect: Defect) {
  const { file, name } = REGRESSIONS[defect];
  const vitest = spawnSync(process.execPath, [`${root}node_modules/vitest/vitest.mjs`, "run", "--config", "test/vitest.config.ts", "--project", "unit", file, "-t", name], {
    cwd: root,
    encoding: "utf8",
    env: { ...process.env, [REINTRODUCE_ENV]: defect, PROPERTY_RUNS: "20", FUZZ_RUNS: "50" },
    timeout: 240_000,
  });
  return { code: vitest.status, output: `${vitest.stdout}${vitest.stderr}` };
}

describe("re-introducing a fixed defect", () => {
  it("has a regression test for each defect the switch knows", () => {
    expect(Object.keys(REGRESSIONS).sort()).toEqual(Object.keys(DEFECTS).sort());
  });

  it.each(Object.keys(DEFECTS) as Defect[])("%s makes its regression test fail", (defect) => {
    const { code, output } = regression(defect);
    expect(output, "the regression test ran").toMatch(/Tests\s.*\d+ failed/);
    expect(code, output.slice(-3000)).toBe(1);
  }, 300_000);

  it("refuses a name it does not know, at the operator's start, naming the known ones", () => {
    expect(chosenDefect({ [REINTRODUCE_ENV]: "sandbox-clok" }).error).toContain("known: sandbox-clock, unbound-answers");
    expect(() => parseOptions([], { [REINTRODUCE_ENV]: "sandbox-clok" })).toThrow(/AGENT_WATCHDOG_REINTRODUCE="sandbox-clok" names no defect/);
    expect(chosenDefect({ [REINTRODUCE_ENV]: "" })).toEqual({});
    expect(chosenDefect({ [REINTRODUCE_ENV]: "late-naming" })).toEqual({ defect: "late-naming" });
  });
});
