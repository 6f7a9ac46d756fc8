import { fileURLToPath } from "node:url";
import { defineConfig } from "vitest/config";

const root = fileURLToPath(new URL("..", import.meta.url));

export default defineConfig({
  test: {
    root,
    projects: [
      {
        extends: true,
        test: {
          name: "unit",
          // projects run one after another, so timing-sensitive suites never share the machine
          sequence: { groupOrder: 0 },
          include: ["test/unit/**/*.test.ts"],
          // property tests run 1,000 cases per invariant
          testTimeout: 120_000,
        },
      },
      {
        extends: true,
        test: {
          // The hack/ scripts themselves and the checker of recorded histories (measure/); the
          // process bookkeeping's stress test loads both cores,
          // so nothing else runs beside it.
          name: "hack",
          sequence: { groupOrder: 1 },
          include: ["test/hack/**/*.test.ts"],
          testTimeout: 240_000,
          fileParallelism: false,
        },
      },
      {
        extends: true,
        test: {
          name: "ledger",
          sequence: { groupOrder: 2 },
          include: ["test/ledger/**/*.test.ts"],
          globalSetup: ["test/support/postgres-setup.ts"],
          testTimeout: 120_000,
          hookTimeout: 120_000,
          // the outage test stops and starts the one shared PostgreSQL server
          fileParallelism: false,
        },
      },
      {
        extends: true,
        test: {
          name: "integration",
          sequence: { groupOrder: 3 },
          include: ["test/integration/**/*.test.ts"],
          globalSetup: ["test/support/global-setup.ts", "test/support/postgres-setup.ts"],
          testTimeout: 120_000,
          hookTimeout: 180_000,
          // Each file starts its own operator processes; two at a time keeps a 2-core machine honest.
          maxWorkers: 2,
        },
      },
      {
        extends: true,
        test: {
          // The web console in a real browser (Debian's Chromium through playwright-core).
          name: "console",
          sequence: { groupOrder: 4 },
          include: ["test/console/**/*.test.ts"],
          globalSetup: ["test/support/global-setup.ts", "test/console/global-setup.ts"],
          testTimeout: 120_000,
          hookTimeout: 180_000,
          fileParallelism: false,
        },
      },
      {
        extends: true,
        test: {
          name: "chart",
          sequence: { groupOrder: 5 },
          include: ["test/chart/**/*.test.ts"],
          globalSetup: ["test/chart/global-setup.ts"],
          testTimeout: 300_000,
          hookTimeout: 300_000,
          fileParallelism: false,
        },
      },
      {
        extends: true,
        test: {
          name: "e2e",
          sequence: { groupOrder: 6 },
          include: ["test/e2e/**/*.test.ts"],
          globalSetup: ["test/e2e/global-setup.ts"],
          testTimeout: 300_000,
          hookTimeout: 300_000,
          fileParallelism: false,
        },
      },
      {
        extends: true,
        test: {
          // Real pods on a real kubelet node, in a cluster of its own (hack/control-plane.sh up
          // --kubelet): containers really run, and what runs is checked on the node itself.
          name: "node",
          sequence: { groupOrder: 7 },
          include: ["test/node/**/*.test.ts"],
          exclude: ["test/node/cleanup.test.ts"],
          globalSetup: ["test/node/global-setup.ts", "test/support/postgres-setup.ts"],
          testTimeout: 300_000,
          hookTimeout: 300_000,
          fileParallelism: false,
        },
      },
      {
        extends: true,
        test: {
          // Last, when nothing else needs the node: down must leave the machine as it found it.
          name: "node-cleanup",
          sequence: { groupOrder: 8 },
          include: ["test/node/cleanup.test.ts"],
          testTimeout: 300_000,
          hookTimeout: 300_000,
        },
      },
    ],
  },
});
