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
  /** The session cookie's name, which carries the port; none until the console listens. */
  private cookieName: string | undefined;
  /** Every host:port this console is reached at; none until it listens. */
  private hosts = new Set<string>();

  constructor(token: string) {
    this.token = token;
  }

  /** The console listens on `port`, reached under the host names `hosts`. */
  listening(port: number, hosts: readonly string[]): void {
    // Cookies are per host, not per port: the browser sends every cookie of 127.0.0.1 to every
    // port of it. Named for the port, a console's cookie is never overwritten by, or taken for,
    // that of a console on another port.
    this.cookieName = `agentrun_console_${port}`;
    this.hosts = new Set(hosts.map((h) => `${h}:${port}`));
  }

  sameToken(candidate: string | undefined): boolean {
    if (!candidate) return false;
    const a = Buffer.from(candidate);
    const b = Buffer.from(this.token);
    return a.length === b.length && timingSafeEqual(a, b);
  }

  /**
   * The session tokens the request carries: an Authorization: Bearer header, or this port's
   * cookie. Every cookie of that name counts: another server on this host can set one (with a
   * longer Path, so that browsers send it first), and that must not lock the user out.
   */
  private presented(req: IncomingMessage): string[] {
    const auth = req.headers.authorization;
    if (auth?.startsWith("Bearer ")) return [auth.slice("Bearer ".length).trim()];
    return this.cookieName === undefined ? [] : cookieValues(req, this.cookieName);
  }

  hostAllowed(req: IncomingMessage): boolean {
    return this.hosts.has((req.headers.host ?? "").toLowerCase());
  }

  /** Any request: a Host of ours, and the session token. */
  check(req: IncomingMessage): Verdict {
    if (!this.hostAllowed(req)) return { ok: false, status: 403, message: `this console does not answer for the host "${req.headers.host ?? ""}"` };
    if (!this.presented(req).some((token) => this.sameToken(token))) {
      return { ok: false, status: 401, message: "This console needs the session link that kubectl agentrun console printed (it carries the session token)." };
    }
    return { ok: true };
  }

  /** A write: also from this console's own pages, as JSON. */
  checkWrite(req: IncomingMessage): Verdict {
    return checkWrite(req);
  }

  /** The cookie that keeps the session once the link has been opened: never readable by scripts, never sent cross-site. */
  cookie(): string {
    if (this.cookieName === undefined) throw new Error("the console has no session cookie before it listens");
    return `${this.cookieName}=${this.token}; HttpOnly; SameSite=Strict; Path=/`;
  }
}

/** Every value the request's cookies carry under `name` (another server on the host may have set one too). */
export function cookieValues(req: Pick<IncomingMessage, "headers">, name: string): string[] {
  const values: string[] = [];
  for (const part of (req.headers.cookie ?? "").split(";")) {
    const [key, ...value] = part.trim().split("=");
    if (key === name) values.push(value.join("="));
  }
  return values;
}

/**
 * Whether the request comes from the console's own pages: the browser's Origin names the host the
 * request was sent to (its scheme may differ, behind a proxy that ends TLS), and Sec-Fetch-Site,
 * when sent, says same-origin. A page of another site can send neither.
 */
export function fromOwnPage(req: Pick<IncomingMessage, "headers">): boolean {
  const site = req.headers["sec-fetch-site"];
  const host = (req.headers.host ?? "").toLowerCase();
  return (site === undefined || site === "same-origin") && host !== "" && originHost(req.headers.origin) === host;
}

/** A write: from the console's own pages, as JSON. */
export function checkWrite(req: Pick<IncomingMessage, "headers">): Verdict {
  if (!fromOwnPage(req)) return { ok: false, status: 403, message: "cross-site request refused: actions are taken only from the console's own pages" };
  if (!(req.headers["content-type"] ?? "").startsWith("application/json")) {
    return { ok: false, status: 415, message: "actions are sent as application/json" };
  }
  return { ok: true };
}

function originHost(origin: string | undefined): string | undefined {
  if (origin === undefined) return undefined;
  try {
    const url = new URL(origin);
    return url.protocol === "http:" || url.protocol === "https:" ? url.host.toLowerCase() : undefined;
  } catch {
    return undefined;
  }
}
