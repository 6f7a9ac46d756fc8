// The web console in a real browser (Debian's Chromium, through playwright-core) against the real
// API server and a real operator: `kubectl agentrun console` runs as a process with a kubeconfig,
// and the test uses its pages as a person would. What it may do is what that kubeconfig may do.
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { execFileSync } from "node:child_process";
import { request as httpRequest, type IncomingHttpHeaders } from "node:http";
import { request as httpsRequest } from "node:https";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { Browser, Page } from "playwright-core";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { parse as parseYaml } from "yaml";
import { KubeClient, paths, type Json } from "../../operator/kube/client.ts";
import { createLogger } from "../../operator/log.ts";
import { Sandbox } from "../../operator/sandbox/index.ts";
import { createRun, deleteNamespace, getRun, kube, kubeconfigPath, listPods, newNamespace, ofAttempt, runManifest } from "../support/cluster.ts";
import { freePort, startOperator, type OperatorProcess } from "../support/operator-process.ts";
import { setPodPhase } from "../support/sandbox.ts";
import { waitFor } from "../support/wait.ts";
import { serviceAccountToken } from "../../harness/service-account.ts";
import { loadKubeConfig } from "../../operator/cli/plugin/cluster.ts";
import { accessibilityViolations, annotationsOf, launchBrowser, READ_RUNS, readOnlyKubeconfig, screenshotPath, SIGN_IN_LINK, startConsole, tokenKubeconfig, type ConsoleProcess } from "./support.ts";

const quick = { heartbeatTimeout: "30s", backoff: { initial: "1s", factor: 2, max: "4s" } };

let client: KubeClient;
let ns: string;
let operator: OperatorProcess;
let admin: ConsoleProcess;
let browser: Browser;
let dir: string;
let sandboxes: Sandbox[] = [];
let pages: Page[] = [];

beforeAll(async () => {
  client = kube();
  ns = await newNamespace(client, "console");
  operator = await startOperator(ns);
  admin = await startConsole(kubeconfigPath(), ["-n", ns]);
  browser = await launchBrowser();
  dir = mkdtempSync(join(tmpdir(), "agent-watchdog-console-"));
});

afterEach(async (ctx) => {
  for (const s of sandboxes) s.abandon();
  sandboxes = [];
  for (const p of pages) await p.close();
  pages = [];
  if (ctx.task.result?.state === "fail") console.error(admin.output().slice(-3000), operator.logs.slice(-30).join("\n"));
});

afterAll(async () => {
  await browser?.close();
  await admin?.stop();
  await operator?.stop();
  await deleteNamespace(client, ns);
  rmSync(dir, { recursive: true, force: true });
});

/** A browser page that has opened the console's link (so it holds the session cookie). */
async function open(console: ConsoleProcess, route = "#/"): Promise<Page> {
  // bypassCSP: the console forbids inline scripts, and the accessibility check injects one.
  const page = await browser.newPage({ viewport: { width: 1280, height: 900 }, bypassCSP: true });
  pages.push(page);
  await page.goto(console.link);
  await page.goto(`${console.origin}/${route}`);
  await page.getByTestId("live").filter({ hasText: "Live" }).waitFor({ timeout: 15_000 });
  return page;
}

const row = (page: Page, name: string) => page.locator(`tr[data-run="${ns}/${name}"]`);
const card = (page: Page, name: string) => page.locator(`article[data-run="${ns}/${name}"]`);

/** Creates a run and plays its first attempt: the pod Running (the kubelet), the SDK in-process (the sandbox). */
async function runWithSandbox(name: string): Promise<{ pod: any; sandbox: Sandbox }> {
  await createRun(client, ns, runManifest(name, quick));
  const pod = await waitFor(`pod ${name}-1`, async () => (await listPods(client, ns, name)).find(ofAttempt(1)));
  await setPodPhase(client, ns, pod.metadata.name, "Running");
  const env = Object.fromEntries(pod.spec.containers[0].env.map((e: any) => [e.name, e.value]));
  const sandbox = await Sandbox.start({ client: kube(), env, logger: createLogger("silent"), exit: () => {} });
  sandboxes.push(sandbox);
  return { pod, sandbox };
}

