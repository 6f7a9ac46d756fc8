// The console suite's setup: the pages built as the package builds them (npm run build:console),
// once per test run. The control plane comes from the integration suite's setup.
import { execFileSync } from "node:child_process";
import { fileURLToPath } from "node:url";

const root = fileURLToPath(new URL("../..", import.meta.url));

export default function setup(): void {
  const started = Date.now();
  execFileSync(process.execPath, [`${root}node_modules/vite/bin/vite.js`, "build", "--config", `${root}operator/console/ui/vite.config.ts`, "--logLevel", "warn"], {
    cwd: root,
    stdio: ["ignore", "inherit", "inherit"],
  });
  process.stderr.write(`console pages built in ${Date.now() - started} ms\n`);
}
