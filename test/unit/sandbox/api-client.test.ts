// The SDK's own API client against a local HTTP server standing in for the API server: the
// requests it sends (method, path, query, content type, credentials), the errors it throws, and
// the watch (events split across chunks, a clean close, silence, an abort).
import { execFileSync } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import { KubeConfig } from "@kubernetes/client-node";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import type { Connection } from "../../../operator/api/service-account.ts";
import { ApiClient, ApiError, apiErrorCode, defaultSource, isNotFound, isTransient, retryAfterMs, runPaths, type Json } from "../../../operator/sandbox/api-client.ts";
import { ApiError as OperatorApiError } from "../../../operator/kube/client.ts";

interface Seen {
  method: string;
  url: URL;
  headers: IncomingMessage["headers"];
  body: string;
}

let server: Server;
let seen: Seen[];
let handle: (req: Seen, res: ServerResponse) => void;

beforeEach(async () => {
  seen = [];
  server = createServer((req, res) => {
    let body = "";
    req.on("data", (chunk: Buffer) => (body += chunk.toString()));
    req.on("end", () => {
      const request = { method: req.method ?? "", url: new URL(req.url ?? "/", "http://x"), headers: req.headers, body };
      seen.push(request);
      handle(request, res);
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
});

afterEach(async () => {
  server.closeAllConnections();
  await new Promise((resolve) => server.close(resolve));
});

function client(token = "t0k3n"): ApiClient {
  const kc = new KubeConfig();
  const { port } = server.address() as AddressInfo;
  kc.loadFromOptions({
    clusters: [{ name: "c", server: `http://127.0.0.1:${port}`, skipTLSVerify: true }],
    users: [{ name: "u", token }],
    contexts: [{ name: "x", cluster: "c", user: "u" }],
    currentContext: "x",
  });
  return new ApiClient(kc);
}

const json = (res: ServerResponse, code: number, body: unknown) => {
  res.writeHead(code, { "Content-Type": "application/json" });
  res.end(JSON.stringify(body));
};

describe("requests", () => {
  it("reads its run as JSON, with the kubeconfig's credentials", async () => {
    handle = (_req, res) => json(res, 200, { metadata: { name: "r" } });
    expect(await client().get(runPaths.run("ns", "r"))).toEqual({ metadata: { name: "r" } });
    expect(seen[0]).toMatchObject({ method: "GET", url: expect.objectContaining({ pathname: "/apis/watchdog.dev/v1alpha1/namespaces/ns/agentruns/r" }) });
    expect(seen[0]!.headers.authorization).toBe("Bearer t0k3n");
    expect(seen[0]!.headers.accept).toBe("application/json");
  });

  it("sends status writes as JSON merge patches, with the query (the field manager)", async () => {
    handle = (_req, res) => json(res, 200, { status: {} });
    await client().mergePatch(runPaths.status("ns", "r"), { status: { heartbeat: { attempt: 1 } } }, { fieldManager: "agent-watchdog-sandbox", skip: undefined });
    const [req] = seen;
    expect(req!.method).toBe("PATCH");
    expect(req!.url.pathname).toBe("/apis/watchdog.dev/v1alpha1/namespaces/ns/agentruns/r/status");
    expect([...req!.url.searchParams]).toEqual([["fieldManager", "agent-watchdog-sandbox"]]);
    expect(req!.headers["content-type"]).toBe("application/merge-patch+json");
    expect(JSON.parse(req!.body)).toEqual({ status: { heartbeat: { attempt: 1 } } });
  });

  it("throws an ApiError with the HTTP status and the Status reason", async () => {
    handle = (_req, res) => json(res, 404, { kind: "Status", reason: "NotFound", message: 'agentruns "r" not found' });
    const err = await client().get(runPaths.run("ns", "r")).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ApiError);
    expect(err).toMatchObject({ code: 404, reason: "NotFound" });
    expect(String(err)).toContain('agentruns "r" not found');
    expect(isNotFound(err)).toBe(true);
  });

  it("keeps a plain-text error body as the message", async () => {
    handle = (_req, res) => {
      res.writeHead(503, { "Content-Type": "text/plain" });
      res.end("etcd is down\n");
    };
    const err = await client().get("/x").catch((e: unknown) => e);
    expect(err).toMatchObject({ code: 503 });
    expect(String(err)).toContain("etcd is down");
    expect(isTransient(err)).toBe(true);
  });

  it("keeps the server's Retry-After on the error", async () => {
    handle = (_req, res) => {
      res.writeHead(429, { "Content-Type": "application/json", "Retry-After": "7" });
      res.end(JSON.stringify({ kind: "Status", reason: "TooManyRequests", message: "too many requests" }));
    };
    const err = await client().mergePatch("/x", {}).catch((e: unknown) => e);
    expect(err).toMatchObject({ code: 429, retryAfterSeconds: 7 });
  });

  it("tries a 401 once more with credentials read afresh (a rotated token)", async () => {
    handle = (req, res) => (seen.length === 1 ? json(res, 401, { reason: "Unauthorized" }) : json(res, 200, { ok: req.headers.authorization }));
    expect(await client().get("/x")).toEqual({ ok: "Bearer t0k3n" });
    expect(seen).toHaveLength(2);
  });
});

describe("in a pod", () => {
  const dirs: string[] = [];
  afterEach(() => dirs.splice(0).forEach((dir) => rmSync(dir, { recursive: true, force: true })));
  function serviceAccount(token: string): string {
    const dir = mkdtempSync(join(tmpdir(), "sa-"));
    dirs.push(dir);
    writeFileSync(join(dir, "token"), `${token}\n`);
    writeFileSync(join(dir, "ca.crt"), "");
    return dir;
  }

  it("takes the service account's address, CA and token when there is no kubeconfig, and reads a rotated token after a 401", async () => {
    const dir = serviceAccount("first");
    const env = { KUBERNETES_SERVICE_HOST: "fd00::1", KUBERNETES_SERVICE_PORT: "6443", HOME: dir };
    expect(defaultSource(env, dir)).toMatchObject({ server: "https://[fd00::1]:6443", ca: Buffer.from("") });
    const { port } = server.address() as AddressInfo;
    const source = defaultSource(env, dir) as Connection;
    const api = new ApiClient({ ...source, server: `http://127.0.0.1:${port}` });
    handle = (req, res) => (req.headers.authorization === "Bearer first" ? json(res, 401, { reason: "Unauthorized" }) : json(res, 200, { ok: req.headers.authorization }));
    expect(await api.get("/x").catch((e: unknown) => e)).toMatchObject({ code: 401 });
    writeFileSync(join(dir, "token"), "rotated\n");
    expect(await api.get("/x")).toEqual({ ok: "Bearer rotated" });
    // Each 401 is tried once more with the token read afresh: the first time it has not changed yet.
    expect(seen.map((r) => r.headers.authorization)).toEqual(["Bearer first", "Bearer first", "Bearer first", "Bearer rotated"]);
  });

  it("prefers a kubeconfig, as kubectl does", () => {
    const dir = serviceAccount("t");
    const kubeconfig = join(dir, "config");
    writeFileSync(kubeconfig, "apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: 'https://example.test:1'}}]\nusers: [{name: u, user: {token: x}}]\ncontexts: [{name: x, context: {cluster: c, user: u}}]\ncurrent-context: x\n");
    // client-node reads the process's own environment.
    const saved = process.env.KUBECONFIG;
    process.env.KUBECONFIG = kubeconfig;
    try {
      const source = defaultSource({ KUBERNETES_SERVICE_HOST: "10.0.0.1", KUBECONFIG: kubeconfig, HOME: dir }, dir) as KubeConfig;
      expect(source.getCurrentCluster()?.server).toBe("https://example.test:1");
    } finally {
      if (saved === undefined) delete process.env.KUBECONFIG;
      else process.env.KUBECONFIG = saved;
    }
  });

  it("never loads @kubernetes/client-node, whose import is most of a sandbox's start-up CPU", () => {
    const dir = serviceAccount("t");
    const script = `
      import { registerHooks } from "node:module";
      const loaded = [];
      registerHooks({ resolve(specifier, context, next) { if (specifier.includes("client-node")) loaded.push(specifier); return next(specifier, context); } });
      const { ApiClient, defaultSource } = await import(${JSON.stringify(pathToFileURL(join(import.meta.dirname, "../../../operator/sandbox/api-client.ts")).href)});
      await import(${JSON.stringify(pathToFileURL(join(import.meta.dirname, "../../../operator/sandbox/index.ts")).href)});
      const api = new ApiClient(defaultSource(process.env, ${JSON.stringify(dir)}));
      await api.get("/x").catch(() => {});
      console.log(JSON.stringify(loaded));`;
    const env = { PATH: process.env.PATH, HOME: dir, KUBERNETES_SERVICE_HOST: "127.0.0.1", KUBERNETES_SERVICE_PORT: "1" };
    const out = execFileSync(process.execPath, ["--no-warnings", "--input-type=module", "-e", script], { env, encoding: "utf8", timeout: 60_000 });
    expect(JSON.parse(out.trim().split("\n").at(-1) as string)).toEqual([]);
  });
});

describe("errors", () => {
  it("recognises API errors by shape, so errors of the operator's client count alike", () => {
    expect(apiErrorCode(new ApiError("GET", "/x", 409, {}))).toBe(409);
    expect(apiErrorCode(new OperatorApiError("GET", "/x", 404, {}))).toBe(404);
    expect(isNotFound(new OperatorApiError("GET", "/x", 404, {}))).toBe(true);
    expect(apiErrorCode(new TypeError("fetch failed"))).toBeUndefined();
  });

  it("retries the network, 401, 408, 409, 429 and 5xx, and nothing else", () => {
    const e = (code: number) => new ApiError("PATCH", "/x", code, {});
    expect(isTransient(new TypeError("fetch failed"))).toBe(true);
    for (const code of [401, 408, 409, 429, 500, 503]) expect(isTransient(e(code)), String(code)).toBe(true);
    for (const code of [400, 403, 404, 413, 422]) expect(isTransient(e(code)), String(code)).toBe(false);
  });

  it("does not retry a 5xx that is the storage's size limit: the same request would fail again", () => {
    expect(isTransient(new ApiError("PATCH", "/x", 500, { message: "etcdserver: request is too large" }))).toBe(false);
    expect(isTransient(new OperatorApiError("PATCH", "/x", 500, { message: "etcdserver: request is too large" }))).toBe(false);
    expect(isTransient(new ApiError("PATCH", "/x", 500, { message: "etcdserver: leader changed" }))).toBe(true);
  });

  it("reads the wait a refusal asks for from its Retry-After or its Status details", () => {
    expect(retryAfterMs(new ApiError("PATCH", "/x", 429, {}, "3"))).toBe(3000);
    expect(retryAfterMs(new ApiError("PATCH", "/x", 429, { details: { retryAfterSeconds: 2 } }))).toBe(2000);
    expect(retryAfterMs(new ApiError("PATCH", "/x", 429, { details: { retryAfterSeconds: "soon" } }))).toBeUndefined();
    expect(retryAfterMs(new TypeError("fetch failed"))).toBeUndefined();
  });
});

describe("the watch", () => {
  const events = (...list: { type: string; object: Json }[]) => list.map((e) => `${JSON.stringify(e)}\n`).join("");

  function watch(api: ApiClient, inactivityMs?: number) {
    const got: [string, Json][] = [];
    const done = new Promise<unknown>((resolve) => {
      void api.watch(runPaths.runs("ns"), { fieldSelector: "metadata.name=r", resourceVersion: "5" }, (type, object) => got.push([type, object]), resolve, inactivityMs);
    });
    return { got, done };
  }

  it("watches with the query, hands over each event, even split across chunks, and ends with null on a clean close", async () => {
    handle = (_req, res) => {
      res.writeHead(200, { "Content-Type": "application/json" });
      const text = events({ type: "MODIFIED", object: { metadata: { name: "r" }, status: { attempt: 2 } } }, { type: "DELETED", object: { metadata: { name: "r" } } });
      res.write(text.slice(0, 17));
      setTimeout(() => res.end(`${text.slice(17)}not json\n`), 20);
    };
    const { got, done } = watch(client());
    expect(await done).toBeNull();
    expect(got).toEqual([
      ["MODIFIED", { metadata: { name: "r" }, status: { attempt: 2 } }],
      ["DELETED", { metadata: { name: "r" } }],
    ]);
    const query = Object.fromEntries(seen[0]!.url.searchParams);
    expect(query).toEqual({ fieldSelector: "metadata.name=r", resourceVersion: "5", watch: "true" });
  });

  it("ends with an ApiError when the server refuses the watch", async () => {
    handle = (_req, res) => json(res, 403, { reason: "Forbidden", message: "no" });
    const { done } = watch(client());
    expect(await done).toMatchObject({ code: 403, reason: "Forbidden" });
  });

  it("gives up on a watch that carries nothing for the inactivity timeout", async () => {
    handle = (_req, res) => res.writeHead(200, { "Content-Type": "application/json" }).flushHeaders();
    const { done } = watch(client(), 200);
    expect(String(await done)).toContain("nothing received for 200 ms");
  });

  it("stops when aborted", async () => {
    handle = (_req, res) => res.writeHead(200, { "Content-Type": "application/json" }).flushHeaders();
    let ended: unknown = "not yet";
    const abort = await client().watch(runPaths.runs("ns"), {}, () => {}, (err) => (ended = err));
    await new Promise((resolve) => setTimeout(resolve, 50));
    abort.abort();
    await new Promise((resolve) => setTimeout(resolve, 50));
    expect(ended).not.toBe("not yet");
  });
});
