// Access to the shared test control plane: a client, and a fresh namespace per test.
import { randomBytes } from "node:crypto";
import { KubeConfig } from "@kubernetes/client-node";
import { inject } from "vitest";
import { KubeClient, isNotFound, paths, type Json } from "../../operator/kube/client.ts";
import { waitFor } from "./wait.ts";

export function kubeconfigPath(): string {
  return inject("kubeconfig");
}

export function kube(): KubeClient {
  const kc = new KubeConfig();
  kc.loadFromFile(kubeconfigPath());
  return new KubeClient(kc);
}

/** Creates a namespace that pods can be created in (its default ServiceAccount exists). */
export async function newNamespace(client: KubeClient, prefix: string, labels: Record<string, string> = { "watchdog.dev/test": "true" }): Promise<string> {
  const name = `${prefix}-${randomBytes(3).toString("hex")}`.slice(0, 63);
  await client.create("/api/v1/namespaces", { apiVersion: "v1", kind: "Namespace", metadata: { name, labels } });
  await waitFor(`ServiceAccount default in ${name}`, async () => {
    try {
      return await client.get(`/api/v1/namespaces/${name}/serviceaccounts/default`);
    } catch (err) {
      if (isNotFound(err)) return undefined;
      throw err;
    }
  });
  return name;
}

export async function deleteNamespace(client: KubeClient, name: string): Promise<void> {
  try {
    await client.delete(`/api/v1/namespaces/${name}`);
  } catch (err) {
    if (!isNotFound(err)) throw err;
  }
}

export interface RunHandle {
  namespace: string;
  name: string;
}

/** A minimal run manifest with short timeouts unless told otherwise. */
export function runManifest(name: string, watchdog: Json = {}, extra: Json = {}): Json {
  return {
    apiVersion: "watchdog.dev/v1alpha1",
    kind: "AgentRun",
    metadata: { name },
    spec: {
      goal: "integration test",
      template: { spec: { containers: [{ name: "agent", image: "agent-watchdog:test" }] } },
      watchdog,
      ...extra,
    },
  };
}

export async function createRun(client: KubeClient, namespace: string, manifest: Json): Promise<Json> {
  return client.create(paths.runs(namespace), manifest);
}

export async function getRun(client: KubeClient, namespace: string, name: string): Promise<Json & { status?: any; metadata: any }> {
  return client.get(paths.run(namespace, name));
}

/** A pod of the given attempt (its watchdog.dev/attempt label); pod names also carry the run's uid. */
export const ofAttempt = (attempt: number) => (pod: any) => pod.metadata?.labels?.["watchdog.dev/attempt"] === String(attempt);

export async function listPods(client: KubeClient, namespace: string, run: string): Promise<any[]> {
  const list = await client.get<{ items: any[] }>(paths.pods(namespace), { labelSelector: `watchdog.dev/run=${run}` });
  return list.items;
}

export async function listEvents(client: KubeClient, namespace: string): Promise<any[]> {
  const list = await client.get<{ items: any[] }>(paths.events(namespace));
  return list.items;
}

export function condition(run: { status?: any }, type: string): any {
  return (run.status?.conditions ?? []).find((c: any) => c.type === type);
}
