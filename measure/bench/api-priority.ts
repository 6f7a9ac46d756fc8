// The chart's API Priority and Fairness objects, installed for a bench exactly as the chart renders
// them (`helm template --show-only templates/flowcontrol.yaml`), so that a bench whose operator and
// sandboxes authenticate as service accounts measures the priority levels that ship, not a copy.
import { execFileSync } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { parseAllDocuments } from "yaml";
import { isAlreadyExists, isNotFound, type Json, type KubeClient } from "../../operator/kube/client.ts";
import { root } from "./lib.ts";

const FLOWCONTROL = "/apis/flowcontrol.apiserver.k8s.io/v1";

/**
 * The chart's FlowSchemas and PriorityLevelConfigurations for an operator running as `account` of
 * `namespace`, with the chart's defaults but for `values` (helm --set, e.g. to try another share).
 */
export function renderApiPriority(namespace: string, account: string, values: string[] = []): Json[] {
  const helm = execFileSync("bash", [`${root}hack/control-plane.sh`, "bin", "helm"], { encoding: "utf8", stdio: ["ignore", "pipe", "inherit"] }).trim();
  // helm keeps caches in the home directory unless told otherwise; a template needs none of them.
  const home = mkdtempSync(join(tmpdir(), "agent-watchdog-bench-helm-"));
  try {
    const text = execFileSync(
      helm,
      ["template", "bench", join(root, "charts", "agent-watchdog"), "--namespace", namespace, "--set", `serviceAccount.name=${account}`, ...values.flatMap((v) => ["--set", v]), "--show-only", "templates/flowcontrol.yaml"],
      { encoding: "utf8", env: { ...process.env, HELM_CACHE_HOME: home, HELM_CONFIG_HOME: home, HELM_DATA_HOME: home } },
    );
    return parseAllDocuments(text)
      .map((doc) => doc.toJS() as Json | null)
      .filter((o): o is Json => o !== null && typeof o === "object");
  } finally {
    rmSync(home, { recursive: true, force: true });
  }
}

const pathOf = (object: Json) => `${FLOWCONTROL}/${object.kind === "FlowSchema" ? "flowschemas" : "prioritylevelconfigurations"}`;
const nameOf = (object: Json) => (object.metadata as { name: string }).name;

/**
 * Installs the objects (levels before the schemas that name them), replacing any of the same name
 * (left by a bench that was killed, perhaps with other values); resolves to their removal.
 */
export async function installApiPriority(client: KubeClient, objects: Json[]): Promise<() => Promise<void>> {
  const ordered = [...objects].sort((a, b) => Number(a.kind === "FlowSchema") - Number(b.kind === "FlowSchema"));
  for (const object of ordered) {
    try {
      await client.create(pathOf(object), object);
    } catch (err) {
      if (!isAlreadyExists(err)) throw err;
      await client.delete(`${pathOf(object)}/${nameOf(object)}`);
      await client.create(pathOf(object), object);
    }
  }
  return async () => {
    for (const object of ordered.reverse()) {
      await client.delete(`${pathOf(object)}/${nameOf(object)}`).catch((err: unknown) => {
        if (!isNotFound(err)) throw err;
      });
    }
  };
}
