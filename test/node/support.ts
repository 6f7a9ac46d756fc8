// Shared by the real-node tests: pods of the project image, and the node's own view of what runs
// on it (containerd's), which the tests check beside the API's.
import { execFile } from "node:child_process";
import { join } from "node:path";
import { inject } from "vitest";
import { paths, type Json, type KubeClient } from "../../operator/kube/client.ts";
import { waitFor } from "../support/wait.ts";

/** A restricted-compliant pod of the project image running `script` under Node. */
export function imagePod(name: string, script: string, extra: Json = {}): Json {
  return {
    apiVersion: "v1",
    kind: "Pod",
    metadata: { name, labels: { "watchdog.dev/test": "node" } },
    spec: {
      restartPolicy: "Never",
      terminationGracePeriodSeconds: 5,
      securityContext: { runAsNonRoot: true, seccompProfile: { type: "RuntimeDefault" } },
      containers: [
        {
          name: "main",
          image: inject("image"),
          imagePullPolicy: "IfNotPresent",
          command: ["/nodejs/bin/node", "-e", script],
          securityContext: { allowPrivilegeEscalation: false, capabilities: { drop: ["ALL"] } },
        },
      ],
      ...extra,
    },
  };
}

export async function runningPod(client: KubeClient, namespace: string, name: string, timeoutMs = 60_000): Promise<any> {
  return waitFor(`pod ${name} to run`, async () => {
    const pod = await client.get<any>(paths.pod(namespace, name));
    if (pod.status?.phase === "Failed" || pod.status?.phase === "Succeeded") throw new Error(`pod ${name} ended: ${JSON.stringify(pod.status.containerStatuses)}`);
    return pod.status?.phase === "Running" && pod.status.containerStatuses?.every((c: any) => c.state?.running) ? pod : undefined;
  }, { timeoutMs });
}

/** The node's containerd socket, for its own view of the containers. */
export function containerdSocket(): string {
  return join(inject("nodeState"), "control-plane/node/containerd/containerd.sock");
}

export interface NodeContainer {
  id: string;
  pod: string;
  namespace: string;
  container: string;
  status: string;
}

function ctr(args: string[]): Promise<string> {
  return new Promise((resolve, reject) =>
    execFile("ctr", ["--address", containerdSocket(), "--namespace", "k8s.io", ...args], { encoding: "utf8", timeout: 20_000 }, (err, stdout, stderr) =>
      err ? reject(new Error(`ctr ${args.join(" ")}: ${stderr || err.message}`)) : resolve(stdout),
    ),
  );
}

/**
 * The application containers containerd runs right now (task status RUNNING), with the pod each
 * belongs to: what is really running on the node, whatever the API says.
 */
export async function nodeContainers(): Promise<NodeContainer[]> {
  const tasks = new Map<string, string>();
  for (const line of (await ctr(["tasks", "ls"])).split("\n").slice(1)) {
    const [id, , status] = line.trim().split(/\s+/);
    if (id && status) tasks.set(id, status);
  }
  const out: NodeContainer[] = [];
  for (const line of (await ctr(["containers", "ls", "--quiet"])).split("\n").filter(Boolean)) {
    const info = JSON.parse(await ctr(["containers", "info", line])) as { Labels?: Record<string, string> };
    const labels = info.Labels ?? {};
    const container = labels["io.kubernetes.container.name"];
    if (labels["io.cri-containerd.kind"] !== "container" || !container) continue; // pod sandboxes hold namespaces, not work
    out.push({
      id: line,
      pod: labels["io.kubernetes.pod.name"] ?? "",
      namespace: labels["io.kubernetes.pod.namespace"] ?? "",
      container,
      status: tasks.get(line) ?? "CREATED",
    });
  }
  return out;
}
