// `kubectl agentrun` as a function of its arguments and environment, returning the exit code:
// 0 done, 1 failed or refused, 2 bad usage. Every failure is one readable line on stderr.
import { terminalWriter } from "../terminal.ts";
import { parse, usage, UsageError } from "./args.ts";
import type { Io } from "./commands.ts";

const stdio: Io = {
  out: (text) => void process.stdout.write(text),
  err: (text) => void process.stderr.write(text),
};

export async function main(argv: readonly string[], env: NodeJS.ProcessEnv, terminal: Io = stdio, now: () => number = Date.now): Promise<number> {
  // Everything printed passes here: the command line, runs and Events all carry text that others
  // wrote, and none of it may drive the terminal.
  const io = terminalWriter(terminal);
  let parsed;
  try {
    parsed = parse(argv, env);
  } catch (err) {
    if (!(err instanceof UsageError)) throw err;
    io.err(`error: ${err.message}\n\n${usage(err.command)}\n`);
    return 2;
  }
  if ("help" in parsed) {
    io.out(`${parsed.help}\n`);
    return 0;
  }
  // Loaded only to run a command: the Kubernetes client takes most of the start-up time, and
  // help or a usage error needs none of it.
  const { execute } = await import("./commands.ts");
  // The console is loaded only for its own command, and from here: it uses the commands module.
  return execute(parsed.invocation, env, io, now, { console: (ctx) => import("../../console/serve.ts").then(({ serveConsole }) => serveConsole(ctx)) });
}
