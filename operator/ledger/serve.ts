// GET /history/<namespace>/<name>[?uid=<uid>]: a run's history from the ledger, as JSON, for a
// caller who may `get` that AgentRun. The history holds tool results, approval answers and
// arguments' hashes, so it is worth as much as the run itself: the API server authenticates the
// caller's token and authorizes `get agentruns/<name>` in that namespace before the ledger is read
// at all. A run is always named by namespace and name, even when asked for by uid, so that the
// check is about the run the caller names and a uid never reaches a run of another namespace.
//
// Reads are limited to a few at once: a flood of history requests answers 429 rather than taking
// the connections the ledger's writes need.
import type { IncomingMessage, ServerResponse } from "node:http";
import { isDnsLabel, isDnsSubdomain } from "../api/names.ts";
import type { AccessAttributes, AccessDecision, AccessRequest } from "../metrics/access.ts";
import type { RunHistory } from "./read.ts";

export interface HistoryReader {
  history(namespace: string, name: string): Promise<RunHistory | undefined>;
  historyByUid(uid: string): Promise<RunHistory | undefined>;
}

export interface HistoryAccess {
  check(req: AccessRequest, attributes: AccessAttributes): Promise<AccessDecision>;
}

export interface HistoryRouteOptions {
  /** History reads in flight at once; more answer 429. */
  maxConcurrentReads: number;
}

const PATH = /^\/history\/([^/]+)\/([^/]+)\/?$/;

/** The attributes a history read is authorized with: those of `kubectl get agentrun NAME -n NS`. */
export function historyAttributes(namespace: string, name: string): AccessAttributes {
  return { resource: { verb: "get", group: "watchdog.dev", resource: "agentruns", namespace, name } };
}

/** How a history request ends: the history, or a refusal with its code and reason. */
export type HistoryAnswer =
  | { code: 200; history: RunHistory }
  | { code: 401 | 403 | 404 | 429 | 503; error: string; reason: "Unauthorized" | "Forbidden" | "NotFound" | "TooManyRequests" | "ServiceUnavailable"; headers: Record<string, string> };

/**
 * Answers a request for the history of namespace/name (one uid of it, if given): the caller's
 * access is checked before the ledger is read at all, and reads in flight are bounded.
 */
export function historyReads(reader: HistoryReader | undefined, access: HistoryAccess, options: HistoryRouteOptions = { maxConcurrentReads: 4 }) {
  let reading = 0;
  return async (req: AccessRequest, namespace: string, name: string, uid: string | null): Promise<HistoryAnswer> => {
    let decision: AccessDecision;
    try {
      decision = await access.check(req, historyAttributes(namespace, name));
    } catch (err) {
      return { code: 503, reason: "ServiceUnavailable", error: `cannot check access with the API server: ${err instanceof Error ? err.message : String(err)}`, headers: { "retry-after": "1" } };
    }
    if (!decision.allowed) {
      return decision.code === 401
        ? { code: 401, reason: "Unauthorized", error: decision.reason, headers: { "www-authenticate": 'Bearer realm="agent-watchdog"' } }
        : { code: 403, reason: "Forbidden", error: decision.reason, headers: {} };
    }
    if (!reader) return { code: 404, reason: "NotFound", error: "this operator runs without a ledger: no history is recorded", headers: {} };
    if (reading >= options.maxConcurrentReads) return { code: 429, reason: "TooManyRequests", error: "too many history reads at once; try again", headers: { "retry-after": "1" } };
    reading++;
    let history: RunHistory | undefined;
    try {
      history = uid ? await reader.historyByUid(uid) : await reader.history(namespace, name);
    } catch (err) {
      return { code: 503, reason: "ServiceUnavailable", error: `ledger unavailable: ${err instanceof Error ? err.message : String(err)}`, headers: {} };
    } finally {
      reading--;
    }
    // A uid of another run (another namespace, or a name the caller was not checked for) is
    // answered exactly as a uid that was never recorded.
    if (!history || history.namespace !== namespace || history.name !== name) {
      return { code: 404, reason: "NotFound", error: `no history recorded for ${namespace}/${name}${uid ? ` with uid ${uid}` : ""}`, headers: {} };
    }
    return { code: 200, history };
  };
}

/** The namespace and name of a path's two segments, or why they are not Kubernetes names. */
export function runNames(encodedNamespace: string, encodedName: string): { namespace: string; name: string } | { error: string } {
  let namespace: string;
  let name: string;
  try {
    namespace = decodeURIComponent(encodedNamespace);
    name = decodeURIComponent(encodedName);
  } catch {
    return { error: "malformed path" };
  }
  if (!isDnsLabel(namespace) || !isDnsSubdomain(name)) return { error: "the namespace and name must be Kubernetes names" };
  return { namespace, name };
}

/** A history read as historyReads makes it, for the routes that serve it. */
export type HistoryRead = ReturnType<typeof historyReads>;

/** Writes a JSON answer (no body for HEAD); history is never to be cached. */
export function sendJson(req: IncomingMessage, res: ServerResponse, code: number, body: unknown, headers: Record<string, string> = {}): void {
  res.writeHead(code, { "content-type": "application/json", "cache-control": "no-store", ...headers });
  res.end(req.method === "HEAD" ? undefined : `${JSON.stringify(body)}\n`);
}

export function historyRoute(reader: HistoryReader | undefined, access: HistoryAccess, options: HistoryRouteOptions = { maxConcurrentReads: 4 }) {
  return historyPathRoute(historyReads(reader, access, options));
}

/** GET /history/<namespace>/<name>: the history as the ledger holds it, errors as {error}. */
export function historyPathRoute(read: HistoryRead) {
  return async (req: IncomingMessage, res: ServerResponse, url: URL): Promise<boolean> => {
    const byName = PATH.exec(url.pathname);
    const bare = url.pathname === "/history" || url.pathname === "/history/";
    if (!byName && !bare) return false;
    const send = (code: number, body: unknown, headers: Record<string, string> = {}) => sendJson(req, res, code, body, headers);
    if (req.method !== "GET" && req.method !== "HEAD") {
      send(405, { error: `method ${req.method ?? "?"} not allowed` }, { allow: "GET, HEAD" });
      return true;
    }
    if (!byName) {
      send(400, { error: "name the run: GET /history/<namespace>/<name>, or /history/<namespace>/<name>?uid=<uid> for one run of that name" });
      return true;
    }
    const names = runNames(byName[1] as string, byName[2] as string);
    if ("error" in names) {
      send(400, { error: names.error });
      return true;
    }
    const answer = await read(req, names.namespace, names.name, url.searchParams.get("uid"));
    if (answer.code === 200) send(200, answer.history);
    else send(answer.code, { error: answer.error }, answer.headers);
    return true;
  };
}
