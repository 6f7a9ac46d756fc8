// The chart's pod security policy against Kubernetes' own Pod Security admission, on the real API
// server. Each generated template is judged twice: as an AgentRun, by the policy (a dry-run create
// in a namespace the release watches), and as the pod the operator would make of it, by PSA (a
// dry-run create in a namespace that enforces restricted:latest). The verdicts must agree on every
// template. The generator only makes pods the API server finds valid (a refusal for any other
// reason than PSA fails the test), so the comparison is never about something else. Then named
// cases: one template per check, the messages, the exempt and unwatched namespaces, and runs that
// existed before the policy.
import { randomBytes } from "node:crypto";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { API_VERSION, KIND, type AgentRun } from "../../operator/api/agentrun.ts";
import { ANNOTATIONS } from "../../operator/api/annotations.ts";
import { EXEMPT_VALUE } from "../../operator/api/pod-security-policy.ts";
import { ApiError, paths, type Json, type KubeClient } from "../../operator/kube/client.ts";
import { DEFAULT_SANDBOX_IDENTITY, NAMESPACE_SERVICE_ACCOUNT } from "../../operator/watchdog/sandbox-identity.ts";
import { sandboxPod } from "../../operator/watchdog/sandbox-pod.ts";
import { createRun, getRun, kube, newNamespace } from "../support/cluster.ts";
import { waitFor } from "../support/wait.ts";
import { chartDir, helm, ok, refusal, restrictedNamespace, writeValues } from "./support.ts";

const SEED = Number(process.env.POD_SECURITY_SEED ?? 20261202);
const TEMPLATES = 400;
const release = `psp-${randomBytes(3).toString("hex")}`;
const policyName = `${release}-agent-watchdog-pod-security`;
// The identity mode whose pods carry the most of the operator's own (a ServiceAccount, a projected
// token volume and its mounts); PSA judges those too.
const identity = { ...DEFAULT_SANDBOX_IDENTITY, serviceAccount: "namespace" as const };

let admin: KubeClient;
let sysNs: string;
/** Watched by the release: the policy applies. */
let runNs: string;
/** Watched, and exempt. */
let exemptNs: string;
/** Not watched by the release: another release's, say. */
let otherNs: string;
/** Enforces restricted:latest: where PSA judges the pods. */
let podNs: string;

const ABSENT = Symbol("absent");
type Value = unknown;

/** A small seeded PRNG (mulberry32), so a failure is reproduced with its seed. */
class Random {
  private state: number;
  constructor(seed: number) {
    this.state = seed >>> 0;
  }
  next(): number {
    this.state = (this.state + 0x6d2b79f5) >>> 0;
    let t = this.state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  }
  chance(p: number): boolean {
    return this.next() < p;
  }
  int(min: number, max: number): number {
    return min + Math.floor(this.next() * (max - min + 1));
  }
  pick<T>(items: readonly T[]): T {
    return items[Math.floor(this.next() * items.length)]!;
  }
  /** Absent `absentWeight` times out of `absentWeight + values.length`, else one of the values. */
  maybe(values: readonly Value[], absentWeight: number): Value {
    const i = Math.floor(this.next() * (values.length + absentWeight));
    return i < absentWeight ? ABSENT : values[i - absentWeight];
  }
}

function set(target: Json, key: string, value: Value): void {
  if (value !== ABSENT) target[key] = structuredClone(value);
}

