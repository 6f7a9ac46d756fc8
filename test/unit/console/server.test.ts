// The console's HTTP server, listening for real, with a stub Kubernetes API behind it (no
// cluster): every route checks the names it is given before any API path is built from them, a
// malformed request gets its 4xx and the server goes on serving, and the session cookie is this
// port's own.
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { request as httpRequest } from "node:http";
import { connect } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
import { parse } from "../../../operator/cli/plugin/args.ts";
import { Context } from "../../../operator/cli/plugin/commands.ts";
import { Guard } from "../../../operator/console/guard.ts";
import { LinkGate } from "../../../operator/console/gate.ts";
import { MAX_BODY, MAX_URL } from "../../../operator/console/request.ts";
import { listenConsole, type ListeningConsole } from "../../../operator/console/serve.ts";
import { paths } from "../../../operator/kube/client.ts";
import { run } from "../fixtures.ts";
import { stubApi, type StubApi } from "../stub-api.ts";

const TOKEN = "unit-test-token";

let api: StubApi;
let uiDir: string;
let consoles: ListeningConsole[] = [];
let main: ListeningConsole;

async function startConsole(token = TOKEN): Promise<ListeningConsole> {
  const parsed = parse(["console", "--kubeconfig", api.kubeconfig], {});
  if (!("invocation" in parsed)) throw new Error("not an invocation");
  const ctx = new Context(parsed.invocation, {}, { out: () => undefined, err: () => undefined });
  const listening = await listenConsole({ gate: new LinkGate(new Guard(token), ctx), uiDir }, "127.0.0.1", 0);
  consoles.push(listening);
  return listening;
}

beforeAll(async () => {
  const r = run();
  r.metadata.namespace = "team-a";
  // Its status (which sandboxes write too) names a "pod" that is a path to something else.
  const podPath = run({ status: { phase: "Planning", podName: "../../../../api/v1/namespaces/kube-system/secrets/x" } });
  podPath.metadata.namespace = "team-a";
  podPath.metadata.name = "pod-path";
  api = stubApi({ [paths.run("team-a", "r")]: r, [paths.run("team-a", "pod-path")]: podPath, [paths.events("team-a")]: { items: [] } });
  uiDir = mkdtempSync(join(tmpdir(), "agent-watchdog-console-ui-"));
  writeFileSync(join(uiDir, "index.html"), "<!doctype html><title>console</title>");
  main = await startConsole();
});

afterAll(async () => {
  for (const c of consoles) {
    c.server.closeAllConnections();
    await new Promise((resolve) => c.server.close(resolve));
  }
  consoles = [];
  api?.restore();
  rmSync(uiDir, { recursive: true, force: true });
});

beforeEach(() => {
  api.calls.length = 0;
});

interface Answer {
  status: number;
  headers: Record<string, string | string[] | undefined>;
  body: string;
}

const hostOf = (c: ListeningConsole) => `127.0.0.1:${c.port}`;
const bearer = (c: ListeningConsole = main) => ({ Host: hostOf(c), Authorization: `Bearer ${TOKEN}` });
const write = (c: ListeningConsole = main) => ({ ...bearer(c), Origin: `http://${hostOf(c)}`, "Content-Type": "application/json" });

/** One request, its path sent exactly as given; an event stream is cut off once its headers came. */
function send(path: string, headers: Record<string, string> = bearer(), method = "GET", body?: string, c: ListeningConsole = main): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const req = httpRequest({ host: "127.0.0.1", port: c.port, method, path, headers: { Connection: "close", ...headers } }, (res) => {
      if (String(res.headers["content-type"]).startsWith("text/event-stream")) {
        resolve({ status: res.statusCode ?? 0, headers: res.headers, body: "" });
        return void req.destroy();
      }
      let text = "";
      res.setEncoding("utf8");
      res.on("data", (chunk: string) => (text += chunk));
      res.on("end", () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body: text }));
    });
    // A server that died answers nothing: fail at once rather than at the test's timeout.
    req.setTimeout(5000, () => req.destroy(new Error(`no answer to ${method} ${path.slice(0, 80)} within 5s`)));
    req.once("error", reject);
    req.end(body);
  });
}

/** Bytes on a socket, for what no HTTP client would send (a NUL in the request line); the status line's code. */
function sendRaw(bytes: string, c: ListeningConsole = main): Promise<number> {
  return new Promise((resolve, reject) => {
    const socket = connect(c.port, "127.0.0.1", () => socket.end(bytes));
    let text = "";
    socket.setEncoding("latin1");
    socket.on("data", (chunk: string) => (text += chunk));
    socket.once("error", reject);
    socket.once("close", () => resolve(Number(/^HTTP\/1\.1 (\d{3})/.exec(text)?.[1] ?? 0)));
  });
}

