// Who a sandbox is to the API server (sandbox-identity.ts): the ServiceAccount each mode gives it
// and the RBAC objects made for it, the pod-bound token mounted where in-cluster clients look, the
// restricted pod security a template may only tighten, and a template's own service account,
// kept when the fencing applies to it and refused when it does not.
import { describe, expect, it } from "vitest";
import { decide } from "../../../operator/watchdog/decide.ts";
import { DEFAULT_SANDBOX_IDENTITY, TOKEN_MOUNT_PATH, type SandboxIdentity } from "../../../operator/watchdog/sandbox-identity.ts";
import { OWNER, T0, run } from "../fixtures.ts";

/** How the operator labels what it creates for a sandbox's identity. */
const MANAGED = { "app.kubernetes.io/managed-by": "agent-watchdog", "app.kubernetes.io/component": "sandbox-identity" };
const identity = (serviceAccount: SandboxIdentity["serviceAccount"]): SandboxIdentity => ({ ...DEFAULT_SANDBOX_IDENTITY, serviceAccount });

/** The sandbox's ServiceAccount as the plan makes it: no token mounted unless asked for. */
const serviceAccount = (metadata: object) => ({ apiVersion: "v1", kind: "ServiceAccount", metadata, automountServiceAccountToken: false });

/** A RoleBinding of the sandbox's ServiceAccount (named as the object) to a Role or ClusterRole. */
const roleBinding = (metadata: { name: string; namespace: string }, kind: "Role" | "ClusterRole", role: string) => ({
  apiVersion: "rbac.authorization.k8s.io/v1",
  kind: "RoleBinding",
  metadata,
  roleRef: { apiGroup: "rbac.authorization.k8s.io", kind, name: role },
  subjects: [{ kind: "ServiceAccount", name: metadata.name, namespace: metadata.namespace }],
});

