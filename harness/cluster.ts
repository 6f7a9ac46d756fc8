// The local cluster as the demo and the test setups use it: hack/ scripts, clients, the CRDs,
// namespaces, and waiting on conditions with a deadline.
import { spawn } from "node:child_process";
import { readFileSync, readdirSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { KubeConfig } from "@kubernetes/client-node";
import { parseAllDocuments } from "yaml";
import { APPLY_PATCH, KubeClient, isNotFound, type Json } from "../operator/kube/client.ts";

const root = fileURLToPath(new URL("..", import.meta.url));

/** Runs a hack/ script; its progress goes to our stderr, its stdout is returned. */
export function runScript(
  script: string,
  args: string[],
  options: { quiet?: boolean; env?: Record<string, string> } = {},
): Promise<{ code: number; stdout: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn("bash", [join(root, "hack", script), ...args], {
      stdio: ["ignore", "pipe", options.quiet ? "ignore" : "inherit"],
      env: { ...process.env, ...options.env },
    });
    let stdout = "";
    child.stdout.on("data", (chunk: Buffer) => (stdout += chunk.toString()));
    child.once("error", reject);
    child.once("close", (code, signal) => resolve({ code: code ?? (signal ? 130 : 1), stdout }));
  });
}

export async function scriptOk(script: string, args: string[]): Promise<string> {
  const { code, stdout } = await runScript(script, args);
  if (code !== 0) throw new Error(`hack/${script} ${args.join(" ")} failed (exit ${code})`);
  return stdout;
}

export const exported = (stdout: string, name: string) => new RegExp(`export ${name}=(\\S+)`).exec(stdout)?.[1];

export function clientFor(kubeconfig: string): KubeClient {
  const kc = new KubeConfig();
  kc.loadFromFile(kubeconfig);
  return new KubeClient(kc);
}

/** Installs the CRDs in crds/ (server-side apply) and waits until they are served. */
export async function applyCrds(client: KubeClient, timeoutMs = 60_000): Promise<void> {
  const dir = join(root, "crds");
  const names: string[] = [];
  for (const file of readdirSync(dir).filter((f) => f.endsWith(".yaml")).sort()) {
    for (const doc of parseAllDocuments(readFileSync(join(dir, file), "utf8"))) {
      const crd = doc.toJS() as Json | null;
      if (!crd) continue;
      const name = (crd.metadata as { name: string }).name;
      await client.request("PATCH", `/apis/apiextensions.k8s.io/v1/customresourcedefinitions/${name}`, {
        body: crd,
        contentType: APPLY_PATCH,
        query: { fieldManager: "agent-watchdog-hack", force: true },
      });
      names.push(name);
    }
  }
  await pollUntil(`the CRDs to be established`, timeoutMs, async () => {
    for (const name of names) {
      const crd = await client.get<{ status?: { conditions?: { type: string; status: string }[] } }>(
        `/apis/apiextensions.k8s.io/v1/customresourcedefinitions/${name}`,
      );
      if (!crd.status?.conditions?.some((c) => c.type === "Established" && c.status === "True")) return false;
    }
    return true;
  });
}

/** Labels that make a namespace enforce the restricted Pod Security Standard. */
export const RESTRICTED_NAMESPACE = {
  "pod-security.kubernetes.io/enforce": "restricted",
  "pod-security.kubernetes.io/enforce-version": "latest",
};

/** Deletes the namespace if it exists and waits until it is gone, then creates it afresh. */
export async function freshNamespace(client: KubeClient, namespace: string, signal?: AbortSignal, labels: Record<string, string> = {}): Promise<void> {
  try {
    await client.delete(`/api/v1/namespaces/${namespace}`);
    await pollUntil(`namespace ${namespace} from an earlier demo to be deleted`, 180_000, async () => {
      try {
        await client.get(`/api/v1/namespaces/${namespace}`);
        return false;
      } catch (err) {
        if (isNotFound(err)) return true;
        throw err;
      }
    }, signal);
  } catch (err) {
    if (!isNotFound(err)) throw err;
  }
  await client.create("/api/v1/namespaces", { apiVersion: "v1", kind: "Namespace", metadata: { name: namespace, labels } });
  // Pods are refused until the namespace's default ServiceAccount exists.
  await pollUntil(`the default ServiceAccount in ${namespace}`, 60_000, async () => {
    try {
      await client.get(`/api/v1/namespaces/${namespace}/serviceaccounts/default`);
      return true;
    } catch (err) {
      if (isNotFound(err)) return false;
      throw err;
    }
  }, signal);
}

export function abortableSleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(signal.reason);
    const timer = setTimeout(() => {
      signal?.removeEventListener("abort", onAbort);
      resolve();
    }, ms);
    const onAbort = () => {
      clearTimeout(timer);
      reject(signal?.reason);
    };
    signal?.addEventListener("abort", onAbort, { once: true });
  });
}

export async function pollUntil(what: string, timeoutMs: number, probe: () => Promise<boolean>, signal?: AbortSignal, intervalMs = 250): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  let last: unknown;
  for (;;) {
    signal?.throwIfAborted();
    try {
      if (await probe()) return;
      last = undefined;
    } catch (err) {
      last = err;
    }
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs / 1000}s waiting for ${what}${last ? `: ${String(last)}` : ""}`);
    await abortableSleep(intervalMs, signal);
  }
}
