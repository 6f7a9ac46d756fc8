// Who a sandbox is to the API server. Sandboxes run untrusted, model-driven code, so by default
// each gets a ServiceAccount that may only read AgentRuns and write their status (an admission
// policy then narrows that to its own run, own fields and own attempt), no automounted token, and
// a short-lived token bound to its pod, which is what lets admission tell its pod from a stale one.
import { API_VERSION, GROUP, KIND, PLURAL, type AgentRun } from "../api/agentrun.ts";
import { SERVICE_ACCOUNT_DIR } from "../api/service-account.ts";

type Json = Record<string, unknown>;

export type ServiceAccountMode = "namespace" | "run" | "none";

export interface SandboxIdentity {
  /**
   * namespace: one ServiceAccount per namespace, bound to a ClusterRole installed with the operator;
   * run: one ServiceAccount and Role per run, owned by the run, naming only that run;
   * none: the template's service account as it is.
   */
  serviceAccount: ServiceAccountMode;
  /** The ClusterRole the namespace ServiceAccount is bound to. */
  clusterRole: string;
  /** Lifetime of the projected token (the kubelet refreshes it at 80%). */
  tokenExpirationSeconds: number;
  /**
   * The operator traces runs: each pod gets TRACEPARENT naming its attempt's span, so that what
   * the sandbox traces nests inside the attempt.
   */
  traceparent?: boolean;
}

export const DEFAULT_SANDBOX_IDENTITY: SandboxIdentity = {
  serviceAccount: "none",
  clusterRole: "agent-watchdog-sandbox",
  tokenExpirationSeconds: 3600,
};

export const NAMESPACE_SERVICE_ACCOUNT = "agent-watchdog-sandbox";
/** Where in-cluster clients look for credentials, so the SDK needs no configuration. */
export const TOKEN_MOUNT_PATH = SERVICE_ACCOUNT_DIR;
const TOKEN_VOLUME = "watchdog-sandbox-token";

/**
 * The fencing policy knows a sandbox by its ServiceAccount's name (admission sees a user name,
 * nothing else): a name with this suffix. A ServiceAccount named otherwise writes unfenced.
 */
export const FENCED_SUFFIX = "-sandbox";

/** The service account the run's template names for itself, if any. */
function templateServiceAccount(run: AgentRun): string | undefined {
  const name = (run.spec.template.spec as Json).serviceAccountName;
  return typeof name === "string" && name !== "" ? name : undefined;
}

/**
 * A service account of the template's own that would turn the fencing off: in the modes where the
 * operator gives sandboxes their identity, a template may name its own only if the fencing policy
 * applies to it (its name ends in -sandbox). Such a run is stopped before its first pod.
 */
export function unfencedServiceAccount(run: AgentRun, identity: SandboxIdentity): string | undefined {
  if (identity.serviceAccount === "none") return undefined;
  const own = templateServiceAccount(run);
  return own !== undefined && !own.endsWith(FENCED_SUFFIX) ? own : undefined;
}

/**
 * The sandbox's ServiceAccount when the operator gives it its identity (a pod-bound token, no
 * automounted one): the template's own when it names one the fencing applies to, else the mode's.
 */
export function serviceAccountName(run: AgentRun, identity: SandboxIdentity): string | undefined {
  if (identity.serviceAccount === "none") return undefined; // the template's service account as it is
  const own = templateServiceAccount(run);
  if (own !== undefined) return own.endsWith(FENCED_SUFFIX) ? own : undefined;
  if (identity.serviceAccount === "namespace") return NAMESPACE_SERVICE_ACCOUNT;
  return `${run.metadata.name}${FENCED_SUFFIX}`;
}

