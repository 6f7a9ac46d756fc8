// An AgentRun as both the operator's core and the sandbox SDK read it: leniently, with the API's own
// schemas. What earlier attempts and sandboxes wrote decides what happens next, so a record that
// does not fit the schema is dropped and reported, never trusted and never thrown.
import { AgentRun, AgentRunSpec, AgentRunStatus, ObjectMeta, SANDBOX_STATUS_FIELDS, ToolCall } from "./agentrun.ts";

type Json = Record<string, unknown>;

export type ReadRun = { ok: true; run: AgentRun; problems: string[] } | { ok: false; error: string };

function describeIssues(issues: readonly { path: readonly PropertyKey[]; message: string }[], prefix: string): string {
  return issues
    .slice(0, 3)
    .map((i) => `${[prefix, ...i.path.map(String)].join(".")}: ${i.message}`)
    .join("; ");
}

/**
 * The tool call records that parse; one malformed element drops only itself (rule 12), so that
 * garbage beside a Started non-idempotent call can never hide it from rule 10.
 */
function readToolCalls(value: unknown, problems: string[]): ToolCall[] | undefined {
  if (!Array.isArray(value)) {
    problems.push("status.toolCalls: expected an array");
    return undefined;
  }
  const calls: ToolCall[] = [];
  let dropped = 0;
  let first: string | undefined;
  for (const [i, element] of value.slice(-64).entries()) {
    const parsed = ToolCall.safeParse(element);
    if (parsed.success) calls.push(parsed.data);
    else {
      dropped++;
      first ??= describeIssues(parsed.error.issues, `status.toolCalls[${i}]`);
    }
  }
  if (dropped > 0) problems.push(`${dropped} of ${Math.min(value.length, 64)} status.toolCalls records are invalid and ignored (${first})`);
  return calls;
}

/**
 * Parses a run leniently. The spec must be valid (the CRD guarantees it), operator fields are
 * trusted after parsing, and each sandbox-owned field that fails to parse is dropped with a
 * problem report, so garbage from a sandbox degrades to "no report" rather than a crash.
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
  const shape = AgentRunStatus.shape as Record<string, { safeParse(v: unknown): { success: boolean; data?: unknown; error?: { issues: { path: PropertyKey[]; message: string }[] } } }>;
  for (const [field, value] of Object.entries(rawStatus)) {
    const schema = shape[field];
    if (!schema || value === null || value === undefined) continue;
    if (field === "toolCalls") {
      const calls = readToolCalls(value, problems);
      if (calls) status.toolCalls = calls;
      continue;
    }
    const parsed = schema.safeParse(value);
    if (parsed.success) {
      status[field] = parsed.data;
    } else if ((SANDBOX_STATUS_FIELDS as readonly string[]).includes(field)) {
      problems.push(describeIssues(parsed.error?.issues ?? [], `status.${field}`) || `status.${field}: invalid`);
    }
    // An operator field that does not parse was not written by this operator; it is rewritten
    // from scratch by the next plan.
  }
  const run = AgentRun.parse({ ...obj, metadata: meta.data, spec: spec.data, status });
  return { ok: true, run, problems };
}
