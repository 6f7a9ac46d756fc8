// Command line of `kubectl agentrun`: subcommands, their flags and their help. Flags may come
// before or after the subcommand, as with kubectl, but each subcommand accepts only its own.
import { parseArgs } from "node:util";
import { isDnsLabel, isDnsSubdomain } from "../../api/names.ts";
import { DatabaseUrlError, REFUSAL, REFUSED_FLAG, resolveDatabaseUrl } from "../database-url.ts";

export const COMMANDS = ["list", "describe", "history", "resume", "approve", "reject", "suspend", "unsuspend", "console"] as const;
export type CommandName = (typeof COMMANDS)[number];
export type Output = "table" | "wide" | "json";

export interface Invocation {
  command: CommandName;
  /** The run's name; set for every command but list. */
  run?: string;
  namespace?: string;
  allNamespaces: boolean;
  kubeconfig?: string;
  context?: string;
  output: Output;
  /** The ledger's URL, from --database-url-file or DATABASE_URL; never from the command line. */
  databaseUrl?: string;
  force: boolean;
  answer?: string;
  reason?: string;
  /** approve/reject: the request the answer is for; refused if another one is pending. */
  approvalId?: string;
  /** console: where it listens. */
  port?: number;
  address?: string;
  /** console: serve users who sign in with their own token, not the kubeconfig's user. */
  inCluster?: boolean;
  /** console: serve HTTPS with this certificate and key (PEM files, reloaded when they change). */
  tls?: { certFile: string; keyFile: string };
}

/** Where and how the console serves: its address, whether it signs users in, its certificate. */
function consoleOptions(values: Partial<Record<Flag, string | boolean>>, port: number, command: CommandName): Pick<Invocation, "port" | "address" | "inCluster" | "tls"> {
  const certFile = values["tls-cert-file"] as string | undefined;
  const keyFile = values["tls-private-key-file"] as string | undefined;
  if ((certFile === undefined) !== (keyFile === undefined)) throw new UsageError("--tls-cert-file and --tls-private-key-file go together", command);
  return {
    port,
    address: (values.address as string | undefined) ?? "127.0.0.1",
    ...(values["in-cluster"] === true ? { inCluster: true } : {}),
    ...(certFile !== undefined && keyFile !== undefined ? { tls: { certFile, keyFile } } : {}),
  };
}

/** What the command line asks for: help text to print, or a command to run. */
export type Parsed = { help: string } | { invocation: Invocation };

/** Bad usage: exit 2 with the message and the usage of `command` (or the general usage). */
export class UsageError extends Error {
  readonly command: CommandName | undefined;
  constructor(message: string, command?: CommandName) {
    super(message);
    this.name = "UsageError";
    this.command = command;
  }
}

const OPTIONS = {
  namespace: { type: "string", short: "n" },
  "all-namespaces": { type: "boolean", short: "A" },
  kubeconfig: { type: "string" },
  context: { type: "string" },
  output: { type: "string", short: "o" },
  "database-url-file": { type: "string" },
  // Recognised only to be refused, with why (see ../database-url.ts); a string, so that its value
  // is not taken for the run's name.
  "database-url": { type: "string" },
  force: { type: "boolean" },
  answer: { type: "string" },
  reason: { type: "string" },
  "approval-id": { type: "string" },
  port: { type: "string" },
  address: { type: "string" },
  "in-cluster": { type: "boolean" },
  "tls-cert-file": { type: "string" },
  "tls-private-key-file": { type: "string" },
  help: { type: "boolean", short: "h" },
} as const;
type Flag = keyof typeof OPTIONS;

/** Flags whose value is free text: it may start with a dash. */
const FREE_TEXT: readonly Flag[] = ["answer", "reason"];
const COMMON: readonly Flag[] = ["namespace", "kubeconfig", "context", "help"];

const COMMON_HELP = `Flags for every command:
  -n, --namespace NS     the run's namespace (default: the context's namespace, else "default")
      --kubeconfig PATH  kubeconfig file (default: $KUBECONFIG, else ~/.kube/config)
      --context NAME     kubeconfig context to use (default: the current context)
  -h, --help             show help`;

