// The run as the sandbox finds it at start: read with retries while the API server cannot be
// reached, and parsed with the API's own schemas as leniently as the operator parses it. What
// earlier attempts left decides what tools do now, so a record that does not fit the schema is
// dropped rather than trusted, and reported rather than thrown.
import { AgentRun, AgentRunSpec, AgentRunStatus, ObjectMeta, SANDBOX_STATUS_FIELDS, ToolCall } from "../api/agentrun.ts";
import { RETRY, isNotFound, isTransient, runPaths, type Json, type SandboxApi } from "./api-client.ts";
import { FencedError } from "./errors.ts";
import type { SandboxIdentity } from "./protocol.ts";

type Issue = { path: readonly PropertyKey[]; message: string };
type FieldSchema = { safeParse(v: unknown): { success: boolean; data?: unknown; error?: { issues: Issue[] } } };

/** The CRD's bound on status.toolCalls: anything beyond the newest 64 was never valid. */
const MAX_TOOL_CALLS = 64;

export type ReadRun = { ok: true; run: AgentRun; problems: string[] } | { ok: false; error: string };

function describeIssues(issues: readonly Issue[], prefix: string): string {
  return issues
    .slice(0, 3)
    .map((i) => `${[prefix, ...i.path.map(String)].join(".")}: ${i.message}`)
    .join("; ");
}

/**
 * The tool call records that parse; one malformed element drops only itself, so that garbage
 * beside a Started non-idempotent call can never hide it from the replay rules.
 */
function readToolCalls(value: unknown, problems: string[]): ToolCall[] | undefined {
  if (!Array.isArray(value)) {
    problems.push("status.toolCalls: expected an array");
    return undefined;
  }
  const calls: ToolCall[] = [];
  let dropped = 0;
  let first: string | undefined;
  for (const [i, element] of value.slice(-MAX_TOOL_CALLS).entries()) {
    const parsed = ToolCall.safeParse(element);
    if (parsed.success) calls.push(parsed.data);
    else {
      dropped++;
      first ??= describeIssues(parsed.error.issues, `status.toolCalls[${i}]`);
    }
  }
  if (dropped > 0) problems.push(`${dropped} of ${Math.min(value.length, MAX_TOOL_CALLS)} status.toolCalls records are invalid and ignored (${first})`);
  return calls;
}

/**
 * Metadata and spec must be valid (the CRD guarantees the spec); each status field is parsed on
 * its own. A sandbox field that does not parse is dropped with a problem report; an operator
 * field that does not parse is dropped silently, as the operator rewrites it from scratch.
 */
export function readRun(raw: unknown): ReadRun {
  const obj = (raw ?? {}) as Json;
  const meta = ObjectMeta.safeParse(obj.metadata ?? {});
  if (!meta.success) return { ok: false, error: `metadata: ${describeIssues(meta.error.issues, "metadata")}` };
  const spec = AgentRunSpec.safeParse(obj.spec);
  if (!spec.success) return { ok: false, error: describeIssues(spec.error.issues, "spec") };

  const problems: string[] = [];
  const rawStatus = (obj.status && typeof obj.status === "object" ? obj.status : {}) as Json;
  const status: Json = {};
  const shape = AgentRunStatus.shape as Record<string, FieldSchema>;
  for (const [field, value] of Object.entries(rawStatus)) {
    const schema = shape[field];
    if (!schema || value === null || value === undefined) continue;
    if (field === "toolCalls") {
      const calls = readToolCalls(value, problems);
      if (calls) status.toolCalls = calls;
      continue;
    }
    const parsed = schema.safeParse(value);
    if (parsed.success) status[field] = parsed.data;
    else if ((SANDBOX_STATUS_FIELDS as readonly string[]).includes(field)) {
      problems.push(describeIssues(parsed.error?.issues ?? [], `status.${field}`) || `status.${field}: invalid`);
    }
  }
  const run = AgentRun.parse({ ...obj, metadata: meta.data, spec: spec.data, status });
  return { ok: true, run, problems };
}

/**
 * An API server that restarts, or a network still coming up in a new pod, is a matter of
 * seconds: the first read is retried like every write, up to the start deadline.
 */
export async function readOwnRun(client: SandboxApi, identity: SandboxIdentity, clock: () => number, deadlineMs: number): Promise<Json> {
  const giveUpAt = clock() + deadlineMs;
  for (let wait: number = RETRY.firstMs; ; wait = Math.min(RETRY.maxMs, wait * 2)) {
    try {
      return await client.get(runPaths.run(identity.namespace, identity.runName));
    } catch (err) {
      if (isNotFound(err)) throw new FencedError(`run ${identity.namespace}/${identity.runName} does not exist`);
      if (!isTransient(err) || clock() + wait > giveUpAt) throw err;
      await new Promise((resolve) => setTimeout(resolve, wait));
    }
  }
}
