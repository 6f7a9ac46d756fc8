// The tests `npm run mutation` runs against each mutant of the core (operator/watchdog) and the
// executor: the unit tests that exercise them. Property tests and the fuzz run fewer cases here
// than in `npm test` (each mutant runs them again), enough to reach every policy's branches.
import { fileURLToPath } from "node:url";
import { defineConfig } from "vitest/config";

const root = fileURLToPath(new URL("..", import.meta.url));

export default defineConfig({
  test: {
    root,
    include: ["test/unit/watchdog/**/*.test.ts", "test/unit/controller/**/*.test.ts"],
    env: { PROPERTY_RUNS: process.env.PROPERTY_RUNS ?? "50", FUZZ_RUNS: process.env.FUZZ_RUNS ?? "500" },
    testTimeout: 120_000,
  },
});
