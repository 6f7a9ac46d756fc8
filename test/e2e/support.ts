// Shared by the end-to-end tests: a sandbox runner of their own, with its agents' logs and outbox
// in a temporary directory, and every runner event kept for assertions.
import { existsSync, readFileSync } from "node:fs";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { pino } from "pino";
import { SandboxRunner, type RunnerEvent, type SandboxRunnerOptions } from "../../harness/sandbox-runner.ts";
import { kubeconfigPath } from "../support/cluster.ts";

const root = fileURLToPath(new URL("../..", import.meta.url));

/** The project's Node (the `node` devDependency), whatever node started the test runner. */
export const NODE = existsSync(`${root}node_modules/.bin/node`) ? `${root}node_modules/.bin/node` : process.execPath;
export const FAKE_AGENT = [NODE, `${root}test/e2e/fake-agent.ts`];

export interface RunnerHandle {
  runner: SandboxRunner;
  events: RunnerEvent[];
  dir: string;
  logDir: string;
  outboxDir: string;
  /** What the agent of `pod` printed. */
  log(namespace: string, pod: string): string;
  stop(): Promise<void>;
}

export async function startRunner(namespace: string, options: Partial<SandboxRunnerOptions> = {}): Promise<RunnerHandle> {
  const dir = await mkdtemp(join(tmpdir(), "agent-watchdog-e2e-"));
  const logDir = join(dir, "logs");
  const outboxDir = join(dir, "outbox");
  const events: RunnerEvent[] = [];
  const runner = new SandboxRunner({
    kubeconfig: kubeconfigPath(),
    namespaces: [namespace],
    logDir,
    log: pino({ level: "error" }),
    ...options,
    env: { EXAMPLE_OUTBOX_DIR: outboxDir, ...(options.env ?? {}) },
    onEvent: (event) => events.push(event),
  });
  await runner.start();
  return {
    runner,
    events,
    dir,
    logDir,
    outboxDir,
    log: (ns, pod) => {
      try {
        return readFileSync(join(logDir, `${ns}_${pod}.log`), "utf8");
      } catch {
        return "";
      }
    },
    async stop() {
      await runner.stop();
      await rm(dir, { recursive: true, force: true });
    },
  };
}

/** The JSON log records an agent wrote with the given message. */
export function said(log: string, msg: string): Record<string, unknown>[] {
  return log.split("\n").flatMap((line) => {
    try {
      const record = JSON.parse(line) as Record<string, unknown>;
      return record.msg === msg ? [record] : [];
    } catch {
      return [];
    }
  });
}

export function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === "EPERM";
  }
}
