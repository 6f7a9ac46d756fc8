// What really runs on the real node, from containerd itself through `ctr` on the node's socket: its
// list of tasks, and the stream of its task events (each start and exit with containerd's time). A
// container's labels (its pod) never change, so each is read once.
import { execFile, spawn } from "node:child_process";
import { createInterface } from "node:readline";
import type { RunningContainer } from "./observer.ts";

/** A sandbox container's task started or exited, as containerd announced it. */
export interface TaskEvent {
  id: string;
  kind: "start" | "exit";
  /** containerd's time of it (this machine's clock), in ms. */
  at: number;
}

/**
 * Reads one line of `ctr events`: `<date> <time> +0000 UTC <namespace> <topic> <json>`. Only the
 * start and the exit of a container's own task count (an exec's exit names the exec, not the
 * container); an exit's time is containerd's exited_at.
 */
export function parseTaskEvent(line: string): TaskEvent | undefined {
  const match = /^(\d{4}-\d\d-\d\d) (\d\d:\d\d:\d\d(?:\.\d+)?) \+0000 UTC k8s\.io \/tasks\/(start|exit) (\{.*\})$/.exec(line.trim());
  if (!match) return undefined;
  let body: { container_id?: unknown; id?: unknown; exited_at?: unknown };
  try {
    body = JSON.parse(match[4] as string) as typeof body;
  } catch {
    return undefined;
  }
  const id = body.container_id;
  if (typeof id !== "string") return undefined;
  if (match[3] === "exit" && body.id !== undefined && body.id !== id) return undefined;
  const seconds = (match[2] as string).replace(/(\.\d{3})\d*$/, "$1");
  const at = match[3] === "exit" && typeof body.exited_at === "string" ? Date.parse(body.exited_at) : Date.parse(`${match[1]}T${seconds}Z`);
  return Number.isNaN(at) ? undefined : { id, kind: match[3] as TaskEvent["kind"], at };
}

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

  /**
   * The pod of application container `id` and the container's name; undefined for a pod sandbox
   * (it holds namespaces, not work) or a container removed meanwhile (the kubelet collects old
   * ones: it runs nothing any more).
   */
  async describe(id: string): Promise<(RunningContainer & { container: string }) | undefined> {
    let labels = this.labels.get(id);
    if (!labels) {
      let info: string;
      try {
        info = await this.ctr(["containers", "info", id]);
      } catch (err) {
        if (/not found/.test(String(err))) return undefined;
        throw err;
      }
      labels = ((JSON.parse(info) as { Labels?: Record<string, string> }).Labels ?? {}) as Record<string, string>;
      this.labels.set(id, labels);
    }
    const container = labels["io.kubernetes.container.name"];
    if (labels["io.cri-containerd.kind"] !== "container" || !container) return undefined;
    return { container, pod: labels["io.kubernetes.pod.name"] ?? "", namespace: labels["io.kubernetes.pod.namespace"] ?? "", podUid: labels["io.kubernetes.pod.uid"] ?? "" };
  }

  /** Follows containerd's task events until stopped; a stream that ends is started again. */
  events(onEvent: (event: TaskEvent) => void): { stop(): void } {
    let stopped = false;
    let child: ReturnType<typeof spawn> | undefined;
    const follow = () => {
      if (stopped) return;
      child = spawn("ctr", ["--address", this.socket, "events"], { stdio: ["ignore", "pipe", "ignore"] });
      createInterface({ input: child.stdout! }).on("line", (line) => {
        const event = parseTaskEvent(line);
        if (event) onEvent(event);
      });
      child.once("close", () => setTimeout(follow, 500));
    };
    follow();
    return {
      stop() {
        stopped = true;
        child?.kill();
      },
    };
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
      const described = await this.describe(id);
      if (!described) continue;
      const task = tasks.get(id);
      out.push({ id, pid: task?.pid ?? 0, status: task?.status ?? "CREATED", ...described });
    }
    return out;
  }

  async running(): Promise<NodeContainer[]> {
    return (await this.containers()).filter((c) => c.status === "RUNNING");
  }
}