// PSA's lists as of 1.37, written out here rather than taken from the policy, so that a list the
// policy got wrong is caught.
const ALLOWED_SYSCTLS = [
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
];
const FORBIDDEN_SYSCTLS = ["net.ipv4.ip_forward", "kernel.msgmax", "net.core.somaxconn", "vm.swappiness"];
const SECCOMP = [{ type: "RuntimeDefault" }, { type: "Localhost", localhostProfile: "profiles/agent.json" }, { type: "Unconfined" }, null];
const APPARMOR = [{ type: "RuntimeDefault" }, { type: "Localhost", localhostProfile: "k8s-agent" }, { type: "Unconfined" }];
const SELINUX = [{ type: "container_t" }, { type: "container_engine_t" }, { type: "container_init_t" }, { type: "spc_t" }, { user: "system_u" }, { role: "system_r" }, { level: "s0:c123,c456" }];
const CAPABILITIES = [
  null,
  {},
  { drop: ["ALL"] },
  { drop: ["NET_RAW"] },
  { drop: ["all"] },
  { add: ["NET_BIND_SERVICE"] },
  { drop: ["ALL"], add: ["NET_BIND_SERVICE"] },
  { drop: ["ALL"], add: ["SYS_ADMIN"] },
  { drop: ["ALL", "NET_RAW"], add: ["CHOWN"] },
];
const ALLOWED_VOLUMES: Json[] = [
  {},
  { emptyDir: {} },
  { configMap: { name: "settings" } },
  { secret: { secretName: "credentials" } },
  { downwardAPI: { items: [{ path: "labels", fieldRef: { fieldPath: "metadata.labels" } }] } },
  { projected: { sources: [{ configMap: { name: "settings" } }] } },
  { persistentVolumeClaim: { claimName: "workspace" } },
  { csi: { driver: "csi.example.com" } },
  { ephemeral: { volumeClaimTemplate: { spec: { accessModes: ["ReadWriteOnce"], resources: { requests: { storage: "1Gi" } } } } } },
  { image: { reference: "registry.example.com/models:1", pullPolicy: "IfNotPresent" } },
];
const RESTRICTED_VOLUMES: Json[] = [
  { hostPath: { path: "/var/run" } },
  { nfs: { server: "nfs.example.com", path: "/exports" } },
  { flexVolume: { driver: "example.com/flex" } },
  { azureFile: { secretName: "azure", shareName: "share" } },
  { cephfs: { monitors: ["10.0.0.1:6789"] } },
  { iscsi: { targetPortal: "10.0.0.2:3260", iqn: "iqn.2001-04.com.example:storage", lun: 0 } },
];
const HOSTS = ["", "example.com", "10.0.0.9"];

interface Pod {
  windows: boolean;
  userNamespace: boolean;
  hostProcess: boolean;
  hostNamespaces: boolean;
  nextPort: number;
}

/** A container's securityContext: valid for the pod it is in, after the operator's defaults. */
function containerSecurity(r: Random, pod: Pod): Value {
  if (pod.windows) {
    // A windows pod may not set these at all: the template nulls the operator's defaults.
    const sc: Json = { allowPrivilegeEscalation: null, capabilities: null };
    set(sc, "runAsNonRoot", r.maybe([true, false, null], 5));
    if (pod.hostProcess) set(sc, "windowsOptions", r.maybe([{ hostProcess: true }], 1));
    return sc;
  }
  const form = r.next();
  if (form < 0.25) return ABSENT;
  if (form < 0.3) return null;
  if (form < 0.38) return {};
  const sc: Json = {};
  set(sc, "allowPrivilegeEscalation", r.maybe([false, true, null], 60));
  set(sc, "privileged", r.maybe([false, true], 80));
  // privileged with allowPrivilegeEscalation false (the default) is an invalid pod.
  if (sc.privileged === true && (sc.allowPrivilegeEscalation === undefined || sc.allowPrivilegeEscalation === false)) sc.allowPrivilegeEscalation = r.pick([true, null]);
  set(sc, "capabilities", r.maybe(CAPABILITIES, 70));
  set(sc, "runAsNonRoot", r.maybe([true, false, null], 60));
  set(sc, "runAsUser", r.maybe([0, 1000, null], 60));
  set(sc, "seccompProfile", r.maybe(SECCOMP, 70));
  set(sc, "seLinuxOptions", r.maybe(SELINUX, 120));
  set(sc, "appArmorProfile", r.maybe(APPARMOR, 100));
  // Unmasked needs a user namespace.
  set(sc, "procMount", r.maybe(pod.userNamespace ? ["Default", "Unmasked"] : ["Default"], 12));
  set(sc, "readOnlyRootFilesystem", r.maybe([true], 4));
  return sc;
}

