// The sandbox pod of one attempt, built from the run's template. Pure, so the core can put the
// exact manifest into a plan and tests can check it without a cluster.
import { API_VERSION, KIND, type AgentRun } from "../api/agentrun.ts";
import { LABELS, SANDBOX_ENV } from "../api/annotations.ts";
import { DEFAULT_SANDBOX_IDENTITY, withSandboxIdentity, type SandboxIdentity } from "./sandbox-identity.ts";
import { attemptTraceparent } from "./trace-context.ts";

type Json = Record<string, unknown>;

export interface SandboxPodManifest {
  apiVersion: "v1";
  kind: "Pod";
  metadata: {
    name: string;
    namespace: string;
    labels: Record<string, string>;
    annotations?: Record<string, string>;
    ownerReferences: Json[];
  };
  spec: Json;
}

/**
 * Attempt n of run r runs in pod "r-n-<uid>", with the first five characters of the run's uid:
 * deterministic, so a repeated create fails with 409 and is recognised, and never the name of a pod
 * an earlier run of the same name left behind (deleted with --cascade=orphan, say).
 */
export function sandboxPodName(run: Pick<AgentRun, "metadata">, attempt: number): string {
  const uid = (run.metadata.uid ?? "").replace(/[^a-z0-9]/g, "").slice(0, 5);
  return uid ? `${run.metadata.name}-${attempt}-${uid}` : `${run.metadata.name}-${attempt}`;
}

function withContractEnv(container: Json, run: AgentRun, attempt: number, traceparent: boolean): Json {
  const contract: { name: string; value: string | undefined }[] = [
    { name: SANDBOX_ENV.runName, value: run.metadata.name },
    { name: SANDBOX_ENV.runNamespace, value: run.metadata.namespace },
    { name: SANDBOX_ENV.attempt, value: String(attempt) },
  ];
  if (traceparent && run.metadata.uid) contract.push({ name: SANDBOX_ENV.traceparent, value: attemptTraceparent(run.metadata.uid, attempt) });
  const names = new Set<string>(contract.map((e) => e.name));
  const own = Array.isArray(container.env) ? (container.env as Json[]).filter((e) => !names.has(e.name as string)) : [];
  return { ...container, env: [...contract, ...own] };
}

/** The run's shard, copied to its pods so that the shard's holder watches them by label. */
function shardLabel(run: AgentRun): Record<string, string> {
  const shard = run.metadata.labels?.[LABELS.shard];
  return shard === undefined ? {} : { [LABELS.shard]: shard };
}

/** A template's labels without a shard of its own: the pod's shard is its run's, or none. */
function withoutShard(labels: Record<string, string>): Record<string, string> {
  const { [LABELS.shard]: _ignored, ...rest } = labels;
  return rest;
}

export function sandboxPod(run: AgentRun, attempt: number, identity: SandboxIdentity = DEFAULT_SANDBOX_IDENTITY): SandboxPodManifest {
  const name = run.metadata.name as string;
  const template = run.spec.template;
  const templateMeta = (template.metadata ?? {}) as { labels?: Record<string, string>; annotations?: Record<string, string> };
  const spec = template.spec as Json;
  const containers = (spec.containers as Json[]).map((c) => withContractEnv(c, run, attempt, identity.traceparent === true));
  const metadata: SandboxPodManifest["metadata"] = {
    name: sandboxPodName(run, attempt),
    namespace: run.metadata.namespace as string,
    labels: { ...withoutShard(templateMeta.labels ?? {}), ...shardLabel(run), [LABELS.run]: name, [LABELS.attempt]: String(attempt) },
    ownerReferences: [
      { apiVersion: API_VERSION, kind: KIND, name, uid: run.metadata.uid, controller: true, blockOwnerDeletion: true },
    ],
  };
  if (templateMeta.annotations) metadata.annotations = { ...templateMeta.annotations };
  return {
    apiVersion: "v1",
    kind: "Pod",
    metadata,
    // The watchdog owns restarts: a kubelet restart would hide a crash from it, and an exit of 0
    // must end the run rather than start the agent over.
    spec: withSandboxIdentity({ ...spec, containers, restartPolicy: "Never" }, run, identity),
  };
}
