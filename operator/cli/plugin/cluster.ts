// The plugin's side of the cluster: the user's kubeconfig chosen as kubectl chooses it, the
// namespace defaulted as kubectl defaults it, and every failure turned into one readable line.
import { existsSync } from "node:fs";
import { homedir } from "node:os";
import { delimiter, join } from "node:path";
import { KubeConfig } from "@kubernetes/client-node";
import { GROUP, PLURAL, VERSION } from "../../api/agentrun.ts";
import { ApiError, isConflict, isNotFound, KubeClient, paths, type Json } from "../../kube/client.ts";
import { HISTORY_GROUP, historyApiPath } from "../../ledger/history-api.ts";
import type { RunHistory } from "../../ledger/read.ts";

/** A failure the user can act on: printed as `error: <message>`, exit 1, never a stack trace. */
export class CliError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "CliError";
  }
}

export interface KubeconfigChoice {
  kubeconfig?: string;
  context?: string;
}

/** --kubeconfig, else every existing file in $KUBECONFIG (merged), else ~/.kube/config, else in-cluster. */
export function loadKubeConfig(choice: KubeconfigChoice, env: NodeJS.ProcessEnv): KubeConfig {
  const kc = new KubeConfig();
  const load = (target: KubeConfig, file: string) => {
    try {
      target.loadFromFile(file);
    } catch (err) {
      const code = (err as { code?: string }).code;
      throw new CliError(`cannot load kubeconfig ${file}: ${code === "ENOENT" ? "no such file" : (err as Error).message}`);
    }
  };
  if (choice.kubeconfig) {
    load(kc, choice.kubeconfig);
  } else if (env.KUBECONFIG) {
    // kubectl's rules: files in the list that do not exist are skipped, and the first file to
    // name a cluster, user or context, or to set the current context, wins.
    const files = env.KUBECONFIG.split(delimiter).filter((f) => f && existsSync(f));
    if (files.length === 0) throw new CliError(`none of the files in KUBECONFIG exists: ${env.KUBECONFIG}`);
    load(kc, files[0] as string);
    for (const file of files.slice(1)) {
      const more = new KubeConfig();
      load(more, file);
      for (const c of more.clusters) if (!kc.clusters.some((x) => x.name === c.name)) kc.addCluster(c);
      for (const u of more.users) if (!kc.users.some((x) => x.name === u.name)) kc.addUser(u);
      for (const c of more.contexts) if (!kc.contexts.some((x) => x.name === c.name)) kc.addContext(c);
      if (!kc.getCurrentContext() && more.getCurrentContext()) kc.setCurrentContext(more.getCurrentContext());
    }
  } else if (existsSync(join(env.HOME || homedir(), ".kube", "config"))) {
    load(kc, join(env.HOME || homedir(), ".kube", "config"));
  } else if (env.KUBERNETES_SERVICE_HOST) {
    kc.loadFromCluster();
  } else {
    throw new CliError("no kubeconfig: set KUBECONFIG, pass --kubeconfig, or create ~/.kube/config");
  }
  if (choice.context !== undefined) {
    if (!kc.getContexts().some((c) => c.name === choice.context)) throw new CliError(`context "${choice.context}" not found in the kubeconfig`);
    kc.setCurrentContext(choice.context);
  }
  if (!kc.getCurrentContext() || !kc.getCurrentCluster()) {
    throw new CliError("the kubeconfig has no current context: pass --context, or run kubectl config use-context");
  }
  return kc;
}

/** The context's namespace, else "default", as kubectl does. */
export function contextNamespace(kc: KubeConfig): string {
  return kc.getContextObject(kc.getCurrentContext())?.namespace || "default";
}

export class Cluster {
  readonly client: KubeClient;
  readonly server: string;
  readonly namespace: string;
  /** The kubeconfig's context and user: who the requests are made as. */
  readonly contextName: string;
  readonly userName: string;

  constructor(kc: KubeConfig, namespace?: string) {
    this.client = new KubeClient(kc);
    this.server = kc.getCurrentCluster()?.server ?? "";
    this.contextName = kc.getCurrentContext();
    this.userName = kc.getCurrentUser()?.name ?? "";
    this.namespace = namespace ?? contextNamespace(kc);
  }

  /** Runs one API call; whatever goes wrong comes out as a CliError. */
  async call<T>(what: () => Promise<T>): Promise<T> {
    try {
      return await what();
    } catch (err) {
      throw this.explain(err);
    }
  }

  /** The run, or a CliError saying that it, or the API itself, does not exist. */
  async getRun(name: string, namespace = this.namespace): Promise<Json> {
    try {
      return await this.client.get(paths.run(namespace, name));
    } catch (err) {
      throw await this.runFailure(err, name, namespace);
    }
  }

  /** The runs of a namespace, or of all namespaces. */
  async listRuns(namespace: string | undefined): Promise<Json[]> {
    try {
      return (await this.client.get<{ items: Json[] }>(paths.runs(namespace))).items;
    } catch (err) {
      if (missing(err)) await this.requireApi();
      throw this.explain(err);
    }
  }

  /**
   * A merge patch on a run, with the same error handling as getRun, except that a conflict (a
   * resourceVersion precondition that failed) is passed on as it is, for the caller to retry.
   */
  async patchRun(name: string, patch: Json, namespace = this.namespace): Promise<Json> {
    try {
      return await this.client.mergePatch(paths.run(namespace, name), patch);
    } catch (err) {
      if (isConflict(err)) throw err;
      throw await this.runFailure(err, name, namespace);
    }
  }