function container(r: Random, pod: Pod, name: string, init: boolean): Json {
  const c: Json = { name, image: "registry.example.com/agent:1" };
  set(c, "securityContext", containerSecurity(r, pod));
  if (r.chance(0.08)) {
    const port = pod.nextPort++;
    // With hostNetwork a hostPort must be the containerPort (or be left for the API to default).
    const hostPort = r.maybe(pod.hostNamespaces ? [0, port] : [0, port, 30000 + port - 8000], 1);
    c.ports = [{ containerPort: port, ...(hostPort === ABSENT ? {} : { hostPort }) }];
  }
  if (!init) {
    // Probes and lifecycle hooks are for regular containers only.
    const host = () => {
      const h = r.maybe(HOSTS, 3);
      return h === ABSENT ? {} : { host: h };
    };
    if (r.chance(0.05)) c.livenessProbe = { httpGet: { port: 8080, path: "/healthz", ...host() } };
    if (r.chance(0.05)) c.readinessProbe = { tcpSocket: { port: 8080, ...host() } };
    if (r.chance(0.04)) c.startupProbe = { httpGet: { port: 8080, ...host() } };
    if (r.chance(0.05)) c.lifecycle = r.chance(0.5) ? { postStart: { httpGet: { port: 8080, ...host() } } } : { preStop: { tcpSocket: { port: 8080, ...host() } } };
  }
  return c;
}

function podSecurity(r: Random, pod: Pod): Value {
  if (pod.windows) {
    const sc: Json = { seccompProfile: null };
    set(sc, "runAsNonRoot", r.maybe([true, false, null], 6));
    if (pod.hostProcess) sc.windowsOptions = { hostProcess: true };
    return sc;
  }
  const form = r.next();
  if (form < 0.15) return ABSENT;
  if (form < 0.2) return null;
  const sc: Json = {};
  set(sc, "runAsNonRoot", r.maybe([true, false, null], 30));
  set(sc, "runAsUser", r.maybe([0, 1000], 30));
  set(sc, "seccompProfile", r.maybe(SECCOMP, 30));
  set(sc, "seLinuxOptions", r.maybe(SELINUX, 50));
  set(sc, "appArmorProfile", r.maybe(APPARMOR, 40));
  // Host namespaces and namespaced sysctls do not go together.
  if (!pod.hostNamespaces && r.chance(0.15)) {
    const names = new Set([r.pick(ALLOWED_SYSCTLS), r.pick(r.chance(0.5) ? ALLOWED_SYSCTLS : FORBIDDEN_SYSCTLS)]);
    sc.sysctls = [...names].map((name) => ({ name, value: "1" }));
  }
  return sc;
}

/** A pod template whose sandbox pod the API server finds valid: some break the profile, some not. */
function generateTemplate(r: Random): Json {
  const windows = r.chance(0.1);
  const userNamespace = !windows && r.chance(0.2);
  const hostProcess = windows && r.chance(0.2);
  const spec: Json = {};
  if (windows) spec.os = { name: "windows" };
  else if (r.chance(0.08)) spec.os = { name: "linux" };
  if (userNamespace) spec.hostUsers = false;
  else if (!windows && r.chance(0.08)) spec.hostUsers = true;
  // A user namespace goes with no host namespace; a windows pod shares only the network.
  if (!userNamespace) {
    if (hostProcess || r.chance(0.04)) spec.hostNetwork = true;
    else if (r.chance(0.06)) spec.hostNetwork = false;
    if (!windows) {
      set(spec, "hostPID", r.maybe([true, false], 30));
      set(spec, "hostIPC", r.maybe([true, false], 30));
    }
  }
  const pod: Pod = { windows, userNamespace, hostProcess, hostNamespaces: spec.hostNetwork === true || spec.hostPID === true || spec.hostIPC === true, nextPort: 8000 };
  set(spec, "securityContext", podSecurity(r, pod));
  const inits = r.chance(0.65) ? 0 : r.int(1, 2);
  if (inits > 0) spec.initContainers = Array.from({ length: inits }, (_, i) => container(r, pod, `init-${i}`, true));
  else if (r.chance(0.1)) spec.initContainers = r.pick([null, []]);
  spec.containers = Array.from({ length: r.pick([1, 1, 2, 3]) }, (_, i) => container(r, pod, i === 0 ? "agent" : `side-${i}`, false));
  if (r.chance(0.3)) {
    const count = r.int(1, 2);
    spec.volumes = Array.from({ length: count }, (_, i) => ({ name: `vol-${i}`, ...structuredClone(r.chance(0.35) ? r.pick(RESTRICTED_VOLUMES) : r.pick(ALLOWED_VOLUMES)) }));
  }
  const template: Json = { spec };
  if (r.chance(0.3)) {
    const annotations: Record<string, string> = { "example.com/team": "agents" };
    // An AppArmor annotation must name a container, and agree with any profile field it would
    // meet: only for containers whose profile the fields leave unset.
    const podProfile = ((spec.securityContext as Json | null | undefined) ?? {}).appArmorProfile;
    const open = [...((spec.initContainers as Json[] | null) ?? []), ...(spec.containers as Json[])].filter(
      (c) => podProfile === undefined && ((c.securityContext as Json | null | undefined) ?? {}).appArmorProfile === undefined,
    );
    if (!windows && open.length > 0 && r.chance(0.7)) {
      annotations[`container.apparmor.security.beta.kubernetes.io/${r.pick(open).name as string}`] = r.pick(["runtime/default", "localhost/k8s-agent", "unconfined"]);
    }
    template.metadata = { labels: { app: "agent" }, annotations };
  }
  return template;
}

