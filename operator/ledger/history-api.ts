// The run history as an aggregated API, so that it is reached through the API server with the
// user's own credentials (`kubectl get --raw`, or `kubectl agentrun history` with nothing but a
// kubeconfig) and no one needs the ledger's address or password:
//
//   GET /apis/history.watchdog.dev/v1alpha1/namespaces/<namespace>/agentrunhistories/<name>[?uid=<uid>]
//
// The API server authenticates the user, authorizes `get agentrunhistories` (the chart's view
// role grants it with `get agentruns`), and proxies the request here, naming the user in
// front-proxy headers. The operator then asks the API server, with a SubjectAccessReview, whether
// that user may `get` the AgentRun itself, and reads the ledger only if so: RBAC on the run stays
// the one place that decides who reads its history.
//
// Discovery is served as legacy discovery (the APIResourceList of the version), which is what the
// aggregator falls back to; it names one resource with the one verb it answers.
import type { IncomingMessage, ServerResponse } from "node:http";
import { runNames, sendJson, type HistoryRead } from "./serve.ts";

export const HISTORY_GROUP = "history.watchdog.dev";
export const HISTORY_VERSION = "v1alpha1";
export const HISTORY_RESOURCE = "agentrunhistories";
export const HISTORY_KIND = "AgentRunHistory";
const GROUP_VERSION = `${HISTORY_GROUP}/${HISTORY_VERSION}`;

/** The path of a run's history in the aggregated API. */
export function historyApiPath(namespace: string, name: string): string {
  return `/apis/${GROUP_VERSION}/namespaces/${encodeURIComponent(namespace)}/${HISTORY_RESOURCE}/${encodeURIComponent(name)}`;
}

const ITEM = new RegExp(`^/apis/${GROUP_VERSION.replace(/\./g, "\\.")}/namespaces/([^/]+)/${HISTORY_RESOURCE}/([^/]+)/?$`);

const RESOURCE_LIST = {
  kind: "APIResourceList",
  apiVersion: "v1",
  groupVersion: GROUP_VERSION,
  resources: [{ name: HISTORY_RESOURCE, singularName: "agentrunhistory", namespaced: true, kind: HISTORY_KIND, verbs: ["get"] }],
};

const GROUP = {
  kind: "APIGroup",
  apiVersion: "v1",
  name: HISTORY_GROUP,
  versions: [{ groupVersion: GROUP_VERSION, version: HISTORY_VERSION }],
  preferredVersion: { groupVersion: GROUP_VERSION, version: HISTORY_VERSION },
};

/** A metav1.Status, which kubectl prints as `Error from server (Reason): message`. */
function status(code: number, reason: string, message: string) {
  return { kind: "Status", apiVersion: "v1", metadata: {}, status: "Failure", message, reason, code };
}

export function historyApiRoute(read: HistoryRead) {
  return async (req: IncomingMessage, res: ServerResponse, url: URL): Promise<boolean> => {
    const path = url.pathname.replace(/\/$/, "");
    const item = ITEM.exec(url.pathname);
    if (!item && path !== `/apis/${GROUP_VERSION}` && path !== `/apis/${HISTORY_GROUP}`) {
      if (!url.pathname.startsWith(`/apis/${HISTORY_GROUP}/`)) return false;
      // Lists, watches and paths of other shapes in the group are not served.
      sendJson(req, res, 404, status(404, "NotFound", "the server could not find the requested resource"));
      return true;
    }
    if (req.method !== "GET" && req.method !== "HEAD") {
      sendJson(req, res, 405, status(405, "MethodNotAllowed", `${req.method ?? "?"} is not supported: the history is read only`), { allow: "GET, HEAD" });
      return true;
    }
    // Discovery tells what exists, nothing about any run: it is served to whoever asks, as the
    // aggregator's availability check needs.
    if (!item) {
      sendJson(req, res, 200, path === `/apis/${HISTORY_GROUP}` ? GROUP : RESOURCE_LIST);
      return true;
    }
    const names = runNames(item[1] as string, item[2] as string);
    if ("error" in names) {
      sendJson(req, res, 400, status(400, "BadRequest", names.error));
      return true;
    }
    const answer = await read(req, names.namespace, names.name, url.searchParams.get("uid"));
    if (answer.code !== 200) {
      sendJson(req, res, answer.code, status(answer.code, answer.reason, answer.error), answer.headers);
      return true;
    }
    sendJson(req, res, 200, {
      apiVersion: GROUP_VERSION,
      kind: HISTORY_KIND,
      metadata: { namespace: names.namespace, name: names.name },
      history: answer.history,
    });
    return true;
  };
}
