// The sandbox SDK: the API agent code running in a sandbox pod uses to report to its AgentRun.
//
//   import { runAgent } from "agent-watchdog/operator/sandbox/index.ts";
//   await runAgent(async (sandbox) => {
//     const found = await sandbox.tool("search", { q: "..." }, search, { idempotent: true });
//     await sandbox.saveCheckpoint(1, { found });
//     await sandbox.say("Done.");
//   });
//
// See sandbox.ts for the protocol: heartbeats, tool-call records, checkpoints, nudges, approvals
// and fencing.
export { runAgent, type RunAgentOptions } from "./runner.ts";
export {
  Sandbox,
  type ArgsSchema,
  type SandboxOptions,
  type SandboxStats,
  type StreamHandle,
  type ToolContext,
  type ToolOptions,
  type ToolOutcome,
  type TranscriptEntry,
} from "./sandbox.ts";
export {
  ApprovalDeniedError,
  EXIT_CODES,
  FencedError,
  SandboxConfigError,
  ToolError,
  UnconfirmedSideEffectError,
  exitCodeFor,
  type ToolFailure,
  type ValidationIssue,
} from "./errors.ts";
export { argsHash, canonicalJson, idempotencyKey } from "./keys.ts";
export type { ApprovalOutcome, Nudge, SandboxIdentity } from "./protocol.ts";