function runOf(name: string, namespace: string, template: Json): Json {
  return { apiVersion: API_VERSION, kind: KIND, metadata: { name, namespace }, spec: { goal: "pod security", template } };
}

/** The pod the operator would create for the run's first attempt. */
function podOf(name: string, template: Json): Json {
  const run = { ...runOf(name, podNs, template), metadata: { name, namespace: podNs, uid: "0c1d2e3f-0000-4000-8000-000000000000" } };
  return sandboxPod(run as unknown as AgentRun, 1, identity) as unknown as Json;
}

type Verdict = { kind: "accepted" } | { kind: "refused"; message: string } | { kind: "invalid"; message: string };

/** A dry-run create; refused when `refuses` recognises the error as the judge's. */
async function judge(request: Promise<unknown>, refuses: (err: ApiError) => boolean): Promise<Verdict> {
  try {
    await request;
    return { kind: "accepted" };
  } catch (err) {
    if (!(err instanceof ApiError)) throw err;
    return refuses(err) ? { kind: "refused", message: err.message } : { kind: "invalid", message: err.message };
  }
}

const byPolicy = (err: ApiError) => err.code === 403 && err.message.includes(`ValidatingAdmissionPolicy '${policyName}'`);
const byPsa = (err: ApiError) => err.code === 403 && err.message.includes('violates PodSecurity "restricted:latest"');

const policyVerdict = (name: string, template: Json, namespace = runNs) =>
  judge(admin.create(paths.runs(namespace), runOf(name, namespace, template), { dryRun: "All" }), byPolicy);
const psaVerdict = (name: string, template: Json) => judge(admin.create(paths.pods(podNs), podOf(name, template), { dryRun: "All" }), byPsa);

/** Runs `work` over `items`, `width` at a time. */
async function pool<T, R>(items: T[], width: number, work: (item: T, i: number) => Promise<R>): Promise<R[]> {
  const out: R[] = new Array(items.length);
  let next = 0;
  await Promise.all(
    Array.from({ length: width }, async () => {
      while (next < items.length) {
        const i = next++;
        out[i] = await work(items[i]!, i);
      }
    }),
  );
  return out;
}

const privileged = (name = "agent"): Json => ({ spec: { containers: [{ name, image: "registry.example.com/agent:1", securityContext: { privileged: true, allowPrivilegeEscalation: true } }] } });
const plain = (): Json => ({ spec: { containers: [{ name: "agent", image: "registry.example.com/agent:1" }] } });

beforeAll(async () => {
  admin = kube();
  sysNs = await restrictedNamespace(admin, "aw-psp-sys");
  runNs = await newNamespace(admin, "aw-psp-runs", { "watchdog.dev/test": "chart" });
  exemptNs = await newNamespace(admin, "aw-psp-exempt", { "watchdog.dev/test": "chart" });
  otherNs = await newNamespace(admin, "aw-psp-other", { "watchdog.dev/test": "chart" });
  podNs = await restrictedNamespace(admin, "aw-psp-pods");
  // The namespace identity the pods name (created by the operator before its first pod).
  await admin.create(`/api/v1/namespaces/${podNs}/serviceaccounts`, { apiVersion: "v1", kind: "ServiceAccount", metadata: { name: NAMESPACE_SERVICE_ACCOUNT }, automountServiceAccountToken: false });
  // Runs from before the policy: one that breaks the profile, one that does not.
  await createRun(admin, runNs, runOf("legacy", runNs, privileged()));
  await createRun(admin, runNs, runOf("compliant", runNs, plain()));
  const values = { crds: { enabled: false }, watchNamespaces: [runNs, exemptNs], admission: { podSecurity: { exemptNamespaces: [exemptNs] } } };
  ok(await helm(["install", release, chartDir, "--namespace", sysNs, "--values", writeValues(values)]), "helm install");
  // The API server takes a new policy into force a moment after it is created.
  await waitFor("the pod security policy to be in force", async () => (await policyVerdict("probe", privileged())).kind === "refused", { timeoutMs: 60_000 });
}, 240_000);

