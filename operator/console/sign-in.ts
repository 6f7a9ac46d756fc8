// The console in a cluster serves many people, each as themselves. A request carries the user's
// own bearer token: in an Authorization header (set by an authenticating proxy in front, such as
// oauth2-proxy with the cluster's OIDC issuer), or signed in once at /signin and then kept here,
// on the server, behind a random session cookie (the token never goes back to the browser). The
// API server says whose token it is (TokenReview, through the operator's access layer, cached two
// minutes, so a revoked token stops working within that), and every read and action is then made
// with that very token: RBAC and admission decide as they do for kubectl, and the console's own
// identity needs no permission but `create tokenreviews`.
import { createHash, randomBytes } from "node:crypto";
import type { IncomingMessage } from "node:http";
import { KubeConfig } from "@kubernetes/client-node";
import type { Invocation } from "../cli/plugin/args.ts";
import { Cluster } from "../cli/plugin/cluster.ts";
import { Context, type Io } from "../cli/plugin/commands.ts";
import { bearerToken, ExpiringCache, type Caller } from "../metrics/access.ts";
import type { Admission, Answer, Gate } from "./gate.ts";
import { checkWrite, cookieValues, fromOwnPage, type Verdict } from "./guard.ts";
import { BadRequest, readBody } from "./request.ts";
import { signInPage } from "./sign-in-page.ts";

/** Who vouches for a token: the operator's access layer (TokenReview, cached). */
export interface Authenticator {
  authenticate(token: string): Promise<Caller | undefined>;
}

export interface SignInOptions {
  /** The console's own kubeconfig: the API server to send users' requests to, and its CA. */
  base: KubeConfig;
  authenticator: Authenticator;
  inv: Invocation;
  env: NodeJS.ProcessEnv;
  now?: () => number;
  /** How long a signed-in session lasts, at most (the token's own expiry ends it sooner). */
  sessionTtlMs?: number;
  /** At most this many sessions, and connections kept for users; the oldest go first. */
  maxSessions?: number;
}

const SESSION_TTL_MS = 8 * 60 * 60 * 1000;
const MAX_SESSIONS = 10_000;
const MAX_FORM = 16 * 1024;
const SIGN_IN_FIRST = "Sign in first: this console acts as you, with your own token (open /signin).";
const SILENT: Io = { out: () => undefined, err: () => undefined };
// The sign-in page's form must carry its Origin, which a browser replaces with "null" under the
// console's no-referrer policy; this page has nothing in its URL to hide from its own origin.
const FORM_PAGE = { "Referrer-Policy": "same-origin" };

const hashOf = (token: string) => createHash("sha256").update(token).digest("hex");

/** A kubeconfig for the base one's cluster, as the user whose bearer token this is. */
export function kubeconfigAs(base: KubeConfig, token: string, user: string): KubeConfig {
  const cluster = base.getCurrentCluster();
  if (!cluster) throw new Error("the console's kubeconfig names no cluster");
  const kc = new KubeConfig();
  kc.loadFromOptions({
    clusters: [cluster],
    users: [{ name: user, token }],
    contexts: [{ name: "signed-in", cluster: cluster.name, user }],
    currentContext: "signed-in",
  });
  return kc;
}

export class SignInGate implements Gate {
  private readonly options: SignInOptions;
  private readonly now: () => number;
  private readonly ttl: number;
  /** Session id to the token it stands for, until the session ends. */
  private readonly sessions: ExpiringCache<string>;
  /** A connection per token (by its hash), so a user's requests share kept-alive connections. */
  private readonly clusters: ExpiringCache<Cluster>;
  private cookieName = "agentrun_console";

  constructor(options: SignInOptions) {
    this.options = options;
    this.now = options.now ?? Date.now;
    this.ttl = options.sessionTtlMs ?? SESSION_TTL_MS;
    this.sessions = new ExpiringCache(options.maxSessions ?? MAX_SESSIONS);
    this.clusters = new ExpiringCache(options.maxSessions ?? MAX_SESSIONS);
  }