/** Drives a run to NeedsHumanIntervention the way it happens: its sandbox dies during a non-idempotent call. */
async function needingAPerson(name: string): Promise<void> {
  const { pod, sandbox } = await runWithSandbox(name);
  let started = false;
  void sandbox
    .tool("charge_card", { cents: 1999 }, () => {
      started = true;
      return new Promise<never>(() => {});
    })
    .catch(() => {});
  await waitFor("the charge to start", () => started);
  sandbox.abandon();
  await setPodPhase(client, ns, pod.metadata.name, "Failed", 137);
  await waitFor(`${name} in NeedsHumanIntervention`, async () => (await getRun(client, ns, name)).status?.phase === "NeedsHumanIntervention");
}

/** A run whose sandbox (in-process) waits for an approval; `answer` is what it gets. */
async function awaitingApproval(name: string, question: string): Promise<{ answer: Promise<string> }> {
  const { sandbox } = await runWithSandbox(name);
  const answer = sandbox.awaitApproval(question);
  answer.catch(() => {});
  await waitFor(`${name}'s request recorded`, async () => {
    const r = await getRun(client, ns, name);
    return r.status?.phase === "AwaitingReply" && r.status.approval?.state === "Pending" && r.status.approval.id;
  });
  // Wrapped: an async function returning the promise itself would wait for the answer.
  return { answer };
}

/** A raw HTTP request to the console, with headers a browser would not let a page set; `ca` trusts its certificate. */
function raw(console: ConsoleProcess, method: string, path: string, headers: Record<string, string>, body?: string, ca?: string): Promise<{ status: number; body: string; headers: IncomingHttpHeaders }> {
  const url = new URL(path, console.origin);
  return new Promise((resolve, reject) => {
    const send = url.protocol === "https:" ? httpsRequest : httpRequest;
    const req = send(url, { method, headers, ...(ca ? { ca } : {}) }, (res) => {
      let text = "";
      res.setEncoding("utf8");
      res.on("data", (c: string) => (text += c));
      res.on("end", () => resolve({ status: res.statusCode ?? 0, body: text, headers: res.headers }));
    });
    req.once("error", reject);
    req.end(body);
  });
}

describe("the session", () => {
  it("refuses requests without its token, under another host name, and cross-site writes", async () => {
    const host = new URL(admin.origin).host;
    const bearer = { Host: host, Authorization: `Bearer ${admin.token}` };
    expect((await raw(admin, "GET", "/", { Host: host })).status).toBe(401);
    expect((await raw(admin, "GET", "/api/session", { Host: host })).status).toBe(401);
    expect((await raw(admin, "GET", "/api/session", { Host: host, Authorization: "Bearer wrong" })).status).toBe(401);
    expect((await raw(admin, "GET", "/?token=wrong", { Host: host })).status).toBe(401);
    const session = await raw(admin, "GET", "/api/session", bearer);
    expect(session.status).toBe(200);
    expect(JSON.parse(session.body)).toMatchObject({ namespace: ns, user: "agent-watchdog-admin" });
    // A page on another site (or a name rebound to this address) gets nothing.
    expect((await raw(admin, "GET", "/api/session", { ...bearer, Host: `evil.example:${new URL(admin.origin).port}` })).status).toBe(403);
    // Writes come only from the console's own pages, as JSON.
    const action = JSON.stringify({ namespace: ns, name: "nothing" });
    const json = { "Content-Type": "application/json" };
    expect((await raw(admin, "POST", "/api/run/resume", { ...bearer, ...json, Origin: "http://evil.example" }, action)).status).toBe(403);
    expect((await raw(admin, "POST", "/api/run/resume", { ...bearer, ...json, Origin: admin.origin, "Sec-Fetch-Site": "cross-site" }, action)).status).toBe(403);
    expect((await raw(admin, "POST", "/api/run/resume", { ...bearer, ...json }, action)).status).toBe(403);
    expect((await raw(admin, "POST", "/api/run/resume", { ...bearer, "Content-Type": "text/plain", Origin: admin.origin }, action)).status).toBe(415);
    // Names that are not Kubernetes names never reach the API server, where they would be paths
    // to other objects; a malformed URL is refused, and the console goes on serving.
    const traversal = "..%2F..%2F..%2F..%2Fapi%2Fv1%2Fnamespaces%2Fkube-system%2Fsecrets%2Fx";
    expect((await raw(admin, "GET", `/api/run/details?namespace=${ns}&name=${traversal}`, bearer)).status).toBe(400);
    expect((await raw(admin, "GET", `/api/run/logs?namespace=..&name=x`, bearer)).status).toBe(400);
    const badBody = JSON.stringify({ namespace: ns, name: "../../../api/v1/namespaces/kube-system/secrets/x" });
    expect((await raw(admin, "POST", "/api/run/resume", { ...bearer, ...json, Origin: admin.origin }, badBody)).status).toBe(400);
    expect((await raw(admin, "GET", "/%E0%A4%A", bearer)).status).toBe(400);
    expect((await raw(admin, "GET", "/api/session", bearer)).status).toBe(200);

    // The link sets the cookie and leaves the address bar without the token.
    const page = await browser.newPage();
    pages.push(page);
    await page.goto(admin.link);
    expect(page.url()).toBe(`${admin.origin}/`);
    const cookies = await page.context().cookies();
    // Named for the port: cookies ignore ports, and a console on another port has its own.
    const port = new URL(admin.origin).port;
    expect(cookies).toEqual([expect.objectContaining({ name: `agentrun_console_${port}`, value: admin.token, httpOnly: true, sameSite: "Strict", path: "/" })]);
  });
});

