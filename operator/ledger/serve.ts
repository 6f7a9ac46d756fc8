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
import type { AccessAttributes, AccessDecision } from "../metrics/access.ts";
import type { RunHistory } from "./read.ts";

export interface HistoryReader {
  history(namespace: string, name: string): Promise<RunHistory | undefined>;
  historyByUid(uid: string): Promise<RunHistory | undefined>;
}

export interface HistoryAccess {
  check(req: Pick<IncomingMessage, "headers">, attributes: AccessAttributes): Promise<AccessDecision>;
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

export function historyRoute(reader: HistoryReader | undefined, access: HistoryAccess, options: HistoryRouteOptions = { maxConcurrentReads: 4 }) {
  let reading = 0;
  return async (req: IncomingMessage, res: ServerResponse, url: URL): Promise<boolean> => {
    const byName = PATH.exec(url.pathname);
    const bare = url.pathname === "/history" || url.pathname === "/history/";
    if (!byName && !bare) return false;
    const send = (code: number, body: unknown, headers: Record<string, string> = {}) => {
      res.writeHead(code, { "content-type": "application/json", "cache-control": "no-store", ...headers });
      res.end(req.method === "HEAD" ? undefined : `${JSON.stringify(body)}\n`);
    };
    if (req.method !== "GET" && req.method !== "HEAD") {
      send(405, { error: `method ${req.method ?? "?"} not allowed` }, { allow: "GET, HEAD" });
      return true;
    }
    if (!byName) {
      send(400, { error: "name the run: GET /history/<namespace>/<name>, or /history/<namespace>/<name>?uid=<uid> for one run of that name" });
      return true;
    }
    let namespace: string;
    let name: string;
    try {
      namespace = decodeURIComponent(byName[1] as string);
      name = decodeURIComponent(byName[2] as string);
    } catch {
      send(400, { error: "malformed path" });
      return true;
    }
    if (!isDnsLabel(namespace) || !isDnsSubdomain(name)) {
      send(400, { error: "the namespace and name must be Kubernetes names" });
      return true;
    }

    let decision: AccessDecision;
    try {
      decision = await access.check(req, historyAttributes(namespace, name));
    } catch (err) {
      send(503, { error: `cannot check access with the API server: ${err instanceof Error ? err.message : String(err)}` }, { "retry-after": "1" });
      return true;
    }
    if (!decision.allowed) {
      send(decision.code, { error: decision.reason }, decision.code === 401 ? { "www-authenticate": 'Bearer realm="agent-watchdog"' } : {});
      return true;
    }

    if (!reader) {
      send(404, { error: "this operator runs without a ledger: no history is recorded" });
      return true;
    }
    if (reading >= options.maxConcurrentReads) {
      send(429, { error: "too many history reads at once; try again" }, { "retry-after": "1" });
      return true;
    }
    reading++;
    let history: RunHistory | undefined;
    const uid = url.searchParams.get("uid");
    try {
      history = uid ? await reader.historyByUid(uid) : await reader.history(namespace, name);
    } catch (err) {
      send(503, { error: `ledger unavailable: ${err instanceof Error ? err.message : String(err)}` });
      return true;
    } finally {
      reading--;
    }
    // A uid of another run (another namespace, or a name the caller was not checked for) is
    // answered exactly as a uid that was never recorded.
    if (!history || history.namespace !== namespace || history.name !== name) {
      send(404, { error: `no history recorded for ${namespace}/${name}${uid ? ` with uid ${uid}` : ""}` });
      return true;
    }
    send(200, history);
    return true;
  };
}
