// Structured JSON logs (pino). Child loggers add namespace, name, attempt and reconcileID.
// The process is named under "logger", as controller-runtime does, because "name"
// belongs to the run a line is about.
import { pino, type Logger } from "pino";

export type { Logger };

export function createLogger(level = "info", name = "agent-watchdog"): Logger {
  return pino({
    level,
    base: { pid: process.pid, logger: name },
    timestamp: pino.stdTimeFunctions.isoTime,
    formatters: { level: (label) => ({ level: label }) },
  });
}