describe("the runs page", () => {
  it("shows the runs, those needing a person first, and updates live", async () => {
    await createRun(client, ns, runManifest("alpha", quick));
    await needingAPerson("stuck");
    const page = await open(admin);
    await row(page, "alpha").waitFor();
    await row(page, "stuck").waitFor();
    const names = await page.locator("tbody tr").evaluateAll((rows) => rows.map((r) => r.getAttribute("data-run")));
    expect(names.indexOf(`${ns}/stuck`)).toBeLessThan(names.indexOf(`${ns}/alpha`));
    await expect.poll(() => row(page, "stuck").locator('[data-col="phase"]').textContent()).toContain("NeedsHumanIntervention");

    // A run created, changed and deleted while the page is open.
    await createRun(client, ns, runManifest("beta", quick));
    await row(page, "beta").waitFor({ timeout: 10_000 });
    const pod = await waitFor("beta's pod", async () => (await listPods(client, ns, "beta")).find(ofAttempt(1)));
    await setPodPhase(client, ns, pod.metadata.name, "Running");
    await client.mergePatch(paths.runStatus(ns, "beta"), { status: { heartbeat: { time: new Date().toISOString(), attempt: 1, state: "ExecutingTool" } } });
    await expect.poll(() => row(page, "beta").locator('[data-col="phase"]').textContent(), { timeout: 15_000 }).toContain("ExecutingTool");
    await client.delete(paths.run(ns, "beta"));
    await row(page, "beta").waitFor({ state: "detached", timeout: 15_000 });

    expect(await accessibilityViolations(page)).toEqual([]);
    const shot = screenshotPath("runs");
    if (shot) await page.screenshot({ path: shot, fullPage: true });
  });
});

describe("a run's page", () => {
  it("shows its spec, effective settings, conditions and a timeline, live", async () => {
    const page = await open(admin, `#/runs/${ns}/stuck`);
    const main = page.locator("main");
    await main.locator("h1").filter({ hasText: "stuck" }).waitFor({ timeout: 15_000 });
    await expect.poll(() => main.textContent(), { timeout: 15_000 }).toContain("NeedsHumanIntervention");
    const text = (await main.textContent()) ?? "";
    expect(text).toContain("heartbeatTimeout");
    expect(text).toContain("UnconfirmedSideEffect");
    await expect.poll(async () => (await main.textContent()) ?? "", { timeout: 15_000 }).toContain("charge_card");
    expect(await accessibilityViolations(page)).toEqual([]);
    const shot = screenshotPath("run");
    if (shot) await page.screenshot({ path: shot, fullPage: true });
  });
});

