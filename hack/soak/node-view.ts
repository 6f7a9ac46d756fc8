// What really runs on the real node: containerd's own list of tasks, read with `ctr` on the node's
// socket. A container's labels (its pod) never change, so each is read once.
import { execFile } from "node:child_process";
import type { RunningContainer } from "./observer.ts";

export interface NodeContainer extends RunningContainer {
  id: string;
  container: string;
  status: string;
  pid: number;
}

export class ContainerdView {
  private readonly labels = new Map<string, Record<string, string>>();

  private readonly socket: string;

  constructor(socket: string) {
    this.socket = socket;
  }

  private ctr(args: string[]): Promise<string> {
    return new Promise((resolve, reject) =>
      execFile("ctr", ["--address", this.socket, "--namespace", "k8s.io", ...args], { encoding: "utf8", timeout: 20_000 }, (err, stdout, stderr) =>
        err ? reject(new Error(`ctr ${args.join(" ")}: ${stderr || err.message}`)) : resolve(stdout),
      ),
    );
  }

  /** Every application container, with its task's status ("CREATED" when it has no task; pod sandboxes left out). */
  async containers(): Promise<NodeContainer[]> {
    const tasks = new Map<string, { pid: number; status: string }>();
    for (const line of (await this.ctr(["tasks", "ls"])).split("\n").slice(1)) {
      const [id, pid, status] = line.trim().split(/\s+/);
      if (id && status) tasks.set(id, { pid: Number(pid), status });
    }
    const out: NodeContainer[] = [];
    for (const id of (await this.ctr(["containers", "ls", "--quiet"])).split("\n").filter(Boolean)) {
      let labels = this.labels.get(id);
      if (!labels) {
        let info: string;
        try {
          info = await this.ctr(["containers", "info", id]);
        } catch (err) {
          // Removed between the list and this read (the kubelet collects old containers): it
          // runs nothing any more.
          if (/not found/.test(String(err))) continue;
          throw err;
        }
        labels = ((JSON.parse(info) as { Labels?: Record<string, string> }).Labels ?? {}) as Record<string, string>;
        this.labels.set(id, labels);
      }
      const container = labels["io.kubernetes.container.name"];
      if (labels["io.cri-containerd.kind"] !== "container" || !container) continue; // pod sandboxes hold namespaces, not work
      const task = tasks.get(id);
      out.push({
        id,
        pid: task?.pid ?? 0,
        status: task?.status ?? "CREATED",
        container,
        pod: labels["io.kubernetes.pod.name"] ?? "",
        namespace: labels["io.kubernetes.pod.namespace"] ?? "",
        podUid: labels["io.kubernetes.pod.uid"] ?? "",
      });
    }
    return out;
  }

  async running(): Promise<NodeContainer[]> {
    return (await this.containers()).filter((c) => c.status === "RUNNING");
  }
}
