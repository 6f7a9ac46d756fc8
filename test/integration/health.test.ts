// /healthz tells Kubernetes to restart an operator whose watch has gone silent. A TCP proxy
// between the operator and the real API server is frozen (connections stay open, no bytes move),
// which is what a stalled watch looks like from the client.
import { readFileSync, writeFileSync } from "node:fs";
import { connect, createServer, type Server, type Socket } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, beforeEach, expect, it } from "vitest";
import { parse, stringify } from "yaml";
import type { KubeClient } from "../../operator/kube/client.ts";
import { deleteNamespace, kube, kubeconfigPath, newNamespace } from "../support/cluster.ts";
import { startOperator, type OperatorProcess } from "../support/operator-process.ts";
import { waitFor } from "../support/wait.ts";

class FreezableProxy {
  frozen = false;
  private readonly sockets = new Set<Socket>();
  private server?: Server;
  port = 0;
  private readonly target: { host: string; port: number };

  constructor(target: { host: string; port: number }) {
    this.target = target;
  }

  async start(): Promise<void> {
    this.server = createServer((client) => {
      const upstream = connect(this.target.port, this.target.host);
      for (const s of [client, upstream]) {
        this.sockets.add(s);
        s.on("close", () => this.sockets.delete(s));
        s.on("error", () => {});
        if (this.frozen) s.pause();
      }
      client.pipe(upstream);
      upstream.pipe(client);
      client.on("close", () => upstream.destroy());
      upstream.on("close", () => client.destroy());
    });
    await new Promise<void>((resolve) => this.server!.listen(0, "127.0.0.1", resolve));
    this.port = (this.server!.address() as { port: number }).port;
  }

  freeze(): void {
    this.frozen = true;
    for (const s of this.sockets) s.pause();
  }

  thaw(): void {
    this.frozen = false;
    for (const s of this.sockets) s.resume();
  }

  async stop(): Promise<void> {
    for (const s of this.sockets) s.destroy();
    await new Promise((resolve) => this.server?.close(resolve));
  }
}

let client: KubeClient;
let ns: string;
let operator: OperatorProcess | undefined;
let proxy: FreezableProxy | undefined;

beforeEach(async () => {
  client = kube();
  ns = await newNamespace(client, "health");
});

afterEach(async () => {
  await operator?.stop("SIGKILL");
  await proxy?.stop();
  await deleteNamespace(client, ns);
});

it("fails /healthz when its watches go silent, and recovers when they come back", async () => {
  const config = parse(readFileSync(kubeconfigPath(), "utf8"));
  const server = new URL(config.clusters[0].cluster.server);
  proxy = new FreezableProxy({ host: server.hostname, port: Number(server.port) });
  await proxy.start();
  config.clusters[0].cluster.server = `https://127.0.0.1:${proxy.port}`;
  const viaProxy = join(tmpdir(), `health-${ns}.kubeconfig`);
  writeFileSync(viaProxy, stringify(config));

  operator = await startOperator(ns, ["--watch-silence-limit=6s"], { KUBECONFIG: viaProxy });
  const healthz = async () => (await fetch(`${operator!.healthUrl}/healthz`)).status;
  // A quiet but healthy watch is not silent: it reconnects within half the limit.
  const healthyUntil = Date.now() + 10_000;
  while (Date.now() < healthyUntil) {
    expect(await healthz()).toBe(200);
    await new Promise((r) => setTimeout(r, 500));
  }

  proxy.freeze();
  await waitFor("/healthz to fail", async () => ((await healthz()) === 500 ? true : undefined), { timeoutMs: 30_000 });
  const body = await (await fetch(`${operator.healthUrl}/healthz`)).text();
  expect(body).toMatch(/watch .* silent/);

  // The informer notices too and starts over, rather than waiting on a dead connection.
  // Each informer's silence is timed on its own: thawing as soon as the first restarts (the pods'
  // or the nodes') could come before the runs' informer noticed, and it is the one checked below.
  await waitFor("the runs' informer to restart itself", () => operator!.logs.some((l) => l.includes("watch silent; restarting") && l.includes('"informer":"agentruns/')), { timeoutMs: 15_000 });
  proxy.thaw();
  await waitFor("/healthz to recover", async () => ((await healthz()) === 200 ? true : undefined), { timeoutMs: 90_000 });
  const restarts = (await operator.metrics()).split("\n").filter((l) => l.startsWith("watchdog_informer_restarts_total{"));
  expect(restarts.some((l) => /informer="agentruns\/health-[a-f0-9]+"\} [1-9]/.test(l)), restarts.join("\n")).toBe(true);
});
