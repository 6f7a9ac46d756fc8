// The HTTP endpoints: metrics on one address, health and readiness probes on another, as
// controller-runtime serves them (:8080/metrics, :8081/healthz and /readyz).
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";

export type Check = () => string[] | Promise<string[]>;
export type Route = (req: IncomingMessage, res: ServerResponse, url: URL) => boolean | Promise<boolean>;

/** "host:port", ":port" or "0" (disabled). */
export function parseBindAddress(address: string): { host: string; port: number } | undefined {
  if (address === "0") return undefined;
  const match = /^(.*):(\d+)$/.exec(address);
  if (!match) throw new Error(`invalid bind address ${JSON.stringify(address)}: use host:port or :port`);
  return { host: match[1] || "0.0.0.0", port: Number(match[2]) };
}

export function listen(address: string, routes: Route[]): Promise<Server | undefined> {
  const bind = parseBindAddress(address);
  if (!bind) return Promise.resolve(undefined);
  const server = createServer((req, res) => {
    void (async () => {
      const url = new URL(req.url ?? "/", "http://localhost");
      try {
        for (const route of routes) if (await route(req, res, url)) return;
        res.writeHead(404, { "content-type": "text/plain" }).end("not found\n");
      } catch (err) {
        res.writeHead(500, { "content-type": "text/plain" }).end(`${String(err)}\n`);
      }
    })();
  });
  return new Promise((resolve, reject) => {
    server.once("error", reject);
    server.listen(bind.port, bind.host, () => resolve(server));
  });
}

/** A probe route: 200 "ok" when every check passes, 500 with the problems otherwise. */
export function probe(path: string, checks: Record<string, Check>): Route {
  return async (_req, res, url) => {
    if (url.pathname !== path) return false;
    const lines: string[] = [];
    let failed = false;
    for (const [name, check] of Object.entries(checks)) {
      const problems = await check();
      if (problems.length) {
        failed = true;
        lines.push(`[-]${name} failed: ${problems.join("; ")}`);
      } else lines.push(`[+]${name} ok`);
    }
    const verbose = url.searchParams.has("verbose");
    res.writeHead(failed ? 500 : 200, { "content-type": "text/plain" });
    res.end(failed || verbose ? `${lines.join("\n")}\n${failed ? `${path.slice(1)} check failed` : "ok"}\n` : "ok\n");
    return true;
  };
}
