import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { stringify } from "yaml";
import { fromKubeconfigFile, loadConnection } from "../../../operator/kube/connection.ts";

function kubeconfig(user: Record<string, unknown>, cluster: Record<string, unknown> = { server: "https://127.0.0.1:6443/" }): string {
  const dir = mkdtempSync(join(tmpdir(), "connection-"));
  const path = join(dir, "config");
  writeFileSync(join(dir, "ca.crt"), "CA");
  writeFileSync(join(dir, "token"), "from-file\n");
  writeFileSync(
    path,
    stringify({
      apiVersion: "v1",
      kind: "Config",
      "current-context": "here",
      contexts: [
        { name: "other", context: { cluster: "c", user: "nobody" } },
        { name: "here", context: { cluster: "c", user: "u" } },
      ],
      clusters: [{ name: "c", cluster }],
      users: [
        { name: "nobody", user: { token: "wrong" } },
        { name: "u", user },
      ],
    }),
  );
  return path;
}

describe("connection", () => {
  it("reads the current context's server, CA file relative to the kubeconfig, and client certificate data", () => {
    const path = kubeconfig(
      { "client-certificate-data": Buffer.from("CERT").toString("base64"), "client-key-data": Buffer.from("KEY").toString("base64") },
      { server: "https://127.0.0.1:6443/", "certificate-authority": "ca.crt", "tls-server-name": "kubernetes" },
    );
    const c = fromKubeconfigFile(path);
    expect(c.server).toBe("https://127.0.0.1:6443");
    expect(c.ca?.toString()).toBe("CA");
    expect(c.cert?.toString()).toBe("CERT");
    expect(c.key?.toString()).toBe("KEY");
    expect(c.servername).toBe("kubernetes");
    expect(c.authorization).toBeUndefined();
  });

  it("sends a token, and reads a token file again when asked to refresh", async () => {
    expect(await fromKubeconfigFile(kubeconfig({ token: "abc" })).authorization?.(false)).toBe("Bearer abc");
    const path = kubeconfig({ tokenFile: "token" });
    const c = fromKubeconfigFile(path);
    expect(await c.authorization?.(false)).toBe("Bearer from-file");
    writeFileSync(join(path, "..", "token"), "rotated");
    expect(await c.authorization?.(false)).toBe("Bearer from-file");
    expect(await c.authorization?.(true)).toBe("Bearer rotated");
  });

  it("takes the first file of $KUBECONFIG, and says what is missing outside a pod", () => {
    const path = kubeconfig({ token: "abc" });
    expect(loadConnection({ KUBECONFIG: `${path}:/nonexistent` }).server).toBe("https://127.0.0.1:6443");
    expect(() => loadConnection({ HOME: "/nonexistent" })).toThrow(/KUBERNETES_SERVICE_HOST/);
    expect(() => fromKubeconfigFile(kubeconfig({}, { "certificate-authority-data": "" }))).toThrow(/no server/);
  });
});