describe("sandbox identity", () => {
  it("gives a namespace sandbox its ServiceAccount, a pod-bound token and no automounted one", () => {
    const plan = decide({ run: run(), pods: [], now: T0, sandbox: identity("namespace") });
    const spec = plan.createPod!.spec as any;
    expect(spec.serviceAccountName).toBe("agent-watchdog-sandbox");
    expect(spec.automountServiceAccountToken).toBe(false);
    const volume = spec.volumes.find((v: any) => v.projected);
    expect(volume.projected.sources[0].serviceAccountToken).toMatchObject({ path: "token", expirationSeconds: 3600 });
    expect(spec.containers[0].volumeMounts).toContainEqual({ name: volume.name, mountPath: TOKEN_MOUNT_PATH, readOnly: true });
    expect(plan.prerequisites!.map((o) => o.kind)).toEqual(["ServiceAccount", "RoleBinding"]);
    expect((plan.prerequisites![1] as any).roleRef).toMatchObject({ kind: "ClusterRole", name: "agent-watchdog-sandbox" });
  });

  it("gives a per-run sandbox a Role that names only its run, owned by the run", () => {
    const plan = decide({ run: run(), pods: [], now: T0, sandbox: identity("run") });
    expect((plan.createPod!.spec as any).serviceAccountName).toBe("r-sandbox");
    const role = plan.prerequisites!.find((o) => o.kind === "Role") as any;
    expect(role.rules).toContainEqual(expect.objectContaining({ resources: ["agentruns/status"], resourceNames: ["r"] }));
    expect(role.metadata.ownerReferences[0]).toMatchObject({ kind: "AgentRun", uid: "uid-r" });
  });

  it("applies restricted pod security where the template is silent, and keeps what it says", () => {
    const plan = decide({
      run: run({ spec: { template: { spec: { securityContext: { runAsUser: 1000 }, containers: [{ name: "a", image: "x", securityContext: { readOnlyRootFilesystem: true } }] } } } }),
      pods: [],
      now: T0,
    });
    const spec = plan.createPod!.spec as any;
    expect(spec.securityContext).toEqual({ runAsNonRoot: true, seccompProfile: { type: "RuntimeDefault" }, runAsUser: 1000 });
    expect(spec.containers[0].securityContext).toEqual({ allowPrivilegeEscalation: false, capabilities: { drop: ["ALL"] }, readOnlyRootFilesystem: true });
    expect(spec.serviceAccountName).toBeUndefined();
    expect(plan.prerequisites).toBeUndefined();
  });

  it("leaves a template's own service account alone when the operator gives sandboxes no identity", () => {
    const plan = decide({
      run: run({ spec: { template: { spec: { serviceAccountName: "mine", containers: [{ name: "a", image: "x" }] } } } }),
      pods: [],
      now: T0,
      sandbox: identity("none"),
    });
    expect((plan.createPod!.spec as any).serviceAccountName).toBe("mine");
    expect((plan.createPod!.spec as any).volumes).toBeUndefined();
    expect(plan.prerequisites).toBeUndefined();
  });

  it("makes a namespace sandbox's ServiceAccount without an automounted token, bound to the install's ClusterRole, labelled as the operator's", () => {
    const plan = decide({ run: run(), pods: [], now: T0, sandbox: { ...identity("namespace"), clusterRole: "custom-role" } });
    const meta = { name: "agent-watchdog-sandbox", namespace: "ns", labels: MANAGED };
    expect(plan.prerequisites).toEqual([serviceAccount(meta), roleBinding(meta, "ClusterRole", "custom-role")]);
  });

  it("makes a per-run sandbox's ServiceAccount, Role and RoleBinding, owned by the run, the Role reading its run and writing its status only", () => {
    const plan = decide({ run: run(), pods: [], now: T0, sandbox: identity("run") });
    // Owned by the run (controller, blocking its deletion), so they go with it and nothing else.
    const meta = { name: "r-sandbox", namespace: "ns", labels: MANAGED, ownerReferences: [OWNER] };
    expect(plan.prerequisites).toEqual([
      serviceAccount(meta),
      {
        apiVersion: "rbac.authorization.k8s.io/v1",
        kind: "Role",
        metadata: meta,
        rules: [
          { apiGroups: ["watchdog.dev"], resources: ["agentruns"], verbs: ["get", "list", "watch"], resourceNames: ["r"] },
          { apiGroups: ["watchdog.dev"], resources: ["agentruns/status"], verbs: ["get", "patch", "update"], resourceNames: ["r"] },
        ],
      },
      roleBinding(meta, "Role", "r-sandbox"),
    ]);
  });

  it("mounts the pod-bound token, the cluster's CA and the namespace where in-cluster clients look, beside the template's own volumes and mounts", () => {
    const own = { name: "work", emptyDir: {} };
    const ownMount = { name: "work", mountPath: "/work" };
    const plan = decide({
      run: run({ spec: { template: { spec: { volumes: [own], containers: [{ name: "a", image: "x", volumeMounts: [ownMount] }, { name: "b", image: "y" }] } } } }),
      pods: [],
      now: T0,
      sandbox: { ...identity("namespace"), tokenExpirationSeconds: 600 },
    });
    const spec = plan.createPod!.spec as any;
    const token = { name: "watchdog-sandbox-token", mountPath: TOKEN_MOUNT_PATH, readOnly: true };
    expect(spec.containers.map((c: any) => c.volumeMounts)).toEqual([[ownMount, token], [token]]);
    expect(spec.volumes).toEqual([
      own,
      {
        name: "watchdog-sandbox-token",
        projected: {
          sources: [
            { serviceAccountToken: { path: "token", expirationSeconds: 600 } },
            { configMap: { name: "kube-root-ca.crt", items: [{ key: "ca.crt", path: "ca.crt" }] } },
            { downwardAPI: { items: [{ path: "namespace", fieldRef: { apiVersion: "v1", fieldPath: "metadata.namespace" } }] } },
          ],
        },
      },
    ]);
  });

  it("leaves a container that mounts something of its own at the token's path as it is, and mounts the token in the others", () => {
    // Two mounts at one path would be refused by the API server, and the run would never start.
    const ownCredentials = { name: "creds", mountPath: TOKEN_MOUNT_PATH };
    const plan = decide({
      run: run({ spec: { template: { spec: { containers: [{ name: "a", image: "x", volumeMounts: [ownCredentials] }, { name: "b", image: "y" }] } } } }),
      pods: [],
      now: T0,
      sandbox: identity("run"),
    });
    const spec = plan.createPod!.spec as any;
    expect(spec.containers[0].volumeMounts).toEqual([ownCredentials]);
    expect(spec.containers[1].volumeMounts).toEqual([{ name: "watchdog-sandbox-token", mountPath: TOKEN_MOUNT_PATH, readOnly: true }]);
    // A template with no volumes of its own gets the token's and nothing else.
    expect(spec.volumes.map((v: any) => v.name)).toEqual(["watchdog-sandbox-token"]);
  });

  it("applies restricted security to init containers too, keeping what they say", () => {
    const plan = decide({
      run: run({ spec: { template: { spec: { initContainers: [{ name: "init", image: "i", securityContext: { runAsUser: 1000 } }], containers: [{ name: "a", image: "x" }] } } } }),
      pods: [],
      now: T0,
    });
    const spec = plan.createPod!.spec as any;
    expect(spec.initContainers).toEqual([{ name: "init", image: "i", securityContext: { allowPrivilegeEscalation: false, capabilities: { drop: ["ALL"] }, runAsUser: 1000 } }]);
  });

  // An empty or non-string serviceAccountName names no account: the sandbox gets the mode's own,
  // fenced, rather than being refused or crashing the decision.
  for (const serviceAccountName of ["", 42]) {
    it(`takes a template's serviceAccountName of ${JSON.stringify(serviceAccountName)} for none, and gives the sandbox the run's own`, () => {
      const plan = decide({
        run: run({ spec: { template: { spec: { serviceAccountName, containers: [{ name: "a", image: "x" }] } } } }),
        pods: [],
        now: T0,
        sandbox: identity("run"),
      });
      expect(plan.phase).not.toBe("Failed");
      expect((plan.createPod!.spec as any).serviceAccountName).toBe("r-sandbox");
      expect(plan.prerequisites!.map((o) => o.kind)).toEqual(["ServiceAccount", "Role", "RoleBinding"]);
    });
  }

  for (const mode of ["namespace", "run"] as const) {
    it(`keeps the fencing for a template's own service account named *-sandbox (${mode})`, () => {
      const plan = decide({
        run: run({ spec: { template: { spec: { serviceAccountName: "mine-sandbox", containers: [{ name: "a", image: "x" }] } } } }),
        pods: [],
        now: T0,
        sandbox: identity(mode),
      });
      const spec = plan.createPod!.spec as any;
      expect(spec.serviceAccountName).toBe("mine-sandbox");
      // The pod-bound token is what the fencing checks each write against; no long-lived one.
      expect(spec.automountServiceAccountToken).toBe(false);
      expect(spec.volumes.find((v: any) => v.projected).projected.sources[0].serviceAccountToken).toBeDefined();
      // The user's ServiceAccount: its roles are theirs; the operator makes nothing for it.
      expect(plan.prerequisites).toBeUndefined();
    });

    it(`refuses a template's own service account the fencing does not apply to, and says why (${mode})`, () => {
      const plan = decide({
        run: run({ spec: { template: { spec: { serviceAccountName: "mine", containers: [{ name: "a", image: "x" }] } } } }),
        pods: [],
        now: T0,
        sandbox: identity(mode),
      });
      expect(plan.createPod).toBeUndefined();
      expect(plan.phase).toBe("Failed");
      expect(plan.status!.reason).toBe("ServiceAccountRefused");
      expect(plan.status!.message).toContain("spec.template.spec.serviceAccountName mine is refused");
      expect(plan.status!.message).toContain("ends in -sandbox");
      expect(plan.events.map((e) => e.reason)).toContain("ServiceAccountRefused");
    });
  }
});
