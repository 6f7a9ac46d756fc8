// The sandbox SDK, @agent-watchdog/sandbox: the API agent code running in a sandbox pod uses to
// report to its AgentRun.
//
//   import { runAgent } from "@agent-watchdog/sandbox";
//   await runAgent(async (sandbox) => {
//     const found = await sandbox.tool("search", { q: "..." }, search, { idempotent: true });
//     await sandbox.saveCheckpoint(1, { found });
//     sandbox.recordUsage({ inputTokens: 1200, outputTokens: 300, model: "gpt-5" });
//     await sandbox.say("Done.");
//   });
//
// See sandbox.ts for where each part of the protocol lives: heartbeats, tool-call records,
// checkpoints, nudges, approvals, fencing, and usage against the run's budget. The package imports nothing of the operator but
// the API's schemas and names (operator/api/).
export { runAgent, type RunAgentOptions } from "./runner.ts";
export { Sandbox, type SandboxOptions, type SandboxStats, type StreamHandle } from "./sandbox.ts";
export type { ArgsSchema, ToolContext, ToolOptions, ToolOutcome } from "./tool-runner.ts";
export type { TranscriptEntry } from "./transcript.ts";
export type { Spending, UsageReport } from "./usage.ts";
export {
  ApprovalDeniedError,
  BudgetExhaustedError,
  CheckpointTooLargeError,
  EXIT_CODES,
  FencedError,
  SandboxConfigError,
  ToolError,
  UnconfirmedSideEffectError,
  exitCodeFor,
  type BudgetBreach,
  type ToolFailure,
  type ValidationIssue,
} from "./errors.ts";
export { argsHash, canonicalJson, idempotencyKey } from "./keys.ts";
export type { ApprovalOutcome, Nudge, SandboxIdentity } from "./protocol.ts";
export { ApiClient, ApiError, type Json, type SandboxApi } from "./api-client.ts";
export type { SandboxLogger } from "./log.ts";
export { attemptContext, idempotencyKeyHash, inAttempt } from "./tracing.ts";