afterAll(async () => {
  await helm(["uninstall", release, "--namespace", sysNs, "--wait", "--timeout", "120s"]);
  for (const namespace of [runNs, exemptNs, otherNs, podNs, sysNs]) if (namespace) await admin.delete(`/api/v1/namespaces/${namespace}`).catch(() => {});
});

describe("the pod security policy and Kubernetes' Pod Security admission", () => {
  it("type-check against the installed CRD without warnings", async () => {
    const policy = await waitFor("the policy's type check", async () => {
      const p = await admin.get<any>(`/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies/${policyName}`);
      return p.status?.observedGeneration === p.metadata.generation && p.status?.typeChecking ? p : undefined;
    });
    expect(policy.status.typeChecking.expressionWarnings ?? []).toEqual([]);
    expect(policy.status.conditions ?? []).not.toContainEqual(expect.objectContaining({ status: "False" }));
  });

  it(`agree on ${TEMPLATES} generated templates (seed ${SEED})`, async () => {
    const random = new Random(SEED);
    const templates = Array.from({ length: TEMPLATES }, () => generateTemplate(random));
    const verdicts = await pool(templates, 12, async (template, i) => {
      const [policy, psa] = await Promise.all([policyVerdict(`t-${i}`, template), psaVerdict(`t-${i}`, template)]);
      return { template, policy, psa };
    });
    const show = (v: (typeof verdicts)[number]) =>
      `template ${JSON.stringify(v.template)}\n  policy: ${v.policy.kind}${"message" in v.policy ? ` (${v.policy.message})` : ""}\n  PSA: ${v.psa.kind}${"message" in v.psa ? ` (${v.psa.message})` : ""}`;
    // Every generated run is one the CRD takes, and every pod one the API server finds valid.
    expect(verdicts.filter((v) => v.policy.kind === "invalid" || v.psa.kind === "invalid").map(show)).toEqual([]);
    expect(verdicts.filter((v) => v.policy.kind !== v.psa.kind).map(show)).toEqual([]);

    const refused = verdicts.filter((v) => v.psa.kind === "refused");
    const accepted = verdicts.filter((v) => v.psa.kind === "accepted");
    console.log(`pod security: ${TEMPLATES} templates, ${refused.length} refused and ${accepted.length} accepted by both the policy and PSA (seed ${SEED})`);
    expect(Math.min(refused.length, accepted.length)).toBeGreaterThan(TEMPLATES * 0.25);
    // The templates reach every check PSA makes at this level ...
    const reasons = [
      "allowPrivilegeEscalation != false",
      "unrestricted capabilities",
      "host namespaces",
      "hostPort",
      "hostProcess",
      "privileged",
      "probe or lifecycle host",
      "procMount",
      "restricted volume types",
      "runAsNonRoot != true",
      "runAsUser=0",
      "seLinuxOptions",
      "seccompProfile",
      "forbidden sysctls",
      "forbidden AppArmor profile",
    ];
    const messages = refused.map((v) => (v.psa as { message: string }).message);
    expect(reasons.filter((reason) => !messages.some((m) => m.includes(reason)))).toEqual([]);
    // ... and the exemptions: windows pods without the linux-only fields, and root in a user namespace.
    const spec = (v: (typeof verdicts)[number]) => v.template.spec as any;
    expect(accepted.filter((v) => spec(v).os?.name === "windows").length).toBeGreaterThan(0);
    const rootInUserNamespace = (v: (typeof verdicts)[number]) =>
      spec(v).hostUsers === false && [spec(v).securityContext, ...spec(v).containers.map((c: any) => c.securityContext)].some((sc: any) => sc?.runAsUser === 0 || sc?.runAsNonRoot === false);
    expect(accepted.filter(rootInUserNamespace).length).toBeGreaterThan(0);
  }, 600_000);
});

