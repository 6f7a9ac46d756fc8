// Security of the installed chart against the real API server, with real pod-bound tokens. The
// chart is installed (RBAC, sandbox ClusterRole, fencing policy); the real operator runs as the
// chart's ServiceAccount with the chart's flags and gives each run's sandbox pod its identity;
// then the test acts as a sandbox with a token bound to that pod, as the kubelet would mount it.
import { randomBytes } from "node:crypto";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { paths, type Json, type KubeClient } from "../../operator/kube/client.ts";
import { NAMESPACE_SERVICE_ACCOUNT } from "../../operator/watchdog/sandbox-identity.ts";
import { createRun, getRun, kube, runManifest } from "../support/cluster.ts";
import { startOperator, type OperatorProcess } from "../support/operator-process.ts";
import { waitFor } from "../support/wait.ts";
import { chartDir, find, helm, kubectl, ok, parseCanIList, parseManifests, refusal, requestToken, restrictedNamespace, tempDir, tokenClient, tokenKubeconfig, writeValues } from "./support.ts";

const release = `fence-${randomBytes(3).toString("hex")}`;
const fullname = `${release}-agent-watchdog`;
const sandboxRole = `${fullname}-sandbox`;
// Long enough that the watchdog never times a run out while the test works.
const WATCHDOG = { heartbeatTimeout: "10m" };

let admin: KubeClient;
let sysNs: string;
let runNs: string;
let manifests: Json[] = [];
let operator: OperatorProcess | undefined;
/** The sandbox of run "own", attempt 1: its pod, and a client with a token bound to that pod. */
let ownPod: any;
let sandbox: KubeClient;
let sandboxToken: string;

function heartbeat(client: KubeClient, run: string, attempt: number, extra: Json = {}): Promise<Json> {
  return client.mergePatch(paths.runStatus(runNs, run), { status: { heartbeat: { time: new Date().toISOString(), attempt, state: "Planning" }, ...extra } });
}

async function runStatus(name: string): Promise<any> {
  return (await getRun(admin, runNs, name)).status ?? {};
}

async function currentPod(run: string): Promise<any> {
  const status = await waitFor(`${run} to get a sandbox pod`, async () => {
    const s = await runStatus(run);
    return s.podName && s.phase === "Starting" ? s : undefined;
  });
  return admin.get(paths.pod(runNs, status.podName));
}

/** What `kubectl auth can-i --list` shows for the token, beyond what any ServiceAccount may do. */
async function grantsOf(token: string, namespace: string): Promise<string[]> {
  const list = async (t: string) => parseCanIList(ok(await kubectl(["--kubeconfig", tokenKubeconfig(t), "auth", "can-i", "--list", "-n", namespace]), "kubectl auth can-i --list").stdout);
  const baseline = await list(await requestToken(admin, namespace, "default"));
  expect(baseline.size).toBeGreaterThan(0);
  return [...(await list(token))].filter((rule) => !baseline.has(rule)).sort();
}

/** "resource[.group] [names] verb" strings for RBAC rules, as kubectl auth can-i --list writes them. */
function expand(rules: any[]): string[] {
  const out: string[] = [];
  for (const rule of rules) {
    for (const group of rule.apiGroups) {
      for (const resource of rule.resources) {
        const [base, sub] = resource.split("/");
        const name = `${base}${group ? `.${group}` : ""}${sub ? `/${sub}` : ""}`;
        const names = rule.resourceNames ? ` [${rule.resourceNames.join(" ")}]` : "";
        for (const verb of rule.verbs) out.push(`${name}${names} ${verb}`);
      }
    }
  }
  return out.sort();
}

