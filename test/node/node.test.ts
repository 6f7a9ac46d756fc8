// The real node itself: a kubelet built from the pinned Kubernetes module, registered under the
// Node authorizer, serving logs and exec to the API server (and nothing to anyone anonymous), and
// running pods of the project image that get addresses, reach each other and reach the API server.
import { Agent, fetch } from "undici";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { REAL_NODE_NAME } from "../../harness/real-node.ts";
import { paths, type KubeClient } from "../../operator/kube/client.ts";
import { kubectl, ok } from "../chart/support.ts";
import { deleteNamespace, kube, newNamespace } from "../support/cluster.ts";
import { waitFor } from "../support/wait.ts";
import { imagePod, nodeContainers, runningPod } from "./support.ts";

let client: KubeClient;
let ns: string;

beforeAll(async () => {
  client = kube();
  ns = await newNamespace(client, "aw-node");
});

afterAll(async () => {
  await deleteNamespace(client, ns);
});

describe("the real node", () => {
  it("is Ready, runs kubelet v1.37 on containerd, and is no kwok node", async () => {
    const wide = ok(await kubectl(["get", "nodes", "-o", "wide"]), "kubectl get nodes").stdout;
    expect(wide).toMatch(new RegExp(`^${REAL_NODE_NAME}\\s+Ready\\s+\\S+\\s+\\S+\\s+v1\\.37\\.\\d+\\s+10\\.244\\.0\\.1`, "m"));
    const node = await client.get<any>(`/api/v1/nodes/${REAL_NODE_NAME}`);
    expect(node.status.nodeInfo.kubeletVersion).toMatch(/^v1\.37\./);
    expect(node.status.nodeInfo.containerRuntimeVersion).toMatch(/^containerd:\/\//);
    expect(node.metadata.annotations?.["kwok.x-k8s.io/node"]).toBeUndefined();
    expect(node.spec.taints ?? []).toEqual([]);
  });

  it("refuses anonymous requests to its kubelet API", async () => {
    const node = await client.get<any>(`/api/v1/nodes/${REAL_NODE_NAME}`);
    const port = node.status.daemonEndpoints.kubeletEndpoint.Port as number;
    // The serving certificate is the cluster CA's; the refusal is what matters here.
    const res = await fetch(`https://10.244.0.1:${port}/pods`, { dispatcher: new Agent({ connect: { rejectUnauthorized: false } }) });
    expect(res.status).toBe(401);
  });

  it("runs a pod of the project image, with its output in kubectl logs and kubectl exec working", async () => {
    await client.create(paths.pods(ns), imagePod("hello", 'console.log("hello from", process.version); setInterval(() => {}, 1000);'));
    const pod = await runningPod(client, ns, "hello");
    expect(pod.spec.nodeName).toBe(REAL_NODE_NAME);
    expect(pod.status.podIP).toMatch(/^10\.244\.0\.\d+$/);
    const logs = await waitFor("the pod's output", async () => {
      const out = ok(await kubectl(["logs", "-n", ns, "hello"]), "kubectl logs").stdout;
      return out.includes("hello from") ? out : undefined;
    });
    expect(logs).toMatch(/hello from v24\./);
    const exec = ok(await kubectl(["exec", "-n", ns, "hello", "--", "/nodejs/bin/node", "-e", "console.log(require('os').userInfo().uid)"]), "kubectl exec");
    expect(exec.stdout.trim()).toBe("65532");
    // containerd runs it: the node's own view, not only the API's.
    const containers = await nodeContainers();
    expect(containers).toContainEqual(expect.objectContaining({ namespace: ns, pod: "hello", container: "main", status: "RUNNING" }));
  });

  it("gives pods addresses that reach each other and the API server", async () => {
    await client.create(
      paths.pods(ns),
      imagePod("server", 'require("http").createServer((q, r) => r.end("pong")).listen(8080, () => console.log("listening"));'),
    );
    const server = await runningPod(client, ns, "server");
    const script = `
      const fs = require("fs");
      const sa = "/var/run/secrets/kubernetes.io/serviceaccount";
      (async () => {
        const peer = await (await fetch("http://${server.status.podIP}:8080/")).text();
        const api = await fetch("https://" + process.env.KUBERNETES_SERVICE_HOST + ":" + process.env.KUBERNETES_SERVICE_PORT + "/version", {
          headers: { authorization: "Bearer " + fs.readFileSync(sa + "/token", "utf8") },
        });
        console.log(JSON.stringify({ peer, api: api.status, version: (await api.json()).gitVersion }));
      })().catch((e) => { console.log(JSON.stringify({ error: String(e.cause ?? e) })); process.exit(1); });`;
    const clientPod = imagePod("client", script) as any;
    clientPod.spec.containers[0].env = [{ name: "NODE_EXTRA_CA_CERTS", value: "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt" }];
    await client.create(paths.pods(ns), clientPod);
    const done = await waitFor("the client pod to finish", async () => {
      const pod = await client.get<any>(paths.pod(ns, "client"));
      return pod.status?.phase === "Succeeded" || pod.status?.phase === "Failed" ? pod : undefined;
    }, { timeoutMs: 60_000 });
    const out = ok(await kubectl(["logs", "-n", ns, "client"]), "kubectl logs").stdout.trim();
    expect(done.status.phase, out).toBe("Succeeded");
    expect(JSON.parse(out.split("\n").at(-1) ?? "{}")).toEqual({ peer: "pong", api: 200, version: expect.stringMatching(/^v1\.37\./) });
  });
});
