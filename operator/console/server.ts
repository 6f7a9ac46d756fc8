// The console's HTTP server: its built pages, a JSON API and event streams under /api/, all behind
// the guard (guard.ts). It holds no credentials of its own: every read and every action goes to
// the API server with the user's kubeconfig, so RBAC decides, exactly as with kubectl.
import { readFile } from "node:fs/promises";
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import { extname, join, normalize, sep } from "node:path";
import { explainFailure } from "../cli/plugin/cluster.ts";
import type { Context } from "../cli/plugin/commands.ts";
import { act, invocationFor, type ActionName } from "./actions.ts";
import { runDetails, runLogs } from "./details.ts";
import type { Guard } from "./guard.ts";
import { EventStream, streamRun, streamRuns } from "./streams.ts";

export interface ConsoleOptions {
  ctx: Context;
  guard: Guard;
  /** The built pages (index.html and assets/). */
  uiDir: string;
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

const MAX_BODY = 64 * 1024;

function json(res: ServerResponse, status: number, body: unknown): void {
  res.writeHead(status, { ...SECURITY_HEADERS, "Content-Type": "application/json; charset=utf-8", "Cache-Control": "no-store" });
  res.end(JSON.stringify(body));
}

async function readJson(req: IncomingMessage): Promise<unknown> {
  let size = 0;
  const chunks: Buffer[] = [];
  for await (const chunk of req) {
    size += (chunk as Buffer).length;
    if (size > MAX_BODY) throw new Error(`the request is larger than ${MAX_BODY} bytes`);
    chunks.push(chunk as Buffer);
  }
  return JSON.parse(Buffer.concat(chunks).toString("utf8") || "{}");
}

export function createConsoleServer({ ctx, guard, uiDir }: ConsoleOptions): Server {
  const client = ctx.cluster.client;

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

  async function api(req: IncomingMessage, res: ServerResponse, url: URL): Promise<void> {
    const q = (key: string) => url.searchParams.get(key) ?? "";
    const route = `${req.method} ${url.pathname}`;
    switch (route) {
      case "GET /api/session": {
        const kc = ctx.cluster;
        return json(res, 200, { context: ctx.inv.context ?? kc.contextName, server: kc.server, user: kc.userName, namespace: ctx.namespace, ledger: ctx.databaseUrl !== undefined });
      }
      case "GET /api/stream/runs":
        return void streamRuns(client, q("namespace") || undefined, new EventStream(res));
      case "GET /api/stream/run":
        return void streamRun(client, q("namespace"), q("name"), new EventStream(res));
      case "GET /api/run/details":
        return json(res, 200, await runDetails(ctx, q("namespace"), q("name")));
      case "GET /api/run/logs":
        return json(res, 200, await runLogs(ctx, q("namespace"), q("name")));
      case "POST /api/run/resume":
      case "POST /api/run/approve":
      case "POST /api/run/reject": {
        const write = guard.checkWrite(req);
        if (!write.ok) return json(res, write.status ?? 403, { message: write.message });
        let body: unknown;
        try {
          body = await readJson(req);
        } catch (err) {
          return json(res, 400, { message: `the request is not valid JSON: ${(err as Error).message}` });
        }
        const inv = invocationFor(ctx, url.pathname.slice("/api/run/".length) as ActionName, body);
        if (typeof inv === "string") return json(res, 400, { message: inv });
        const outcome = await act(ctx, inv);
        return json(res, outcome.status, { message: outcome.message });
      }
      default:
        return json(res, 404, { message: `no such API: ${route}` });
    }
  }

  return createServer((req, res) => {
    const url = new URL(req.url ?? "/", "http://console.invalid");
    // Opening the printed link: the token becomes a cookie, and leaves the address bar.
    if (req.method === "GET" && url.pathname === "/" && url.searchParams.has("token")) {
      if (!guard.hostAllowed(req) || !guard.sameToken(url.searchParams.get("token") ?? undefined)) {
        return json(res, 401, { message: "This link's session token is not this console's: open the link kubectl agentrun console printed." });
      }
      res.writeHead(303, { ...SECURITY_HEADERS, "Set-Cookie": guard.cookie(), Location: "/", "Cache-Control": "no-store" });
      return void res.end();
    }
    const verdict = guard.check(req);
    if (!verdict.ok) return json(res, verdict.status ?? 401, { message: verdict.message });
    const handle = url.pathname.startsWith("/api/")
      ? api(req, res, url)
      : req.method === "GET"
        ? serveFile(res, url.pathname === "/" ? "index.html" : decodeURIComponent(url.pathname.slice(1)))
        : Promise.resolve(json(res, 405, { message: "only GET here" }));
    handle.catch((err: unknown) => {
      if (res.headersSent) return void res.end();
      const message = err instanceof Error && err.name === "CliError" ? err.message : explainFailure(err, client.server);
      json(res, /forbidden/.test(message) ? 403 : / not found in namespace /.test(message) ? 404 : 502, { message });
    });
  });
}
