// An HTTPS proxy between one operator and the real API server that can refuse chosen requests the
// way an overloaded API server does: 429 from API Priority and Fairness (with Retry-After), a 503,
// or no answer at all (a timeout). Everything else, watches included, goes through unchanged, to
// the API server and back, under the test's own admin identity. It serves a certificate of its own
// (made with openssl for 127.0.0.1), which the kubeconfig it writes trusts.
import { execFileSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { request as httpsRequest, createServer, type Server } from "node:https";
import type { IncomingMessage, ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { KubeConfig } from "@kubernetes/client-node";

export type Fault = "tooManyRequests" | "unavailable" | "timeout";

export interface FaultProxy {
  /** A kubeconfig that reaches the API server through the proxy. */
  readonly kubeconfig: string;
  /** Requests refused so far. */
  readonly refused: number;
  /** Refuse, with `fault`, every request for which `matches` is true (undefined: refuse none). */
  refuse(matches: ((method: string, path: string) => boolean) | undefined, fault?: Fault): void;
  close(): Promise<void>;
}

const REFUSALS: Record<Exclude<Fault, "timeout">, { code: number; body: object; headers: Record<string, string> }> = {
  // What API Priority and Fairness answers when a request's priority level has no room.
  tooManyRequests: {
    code: 429,
    headers: { "Retry-After": "1" },
    body: { kind: "Status", apiVersion: "v1", status: "Failure", message: "Too many requests, please try again later.", reason: "TooManyRequests", code: 429, details: { retryAfterSeconds: 1 } },
  },
  unavailable: {
    code: 503,
    headers: {},
    body: { kind: "Status", apiVersion: "v1", status: "Failure", message: "the server is currently unable to handle the request", reason: "ServiceUnavailable", code: 503 },
  },
};

export async function startFaultProxy(kubeconfig: string): Promise<FaultProxy> {
  const kc = new KubeConfig();
  kc.loadFromFile(kubeconfig);
  const upstream = new URL(kc.getCurrentCluster()?.server ?? "");
  const tls: { ca?: Buffer | string; cert?: Buffer | string; key?: Buffer | string } = {};
  await kc.applyToHTTPSOptions(tls as Parameters<KubeConfig["applyToHTTPSOptions"]>[0]);

  const dir = mkdtempSync(join(tmpdir(), "fault-proxy-"));
  execFileSync("openssl", ["req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-days", "1", "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", join(dir, "key.pem"), "-out", join(dir, "cert.pem")], { stdio: "ignore" });
  const cert = readFileSync(join(dir, "cert.pem"));

  let matches: ((method: string, path: string) => boolean) | undefined;
  let fault: Fault = "tooManyRequests";
  let refused = 0;
  const held: ServerResponse[] = [];

  const forward = (req: IncomingMessage, res: ServerResponse) => {
    const headers = { ...req.headers };
    delete headers.host;
    delete headers.authorization;
    const out = httpsRequest(
      { host: upstream.hostname, port: upstream.port, method: req.method, path: req.url, headers, ca: tls.ca, cert: tls.cert, key: tls.key },
      (answer) => {
        res.writeHead(answer.statusCode ?? 502, answer.headers);
        answer.pipe(res);
      },
    );
    out.once("error", () => res.destroy());
    res.once("close", () => out.destroy());
    req.pipe(out);
  };

  const server: Server = createServer({ key: readFileSync(join(dir, "key.pem")), cert }, (req, res) => {
    const path = (req.url ?? "/").split("?")[0] as string;
    if (matches?.(req.method ?? "GET", path)) {
      refused++;
      req.resume();
      if (fault === "timeout") {
        held.push(res); // never answered while the fault lasts: the client's own timeout ends it
        return;
      }
      const refusal = REFUSALS[fault];
      res.writeHead(refusal.code, { "Content-Type": "application/json", ...refusal.headers });
      res.end(JSON.stringify(refusal.body));
      return;
    }
    forward(req, res);
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const port = (server.address() as AddressInfo).port;
  const file = join(dir, "kubeconfig");
  writeFileSync(
    file,
    JSON.stringify({
      apiVersion: "v1",
      kind: "Config",
      clusters: [{ name: "proxy", cluster: { server: `https://127.0.0.1:${port}`, "certificate-authority-data": cert.toString("base64") } }],
      users: [{ name: "proxy", user: {} }],
      contexts: [{ name: "proxy", context: { cluster: "proxy", user: "proxy" } }],
      "current-context": "proxy",
    }),
  );
  return {
    kubeconfig: file,
    get refused() {
      return refused;
    },
    refuse(predicate, kind = "tooManyRequests") {
      matches = predicate;
      fault = kind;
      if (!predicate) for (const res of held.splice(0)) res.destroy();
    },
    async close() {
      for (const res of held.splice(0)) res.destroy();
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
      rmSync(dir, { recursive: true, force: true });
    },
  };
}
