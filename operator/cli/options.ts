// Operator options: flags (kubebuilder's names where one exists), then environment variables,
// validated with zod so that a bad value stops the operator at start with a clear message.
import { readFileSync } from "node:fs";
import { parseArgs } from "node:util";
import { parseYaml } from "../kube/connection.ts";
import { z } from "zod";
import { DURATION_PATTERN, parseDuration } from "../api/duration.ts";
import { InstallDefaults } from "../api/defaults.ts";
import { chosenDefect } from "../defects.ts";
import { DatabaseUrlError, givesRefusedFlag, REFUSAL, resolveDatabaseUrl } from "./database-url.ts";

const duration = z.string().regex(DURATION_PATTERN, "must be a duration such as 30s or 5m").transform(parseDuration);
const bindAddress = z.string().regex(/^(0|[^:\s]*:\d{1,5})$/, "must be host:port, :port, or 0 to disable");

export const OperatorOptions = z.strictObject({
  namespaces: z
    .string()
    .default("")
    .transform((s) => s.split(",").map((n) => n.trim()).filter(Boolean))
    .pipe(z.array(z.string().regex(/^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/, "must be a namespace name"))),
  concurrency: z.coerce.number().int("must be a whole number").min(1).max(256).default(16),
  metricsBindAddress: bindAddress.default(":8080"),
  healthProbeBindAddress: bindAddress.default(":8081"),
  metricsSecure: z.boolean().default(false),
  metricsMaxNamespaces: z.coerce.number().int("must be a whole number").min(1).max(10_000).default(50),
  tlsCertFile: z.string().min(1).optional(),
  tlsPrivateKeyFile: z.string().min(1).optional(),
  logLevel: z.enum(["trace", "debug", "info", "warn", "error", "fatal"]).default("info"),
  leaderElect: z.boolean().default(false),
  leaderElectionNamespace: z.string().min(1).default("default"),
  leaderElectionId: z.string().min(1).default("agent-watchdog.watchdog.dev"),
  shards: z.coerce.number().int("must be a whole number").min(1).max(256).default(1),
  resyncPeriod: duration.prefault("5m"),
  watchSilenceLimit: duration.prefault("2m"),
  stuckReconcileLimit: duration.prefault("2m"),
  defaultsFile: z.string().optional(),
  defaults: InstallDefaults.default({}),
  databaseUrl: z.string().url("must be a postgres:// URL").optional(),
  sandboxServiceAccount: z.enum(["namespace", "run", "none"]).default("run"),
  sandboxClusterRole: z.string().min(1).default("agent-watchdog-sandbox"),
  sandboxTokenExpiration: z
    .string()
    .regex(DURATION_PATTERN, "must be a duration such as 1h")
    .transform(parseDuration)
    .pipe(z.number().min(600_000, "must be at least 10m (the API server's minimum for bound tokens)"))
    .prefault("1h"),
  identity: z.string().min(1),
}).refine((o) => (o.tlsCertFile === undefined) === (o.tlsPrivateKeyFile === undefined), {
  path: ["tlsCertFile"],
  message: "--tls-cert-file and --tls-private-key-file go together: give both or neither",
});
export type OperatorOptions = z.output<typeof OperatorOptions>;

export const USAGE = `Usage: agent-watchdog operator [flags]   (from a clone: npm start -- [flags])

  --namespaces=a,b                 namespaces to watch (default: all)      env WATCH_NAMESPACES
  --concurrency=N                  concurrent reconciles (default 16)
  --metrics-bind-address=ADDR      metrics endpoint (default :8080, 0 disables)
  --health-probe-bind-address=ADDR /healthz and /readyz (default :8081)
  --metrics-secure                 serve /metrics only to callers the API server lets get it
                                   (TokenReview, SubjectAccessReview); the run history on the
                                   same address always is, to callers who may get the run
  --metrics-max-namespaces=N       namespaces with spending series of their own; later ones are
                                   counted as namespace="_other" (default 50)
  --tls-cert-file=PATH             serve the metrics address over HTTPS with this certificate
  --tls-private-key-file=PATH      and this key (both PEM; reloaded when they change)
  --log-level=LEVEL                trace, debug, info, warn, error (default info)  env LOG_LEVEL
  --leader-elect                   elect a leader on a Lease before reconciling
  --leader-election-namespace=NS   namespace of the Lease (default: the pod's namespace, else default)
  --leader-election-id=NAME        name of the Lease (default agent-watchdog.watchdog.dev)
  --shards=N                       virtual shards (default 1: one leader supervises every run);
                                   with more, each replica holds the Leases NAME-shard-<i> of a
                                   fair share and watches only those shards' runs and pods
  --resync-period=DUR              re-check every run this often (default 5m)
  --watch-silence-limit=DUR        restart a watch silent this long; /healthz fails (default 2m)
  --stuck-reconcile-limit=DUR      /healthz fails when one reconcile runs longer (default 2m)
  --defaults-file=PATH             install-wide watchdog defaults (YAML or JSON, spec.watchdog shape)
                                   env WATCHDOG_DEFAULTS may hold the same as JSON
  --database-url-file=FILE         file holding the PostgreSQL ledger's URL (trimmed); wins over
                                   env DATABASE_URL. Never the URL itself on the command line:
                                   ps shows it, password and all, to every user of the machine
  --sandbox-service-account=MODE   namespace: one ServiceAccount per namespace bound to
                                   --sandbox-cluster-role; run: one per run, owned by it;
                                   none: the template's own, unfenced (default run, as the chart)
  --sandbox-cluster-role=NAME      ClusterRole for namespace sandboxes (default agent-watchdog-sandbox)
  --sandbox-token-expiration=DUR   lifetime of the sandbox's pod-bound token (default 1h)
`;

