// The console's actions are kubectl agentrun's own commands, run as the console's user: the
// same checks, the same preconditions, the same refusals and the same sentences, so the console
// can do nothing the plugin would not.
import { isDnsLabel, isDnsSubdomain } from "../api/names.ts";
import type { Invocation } from "../cli/plugin/args.ts";
import { execute, type Context } from "../cli/plugin/commands.ts";

export type ActionName = "resume" | "approve" | "reject";

export interface ActionRequest {
  namespace: string;
  name: string;
  approvalId?: string;
  answer?: string;
  reason?: string;
}

const MAX_TEXT = 4096;

/** The request as an invocation of the command, or what is wrong with it. */
export function invocationFor(console: Context, action: ActionName, body: unknown): Invocation | string {
  const b = (body && typeof body === "object" ? body : {}) as Record<string, unknown>;
  const text = (key: string): string | undefined => (typeof b[key] === "string" ? (b[key] as string) : undefined);
  const namespace = text("namespace");
  const name = text("name");
  // Checked before the command builds any API path from them.
  if (!isDnsLabel(namespace)) return "namespace: a namespace name is required";
  if (!isDnsSubdomain(name)) return "name: a run name is required";
  for (const key of ["answer", "reason", "approvalId"]) {
    const value = text(key);
    if (b[key] !== undefined && value === undefined) return `${key}: must be a string`;
    if (value !== undefined && value.length > MAX_TEXT) return `${key}: at most ${MAX_TEXT} characters`;
  }
  if (action !== "resume" && !text("approvalId")) return "approvalId: the id of the request being answered is required";
  return {
    ...console.inv,
    command: action,
    run: name,
    namespace,
    force: false,
    ...(action === "approve" ? { answer: text("answer") ?? "" } : {}),
    ...(action === "reject" ? { reason: text("reason") ?? "" } : {}),
    ...(action !== "resume" ? { approvalId: text("approvalId") } : {}),
  };
}

/**
 * Runs the command; its output line is the confirmation, its error line the refusal, with the
 * HTTP status that fits it.
 */
export async function act(console: Context, inv: Invocation): Promise<{ status: number; message: string }> {
  let out = "";
  let err = "";
  const code = await execute(inv, console.env, { out: (t) => void (out += t), err: (t) => void (err += t) }, console.now, { cluster: console.cluster });
  if (code === 0) return { status: 200, message: out.trim() };
  const message = err.trim().replace(/^error: /, "");
  const status = message.startsWith("forbidden") ? 403 : / not found in namespace /.test(message) ? 404 : message.startsWith("cannot reach") ? 502 : 409;
  return { status, message };
}