beforeAll(async () => {
  admin = kube();
  sysNs = await restrictedNamespace(admin, "aw-fence-sys");
  runNs = await restrictedNamespace(admin, "aw-fence-runs");
  const values = { crds: { enabled: false }, watchNamespaces: [runNs], sandbox: { serviceAccount: "namespace" } };
  ok(await helm(["install", release, chartDir, "--namespace", sysNs, "--values", writeValues(values)]), "helm install");
  manifests = parseManifests(ok(await helm(["get", "manifest", release, "--namespace", sysNs]), "helm get manifest").stdout);

  // The operator as the Deployment would run it: the chart's ServiceAccount and flags. Ports and
  // the namespace come from the test harness; the defaults file is the chart's ConfigMap.
  const container = find(manifests, "Deployment").spec.template.spec.containers[0];
  const dir = tempDir("operator");
  writeFileSync(join(dir, "defaults.yaml"), find(manifests, "ConfigMap", `${fullname}-defaults`).data["defaults.yaml"]);
  // The serving certificate the chart generated, where the mounted Secret would put it.
  const tls = find(manifests, "Secret", `${fullname}-metrics-tls`).data as Record<string, string>;
  for (const file of ["tls.crt", "tls.key"]) writeFileSync(join(dir, file), Buffer.from(tls[file] as string, "base64"));
  const local: Record<string, string> = { "--defaults-file": "defaults.yaml", "--tls-cert-file": "tls.crt", "--tls-private-key-file": "tls.key" };
  const args = (container.args as string[])
    .slice(1)
    .filter((a) => !/^--(metrics-bind-address|health-probe-bind-address|namespaces)=/.test(a))
    .map((a) => {
      const [flag = "", value] = a.split("=", 2);
      return value !== undefined && local[flag] ? `${flag}=${join(dir, local[flag])}` : a;
    });
  expect(args).toContain(`--sandbox-cluster-role=${sandboxRole}`);
  const operatorToken = await requestToken(admin, sysNs, fullname);
  operator = await startOperator(runNs, args, { KUBECONFIG: tokenKubeconfig(operatorToken), POD_NAMESPACE: sysNs });

  await createRun(admin, runNs, runManifest("own", WATCHDOG));
  await createRun(admin, runNs, runManifest("other", WATCHDOG));
  ownPod = await currentPod("own");
  await currentPod("other");
  sandboxToken = await requestToken(admin, runNs, NAMESPACE_SERVICE_ACCOUNT, { name: ownPod.metadata.name, uid: ownPod.metadata.uid });
  sandbox = tokenClient(sandboxToken);
});

afterEach((ctx) => {
  if (ctx.task.result?.state === "fail") console.error(operator?.logs.slice(-40).join("\n"));
});

afterAll(async () => {
  await operator?.stop();
  await helm(["uninstall", release, "--namespace", sysNs, "--wait", "--timeout", "120s"]);
  for (const ns of [runNs, sysNs]) if (ns) await admin.delete(`/api/v1/namespaces/${ns}`).catch(() => {});
});

describe("the operator under the chart's RBAC", () => {
  it("creates each sandbox's ServiceAccount, binding and restricted pod, records Events and leads on a Lease", async () => {
    const account = await admin.get<any>(`/api/v1/namespaces/${runNs}/serviceaccounts/${NAMESPACE_SERVICE_ACCOUNT}`);
    expect(account.automountServiceAccountToken).toBe(false);
    const binding = await admin.get<any>(`/apis/rbac.authorization.k8s.io/v1/namespaces/${runNs}/rolebindings/${NAMESPACE_SERVICE_ACCOUNT}`);
    expect(binding.roleRef).toEqual({ apiGroup: "rbac.authorization.k8s.io", kind: "ClusterRole", name: sandboxRole });

    // The pod was admitted in a namespace that enforces restricted, and kwok runs it.
    expect(ownPod.spec.serviceAccountName).toBe(NAMESPACE_SERVICE_ACCOUNT);
    expect(ownPod.spec.automountServiceAccountToken).toBe(false);
    expect(ownPod.spec.securityContext).toMatchObject({ runAsNonRoot: true, seccompProfile: { type: "RuntimeDefault" } });
    await waitFor("the sandbox pod to be scheduled and running", async () => {
      const pod = await admin.get<any>(paths.pod(runNs, ownPod.metadata.name));
      return pod.spec.nodeName && pod.status.phase === "Running";
    });

    // An answer with no pending request is refused with a Warning Event (rule 11): the operator
    // may record Events under the chart's RBAC.
    await admin.mergePatch(paths.run(runNs, "other"), { metadata: { annotations: { "watchdog.dev/approve": "yes" } } });
    const events = await waitFor("the operator's AnswerRefused Event", async () => {
      const list = await admin.get<{ items: any[] }>(paths.events(runNs));
      const refused = list.items.filter((e) => e.reason === "AnswerRefused" && e.regarding?.name === "other");
      return refused.length > 0 ? refused : undefined;
    });
    expect(events[0].reportingController).toBe("watchdog.dev/agent-watchdog");
    const lease = await admin.get<any>(paths.lease(sysNs, `${fullname}.watchdog.dev`));
    expect(lease.spec.holderIdentity).toBeTruthy();
    expect(operator!.logs.filter((line) => /forbidden|could not record event/i.test(line))).toEqual([]);
  });

  it("holds exactly the manager Role in the watched namespace and the leader-election Role in its own", async () => {
    const token = await requestToken(admin, sysNs, fullname);
    const role = manifests.find((o: any) => o.kind === "Role" && o.metadata.name === `${fullname}-manager`) as any;
    expect(role.metadata.namespace).toBe(runNs);
    // Reading nodes is cluster-wide, so it shows in every namespace (rule 9 needs it); so is asking
    // the API server who may read what the operator serves (Kubernetes' system:auth-delegator:
    // create TokenReviews and SubjectAccessReviews, nothing else).
    const nodes = find(manifests, "ClusterRole", `${fullname}-nodes`);
    const delegator = (await admin.get<any>("/apis/rbac.authorization.k8s.io/v1/clusterroles/system:auth-delegator")).rules;
    expect(expand(delegator)).toEqual(["subjectaccessreviews.authorization.k8s.io create", "tokenreviews.authentication.k8s.io create"]);
    const clusterWide = [...expand(nodes.rules), ...expand(delegator)];
    expect(await grantsOf(token, runNs)).toEqual([...expand(role.rules), ...clusterWide].sort());
    const leader = find(manifests, "Role", `${fullname}-leader-election`);
    expect(await grantsOf(token, sysNs)).toEqual([...expand(leader.rules), ...clusterWide].sort());
    const leases = find(manifests, "Role", `${fullname}-node-leases`);
    expect(await grantsOf(token, "kube-node-lease")).toEqual([...expand(leases.rules), ...clusterWide].sort());
  });
});

