// The TypeScript half of the shared SDK protocol suite (test/integration/sdk-protocol.test.ts):
// an agent that plays a script of SDK calls, the same script the Python driver (driver.py) plays,
// and writes what the SDK answered as JSON lines into $PROTOCOL_EVENTS. It runs as a sandbox
// would: its identity from WATCHDOG_*, its credentials from $KUBECONFIG, its end as the exit code.
import { appendFileSync, existsSync } from "node:fs";
import { setTimeout as sleep } from "node:timers/promises";
import { CheckpointTooLargeError, runAgent, ToolError, type Sandbox, type ToolContext } from "../../../operator/sandbox/index.ts";

export type Step =
  | { do: "say"; text: string }
  | { do: "stream"; chunks: string[] }
  | { do: "tool"; name: string; args: unknown; result?: unknown; idempotent?: boolean; fail?: string; httpStatus?: number; retryAfterSeconds?: number; holdFile?: string }
  /** `padding`: data of that many characters, made here (an env var holds at most 128 KiB). */
  | { do: "checkpoint"; step: number; data?: unknown; padding?: number }
  | { do: "nudge" }
  | { do: "approval"; question: string }
  /** The agent gives up its attempt: it throws. */
  | { do: "giveUp"; message: string }
  | { do: "crash" };

const script = JSON.parse(process.env.PROTOCOL_SCRIPT ?? "[]") as Step[];
const event = (e: Record<string, unknown>) => appendFileSync(process.env.PROTOCOL_EVENTS!, `${JSON.stringify(e)}\n`);

async function tool(step: Extract<Step, { do: "tool" }>, ctx: ToolContext): Promise<unknown> {
  while (step.holdFile !== undefined && !existsSync(step.holdFile)) {
    ctx.progress();
    await sleep(50, undefined, { signal: ctx.signal });
  }
  appendFileSync(process.env.SIDE_EFFECTS_FILE!, `${step.name} ${ctx.idempotencyKey}\n`);
  if (step.fail !== undefined) throw new ToolError(step.fail, { httpStatus: step.httpStatus, retryAfterSeconds: step.retryAfterSeconds });
  return step.result;
}

async function play(sandbox: Sandbox, step: Step): Promise<void> {
  switch (step.do) {
    case "say":
      return sandbox.say(step.text);
    case "stream": {
      const stream = sandbox.beginStream();
      for (const chunk of step.chunks) stream.chunk(chunk);
      return stream.end();
    }
    case "tool": {
      const outcome = await sandbox.tool(step.name, step.args, (_args, ctx) => tool(step, ctx), { idempotent: step.idempotent ?? false });
      event(outcome.ok ? { event: "tool", ok: true, replayed: outcome.replayed, value: outcome.value, key: outcome.idempotencyKey } : { event: "tool", ok: false, error: outcome.error.message, key: outcome.idempotencyKey });
      return;
    }
    case "checkpoint":
      try {
        return await sandbox.saveCheckpoint(step.step, step.padding === undefined ? step.data : "x".repeat(step.padding));
      } catch (err) {
        if (!(err instanceof CheckpointTooLargeError)) throw err;
        event({ event: "checkpoint", ok: false, error: err.name, bytes: err.bytes, limit: err.limit });
        return;
      }
    case "nudge": {
      const nudge = await sandbox.nextNudge();
      event({ event: "nudge", message: nudge.message, count: nudge.count });
      return;
    }
    case "approval":
      event({ event: "approval", answer: await sandbox.awaitApproval(step.question) });
      return;
    case "giveUp":
      throw new Error(step.message);
    case "crash":
      process.exit(1);
  }
}

await runAgent(async (sandbox) => {
  event({ event: "start", attempt: sandbox.attempt, goal: sandbox.goal ?? null, checkpoint: sandbox.loadCheckpoint() ?? null, lastFailure: sandbox.lastFailure?.reason ?? null });
  for (const step of script) await play(sandbox, step);
});
