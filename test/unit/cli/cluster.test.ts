// The plugin's kubeconfig handling and its translation of failures into readable lines.
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { delimiter, join } from "node:path";
import { fetch } from "undici";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { CliError, connectionProblem, contextNamespace, explainFailure, loadKubeConfig } from "../../../operator/cli/plugin/cluster.ts";
import { ApiError } from "../../../operator/kube/client.ts";
import { freePort } from "../../support/operator-process.ts";

let dir: string;
beforeEach(() => {
  dir = mkdtempSync(join(tmpdir(), "agentrun-kubeconfig-"));
});
afterEach(() => rmSync(dir, { recursive: true, force: true }));

function kubeconfig(file: string, contexts: { name: string; namespace?: string; server?: string }[], current?: string): string {
  const path = join(dir, file);
  const yaml = [
    "apiVersion: v1",
    "kind: Config",
    `current-context: ${current ?? contexts[0]?.name ?? '""'}`,
    "clusters:",
    ...contexts.map((c) => `- name: ${c.name}\n  cluster:\n    server: ${c.server ?? `https://${c.name}.example:6443`}`),
    "users:",
    "- name: u\n  user:\n    token: t",
    "contexts:",
    ...contexts.map((c) => `- name: ${c.name}\n  context:\n    cluster: ${c.name}\n    user: u${c.namespace ? `\n    namespace: ${c.namespace}` : ""}`),
  ].join("\n");
  writeFileSync(path, yaml);
  return path;
}

function cliError(fn: () => unknown): string {
  try {
    fn();
  } catch (err) {
    expect(err).toBeInstanceOf(CliError);
    return (err as Error).message;
  }
  throw new Error("expected a CliError");
}

describe("choosing the kubeconfig as kubectl does", () => {
  it("takes --kubeconfig over $KUBECONFIG, and the context's namespace, else default", () => {
    const a = kubeconfig("a", [{ name: "a", namespace: "team-a" }]);
    const b = kubeconfig("b", [{ name: "b" }]);
    const kc = loadKubeConfig({ kubeconfig: b }, { KUBECONFIG: a });
    expect(kc.getCurrentContext()).toBe("b");
    expect(contextNamespace(kc)).toBe("default");
    expect(contextNamespace(loadKubeConfig({}, { KUBECONFIG: a }))).toBe("team-a");
  });

  it("merges every existing file in $KUBECONFIG, the first one setting the current context", () => {
    const a = kubeconfig("a", [{ name: "a" }]);
    const b = kubeconfig("b", [{ name: "b", namespace: "team-b" }]);
    const kc = loadKubeConfig({}, { KUBECONFIG: [join(dir, "missing"), a, b].join(delimiter) });
    expect(kc.getCurrentContext()).toBe("a");
    expect(kc.getContexts().map((c) => c.name).sort()).toEqual(["a", "b"]);
    const other = loadKubeConfig({ context: "b" }, { KUBECONFIG: [a, b].join(delimiter) });
    expect(other.getCurrentCluster()?.server).toBe("https://b.example:6443");
    expect(contextNamespace(other)).toBe("team-b");
  });

  it("says what is wrong with the kubeconfig", () => {
    const a = kubeconfig("a", [{ name: "a" }]);
    expect(cliError(() => loadKubeConfig({ kubeconfig: join(dir, "nope") }, {}))).toBe(`cannot load kubeconfig ${join(dir, "nope")}: no such file`);
    expect(cliError(() => loadKubeConfig({}, { KUBECONFIG: join(dir, "nope") }))).toBe(`none of the files in KUBECONFIG exists: ${join(dir, "nope")}`);
    expect(cliError(() => loadKubeConfig({ context: "zzz" }, { KUBECONFIG: a }))).toBe('context "zzz" not found in the kubeconfig');
    const none = kubeconfig("none", [{ name: "x" }], '""');
    expect(cliError(() => loadKubeConfig({}, { KUBECONFIG: none }))).toContain("the kubeconfig has no current context");
    expect(cliError(() => loadKubeConfig({}, { HOME: dir }))).toBe("no kubeconfig: set KUBECONFIG, pass --kubeconfig, or create ~/.kube/config");
  });
});

describe("failures in one line", () => {
  it("names the server and the reason when it cannot be reached", async () => {
    const port = await freePort();
    const err = await fetch(`http://127.0.0.1:${port}/`).catch((e: unknown) => e);
    expect(connectionProblem(err)).toBe("connection refused");
    expect(explainFailure(err, `https://127.0.0.1:${port}`)).toBe(`cannot reach the Kubernetes API server at https://127.0.0.1:${port}: connection refused`);
    const timeout = new DOMException("The operation was aborted due to timeout", "TimeoutError");
    expect(explainFailure(timeout, "https://k")).toBe("cannot reach the Kubernetes API server at https://k: the request timed out");
    const tls = Object.assign(new TypeError("fetch failed"), { cause: Object.assign(new Error("self-signed certificate"), { code: "DEPTH_ZERO_SELF_SIGNED_CERT" }) });
    expect(connectionProblem(tls)).toBe("TLS: self-signed certificate");
    const several = Object.assign(new TypeError("fetch failed"), { cause: new AggregateError([Object.assign(new Error("x"), { code: "EHOSTUNREACH" })]) });
    expect(connectionProblem(several)).toBe("host unreachable");
    expect(connectionProblem(new Error("something else"))).toBeUndefined();
  });

  it("passes on what the API server said", () => {
    expect(explainFailure(new ApiError("GET", "/x", 401, { reason: "Unauthorized", message: "Unauthorized" }), "https://k")).toBe(
      "the Kubernetes API server at https://k did not accept the credentials (401 Unauthorized)",
    );
    expect(explainFailure(new ApiError("GET", "/x", 403, { reason: "Forbidden", message: 'agentruns is forbidden: User "bob" cannot list' }), "https://k")).toBe(
      'forbidden: agentruns is forbidden: User "bob" cannot list',
    );
    expect(explainFailure(new ApiError("PATCH", "/x", 422, { reason: "Invalid", message: "spec.suspend: Invalid value" }), "https://k")).toBe(
      "the Kubernetes API server answered 422 Invalid: spec.suspend: Invalid value",
    );
    expect(explainFailure(new Error("plain"), "https://k")).toBe("plain");
  });
});
