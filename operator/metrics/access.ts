// Who may read what the operator serves, decided by the API server, as kube-rbac-proxy and
// controller-runtime's secure metrics serving decide it: the caller's bearer token is
// authenticated with a TokenReview, and the request is authorized with a SubjectAccessReview for
// that caller. The operator holds no list of users or roles of its own, so RBAC stays the one
// place where access is granted, and `kubectl auth can-i` tells the truth about it.
//
// Answers are cached briefly (tokens for two minutes, decisions for ten seconds, both bounded in
// count) so that a flood of requests costs the API server at most one review per caller and
// question in that window, and a revoked RoleBinding takes effect within seconds.
import { createHash } from "node:crypto";
import type { IncomingMessage } from "node:http";
import type { KubeClient } from "../kube/client.ts";
import { frontProxyCaller, type FrontProxyTrust } from "./front-proxy.ts";

/** What of a request decides who sent it: its headers, and the connection it came on. */
export type AccessRequest = Pick<IncomingMessage, "headers"> & Partial<Pick<IncomingMessage, "socket">>;

export interface Caller {
  username: string;
  uid?: string;
  groups: string[];
  extra?: Record<string, string[]>;
}

/** What a request asks for, in the terms of a SubjectAccessReview. */
export type AccessAttributes =
  | { resource: { verb: string; group: string; resource: string; namespace: string; name?: string; subresource?: string } }
  | { nonResource: { verb: string; path: string } };

export type AccessDecision =
  | { allowed: true; caller: Caller }
  | { allowed: false; code: 401 | 403; reason: string };

export interface AccessOptions {
  /** How long an authenticated token is trusted without a new TokenReview. */
  tokenTtlMs: number;
  /** How long an authorization decision, either way, is reused. */
  decisionTtlMs: number;
  /** At most this many entries in each cache; the oldest go first. */
  maxEntries: number;
  /** Audiences the token must be for; empty means the API server's own. */
  audiences: string[];
}

export const ACCESS_DEFAULTS: AccessOptions = { tokenTtlMs: 120_000, decisionTtlMs: 10_000, maxEntries: 4_096, audiences: [] };

/** A map whose entries expire and whose size is bounded; insertion order is age order. */
export class ExpiringCache<V> {
  private readonly entries = new Map<string, { value: V; until: number }>();
  private readonly maxEntries: number;
  constructor(maxEntries: number) {
    this.maxEntries = maxEntries;
  }
  get(key: string, now: number): V | undefined {
    const hit = this.entries.get(key);
    if (!hit) return undefined;
    if (hit.until > now) return hit.value;
    this.entries.delete(key);
    return undefined;
  }
  set(key: string, value: V, until: number): void {
    this.entries.delete(key);
    this.entries.set(key, { value, until });
    while (this.entries.size > this.maxEntries) this.entries.delete(this.entries.keys().next().value as string);
  }
  delete(key: string): void {
    this.entries.delete(key);
  }
}

/** The bearer token of a request, or undefined; any other scheme counts as none. */
export function bearerToken(req: Pick<IncomingMessage, "headers">): string | undefined {
  const header = req.headers.authorization;
  const match = typeof header === "string" ? /^Bearer\s+(\S+)\s*$/i.exec(header) : null;
  return match?.[1];
}

export class KubernetesAccess {
  private readonly tokens: ExpiringCache<Caller | null>;
  private readonly decisions: ExpiringCache<{ allowed: boolean; reason: string }>;
  private readonly options: AccessOptions;
  private readonly client: Pick<KubeClient, "create">;
  private readonly now: () => number;
  /** When set, a request the API server proxies (an aggregated API's) is from the user it names. */
  frontProxy: FrontProxyTrust | undefined;

  constructor(client: Pick<KubeClient, "create">, options: Partial<AccessOptions> = {}, now: () => number = Date.now) {
    this.client = client;
    this.options = { ...ACCESS_DEFAULTS, ...options };
    this.now = now;
    this.tokens = new ExpiringCache(this.options.maxEntries);
    this.decisions = new ExpiringCache(this.options.maxEntries);
  }

