// The console's HTTP server: its built pages, a JSON API and event streams under /api/, all behind
// the gate (gate.ts). It holds no credentials of its own: every read and every action goes to
// the API server as the user the gate admitted, so RBAC decides, exactly as with kubectl.
import { readFile } from "node:fs/promises";
import type { IncomingMessage, Server, ServerResponse } from "node:http";
import { extname, join, normalize, sep } from "node:path";
import { explainFailure } from "../cli/plugin/cluster.ts";
import type { Context } from "../cli/plugin/commands.ts";
import { createServing, type TlsFiles } from "../metrics/server.ts";
import { act, invocationFor, type ActionName } from "./actions.ts";
import { runDetails, runLogs } from "./details.ts";
import type { Answer, Gate } from "./gate.ts";
import { BadRequest, decodedPath, namespaceOf, readJson, requestUrl, runOf } from "./request.ts";
import { EventStream, streamRun, streamRuns } from "./streams.ts";

export interface ConsoleOptions {
  gate: Gate;
  /** The built pages (index.html and assets/). */
  uiDir: string;
  /** Serve HTTPS with this certificate. */
  tls?: TlsFiles;
}

const TYPES: Record<string, string> = {
  ".html": "text/html; charset=utf-8",
  ".js": "text/javascript; charset=utf-8",
  ".css": "text/css; charset=utf-8",
  ".svg": "image/svg+xml",
  ".png": "image/png",
  ".ico": "image/x-icon",
  ".json": "application/json",
};

// The pages load nothing from anywhere else, run no inline script and may not be framed; the
// link's token is not sent on as a referrer.
const SECURITY_HEADERS = {
  "Content-Security-Policy": "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'",
  "X-Content-Type-Options": "nosniff",
  "Referrer-Policy": "no-referrer",
  "X-Frame-Options": "DENY",
};

function send(res: ServerResponse, answer: Answer): void {
  if (answer.json !== undefined) {
    res.writeHead(answer.status, { ...SECURITY_HEADERS, ...answer.headers, "Content-Type": "application/json; charset=utf-8", "Cache-Control": "no-store" });
    return void res.end(JSON.stringify(answer.json));
  }
  const body = answer.html ?? "";
  res.writeHead(answer.status, { ...SECURITY_HEADERS, ...answer.headers, ...(body ? { "Content-Type": "text/html; charset=utf-8" } : {}), "Cache-Control": "no-store" });
  res.end(body);
}

function json(res: ServerResponse, status: number, body: unknown): void {
  send(res, { status, json: body });
}

export function createConsoleServer({ gate, uiDir, tls }: ConsoleOptions): Server {
  // The API server a request's user was served from, for its failure's sentence.
  const apiServerOf = new WeakMap<ServerResponse, string>();
  async function serveFile(res: ServerResponse, path: string): Promise<void> {
    const file = normalize(join(uiDir, path));
    if (!file.startsWith(uiDir.endsWith(sep) ? uiDir : uiDir + sep)) return json(res, 404, { message: "not found" });
    let body: Buffer;
    try {
      body = await readFile(file);
    } catch {
      return json(res, 404, { message: "not found" });
    }
    // Assets carry their content's hash in their names; the page itself must always be fresh.
    const cache = path.startsWith("assets/") ? "public, max-age=31536000, immutable" : "no-store";
    res.writeHead(200, { ...SECURITY_HEADERS, "Content-Type": TYPES[extname(file)] ?? "application/octet-stream", "Cache-Control": cache });
    res.end(body);
  }

  async function api(req: IncomingMessage, res: ServerResponse, url: URL, ctx: Context, user: { user: string; context: string }): Promise<void> {
    const route = `${req.method} ${url.pathname}`;
    const client = ctx.cluster.client;
    switch (route) {
      case "GET /api/session":
        return json(res, 200, { context: user.context, server: ctx.cluster.server, user: user.user, namespace: ctx.namespace, ledger: ctx.databaseUrl !== undefined });
      // Each route checks the names it is given before any API path is built from them (runOf,
      // namespaceOf): the client joins them into paths, where ".." or "/" would reach other objects.
      case "GET /api/stream/runs": {
        const namespace = namespaceOf(url);
        return void streamRuns(client, namespace, new EventStream(res));
      }
      case "GET /api/stream/run": {
        const { namespace, name } = runOf(url);
        return void streamRun(client, namespace, name, new EventStream(res));
      }
      case "GET /api/run/details": {
        const { namespace, name } = runOf(url);
        return json(res, 200, await runDetails(ctx, namespace, name));
      }
      case "GET /api/run/logs": {
        const { namespace, name } = runOf(url);
        return json(res, 200, await runLogs(ctx, namespace, name));
      }
      case "POST /api/run/resume":
      case "POST /api/run/approve":
      case "POST /api/run/reject": {
        const write = gate.checkWrite(req);
        if (!write.ok) return json(res, write.status ?? 403, { message: write.message });
        const body = await readJson(req);
        // Checks the namespace and name in the body, as runOf does for the query.
        const inv = invocationFor(ctx, url.pathname.slice("/api/run/".length) as ActionName, body);
        if (typeof inv === "string") return json(res, 400, { message: inv });
        const outcome = await act(ctx, inv);
        return json(res, outcome.status, { message: outcome.message });
      }
      default:
        return json(res, 404, { message: `no such API: ${route}` });
    }
  }

  async function respond(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const url = requestUrl(req.url);
    const path = decodedPath(url);
    const own = await gate.route(req, url);
    if (own) return send(res, own);
    const admitted = await gate.admit(req);
    if (!admitted.ok) {
      // A person opening a page is shown where to sign in; the pages' own calls get the status.
      if (admitted.signIn && req.method === "GET" && !url.pathname.startsWith("/api/")) return send(res, { status: 303, headers: { Location: "./signin" } });
      return json(res, admitted.status, { message: admitted.message });
    }
    apiServerOf.set(res, admitted.ctx.cluster.server);
    if (url.pathname.startsWith("/api/")) return api(req, res, url, admitted.ctx, admitted);
    if (req.method !== "GET") return json(res, 405, { message: "only GET here" });
    return serveFile(res, url.pathname === "/" ? "index.html" : path.slice(1));
  }

  function fail(res: ServerResponse, err: unknown): void {
    if (res.headersSent) return void res.end();
    if (err instanceof BadRequest) return json(res, err.status, { message: err.message });
    const message = err instanceof Error && err.name === "CliError" ? err.message : explainFailure(err, apiServerOf.get(res) ?? "the API server");
    json(res, /forbidden/.test(message) ? 403 : / not found in namespace /.test(message) ? 404 : 502, { message });
  }

  // Whatever a request holds, its failure is its own answer: nothing it sends can throw out of
  // here (an exception in a request handler would stop the whole server), not even an answer
  // that cannot be written.
  return createServing((req, res) => {
    respond(req, res)
      .catch((err: unknown) => fail(res, err))
      .catch(() => res.destroy());
  }, tls);
}
