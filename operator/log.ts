// Structured JSON logs (pino). Child loggers add namespace, name, attempt and reconcileID.
import { pino, type Logger } from "pino";

export type { Logger };

export function createLogger(level = "info", name = "agent-watchdog"): Logger {
  return pino({
    name,
    level,
    base: { pid: process.pid },
    timestamp: pino.stdTimeFunctions.isoTime,
    formatters: { level: (label) => ({ level: label }) },
  });
}
