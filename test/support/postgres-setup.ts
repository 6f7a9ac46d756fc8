// Ledger tests share one real PostgreSQL server per test run: this starts it (or reuses one that
// is already up) and hands its URL to every test file, which then makes a database of its own.
import { execFileSync } from "node:child_process";
import { fileURLToPath } from "node:url";
import type { TestProject } from "vitest/node";

const root = fileURLToPath(new URL("../..", import.meta.url));

declare module "vitest" {
  export interface ProvidedContext {
    databaseUrl: string;
  }
}

export default function setup(project: TestProject): void {
  const started = Date.now();
  const out = execFileSync("bash", [`${root}hack/postgres.sh`, "up"], { encoding: "utf8", stdio: ["ignore", "pipe", "inherit"] });
  const match = /export DATABASE_URL=(\S+)/.exec(out);
  if (!match) throw new Error(`hack/postgres.sh up printed no DATABASE_URL: ${out}`);
  process.stderr.write(`postgres ready in ${Date.now() - started} ms\n`);
  project.provide("databaseUrl", match[1] as string);
}
