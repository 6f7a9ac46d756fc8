// Who a request to the console is from, and as whom the console acts for it. There are two ways
// in, one per way the console runs:
// - the link (`kubectl agentrun console` where kubectl runs): the session token of the printed
//   link, and the kubeconfig's user for every read and action (LinkGate, below, with guard.ts);
// - signing in (the console in a cluster, sign-in.ts): the user's own bearer token, which the API
//   server vouches for (TokenReview), and every read and action made with that token.
import type { IncomingMessage } from "node:http";
import type { Context } from "../cli/plugin/commands.ts";
import type { Guard, Verdict } from "./guard.ts";

export type Admission =
  | { ok: true; ctx: Context; user: string; context: string }
  /** `signIn`: a person can get in by signing in (a page is sent there rather than refused). */
  | { ok: false; status: number; message: string; signIn?: boolean };

/** What the server sends for a route of the gate's own (with its security headers). */
export interface Answer {
  status: number;
  headers?: Record<string, string>;
  json?: unknown;
  html?: string;
}

export interface Gate {
  /** The console listens on `port`, reached under the host names `hosts`. */
  listening(port: number, hosts: readonly string[]): void;
  /** The answer to a route of the gate's own (opening the link, signing in and out), or undefined. */
  route(req: IncomingMessage, url: URL): Promise<Answer | undefined>;
  /** Who the request is from, as the context to act with; or why it is refused. */
  admit(req: IncomingMessage): Promise<Admission>;
  /** Whether a write (an action) comes from the console's own pages. */
  checkWrite(req: IncomingMessage): Verdict;
}

/** The laptop's console: the printed link's token, then the kubeconfig's user for everything. */
export class LinkGate implements Gate {
  private readonly guard: Guard;
  private readonly ctx: Context;

  constructor(guard: Guard, ctx: Context) {
    this.guard = guard;
    this.ctx = ctx;
  }

  listening(port: number, hosts: readonly string[]): void {
    this.guard.listening(port, hosts);
  }

  route(req: IncomingMessage, url: URL): Promise<Answer | undefined> {
    // Opening the printed link: the token becomes a cookie, and leaves the address bar.
    if (req.method !== "GET" || url.pathname !== "/" || !url.searchParams.has("token")) return Promise.resolve(undefined);
    if (!this.guard.hostAllowed(req) || !this.guard.sameToken(url.searchParams.get("token") ?? undefined)) {
      return Promise.resolve({ status: 401, json: { message: "This link's session token is not this console's: open the link kubectl agentrun console printed." } });
    }
    return Promise.resolve({ status: 303, headers: { "Set-Cookie": this.guard.cookie(), Location: "/" } });
  }

  admit(req: IncomingMessage): Promise<Admission> {
    const verdict = this.guard.check(req);
    if (!verdict.ok) return Promise.resolve({ ok: false, status: verdict.status ?? 401, message: verdict.message ?? "refused" });
    const cluster = this.ctx.cluster;
    return Promise.resolve({ ok: true, ctx: this.ctx, user: cluster.userName, context: this.ctx.inv.context ?? cluster.contextName });
  }

  checkWrite(req: IncomingMessage): Verdict {
    return this.guard.checkWrite(req);
  }
}
