// Ledger tests share one real PostgreSQL server per test run: this starts it (or reuses one that
// is already up) and hands its URL to every test file, which then makes a database of its own.
import type { TestProject } from "vitest/node";
import { postgres } from "./setup-steps.ts";

declare module "vitest" {
  export interface ProvidedContext {
    databaseUrl: string;
  }
}

export default async function setup(project: TestProject): Promise<void> {
  project.provide("databaseUrl", await postgres());
}
