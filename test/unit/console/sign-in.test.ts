// The in-cluster console's way in, without a cluster: who a request is from, signing in and out,
// and what becomes of a session whose token the API server stops accepting.
import type { IncomingMessage } from "node:http";
import { Readable } from "node:stream";
import { KubeConfig } from "@kubernetes/client-node";
import { describe, expect, it } from "vitest";
import { parse } from "../../../operator/cli/plugin/args.ts";
import { escapeHtml, signInPage } from "../../../operator/console/sign-in-page.ts";
import { kubeconfigAs, SignInGate } from "../../../operator/console/sign-in.ts";
import type { Caller } from "../../../operator/metrics/access.ts";

const HOST = "console.example:8443";
const ORIGIN = `https://${HOST}`;

function base(): KubeConfig {
  const kc = new KubeConfig();
  kc.loadFromOptions({
    clusters: [{ name: "c", server: "https://api.example:6443", caData: "Q0E=" }],
    users: [{ name: "console", token: "console-own-token" }],
    contexts: [{ name: "ctx", cluster: "c", user: "console" }],
    currentContext: "ctx",
  });
  return kc;
}

/** An authenticator that knows the tokens in `users`, and counts what it was asked. */
function authenticator(users: Map<string, string>) {
  const asked: string[] = [];
  return {
    asked,
    authenticate: (token: string): Promise<Caller | undefined> => {
      asked.push(token);
      const username = users.get(token);
      return Promise.resolve(username ? { username, groups: ["system:authenticated"] } : undefined);
    },
  };
}

function gate(users: Map<string, string>, now = () => 0) {
  const parsed = parse(["console", "--in-cluster"], {});
  if (!("invocation" in parsed)) throw new Error("not an invocation");
  const auth = authenticator(users);
  const g = new SignInGate({ base: base(), authenticator: auth, inv: parsed.invocation, env: {}, now, sessionTtlMs: 60_000 });
  g.listening(8443);
  return { gate: g, auth };
}

function request(method: string, headers: Record<string, string>, body = ""): IncomingMessage {
  const req = Readable.from([Buffer.from(body)]) as unknown as IncomingMessage;
  req.method = method;
  req.headers = { host: HOST, ...Object.fromEntries(Object.entries(headers).map(([k, v]) => [k.toLowerCase(), v])) };
  return req;
}

const url = (path: string) => new URL(path, ORIGIN);
const signInForm = (token: string, origin = ORIGIN) => request("POST", { "content-type": "application/x-www-form-urlencoded", origin }, new URLSearchParams({ token }).toString());
const sessionCookie = (setCookie: string) => setCookie.split(";")[0]!;