/** The server is still there and still answers a good request. */
async function expectStillServing() {
  const session = await send("/api/session");
  expect(session.status).toBe(200);
  expect(JSON.parse(session.body)).toMatchObject({ context: "stub" });
}

describe("the console's routes", () => {
  const ns = "team-a";
  const query = (namespace: string, name?: string) => `namespace=${namespace}${name === undefined ? "" : `&name=${name}`}`;
  const badRuns: [string, string][] = [
    ["a name that walks up the path", query(ns, "../../../../api/v1/namespaces/kube-system/secrets/x")],
    ["a name with an encoded slash", query(ns, "..%2F..%2F..%2Fapi%2Fv1%2Fnamespaces%2Fkube-system%2Fsecrets%2Fx")],
    ["a name that is only dots", query(ns, "..")],
    ["a name with encoded dots", query(ns, "%2E%2E")],
    ["a name with a query of its own", query(ns, "r%3Fwatch%3Dtrue")],
    ["a name that adds a field selector", query(ns, "r%2Cmetadata.namespace%3Dkube-system")],
    ["a name with a NUL", query(ns, "r%00")],
    ["a name with a capital", query(ns, "R")],
    ["a name with an empty part", query(ns, "r..x")],
    ["a name that starts with a dot", query(ns, ".r")],
    ["a name of 254 characters", query(ns, "a".repeat(254))],
    ["an empty name", query(ns, "")],
    ["no name", query(ns)],
    ["a namespace that walks up the path", query("..%2F..%2Fapi%2Fv1%2Fnamespaces%2Fkube-system", "r")],
    ["a namespace with a slash", query("kube-system/secrets", "r")],
    ["a namespace with a dot (a subdomain, not a label)", query("team.a", "r")],
    ["a namespace that ends with a dash", query("team-", "r")],
    ["a namespace of 64 characters", query("a".repeat(64), "r")],
    ["an empty namespace", query("", "r")],
    ["an absurdly long name", query(ns, "a".repeat(3000))],
  ];
  const routes = ["/api/run/details", "/api/run/logs", "/api/stream/run"];

  it.each(routes.flatMap((route) => badRuns.map(([what, q]) => [route, what, q] as const)))("%s refuses %s with 400, asking the API nothing", async (route, _, q) => {
    const answer = await send(`${route}?${q}`);
    expect(answer.status).toBe(400);
    expect(JSON.parse(answer.body).message).toMatch(/^(namespace|name): not a/);
    expect(api.calls).toEqual([]);
  });

  it.each([
    ["a namespace that walks up the path", "..%2Fkube-system"],
    ["a namespace with a slash", "a/b"],
    ["a namespace with a capital", "Team-a"],
  ])("the runs stream refuses %s with 400, asking the API nothing", async (_, namespace) => {
    const answer = await send(`/api/stream/runs?namespace=${namespace}`);
    expect(answer.status).toBe(400);
    expect(api.calls).toEqual([]);
  });

  it.each([
    ["resume", { namespace: ns, name: "../../../api/v1/namespaces/kube-system/secrets/x" }],
    ["resume", { namespace: "kube-system/secrets", name: "r" }],
    ["approve", { namespace: ns, name: "r/status", approvalId: "1-a" }],
    ["reject", { namespace: "..", name: "r", approvalId: "1-a" }],
    ["approve", { namespace: ns, name: ["r"], approvalId: "1-a" }],
  ])("an action (%s %j) on a bad name gets 400, asking the API nothing", async (action, body) => {
    const answer = await send(`/api/run/${action}`, write(), "POST", JSON.stringify(body));
    expect(answer.status).toBe(400);
    expect(api.calls).toEqual([]);
  });

  it("reads a sandbox's logs only from a pod whose name the run's status gives as a pod name", async () => {
    const logs = await send(`/api/run/logs?${query(ns, "pod-path")}`);
    expect(logs.status).toBe(200);
    expect(JSON.parse(logs.body).message).toMatch(/names no valid pod/);
    expect(api.calls).toEqual([{ method: "GET", path: paths.run(ns, "pod-path") }]);
  });

  it("hands good names to the API: the longest a namespace and a run may have, too", async () => {
    const details = await send(`/api/run/details?${query(ns, "r")}`);
    expect(details.status).toBe(200);
    expect(api.calls[0]).toEqual({ method: "GET", path: paths.run(ns, "r") });

    const [longNs, longName] = ["n".repeat(63), `${"a".repeat(63)}.${"b".repeat(63)}.${"c".repeat(63)}.${"d".repeat(61)}`];
    expect(longName).toHaveLength(253);
    expect((await send(`/api/run/logs?${query(longNs, longName)}`)).status).toBe(404);
    expect(api.calls).toContainEqual({ method: "GET", path: paths.run(longNs, longName) });

    expect((await send(`/api/stream/run?${query(ns, "r.v2")}`)).status).toBe(200);
    expect((await send(`/api/stream/runs?namespace=${ns}`)).status).toBe(200);
    expect((await send("/api/stream/runs")).status).toBe(200);
    expect(api.calls.map((c) => c.path)).toEqual(expect.arrayContaining([paths.runs(ns), paths.runs()]));
  });
});

