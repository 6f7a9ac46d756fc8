// Driving the console as its users do: `kubectl agentrun console` as a process with a kubeconfig,
// and a real browser (Debian's Chromium through playwright-core) on the link it prints.
import { spawn, type ChildProcess } from "node:child_process";
import { existsSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { chromium, type Browser, type Page } from "playwright-core";
import { paths, type Json, type KubeClient } from "../../operator/kube/client.ts";
import { serviceAccountToken } from "../../harness/service-account.ts";
import { waitFor } from "../support/wait.ts";

const root = fileURLToPath(new URL("../..", import.meta.url));

export interface ConsoleProcess {
  child: ChildProcess;
  /** The printed link, with its session token (or, in a cluster, the sign-in page's). */
  link: string;
  /** http://host:port, or https:// when it serves TLS */
  origin: string;
  token: string;
  output: () => string;
  stop(): Promise<void>;
}

/** The link a console prints: the laptop's carries its token; the one in a cluster, its sign-in page. */
const LINK = /http:\/\/\S+\?token=\S+/;
export const SIGN_IN_LINK = /https?:\/\/\S+\/signin/;

export async function startConsole(kubeconfig: string, args: string[] = [], link = LINK): Promise<ConsoleProcess> {
  const child = spawn(process.execPath, [`${root}operator/cli/kubectl-agentrun.ts`, "console", "--port", "0", "--kubeconfig", kubeconfig, ...args], {
    env: { ...process.env, DATABASE_URL: "" },
    stdio: ["ignore", "pipe", "pipe"],
  });
  let output = "";
  child.stdout!.on("data", (c: Buffer) => (output += c.toString()));
  child.stderr!.on("data", (c: Buffer) => (output += c.toString()));
  const printed = await waitFor("the console's link", () => {
    if (child.exitCode !== null) throw new Error(`the console exited ${child.exitCode}: ${output}`);
    return link.exec(output)?.[0];
  }, { timeoutMs: 30_000 });
  const url = new URL(printed);
  return {
    child,
    link: printed,
    origin: url.origin,
    token: url.searchParams.get("token") ?? "",
    output: () => output,
    stop: async () => {
      if (child.exitCode !== null) return;
      const exited = new Promise((resolve) => child.once("exit", resolve));
      child.kill("SIGTERM");
      await exited;
    },
  };
}

/** Debian's Chromium: the binary itself (its /usr/bin wrapper script is not needed). */
export function chromiumPath(): string {
  const found = [process.env.CHROMIUM_PATH, "/usr/lib/chromium/chromium", "/usr/bin/chromium"].find((p) => p && existsSync(p));
  if (!found) throw new Error("no Chromium: apt-get install chromium (or set CHROMIUM_PATH)");
  return found;
}

export function launchBrowser(): Promise<Browser> {
  // --no-sandbox: the tests run as root, where Chromium's own sandbox refuses to start.
  return chromium.launch({ executablePath: chromiumPath(), args: ["--no-sandbox", "--disable-dev-shm-usage"] });
}

const AXE = `${root}node_modules/axe-core/axe.min.js`;

/** axe-core's WCAG 2.x A and AA rules on the page as it is: the violations, by rule. */
export async function accessibilityViolations(page: Page): Promise<{ id: string; help: string; nodes: string[] }[]> {
  await page.addScriptTag({ path: AXE });
  return page.evaluate(async () => {
    const axe = (globalThis as unknown as { axe: { run(ctx: unknown, options: unknown): Promise<{ violations: { id: string; help: string; nodes: { target: string[] }[] }[] }> } }).axe;
    const document = (globalThis as unknown as { document: unknown }).document;
    const result = await axe.run(document, { runOnly: { type: "tag", values: ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa", "best-practice"] } });
    return result.violations.map((v) => ({ id: v.id, help: v.help, nodes: v.nodes.map((n) => n.target.join(" ")) }));
  });
}

export const READ_RUNS: Json[] = [
  { apiGroups: ["watchdog.dev"], resources: ["agentruns"], verbs: ["get", "list", "watch"] },
  { apiGroups: ["events.k8s.io"], resources: ["events"], verbs: ["get", "list", "watch"] },
];

/** A kubeconfig for the admin kubeconfig's cluster, as the ServiceAccount `name` of `namespace` with `token`. */
export function tokenKubeconfig(adminKubeconfig: Json, namespace: string, name: string, token: string, file: string): string {
  const cluster = (adminKubeconfig.clusters as Json[])[0]!;
  const user = `system:serviceaccount:${namespace}:${name}`;
  const kubeconfig = {
    apiVersion: "v1",
    kind: "Config",
    clusters: [cluster],
    users: [{ name: user, user: { token } }],
    contexts: [{ name, context: { cluster: cluster.name, user, namespace } }],
    "current-context": name,
  };
  writeFileSync(file, JSON.stringify(kubeconfig));
  return file;
}

/**
 * A user who may only read AgentRuns in `namespace` (get, list, watch; Events too): a
 * ServiceAccount bound to such a Role, and a kubeconfig with a token the API server issued for it.
 */
export async function readOnlyKubeconfig(client: KubeClient, namespace: string, adminKubeconfig: Json, file: string): Promise<string> {
  const name = "console-viewer";
  const token = await serviceAccountToken(client, namespace, name, READ_RUNS);
  return tokenKubeconfig(adminKubeconfig, namespace, name, token, file);
}

/** The run's annotations, as the API server has them. */
export async function annotationsOf(client: KubeClient, namespace: string, name: string): Promise<Record<string, string>> {
  return ((await client.get<any>(paths.run(namespace, name))).metadata.annotations ?? {}) as Record<string, string>;
}

export const screenshotDir = (): string | undefined => process.env.CONSOLE_SCREENSHOTS || undefined;
export const screenshotPath = (name: string): string | undefined => {
  const dir = screenshotDir();
  return dir ? join(dir, `${name}.png`) : undefined;
};
