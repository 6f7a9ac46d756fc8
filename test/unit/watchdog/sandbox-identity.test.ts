import { describe, expect, it } from "vitest";
import { decide } from "../../../operator/watchdog/decide.ts";
import { DEFAULT_SANDBOX_IDENTITY, TOKEN_MOUNT_PATH, type SandboxIdentity } from "../../../operator/watchdog/sandbox-identity.ts";
import { T0, run } from "../fixtures.ts";

const identity = (serviceAccount: SandboxIdentity["serviceAccount"]): SandboxIdentity => ({ ...DEFAULT_SANDBOX_IDENTITY, serviceAccount });

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