// One template per check, each breaking only that check (on top of what the operator fills in).
const image = "registry.example.com/agent:1";
const one = (sc: Json, extra: Json = {}): Json => ({ spec: { containers: [{ name: "agent", image, securityContext: sc, ...extra }] } });
const CASES: [string, Json, string, string][] = [
  ["privileged", one({ privileged: true, allowPrivilegeEscalation: null }), "spec.template.spec.containers[agent].securityContext.privileged", "privileged"],
  ["host network", { spec: { hostNetwork: true, containers: [{ name: "agent", image }] } }, "spec.template.spec.hostNetwork", "host namespaces"],
  ["host PID", { spec: { hostPID: true, containers: [{ name: "agent", image }] } }, "spec.template.spec.hostPID", "host namespaces"],
  ["host IPC", { spec: { hostIPC: true, containers: [{ name: "agent", image }] } }, "spec.template.spec.hostIPC", "host namespaces"],
  ["a host port", one({}, { ports: [{ containerPort: 8080, hostPort: 8080 }] }), "spec.template.spec.containers[agent].ports.hostPort", "hostPort"],
  ["a probe host", one({}, { livenessProbe: { httpGet: { port: 8080, host: "example.com" } } }), "spec.template.spec.containers[agent].livenessProbe.httpGet.host", "probe or lifecycle host"],
  ["a lifecycle host", one({}, { lifecycle: { preStop: { tcpSocket: { port: 8080, host: "example.com" } } } }), "spec.template.spec.containers[agent].lifecycle.preStop.tcpSocket.host", "probe or lifecycle host"],
  ["an unmasked /proc, even in a user namespace", { spec: { hostUsers: false, containers: [{ name: "agent", image, securityContext: { procMount: "Unmasked" } }] } }, "spec.template.spec.containers[agent].securityContext.procMount", "procMount"],
  ["an SELinux type", { spec: { securityContext: { seLinuxOptions: { type: "spc_t" } }, containers: [{ name: "agent", image }] } }, "spec.template.spec.securityContext.seLinuxOptions.type", "seLinuxOptions"],
  ["an SELinux user", one({ seLinuxOptions: { user: "system_u" } }), "spec.template.spec.containers[agent].securityContext.seLinuxOptions.user", "seLinuxOptions"],
  ["an SELinux role", one({ seLinuxOptions: { role: "system_r" } }), "spec.template.spec.containers[agent].securityContext.seLinuxOptions.role", "seLinuxOptions"],
  ["an AppArmor profile", one({ appArmorProfile: { type: "Unconfined" } }), "spec.template.spec.containers[agent].securityContext.appArmorProfile.type", "forbidden AppArmor profile"],
  [
    "an AppArmor annotation",
    { metadata: { annotations: { "container.apparmor.security.beta.kubernetes.io/agent": "unconfined" } }, spec: { containers: [{ name: "agent", image }] } },
    "spec.template.metadata.annotations[container.apparmor.security.beta.kubernetes.io/agent]",
    "forbidden AppArmor profile",
  ],
  ["a sysctl", { spec: { securityContext: { sysctls: [{ name: "net.ipv4.ip_forward", value: "1" }] }, containers: [{ name: "agent", image }] } }, "spec.template.spec.securityContext.sysctls[net.ipv4.ip_forward]", "forbidden sysctls"],
  [
    "a windows host process",
    { spec: { os: { name: "windows" }, hostNetwork: true, securityContext: { seccompProfile: null, windowsOptions: { hostProcess: true } }, containers: [{ name: "agent", image, securityContext: { allowPrivilegeEscalation: null, capabilities: null } }] } },
    "spec.template.spec.securityContext.windowsOptions.hostProcess",
    "hostProcess",
  ],
  ["a hostPath volume", { spec: { volumes: [{ name: "data", hostPath: { path: "/" } }], containers: [{ name: "agent", image }] } }, "spec.template.spec.volumes[data].hostPath", "restricted volume types"],
  ["an nfs volume", { spec: { volumes: [{ name: "data", nfs: { server: "nfs.example.com", path: "/" } }], containers: [{ name: "agent", image }] } }, "spec.template.spec.volumes[data].nfs", "restricted volume types"],
  ["privilege escalation", one({ allowPrivilegeEscalation: true }), "spec.template.spec.containers[agent].securityContext.allowPrivilegeEscalation", "allowPrivilegeEscalation != false"],
  // The template's capabilities replace the operator's, drop of ALL included.
  ["capabilities without drop ALL", one({ capabilities: { add: ["NET_BIND_SERVICE"] } }), "spec.template.spec.containers[agent].securityContext.capabilities.drop", "unrestricted capabilities"],
  ["an added capability", one({ capabilities: { drop: ["ALL"], add: ["NET_RAW"] } }), "spec.template.spec.containers[agent].securityContext.capabilities.add", "unrestricted capabilities"],
  ["runAsNonRoot false", one({ runAsNonRoot: false }), "spec.template.spec.containers[agent].securityContext.runAsNonRoot", "runAsNonRoot != true"],
  ["runAsNonRoot unset", { spec: { securityContext: { runAsNonRoot: null }, containers: [{ name: "agent", image }] } }, "spec.template.spec.containers[agent].securityContext.runAsNonRoot", "runAsNonRoot != true"],
  ["user 0", { spec: { securityContext: { runAsUser: 0 }, containers: [{ name: "agent", image }] } }, "spec.template.spec.securityContext.runAsUser", "runAsUser=0"],
  ["an unconfined seccomp profile", one({ seccompProfile: { type: "Unconfined" } }), "spec.template.spec.containers[agent].securityContext.seccompProfile.type", "seccompProfile"],
  ["no seccomp profile", { spec: { securityContext: { seccompProfile: null }, initContainers: [{ name: "setup", image }], containers: [{ name: "agent", image, securityContext: { seccompProfile: { type: "RuntimeDefault" } } }] } }, "spec.template.spec.initContainers[setup].securityContext.seccompProfile", "seccompProfile"],
];

