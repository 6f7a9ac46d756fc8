// The HTTP endpoints: metrics on one address, health and readiness probes on another, as
// controller-runtime serves them (:8080/metrics, :8081/healthz and /readyz). The metrics address
// serves HTTPS when given a certificate, which is reloaded when its files change (a Secret
// rotated by cert-manager or the chart), so a renewal needs no restart.
import { readFileSync, unwatchFile, watchFile } from "node:fs";
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import { createServer as createHttpsServer } from "node:https";
import type { AccessAttributes, AccessDecision } from "./access.ts";

export type Check = () => string[] | Promise<string[]>;
export type Route = (req: IncomingMessage, res: ServerResponse, url: URL) => boolean | Promise<boolean>;

/** "host:port", ":port" or "0" (disabled). */
export function parseBindAddress(address: string): { host: string; port: number } | undefined {
  if (address === "0") return undefined;
  const match = /^(.*):(\d+)$/.exec(address);
  if (!match) throw new Error(`invalid bind address ${JSON.stringify(address)}: use host:port or :port`);
  return { host: match[1] || "0.0.0.0", port: Number(match[2]) };
}

/** PEM files of the serving certificate (with its chain) and its private key. */
export interface TlsFiles {
  certFile: string;
  keyFile: string;
  /**
   * PEM of a CA whose client certificates are asked for and checked (the API server's
   * front-proxy CA), read again every reload interval and taken up when it changes. A
   * connection without one is still served; routes see whether it had one in
   * `socket.authorized`.
   */
  clientCa?: () => string | undefined;
  /** How often the files and the client CA are looked at again; 30 s unless a test says. */
  reloadIntervalMs?: number;
}

const CERT_RELOAD_INTERVAL_MS = 30_000;

/**
 * An HTTP server for `handler`, or an HTTPS one when given a certificate: its files (and the
 * client CA, if any) are looked at again every reload interval, so a renewal needs no restart.
 */
export function createServing(handler: (req: IncomingMessage, res: ServerResponse) => void, tls?: TlsFiles): Server {
  if (tls) {
    let clientCa = tls.clientCa?.();
    const read = () => ({ cert: readFileSync(tls.certFile), key: readFileSync(tls.keyFile), ...(clientCa ? { ca: clientCa } : {}) });
    const clientCerts = tls.clientCa ? { requestCert: true, rejectUnauthorized: false } : {};
    const secure = createHttpsServer({ ...read(), ...clientCerts, minVersion: "TLSv1.2" }, handler);
    const reload = () => {
      try {
        secure.setSecureContext({ ...read(), minVersion: "TLSv1.2" });
      } catch {
        // A half-written pair (the key renewed, the certificate not yet): keep serving the old
        // one; the next change of either file tries again.
      }
    };
    const interval = tls.reloadIntervalMs ?? CERT_RELOAD_INTERVAL_MS;
    watchFile(tls.certFile, { interval }, reload);
    watchFile(tls.keyFile, { interval }, reload);
    // A rotated client CA is taken up like a renewed certificate.
    const caWatch = tls.clientCa
      ? setInterval(() => {
          const now = tls.clientCa?.();
          if (now === clientCa) return;
          clientCa = now;
          reload();
        }, interval).unref()
      : undefined;
    secure.once("close", () => {
      unwatchFile(tls.certFile, reload);
      unwatchFile(tls.keyFile, reload);
      clearInterval(caWatch);
    });
    return secure;
  }
  return createServer(handler);
}

export function listen(address: string, routes: Route[], tls?: TlsFiles): Promise<Server | undefined> {
  const bind = parseBindAddress(address);
  if (!bind) return Promise.resolve(undefined);
  const handler = (req: IncomingMessage, res: ServerResponse) => {
    void (async () => {
      let url: URL;
      try {
        url = new URL(req.url ?? "/", "http://localhost");
      } catch {
        res.writeHead(400, { "content-type": "text/plain" }).end("malformed URL\n");
        return;
      }
      try {
        for (const route of routes) if (await route(req, res, url)) return;
        res.writeHead(404, { "content-type": "text/plain" }).end("not found\n");
      } catch (err) {
        res.writeHead(500, { "content-type": "text/plain" }).end(`${String(err)}\n`);
      }
    })();
  };
  const server = createServing(handler, tls);
  return new Promise((resolve, reject) => {
    server.once("error", reject);
    server.listen(bind.port, bind.host, () => resolve(server));
  });
}

/**
 * A route served only to callers the API server lets do what `attributes` say (401 without an
 * accepted token, 403 without the permission); `inner` runs only after that.
 */
export function guarded(access: { check: (req: IncomingMessage, attributes: AccessAttributes) => Promise<AccessDecision> }, path: string, attributes: AccessAttributes, inner: Route): Route {
  return async (req, res, url) => {
    if (url.pathname !== path) return false;
    let decision: AccessDecision;
    try {
      decision = await access.check(req, attributes);
    } catch (err) {
      res.writeHead(503, { "content-type": "text/plain", "retry-after": "1" }).end(`cannot check access with the API server: ${err instanceof Error ? err.message : String(err)}\n`);
      return true;
    }
    if (!decision.allowed) {
      res.writeHead(decision.code, { "content-type": "text/plain", ...(decision.code === 401 ? { "www-authenticate": 'Bearer realm="agent-watchdog"' } : {}) }).end(`${decision.reason}\n`);
      return true;
    }
    return inner(req, res, url);
  };
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