describe("a run's budget", () => {
  it("shows the limit nearest to being reached as a bar in the list, and the budget and its breach on the run's page", async () => {
    await createRun(client, ns, runManifest("spender", quick, { budget: { tokens: 100_000 } }));
    const pod = await waitFor("spender's pod", async () => (await listPods(client, ns, "spender")).find(ofAttempt(1)));
    await setPodPhase(client, ns, pod.metadata.name, "Running");
    // What the sandbox's heartbeat reports of the attempt's spending.
    const report = (inputTokens: number, outputTokens: number) =>
      client.mergePatch(paths.runStatus(ns, "spender"), {
        status: { heartbeat: { time: new Date().toISOString(), attempt: 1, state: "Planning", usage: { inputTokens, outputTokens, toolCalls: 0 } } },
      });
    await report(60_000, 22_000);
    const list = await open(admin);
    const cell = row(list, "spender").locator('[data-col="budget"]');
    const meter = cell.getByRole("meter");
    await expect.poll(() => meter.getAttribute("aria-valuenow"), { timeout: 15_000 }).toBe("82");
    expect(await meter.getAttribute("data-level")).toBe("warn");
    expect(await meter.getAttribute("title")).toBe("82000 of 100000 tokens spent");
    expect(await cell.textContent()).toContain("82000/100000 tokens");
    expect(await row(list, "alpha").locator('[data-col="budget"]').textContent()).toBe("-");

    await report(75_000, 25_000);
    await waitFor("spender stopped on its budget", async () => (await getRun(client, ns, "spender")).status?.reason === "BudgetExhausted");
    await expect.poll(() => meter.getAttribute("data-level"), { timeout: 15_000 }).toBe("bad");
    expect(await meter.getAttribute("aria-valuenow")).toBe("100");

    const page = await open(admin, `#/runs/${ns}/spender`);
    const budget = page.locator('section[aria-labelledby="sec-budget"]');
    await expect.poll(() => budget.locator('li[data-limit="tokens"]').textContent(), { timeout: 15_000 }).toContain("100000 of 100000 tokens spent");
    const text = (await budget.textContent()) ?? "";
    expect(text).toContain("Exhausted");
    // Attempt 1 ended with the stop: its spending is folded into status.spent.
    expect(text).toContain("75000 input + 25000 output tokens, 0 tool calls, through attempt 1");
    const flagged = page.locator("ol.timeline li.warning");
    await flagged.filter({ hasText: "BudgetExhausted" }).first().waitFor({ timeout: 15_000 });
    await flagged.filter({ hasText: "BudgetWarning" }).first().waitFor({ timeout: 15_000 });
    expect(await accessibilityViolations(page)).toEqual([]);
    await client.delete(paths.run(ns, "spender"));
  });
});