describe("each check", () => {
  it.each(CASES)("refuses %s, naming the field, as PSA does", async (_what, template, field, reason) => {
    const [policy, psa] = await Promise.all([policyVerdict("case", template), psaVerdict("case", template)]);
    expect(psa.kind, "message" in psa ? psa.message : "").toBe("refused");
    expect((psa as { message: string }).message).toContain(reason);
    expect(policy.kind, "message" in policy ? policy.message : "").toBe("refused");
    const message = (policy as { message: string }).message;
    expect(message).toContain(`${field}: `);
    expect(message).toContain("breaks the restricted Pod Security profile");
    expect(message).toContain(EXEMPT_VALUE);
  });
});

// Templates at the edges of the profile that both must take.
const bare = (spec: Json = {}, metadata?: Json): Json => ({ ...(metadata ? { metadata } : {}), spec: { containers: [{ name: "agent", image }], ...spec } });
const ACCEPTED: [string, Json][] = [
  ["the operator's defaults alone", bare()],
  ["a null securityContext, which takes the defaults", one(null as unknown as Json)],
  ["NET_BIND_SERVICE with drop ALL", one({ capabilities: { drop: ["ALL"], add: ["NET_BIND_SERVICE"] } })],
  ["Localhost profiles", one({ seccompProfile: { type: "Localhost", localhostProfile: "agent.json" }, appArmorProfile: { type: "Localhost", localhostProfile: "k8s-agent" } })],
  ["the container_engine_t SELinux type (1.31)", one({ seLinuxOptions: { type: "container_engine_t", level: "s0:c1,c2" } })],
  ["the sysctls added in 1.37", bare({ securityContext: { sysctls: ["net.ipv4.tcp_slow_start_after_idle", "net.ipv4.tcp_notsent_lowat"].map((name) => ({ name, value: "1" })) } })],
  ...["emptyDir", "configMap", "secret", "image", "persistentVolumeClaim", "csi", "ephemeral", "projected", "downwardAPI"].map((kind): [string, Json] => {
    const volume = ALLOWED_VOLUMES.find((v) => kind in v)!;
    return [`a ${kind} volume`, bare({ volumes: [{ name: "data", ...volume }] })];
  }),
  ["a volume without a source (an emptyDir)", bare({ volumes: [{ name: "data" }] })],
  ["a localhost AppArmor annotation", bare({}, { annotations: { "container.apparmor.security.beta.kubernetes.io/agent": "localhost/k8s-agent" } })],
  ["root in a user namespace (1.35)", { spec: { hostUsers: false, securityContext: { runAsNonRoot: false, runAsUser: 0 }, containers: [{ name: "agent", image, securityContext: { runAsUser: 0 } }] } }],
  [
    "a windows pod without the linux-only fields",
    { spec: { os: { name: "windows" }, securityContext: { seccompProfile: null }, containers: [{ name: "agent", image, securityContext: { allowPrivilegeEscalation: null, capabilities: null } }] } },
  ],
  ["a probe without a host, host port 0", one({}, { ports: [{ containerPort: 8080, hostPort: 0 }], livenessProbe: { httpGet: { port: 8080, host: "" } } })],
];