  /**
   * The run's history through the API server, from the operator's aggregated API, with the
   * user's own credentials; or, when it cannot be had, why not in a few words.
   */
  async getHistory(name: string, namespace = this.namespace): Promise<{ history?: RunHistory; problem?: string }> {
    try {
      const doc = await this.client.get<{ history?: RunHistory }>(historyApiPath(namespace, name));
      return doc.history ? { history: doc.history } : { problem: `the history API answered without a history for ${namespace}/${name}` };
    } catch (err) {
      // A group the API server does not serve gets its plain-text 404; the operator's own 404
      // is a Status that says what it lacks.
      if (err instanceof SyntaxError || (isNotFound(err) && ((err as ApiError).body as { kind?: string } | undefined)?.kind !== "Status")) {
        return { problem: `the full history needs the ledger: this cluster serves no ${HISTORY_GROUP} API, so set DATABASE_URL or pass --database-url-file` };
      }
      if (err instanceof ApiError && (err.body as { message?: string } | undefined)?.message) {
        return { problem: `the history API answered ${err.code}: ${(err.body as { message: string }).message}` };
      }
      return { problem: explainFailure(err, this.server) };
    }
  }

  /** A request about one run failed: a 404 means that the run, or the whole API, is missing. */
  private async runFailure(err: unknown, name: string, namespace: string): Promise<CliError> {
    if (!missing(err)) return this.explain(err);
    await this.requireApi();
    return isNotFound(err) ? new CliError(`agentrun "${name}" not found in namespace "${namespace}"`) : this.explain(err);
  }

  /**
   * A 404 for a run can mean that the run or that the whole resource type is missing; discovery
   * tells them apart, as kubectl's "the server doesn't have a resource type" does. The group list
   * comes first because an unknown group's path gets a plain-text 404, not a JSON Status.
   */
  async requireApi(): Promise<void> {
    const groups = await this.call(() => this.client.get<{ groups?: { name?: string; versions?: { version?: string }[] }[] }>("/apis"));
    const served = groups.groups?.some((g) => g.name === GROUP && g.versions?.some((v) => v.version === VERSION));
    const resources = served
      ? ((await this.call(() => this.client.get<{ resources?: { name?: string }[] }>(`/apis/${GROUP}/${VERSION}`))).resources ?? [])
      : [];
    if (!resources.some((r) => r.name === PLURAL)) {
      throw new CliError(
        `the AgentRun API is not installed in this cluster (no ${PLURAL}.${GROUP}/${VERSION} at ${this.server}); install the agent-watchdog CRD first`,
      );
    }
  }

  explain(err: unknown): CliError {
    return err instanceof CliError ? err : new CliError(explainFailure(err, this.server));
  }
}

/**
 * A 404, or a response that is not JSON: the API server answers a path it does not serve at all
 * (such as that of a resource type no CRD defines) with a plain-text 404.
 */
const missing = (err: unknown) => isNotFound(err) || err instanceof SyntaxError;

/**
 * Why a connection failed, in a few words: from a socket error (its code), or from a fetch
 * error's cause chain.
 */
export function connectionProblem(err: unknown): string | undefined {
  if (!(err instanceof Error)) return undefined;
  if (err.name === "TimeoutError" || err.name === "AbortError") return "the request timed out";
  const fetchFailed = err instanceof TypeError && err.message === "fetch failed";
  const socketError = !(err instanceof ApiError) && typeof (err as { code?: unknown }).code === "string";
  if (!fetchFailed && !socketError) return undefined;
  let cause = fetchFailed ? (err as { cause?: unknown }).cause : err;
  // Several addresses for one host: each was tried; the first failure speaks for all.
  if (cause instanceof AggregateError && cause.errors.length > 0) cause = cause.errors[0];
  const code = (cause as { code?: string } | undefined)?.code ?? "";
  const words: Record<string, string> = {
    ECONNREFUSED: "connection refused",
    ENOTFOUND: "host not found",
    EAI_AGAIN: "host name lookup failed",
    ETIMEDOUT: "connection timed out",
    UND_ERR_CONNECT_TIMEOUT: "connection timed out",
    ECONNRESET: "connection reset",
    UND_ERR_SOCKET: "connection closed",
    EHOSTUNREACH: "host unreachable",
    ENETUNREACH: "network unreachable",
  };
  if (words[code]) return words[code];
  const message = (cause as Error | undefined)?.message;
  if (/CERT|SSL|TLS|SELF_SIGNED|UNABLE_TO|ALTNAME/i.test(code)) return `TLS: ${message ?? code}`;
  return message || code || "fetch failed";
}

/** One readable line for any failure of an API call. */
export function explainFailure(err: unknown, server: string): string {
  const connection = connectionProblem(err);
  if (connection) return `cannot reach the Kubernetes API server at ${server}: ${connection}`;
  if (err instanceof ApiError) {
    const message = (err.body as { message?: string } | undefined)?.message;
    if (err.code === 401) return `the Kubernetes API server at ${server} did not accept the credentials (401 Unauthorized)`;
    if (err.code === 403) return `forbidden: ${message ?? "the API server refused the request"}`;
    return `the Kubernetes API server answered ${err.code}${err.reason ? ` ${err.reason}` : ""}: ${message ?? "no details"}`;
  }
  if (err instanceof SyntaxError) return `the Kubernetes API server at ${server} sent a response that is not JSON (${err.message})`;
  return err instanceof Error ? err.message : String(err);
}
