// The chart's roles for people, against the real API server: view and edit aggregated into
// Kubernetes' own roles, and an approver who may answer and resume runs and change nothing else
// (RBAC for the verbs, the approver admission policy for what a patch may touch).
import { randomBytes } from "node:crypto";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { APPROVER_ANNOTATIONS } from "../../operator/api/approver-policy.ts";
import { ANNOTATIONS, LABELS } from "../../operator/api/annotations.ts";
import { paths, type Json, type KubeClient } from "../../operator/kube/client.ts";
import { createRun, getRun, kube, runManifest } from "../support/cluster.ts";
import { waitFor } from "../support/wait.ts";
import { chartDir, helm, ok, refusal, requestToken, restrictedNamespace, tokenClient, writeValues } from "./support.ts";

const release = `roles-${randomBytes(3).toString("hex")}`;
const fullname = `${release}-agent-watchdog`;

let admin: KubeClient;
let sysNs: string;
let ns: string;
/** A client per ServiceAccount, each bound to one ClusterRole in `ns`. */
const as: Record<"viewer" | "editor" | "approver" | "nsView" | "nsEdit", KubeClient> = {} as never;

async function bound(name: string, clusterRole: string): Promise<KubeClient> {
  await admin.create(`/api/v1/namespaces/${ns}/serviceaccounts`, { apiVersion: "v1", kind: "ServiceAccount", metadata: { name } });
  await admin.create(`/apis/rbac.authorization.k8s.io/v1/namespaces/${ns}/rolebindings`, {
    apiVersion: "rbac.authorization.k8s.io/v1",
    kind: "RoleBinding",
    metadata: { name },
    roleRef: { apiGroup: "rbac.authorization.k8s.io", kind: "ClusterRole", name: clusterRole },
    subjects: [{ kind: "ServiceAccount", name, namespace: ns }],
  });
  return tokenClient(await requestToken(admin, ns, name));
}

const annotate = (client: KubeClient, run: string, annotations: Record<string, string | null>) => client.mergePatch(paths.run(ns, run), { metadata: { annotations } });

/** A write the first try may lose to RBAC's cache of a binding just made: retried until it is taken. */
const eventually = <T>(what: string, write: () => Promise<T>) =>
  waitFor(what, async () => {
    try {
      return { value: await write() };
    } catch (err) {
      if ((err as { code?: number }).code === 403 && !String(err).includes("ValidatingAdmissionPolicy")) return undefined;
      throw err;
    }
  });

beforeAll(async () => {
  admin = kube();
  sysNs = await restrictedNamespace(admin, "aw-roles-sys");
  ns = await restrictedNamespace(admin, "aw-roles-runs");
  ok(await helm(["install", release, chartDir, "--namespace", sysNs, "--values", writeValues({ crds: { enabled: false }, watchNamespaces: [ns] })]), "helm install");
  as.viewer = await bound("viewer", `${fullname}-view`);
  as.editor = await bound("editor", `${fullname}-edit`);
  as.approver = await bound("approver", `${fullname}-approver`);
  as.nsView = await bound("ns-view", "view");
  as.nsEdit = await bound("ns-edit", "edit");
  // The API server takes a new policy into force a moment after it is created: until the
  // approver is refused a label on a run of its own, the tests would see RBAC alone.
  await createRun(admin, ns, runManifest("probe"));
  let n = 0;
  await waitFor("the approver policy to be in force", async () => {
    try {
      await as.approver.mergePatch(paths.run(ns, "probe"), { metadata: { labels: { probe: String(++n) } } });
      return undefined;
    } catch (err) {
      return String(err).includes("ValidatingAdmissionPolicy");
    }
  });
  // And the shard policy: a run admitted before it is in force gets its shard label on its first
  // update, which the approver policy would count against an approver's answer.
  await waitFor("the shard policy to be in force", async () => {
    const probe = (await createRun(admin, ns, runManifest(`probe-${++n}`))) as { metadata: { labels?: Record<string, string> } };
    return probe.metadata.labels?.[LABELS.shard] !== undefined;
  });
}, 240_000);

afterAll(async () => {
  await helm(["uninstall", release, "--namespace", sysNs, "--wait", "--timeout", "120s"]);
  for (const namespace of [ns, sysNs]) if (namespace) await admin.delete(`/api/v1/namespaces/${namespace}`).catch(() => {});
});

