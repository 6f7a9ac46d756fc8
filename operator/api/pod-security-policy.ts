// The admission policy that refuses an AgentRun whose sandbox pod the `restricted` Pod Security
// profile would refuse. Without it such a run is accepted, and then its pod is refused at every
// attempt (in a namespace that enforces the profile) with nothing on the run to say why, or runs
// with what the profile forbids (in one that does not). So the run is judged when it is applied,
// with a message naming the template field.
//
// It judges the pod the operator would create, not the raw template: where the template is
// silent the operator fills in restricted defaults (operator/watchdog/sandbox-identity.ts), with
// a shallow merge, which these expressions mirror. A template field that is set, even to null,
// wins over the default: `capabilities: {add: [NET_BIND_SERVICE]}` loses the default drop of ALL.
// `a.?b` is optional.none() both when b is absent and when a is null, and optional.of(null) when
// b is null, which is exactly the merge: a null securityContext takes the defaults, a null field
// in it removes one.
//
// The checks are those of pod-security-admission's `restricted` level, version "latest", as of
// Kubernetes 1.37 (k8s.io/pod-security-admission/policy), baseline checks included. Only CEL
// available since Kubernetes 1.30 (the chart's minimum) is used.
import { GROUP, PLURAL } from "./agentrun.ts";

type Json = Record<string, unknown>;

/** The chart value that lists namespaces this policy does not apply to. */
export const EXEMPT_VALUE = "admission.podSecurity.exemptNamespaces";

const SPEC = "object.spec.template.spec";
const PATH = "spec.template.spec";

/** Sysctls the profile allows (check_sysctls.go, 1.37). */
export const ALLOWED_SYSCTLS = [
  "kernel.shm_rmid_forced",
  "net.ipv4.ip_local_port_range",
  "net.ipv4.tcp_syncookies",
  "net.ipv4.ping_group_range",
  "net.ipv4.ip_unprivileged_port_start",
  "net.ipv4.ip_local_reserved_ports",
  "net.ipv4.tcp_keepalive_time",
  "net.ipv4.tcp_fin_timeout",
  "net.ipv4.tcp_keepalive_intvl",
  "net.ipv4.tcp_keepalive_probes",
  "net.ipv4.tcp_rmem",
  "net.ipv4.tcp_wmem",
  "net.ipv4.tcp_slow_start_after_idle",
  "net.ipv4.tcp_notsent_lowat",
] as const;

