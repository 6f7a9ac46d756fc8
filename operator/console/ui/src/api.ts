// The console server's API, as the UI sees it: types of what it answers, and the calls. Every URL
// is relative (./api/...), so the app works under whatever prefix the server mounts it at; the
// session cookie the server set goes along on same-origin requests.

export const PHASES = [
  "Pending",
  "Starting",
  "Planning",
  "ExecutingTool",
  "AwaitingReply",
  "Queued",
  "Suspended",
  "NeedsHumanIntervention",
  "Completed",
  "Failed",
] as const;

export interface Session {
  context: string;
  server: string;
  user: string;
  namespace: string;
  ledger: boolean;
}

// A run as the list and the queue show it, and its budget as the run page does: the server's own types.
export type { ApprovalSummary, BudgetFigures, BudgetLimitName, BudgetLineSummary, BudgetSummary, RunSummary } from "../../contract.ts";

export interface Condition {
  type: string;
  status: string;
  reason?: string;
  message?: string;
  lastTransitionTime?: string;
}

export interface Container {
  name: string;
  image?: string;
  [key: string]: unknown;
}

/** The AgentRun object the run stream sends (watchdog.dev/v1alpha1); read leniently. */
export interface AgentRun {
  apiVersion?: string;
  kind?: string;
  metadata: {
    name?: string;
    namespace?: string;
    uid?: string;
    resourceVersion?: string;
    generation?: number;
    creationTimestamp?: string;
    deletionTimestamp?: string;
    annotations?: Record<string, string>;
    labels?: Record<string, string>;
  };
  spec?: {
    goal?: string;
    suspend?: boolean;
    template?: { spec?: { containers?: Container[] } };
    watchdog?: Record<string, unknown>;
  };
  status?: {
    phase?: string;
    reason?: string;
    message?: string;
    attempt?: number;
    restarts?: number;
    podName?: string;
    nodeName?: string;
    startTime?: string;
    completionTime?: string;
    retryAfter?: string;
    conditions?: Condition[];
    approval?: {
      id?: string;
      state: string;
      question?: string;
      requestedAt?: string;
      answer?: string;
      reason?: string;
      decidedAt?: string;
    };
    stall?: { state?: string; nudges?: number };
    heartbeat?: { time?: string; attempt?: number; state?: string };
    checkpoint?: { step?: number; data?: unknown };
    lastFailure?: { reason?: string; message?: string; time?: string; attempt?: number };
    watchdog?: Record<string, unknown>;
  };
}

export interface TimelineItem {
  time: string;
  kind: "phase" | "event" | "tool" | "nudge" | "gap" | string;
  title: string;
  detail?: string;
  warning?: boolean;
}

export interface RunDetails {
  timeline: TimelineItem[];
  notes: string[];
}

export type RunLogs = { pod: string; container: string; text: string } | { message: string };

export const NEEDS_SESSION = "This console needs the session link that kubectl agentrun console printed.";
export const UNREACHABLE = "The console's server cannot be reached (is kubectl agentrun console still running?)";

/** A call that did not succeed, with the sentence to show. */
export class ApiError extends Error {
  readonly status: number;
  constructor(status: number, message: string) {
    super(message);
    this.status = status;
  }
}

// A 401 anywhere means the session cookie is missing: the whole console then says so.
type AuthListener = () => void;
const authListeners = new Set<AuthListener>();
let sessionMissing = false;
export function onSessionMissing(listener: AuthListener): () => void {
  authListeners.add(listener);
  return () => authListeners.delete(listener);
}
export function isSessionMissing(): boolean {
  return sessionMissing;
}
function reportSessionMissing(): void {
  if (sessionMissing) return;
  sessionMissing = true;
  for (const listener of authListeners) listener();
}

async function messageOf(res: Response): Promise<string> {
  try {
    const body = (await res.json()) as { message?: unknown };
    if (typeof body?.message === "string" && body.message !== "") return body.message;
  } catch {
    // not JSON: fall through
  }
  return `The console's server answered ${res.status}${res.statusText ? ` ${res.statusText}` : ""}.`;
}

/** fetch with the console's error sentences: ApiError for any failure. */
async function call(url: string, init?: RequestInit): Promise<Response> {
  let res: Response;
  try {
    res = await fetch(url, { credentials: "same-origin", cache: "no-store", ...init });
  } catch (err) {
    if (err instanceof DOMException && err.name === "AbortError") throw err;
    throw new ApiError(0, UNREACHABLE);
  }
  if (res.status === 401) {
    reportSessionMissing();
    throw new ApiError(401, NEEDS_SESSION);
  }
  if (!res.ok) throw new ApiError(res.status, await messageOf(res));
  return res;
}

async function getJSON<T>(url: string, signal?: AbortSignal): Promise<T> {
  const res = await call(url, { headers: { Accept: "application/json" }, ...(signal ? { signal } : {}) });
  try {
    return (await res.json()) as T;
  } catch {
    throw new ApiError(res.status, "The console's server sent an answer that is not JSON.");
  }
}

export function query(params: Record<string, string | undefined>): string {
  const search = new URLSearchParams();
  for (const [key, value] of Object.entries(params)) if (value !== undefined && value !== "") search.set(key, value);
  const text = search.toString();
  return text ? `?${text}` : "";
}

export const getSession = (): Promise<Session> => getJSON<Session>("./api/session");

export const getDetails = (namespace: string, name: string, signal?: AbortSignal): Promise<RunDetails> =>
  getJSON<RunDetails>(`./api/run/details${query({ namespace, name })}`, signal);

export const getLogs = (namespace: string, name: string, signal?: AbortSignal): Promise<RunLogs> =>
  getJSON<RunLogs>(`./api/run/logs${query({ namespace, name })}`, signal);

/** POSTs an action; resolves with the server's sentence, or throws ApiError with it. */
export async function postAction(action: "resume" | "approve" | "reject", body: Record<string, string>): Promise<string> {
  const res = await call(`./api/run/${action}`, {
    method: "POST",
    headers: { "Content-Type": "application/json", Accept: "application/json" },
    body: JSON.stringify(body),
  });
  try {
    const answer = (await res.json()) as { message?: unknown };
    if (typeof answer?.message === "string" && answer.message !== "") return answer.message;
  } catch {
    // an empty 200 is still done
  }
  return "Done.";
}

/**
 * Why a stream URL could not be opened: EventSource gives up without telling (a 401, 403, 404 or
 * 5xx closes it for good), so ask the same URL with fetch and read the status, then drop the body.
 */
export async function diagnose(url: string): Promise<{ status: number; message?: string }> {
  const controller = new AbortController();
  try {
    const res = await fetch(url, { credentials: "same-origin", cache: "no-store", signal: controller.signal, headers: { Accept: "text/event-stream" } });
    if (res.ok) {
      controller.abort();
      return { status: res.status };
    }
    if (res.status === 401) {
      reportSessionMissing();
      return { status: 401, message: NEEDS_SESSION };
    }
    return { status: res.status, message: await messageOf(res) };
  } catch {
    return { status: 0, message: UNREACHABLE };
  } finally {
    controller.abort();
  }
}

export const runKey = (r: { namespace: string; name: string }): string => `${r.namespace}/${r.name}`;

export const runHref = (namespace: string, name: string): string =>
  `#/runs/${encodeURIComponent(namespace)}/${encodeURIComponent(name)}`;
