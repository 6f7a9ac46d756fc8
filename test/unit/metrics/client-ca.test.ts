// The metrics port asks for client certificates of the CA it is given (the API server's
// front-proxy CA), tells routes whether a connection showed one, and takes up a rotated CA
// without a restart: a certificate of the new CA is accepted and one of the old no longer is.
import { execFileSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import type { Server } from "node:http";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { TLSSocket } from "node:tls";
import { Agent, fetch as undiciFetch } from "undici";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { listen, type Route } from "../../../operator/metrics/server.ts";
import { waitFor } from "../../support/wait.ts";

const dir = mkdtempSync(join(tmpdir(), "aw-client-ca-"));
const openssl = (...args: string[]) => execFileSync("openssl", args, { stdio: "ignore" });
const EC = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"];

/** A CA, and a client certificate it signed with common name `cn`. */
function clientOf(name: string, cn: string) {
  const f = (ext: string) => join(dir, `${name}.${ext}`);
  openssl("req", "-x509", ...EC, "-days", "1", "-subj", `/CN=${name}-ca`, "-keyout", f("ca.key"), "-out", f("ca.crt"));
  openssl("req", ...EC, "-subj", `/CN=${cn}`, "-keyout", f("key"), "-out", f("csr"));
  openssl("x509", "-req", "-in", f("csr"), "-CA", f("ca.crt"), "-CAkey", f("ca.key"), "-CAcreateserial", "-days", "1", "-out", f("crt"));
  return { ca: readFileSync(f("ca.crt"), "utf8"), cert: readFileSync(f("crt"), "utf8"), key: readFileSync(f("key"), "utf8") };
}

describe("client certificates on the metrics port", () => {
  let server: Server;
  let port: number;
  let trusted: string | undefined;
  const serving = join(dir, "serving");
  const first = clientOf("first", "front-proxy-client");
  const second = clientOf("second", "front-proxy-client");

  beforeAll(async () => {
    openssl("req", "-x509", ...EC, "-days", "1", "-subj", "/CN=metrics", "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", `${serving}.key`, "-out", `${serving}.crt`);
    trusted = first.ca;
    const answer: Route = (req, res) => {
      const socket = req.socket as TLSSocket;
      res.writeHead(200).end(socket.authorized ? `authorized ${String(socket.getPeerCertificate().subject?.CN)}` : "anonymous");
      return true;
    };
    server = (await listen("127.0.0.1:0", [answer], { certFile: `${serving}.crt`, keyFile: `${serving}.key`, clientCa: () => trusted, reloadIntervalMs: 50 })) as Server;
    port = (server.address() as AddressInfo).port;
  });

  afterAll(async () => {
    await new Promise((resolve) => server?.close(resolve));
    rmSync(dir, { recursive: true, force: true });
  });

  async function as(client?: { cert: string; key: string }): Promise<string> {
    const dispatcher = new Agent({ connect: { ca: readFileSync(`${serving}.crt`), ...(client ? { cert: client.cert, key: client.key } : {}) } });
    try {
      return await (await undiciFetch(`https://127.0.0.1:${port}/`, { dispatcher })).text();
    } finally {
      await dispatcher.close();
    }
  }

  it("serves everyone, and marks only a certificate of the trusted CA as authorized", async () => {
    expect(await as()).toBe("anonymous");
    expect(await as(first)).toBe("authorized front-proxy-client");
    expect(await as(second)).toBe("anonymous");
  });

  it("takes up a rotated CA without a restart", async () => {
    trusted = second.ca;
    await waitFor("the new CA to be trusted", async () => ((await as(second)) === "authorized front-proxy-client" ? true : undefined), { timeoutMs: 10_000 });
    expect(await as(first)).toBe("anonymous");
  });
});
