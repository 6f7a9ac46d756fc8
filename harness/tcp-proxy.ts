// A TCP proxy between one operator and the API server, so that a test or the soak can make that operator's
// network misbehave: stall() stops every byte in both directions without closing anything (a
// partition as a hung connection sees it), cut() drops every connection. It forwards raw bytes, so
// the operator's TLS goes straight through and the server certificate still matches 127.0.0.1.
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { createServer, connect, type Server, type Socket } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { KubeConfig } from "@kubernetes/client-node";

export interface TcpProxy {
  /** host:port the proxy listens on. */
  readonly address: string;
  /** A kubeconfig like the test's, with the API server reached through this proxy. */
  readonly kubeconfig: string;
  /** Connections accepted so far. */
  readonly connections: number;
  /** Stops forwarding on every connection, open and new, keeping them all open. */
  stall(): void;
  resume(): void;
  /** Destroys every connection now open. */
  cut(): void;
  close(): Promise<void>;
}

interface Pair {
  client: Socket;
  server: Socket;
}

/** Starts a proxy to the API server of a kubeconfig file. */
export async function startApiProxy(kubeconfigFile: string): Promise<TcpProxy> {
  const kc = new KubeConfig();
  kc.loadFromFile(kubeconfigFile);
  const upstream = new URL(kc.getCurrentCluster()?.server ?? "");
  const proxy = await startTcpProxy(upstream.hostname, Number(upstream.port || 443));
  const rewritten = new KubeConfig();
  rewritten.loadFromOptions({
    clusters: kc.clusters.map((c) => (c.name === kc.getCurrentCluster()?.name ? { ...c, server: `https://${proxy.address}` } : c)),
    users: kc.users,
    contexts: kc.contexts,
    currentContext: kc.currentContext,
  });
  const dir = mkdtempSync(join(tmpdir(), "agent-watchdog-proxy-"));
  const kubeconfig = join(dir, "kubeconfig");
  writeFileSync(kubeconfig, rewritten.exportConfig(), { mode: 0o600 });
  return {
    ...proxy,
    kubeconfig,
    get connections() {
      return proxy.connections;
    },
    async close() {
      await proxy.close();
      rmSync(dir, { recursive: true, force: true }); // it holds a copy of the client key
    },
  };
}

/** Starts a proxy on a free loopback port to host:port. */
export async function startTcpProxy(host: string, port: number): Promise<Omit<TcpProxy, "kubeconfig">> {
  const pairs = new Set<Pair>();
  let stalled = false;
  let accepted = 0;

  // Flow control does the stalling: a paused socket is not read (beyond one buffer's worth, which
  // is never forwarded), so the kernel buffers fill and the sender blocks.
  const pause = (pair: Pair) => {
    pair.client.pause();
    pair.server.pause();
  };
  const unpause = (pair: Pair) => {
    pair.client.resume();
    pair.server.resume();
  };
  // By hand rather than pipe(): pipe() resumes its source on the destination's 'drain', which
  // would end a stall.
  const forward = (from: Socket, to: Socket) => {
    from.on("data", (chunk: Buffer) => {
      if (!to.write(chunk)) from.pause();
    });
    to.on("drain", () => {
      if (!stalled) from.resume();
    });
    from.on("end", () => to.end());
  };

  const server: Server = createServer((client) => {
    accepted++;
    const upstream = connect({ host, port });
    const pair = { client, server: upstream };
    pairs.add(pair);
    forward(client, upstream);
    forward(upstream, client);
    // before the first read, which 'data' listeners only start on the next tick
    if (stalled) pause(pair);
    const drop = () => {
      pairs.delete(pair);
      client.destroy();
      upstream.destroy();
    };
    client.on("error", drop).on("close", drop);
    upstream.on("error", drop).on("close", drop);
  });
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(0, "127.0.0.1", () => resolve());
  });
  const { port: listening } = server.address() as { port: number };
  const cut = () => {
    for (const pair of pairs) {
      pair.client.destroy();
      pair.server.destroy();
    }
    pairs.clear();
  };

  return {
    address: `127.0.0.1:${listening}`,
    get connections() {
      return accepted;
    },
    stall() {
      stalled = true;
      for (const pair of pairs) pause(pair);
    },
    resume() {
      stalled = false;
      for (const pair of pairs) unpause(pair);
    },
    cut,
    close() {
      cut();
      return new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
