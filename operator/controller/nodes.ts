// What the watchdog must know of nodes to confirm that a deleted sandbox is gone (rule 9): whether
// a pod's node is Ready, declared out of service, or gone, and when its kubelet last renewed its
// Lease (on the API server's clock). Two trimmed caches: Nodes (name, taints, Ready) and the
// kube-node-lease Leases (name, time of the last renewal), so that thousands of nodes cost little.
import type { Logger } from "pino";
import { paths, type Json, type KubeClient } from "../kube/client.ts";
import { nodeView, type NodeView } from "../watchdog/observe.ts";
import { Informer } from "./informer.ts";

const NODE_LEASES = "kube-node-lease";

function trimNode(node: Json): Json {
  const meta = node.metadata as Json;
  const ready = (((node.status as Json | undefined)?.conditions as Json[] | undefined) ?? []).filter((c) => c.type === "Ready");
  return {
    metadata: { name: meta.name, resourceVersion: meta.resourceVersion },
    spec: { taints: (node.spec as Json | undefined)?.taints ?? [] },
    status: { conditions: ready.map((c) => ({ type: c.type, status: c.status })) },
  };
}

/** A Lease keeps only who renewed it last, and when the API server accepted that. */
function trimLease(lease: Json): Json {
  const meta = lease.metadata as Json;
  const renewals = ((meta.managedFields as Json[] | undefined) ?? []).filter((e) => (e.fieldsV1 as Json | undefined)?.["f:spec"] && ((e.fieldsV1 as Json)["f:spec"] as Json)["f:renewTime"]);
  return {
    metadata: {
      name: meta.name,
      namespace: meta.namespace,
      resourceVersion: meta.resourceVersion,
      managedFields: renewals.map((e) => ({ time: e.time, fieldsV1: { "f:spec": { "f:renewTime": {} } } })),
    },
  };
}

export class NodeCache {
  readonly nodes: Informer;
  readonly leases: Informer;

  constructor(client: KubeClient, options: { resyncMs: number; silenceMs: number; log: Logger }) {
    this.nodes = new Informer(client, { ...options, name: "nodes", path: "/api/v1/nodes", transform: trimNode });
    this.leases = new Informer(client, { ...options, name: "node-leases", path: paths.leases(NODE_LEASES), transform: trimLease });
  }

  get informers(): Informer[] {
    return [this.nodes, this.leases];
  }

  start(): void {
    this.nodes.start();
    this.leases.start();
  }

  stop(): void {
    this.nodes.stop();
    this.leases.stop();
  }

  /** Every node as the core sees it; undefined until both caches are synced. */
  all(): Map<string, NodeView> | undefined {
    return this.views(this.nodes.list().map((node) => String((node.metadata as Json).name)));
  }

  /** The named nodes as the core sees them; undefined until both caches are synced. */
  views(names: Iterable<string>): Map<string, NodeView> | undefined {
    if (!this.nodes.synced || !this.leases.synced) return undefined;
    const out = new Map<string, NodeView>();
    for (const name of names) {
      const node = this.nodes.get("", name);
      if (node) out.set(name, nodeView(node, this.leases.get(NODE_LEASES, name)));
    }
    return out;
  }
}
