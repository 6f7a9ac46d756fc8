// Shared by the real-node tests: pods of the project image, and the node's own view of what runs
// on it (containerd's), which the tests check beside the API's.
import { join } from "node:path";
import { inject } from "vitest";
import { ContainerdView, type NodeContainer } from "../../measure/soak/node-view.ts";
import { isAlreadyExists, paths, type Json, type KubeClient } from "../../operator/kube/client.ts";
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

export type { NodeContainer };

let view: ContainerdView | undefined;

/**
 * The application containers containerd has tasks for (status RUNNING while they run), with the
 * pod each belongs to: what is really running on the node, whatever the API says.
 */
export function nodeContainers(): Promise<NodeContainer[]> {
  view ??= new ContainerdView(containerdSocket());
  return view.containers();
}

/**
 * Watches the node itself (containerd's tasks) for the whole of a test and records every moment at
 * which two pods of one run had running containers at once: the "never two sandboxes" guarantee
 * as the node sees it, whatever the API says.
 */
export class NodeObserver {
  readonly overlaps: string[] = [];
  /** Every pod seen running, by run. */
  readonly seen = new Map<string, Set<string>>();
  samples = 0;
  private stopped = false;
  private loop?: Promise<void>;
  private readonly namespace: string;
  private readonly runs: string[];

  constructor(namespace: string, runs: string[]) {
    this.namespace = namespace;
    this.runs = runs;
  }

  start(): void {
    this.loop = (async () => {
      while (!this.stopped) {
        let containers: NodeContainer[] = [];
        try {
          containers = await nodeContainers();
        } catch {
          // a container went away between the two ctr calls: look again
        }
        this.samples++;
        for (const run of this.runs) {
          const pods = new Set(containers.filter((c) => c.namespace === this.namespace && c.pod.startsWith(`${run}-`) && c.status === "RUNNING").map((c) => c.pod));
          for (const pod of pods) {
            if (!this.seen.has(run)) this.seen.set(run, new Set());
            this.seen.get(run)!.add(pod);
          }
          if (pods.size > 1) this.overlaps.push(`${new Date().toISOString()} ${run}: ${[...pods].join(", ")}`);
        }
        await new Promise((resolve) => setTimeout(resolve, 200));
      }
    })();
  }

  async stop(): Promise<void> {
    this.stopped = true;
    await this.loop;
  }

  /** Whether a pod of the run has a running container right now. */
  async running(run: string): Promise<string[]> {
    return (await nodeContainers()).filter((c) => c.namespace === this.namespace && c.pod.startsWith(`${run}-`) && c.status === "RUNNING").map((c) => c.pod);
  }
}

/** The ClusterRole the operator binds each namespace's sandboxes to in the real-node suites. */
export const SANDBOX_ROLE = "node-test-sandbox";

/** What the chart's sandbox ClusterRole grants, created once (it may already be there). */
export async function ensureSandboxRole(client: KubeClient): Promise<void> {
  await client
    .create("/apis/rbac.authorization.k8s.io/v1/clusterroles", {
      apiVersion: "rbac.authorization.k8s.io/v1",
      kind: "ClusterRole",
      metadata: { name: SANDBOX_ROLE },
      rules: [
        { apiGroups: ["watchdog.dev"], resources: ["agentruns"], verbs: ["get", "list", "watch"] },
        { apiGroups: ["watchdog.dev"], resources: ["agentruns/status"], verbs: ["get", "patch", "update"] },
      ],
    })
    .catch((err: unknown) => {
      if (!isAlreadyExists(err)) throw err;
    });
}

/** Operator flags that give each namespace's sandboxes a ServiceAccount bound to SANDBOX_ROLE. */
export const SANDBOX_FLAGS = ["--sandbox-service-account=namespace", `--sandbox-cluster-role=${SANDBOX_ROLE}`];

/** A healthy run of the example agent (eight steps, 3 s apart), long enough to be in flight while its supervisor changes. */
export function longRun(name: string): Json {
  return {
    apiVersion: "watchdog.dev/v1alpha1",
    kind: "AgentRun",
    metadata: { name },
    spec: {
      goal: "healthy",
      template: {
        spec: {
          containers: [
            {
              name: "agent",
              image: "agent-watchdog:0.1.0",
              args: ["example-agent"],
              env: [
                { name: "EXAMPLE_STEPS", value: "8" },
                { name: "EXAMPLE_STEP_DELAY_MS", value: "3000" },
              ],
            },
          ],
        },
      },
      watchdog: { heartbeatTimeout: "60s" },
    },
  };
}