  /**
   * Authenticates the request (the user the API server vouches for as front proxy, else the
   * bearer token's), then asks whether the caller may do what `attributes` say.
   */
  async check(req: AccessRequest, attributes: AccessAttributes): Promise<AccessDecision> {
    let caller = this.frontProxy ? frontProxyCaller(req, this.frontProxy) : undefined;
    if (!caller) {
      const token = bearerToken(req);
      if (!token) return { allowed: false, code: 401, reason: "a bearer token is required (Authorization: Bearer ...)" };
      caller = await this.authenticate(token);
      if (!caller) return { allowed: false, code: 401, reason: "the token was not accepted by the API server" };
    }
    const decision = await this.authorize(caller, attributes);
    if (!decision.allowed) return { allowed: false, code: 403, reason: `${caller.username} may not ${describe(attributes)}${decision.reason ? `: ${decision.reason}` : ""}` };
    return { allowed: true, caller };
  }

  async authenticate(token: string): Promise<Caller | undefined> {
    // The cache is keyed by the token's hash: the token itself is never kept.
    const key = createHash("sha256").update(token).digest("hex");
    const now = this.now();
    const cached = this.tokens.get(key, now);
    if (cached !== undefined) return cached ?? undefined;
    const review = await this.client.create<{ status?: { authenticated?: boolean; user?: Caller; error?: string } }>("/apis/authentication.k8s.io/v1/tokenreviews", {
      apiVersion: "authentication.k8s.io/v1",
      kind: "TokenReview",
      spec: { token, ...(this.options.audiences.length ? { audiences: this.options.audiences } : {}) },
    });
    const user = review.status?.authenticated && review.status.user?.username ? review.status.user : undefined;
    const caller: Caller | null = user ? { username: user.username, groups: user.groups ?? [], ...(user.uid ? { uid: user.uid } : {}), ...(user.extra ? { extra: user.extra } : {}) } : null;
    // A refused token is remembered for a shorter time than an accepted one: a token that was
    // only not yet valid gets in soon.
    this.tokens.set(key, caller, now + (caller ? this.options.tokenTtlMs : Math.min(this.options.tokenTtlMs, this.options.decisionTtlMs)));
    return caller ?? undefined;
  }

  async authorize(caller: Caller, attributes: AccessAttributes): Promise<{ allowed: boolean; reason: string }> {
    const key = JSON.stringify([caller.username, caller.uid ?? "", [...caller.groups].sort(), caller.extra ?? {}, attributes]);
    const now = this.now();
    const cached = this.decisions.get(key, now);
    if (cached) return cached;
    const review = await this.client.create<{ status?: { allowed?: boolean; denied?: boolean; reason?: string; evaluationError?: string } }>(
      "/apis/authorization.k8s.io/v1/subjectaccessreviews",
      {
        apiVersion: "authorization.k8s.io/v1",
        kind: "SubjectAccessReview",
        spec: {
          user: caller.username,
          groups: caller.groups,
          ...(caller.uid ? { uid: caller.uid } : {}),
          ...(caller.extra ? { extra: caller.extra } : {}),
          ...("resource" in attributes ? { resourceAttributes: attributes.resource } : { nonResourceAttributes: attributes.nonResource }),
        },
      },
    );
    const decision = { allowed: review.status?.allowed === true, reason: review.status?.reason ?? review.status?.evaluationError ?? "" };
    this.decisions.set(key, decision, now + this.options.decisionTtlMs);
    return decision;
  }
}

function describe(attributes: AccessAttributes): string {
  if ("nonResource" in attributes) return `${attributes.nonResource.verb} ${attributes.nonResource.path}`;
  const r = attributes.resource;
  const what = `${r.resource}${r.subresource ? `/${r.subresource}` : ""}${r.group ? `.${r.group}` : ""}`;
  return `${r.verb} ${what}${r.name ? ` ${JSON.stringify(r.name)}` : ""} in namespace ${JSON.stringify(r.namespace)}`;
}