describe("roles for people", () => {
  it("aggregates view into Kubernetes' view, and edit into its edit", async () => {
    await createRun(admin, ns, runManifest("aggregated"));
    // The cluster role aggregation controller copies the rules over a moment after the install.
    await waitFor("Kubernetes' view role to read AgentRuns", () => as.nsView.get(paths.run(ns, "aggregated")).catch(() => undefined));
    expect((await refusal(as.nsView.mergePatch(paths.run(ns, "aggregated"), { spec: { goal: "changed" } }))).code).toBe(403);
    await eventually("Kubernetes' edit role to write AgentRuns", () => as.nsEdit.mergePatch(paths.run(ns, "aggregated"), { spec: { goal: "changed by an editor" } }));
    expect(((await getRun(admin, ns, "aggregated")).spec as { goal?: string }).goal).toBe("changed by an editor");
    expect((await refusal(as.viewer.create(paths.runs(ns), runManifest("by-viewer")))).code).toBe(403);
    await eventually("the edit role to create a run", () => as.editor.create(paths.runs(ns), runManifest("by-editor")));
  });

  it("lets an approver answer and resume, and refuses every other change with a message that names it", async () => {
    await createRun(admin, ns, runManifest("asked"));
    await eventually("the approver to answer", () => annotate(as.approver, "asked", { [ANNOTATIONS.approve]: "yes", [ANNOTATIONS.approvalId]: "req-1" }));
    await annotate(as.approver, "asked", { [ANNOTATIONS.approve]: null, [ANNOTATIONS.approvalId]: null, [ANNOTATIONS.resume]: "r1" });
    expect((await getRun(admin, ns, "asked")).metadata.annotations?.[ANNOTATIONS.resume]).toBe("r1");

    // A template change that the Pod Security policy has nothing against: only the approver's
    // limits can refuse it. A privileged one is refused as well, by whichever policy speaks first.
    const template = await refusal(as.approver.mergePatch(paths.run(ns, "asked"), { spec: { template: { metadata: { labels: { team: "other" } } } } }));
    expect(template.code).toBe(403);
    expect(template.message).toContain("it may not change spec.template");
    const privileged = await refusal(as.approver.mergePatch(paths.run(ns, "asked"), { spec: { template: { spec: { containers: [{ name: "agent", image: "evil:1", securityContext: { privileged: true } }] } } } }));
    expect(privileged.code).toBe(403);
    const goal = await refusal(as.approver.mergePatch(paths.run(ns, "asked"), { spec: { goal: "something else" }, metadata: { annotations: { [ANNOTATIONS.approve]: "yes" } } }));
    expect(goal.message).toContain("spec.goal");
    const backoff = await refusal(annotate(as.approver, "asked", { [ANNOTATIONS.retryAfter]: "2000-01-01T00:00:00Z" }));
    expect(backoff.message).toContain(`metadata.annotations[${ANNOTATIONS.retryAfter}]`);
    const labels = await refusal(as.approver.mergePatch(paths.run(ns, "asked"), { metadata: { labels: { team: "other" } } }));
    expect(labels.message).toContain("metadata.labels");
    // update is RBAC's to refuse: the role has no such verb.
    const run = await getRun(admin, ns, "asked");
    expect((await refusal(as.approver.request("PUT", paths.run(ns, "asked"), { body: run as Json }))).message).not.toContain("ValidatingAdmissionPolicy");
    expect((await refusal(as.approver.create(paths.runs(ns), runManifest("by-approver")))).code).toBe(403);
    expect((await refusal(as.approver.mergePatch(paths.runStatus(ns, "asked"), { status: { phase: "Completed" } }))).code).toBe(403);

    // Nothing refused was written; an editor, who may update, is not held to the approver's limits.
    const after = await getRun(admin, ns, "asked");
    expect((after.spec as { goal?: string }).goal).toBe((run.spec as { goal?: string }).goal);
    expect(after.metadata.labels?.team).toBeUndefined();
    await eventually("an editor to change the goal", () => as.editor.mergePatch(paths.run(ns, "asked"), { spec: { goal: "edited" }, metadata: { annotations: { [ANNOTATIONS.retryAfter]: null } } }));
    expect(APPROVER_ANNOTATIONS).toEqual([ANNOTATIONS.approve, ANNOTATIONS.reject, ANNOTATIONS.approvalId, ANNOTATIONS.resume]);
  });

  it("lets an approver answer a run that has no shard label yet, which the shard policy stamps on that answer", async () => {
    // Made with generateName: it has no name at admission, so the shard policy leaves it unlabelled
    // (as it would a run made before the policy existed).
    const manifest = runManifest("unused") as Json & { metadata: Json };
    const made = (await admin.create(paths.runs(ns), { ...manifest, metadata: { generateName: "unlabelled-" } })) as { metadata: { name: string; labels?: Record<string, string> } };
    expect(made.metadata.labels?.[LABELS.shard]).toBeUndefined();
    const answered = (await annotate(as.approver, made.metadata.name, { [ANNOTATIONS.approve]: "yes", [ANNOTATIONS.approvalId]: "req-1" })) as { metadata: { labels?: Record<string, string> } };
    expect(answered.metadata.labels?.[LABELS.shard]).toBe("0");
    // Once it has one, no one moves it: the shard policy keeps the old value, so an approver's try
    // changes nothing, and any other label is refused as before.
    const moved = (await as.approver.mergePatch(paths.run(ns, made.metadata.name), { metadata: { labels: { [LABELS.shard]: "7" } } })) as { metadata: { labels?: Record<string, string> } };
    expect(moved.metadata.labels?.[LABELS.shard]).toBe("0");
    expect((await refusal(as.approver.mergePatch(paths.run(ns, made.metadata.name), { metadata: { labels: { team: "other" } } }))).message).toContain("metadata.labels");
  });
});