describe("a sandbox with a token bound to its pod", () => {
  it("heartbeats its own run and writes its tool calls and checkpoint", async () => {
    await heartbeat(sandbox, "own", 1);
    await waitFor("the operator to take the heartbeat (phase Planning)", async () => (await runStatus("own")).phase === "Planning");
    const call = { id: "c1", name: "search", argsHash: "h1", state: "Started", attempt: 1, startedAt: new Date().toISOString() };
    await heartbeat(sandbox, "own", 1, { toolCalls: [call], checkpoint: { step: 1, data: { notes: ["started"] } } });
    const status = await runStatus("own");
    expect(status.toolCalls).toEqual([call]);
    expect(status.checkpoint).toEqual({ step: 1, data: { notes: ["started"] } });
    expect(status.heartbeat.attempt).toBe(1);
  });

  it("cannot write another run's status", async () => {
    const err = await refusal(heartbeat(sandbox, "other", 1));
    expect(err.code).toBe(403);
    expect(err.message).toContain(`pod ${ownPod.metadata.name} is not the current sandbox of AgentRun other`);
    expect((await runStatus("other")).heartbeat).toBeUndefined();
  });

  it("cannot set the phase, conditions, attempt or any other operator field", async () => {
    const before = await runStatus("own");
    const now = new Date().toISOString();
    const attempts: [string, Json][] = [
      ["phase", { phase: "Completed" }],
      ["conditions", { conditions: [{ type: "Succeeded", status: "True", reason: "Forged", message: "", lastTransitionTime: now }] }],
      ["attempt", { attempt: 7 }],
      ["podName", { podName: "elsewhere" }],
      ["lastFailure", { lastFailure: { reason: "Forged", message: "forged", time: now } }],
      ["restarts", { restarts: 5 }],
    ];
    for (const [field, change] of attempts) {
      // Alone, and smuggled in with a valid heartbeat.
      for (const status of [change, { heartbeat: { time: now, attempt: 1, state: "Planning" }, ...change }]) {
        const err = await refusal(sandbox.mergePatch(paths.runStatus(runNs, "own"), { status }));
        expect(err.code, field).toBe(403);
        expect(err.message, field).toMatch(new RegExp(`may only write status\\.heartbeat, status\\.toolCalls and status\\.checkpoint; it may not change status\\..*\\b${field}\\b`));
      }
    }
    const after = await runStatus("own");
    for (const field of ["phase", "conditions", "attempt", "podName", "restarts", "lastFailure"]) expect(after[field], field).toEqual(before[field]);
  });

  it("cannot change annotations or the spec, create or delete runs", async () => {
    const path = paths.run(runNs, "own");
    const annotate = await refusal(sandbox.mergePatch(path, { metadata: { annotations: { "watchdog.dev/resume": "forged" } } }));
    expect(annotate.code).toBe(403);
    expect(annotate.message).toContain('cannot patch resource "agentruns"');
    const spec = await refusal(sandbox.mergePatch(path, { spec: { suspend: true } }));
    expect(spec.code).toBe(403);
    const run = await getRun(admin, runNs, "own");
    expect((await refusal(sandbox.request("PUT", path, { body: { ...run, spec: { ...(run as any).spec, goal: "forged" } } }))).code).toBe(403);
    expect((await refusal(sandbox.delete(path))).code).toBe(403);
    expect((await refusal(sandbox.create(paths.runs(runNs), runManifest("forged")))).code).toBe(403);

    // Through the status subresource the API server keeps only status: metadata and spec sent
    // there are dropped.
    await sandbox.mergePatch(paths.runStatus(runNs, "own"), { metadata: { annotations: { "watchdog.dev/resume": "forged" } }, spec: { suspend: true } });
    const after = await getRun(admin, runNs, "own");
    expect(after.metadata.annotations?.["watchdog.dev/resume"]).toBeUndefined();
    expect((after as any).spec.suspend).toBeUndefined();
  });

  it("is refused by the policy as well, should RBAC ever grant it more", async () => {
    const roles = `/apis/rbac.authorization.k8s.io/v1/namespaces/${runNs}`;
    await admin.create(`${roles}/roles`, {
      apiVersion: "rbac.authorization.k8s.io/v1",
      kind: "Role",
      metadata: { name: "too-generous" },
      rules: [{ apiGroups: ["watchdog.dev"], resources: ["agentruns"], verbs: ["patch", "delete"] }],
    });
    await admin.create(`${roles}/rolebindings`, {
      apiVersion: "rbac.authorization.k8s.io/v1",
      kind: "RoleBinding",
      metadata: { name: "too-generous" },
      roleRef: { apiGroup: "rbac.authorization.k8s.io", kind: "Role", name: "too-generous" },
      subjects: [{ kind: "ServiceAccount", name: NAMESPACE_SERVICE_ACCOUNT, namespace: runNs }],
    });
    try {
      const path = paths.run(runNs, "own");
      // RBAC caches settle within moments; until then the refusal is RBAC's.
      const patch = await waitFor("the policy to be what refuses a spec patch", async () => {
        const err = await refusal(sandbox.mergePatch(path, { spec: { suspend: true } }));
        return err.message.includes("ValidatingAdmissionPolicy") ? err : undefined;
      });
      expect(patch.code, patch.message).toBe(403);
      expect(patch.message).toContain("a sandbox may only update the status of its own AgentRun; UPDATE of agentruns is refused");
      const del = await refusal(sandbox.delete(path));
      expect(del.message).toContain("DELETE of agentruns is refused");
      expect((await getRun(admin, runNs, "own")).metadata.deletionTimestamp).toBeUndefined();
    } finally {
      await admin.delete(`${roles}/rolebindings/too-generous`);
      await admin.delete(`${roles}/roles/too-generous`);
    }
  });

  it("cannot heartbeat for an attempt that is not the run's current one", async () => {
    const err = await refusal(heartbeat(sandbox, "own", 2));
    expect(err.code).toBe(403);
    expect(err.message).toContain("status.heartbeat.attempt 2 is not the run's current attempt 1");
    const removal = await refusal(sandbox.mergePatch(paths.runStatus(runNs, "own"), { status: { heartbeat: null } }));
    expect(removal.message).toContain("a sandbox may not remove status.heartbeat");
  });

  it("cannot record a tool call for an attempt that is not the run's current one", async () => {
    const call = (attempt?: number) => ({ id: `c-${attempt ?? "none"}`, name: "send_email", argsHash: "h2", state: "Started", idempotent: false, ...(attempt ? { attempt } : {}) });
    const before = (await runStatus("own")).toolCalls;
    for (const record of [call(2), call()]) {
      const err = await refusal(heartbeat(sandbox, "own", 1, { toolCalls: [...before, record] }));
      expect(err.code, JSON.stringify(record)).toBe(403);
      expect(err.message).toContain("a sandbox may only add or change status.toolCalls records of the run's current attempt 1");
    }
    // Nor may it rewrite a record of its own attempt into another attempt's.
    const rewritten = before.map((c: Json) => ({ ...c, attempt: 2 }));
    expect((await refusal(heartbeat(sandbox, "own", 1, { toolCalls: rewritten }))).code).toBe(403);
    expect((await runStatus("own")).toolCalls).toEqual(before);
    await heartbeat(sandbox, "own", 1, { toolCalls: [...before, call(1)] });
    expect((await runStatus("own")).toolCalls.map((c: Json) => c.id)).toEqual([...before.map((c: Json) => c.id), "c-1"]);
  });

  it("cannot write with a token that is not bound to a pod", async () => {
    const unbound = tokenClient(await requestToken(admin, runNs, NAMESPACE_SERVICE_ACCOUNT));
    const err = await refusal(heartbeat(unbound, "own", 1));
    expect(err.code).toBe(403);
    expect(err.message).toContain("must write with the token bound to its pod");
  });

  it("may only read runs and write their status (kubectl auth can-i --list)", async () => {
    expect(await grantsOf(sandboxToken, runNs)).toEqual(
      [
        "agentruns.watchdog.dev get",
        "agentruns.watchdog.dev list",
        "agentruns.watchdog.dev watch",
        "agentruns.watchdog.dev/status get",
        "agentruns.watchdog.dev/status patch",
        "agentruns.watchdog.dev/status update",
      ].sort(),
    );
    // Nothing at all outside its namespace.
    expect(await grantsOf(sandboxToken, sysNs)).toEqual([]);
  });

  it("is fenced off once its attempt is over: a pod of an earlier attempt is refused", async () => {
    // Play the operator moving the run to attempt 2 while the old pod still exists (say its node
    // is unreachable), so that only admission, not authentication, can stop the old sandbox.
    await operator?.stop();
    operator = undefined;
    const spec = structuredClone(ownPod.spec);
    delete spec.nodeName;
    const next: any = await admin.create<any>(paths.pods(runNs), {
      apiVersion: "v1",
      kind: "Pod",
      metadata: { name: "own-2", labels: { ...ownPod.metadata.labels, "watchdog.dev/attempt": "2" } },
      spec,
    });
    // The name alone is not enough: a pod of that name from an earlier run is another pod.
    const name = (await runStatus("own")).podName;
    expect(name).toBe(ownPod.metadata.name);
    await admin.mergePatch(paths.runStatus(runNs, "own"), { status: { podUID: "00000000-0000-0000-0000-000000000000" } });
    const byUid = await refusal(heartbeat(sandbox, "own", 1));
    expect(byUid.code).toBe(403);
    expect(byUid.message).toContain(`pod ${ownPod.metadata.name} (uid ${ownPod.metadata.uid}) is not the current sandbox of AgentRun own`);
    await admin.mergePatch(paths.runStatus(runNs, "own"), { status: { phase: "Starting", attempt: 2, podName: "own-2", podUID: next.metadata.uid } });
    expect((await admin.get<any>(paths.pod(runNs, ownPod.metadata.name))).metadata.uid).toBe(ownPod.metadata.uid);

    for (const attempt of [1, 2]) {
      const err = await refusal(heartbeat(sandbox, "own", attempt));
      expect(err.code).toBe(403);
      expect(err.message).toContain(`pod ${ownPod.metadata.name} is not the current sandbox of AgentRun own (status.podName is own-2)`);
    }
    const current = tokenClient(await requestToken(admin, runNs, NAMESPACE_SERVICE_ACCOUNT, { name: "own-2", uid: next.metadata.uid }));
    const stale = await refusal(heartbeat(current, "own", 1));
    expect(stale.message).toContain("status.heartbeat.attempt 1 is not the run's current attempt 2");
    await heartbeat(current, "own", 2);
    expect((await runStatus("own")).heartbeat.attempt).toBe(2);
  });
});