describe("a run's wall clock", () => {
  it("keeps moving on the run's page between versions of the run, even with the page offline", async () => {
    await createRun(client, ns, runManifest("clocked", quick, { budget: { wallClock: "1h" } }));
    await waitFor("clocked started", async () => typeof (await getRun(client, ns, "clocked")).status?.startTime === "string");
    const page = await open(admin, `#/runs/${ns}/clocked`);
    const budget = page.locator('section[aria-labelledby="sec-budget"]');
    const elapsed = budget.locator("div.field", { has: page.locator("dt", { hasText: /^Elapsed$/ }) }).locator("dd");
    const line = budget.locator('li[data-limit="wallClock"]');
    await expect.poll(() => elapsed.textContent(), { timeout: 15_000 }).toMatch(/ since the first start$/);
    // Offline, no new version of the run can reach the page: what moves, the page moves itself.
    await page.context().setOffline(true);
    const before = { elapsed: await elapsed.textContent(), line: await line.textContent() };
    expect(before.line).toMatch(/ of 1h since the run's first start/);
    await expect.poll(() => elapsed.textContent(), { timeout: 10_000 }).not.toBe(before.elapsed);
    await expect.poll(() => line.textContent(), { timeout: 10_000 }).not.toBe(before.line);
    await page.context().setOffline(false);
    await client.delete(paths.run(ns, "clocked"));
  });
});

describe("the queue", () => {
  it("resumes a run that needs a person, and says what it did", async () => {
    const page = await open(admin, "#/queue");
    const stuck = card(page, "stuck");
    await stuck.waitFor();
    expect(await accessibilityViolations(page)).toEqual([]);
    await stuck.getByRole("button", { name: "Resume" }).click();
    await expect.poll(() => stuck.getByRole("status").textContent(), { timeout: 15_000 }).toContain("resumed");
    // The watchdog acts on it: a new attempt with fresh budgets.
    await waitFor("attempt 2", async () => (await listPods(client, ns, "stuck")).some(ofAttempt(2)));
    expect((await annotationsOf(client, ns, "stuck"))["watchdog.dev/resume"]).toBeDefined();
    await stuck.waitFor({ state: "detached", timeout: 15_000 });
  });

  it("approves a request with an answer, bound to the request it shows", async () => {
    const { answer } = await awaitingApproval("deploy", "Deploy version 2 to production?");
    const page = await open(admin, "#/queue");
    const deploy = card(page, "deploy");
    await expect.poll(() => deploy.textContent(), { timeout: 15_000 }).toContain("Deploy version 2 to production?");
    const shownId = (await getRun(client, ns, "deploy")).status.approval.id;
    const shot = screenshotPath("queue");
    if (shot) await page.screenshot({ path: shot, fullPage: true });
    await deploy.getByLabel("Answer").fill("ship it, carefully");
    await deploy.getByRole("button", { name: "Approve" }).click();
    await expect.poll(() => deploy.getByRole("status").textContent(), { timeout: 15_000 }).toContain("approved request");
    await expect(answer).resolves.toBe("ship it, carefully");
    // The watchdog took the answer for the request the page showed.
    const decided = (await getRun(client, ns, "deploy")).status.approval;
    expect(decided).toMatchObject({ state: "Approved", answer: "ship it, carefully", id: shownId });
  });

  it("rejects a request with a reason; the run fails", async () => {
    const { answer } = await awaitingApproval("drop-table", "Drop the orders table?");
    const page = await open(admin, "#/queue");
    const drop = card(page, "drop-table");
    await drop.waitFor();
    await drop.getByLabel("Reason").fill("not on a Friday");
    await drop.getByRole("button", { name: "Reject" }).click();
    await expect.poll(() => drop.getByRole("status").textContent(), { timeout: 15_000 }).toContain("rejected request");
    await expect(answer).rejects.toThrow(/rejected/);
    await waitFor("drop-table Failed", async () => (await getRun(client, ns, "drop-table")).status?.phase === "Failed");
  });
});

describe("a user who may only read", () => {
  it("sees the runs, and every action refused with the API server's reason; nothing changes", async () => {
    const kubeconfig = await readOnlyKubeconfig(client, ns, parseYaml(readFileSync(kubeconfigPath(), "utf8")) as Json, join(dir, "viewer.json"));
    const viewer = await startConsole(kubeconfig);
    try {
      await needingAPerson("held");
      await awaitingApproval("gate", "Open the gate?");
      const page = await open(viewer, "#/queue");
      const held = card(page, "held");
      await held.waitFor();
      await held.getByRole("button", { name: "Resume" }).click();
      await expect.poll(() => held.getByRole("alert").textContent(), { timeout: 15_000 }).toMatch(/forbidden.*cannot patch resource "agentruns"/);
      const gate = card(page, "gate");
      await gate.getByLabel("Answer").fill("yes");
      await gate.getByRole("button", { name: "Approve" }).click();
      await expect.poll(() => gate.getByRole("alert").textContent(), { timeout: 15_000 }).toMatch(/forbidden/);
      // Nothing was written: the console has no rights beyond the kubeconfig's.
      expect(await annotationsOf(client, ns, "held")).not.toHaveProperty("watchdog.dev/resume");
      expect(await annotationsOf(client, ns, "gate")).not.toHaveProperty("watchdog.dev/approve");
      expect((await getRun(client, ns, "held")).status.phase).toBe("NeedsHumanIntervention");
    } finally {
      await viewer.stop();
    }
  });
});

describe("the console in a cluster (--in-cluster)", () => {
  it("serves each user who signs in as themselves: the API server checks the token, then decides every read and action", async () => {
    const adminConfig = parseYaml(readFileSync(kubeconfigPath(), "utf8")) as Json;
    // The console's own identity may create TokenReviews and nothing else: whatever it shows was
    // read with a user's token.
    const reviewer = `agentrun-console-reviewer-${ns}`;
    const rbac = "/apis/rbac.authorization.k8s.io/v1";
    await client.create(`${rbac}/clusterroles`, { apiVersion: "rbac.authorization.k8s.io/v1", kind: "ClusterRole", metadata: { name: reviewer }, rules: [{ apiGroups: ["authentication.k8s.io"], resources: ["tokenreviews"], verbs: ["create"] }] });
    const selfToken = await serviceAccountToken(client, ns, "console-self", []);
    await client.create(`${rbac}/clusterrolebindings`, {
      apiVersion: "rbac.authorization.k8s.io/v1",
      kind: "ClusterRoleBinding",
      metadata: { name: reviewer },
      roleRef: { apiGroup: "rbac.authorization.k8s.io", kind: "ClusterRole", name: reviewer },
      subjects: [{ kind: "ServiceAccount", name: "console-self", namespace: ns }],
    });
    const self = tokenKubeconfig(adminConfig, ns, "console-self", selfToken, join(dir, "console-self.json"));
    const viewerToken = await serviceAccountToken(client, ns, "console-viewer", READ_RUNS);
    const editorToken = await serviceAccountToken(client, ns, "console-editor", [...READ_RUNS, { apiGroups: ["watchdog.dev"], resources: ["agentruns"], verbs: ["patch"] }]);
    const nobodyToken = await serviceAccountToken(client, ns, "console-nobody", []);
    execFileSync("openssl", ["req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-days", "1", "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", join(dir, "console.key"), "-out", join(dir, "console.crt")], { stdio: "ignore" });
    const ca = readFileSync(join(dir, "console.crt"), "utf8");
    const inCluster = await startConsole(self, ["-n", ns, "--in-cluster", "--tls-cert-file", join(dir, "console.crt"), "--tls-private-key-file", join(dir, "console.key")], SIGN_IN_LINK);
    // bypassCSP: the accessibility check injects a script, which the console forbids.
    const context = await browser.newContext({ ignoreHTTPSErrors: true, bypassCSP: true });
    try {
      expect(inCluster.origin).toMatch(/^https:/);
      await needingAPerson("held-in-cluster");
      const host = new URL(inCluster.origin).host;
      const as = (token: string) => ({ Host: host, Authorization: `Bearer ${token}` });
      const write = { "Content-Type": "application/json", Origin: inCluster.origin };
      const resume = JSON.stringify({ namespace: ns, name: "held-in-cluster" });

      // No token, or one the API server does not accept: nothing; a page is sent to sign in.
      const page0 = await raw(inCluster, "GET", "/", { Host: host }, undefined, ca);
      expect([page0.status, page0.headers.location]).toEqual([303, "./signin"]);
      expect((await raw(inCluster, "GET", "/api/session", { Host: host }, undefined, ca)).status).toBe(401);
      expect((await raw(inCluster, "GET", "/api/session", as("not-a-token"), undefined, ca)).status).toBe(401);
      // The console itself may read no run.
      await expect(new KubeClient(loadKubeConfig({ kubeconfig: self }, {})).get(paths.runs(ns))).rejects.toThrow(/forbidden/);

      // Each user is who the API server says, and may do what RBAC lets them.
      const session = await raw(inCluster, "GET", "/api/session", as(viewerToken), undefined, ca);
      expect(session.status).toBe(200);
      expect(JSON.parse(session.body)).toMatchObject({ user: `system:serviceaccount:${ns}:console-viewer`, namespace: ns });
      const nobody = await raw(inCluster, "GET", `/api/run/details?namespace=${ns}&name=held-in-cluster`, as(nobodyToken), undefined, ca);
      expect(nobody.status).toBe(403);
      expect(nobody.body).toContain(`system:serviceaccount:${ns}:console-nobody`);
      const viewerResume = await raw(inCluster, "POST", "/api/run/resume", { ...as(viewerToken), ...write }, resume, ca);
      expect(viewerResume.status).toBe(403);
      expect(viewerResume.body).toMatch(new RegExp(`console-viewer.*cannot patch resource \\\\?"agentruns`));
      expect(await annotationsOf(client, ns, "held-in-cluster")).not.toHaveProperty("watchdog.dev/resume");
      const editorResume = await raw(inCluster, "POST", "/api/run/resume", { ...as(editorToken), ...write }, resume, ca);
      expect(editorResume.status, editorResume.body).toBe(200);
      expect(await annotationsOf(client, ns, "held-in-cluster")).toHaveProperty("watchdog.dev/resume");

      // Signing in: only from the console's own page, only with a token the API server accepts.
      const form = { Host: host, "Content-Type": "application/x-www-form-urlencoded" };
      expect((await raw(inCluster, "POST", "/signin", { ...form, Origin: "https://evil.example" }, `token=${viewerToken}`, ca)).status).toBe(403);
      expect((await raw(inCluster, "POST", "/signin", { ...form, Origin: inCluster.origin }, "token=not-a-token", ca)).status).toBe(401);

      // In a browser: sent to the sign-in page, signed in, then the runs as that user.
      const page = await context.newPage();
      pages.push(page);
      await page.goto(`${inCluster.origin}/`);
      expect(page.url()).toBe(`${inCluster.origin}/signin`);
      expect(await accessibilityViolations(page)).toEqual([]);
      await page.getByLabel(/Your bearer token/).fill(viewerToken);
      await page.getByRole("button", { name: "Sign in" }).click();
      await page.waitForURL(`${inCluster.origin}/`);
      await page.getByTestId("live").filter({ hasText: "Live" }).waitFor({ timeout: 15_000 });
      await row(page, "held-in-cluster").waitFor({ timeout: 15_000 });
      expect(await page.locator("header").textContent()).toContain("console-viewer");
      // The cookie names a session kept on the server: the token itself never reaches the browser.
      const port = new URL(inCluster.origin).port;
      const cookies = await context.cookies();
      expect(cookies).toEqual([expect.objectContaining({ name: `agentrun_console_${port}`, httpOnly: true, secure: true, sameSite: "Strict" })]);
      expect(cookies[0]!.value).not.toContain(viewerToken.slice(0, 40));
      const cookie = `${cookies[0]!.name}=${cookies[0]!.value}`;
      expect((await raw(inCluster, "GET", "/api/session", { Host: host, Cookie: cookie }, undefined, ca)).status).toBe(200);
      // Signed out, the session is gone.
      expect((await raw(inCluster, "POST", "/signout", { Host: host, Cookie: cookie, Origin: inCluster.origin }, undefined, ca)).status).toBe(303);
      expect((await raw(inCluster, "GET", "/api/session", { Host: host, Cookie: cookie }, undefined, ca)).status).toBe(401);
    } finally {
      await context.close();
      await inCluster.stop();
      await client.delete(`${rbac}/clusterrolebindings/${reviewer}`).catch(() => undefined);
      await client.delete(`${rbac}/clusterroles/${reviewer}`).catch(() => undefined);
    }
  });
});

describe("with no cluster", () => {
  it("says that it cannot reach the API server, in a sentence", async () => {
    // A kubeconfig whose API server is not there: a port nothing listens on.
    const config = parseYaml(readFileSync(kubeconfigPath(), "utf8")) as Json;
    const cluster = (config.clusters as Json[])[0]! as { cluster: { server: string } };
    const port = await freePort();
    cluster.cluster.server = `https://127.0.0.1:${port}`;
    const file = join(dir, "nowhere.json");
    writeFileSync(file, JSON.stringify(config));
    const nowhere = await startConsole(file, ["-n", ns]);
    try {
      const page = await browser.newPage();
      pages.push(page);
      await page.goto(nowhere.link);
      await expect
        .poll(() => page.getByRole("alert").allTextContents().then((t) => t.join(" ")), { timeout: 15_000 })
        .toContain(`cannot reach the Kubernetes API server at https://127.0.0.1:${port}: connection refused`);
      expect(await page.getByTestId("live").textContent()).not.toBe("Live");
    } finally {
      await nowhere.stop();
    }
  });
});

