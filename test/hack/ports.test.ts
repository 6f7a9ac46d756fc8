// hack/control-plane.sh keeps its ports in the state dir so a restarted component comes back at
// the same address. A state dir can outlive the records of processes that still hold those
// ports (a cluster left running by a shell in another PID namespace, say): then `up` must pick
// new ports rather than fail at bind, and must not touch the listeners it does not know.
import { spawnSync } from "node:child_process";
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { createServer, type Server } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { afterAll, expect, it } from "vitest";

const root = fileURLToPath(new URL("../..", import.meta.url));
const stateRoot = mkdtempSync(join(tmpdir(), "agent-watchdog-ports-"));
const servers: Server[] = [];

function controlPlane(command: string) {
  return spawnSync("bash", [join(root, "hack/control-plane.sh"), command], {
    encoding: "utf8",
    env: { ...process.env, AGENT_WATCHDOG_STATE: stateRoot },
    timeout: 180_000,
  });
}

/** A listener on a free loopback port, standing in for a process this state has no record of. */
async function stranger(): Promise<number> {
  const server = createServer((socket) => socket.destroy());
  servers.push(server);
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const address = server.address();
  if (address === null || typeof address === "string") throw new Error("no port");
  return address.port;
}

afterAll(async () => {
  controlPlane("down");
  await Promise.all(servers.map((s) => new Promise((resolve) => s.close(resolve))));
  rmSync(stateRoot, { recursive: true, force: true });
});

it("starts on new ports when the saved ones are held by listeners it has no record of", async () => {
  const names = ["ETCD_PORT", "ETCD_PEER_PORT", "APISERVER_PORT", "KCM_PORT", "SCHEDULER_PORT", "KWOK_PORT"];
  const held = new Map<string, number>();
  for (const name of names) held.set(name, await stranger());
  const dir = join(stateRoot, "control-plane");
  mkdirSync(dir, { recursive: true });
  writeFileSync(join(dir, "ports"), [...held].map(([name, port]) => `${name}=${port}`).join("\n") + "\n");

  const up = controlPlane("up");
  expect(up.status, up.stderr).toBe(0);
  expect(up.stderr).toContain("picking new ones");
  const now = new Map(
    readFileSync(join(dir, "ports"), "utf8")
      .trim()
      .split("\n")
      .map((line) => line.split("=") as [string, string]),
  );
  for (const name of names) expect(Number(now.get(name)), name).not.toBe(held.get(name));
  // The strangers still hold their ports: nothing of theirs was stopped.
  for (const server of servers) expect(server.listening).toBe(true);
  const kubeconfig = readFileSync(join(dir, "kubeconfig"), "utf8");
  expect(kubeconfig).toContain(`127.0.0.1:${now.get("APISERVER_PORT")}`);

  // A second `up` finds its own cluster alive on the new ports and keeps them.
  const again = controlPlane("up");
  expect(again.status, again.stderr).toBe(0);
  expect(again.stderr).toContain("already up");
});