describe("a malformed request", () => {
  it.each([
    ["a truncated percent-escape", "/%E0%A4%A"],
    ["a percent-escape that is not hex", "/assets/%zz.js"],
    ["a bad percent-escape under /api/", "/api/run/details%zz?namespace=team-a&name=r"],
    ["an encoded NUL", "/index.html%00.png"],
    ["an encoded control character", "/%1b%5b2J"],
    ["an absurdly long path", `/${"a".repeat(MAX_URL)}`],
    ["a path the URL parser refuses", "//"],
  ])("%s gets 400, and the server serves the next request", async (_, path) => {
    const answer = await send(path);
    expect(answer.status).toBe(400);
    expect(JSON.parse(answer.body)).toHaveProperty("message");
    await expectStillServing();
  });

  it("a NUL in the request line gets 400, and the server serves the next request", async () => {
    expect(await sendRaw(`GET /\0 HTTP/1.1\r\nHost: ${hostOf(main)}\r\nAuthorization: Bearer ${TOKEN}\r\n\r\n`)).toBe(400);
    await expectStillServing();
  });

  it("an action whose body is not JSON gets 400, one too large 413, and the server serves the next request", async () => {
    const bad = await send("/api/run/resume", write(), "POST", '{"namespace": "team-a", "name": "r"');
    expect(bad.status).toBe(400);
    expect(JSON.parse(bad.body).message).toMatch(/^the request is not valid JSON/);
    const large = await send("/api/run/resume", write(), "POST", JSON.stringify({ namespace: "team-a", name: "r", reason: "x".repeat(MAX_BODY) }));
    expect(large.status).toBe(413);
    expect(api.calls).toEqual([]);
    await expectStillServing();
  });
});

describe("the session cookie", () => {
  it("carries the console's port, and is HttpOnly, SameSite=Strict and for the whole site", async () => {
    const link = await send(`/?token=${TOKEN}`, { Host: hostOf(main) });
    expect(link.status).toBe(303);
    expect(link.headers["set-cookie"]).toEqual([`agentrun_console_${main.port}=${TOKEN}; HttpOnly; SameSite=Strict; Path=/`]);
  });

  it("is accepted only under this console's port's name", async () => {
    const own = `agentrun_console_${main.port}`;
    const withCookie = (cookie: string) => send("/api/session", { Host: hostOf(main), Cookie: cookie });
    expect((await withCookie(`${own}=${TOKEN}`)).status).toBe(200);
    expect((await withCookie(`agentrun_console_${main.port + 1}=${TOKEN}`)).status).toBe(401);
    expect((await withCookie(`agentrun_console=${TOKEN}`)).status).toBe(401);
    expect((await withCookie(`x${own}=${TOKEN}`)).status).toBe(401);
    // A cookie of the same name set by another server on this host (sent first, for its longer
    // Path) does not lock the user out, and grants nothing by itself.
    expect((await withCookie(`${own}=planted; ${own}=${TOKEN}`)).status).toBe(200);
    expect((await withCookie(`${own}=planted`)).status).toBe(401);
  });

  it("of a second console on another port is not the first console's, and neither overwrites the other", async () => {
    const other = await startConsole("another-token");
    const cookieOf = async (c: ListeningConsole, token: string) => {
      const link = await send(`/?token=${token}`, { Host: hostOf(c) }, "GET", undefined, c);
      return (link.headers["set-cookie"] as string[])[0]!.split(";")[0]!;
    };
    const first = await cookieOf(main, TOKEN);
    const second = await cookieOf(other, "another-token");
    expect(first.split("=")[0]).not.toBe(second.split("=")[0]);
    // The browser sends both consoles' cookies to each of them: each takes only its own.
    const both = `${first}; ${second}`;
    expect((await send("/api/session", { Host: hostOf(main), Cookie: both })).status).toBe(200);
    expect((await send("/api/session", { Host: hostOf(other), Cookie: both }, "GET", undefined, other)).status).toBe(200);
    expect((await send("/api/session", { Host: hostOf(main), Cookie: second })).status).toBe(401);
    expect((await send("/api/session", { Host: hostOf(other), Cookie: first }, "GET", undefined, other)).status).toBe(401);
  });
});