/** How the commands that read the ledger are given its URL, which the command line never carries. */
const LEDGER_HELP = `      --database-url-file FILE  file holding the ledger's PostgreSQL URL (default: $DATABASE_URL);
                                the URL is never a flag: ps shows a command line to every user`;

interface CommandSpec {
  /** One line for the general usage. */
  summary: string;
  /** Takes a run name. */
  run: boolean;
  flags: readonly Flag[];
  outputs: readonly Output[];
  usage: string;
}

const SPECS: Record<CommandName, CommandSpec> = {
  list: {
    summary: "list runs: phase, attempt, restarts, heartbeat age, nudges and reason",
    run: false,
    flags: ["all-namespaces", "output"],
    outputs: ["table", "wide", "json"],
    usage: `Usage: kubectl agentrun list [-n NS | -A] [-o wide|json]

Lists AgentRuns. RESTARTS is restarts spent of the recovery allowance (status.watchdog.maxRestarts),
HEARTBEAT the age of the current attempt's last heartbeat, NUDGES stall nudges sent of the most allowed.

  -A, --all-namespaces   list runs in every namespace
  -o, --output FORMAT    wide (adds pod, stall state, retry time and message) or json`,
  },
  describe: {
    summary: "show a run: spec, effective watchdog settings, conditions, failure, stall, approval, timeline",
    run: true,
    flags: ["database-url-file"],
    outputs: ["table"],
    usage: `Usage: kubectl agentrun describe RUN [--database-url-file FILE]

Shows a run's spec, effective watchdog settings, conditions, last failure, stall state and approval,
and a timeline merged from its Events, status.transitions and, when a ledger is given, the ledger.

${LEDGER_HELP}`,
  },
  history: {
    summary: "a run's history: the ledger's full history, or what the cluster still holds",
    run: true,
    flags: ["database-url-file", "output"],
    outputs: ["table", "json"],
    usage: `Usage: kubectl agentrun history RUN [--database-url-file FILE] [-o json]

Prints the run's full history from the ledger (every phase transition and tool call): read from
the ledger URL when one is given, else through the API server with your own credentials (the
operator's history.watchdog.dev API, which the chart installs). The ledger also keeps the history
of deleted runs. Without either, prints what the cluster still holds: the latest
status.transitions and the run's Events.

${LEDGER_HELP}
  -o, --output json             the history as JSON`,
  },
  resume: {
    summary: "resume a run that needs a person, with fresh budgets (watchdog.dev/resume)",
    run: true,
    flags: ["force"],
    outputs: ["table"],
    usage: `Usage: kubectl agentrun resume RUN [--force]

Sets a new watchdog.dev/resume value (the current time). The watchdog then queues a new attempt
with fresh budgets. Refuses unless the run is in NeedsHumanIntervention.

      --force   set the annotation whatever the phase (the watchdog records it and acts on it
                only in NeedsHumanIntervention)`,
  },
  approve: {
    summary: "answer a run awaiting a reply (watchdog.dev/approve)",
    run: true,
    flags: ["answer", "approval-id"],
    outputs: ["table"],
    usage: `Usage: kubectl agentrun approve RUN [--answer TEXT] [--approval-id ID]

Approves the request of a run in AwaitingReply by setting watchdog.dev/approve; the sandbox reads
the answer and carries on. Refuses unless the run is awaiting a reply.

      --answer TEXT       the answer handed to the agent (default: none, which means "approved")
      --approval-id ID    the request you are answering (status.approval.id); refused if the
                          pending request is another one`,
  },
  reject: {
    summary: "reject a run awaiting a reply; the run fails (watchdog.dev/reject)",
    run: true,
    flags: ["reason", "approval-id"],
    outputs: ["table"],
    usage: `Usage: kubectl agentrun reject RUN [--reason TEXT] [--approval-id ID]

Rejects the request of a run in AwaitingReply by setting watchdog.dev/reject. The run ends in
Failed (reason Rejected). Refuses unless the run is awaiting a reply.

      --reason TEXT       why (default: none, which means "rejected")
      --approval-id ID    the request you are rejecting (status.approval.id); refused if the
                          pending request is another one`,
  },
  suspend: {
    summary: "suspend a run: its sandbox pod is removed and no timer fires (spec.suspend=true)",
    run: true,
    flags: [],
    outputs: ["table"],
    usage: `Usage: kubectl agentrun suspend RUN

Sets spec.suspend to true: the sandbox pod is removed, no timer fires and nothing is nudged.`,
  },
  unsuspend: {
    summary: "unsuspend a run: it is queued as a new attempt (spec.suspend=false)",
    run: true,
    flags: [],
    outputs: ["table"],
    usage: `Usage: kubectl agentrun unsuspend RUN

Sets spec.suspend to false: the run is queued again as a new attempt.`,
  },
  console: {
    summary: "serve the web console (runs, a run's timeline, the intervention queue) with your kubeconfig",
    run: false,
    flags: ["port", "address", "database-url-file", "in-cluster", "tls-cert-file", "tls-private-key-file"],
    outputs: ["table"],
    usage: `Usage: kubectl agentrun console [--port 8090] [--address 127.0.0.1] [--database-url-file FILE]
       kubectl agentrun console --in-cluster [--address 0.0.0.0] [--tls-cert-file F --tls-private-key-file F]

Serves the web console on http://ADDRESS:PORT and prints its link, which carries a session token:
the console refuses any request without it. Every read and every action is made with your
kubeconfig's identity, so RBAC decides what you see and may do, exactly as with kubectl. Stops on
Ctrl-C.

With --in-cluster the console serves many people, each as themselves: every request carries the
user's own bearer token (an Authorization header set by an authenticating proxy in front, or a
token signed in at /signin and kept on the server behind a session cookie). The API server checks
the token (TokenReview) and then every read and action is made with it; the console's own identity
(the pod's ServiceAccount, or the kubeconfig) only asks for those TokenReviews.

      --port PORT               port to listen on (default 8090; 0 picks a free one)
      --address ADDRESS         address to listen on (default 127.0.0.1, this machine only)
      --in-cluster              serve signed-in users, each with their own token (above)
      --tls-cert-file FILE      serve HTTPS with this certificate (PEM, reloaded when it changes)
      --tls-private-key-file F  and this key
${LEDGER_HELP}`,
  },
};

