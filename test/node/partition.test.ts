// The partition harness: `node-pause` stops the kubelet (SIGSTOP), as a node cut off from the API
// server. Its containers must keep running, which only the node can tell (the container's own log
// keeps growing and containerd reports the task running); the API server keeps the pod, knowing
// nothing. `node-resume` brings the node back to Ready with the pod still running.
import { readFileSync, readdirSync } from "node:fs";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, inject, it } from "vitest";
import { REAL_NODE_NAME, nodePause, nodeResume } from "../../harness/real-node.ts";
import { paths, type KubeClient } from "../../operator/kube/client.ts";
import { deleteNamespace, kube, newNamespace } from "../support/cluster.ts";
import { waitFor } from "../support/wait.ts";
import { imagePod, nodeContainers, runningPod } from "./support.ts";

const PAUSE_MS = 30_000;

let client: KubeClient;
let ns: string;
let paused = false;

beforeAll(async () => {
  client = kube();
  ns = await newNamespace(client, "aw-partition");
});

afterAll(async () => {
  // Whatever happened, the node must not stay cut off for the tests after this one.
  if (paused) await nodeResume(inject("nodeState"));
  await deleteNamespace(client, ns);
});

/** Lines the container has written, read from its log file on the node (not through the kubelet). */
function linesOnNode(pod: { metadata: { uid: string; name: string } }): number {
  const dir = join(inject("nodeState"), "control-plane/node/pod-logs", `${ns}_${pod.metadata.name}_${pod.metadata.uid}`, "main");
  const file = readdirSync(dir).find((f) => f.endsWith(".log"));
  if (!file) return 0;
  return readFileSync(join(dir, file), "utf8").split("\n").filter((l) => l.includes("tick")).length;
}

const nodeReady = async () => {
  const node = await client.get<any>(`/api/v1/nodes/${REAL_NODE_NAME}`);
  return node.status.conditions.find((c: any) => c.type === "Ready")?.status === "True";
};

describe("node-pause and node-resume", () => {
  it("cut the node off for 30 s while its sandbox keeps running, then bring it back Ready", async () => {
    await client.create(paths.pods(ns), imagePod("sandbox", 'let n = 0; setInterval(() => console.log("tick", ++n), 500);'));
    const pod = await runningPod(client, ns, "sandbox");
    await waitFor("the sandbox's first lines on the node", () => linesOnNode(pod) > 0);

    await nodePause(inject("nodeState"));
    paused = true;
    const pausedAt = Date.now();
    const before = linesOnNode(pod);
    let checks = 0;
    while (Date.now() - pausedAt < PAUSE_MS) {
      // The node's view: containerd runs the container.
      const containers = await nodeContainers();
      expect(containers.filter((c) => c.namespace === ns && c.pod === "sandbox" && c.status === "RUNNING")).toHaveLength(1);
      // The API's view: the pod is still there, as the kubelet last reported it.
      const seen = await client.get<any>(paths.pod(ns, "sandbox"));
      expect(seen.metadata.deletionTimestamp).toBeUndefined();
      expect(seen.status.phase).toBe("Running");
      checks++;
      await new Promise((resolve) => setTimeout(resolve, 2_000));
    }
    // The container kept working the whole time: about two lines a second.
    const written = linesOnNode(pod) - before;
    expect(written).toBeGreaterThan((PAUSE_MS / 500) * 0.8);
    expect(checks).toBeGreaterThanOrEqual(10);

    await nodeResume(inject("nodeState"));
    paused = false;
    await waitFor("the node to be Ready again", nodeReady, { timeoutMs: 60_000 });
    const after = await runningPod(client, ns, "sandbox");
    expect(after.metadata.uid).toBe(pod.metadata.uid);
  });
});
