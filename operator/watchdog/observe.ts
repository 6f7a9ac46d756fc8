// Turning API objects into what the core reasons about. A sandbox can write anything its RBAC
// lets it write; a field that does not parse is dropped and reported, never thrown.
import { AgentRun, AgentRunSpec, AgentRunStatus, ObjectMeta, SANDBOX_STATUS_FIELDS } from "../api/agentrun.ts";
import { LABELS } from "../api/annotations.ts";

export interface PodView {
  name: string;
  uid?: string;
  /** The attempt label; undefined when missing or not a number. */
  attempt?: number;
  phase: "Pending" | "Running" | "Succeeded" | "Failed" | "Unknown";
  createdAt: number;
  deleting: boolean;
  /** How the pod ended, when it has. */
  exit?: { code?: number; reason?: string; message?: string };
}

export function toMillis(value: unknown): number | undefined {
  if (value instanceof Date) return value.getTime();
  if (typeof value === "string") {
    const ms = Date.parse(value);
    return Number.isNaN(ms) ? undefined : ms;
  }
  return undefined;
}

type Json = Record<string, unknown>;

function terminatedState(pod: Json): PodView["exit"] {
  const status = (pod.status ?? {}) as Json;
  const statuses = [...((status.containerStatuses as Json[] | undefined) ?? [])];
  // The first container that failed says most about why the sandbox died.
  let found: PodView["exit"];
  for (const cs of statuses) {
    const terminated = ((cs.state as Json | undefined)?.terminated ?? (cs.lastState as Json | undefined)?.terminated) as
      | Json
      | undefined;
    if (!terminated) continue;
    const exit = {
      code: typeof terminated.exitCode === "number" ? terminated.exitCode : undefined,
      reason: typeof terminated.reason === "string" ? terminated.reason : undefined,
      message: typeof terminated.message === "string" ? terminated.message : undefined,
    };
    if (!found || (exit.code ?? 0) !== 0) found = exit;
    if ((exit.code ?? 0) !== 0) break;
  }
  const podReason = typeof status.reason === "string" ? status.reason : undefined; // e.g. Evicted
  const podMessage = typeof status.message === "string" ? status.message : undefined;
  if (!found && !podReason) return undefined;
  return { ...found, reason: podReason ?? found?.reason, message: podMessage ?? found?.message };
}

/** A pod as the core sees it. Accepts client-node objects (Date timestamps) and plain JSON. */
export function podView(pod: unknown): PodView {
  const p = pod as Json;
  const meta = (p.metadata ?? {}) as Json;
  const labels = (meta.labels ?? {}) as Record<string, string>;
  const attemptLabel = Number(labels[LABELS.attempt]);
  const rawPhase = (p.status as Json | undefined)?.phase;
  const phase: PodView["phase"] =
    rawPhase === "Pending" || rawPhase === "Running" || rawPhase === "Succeeded" || rawPhase === "Failed"
      ? rawPhase
      : rawPhase === undefined
        ? "Pending"
        : "Unknown";
  const view: PodView = {
    name: String(meta.name),
    phase,
    createdAt: toMillis(meta.creationTimestamp) ?? 0,
    deleting: meta.deletionTimestamp !== undefined && meta.deletionTimestamp !== null,
  };
  if (typeof meta.uid === "string") view.uid = meta.uid;
  if (Number.isInteger(attemptLabel) && attemptLabel > 0) view.attempt = attemptLabel;
  if (phase === "Failed" || phase === "Succeeded") {
    const exit = terminatedState(p);
    if (exit) view.exit = exit;
  }
  return view;
}

/** A pod whose containers may still run: anything that has not reached a final phase. */
export function isLive(pod: PodView): boolean {
  return pod.phase !== "Succeeded" && pod.phase !== "Failed";
}

export type ReadRun = { ok: true; run: AgentRun; problems: string[] } | { ok: false; error: string };

function describeIssues(issues: readonly { path: readonly PropertyKey[]; message: string }[], prefix: string): string {
  return issues
    .slice(0, 3)
    .map((i) => `${[prefix, ...i.path.map(String)].join(".")}: ${i.message}`)
    .join("; ");
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
