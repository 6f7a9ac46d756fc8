// `hack/control-plane.sh down` of a cluster with a real node leaves the machine as it found it:
// the node changes mounts, cgroups, the network (a bridge, iptables and nf_tables), kernel
// settings and a few fixed paths, and runs processes that outlive their parent (containerd's
// shims). This compares the machine before `up --kubelet` with the machine after `down`, with a
// pod running in between, so that every one of those changes has happened.
import { execFileSync } from "node:child_process";
import { existsSync, readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { expect, it } from "vitest";
import { clientFor } from "../../harness/cluster.ts";
import { realNodeStateRoot, realNodeUp } from "../../harness/real-node.ts";
import { runScript } from "../../harness/cluster.ts";
import { paths } from "../../operator/kube/client.ts";
import { waitFor } from "../support/wait.ts";

const sh = (cmd: string) => execFileSync("bash", ["-c", cmd], { encoding: "utf8" });

/** What the real node may change on the machine, as text, for comparison. */
function machine(): Record<string, string[]> {
  const cgroups: string[] = [];
  for (const hierarchy of readdirSync("/sys/fs/cgroup")) {
    const dir = join("/sys/fs/cgroup", hierarchy);
    try {
      for (const entry of readdirSync(dir, { withFileTypes: true })) if (entry.isDirectory()) cgroups.push(`${hierarchy}/${entry.name}`);
    } catch {
      // not a directory
    }
  }
  const processes = readdirSync("/proc")
    .filter((p) => /^\d+$/.test(p))
    .map((p) => {
      try {
        return readFileSync(`/proc/${p}/cmdline`, "utf8").split("\0")[0] ?? "";
      } catch {
        return "";
      }
    })
    .filter((c) => /containerd|kubelet|pause|runc/.test(c));
  return {
    mounts: readFileSync("/proc/self/mountinfo", "utf8").split("\n").map((l) => l.split(" ")[4] ?? "").filter(Boolean).sort(),
    cgroups: cgroups.sort(),
    links: sh("ip -o link show | awk '{print $2}'").split("\n").filter(Boolean).sort(),
    addresses: sh("ip -o addr show | awk '{print $2, $4}'").split("\n").filter(Boolean).sort(),
    iptables: sh("iptables-save 2>/dev/null | grep -E '^(\\*|:|-A)' | sed -E 's/ \\[[0-9]+:[0-9]+\\]$//' || true").split("\n").filter(Boolean),
    nftables: sh("nft list tables 2>/dev/null || true").split("\n").filter(Boolean).sort(),
    sysctls: sh(
      "sysctl vm.overcommit_memory vm.panic_on_oom kernel.panic kernel.panic_on_oops kernel.keys.root_maxkeys kernel.keys.root_maxbytes net.ipv4.ip_forward",
    ).split("\n").filter(Boolean),
    paths: ["/var/lib/kubelet", "/var/log/containers", "/var/log/pods", "/run/containerd", "/var/lib/cni", "/etc/cni", "/var/run/netns", "/run/agent-watchdog-real-node"].filter((p) => existsSync(p)),
    processes: processes.sort(),
  };
}

it("down leaves nothing of the real node behind", async () => {
  const state = realNodeStateRoot();
  const down = async () => {
    const { code } = await runScript("control-plane.sh", ["down"], { env: { AGENT_WATCHDOG_STATE: state } });
    expect(code).toBe(0);
  };
  await down();
  const before = machine();
  expect(before.processes, "no kubelet or containerd of ours before up").toEqual([]);

  const node = await realNodeUp(state);
  const client = clientFor(node.kubeconfig);
  await waitFor("the default ServiceAccount", () => client.get("/api/v1/namespaces/default/serviceaccounts/default").then(() => true, () => false));
  await client.create(paths.pods("default"), {
    apiVersion: "v1",
    kind: "Pod",
    metadata: { name: "leftover" },
    spec: { restartPolicy: "Never", containers: [{ name: "main", image: node.image, command: ["/nodejs/bin/node", "-e", "setInterval(() => {}, 1000)"] }] },
  });
  await waitFor("the pod to run", async () => (await client.get<any>(paths.pod("default", "leftover"))).status?.phase === "Running", { timeoutMs: 60_000 });
  const during = machine();
  // The comparison can fail: with the node up, the machine is visibly different.
  expect(during).not.toEqual(before);
  expect(during.links).toContain("awbr0:");

  await down();
  expect(machine()).toEqual(before);
});