/** Volume sources the profile allows, and the others core/v1 knows (check_restrictedVolumes.go). */
export const ALLOWED_VOLUMES = ["configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "image", "persistentVolumeClaim", "projected", "secret"] as const;
export const RESTRICTED_VOLUMES = [
  "hostPath",
  "gcePersistentDisk",
  "awsElasticBlockStore",
  "gitRepo",
  "nfs",
  "iscsi",
  "glusterfs",
  "rbd",
  "flexVolume",
  "cinder",
  "cephfs",
  "flocker",
  "fc",
  "azureFile",
  "vsphereVolume",
  "quobyte",
  "azureDisk",
  "photonPersistentDisk",
  "portworxVolume",
  "scaleIO",
  "storageos",
] as const;

/** SELinux types the profile allows (check_seLinuxOptions.go, 1.31); empty is unset. */
export const ALLOWED_SELINUX_TYPES = ["", "container_t", "container_init_t", "container_kvm_t", "container_engine_t"] as const;
export const APPARMOR_ANNOTATION_PREFIX = "container.apparmor.security.beta.kubernetes.io/";

const list = (items: readonly string[]) => `[${items.map((i) => `'${i}'`).join(", ")}]`;
const PROFILE_TYPES = list(["RuntimeDefault", "Localhost"]);

/** True when the optional `opt` holds a non-empty string (nil and "" are unset in a Go string field). */
const nonEmpty = (opt: string) => `[${opt}.orValue('')].exists(s, s != null && s != '')`;

// --- containers -------------------------------------------------------------------------------

interface ContainerKind {
  field: "initContainers" | "containers" | "ephemeralContainers";
  /** The operator fills in restricted defaults (restricted() maps containers and initContainers). */
  defaults: boolean;
}
const KINDS: ContainerKind[] = [
  { field: "initContainers", defaults: true },
  { field: "containers", defaults: true },
  // Not allowed at pod create; PSA visits them all the same.
  { field: "ephemeralContainers", defaults: false },
];

const SC = "c.?securityContext";
/** The container's allowPrivilegeEscalation after the operator's merge. */
const privilegeEscalation = (k: ContainerKind) => `${SC}.?allowPrivilegeEscalation.orValue(${k.defaults ? "false" : "null"})`;
/** The container's capabilities after the operator's merge (null: none). */
const capabilities = (k: ContainerKind) => `${SC}.?capabilities.orValue(${k.defaults ? "dyn({'drop': ['ALL']})" : "null"})`;

/**
 * Paths of the containers (of every kind) for which `bad` holds, each followed by `suffix`: a CEL
 * list of strings. `bad` reads the container as `c`.
 */
function containerOffenders(suffix: string, bad: (k: ContainerKind) => string): string {
  return KINDS.map((k) => `variables.${k.field}.filter(c, ${bad(k)}).map(c, '${PATH}.${k.field}[' + string(c.name) + ']${suffix}')`).join(" + ");
}

const PROBE_HOSTS = ["livenessProbe", "readinessProbe", "startupProbe", "lifecycle.postStart", "lifecycle.preStop"].flatMap((handler) =>
  ["httpGet", "tcpSocket"].map((kind) => `${handler}.${kind}.host`),
);

// --- the checks -------------------------------------------------------------------------------

interface Check {
  /** The variable holding the offending fields' paths. */
  name: string;
  offenders: string;
  /** What the fields must be, after "<paths>: ". */
  rule: string;
}

const podField = (field: string, bad: string) => `(${bad} ? ['${PATH}.${field}'] : [])`;
const unlessWindows = (expr: string) => `(variables.windows ? [] : ${expr})`;
const unlessUserNamespace = (expr: string) => `(variables.userNamespace ? [] : ${expr})`;

function checks(): Check[] {
  const podSc = `${SPEC}.?securityContext`;
  const seLinux = (opts: string) => ({
    type: `[${opts}.orValue(null)].exists(o, o != null && ![o.?type.orValue('')].all(t, t == null || t in ${list(ALLOWED_SELINUX_TYPES)}))`,
    user: `${nonEmpty(`${opts}.?user`)}`,
    role: `${nonEmpty(`${opts}.?role`)}`,
  });
  const appArmorBad = (profile: string) => `[${profile}.orValue(null)].exists(a, a != null && !(a.?type.orValue('') in ${PROFILE_TYPES}))`;
  const seccompBad = (profile: string) => `[${profile}.orValue(null)].exists(s, s != null && !(s.?type.orValue('') in ${PROFILE_TYPES}))`;
  return [
    {
      name: "privileged",
      offenders: containerOffenders(".securityContext.privileged", () => `${SC}.?privileged.orValue(false) == true`),
      rule: "must not be true",
    },
    // Before the host namespaces: a host process needs hostNetwork, and the API server reports
    // only the first validation that fails.
    {
      name: "hostProcess",
      offenders:
        podField("securityContext.windowsOptions.hostProcess", `${podSc}.?windowsOptions.?hostProcess.orValue(false) == true`) +
        " + " +
        containerOffenders(".securityContext.windowsOptions.hostProcess", () => `${SC}.?windowsOptions.?hostProcess.orValue(false) == true`),
      rule: "must not be true",
    },
    {
      name: "hostNamespaces",
      offenders: ["hostNetwork", "hostPID", "hostIPC"].map((f) => podField(f, `${SPEC}.?${f}.orValue(false) == true`)).join(" + "),
      rule: "must not be true (no host namespaces)",
    },
    {
      name: "hostPorts",
      offenders: containerOffenders(".ports.hostPort", () => `(c.?ports.orValue(null) == null ? [] : c.ports).exists(p, [p.?hostPort.orValue(0)].exists(h, h != null && h != 0))`),
      rule: "must be unset or 0",
    },
    {
      name: "hostProbes",
      offenders: PROBE_HOSTS.map((path) => containerOffenders(`.${path}`, () => nonEmpty(`c.?${path.split(".").join(".?")}`))).join(" + "),
      rule: "must be unset (probes and lifecycle hooks may only reach the pod itself)",
    },
    {
      name: "procMount",
      offenders: containerOffenders(".securityContext.procMount", () => `[${SC}.?procMount.orValue(null)].exists(p, p != null && p != 'Default')`),
      rule: "must be unset or Default",
    },
    {
      name: "seLinuxType",
      offenders:
        podField("securityContext.seLinuxOptions.type", seLinux(`${podSc}.?seLinuxOptions`).type) +
        " + " +
        containerOffenders(".securityContext.seLinuxOptions.type", () => seLinux(`${SC}.?seLinuxOptions`).type),
      rule: `must be unset or one of ${ALLOWED_SELINUX_TYPES.filter(Boolean).join(", ")}`,
    },
    ...(["user", "role"] as const).map((field) => ({
      name: `seLinux${field === "user" ? "User" : "Role"}`,
      offenders:
        podField(`securityContext.seLinuxOptions.${field}`, seLinux(`${podSc}.?seLinuxOptions`)[field]) +
        " + " +
        containerOffenders(`.securityContext.seLinuxOptions.${field}`, () => seLinux(`${SC}.?seLinuxOptions`)[field]),
      rule: "must be unset",
    })),
    {
      name: "appArmor",
      offenders:
        podField("securityContext.appArmorProfile.type", appArmorBad(`${podSc}.?appArmorProfile`)) +
        " + " +
        containerOffenders(".securityContext.appArmorProfile.type", () => appArmorBad(`${SC}.?appArmorProfile`)) +
        " + " +
        `variables.annotations.filter(k, k.startsWith('${APPARMOR_ANNOTATION_PREFIX}') && ![variables.annotations[k]].all(v, v == null || v == '' || v == 'runtime/default' || v.startsWith('localhost/')))` +
        `.map(k, 'spec.template.metadata.annotations[' + k + ']')`,
      rule: "must be RuntimeDefault or Localhost (in an annotation: runtime/default or localhost/<profile>)",
    },
    {
      name: "forbiddenSysctls",
      offenders: `variables.sysctls.filter(s, !(s.?name.orValue('') in ${list(ALLOWED_SYSCTLS)})).map(s, '${PATH}.securityContext.sysctls[' + string(s.name) + ']')`,
      rule: `only these sysctls are allowed: ${ALLOWED_SYSCTLS.join(", ")}`,
    },
    {
      name: "restrictedVolumes",
      offenders:
        `variables.volumes.filter(v, !${list(ALLOWED_VOLUMES)}.exists(t, t in v && v[t] != null) && ${list(RESTRICTED_VOLUMES)}.exists(t, t in v && v[t] != null))` +
        `.map(v, '${PATH}.volumes[' + string(v.name) + '].' + ${list(RESTRICTED_VOLUMES)}.filter(t, t in v && v[t] != null).join(', '))`,
      rule: `is a restricted volume type; allowed are ${ALLOWED_VOLUMES.join(", ")}`,
    },
    // restricted
    {
      name: "allowPrivilegeEscalation",
      offenders: unlessWindows(containerOffenders(".securityContext.allowPrivilegeEscalation", (k) => `${privilegeEscalation(k)} != false`)),
      rule: "must be false (the operator sets false only where the field is absent)",
    },
    {
      name: "capabilitiesDrop",
      offenders: unlessWindows(
        containerOffenders(".securityContext.capabilities.drop", (k) => `[${capabilities(k)}].exists(x, x == null || x.?drop.orValue(null) == null || !x.drop.exists(d, d == 'ALL'))`),
      ),
      rule: "must include ALL (the operator drops ALL only where securityContext.capabilities is absent)",
    },
    {
      name: "capabilitiesAdd",
      offenders: unlessWindows(
        containerOffenders(".securityContext.capabilities.add", (k) => `[${capabilities(k)}].exists(x, x != null && x.?add.orValue(null) != null && x.add.exists(a, a != 'NET_BIND_SERVICE'))`),
      ),
      rule: "may only hold NET_BIND_SERVICE",
    },
    {
      name: "runAsNonRoot",
      offenders: unlessUserNamespace(
        podField("securityContext.runAsNonRoot", "variables.podRunAsNonRoot == false") +
          " + " +
          containerOffenders(".securityContext.runAsNonRoot", () => `${SC}.?runAsNonRoot.orValue(null) == false`),
      ),
      rule: "must not be false (unless spec.template.spec.hostUsers is false)",
    },
    {
      name: "runAsNonRootUnset",
      offenders: unlessUserNamespace(
        `(variables.podRunAsNonRoot == true ? [] : ${containerOffenders(".securityContext.runAsNonRoot", () => `${SC}.?runAsNonRoot.orValue(null) == null`)})`,
      ),
      rule: "must be true here or in spec.template.spec.securityContext.runAsNonRoot, which the template has unset (the operator sets true only where the field is absent), unless spec.template.spec.hostUsers is false",
    },
    {
      name: "runAsUser",
      offenders: unlessUserNamespace(
        podField("securityContext.runAsUser", `${podSc}.?runAsUser.orValue(null) == 0`) +
          " + " +
          containerOffenders(".securityContext.runAsUser", () => `${SC}.?runAsUser.orValue(null) == 0`),
      ),
      rule: "must not be 0 (unless spec.template.spec.hostUsers is false)",
    },
    {
      name: "seccomp",
      offenders: unlessWindows(
        podField("securityContext.seccompProfile.type", "variables.podSeccomp != null && !variables.podSeccompValid") +
          " + " +
          containerOffenders(".securityContext.seccompProfile.type", () => seccompBad(`${SC}.?seccompProfile`)),
      ),
      rule: "must be RuntimeDefault or Localhost",
    },
    {
      name: "seccompUnset",
      offenders: unlessWindows(`(variables.podSeccompValid ? [] : ${containerOffenders(".securityContext.seccompProfile", () => `${SC}.?seccompProfile.orValue(null) == null`)})`),
      rule: "must be set, as spec.template.spec.securityContext.seccompProfile is not RuntimeDefault or Localhost (the operator sets RuntimeDefault only where the field is absent)",
    },
  ];
}

/** Long lists of paths are cut, so that a message stays well within the API server's 5 KiB. */
const MAX_PATHS_CHARS = 1000;

function message(check: Check): string {
  const paths = `[variables.${check.name}.join(', ')].map(p, size(p) > ${MAX_PATHS_CHARS} ? p.substring(0, ${MAX_PATHS_CHARS}) + ' ...' : p)[0]`;
  const text = `: ${check.rule}. This breaks the restricted Pod Security profile, which sandbox pods are held to; to exempt a namespace, list it in the chart value ${EXEMPT_VALUE}`;
  return `${paths} + '${text}'`;
}

export function podSecurityPolicySpec(): Json {
  const optionalList = (field: string) => `${SPEC}.?${field}.orValue(null) == null ? [] : ${SPEC}.${field}`;
  const all = checks();
  for (const c of all) if (c.rule.includes("'")) throw new Error(`the rule of ${c.name} must not contain a quote`);
  const variables = [
    { name: "windows", expression: `${SPEC}.?os.?name.orValue('') == 'windows'` },
    // A pod in its own user namespace: root in it is not root on the node.
    { name: "userNamespace", expression: `${SPEC}.?hostUsers.orValue(true) == false` },
    // The pod-level defaults the operator merges in: runAsNonRoot true, seccomp RuntimeDefault.
    { name: "podRunAsNonRoot", expression: `${SPEC}.?securityContext.?runAsNonRoot.orValue(true)` },
    { name: "podSeccomp", expression: `${SPEC}.?securityContext.?seccompProfile.orValue(dyn({'type': 'RuntimeDefault'}))` },
    { name: "podSeccompValid", expression: `variables.podSeccomp != null && variables.podSeccomp.?type.orValue('') in ${PROFILE_TYPES}` },
    // A list field that is absent or null (nil in the pod) is empty.
    ...KINDS.map((k) => ({ name: k.field, expression: optionalList(k.field) })),
    { name: "volumes", expression: optionalList("volumes") },
    { name: "sysctls", expression: `${SPEC}.?securityContext.?sysctls.orValue(null) == null ? [] : ${SPEC}.securityContext.sysctls` },
    // The template's annotations become the pod's, which PSA reads too.
    {
      name: "annotations",
      expression: "object.spec.template.?metadata.?annotations.orValue(null) == null ? {} : object.spec.template.metadata.annotations",
    },
    ...all.map((c) => ({ name: c.name, expression: c.offenders })),
  ];
  // The API server accepts two variables of one name, and a variable that reads itself overflows
  // its stack (Kubernetes 1.37 crashes on the first request the policy judges).
  const names = variables.map((v) => v.name);
  const twice = names.filter((n, i) => names.indexOf(n) !== i);
  if (twice.length > 0) throw new Error(`pod security policy: variables named twice: ${twice.join(", ")}`);
  return {
    failurePolicy: "Fail",
    matchConstraints: {
      // The main resource only: the status subresource never carries a template.
      resourceRules: [{ apiGroups: [GROUP], apiVersions: ["*"], operations: ["CREATE", "UPDATE"], resources: [PLURAL] }],
    },
    // The operator's annotation writes (and anyone's label or goal edits) leave the template as it
    // is: a run admitted before this policy, or while its namespace was exempt, stays writable.
    matchConditions: [{ name: "template-changed", expression: "oldObject == null || object.spec.template != oldObject.spec.template" }],
    variables,
    validations: all.map((c) => ({ expression: `size(variables.${c.name}) == 0`, messageExpression: message(c), reason: "Forbidden" })),
  };
}
