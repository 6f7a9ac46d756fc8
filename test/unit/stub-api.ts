// A Kubernetes API for unit tests of the plugin and the console: a kubeconfig whose server nothing
// listens on, and KubeClient's two doors to the network (request, which get, create, mergePatch
// and delete go through, and watch) replaced for every client, so that each call any client makes
// is recorded and answered from `objects`, keyed by path, and none leaves the process.
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { vi } from "vitest";
import { ApiError, KubeClient, type Json } from "../../operator/kube/client.ts";

export interface ApiCall {
  method: string;
  path: string;
  query?: Record<string, unknown>;
}

export interface StubApi {
  /** A kubeconfig file for the stub's cluster (context "stub", namespace "default"). */
  kubeconfig: string;
  calls: ApiCall[];
  /** What a GET of a path answers; any other path is a 404. */
  objects: Map<string, Json>;
  restore(): void;
}

export function stubApi(objects: Record<string, Json> = {}): StubApi {
  const dir = mkdtempSync(join(tmpdir(), "agent-watchdog-stub-api-"));
  const kubeconfig = join(dir, "kubeconfig");
  writeFileSync(
    kubeconfig,
    JSON.stringify({
      apiVersion: "v1",
      kind: "Config",
      clusters: [{ name: "stub", cluster: { server: "https://127.0.0.1:1" } }],
      users: [{ name: "stub-user", user: { token: "t" } }],
      contexts: [{ name: "stub", context: { cluster: "stub", user: "stub-user", namespace: "default" } }],
      "current-context": "stub",
    }),
  );
  // Discovery says the AgentRun API is served, so a missing run is a missing run (cluster.ts).
  const discovery = {
    "/apis": { groups: [{ name: "watchdog.dev", versions: [{ version: "v1alpha1" }] }] },
    "/apis/watchdog.dev/v1alpha1": { resources: [{ name: "agentruns" }] },
  };
  const stub: StubApi = { kubeconfig, calls: [], objects: new Map(Object.entries({ ...discovery, ...objects })), restore: () => undefined };
  const request = vi.spyOn(KubeClient.prototype, "request").mockImplementation(async (method, path, options = {}) => {
    stub.calls.push({ method, path, ...(options.query ? { query: options.query } : {}) });
    const found = method === "GET" ? stub.objects.get(path) : undefined;
    if (!found) throw new ApiError(method, path, 404, { kind: "Status", reason: "NotFound", message: `${path} not found` });
    return structuredClone(found) as never;
  });
  // A watch that is accepted and then stays quiet.
  const watch = vi.spyOn(KubeClient.prototype, "watch").mockImplementation(async (path, query) => {
    stub.calls.push({ method: "WATCH", path, query });
    return new AbortController();
  });
  stub.restore = () => {
    request.mockRestore();
    watch.mockRestore();
    rmSync(dir, { recursive: true, force: true });
  };
  return stub;
}
