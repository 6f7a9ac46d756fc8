// The access layer's own bookkeeping: what it asks the API server, how long it trusts an answer,
// and what it keeps. Whether the API server's answers are right is the integration suite's
// (test/integration/serving-access.test.ts, against a real API server).
import { describe, expect, it } from "vitest";
import { bearerToken, KubernetesAccess } from "../../../operator/metrics/access.ts";

type Review = { path: string; body: any };

/** Answers TokenReviews from `users` (token -> username) and SubjectAccessReviews from `allow`. */
function reviewer(users: Record<string, string>, allow: (spec: any) => boolean) {
  const reviews: Review[] = [];
  return {
    reviews,
    async create<T>(path: string, body: any): Promise<T> {
      reviews.push({ path, body });
      if (path.endsWith("/tokenreviews")) {
        const username = users[body.spec.token];
        return { status: username ? { authenticated: true, user: { username, uid: `uid-${username}`, groups: ["team"] } } : { authenticated: false } } as T;
      }
      return { status: { allowed: allow(body.spec), reason: allow(body.spec) ? "bound" : "no binding" } } as T;
    },
  };
}

const historyOf = (name: string) => ({ resource: { verb: "get", group: "watchdog.dev", resource: "agentruns", namespace: "team-a", name } });
const bearer = (token?: string) => ({ headers: token === undefined ? {} : { authorization: `Bearer ${token}` } });

describe("KubernetesAccess", () => {
  it("refuses a request without a bearer token without asking the API server", async () => {
    const api = reviewer({}, () => true);
    const access = new KubernetesAccess(api);
    expect(await access.check(bearer(), historyOf("r"))).toMatchObject({ allowed: false, code: 401 });
    expect(await access.check({ headers: { authorization: "Basic dXNlcjpwYXNz" } }, historyOf("r"))).toMatchObject({ allowed: false, code: 401 });
    expect(api.reviews).toEqual([]);
  });

  it("authenticates with a TokenReview and authorizes the caller it names with a SubjectAccessReview", async () => {
    const api = reviewer({ t1: "alice" }, (spec) => spec.user === "alice" && spec.resourceAttributes?.name === "mine");
    const access = new KubernetesAccess(api);
    expect(await access.check(bearer("t1"), historyOf("mine"))).toEqual({ allowed: true, caller: { username: "alice", uid: "uid-alice", groups: ["team"] } });
    const refused = await access.check(bearer("t1"), historyOf("theirs"));
    expect(refused).toEqual({ allowed: false, code: 403, reason: 'alice may not get agentruns.watchdog.dev "theirs" in namespace "team-a": no binding' });
    expect(await access.check(bearer("forged"), historyOf("mine"))).toMatchObject({ allowed: false, code: 401 });
    const review = api.reviews.find((r) => r.path.endsWith("/subjectaccessreviews"))!;
    expect(review.body.spec).toEqual({ user: "alice", uid: "uid-alice", groups: ["team"], resourceAttributes: historyOf("mine").resource });
    expect((await access.check(bearer("t1"), { nonResource: { verb: "get", path: "/metrics" } })).allowed).toBe(false);
    expect(api.reviews.at(-1)!.body.spec.nonResourceAttributes).toEqual({ verb: "get", path: "/metrics" });
  });

  it("asks once per token and per decision within their lifetimes, and again after", async () => {
    let now = 0;
    const api = reviewer({ t1: "alice" }, () => true);
    const access = new KubernetesAccess(api, { tokenTtlMs: 120_000, decisionTtlMs: 10_000 }, () => now);
    for (let i = 0; i < 50; i++) await access.check(bearer("t1"), historyOf("mine"));
    expect(api.reviews.map((r) => r.path.split("/").at(-1))).toEqual(["tokenreviews", "subjectaccessreviews"]);
    now = 10_001; // the decision expires first: a revoked binding counts within seconds
    await access.check(bearer("t1"), historyOf("mine"));
    expect(api.reviews.map((r) => r.path.split("/").at(-1))).toEqual(["tokenreviews", "subjectaccessreviews", "subjectaccessreviews"]);
    now = 120_001;
    await access.check(bearer("t1"), historyOf("mine"));
    expect(api.reviews.filter((r) => r.path.endsWith("/tokenreviews"))).toHaveLength(2);
  });

  it("remembers a refused token only briefly, and never keeps a token itself", async () => {
    let now = 0;
    const users: Record<string, string> = {};
    const api = reviewer(users, () => true);
    const access = new KubernetesAccess(api, { tokenTtlMs: 120_000, decisionTtlMs: 10_000 }, () => now);
    expect(await access.check(bearer("new-token"), historyOf("mine"))).toMatchObject({ code: 401 });
    users["new-token"] = "bob"; // e.g. a token the API server did not know yet
    now = 10_001;
    expect(await access.check(bearer("new-token"), historyOf("mine"))).toMatchObject({ allowed: true });
    const kept = [...(access as any).tokens.entries.keys(), ...(access as any).decisions.entries.keys()].join(" ");
    expect(kept).not.toContain("new-token");
    expect(kept).toMatch(/^[0-9a-f]{64} /); // the token's hash
  });

  it("bounds each cache", async () => {
    const api = reviewer(Object.fromEntries(Array.from({ length: 20 }, (_, i) => [`t${i}`, `user${i}`])), () => true);
    const access = new KubernetesAccess(api, { maxEntries: 5 });
    for (let i = 0; i < 20; i++) await access.check(bearer(`t${i}`), historyOf("mine"));
    api.reviews.length = 0;
    await access.check(bearer("t0"), historyOf("mine")); // long evicted: asked again
    await access.check(bearer("t19"), historyOf("mine")); // still cached
    expect(api.reviews.map((r) => r.body.spec.token ?? r.body.spec.user)).toEqual(["t0", "user0"]);
  });

  it("reads a bearer token only from a well-formed Authorization header", () => {
    expect(bearerToken({ headers: { authorization: "Bearer abc.def" } })).toBe("abc.def");
    expect(bearerToken({ headers: { authorization: "bearer abc" } })).toBe("abc");
    expect(bearerToken({ headers: { authorization: "Bearer" } })).toBeUndefined();
    expect(bearerToken({ headers: { authorization: "Bearer a b" } })).toBeUndefined();
    expect(bearerToken({ headers: {} })).toBeUndefined();
  });
});
