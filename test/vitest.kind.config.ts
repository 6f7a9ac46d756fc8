// The end-to-end suite for a real cluster with the chart installed (hack/kind-e2e.sh): the
// operator runs in the cluster and the example agent runs in real pods from the image. It needs
// Docker and kind, so it is not part of npm test; hack/kind-e2e.sh runs it.
import { fileURLToPath } from "node:url";
import { defineConfig } from "vitest/config";

export default defineConfig({
  test: {
    root: fileURLToPath(new URL("..", import.meta.url)),
    include: ["test/kind/**/*.test.ts"],
    testTimeout: 900_000,
    hookTimeout: 300_000,
    fileParallelism: false,
  },
});
