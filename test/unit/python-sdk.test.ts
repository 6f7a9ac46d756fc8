// The Python SDK's own tests (unittest, standard library only, against a fake API server), so
// that they run with every other test.
import { spawnSync } from "node:child_process";
import { fileURLToPath } from "node:url";
import { expect, it } from "vitest";

const dir = fileURLToPath(new URL("../../operator/python", import.meta.url));

it("the Python SDK passes its unittest suite", { timeout: 300_000 }, () => {
  const result = spawnSync("python3", ["-m", "unittest", "discover", "-s", "tests"], { cwd: dir, encoding: "utf8", env: { ...process.env, PYTHONDONTWRITEBYTECODE: "1" } });
  expect(result.error).toBeUndefined();
  expect(result.status, result.stderr.slice(-4000)).toBe(0);
  expect(result.stderr).toMatch(/Ran \d+ tests/);
});