export const GENERAL_USAGE = `kubectl agentrun: watch and steer AgentRuns (watchdog.dev/v1alpha1)

Usage: kubectl agentrun COMMAND [RUN] [flags]

Commands:
${COMMANDS.map((c) => `  ${(SPECS[c].run ? `${c} RUN` : c).padEnd(16)}${SPECS[c].summary}`).join("\n")}

${COMMON_HELP}

Run 'kubectl agentrun COMMAND --help' for a command's own flags.
Exit codes: 0 done, 1 failed or refused, 2 bad usage.`;

/** The help text of one command, or the general one. */
export function usage(command?: CommandName): string {
  return command ? `${SPECS[command].usage}\n\n${COMMON_HELP}` : GENERAL_USAGE;
}

const isCommand = (word: string | undefined): word is CommandName => (COMMANDS as readonly string[]).includes(word ?? "");

/** The command line, and the environment for what may also come from it (the ledger's URL). */
export function parse(argv: readonly string[], env: NodeJS.ProcessEnv): Parsed {
  let parsed;
  try {
    parsed = parseArgs({ args: [...argv], options: OPTIONS, allowPositionals: true, strict: false, tokens: true });
  } catch (err) {
    throw new UsageError((err as Error).message);
  }
  const { positionals, tokens } = parsed;
  const [first, ...rest] = positionals;
  const help = tokens.some((t) => t.kind === "option" && t.name === "help");

  if (first === "help") {
    const topic = rest[0];
    if (topic !== undefined && !isCommand(topic)) throw new UsageError(`unknown command "${topic}"`);
    return { help: usage(topic) };
  }
  if (first === undefined) {
    if (help) return { help: usage() };
    throw new UsageError("no command given");
  }
  if (!isCommand(first)) throw new UsageError(`unknown command "${first}"`);
  const command: CommandName = first;
  if (help) return { help: usage(command) };
  const spec = SPECS[command];

  const values: Partial<Record<Flag, string | boolean>> = {};
  for (const token of tokens) {
    if (token.kind !== "option") continue;
    const name = token.name as Flag;
    if (name === REFUSED_FLAG) throw new UsageError(REFUSAL, command);
    if (!(name in OPTIONS)) throw new UsageError(`unknown flag ${token.rawName}`, command);
    if (!COMMON.includes(name) && !spec.flags.includes(name)) throw new UsageError(`${command} does not take ${token.rawName}`, command);
    if (OPTIONS[name].type === "string") {
      const value = token.value;
      if (value === undefined || (!token.inlineValue && value.startsWith("-") && !FREE_TEXT.includes(name))) {
        throw new UsageError(`${token.rawName} needs a value`, command);
      }
      values[name] = value;
    } else {
      if (token.value !== undefined) throw new UsageError(`${token.rawName} takes no value`, command);
      values[name] = true;
    }
  }

  let run: string | undefined;
  if (spec.run) {
    if (rest.length === 0) throw new UsageError(`${command} needs the name of a run`, command);
    if (rest.length > 1) throw new UsageError(`${command} takes one run, got ${rest.length}: ${rest.join(" ")}`, command);
    run = rest[0] as string;
    // Kubernetes names (a run's is a DNS subdomain, a namespace's a DNS label); checking them here
    // also keeps anything odd out of request paths.
    if (!isDnsSubdomain(run)) throw new UsageError(`"${run}" is not a valid run name`, command);
  } else if (rest.length > 0) {
    throw new UsageError(`${command} takes no arguments, got: ${rest.join(" ")}`, command);
  }

  const namespace = values.namespace as string | undefined;
  if (namespace !== undefined && !isDnsLabel(namespace)) throw new UsageError(`"${namespace}" is not a valid namespace name`, command);

  const portFlag = values.port as string | undefined;
  const port = portFlag === undefined ? 8090 : Number(portFlag);
  if (!/^\d{1,5}$/.test(portFlag ?? "0") || port > 65535) throw new UsageError(`--port must be a number from 0 to 65535, got "${portFlag}"`, command);

  const outputFlag = values.output as string | undefined;
  const output = (outputFlag ?? "table") as Output;
  if (outputFlag !== undefined && (outputFlag === "table" || !spec.outputs.includes(output))) {
    const allowed = spec.outputs.filter((o) => o !== "table");
    throw new UsageError(`unsupported output format "${outputFlag}" for ${command}: use ${allowed.join(" or ")}`, command);
  }

  // Read here, so that a file that cannot be read is bad usage, told before anything is run.
  let databaseUrl: string | undefined;
  if (spec.flags.includes("database-url-file")) {
    try {
      databaseUrl = resolveDatabaseUrl(values["database-url-file"] as string | undefined, env);
    } catch (err) {
      if (!(err instanceof DatabaseUrlError)) throw err;
      throw new UsageError(err.message, command);
    }
  }

  if (command === "console" && values["in-cluster"] === true && databaseUrl !== undefined) {
    // Read with the console's database credentials, the ledger would answer anyone signed in;
    // through the API server (agentrunhistories) each user reads only runs they may get.
    throw new UsageError("--in-cluster takes no ledger URL (--database-url-file or DATABASE_URL): signed-in users read history through the API server, as themselves", command);
  }

  return {
    invocation: {
      command,
      ...(run !== undefined ? { run } : {}),
      ...(namespace !== undefined ? { namespace } : {}),
      allNamespaces: values["all-namespaces"] === true,
      ...(values.kubeconfig !== undefined ? { kubeconfig: values.kubeconfig as string } : {}),
      ...(values.context !== undefined ? { context: values.context as string } : {}),
      output,
      ...(databaseUrl !== undefined ? { databaseUrl } : {}),
      force: values.force === true,
      ...(values.answer !== undefined ? { answer: values.answer as string } : {}),
      ...(values.reason !== undefined ? { reason: values.reason as string } : {}),
      ...(values["approval-id"] !== undefined ? { approvalId: values["approval-id"] as string } : {}),
      ...(command === "console" ? consoleOptions(values, port, command) : {}),
    },
  };
}