export class OptionsError extends Error {}

export function parseOptions(argv: string[], env: NodeJS.ProcessEnv): OperatorOptions {
  // Refused before parsing, so that the reason is given even when the flag has no value.
  if (givesRefusedFlag(argv)) throw new OptionsError(REFUSAL);
  const reintroduce = chosenDefect(env).error;
  if (reintroduce) throw new OptionsError(reintroduce);
  let values: Record<string, string | boolean | undefined>;
  try {
    ({ values } = parseArgs({
      args: argv,
      strict: true,
      options: {
        namespaces: { type: "string" },
        concurrency: { type: "string" },
        "metrics-bind-address": { type: "string" },
        "health-probe-bind-address": { type: "string" },
        "metrics-secure": { type: "boolean" },
        "metrics-max-namespaces": { type: "string" },
        "tls-cert-file": { type: "string" },
        "tls-private-key-file": { type: "string" },
        "log-level": { type: "string" },
        "leader-elect": { type: "boolean" },
        "leader-election-namespace": { type: "string" },
        "leader-election-id": { type: "string" },
        shards: { type: "string" },
        "resync-period": { type: "string" },
        "watch-silence-limit": { type: "string" },
        "stuck-reconcile-limit": { type: "string" },
        "defaults-file": { type: "string" },
        "database-url-file": { type: "string" },
        "sandbox-service-account": { type: "string" },
        "sandbox-cluster-role": { type: "string" },
        "sandbox-token-expiration": { type: "string" },
        help: { type: "boolean", short: "h" },
      },
    }));
  } catch (err) {
    throw new OptionsError(`${(err as Error).message}\n\n${USAGE}`);
  }
  if (values.help) throw new OptionsError(USAGE);

  let defaults: unknown = {};
  const defaultsFile = values["defaults-file"] as string | undefined;
  try {
    // The YAML parser is loaded only for a defaults file: an operator without one never pays for it.
    if (defaultsFile) defaults = parseYaml(readFileSync(defaultsFile, "utf8")) ?? {};
    else if (env.WATCHDOG_DEFAULTS) defaults = JSON.parse(env.WATCHDOG_DEFAULTS);
  } catch (err) {
    throw new OptionsError(`cannot read watchdog defaults: ${(err as Error).message}`);
  }

  let databaseUrl: string | undefined;
  try {
    databaseUrl = resolveDatabaseUrl(values["database-url-file"] as string | undefined, env);
  } catch (err) {
    if (!(err instanceof DatabaseUrlError)) throw err;
    throw new OptionsError(err.message);
  }

  const raw = {
    namespaces: values.namespaces ?? env.WATCH_NAMESPACES,
    concurrency: values.concurrency,
    metricsBindAddress: values["metrics-bind-address"],
    healthProbeBindAddress: values["health-probe-bind-address"],
    metricsSecure: values["metrics-secure"],
    metricsMaxNamespaces: values["metrics-max-namespaces"],
    tlsCertFile: values["tls-cert-file"],
    tlsPrivateKeyFile: values["tls-private-key-file"],
    logLevel: values["log-level"] ?? env.LOG_LEVEL,
    leaderElect: values["leader-elect"],
    leaderElectionNamespace: values["leader-election-namespace"] ?? env.POD_NAMESPACE,
    leaderElectionId: values["leader-election-id"],
    shards: values.shards,
    resyncPeriod: values["resync-period"],
    watchSilenceLimit: values["watch-silence-limit"],
    stuckReconcileLimit: values["stuck-reconcile-limit"],
    defaultsFile,
    defaults,
    databaseUrl,
    sandboxServiceAccount: values["sandbox-service-account"],
    sandboxClusterRole: values["sandbox-cluster-role"],
    sandboxTokenExpiration: values["sandbox-token-expiration"],
    identity: env.POD_NAME ?? `${env.HOSTNAME ?? "agent-watchdog"}-${process.pid}`,
  };
  const parsed = OperatorOptions.safeParse(Object.fromEntries(Object.entries(raw).filter(([, v]) => v !== undefined && v !== "")));
  if (!parsed.success) {
    const lines = parsed.error.issues.map((issue) => {
      const path = issue.path.map(String);
      const flag =
        path[0] === "defaults"
          ? `watchdog defaults: ${path.slice(1).join(".")}`
          : path[0] === "databaseUrl"
            ? "the ledger's URL (DATABASE_URL or --database-url-file)"
            : `--${(path[0] ?? "").replace(/[A-Z]/g, (c) => `-${c.toLowerCase()}`)}`;
      return `  ${flag}: ${issue.message}`;
    });
    throw new OptionsError(`invalid options:\n${lines.join("\n")}`);
  }
  return parsed.data;
}
