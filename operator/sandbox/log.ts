// The SDK's logs: pino JSON on stdout by default, the format the operator writes and the local
// sandbox runner reads (a record at level error becomes the pod's termination message). Agents
// that log elsewhere pass their own logger: anything with pino's methods and child() will do.
import { pino } from "pino";

export interface LogFn {
  (fields: object, message?: string): void;
  (message: string): void;
}

/** The part of pino's Logger the SDK uses. */
export interface SandboxLogger {
  debug: LogFn;
  info: LogFn;
  warn: LogFn;
  error: LogFn;
  child(bindings: Record<string, unknown>): SandboxLogger;
}

/**
 * The default: level from WATCHDOG_LOG_LEVEL (info), ISO times, level names rather than numbers,
 * and the process named under "logger", as controller-runtime does, because "name" belongs to
 * the run a line is about.
 */
export function defaultLogger(level = process.env.WATCHDOG_LOG_LEVEL ?? "info"): SandboxLogger {
  return pino({
    level,
    base: { pid: process.pid, logger: "sandbox" },
    timestamp: pino.stdTimeFunctions.isoTime,
    formatters: { level: (label) => ({ level: label }) },
  });
}