  /** The console listens on `port`: its cookie is named for it, as the link's is (any host name will do: the token is the proof). */
  listening(port: number): void {
    this.cookieName = `agentrun_console_${port}`;
  }

  async route(req: IncomingMessage, url: URL): Promise<Answer | undefined> {
    if (url.pathname === "/signin" && req.method === "GET") return { status: 200, headers: FORM_PAGE, html: signInPage() };
    if (url.pathname === "/signin" && req.method === "POST") return this.signIn(req);
    if (url.pathname === "/signout" && req.method === "POST") {
      if (!fromOwnPage(req)) return { status: 403, json: { message: "cross-site request refused" } };
      for (const id of this.presentedSessions(req)) this.sessions.delete(id);
      return { status: 303, headers: { "Set-Cookie": `${this.cookieName}=; HttpOnly; Secure; SameSite=Strict; Path=/; Max-Age=0`, Location: "./signin" } };
    }
    return undefined;
  }

  private async signIn(req: IncomingMessage): Promise<Answer> {
    // Only the console's own page signs in: another site must not sign a person in as someone else.
    if (!fromOwnPage(req)) return { status: 403, headers: FORM_PAGE, html: signInPage("This sign-in did not come from the console's own page.") };
    const form = await readForm(req);
    const token = (form.get("token") ?? "").trim();
    if (!token) return { status: 400, headers: FORM_PAGE, html: signInPage("Paste a token to sign in.") };
    const caller = await this.options.authenticator.authenticate(token);
    if (!caller) return { status: 401, headers: FORM_PAGE, html: signInPage("The API server did not accept this token.") };
    const id = randomBytes(32).toString("base64url");
    this.sessions.set(id, token, this.now() + this.ttl);
    const maxAge = Math.floor(this.ttl / 1000);
    return { status: 303, headers: { "Set-Cookie": `${this.cookieName}=${id}; HttpOnly; Secure; SameSite=Strict; Path=/; Max-Age=${maxAge}`, Location: "./" } };
  }

  /** Every session id the request's cookies carry under this console's name. */
  private presentedSessions(req: IncomingMessage): string[] {
    return cookieValues(req, this.cookieName);
  }

  /** The request's token: its Authorization header's, else that of a live session of its cookies. */
  private tokenOf(req: IncomingMessage): { token: string; session?: string } | undefined {
    const bearer = bearerToken(req);
    if (bearer) return { token: bearer };
    const now = this.now();
    for (const id of this.presentedSessions(req)) {
      const token = this.sessions.get(id, now);
      if (token !== undefined) return { token, session: id };
    }
    return undefined;
  }

  async admit(req: IncomingMessage): Promise<Admission> {
    const presented = this.tokenOf(req);
    if (!presented) return { ok: false, status: 401, message: SIGN_IN_FIRST, signIn: true };
    const caller = await this.options.authenticator.authenticate(presented.token);
    if (!caller) {
      if (presented.session) this.sessions.delete(presented.session);
      return { ok: false, status: 401, message: "The API server no longer accepts your token: sign in again (open /signin).", signIn: true };
    }
    const key = hashOf(presented.token);
    const now = this.now();
    let cluster = this.clusters.get(key, now);
    if (!cluster) {
      cluster = new Cluster(kubeconfigAs(this.options.base, presented.token, caller.username), this.options.inv.namespace);
      this.clusters.set(key, cluster, now + this.ttl);
    }
    const ctx = new Context(this.options.inv, this.options.env, SILENT, this.now, cluster);
    return { ok: true, ctx, user: caller.username, context: "in-cluster" };
  }

  checkWrite(req: IncomingMessage): Verdict {
    return checkWrite(req);
  }
}

/** A url-encoded form of at most MAX_FORM bytes. */
async function readForm(req: IncomingMessage): Promise<URLSearchParams> {
  if (!(req.headers["content-type"] ?? "").startsWith("application/x-www-form-urlencoded")) {
    throw new BadRequest(415, "signing in takes a form (application/x-www-form-urlencoded)");
  }
  return new URLSearchParams(await readBody(req, MAX_FORM));
}
