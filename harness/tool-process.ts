// A server built by hack/ from its pinned Go module (Prometheus, Alertmanager, Jaeger), run here
// as a child process with its output in a log file, waited on until it answers, and stopped with
// SIGTERM, then SIGKILL, so that nothing is left running.
import { spawn, type ChildProcess } from "node:child_process";
import { closeSync, openSync, readFileSync } from "node:fs";
import { pollUntil, runScript } from "./cluster.ts";

/** The path of tool `tool`, built into the cache if missing (`hack/control-plane.sh bin`). */
export async function toolBinary(tool: string): Promise<string> {
  const { code, stdout } = await runScript("control-plane.sh", ["bin", tool]);
  if (code !== 0) throw new Error(`hack/control-plane.sh bin ${tool} failed (${code})`);
  return stdout.trim();
}

export interface ToolProcess {
  child: ChildProcess;
  exited: Promise<void>;
  logFile: string;
}

export function startTool(bin: string, args: string[], logFile: string, env: NodeJS.ProcessEnv = {}): ToolProcess {
  const fd = openSync(logFile, "a");
  const child = spawn(bin, args, { stdio: ["ignore", fd, fd], env: { ...process.env, ...env } });
  closeSync(fd);
  const exited = new Promise<void>((resolve) => child.once("close", () => resolve()));
  return { child, exited, logFile };
}

export async function stopTool({ child, exited }: ToolProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  child.kill("SIGTERM");
  const timer = setTimeout(() => child.kill("SIGKILL"), 10_000);
  await exited;
  clearTimeout(timer);
}

/** Waits until `url` answers 2xx, failing at once (with the log's end) if the process exits. */
export async function toolReady(name: string, url: string, tool: ToolProcess): Promise<void> {
  await pollUntil(`${name} to be ready`, 60_000, async () => {
    if (tool.child.exitCode !== null) throw new Error(`${name} exited with ${tool.child.exitCode}: ${readFileSync(tool.logFile, "utf8").slice(-2000)}`);
    return (await fetch(url).catch(() => undefined))?.ok === true;
  });
}