describe("the edges of the profile", () => {
  it.each(ACCEPTED)("take %s", async (_what, template) => {
    const [policy, psa] = await Promise.all([policyVerdict("edge", template), psaVerdict("edge", template)]);
    expect(psa.kind, "message" in psa ? psa.message : "").toBe("accepted");
    expect(policy.kind, "message" in policy ? policy.message : "").toBe("accepted");
  });
});

describe("the pod security policy in a cluster", () => {
  it("refuses a privileged run at create with a message naming the field and the way out", async () => {
    const err = await refusal(createRun(admin, runNs, runOf("privileged", runNs, privileged())));
    expect(err.code).toBe(403);
    expect(err.message).toContain("spec.template.spec.containers[agent].securityContext.privileged: must not be true");
    expect(err.message).toContain(`list it in the chart value ${EXEMPT_VALUE}`);
  });

  it("keeps its message within the API server's limit, however many containers break a check", async () => {
    const containers = Array.from({ length: 64 }, (_, i) => ({ name: `c${i}-${"x".repeat(55)}`, image, securityContext: { privileged: true, allowPrivilegeEscalation: true } }));
    const initContainers = Array.from({ length: 64 }, (_, i) => ({ name: `i${i}-${"x".repeat(55)}`, image, securityContext: { privileged: true, allowPrivilegeEscalation: true } }));
    const verdict = await policyVerdict("many", { spec: { initContainers, containers } });
    expect(verdict.kind).toBe("refused");
    const message = (verdict as { message: string }).message;
    expect(message).toContain("spec.template.spec.initContainers[i0-");
    expect(message).toContain("breaks the restricted Pod Security profile");
  });

  it("takes a run in an exempt namespace, and in a namespace the release does not watch", async () => {
    await createRun(admin, exemptNs, runOf("privileged", exemptNs, privileged()));
    await createRun(admin, otherNs, runOf("privileged", otherNs, privileged()));
    expect(((await getRun(admin, exemptNs, "privileged")) as any).spec.template.spec.containers[0].securityContext.privileged).toBe(true);
  });

  it("lets the operator write a run that was there before the policy: annotations, status, and spec fields besides the template", async () => {
    for (const name of ["legacy", "compliant"]) {
      await admin.mergePatch(paths.run(runNs, name), { metadata: { annotations: { [ANNOTATIONS.attempt]: "2", [ANNOTATIONS.backoffReason]: "PodFailed" } } });
      await admin.mergePatch(paths.runStatus(runNs, name), { status: { phase: "Starting", attempt: 2 } });
      await admin.mergePatch(paths.run(runNs, name), { spec: { goal: "a new goal" } });
      const run = await getRun(admin, runNs, name);
      expect(run.metadata.annotations[ANNOTATIONS.attempt]).toBe("2");
      expect(run.status.phase).toBe("Starting");
    }
  });

  it("refuses a change of a run's template to one that breaks the profile", async () => {
    const toPrivileged = await refusal(admin.mergePatch(paths.run(runNs, "compliant"), { spec: { template: privileged() } }));
    expect(toPrivileged.code).toBe(403);
    expect(toPrivileged.message).toContain("spec.template.spec.containers[agent].securityContext.privileged");
    const otherwise = await refusal(admin.mergePatch(paths.run(runNs, "legacy"), { spec: { template: privileged("renamed") } }));
    expect(otherwise.message).toContain("spec.template.spec.containers[renamed].securityContext.privileged");
    // A change that leaves the profile kept is taken.
    await admin.mergePatch(paths.run(runNs, "legacy"), { spec: { template: plain() } });
    expect(((await getRun(admin, runNs, "legacy")) as any).spec.template).toEqual(plain());
  });
});