describe("a sandbox with a per-run identity (sandbox.serviceAccount: run)", () => {
  let perRunNs: string;
  let perRunOperator: OperatorProcess | undefined;
  let mine: KubeClient;

  beforeAll(async () => {
    perRunNs = await restrictedNamespace(admin, "aw-fence-per-run");
    perRunOperator = await startOperator(perRunNs, ["--sandbox-service-account=run"]);
    await createRun(admin, perRunNs, runManifest("mine", WATCHDOG));
    await createRun(admin, perRunNs, runManifest("theirs", WATCHDOG));
    const podOf = async (run: string) => {
      const status = await waitFor(`${run} to get a sandbox pod`, async () => {
        const s = (await getRun(admin, perRunNs, run)).status;
        return s?.podName && s.phase === "Starting" ? s : undefined;
      });
      return admin.get<any>(paths.pod(perRunNs, status.podName));
    };
    const pod = await podOf("mine");
    await podOf("theirs");
    expect(pod.spec.serviceAccountName).toBe("mine-sandbox");
    mine = tokenClient(await requestToken(admin, perRunNs, "mine-sandbox", { name: pod.metadata.name, uid: pod.metadata.uid }));
  });

  afterAll(async () => {
    await perRunOperator?.stop();
    if (perRunNs) await admin.delete(`/api/v1/namespaces/${perRunNs}`).catch(() => {});
  });

  const selecting = (name: string) => ({ fieldSelector: `metadata.name=${name}` });

  it("reads its own run: get, and list and watch selecting its name, as the SDK does", async () => {
    expect(((await mine.get(paths.run(perRunNs, "mine"))) as any).metadata.name).toBe("mine");
    const list = await mine.get<{ items: any[] }>(paths.runs(perRunNs), selecting("mine"));
    expect(list.items.map((r) => r.metadata.name)).toEqual(["mine"]);
    const events = await mine.request<string>("GET", paths.runs(perRunNs), { query: { watch: "true", timeoutSeconds: 1, ...selecting("mine") }, text: true });
    expect(events).toContain('"name":"mine"');
  });

  it("reads no other run, and not the list of all of them", async () => {
    const requests: [string, () => Promise<unknown>][] = [
      ["get another run", () => mine.get(paths.run(perRunNs, "theirs"))],
      ["list all runs", () => mine.get(paths.runs(perRunNs))],
      ["list another run by name", () => mine.get(paths.runs(perRunNs), selecting("theirs"))],
      ["watch all runs", () => mine.request("GET", paths.runs(perRunNs), { query: { watch: "true", timeoutSeconds: 1 }, text: true })],
      ["watch another run by name", () => mine.request("GET", paths.runs(perRunNs), { query: { watch: "true", timeoutSeconds: 1, ...selecting("theirs") }, text: true })],
      ["list a run of another namespace", () => mine.get(paths.runs(runNs), selecting("own"))],
    ];
    for (const [what, request] of requests) expect((await refusal(request())).code, what).toBe(403);
  });

  it("writes only its own run's status", async () => {
    const beat = (run: string) => mine.mergePatch(paths.runStatus(perRunNs, run), { status: { heartbeat: { time: new Date().toISOString(), attempt: 1, state: "Planning" } } });
    await beat("mine");
    expect((await refusal(beat("theirs"))).code).toBe(403);
    expect((await getRun(admin, perRunNs, "theirs")).status?.heartbeat).toBeUndefined();
  });

  const withAccount = (name: string, account: string) =>
    runManifest(name, WATCHDOG, { template: { spec: { serviceAccountName: account, containers: [{ name: "agent", image: "agent-watchdog:test" }] } } });

  it("keeps the fencing for a template's own service account named *-sandbox", async () => {
    // The user's own: the operator makes no identity objects for it.
    await admin.create(`/api/v1/namespaces/${perRunNs}/serviceaccounts`, { apiVersion: "v1", kind: "ServiceAccount", metadata: { name: "chosen-sandbox" } });
    await createRun(admin, perRunNs, withAccount("chosen", "chosen-sandbox"));
    const status = await waitFor("chosen to get a sandbox pod", async () => {
      const s = (await getRun(admin, perRunNs, "chosen")).status;
      return s?.podName && s.phase === "Starting" ? s : undefined;
    });
    const pod = await admin.get<any>(paths.pod(perRunNs, status.podName));
    expect(pod.spec.serviceAccountName).toBe("chosen-sandbox");
    expect(pod.spec.automountServiceAccountToken).toBe(false);
    expect(pod.spec.volumes.some((v: any) => v.projected?.sources?.some((s: any) => s.serviceAccountToken))).toBe(true);
  });

  it("refuses a template's own service account the fencing does not apply to, before any pod, saying why", async () => {
    await createRun(admin, perRunNs, withAccount("unfenced", "default"));
    const status = await waitFor("unfenced to be refused", async () => {
      const s = (await getRun(admin, perRunNs, "unfenced")).status;
      return s?.phase === "Failed" ? s : undefined;
    });
    expect(status.reason).toBe("ServiceAccountRefused");
    expect(status.message).toContain("spec.template.spec.serviceAccountName default is refused");
    const pods = await admin.get<{ items: any[] }>(paths.pods(perRunNs), { labelSelector: "watchdog.dev/run=unfenced" });
    expect(pods.items).toEqual([]);
  });
});