/** Objects that must exist before the sandbox pod is created (created if missing). */
export function identityObjects(run: AgentRun, identity: SandboxIdentity): Json[] {
  const namespace = run.metadata.namespace as string;
  const name = serviceAccountName(run, identity);
  // A ServiceAccount the template names is the user's: its roles are theirs to grant.
  if (!name || templateServiceAccount(run) !== undefined) return [];
  const labels = { "app.kubernetes.io/managed-by": "agent-watchdog", "app.kubernetes.io/component": "sandbox-identity" };
  if (identity.serviceAccount === "namespace") {
    return [
      { apiVersion: "v1", kind: "ServiceAccount", metadata: { name, namespace, labels }, automountServiceAccountToken: false },
      {
        apiVersion: "rbac.authorization.k8s.io/v1",
        kind: "RoleBinding",
        metadata: { name, namespace, labels },
        roleRef: { apiGroup: "rbac.authorization.k8s.io", kind: "ClusterRole", name: identity.clusterRole },
        subjects: [{ kind: "ServiceAccount", name, namespace }],
      },
    ];
  }
  const owner = { apiVersion: API_VERSION, kind: KIND, name: run.metadata.name, uid: run.metadata.uid, controller: true, blockOwnerDeletion: true };
  const meta = { name, namespace, labels, ownerReferences: [owner] };
  return [
    { apiVersion: "v1", kind: "ServiceAccount", metadata: meta, automountServiceAccountToken: false },
    {
      apiVersion: "rbac.authorization.k8s.io/v1",
      kind: "Role",
      metadata: meta,
      rules: [
        // Its own run only: RBAC allows a list or watch with resourceNames when the request selects
        // that one name (fieldSelector metadata.name=<run>), which is how the SDK watches its run.
        { apiGroups: [GROUP], resources: [PLURAL], verbs: ["get", "list", "watch"], resourceNames: [run.metadata.name] },
        { apiGroups: [GROUP], resources: [`${PLURAL}/status`], verbs: ["get", "patch", "update"], resourceNames: [run.metadata.name] },
      ],
    },
    {
      apiVersion: "rbac.authorization.k8s.io/v1",
      kind: "RoleBinding",
      metadata: meta,
      roleRef: { apiGroup: "rbac.authorization.k8s.io", kind: "Role", name },
      subjects: [{ kind: "ServiceAccount", name, namespace }],
    },
  ];
}

/**
 * Restricted pod security where the template says nothing: non-root, RuntimeDefault seccomp,
 * no privilege escalation, no capabilities. A template that sets a field keeps its value.
 */
function restricted(spec: Json): Json {
  const podSecurity = { runAsNonRoot: true, seccompProfile: { type: "RuntimeDefault" }, ...((spec.securityContext as Json | undefined) ?? {}) };
  const containerSecurity = (c: Json): Json => ({
    ...c,
    securityContext: { allowPrivilegeEscalation: false, capabilities: { drop: ["ALL"] }, ...((c.securityContext as Json | undefined) ?? {}) },
  });
  return {
    ...spec,
    securityContext: podSecurity,
    containers: (spec.containers as Json[]).map(containerSecurity),
    ...(Array.isArray(spec.initContainers) ? { initContainers: (spec.initContainers as Json[]).map(containerSecurity) } : {}),
  };
}

/** The pod spec with the sandbox's identity and security defaults applied. */
export function withSandboxIdentity(spec: Json, run: AgentRun, identity: SandboxIdentity): Json {
  const secured = restricted(spec);
  const name = serviceAccountName(run, identity);
  if (!name) return secured;
  const mount = { name: TOKEN_VOLUME, mountPath: TOKEN_MOUNT_PATH, readOnly: true };
  const withMount = (c: Json): Json => {
    const mounts = (c.volumeMounts as Json[] | undefined) ?? [];
    return mounts.some((m) => m.mountPath === TOKEN_MOUNT_PATH) ? c : { ...c, volumeMounts: [...mounts, mount] };
  };
  return {
    ...secured,
    serviceAccountName: name,
    // No long-lived or automounted credentials: only the projected token below, bound to this pod.
    automountServiceAccountToken: false,
    containers: (secured.containers as Json[]).map(withMount),
    volumes: [
      ...((spec.volumes as Json[] | undefined) ?? []),
      {
        name: TOKEN_VOLUME,
        projected: {
          sources: [
            { serviceAccountToken: { path: "token", expirationSeconds: identity.tokenExpirationSeconds } },
            { configMap: { name: "kube-root-ca.crt", items: [{ key: "ca.crt", path: "ca.crt" }] } },
            { downwardAPI: { items: [{ path: "namespace", fieldRef: { apiVersion: "v1", fieldPath: "metadata.namespace" } }] } },
          ],
        },
      },
    ],
  };
}
