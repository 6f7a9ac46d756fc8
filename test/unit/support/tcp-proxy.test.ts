// The test proxy on plain sockets: a stall holds every byte in both directions, on open and new
// connections alike, without closing anything; resume lets them through; cut drops everything.
import { connect, createServer, type Server, type Socket } from "node:net";
import { afterEach, expect, it } from "vitest";
import { startTcpProxy, type TcpProxy } from "../../support/tcp-proxy.ts";
import { holds, waitFor } from "../../support/wait.ts";

let upstream: Server | undefined;
let proxy: Omit<TcpProxy, "kubeconfig"> | undefined;

afterEach(async () => {
  await proxy?.close();
  await new Promise((resolve) => (upstream ? upstream.close(resolve) : resolve(undefined)));
});

/** An upstream that records what it receives and can talk back on each connection. */
async function recordingServer() {
  const received: string[] = [];
  const sockets: Socket[] = [];
  upstream = createServer((socket) => {
    sockets.push(socket);
    socket.on("data", (chunk) => received.push(chunk.toString()));
    socket.on("error", () => {});
  });
  await new Promise<void>((resolve) => upstream!.listen(0, "127.0.0.1", resolve));
  return { port: (upstream.address() as { port: number }).port, received, sockets };
}

function client(address: string) {
  const [host, port] = address.split(":");
  const socket = connect({ host, port: Number(port) });
  const received: string[] = [];
  socket.on("data", (chunk) => received.push(chunk.toString()));
  socket.on("error", () => {});
  return { socket, received };
}

it("holds bytes both ways while stalled, on old and new connections, and lets them through on resume", async () => {
  const server = await recordingServer();
  proxy = await startTcpProxy("127.0.0.1", server.port);
  const one = client(proxy.address);
  one.socket.write("up-1");
  await waitFor("up-1 upstream", () => server.received.join("").includes("up-1"));
  server.sockets[0]!.write("down-1");
  await waitFor("down-1 at the client", () => one.received.join("").includes("down-1"));

  proxy.stall();
  one.socket.write("up-2");
  server.sockets[0]!.write("down-2");
  const two = client(proxy.address);
  two.socket.write("new");
  await waitFor("the new connection accepted", () => proxy!.connections === 2);
  await holds(
    "nothing crossing the proxy",
    () => !server.received.join("").includes("up-2") && !server.received.join("").includes("new") && !one.received.join("").includes("down-2"),
    500,
  );
  expect(one.socket.destroyed || two.socket.destroyed).toBe(false);

  proxy.resume();
  await waitFor("everything held back to arrive", () => {
    const up = server.received.join("");
    return up.includes("up-2") && up.includes("new") && one.received.join("").includes("down-2");
  });
});

it("drops every connection on cut", async () => {
  const server = await recordingServer();
  proxy = await startTcpProxy("127.0.0.1", server.port);
  const one = client(proxy.address);
  one.socket.write("hello");
  await waitFor("hello upstream", () => server.received.join("").includes("hello"));
  const closed = new Promise((resolve) => one.socket.once("close", resolve));
  proxy.cut();
  await closed;
  expect(one.socket.destroyed).toBe(true);
});
