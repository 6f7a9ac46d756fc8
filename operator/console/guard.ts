// Who may talk to the console. It acts with the user's own kubeconfig, so anyone who can reach it
// could act as the user: it answers only requests that carry its session token (printed in the
// link it shows, then kept in a cookie that only this origin sends), only under a Host name of
// its own (a web page cannot rebind a name of its own to this address), and writes only from its
// own pages (the browser's Origin and Sec-Fetch-Site say where a request comes from).
import { timingSafeEqual } from "node:crypto";
import type { IncomingMessage } from "node:http";

export interface Verdict {
  ok: boolean;
  status?: number;
  message?: string;
}

export class Guard {
  readonly token: string;
  private cookieName = "";
  /** Every host:port this console is reached at; none until it listens. */
  private hosts = new Set<string>();

  constructor(token: string) {
    this.token = token;
  }

  /** The console listens on `port`, reached under the host names `hosts`. */
  listening(port: number, hosts: readonly string[]): void {
    // Cookies are per host, not per port: two consoles on one machine must not share one.
    this.cookieName = `agentrun_console_${port}`;
    this.hosts = new Set(hosts.map((h) => `${h}:${port}`));
  }

  sameToken(candidate: string | undefined): boolean {
    if (!candidate) return false;
    const a = Buffer.from(candidate);
    const b = Buffer.from(this.token);
    return a.length === b.length && timingSafeEqual(a, b);
  }

  /** The session token the request carries: its cookie, or an Authorization: Bearer header. */
  private presented(req: IncomingMessage): string | undefined {
    const auth = req.headers.authorization;
    if (auth?.startsWith("Bearer ")) return auth.slice("Bearer ".length).trim();
    for (const part of (req.headers.cookie ?? "").split(";")) {
      const [name, ...value] = part.trim().split("=");
      if (name === this.cookieName) return value.join("=");
    }
    return undefined;
  }

  hostAllowed(req: IncomingMessage): boolean {
    return this.hosts.has((req.headers.host ?? "").toLowerCase());
  }

  /** Any request: a Host of ours, and the session token. */
  check(req: IncomingMessage): Verdict {
    if (!this.hostAllowed(req)) return { ok: false, status: 403, message: `this console does not answer for the host "${req.headers.host ?? ""}"` };
    if (!this.sameToken(this.presented(req))) {
      return { ok: false, status: 401, message: "This console needs the session link that kubectl agentrun console printed (it carries the session token)." };
    }
    return { ok: true };
  }

  /** A write: also from this console's own pages, as JSON. */
  checkWrite(req: IncomingMessage): Verdict {
    const site = req.headers["sec-fetch-site"];
    const origin = req.headers.origin;
    if ((site !== undefined && site !== "same-origin") || origin === undefined || origin.toLowerCase() !== `http://${(req.headers.host ?? "").toLowerCase()}`) {
      return { ok: false, status: 403, message: "cross-site request refused: actions are taken only from the console's own pages" };
    }
    if (!(req.headers["content-type"] ?? "").startsWith("application/json")) {
      return { ok: false, status: 415, message: "actions are sent as application/json" };
    }
    return { ok: true };
  }

  /** The cookie that keeps the session once the link has been opened. */
  cookie(): string {
    return `${this.cookieName}=${this.token}; HttpOnly; SameSite=Strict; Path=/`;
  }
}
