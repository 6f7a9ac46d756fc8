// `kubectl agentrun console`: serves the console with the user's kubeconfig until Ctrl-C, and
// prints the link that carries its session token.
import { randomBytes } from "node:crypto";
import { existsSync } from "node:fs";
import type { Server } from "node:http";
import type { AddressInfo } from "node:net";
import { fileURLToPath } from "node:url";
import { loadKubeConfig } from "../cli/plugin/cluster.ts";
import type { Context } from "../cli/plugin/commands.ts";
import { KubernetesAccess } from "../metrics/access.ts";
import { LinkGate, type Gate } from "./gate.ts";
import { Guard } from "./guard.ts";
import { createConsoleServer, type ConsoleOptions } from "./server.ts";
import { SignInGate } from "./sign-in.ts";

/** Where the built pages are: beside this file, in a clone (npm run build:console) and in the package. */
export const UI_DIR = fileURLToPath(new URL("./ui/dist/", import.meta.url));

const LOOPBACK = new Set(["127.0.0.1", "::1", "localhost"]);

export interface ListeningConsole {
  server: Server;
  /** The port it listens on (the one asked for, or the one picked for port 0). */
  port: number;
  /** The address as a URL's host: an IPv6 address in brackets. */
  hostName: string;
}

/**
 * The console's server listening on address:port, and its gate told where: the Host names it
 * answers for and the port that names its session cookie.
 */
export async function listenConsole(options: ConsoleOptions, address: string, port: number): Promise<ListeningConsole> {
  const server = createConsoleServer(options);
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(port, address, () => resolve());
  });
  const bound = (server.address() as AddressInfo).port;
  const hostName = address.includes(":") ? `[${address}]` : address;
  const names = LOOPBACK.has(address) ? ["127.0.0.1", "localhost", "[::1]"] : [hostName];
  options.gate.listening(bound, [...new Set([hostName, ...names])]);
  return { server, port: bound, hostName };
}

/** The pages' build recipe: present in a clone, absent from the package (whose pages are built). */
const UI_BUILD_CONFIG = fileURLToPath(new URL("./ui/vite.config.ts", import.meta.url));

/**
 * In a clone whose pages were never built, builds them once (what `npm run build:console` does),
 * so that a newcomer's first `kubectl agentrun console` just works. Says why when it cannot.
 */
async function buildPagesInClone(ctx: Context, uiDir: string): Promise<boolean> {
  if (uiDir !== UI_DIR || !existsSync(UI_BUILD_CONFIG)) return false;
  let buildPages: () => Promise<void>;
  try {
    ({ buildPages } = await import("./ui/build.ts"));
  } catch {
    return false; // a clone installed without its devDependencies
  }
  ctx.io.err("building the console's pages once (npm run build:console)...\n");
  try {
    await buildPages();
  } catch (err) {
    ctx.io.err(`error: building the console's pages failed: ${err instanceof Error ? err.message : String(err)}\n`);
    return false;
  }
  return existsSync(`${uiDir}/index.html`);
}

export async function serveConsole(ctx: Context): Promise<number> {
  const uiDir = process.env.AGENTRUN_CONSOLE_UI ?? UI_DIR;
  if (!existsSync(`${uiDir}/index.html`) && !(await buildPagesInClone(ctx, uiDir))) {
    ctx.io.err(`error: the console's pages are not built (no ${uiDir}index.html): run npm run build:console\n`);
    return 1;
  }
  const { address = "127.0.0.1", port = 8090, tls } = ctx.inv;
  // Made before listening, so a bad kubeconfig is reported before any link is printed.
  const cluster = ctx.cluster;
  let gate: Gate;
  let token: string | undefined;
  if (ctx.inv.inCluster) {
    // The console's own identity only asks the API server whose tokens users present.
    gate = new SignInGate({ base: loadKubeConfig(ctx.inv, ctx.env), authenticator: new KubernetesAccess(cluster.client), inv: ctx.inv, env: ctx.env, now: ctx.now });
  } else {
    token = randomBytes(32).toString("base64url");
    gate = new LinkGate(new Guard(token), ctx);
  }
  let listening: ListeningConsole;
  try {
    listening = await listenConsole({ gate, uiDir, ...(tls ? { tls } : {}) }, address, port);
  } catch (err) {
    ctx.io.err(`error: cannot listen on ${address}:${port}: ${(err as Error).message}\n`);
    return 1;
  }
  const { server, hostName, port: bound } = listening;
  const scheme = tls ? "https" : "http";
  if (token === undefined) {
    ctx.io.out(
      `Console for the users of ${cluster.server}, each signed in with their own token:\n` +
        `  ${scheme}://${hostName}:${bound}/signin\n` +
        `Its own identity ("${cluster.userName}") only reviews tokens. Ctrl-C stops the console.\n`,
    );
  } else {
    ctx.io.out(
      `Console for context "${cluster.contextName}" as user "${cluster.userName}" (${cluster.server}):\n` +
        `  ${scheme}://${hostName}:${bound}/?token=${token}\n` +
        "Every read and action is made with this kubeconfig. Ctrl-C stops the console.\n",
    );
    if (!LOOPBACK.has(address)) {
      ctx.io.err(`warning: listening on ${address}, not loopback: anyone who can reach it and has the link acts as this kubeconfig's user\n`);
    }
  }
  await new Promise<void>((resolve) => {
    const stop = () => resolve();
    process.once("SIGINT", stop);
    process.once("SIGTERM", stop);
  });
  server.closeAllConnections();
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return 0;
}