describe("the in-cluster console's gate", () => {
  it("admits a request by its bearer token, as the user the API server names, and refuses any other", async () => {
    const { gate: g } = gate(new Map([["alice-token", "alice"]]));
    const alice = await g.admit(request("GET", { authorization: "Bearer alice-token" }));
    expect(alice).toMatchObject({ ok: true, user: "alice", context: "in-cluster" });
    if (!alice.ok) throw new Error("refused");
    // Every call it makes carries alice's token to the console's own API server.
    expect(alice.ctx.cluster.server).toBe("https://api.example:6443");
    expect(alice.ctx.cluster.userName).toBe("alice");
    expect(await g.admit(request("GET", {}))).toMatchObject({ ok: false, status: 401, signIn: true });
    expect(await g.admit(request("GET", { authorization: "Bearer mallory-token" }))).toMatchObject({ ok: false, status: 401, signIn: true });
    expect(await g.admit(request("GET", { authorization: "Basic YWxpY2U6cHc=" }))).toMatchObject({ ok: false, status: 401 });
  });

  it("signs in only from its own page and only with a token the API server accepts; the cookie names a session, not the token", async () => {
    const { gate: g } = gate(new Map([["alice-token", "alice"]]));
    // Its page lets the form send its Origin (the console's no-referrer policy would make it "null").
    expect(await g.route(request("GET", {}), url("/signin"))).toMatchObject({ status: 200, headers: { "Referrer-Policy": "same-origin" } });
    expect(await g.route(signInForm("alice-token", "https://evil.example"), url("/signin"))).toMatchObject({ status: 403 });
    expect(await g.route(signInForm("wrong"), url("/signin"))).toMatchObject({ status: 401 });
    expect(await g.route(signInForm(""), url("/signin"))).toMatchObject({ status: 400 });
    const signedIn = await g.route(signInForm("alice-token"), url("/signin"));
    expect(signedIn).toMatchObject({ status: 303, headers: { Location: "./" } });
    const setCookie = signedIn!.headers!["Set-Cookie"]!;
    expect(setCookie).toMatch(/^agentrun_console_8443=[\w-]{43}; HttpOnly; Secure; SameSite=Strict; Path=\/; Max-Age=60$/);
    expect(setCookie).not.toContain("alice-token");
    expect(await g.admit(request("GET", { cookie: `other=1; ${sessionCookie(setCookie)}` }))).toMatchObject({ ok: true, user: "alice" });
    // A cookie of that name that is no session, or a console's on another port, grants nothing.
    expect(await g.admit(request("GET", { cookie: "agentrun_console_8443=forged" }))).toMatchObject({ ok: false, status: 401 });
    expect(await g.admit(request("GET", { cookie: sessionCookie(setCookie).replace("8443", "8444") }))).toMatchObject({ ok: false, status: 401 });
  });

  it("ends a session when signed out, when it expires, and when the API server stops accepting its token", async () => {
    const users = new Map([["alice-token", "alice"]]);
    let now = 0;
    const { gate: g } = gate(users, () => now);
    const cookieOf = async () => sessionCookie((await g.route(signInForm("alice-token"), url("/signin")))!.headers!["Set-Cookie"]!);

    const out = await cookieOf();
    expect(await g.route(request("POST", { cookie: out, origin: "https://evil.example" }), url("/signout"))).toMatchObject({ status: 403 });
    expect(await g.admit(request("GET", { cookie: out }))).toMatchObject({ ok: true });
    expect(await g.route(request("POST", { cookie: out, origin: ORIGIN }), url("/signout"))).toMatchObject({ status: 303, headers: { Location: "./signin" } });
    expect(await g.admit(request("GET", { cookie: out }))).toMatchObject({ ok: false, status: 401 });

    const expiring = await cookieOf();
    now = 60_001;
    expect(await g.admit(request("GET", { cookie: expiring }))).toMatchObject({ ok: false, status: 401 });

    const revoked = await cookieOf();
    users.delete("alice-token");
    expect(await g.admit(request("GET", { cookie: revoked }))).toMatchObject({ ok: false, status: 401, message: expect.stringMatching(/no longer accepts/) });
    users.set("alice-token", "alice");
    // The session went with the token: accepted again, it still needs a new sign-in.
    expect(await g.admit(request("GET", { cookie: revoked }))).toMatchObject({ ok: false, status: 401 });
  });

  it("asks for a form, and refuses one too large", async () => {
    const { gate: g } = gate(new Map());
    await expect(g.route(request("POST", { "content-type": "application/json", origin: ORIGIN }, "{}"), url("/signin"))).rejects.toMatchObject({ status: 415 });
    await expect(g.route(request("POST", { "content-type": "application/x-www-form-urlencoded", origin: ORIGIN }, `token=${"x".repeat(20_000)}`), url("/signin"))).rejects.toMatchObject({ status: 413 });
  });

  it("takes no ledger URL: history is read through the API server as each user", () => {
    expect(() => parse(["console", "--in-cluster"], { DATABASE_URL: "postgres://u:p@db/ledger" })).toThrow(/--in-cluster takes no ledger URL/);
    expect(() => parse(["console", "--tls-cert-file", "c.pem"], {})).toThrow(/go together/);
  });
});

describe("the sign-in page", () => {
  it("shows a problem as text, never as markup", () => {
    expect(escapeHtml(`<script>alert("x")</script>&'`)).toBe("&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;&amp;&#39;");
    const page = signInPage("<img src=x onerror=alert(1)>");
    expect(page).not.toContain("<img");
    expect(page).toContain("&lt;img src=x onerror=alert(1)&gt;");
    expect(page).not.toMatch(/<script/);
  });
});

describe("a signed-in user's kubeconfig", () => {
  it("is the console's cluster and CA with the user's token, and nothing of the console's own identity", () => {
    const kc = kubeconfigAs(base(), "alice-token", "alice");
    expect(kc.getCurrentCluster()).toMatchObject({ server: "https://api.example:6443", caData: "Q0E=" });
    expect(kc.getCurrentUser()).toMatchObject({ name: "alice", token: "alice-token" });
    expect(JSON.stringify(kc.users)).not.toContain("console-own-token");
  });
});
