// The console suite's setup: the pages built as the package builds them (npm run build:console),
// once per test run. The control plane comes from the integration suite's setup.
import { consolePages } from "../support/setup-steps.ts";

export default async function setup(): Promise<void> {
  await consolePages();
}
