// The container image's entrypoint: one image serves as the operator, as the example agent in
// sandbox pods, and as the ledger's history CLI, chosen by the first argument. Each command's
// modules are imported only when that command runs, so the example agent never loads the
// operator and `--help` loads nothing.
import type { OperatorOptions } from "./options.ts";

export const USAGE = `Usage: agent-watchdog <command> [arguments]

Commands:
  operator [flags]        run the operator (the image's default); \`operator --help\` lists its flags
  example-agent           run the example agent in a sandbox pod (reads WATCHDOG_RUN_NAME,
                          WATCHDOG_RUN_NAMESPACE, WATCHDOG_ATTEMPT and EXAMPLE_BEHAVIOUR)
  history <namespace> <name> [--json] [--database-url-file=FILE]
  history --uid <uid> [--json] [--database-url-file=FILE]
                          print a run's history from the ledger (reads DATABASE_URL, or the
                          URL from FILE; never from the command line, where ps shows it)
  help, --help, -h        print this help
`;

/** Runs one command; resolves to an exit code, or undefined when the command keeps running. */
export async function main(argv: string[], env: NodeJS.ProcessEnv): Promise<number | undefined> {
  const [command, ...rest] = argv;
  switch (command) {
    case "operator":
      return operator(rest, env);
    case "example-agent":
      exitOnSignals();
      // The example agent is a script: importing it runs it.
      await import("../example-agent/main.ts");
      return undefined;
    case "history": {
      exitOnSignals();
      const ledger = await import("../ledger/cli.ts");
      return ledger.main(argv, env);
    }
    case "help":
    case "--help":
    case "-h":
      process.stdout.write(USAGE);
      return 0;
    default:
      process.stderr.write(`${command === undefined ? "missing command" : `unknown command ${JSON.stringify(command)}`}\n\n${USAGE}`);
      return 2;
  }
}

async function operator(args: string[], env: NodeJS.ProcessEnv): Promise<number | undefined> {
  // Loaded before the flags are parsed, so that even `operator --help` proves every module the
  // operator needs can be resolved (the image is checked that way).
  const { runOperator } = await import("./operator.ts");
  const { OptionsError, USAGE: OPERATOR_USAGE, parseOptions } = await import("./options.ts");
  let options: OperatorOptions;
  try {
    options = parseOptions(args, env);
  } catch (err) {
    if (!(err instanceof OptionsError)) throw err;
    // parseOptions reports --help as an error carrying just the usage; asking for help is not one.
    if (err.message === OPERATOR_USAGE) {
      process.stdout.write(OPERATOR_USAGE);
      return 0;
    }
    process.stderr.write(`${err.message}\n`);
    return 2;
  }
  // runOperator returns once everything is started; the process then lives until a signal.
  await runOperator(options);
  return undefined;
}

/**
 * As PID 1 of a container, a process gets no default signal handlers from the kernel: SIGTERM
 * would be ignored and every pod deletion would wait out its grace period. The operator handles
 * its signals itself; the other commands get the default behaviour back.
 */
function exitOnSignals(): void {
  for (const [signal, code] of [["SIGTERM", 143], ["SIGINT", 130]] as const) {
    process.once(signal, () => process.exit(code));
  }
}

if (import.meta.main) {
  main(process.argv.slice(2), process.env).then(
    (code) => {
      if (code !== undefined) process.exitCode = code;
    },
    (err: unknown) => {
      process.stderr.write(`agent-watchdog: ${err instanceof Error ? err.message : String(err)}\n`);
      process.exit(1);
    },
  );
}
