// The chart as text: helm lint, what helm template renders with the defaults and with every feature
// on, what the values schema refuses, and that the chart agrees with the operator it deploys (its
// flags parse, its defaults file is the operator's, its policy protects exactly the operator's
// status fields).
import { X509Certificate } from "node:crypto";
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { parse as parseYaml } from "yaml";
import { AgentRunSpec, AgentRunStatus, BackoffSpec, SANDBOX_STATUS_FIELDS, StallSpec, WatchdogSpec } from "../../operator/api/agentrun.ts";
import { agentRunCrd } from "../../operator/api/crd.ts";
import { LABELS } from "../../operator/api/annotations.ts";
import { EXEMPT_VALUE, podSecurityPolicySpec } from "../../operator/api/pod-security-policy.ts";
import { resolveWatchdog } from "../../operator/api/defaults.ts";
import { parseOptions } from "../../operator/cli/options.ts";
import type { Json } from "../../operator/kube/client.ts";
import { shardExpression } from "../../operator/sharding/shard-of.ts";
import { all, allFeatures, chartDir, chartFile, featureChart, find, helm, ok, render, root, tempDir, template, writeValues } from "./support.ts";

const NS = "agent-watchdog-system";
const RELEASE = "agent-watchdog";

function operatorContainer(objects: Json[]): any {
  return find(objects, "Deployment").spec.template.spec.containers[0];
}

/** The operator's options exactly as the rendered Deployment would start it. */
function optionsOf(objects: Json[]) {
  const container = operatorContainer(objects);
  expect(container.args[0]).toBe("operator");
  const dir = tempDir("defaults");
  const configMap = all(objects, "ConfigMap").find((c) => c.data?.["defaults.yaml"] !== undefined);
  const mount = container.volumeMounts.find((m: any) => m.name === "defaults");
  const flag = container.args.find((a: string) => a.startsWith("--defaults-file="));
  // The flag must point into the mounted ConfigMap; the test reads the same content from disk.
  expect(flag).toBe(`--defaults-file=${mount.mountPath}/defaults.yaml`);
  writeFileSync(join(dir, "defaults.yaml"), configMap.data["defaults.yaml"]);
  const args = container.args.slice(1).map((a: string) => (a === flag ? `--defaults-file=${join(dir, "defaults.yaml")}` : a));
  const env: NodeJS.ProcessEnv = { POD_NAME: `${RELEASE}-abc`, POD_NAMESPACE: NS };
  for (const e of container.env) {
    if (e.value !== undefined) env[e.name] = e.value;
    else if (e.name === "DATABASE_URL") env.DATABASE_URL = "postgres://ledger@postgresql:5432/watchdog";
  }
  return parseOptions(args, env);
}

describe("helm lint", () => {
  it("passes with the default values, also with --strict", async () => {
    const plain = ok(await helm(["lint", chartDir]), "helm lint");
    expect(plain.stdout).toContain("0 chart(s) failed");
    const strict = ok(await helm(["lint", "--strict", chartDir]), "helm lint --strict");
    expect(strict.stdout).toContain("0 chart(s) failed");
    expect(strict.stdout).not.toMatch(/\[(WARNING|ERROR)\]/);
  });

  it("passes with every feature on, with --strict", async () => {
    const result = ok(await helm(["lint", "--strict", featureChart(), "--values", writeValues(allFeatures("agents"))]), "helm lint --strict (all features)");
    expect(result.stdout).not.toMatch(/\[(WARNING|ERROR)\]/);
  });
});

describe("the chart's Kubernetes version constraint", () => {
  it("accepts the control plane's v1.37.2 and refuses clusters without MutatingAdmissionPolicy v1", async () => {
    ok(await template({}, { args: ["--kube-version", "v1.37.2"] }), "helm template --kube-version v1.37.2");
    ok(await template({}, { args: ["--kube-version", "v1.36.0-eks-1"] }), "helm template --kube-version v1.36.0-eks-1");
    const old = await template({}, { args: ["--kube-version", "v1.35.9"] });
    expect(old.code).not.toBe(0);
    expect(old.stderr).toMatch(/chart requires kubeVersion: >= 1\.36\.0-0 which is incompatible with Kubernetes v1\.35\.9/);
  });
});

describe("helm template with the default values", () => {
  it("renders the operator with leader election, probes, restricted security and a writable /tmp", async () => {
    const objects = await render({}, { namespace: NS });
    const deployment = find(objects, "Deployment", RELEASE);
    expect(deployment.spec.replicas).toBe(2);
    const pod = deployment.spec.template.spec;
    const c = pod.containers[0];
    expect(c.image).toBe("ghcr.io/agent-watchdog/agent-watchdog:0.1.0");
    expect(c.args).toEqual(expect.arrayContaining(["operator", "--leader-elect", "--sandbox-service-account=run"]));
    expect(c.env).toEqual(
      expect.arrayContaining([
        { name: "POD_NAME", valueFrom: { fieldRef: { fieldPath: "metadata.name" } } },
        { name: "POD_NAMESPACE", valueFrom: { fieldRef: { fieldPath: "metadata.namespace" } } },
      ]),
    );
    expect(c.env.find((e: any) => e.name === "DATABASE_URL")).toBeUndefined();
    expect(c.ports).toEqual(
      expect.arrayContaining([expect.objectContaining({ name: "metrics", containerPort: 8080 }), expect.objectContaining({ name: "health", containerPort: 8081 })]),
    );
    expect(c.livenessProbe.httpGet).toEqual({ path: "/healthz", port: "health" });
    expect(c.readinessProbe.httpGet).toEqual({ path: "/readyz", port: "health" });
    expect(c.resources.requests).toBeDefined();
    expect(c.resources.limits.memory).toBeDefined();
    expect(pod.securityContext).toMatchObject({ runAsNonRoot: true, runAsUser: 65532, seccompProfile: { type: "RuntimeDefault" } });
    expect(c.securityContext).toMatchObject({
      allowPrivilegeEscalation: false,
      readOnlyRootFilesystem: true,
      runAsNonRoot: true,
      capabilities: { drop: ["ALL"] },
      seccompProfile: { type: "RuntimeDefault" },
    });
    const tmp = c.volumeMounts.find((m: any) => m.mountPath === "/tmp");
    expect(pod.volumes.find((v: any) => v.name === tmp.name).emptyDir).toBeDefined();
    expect(pod.topologySpreadConstraints.map((t: any) => [t.topologyKey, t.whenUnsatisfiable])).toEqual([
      ["kubernetes.io/hostname", "ScheduleAnyway"],
      ["topology.kubernetes.io/zone", "ScheduleAnyway"],
    ]);
    for (const t of pod.topologySpreadConstraints) expect(t.labelSelector.matchLabels).toEqual(deployment.spec.selector.matchLabels);
    expect(pod.serviceAccountName).toBe(find(objects, "ServiceAccount").metadata.name);
  });

  it("starts the operator with flags it accepts, the built-in defaults, and the chart's sandbox ClusterRole", async () => {
    const objects = await render({}, { namespace: NS });
    const options = optionsOf(objects);
    expect(options).toMatchObject({
      leaderElect: true,
      leaderElectionNamespace: NS,
      leaderElectionId: `${RELEASE}.watchdog.dev`,
      shards: 1,
      namespaces: [],
      concurrency: 16,
      logLevel: "info",
      metricsBindAddress: ":8080",
      healthProbeBindAddress: ":8081",
      sandboxServiceAccount: "run",
      sandboxTokenExpiration: 3_600_000,
      defaults: {},
    });
    expect(options.databaseUrl).toBeUndefined();
    const sandboxRole = all(objects, "ClusterRole").find((r) => r.metadata.labels["app.kubernetes.io/component"] === "sandbox");
    expect(options.sandboxClusterRole).toBe(sandboxRole.metadata.name);
    expect(sandboxRole.metadata.name).toBe("agent-watchdog-sandbox");
    // Empty defaults: every field falls through to the built-in defaults.
    expect(find(objects, "ConfigMap", `${RELEASE}-defaults`).data["defaults.yaml"].trim()).toBe("{}");
  });

  it("renders exactly the expected objects, and none of the optional ones", async () => {
    const objects = await render({}, { namespace: NS });
    const kinds = objects.map((o) => `${o.kind}/${(o.metadata as Json).name}`).sort();
    expect(kinds).toEqual(
      [
        "APIService/v1alpha1.history.watchdog.dev",
        "ClusterRole/agent-watchdog-manager",
        "ClusterRole/agent-watchdog-nodes",
        "ClusterRole/agent-watchdog-sandbox",
        "ClusterRole/agent-watchdog-view",
        "ClusterRole/agent-watchdog-edit",
        "ClusterRole/agent-watchdog-approver",
        "ClusterRole/agent-watchdog-metrics-reader",
        "ClusterRoleBinding/agent-watchdog-auth-delegator",
        "ClusterRoleBinding/agent-watchdog-manager",
        "ClusterRoleBinding/agent-watchdog-nodes",
        "ConfigMap/agent-watchdog-defaults",
        "CustomResourceDefinition/agentruns.watchdog.dev",
        "Deployment/agent-watchdog",
        "FlowSchema/agent-watchdog-operator",
        "FlowSchema/agent-watchdog-sandboxes",
        "MutatingAdmissionPolicy/agent-watchdog-shard",
        "MutatingAdmissionPolicyBinding/agent-watchdog-shard",
        "PodDisruptionBudget/agent-watchdog",
        "PriorityLevelConfiguration/agent-watchdog-operator",
        "PriorityLevelConfiguration/agent-watchdog-sandboxes",
        "Role/agent-watchdog-leader-election",
        "Role/agent-watchdog-node-leases",
        "RoleBinding/agent-watchdog-leader-election",
        "RoleBinding/agent-watchdog-node-leases",
        "RoleBinding/agent-watchdog-auth-reader",
        "Secret/agent-watchdog-metrics-tls",
        "Service/agent-watchdog-metrics",
        "ServiceAccount/agent-watchdog",
        "ValidatingAdmissionPolicy/agent-watchdog-sandbox-fencing",
        "ValidatingAdmissionPolicyBinding/agent-watchdog-sandbox-fencing",
        "ValidatingAdmissionPolicy/agent-watchdog-approver",
        "ValidatingAdmissionPolicyBinding/agent-watchdog-approver",
        "ValidatingAdmissionPolicy/agent-watchdog-pod-security",
        "ValidatingAdmissionPolicyBinding/agent-watchdog-pod-security",
      ].sort(),
    );
    for (const o of objects) {
      const meta = o.metadata as any;
      expect(meta.labels["app.kubernetes.io/instance"], `${o.kind} ${meta.name}`).toBe(RELEASE);
      const clusterScoped = [
        "APIService",
        "ClusterRole",
        "ClusterRoleBinding",
        "CustomResourceDefinition",
        "FlowSchema",
        "MutatingAdmissionPolicy",
        "MutatingAdmissionPolicyBinding",
        "PriorityLevelConfiguration",
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding",
      ];
      // The node Leases live in kube-node-lease, the front proxy's trust is read in kube-system;
      // everything else namespaced is the release's.
      const namespace = (meta.name as string).endsWith("-node-leases") ? "kube-node-lease" : (meta.name as string).endsWith("-auth-reader") ? "kube-system" : NS;
      expect(meta.namespace, `${o.kind} ${meta.name}`).toBe(clusterScoped.includes(o.kind as string) ? undefined : namespace);
    }
    expect(find(objects, "PodDisruptionBudget").spec).toEqual({
      minAvailable: 1,
      selector: { matchLabels: find(objects, "Deployment").spec.selector.matchLabels },
    });
    expect(find(objects, "Service").spec).toMatchObject({ selector: find(objects, "Deployment").spec.selector.matchLabels, ports: [{ name: "metrics", port: 8080, targetPort: "metrics" }] });
  });

  it("gives the operator exactly the permissions it uses, and the leader election its own Role", async () => {
    const objects = await render({}, { namespace: NS });
    const manager = find(objects, "ClusterRole", `${RELEASE}-manager`);
    expect(manager.rules).toEqual([
      { apiGroups: ["watchdog.dev"], resources: ["agentruns"], verbs: ["get", "list", "watch", "patch"] },
      { apiGroups: ["watchdog.dev"], resources: ["agentruns/status"], verbs: ["get", "patch", "update"] },
      { apiGroups: ["watchdog.dev"], resources: ["agentruns/finalizers"], verbs: ["update"] },
      // patch: the shard label on the pods a run had before it was labelled.
      { apiGroups: [""], resources: ["pods"], verbs: ["get", "list", "watch", "create", "delete", "patch"] },
      { apiGroups: ["events.k8s.io"], resources: ["events"], verbs: ["create"] },
      { apiGroups: [""], resources: ["serviceaccounts"], verbs: ["create"] },
      // A ServiceAccount, Role and RoleBinding per run (sandbox.serviceAccount: run).
      { apiGroups: ["rbac.authorization.k8s.io"], resources: ["rolebindings", "roles"], verbs: ["create"] },
    ]);
    // Sharing one identity per namespace binds the sandbox ClusterRole instead, and no other.
    expect(find(await render({ sandbox: { serviceAccount: "namespace" } }, { namespace: NS }), "ClusterRole", `${RELEASE}-manager`).rules.slice(6)).toEqual([
      { apiGroups: ["rbac.authorization.k8s.io"], resources: ["rolebindings"], verbs: ["create"] },
      { apiGroups: ["rbac.authorization.k8s.io"], resources: ["clusterroles"], verbs: ["bind"], resourceNames: [`${RELEASE}-sandbox`] },
    ]);
    const binding = find(objects, "ClusterRoleBinding", `${RELEASE}-manager`);
    expect(binding.roleRef).toEqual({ apiGroup: "rbac.authorization.k8s.io", kind: "ClusterRole", name: `${RELEASE}-manager` });
    expect(binding.subjects).toEqual([{ kind: "ServiceAccount", name: RELEASE, namespace: NS }]);
    const leader = find(objects, "Role", `${RELEASE}-leader-election`);
    expect(leader.metadata.namespace).toBe(NS);
    // list: replicas find the shard and membership Leases by label.
    expect(leader.rules).toEqual([
      { apiGroups: ["coordination.k8s.io"], resources: ["leases"], verbs: ["get", "list", "create", "update"] },
      { apiGroups: ["events.k8s.io"], resources: ["events"], verbs: ["create"] },
    ]);
    expect(find(objects, "ClusterRole", `${RELEASE}-sandbox`).rules).toEqual([
      { apiGroups: ["watchdog.dev"], resources: ["agentruns"], verbs: ["get", "list", "watch"] },
      { apiGroups: ["watchdog.dev"], resources: ["agentruns/status"], verbs: ["get", "patch", "update"] },
    ]);
  });

  it("keeps the sandboxes' priority level to its own seats, and the operator's lending none", async () => {
    const objects = await render({}, { namespace: NS });
    const sandboxes = find(objects, "PriorityLevelConfiguration", "agent-watchdog-sandboxes").spec.limited;
    expect(sandboxes).toMatchObject({ nominalConcurrencyShares: 10, borrowingLimitPercent: 0 });
    expect(sandboxes.limitResponse).toEqual({ type: "Queue", queuing: { queues: 64, handSize: 6, queueLengthLimit: 50 } });
    expect(find(objects, "PriorityLevelConfiguration", "agent-watchdog-operator").spec.limited).toMatchObject({ nominalConcurrencyShares: 40, lendablePercent: 0 });
    const raised = await render({ apiPriority: { sandboxes: { nominalConcurrencyShares: 20, borrowingLimitPercent: 50 } } }, { namespace: NS });
    expect(find(raised, "PriorityLevelConfiguration", "agent-watchdog-sandboxes").spec.limited).toMatchObject({ nominalConcurrencyShares: 20, borrowingLimitPercent: 50 });
  });

  it("templates the repository's CRD, kept on uninstall", async () => {
    const crd = find(await render({}, { namespace: NS }), "CustomResourceDefinition");
    const source = agentRunCrd() as any;
    expect(crd.spec).toEqual(source.spec);
    expect(crd.metadata.name).toBe(source.metadata.name);
    expect(crd.metadata.annotations).toEqual({ "helm.sh/resource-policy": "keep" });
    // crds/ holds the same CRD, for users who manage it with kubectl.
    expect(parseYaml(readFileSync(join(root, "crds/watchdog.dev_agentruns.yaml"), "utf8")).spec).toEqual(source.spec);
  });

  it("fences sandbox writes by admission, failing closed", async () => {
    const objects = await render({}, { namespace: NS });
    const policy = find(objects, "ValidatingAdmissionPolicy", `${RELEASE}-sandbox-fencing`);
    expect(policy.spec.failurePolicy).toBe("Fail");
    expect(policy.spec.matchConstraints.resourceRules[0]).toMatchObject({ apiGroups: ["watchdog.dev"], resources: ["agentruns", "agentruns/status"] });
    expect(policy.spec.matchConditions[0].expression).toContain("-sandbox$");
    const binding = find(objects, "ValidatingAdmissionPolicyBinding", `${RELEASE}-sandbox-fencing`);
    expect(binding.spec).toEqual({ policyName: policy.metadata.name, validationActions: ["Deny"] });
  });

  it("protects exactly the operator's status fields: every status field but heartbeat, toolCalls and checkpoint", async () => {
    const policy = find(await render({}, { namespace: NS }), "ValidatingAdmissionPolicy", `${RELEASE}-sandbox-fencing`);
    const expression: string = policy.spec.variables.find((v: any) => v.name === "changedOperatorFields").expression;
    const guarded = [...expression.matchAll(/\['([A-Za-z]+)'\]/g)].map((m) => m[1]).sort();
    const sandbox: readonly string[] = SANDBOX_STATUS_FIELDS;
    expect(sandbox).toEqual(["heartbeat", "toolCalls", "checkpoint"]);
    expect(guarded).toEqual(Object.keys(AgentRunStatus.shape).filter((f) => !sandbox.includes(f)).sort());
    for (const field of guarded) expect(expression).toContain(`object.?status.?${field} == oldObject.?status.?${field}`);
    const messages = policy.spec.validations.map((v: any) => v.message ?? v.messageExpression).join("\n");
    expect(messages).toContain("status.heartbeat, status.toolCalls and status.checkpoint");
  });
});

describe("helm template with every feature on", () => {
  it("renders the ServiceMonitor, PrometheusRule, dashboard, NetworkPolicy, namespaced RBAC, ledger secret and defaults", async () => {
    const chart = featureChart();
    const objects = await render(allFeatures("agents"), { chart, namespace: NS });
    const deploymentLabels = find(objects, "Deployment").spec.selector.matchLabels;

    const monitor = find(objects, "ServiceMonitor");
    expect(monitor.metadata.labels.release).toBe("prometheus");
    expect(find(objects, "Service").metadata.labels).toMatchObject(monitor.spec.selector.matchLabels);
    // honorLabels: the `namespace` of the spending series and of a run waiting for a person is the run's.
    expect(monitor.spec.endpoints).toEqual([expect.objectContaining({ port: "metrics", path: "/metrics", honorLabels: true })]);
    expect(monitor.spec.namespaceSelector).toEqual({ matchNames: [NS] });
    // The alerts select job=~".*agent-watchdog.*"; the job comes from this Service label.
    expect(find(objects, "Service").metadata.labels[monitor.spec.jobLabel]).toBe("agent-watchdog");

    const rule = find(objects, "PrometheusRule");
    expect(rule.metadata.labels.release).toBe("prometheus");
    expect(rule.spec.groups).toEqual(parseYaml(chartFile(chart, "files/prometheus-rules.yaml")).groups);
    expect(rule.spec.groups.length).toBeGreaterThan(0);

    const dashboard = find(objects, "ConfigMap", `${RELEASE}-dashboard`);
    expect(dashboard.metadata.labels.grafana_dashboard).toBe("1");
    expect(dashboard.metadata.annotations).toEqual({ grafana_folder: "Agents" });
    expect(dashboard.data["agent-watchdog.json"]).toBe(chartFile(chart, "files/dashboard.json"));
    JSON.parse(dashboard.data["agent-watchdog.json"]);

    const policy = find(objects, "NetworkPolicy");
    expect(policy.spec.podSelector.matchLabels).toEqual(deploymentLabels);
    expect(policy.spec.policyTypes).toEqual(["Ingress", "Egress"]);
    expect(policy.spec.ingress).toEqual([
      {
        from: [{ namespaceSelector: { matchLabels: { "kubernetes.io/metadata.name": "monitoring" } } }],
        ports: [
          { port: "metrics", protocol: "TCP" },
          { port: "health", protocol: "TCP" },
        ],
      },
    ]);
    const egressPorts = policy.spec.egress.map((r: any) => r.ports.map((p: any) => `${p.port}/${p.protocol}`).join(","));
    expect(egressPorts).toEqual(["443/TCP,6443/TCP", "53/UDP,53/TCP", "5432/TCP"]);
    expect(policy.spec.egress[0].to).toEqual([{ ipBlock: { cidr: "10.0.0.1/32" } }]);
    expect(policy.spec.egress[2].to).toEqual([{ podSelector: { matchLabels: { app: "postgresql" } } }]);

    // Watching one namespace: a Role there instead of the ClusterRole; sandboxes still need theirs,
    // and confirming a sandbox gone needs reading nodes, which are cluster-wide.
    expect(find(objects, "ClusterRole", `${RELEASE}-manager`)).toBeUndefined();
    expect(find(objects, "ClusterRoleBinding", `${RELEASE}-manager`)).toBeUndefined();
    expect(find(objects, "ClusterRole", `${RELEASE}-nodes`).rules).toEqual([{ apiGroups: [""], resources: ["nodes"], verbs: ["get", "list", "watch"] }]);
    const role = find(objects, "Role", `${RELEASE}-manager`);
    expect(role.metadata.namespace).toBe("agents");
    expect(role.rules).toEqual(find(await render({}, { namespace: NS }), "ClusterRole", `${RELEASE}-manager`).rules);
    expect(find(objects, "RoleBinding", `${RELEASE}-manager`)).toMatchObject({ metadata: { namespace: "agents" }, roleRef: { kind: "Role", name: `${RELEASE}-manager` } });
    expect(find(objects, "ClusterRole", `${RELEASE}-sandbox`)).toBeDefined();
    expect(find(objects, "ValidatingAdmissionPolicy")).toBeDefined();

    expect(operatorContainer(objects).env).toContainEqual({ name: "DATABASE_URL", valueFrom: { secretKeyRef: { name: "ledger-db", key: "url" } } });
    // The URL carries the password: never in args (not even as $(DATABASE_URL), which the kubelet
    // expands), since ps on the node shows them to every user.
    expect(operatorContainer(objects).args.filter((arg: string) => /database.url|postgres/i.test(arg))).toEqual([]);
  });

  it("turns traces on with an OTLP endpoint: the operator's OTEL_* environment, its headers from a Secret, and egress to the collector", async () => {
    expect(JSON.stringify(operatorContainer(await render({}, { namespace: NS })).env)).not.toContain("OTEL_");
    const objects = await render(
      {
        tracing: { otlpEndpoint: "http://otel-collector.observability:4318", headersSecret: { name: "otlp-auth" } },
        networkPolicy: { enabled: true, egress: { otlp: { to: [{ namespaceSelector: { matchLabels: { "kubernetes.io/metadata.name": "observability" } } }] } } },
      },
      { namespace: NS },
    );
    const env = operatorContainer(objects).env;
    expect(env).toContainEqual({ name: "OTEL_EXPORTER_OTLP_ENDPOINT", value: "http://otel-collector.observability:4318" });
    expect(env).toContainEqual({ name: "OTEL_SERVICE_NAME", value: "agent-watchdog" });
    expect(env).toContainEqual({ name: "OTEL_EXPORTER_OTLP_HEADERS", valueFrom: { secretKeyRef: { name: "otlp-auth", key: "OTEL_EXPORTER_OTLP_HEADERS" } } });
    const egress = find(objects, "NetworkPolicy").spec.egress;
    expect(egress.at(-1)).toEqual({ ports: [{ port: 4318, protocol: "TCP" }], to: [{ namespaceSelector: { matchLabels: { "kubernetes.io/metadata.name": "observability" } } }] });
    await expect(render({ tracing: { otlpEndpoint: "collector:4318" } }, { namespace: NS })).rejects.toThrow(/otlpEndpoint/);
  });

  it("hands the watchdog defaults to the operator in the shape of spec.watchdog, false and 0 included", async () => {
    const values = allFeatures("agents");
    const objects = await render(values, { chart: featureChart(), namespace: NS });
    const options = optionsOf(objects);
    expect(options.namespaces).toEqual(["agents"]);
    expect(options.databaseUrl).toBe("postgres://ledger@postgresql:5432/watchdog");
    expect(options.defaults).toEqual((values.watchdog as any).defaults);
    // A run's own spec.watchdog still wins field by field.
    const effective = resolveWatchdog({ heartbeatTimeout: "2m", backoff: { max: "1m" } }, options.defaults);
    expect(effective).toMatchObject({
      heartbeatTimeout: "2m",
      maxRestarts: 0,
      backoff: { initial: "30s", factor: 1.5, max: "1m" },
      stall: { enabled: false, timeout: "1m", maxNudges: 2, message: "Are you still there?" },
      approvalTimeout: "24h",
    });
  });

  it("rolls the operator's pods when the defaults change, and only then", async () => {
    const checksum = async (values: Json) => find(await render(values, { namespace: NS }), "Deployment").spec.template.metadata.annotations["checksum/defaults"];
    const none = await checksum({});
    expect(await checksum({ logLevel: "debug" })).toBe(none);
    const one = await checksum({ watchdog: { defaults: { heartbeatTimeout: "90s" } } });
    expect(one).not.toBe(none);
    expect(await checksum({ watchdog: { defaults: { heartbeatTimeout: "2m" } } })).not.toBe(one);
  });

  it("ships roles for people: view and edit aggregated into Kubernetes' own, and an approver held to answers by admission", async () => {
    const objects = await render({}, { namespace: NS });
    const labels = (name: string) => find(objects, "ClusterRole", `${RELEASE}-${name}`).metadata.labels;
    const aggregate = (name: string) =>
      Object.keys(labels(name))
        .filter((k) => k.startsWith("rbac.authorization.k8s.io/aggregate-to-"))
        .sort();
    expect(aggregate("view")).toEqual(["admin", "edit", "view"].map((r) => `rbac.authorization.k8s.io/aggregate-to-${r}`));
    expect(aggregate("edit")).toEqual(["admin", "edit"].map((r) => `rbac.authorization.k8s.io/aggregate-to-${r}`));
    expect(aggregate("approver")).toEqual([]);
    // Whoever may read a run may read its history through the API server.
    const history = { apiGroups: ["history.watchdog.dev"], resources: ["agentrunhistories"], verbs: ["get"] };
    expect(find(objects, "ClusterRole", `${RELEASE}-view`).rules).toEqual([{ apiGroups: ["watchdog.dev"], resources: ["agentruns", "agentruns/status"], verbs: ["get", "list", "watch"] }, history]);
    expect(find(objects, "ClusterRole", `${RELEASE}-approver`).rules).toEqual([
      { apiGroups: ["watchdog.dev"], resources: ["agentruns", "agentruns/status"], verbs: ["get", "list", "watch"] },
      history,
      { apiGroups: ["watchdog.dev"], resources: ["agentruns"], verbs: ["patch", "answer"] },
    ]);
    const policy = find(objects, "ValidatingAdmissionPolicy", `${RELEASE}-approver`);
    expect(policy.spec.failurePolicy).toBe("Fail");
    expect(policy.spec.matchConstraints.resourceRules).toEqual([{ apiGroups: ["watchdog.dev"], apiVersions: ["*"], operations: ["UPDATE"], resources: ["agentruns"] }]);
    expect(policy.spec.matchConditions[0].expression).toContain("check('answer')");
    // Every spec field is compared, so a new one is covered once the chart is regenerated.
    const changed: string = policy.spec.variables.find((v: any) => v.name === "changed").expression;
    for (const field of Object.keys(AgentRunSpec.shape)) expect(changed).toContain(`object.spec.?${field} == oldObject.spec.?${field}`);
    expect(find(objects, "ValidatingAdmissionPolicyBinding", `${RELEASE}-approver`).spec).toEqual({ policyName: policy.metadata.name, validationActions: ["Deny"] });

    const none = await render({ rbac: { userRoles: false } });
    expect(all(none, "ClusterRole").map((r) => r.metadata.name)).not.toContain(`${RELEASE}-approver`);
    expect(find(none, "ValidatingAdmissionPolicy", `${RELEASE}-approver`)).toBeUndefined();
    expect(Object.keys(find(await render({ rbac: { aggregateToDefaultRoles: false } }), "ClusterRole", `${RELEASE}-view`).metadata.labels).some((k) => k.includes("aggregate-to"))).toBe(false);
    expect(find(await render({ admission: { approver: { enabled: false } } }), "ValidatingAdmissionPolicy", `${RELEASE}-approver`)).toBeUndefined();
  });

  it("refuses runs whose sandbox pod breaks the restricted profile, judging creates and template changes only, in the watched namespaces but the exempt ones", async () => {
    const objects = await render({}, { namespace: NS });
    const policy = find(objects, "ValidatingAdmissionPolicy", `${RELEASE}-pod-security`);
    expect(policy.spec).toEqual(podSecurityPolicySpec());
    expect(policy.spec.failurePolicy).toBe("Fail");
    // The main resource only, never status: the operator's status writes are not judged.
    expect(policy.spec.matchConstraints.resourceRules).toEqual([{ apiGroups: ["watchdog.dev"], apiVersions: ["*"], operations: ["CREATE", "UPDATE"], resources: ["agentruns"] }]);
    expect(policy.spec.matchConditions).toEqual([{ name: "template-changed", expression: "oldObject == null || object.spec.template != oldObject.spec.template" }]);
    for (const v of policy.spec.validations) {
      expect(v.reason).toBe("Forbidden");
      expect(v.messageExpression).toContain("breaks the restricted Pod Security profile");
      expect(v.messageExpression).toContain(`list it in the chart value ${EXEMPT_VALUE}`);
    }
    // A binding of its own, cluster-wide when the operator watches every namespace.
    expect(find(objects, "ValidatingAdmissionPolicyBinding", `${RELEASE}-pod-security`).spec).toEqual({ policyName: policy.metadata.name, validationActions: ["Deny"] });

    const selector = async (values: Json) => find(await render(values), "ValidatingAdmissionPolicyBinding", `${RELEASE}-pod-security`).spec.matchResources;
    const name = "kubernetes.io/metadata.name";
    expect(await selector({ admission: { podSecurity: { exemptNamespaces: ["lab"] } } })).toEqual({
      namespaceSelector: { matchExpressions: [{ key: name, operator: "NotIn", values: ["lab"] }] },
    });
    // Several releases share a cluster: one judges only the namespaces it watches.
    expect(await selector({ watchNamespaces: ["agents", "lab"] })).toEqual({ namespaceSelector: { matchExpressions: [{ key: name, operator: "In", values: ["agents", "lab"] }] } });
    expect(await selector({ watchNamespaces: ["agents", "lab"], admission: { podSecurity: { exemptNamespaces: ["lab"] } } })).toEqual({
      namespaceSelector: {
        matchExpressions: [
          { key: name, operator: "In", values: ["agents", "lab"] },
          { key: name, operator: "NotIn", values: ["lab"] },
        ],
      },
    });

    const off = await render({ admission: { podSecurity: { enabled: false } } });
    expect(find(off, "ValidatingAdmissionPolicy", `${RELEASE}-pod-security`)).toBeUndefined();
    expect(find(off, "ValidatingAdmissionPolicyBinding", `${RELEASE}-pod-security`)).toBeUndefined();
    expect(find(off, "ValidatingAdmissionPolicy", `${RELEASE}-sandbox-fencing`)).toBeDefined();
  });

  it("follows the switches: CRD off or not kept, fencing off, sandbox modes, image digest", async () => {
    expect(find(await render({ crds: { enabled: false } }), "CustomResourceDefinition")).toBeUndefined();
    expect(find(await render({ crds: { keep: false } }), "CustomResourceDefinition").metadata.annotations).toBeUndefined();
    const unfenced = await render({ admission: { fencing: { enabled: false } } });
    expect(find(unfenced, "ValidatingAdmissionPolicy", `${RELEASE}-sandbox-fencing`)).toBeUndefined();
    expect(find(unfenced, "ValidatingAdmissionPolicyBinding", `${RELEASE}-sandbox-fencing`)).toBeUndefined();
    expect(find(unfenced, "ValidatingAdmissionPolicy", `${RELEASE}-approver`)).toBeDefined();
    expect(find(await render({ admission: { fencing: { validationActions: ["Warn", "Audit"] } } }), "ValidatingAdmissionPolicyBinding", `${RELEASE}-sandbox-fencing`).spec.validationActions).toEqual([
      "Warn",
      "Audit",
    ]);

    const rbacOf = (objects: Json[]) => find(objects, "ClusterRole", `${RELEASE}-manager`).rules.map((r: any) => `${r.resources.join("+")}:${r.verbs.join("+")}`);
    const none = await render({ sandbox: { serviceAccount: "none" } });
    expect(operatorContainer(none).args).toContain("--sandbox-service-account=none");
    expect(rbacOf(none).filter((r: string) => /serviceaccounts|roles|bind/.test(r))).toEqual([]);
    const perRun = await render({ sandbox: { serviceAccount: "run", tokenExpiration: "30m" } });
    expect(operatorContainer(perRun).args).toEqual(expect.arrayContaining(["--sandbox-service-account=run", "--sandbox-token-expiration=30m"]));
    expect(rbacOf(perRun)).toEqual(expect.arrayContaining(["serviceaccounts:create", "rolebindings+roles:create"]));
    expect(rbacOf(perRun).filter((r: string) => r.endsWith(":bind"))).toEqual([]);

    const digest = "sha256:" + "a".repeat(64);
    expect(operatorContainer(await render({ image: { digest } })).image).toBe(`ghcr.io/agent-watchdog/agent-watchdog@${digest}`);
    expect(operatorContainer(await render({ image: { tag: "0.2.0" } })).image).toBe("ghcr.io/agent-watchdog/agent-watchdog:0.2.0");
    const single = await render({ replicaCount: 1, leaderElection: { enabled: false } });
    expect(find(single, "PodDisruptionBudget")).toBeUndefined();
    expect(find(single, "Role", `${RELEASE}-leader-election`)).toBeUndefined();
    expect(operatorContainer(single).args).not.toContain("--leader-elect");
  });

  it("names every object after the release, so two releases can share a cluster", async () => {
    const objects = await render({}, { release: "team-a", namespace: "team-a" });
    expect(all(objects, "ValidatingAdmissionPolicy").map((p) => p.metadata.name).sort()).toEqual([
      "team-a-agent-watchdog-approver",
      "team-a-agent-watchdog-pod-security",
      "team-a-agent-watchdog-sandbox-fencing",
    ]);
    for (const role of ["sandbox", "view", "edit", "approver"]) expect(find(objects, "ClusterRole", `team-a-agent-watchdog-${role}`), role).toBeDefined();
    expect(optionsOf(objects)).toMatchObject({ sandboxClusterRole: "team-a-agent-watchdog-sandbox", leaderElectionId: "team-a-agent-watchdog.watchdog.dev" });
    expect(all(objects, "MutatingAdmissionPolicy").map((p) => p.metadata.name)).toEqual(["team-a-agent-watchdog-shard"]);
    expect(find(objects, "MutatingAdmissionPolicyBinding", "team-a-agent-watchdog-shard").spec.policyName).toBe("team-a-agent-watchdog-shard");
  });
});

describe("helm template with secure metrics serving", () => {
  it("serves the metrics port over HTTPS with a generated certificate, and /metrics only to callers with get /metrics", async () => {
    const objects = await render({ metrics: { secure: true, tls: { enabled: true }, serviceMonitor: { enabled: true } } }, { namespace: NS });
    const container = operatorContainer(objects);
    expect(container.args).toEqual(expect.arrayContaining(["--metrics-secure", "--tls-cert-file=/etc/agent-watchdog/tls/tls.crt", "--tls-private-key-file=/etc/agent-watchdog/tls/tls.key"]));
    expect(optionsOf(objects)).toMatchObject({ metricsSecure: true, tlsCertFile: "/etc/agent-watchdog/tls/tls.crt", tlsPrivateKeyFile: "/etc/agent-watchdog/tls/tls.key" });
    const secret = find(objects, "Secret", `${RELEASE}-metrics-tls`);
    expect(secret.type).toBe("kubernetes.io/tls");
    const pem = (key: string) => Buffer.from(secret.data[key], "base64").toString();
    expect(pem("tls.crt")).toContain("BEGIN CERTIFICATE");
    expect(pem("tls.key")).toContain("PRIVATE KEY");
    const cert = new X509Certificate(pem("tls.crt"));
    expect(cert.subjectAltName).toContain(`DNS:${RELEASE}-metrics.${NS}.svc`);
    expect(cert.verify(new X509Certificate(pem("ca.crt")).publicKey)).toBe(true);
    const volume = find(objects, "Deployment").spec.template.spec.volumes.find((v: any) => v.name === "metrics-tls");
    expect(volume.secret.secretName).toBe(`${RELEASE}-metrics-tls`);
    expect(container.volumeMounts).toContainEqual({ name: "metrics-tls", mountPath: "/etc/agent-watchdog/tls", readOnly: true });

    const endpoint = find(objects, "ServiceMonitor").spec.endpoints[0];
    expect(endpoint).toMatchObject({ scheme: "https", bearerTokenFile: "/var/run/secrets/kubernetes.io/serviceaccount/token", tlsConfig: { serverName: `${RELEASE}-metrics.${NS}.svc`, ca: { secret: { name: `${RELEASE}-metrics-tls`, key: "ca.crt" } } } });
    expect(find(objects, "ClusterRole", `${RELEASE}-metrics-reader`).rules).toEqual([{ nonResourceURLs: ["/metrics"], verbs: ["get"] }]);
  });

  it("registers the history's APIService on the metrics Service, trusted through the certificate's CA", async () => {
    const objects = await render({}, { namespace: NS });
    const apiService = find(objects, "APIService", "v1alpha1.history.watchdog.dev");
    const secret = find(objects, "Secret", `${RELEASE}-metrics-tls`);
    expect(apiService.spec).toEqual({
      group: "history.watchdog.dev",
      version: "v1alpha1",
      groupPriorityMinimum: 1000,
      versionPriority: 15,
      service: { name: `${RELEASE}-metrics`, namespace: NS, port: 8080 },
      caBundle: secret.data["ca.crt"],
    });
    const reader = find(objects, "RoleBinding", `${RELEASE}-auth-reader`);
    expect(reader.metadata.namespace).toBe("kube-system");
    expect(reader.roleRef).toEqual({ apiGroup: "rbac.authorization.k8s.io", kind: "Role", name: "extension-apiserver-authentication-reader" });
    expect(reader.subjects).toEqual([{ kind: "ServiceAccount", name: RELEASE, namespace: NS }]);
    // Off, it leaves nothing behind; with a Secret of the user's own, the CA is given or injected.
    const off = await render({ history: { apiService: { enabled: false } } }, { namespace: NS });
    expect(find(off, "APIService")).toBeUndefined();
    expect(find(off, "RoleBinding", `${RELEASE}-auth-reader`)).toBeUndefined();
    const injected = await render({ metrics: { tls: { secretName: "mine" } }, history: { apiService: { annotations: { "cert-manager.io/inject-ca-from": `${NS}/metrics` } } } }, { namespace: NS });
    expect(find(injected, "APIService").metadata.annotations).toEqual({ "cert-manager.io/inject-ca-from": `${NS}/metrics` });
    expect(find(injected, "APIService").spec.caBundle).toBeUndefined();
  });

  it("uses a Secret of the user's own, and always lets the operator ask the API server who may read what", async () => {
    const caBundle = Buffer.from("-----BEGIN CERTIFICATE-----\n-----END CERTIFICATE-----\n").toString("base64");
    const objects = await render({ metrics: { tls: { enabled: true, secretName: "metrics-cert" } }, history: { apiService: { caBundle } } }, { namespace: NS });
    expect(find(objects, "APIService").spec.caBundle).toBe(caBundle);
    expect(all(objects, "Secret").filter((s) => s.metadata.name.endsWith("-metrics-tls"))).toEqual([]);
    expect(find(objects, "Deployment").spec.template.spec.volumes.find((v: any) => v.name === "metrics-tls").secret.secretName).toBe("metrics-cert");
    expect(operatorContainer(objects).args).not.toContain("--metrics-secure");
    for (const values of [{}, { watchNamespaces: ["agents"] }]) {
      const binding = find(await render(values, { namespace: NS }), "ClusterRoleBinding", `${RELEASE}-auth-delegator`);
      expect(binding.roleRef).toEqual({ apiGroup: "rbac.authorization.k8s.io", kind: "ClusterRole", name: "system:auth-delegator" });
      expect(binding.subjects).toEqual([{ kind: "ServiceAccount", name: RELEASE, namespace: NS }]);
    }
  });
});

describe("helm template with sharding", () => {
  it("stamps each run's shard at admission: agentruns only, never status, only named objects, the operator's shardOf in CEL", async () => {
    for (const shards of [1, 3, 256]) {
      const objects = await render(shards === 1 ? {} : { sharding: { shards } }, { namespace: NS });
      const policy = find(objects, "MutatingAdmissionPolicy", `${RELEASE}-shard`);
      expect(policy.apiVersion).toBe("admissionregistration.k8s.io/v1");
      expect(policy.metadata.labels).toMatchObject({ "app.kubernetes.io/instance": RELEASE, "app.kubernetes.io/component": "admission" });
      // A policy error never refuses a user's apply: the operator labels what the policy did not.
      expect(policy.spec.failurePolicy).toBe("Ignore");
      expect(policy.spec.reinvocationPolicy).toBe("Never");
      // Heartbeats (agentruns/status) never pay for the policy.
      expect(policy.spec.matchConstraints).toEqual({ resourceRules: [{ apiGroups: ["watchdog.dev"], apiVersions: ["*"], operations: ["CREATE", "UPDATE"], resources: ["agentruns"] }] });
      expect(policy.spec.matchConditions).toEqual([{ name: "named", expression: "has(object.metadata.name) && object.metadata.name != ''" }]);
      const variable = (name: string): string => policy.spec.variables.find((v: any) => v.name === name).expression;
      const key = variable("key");
      expect(key).toBe("request.namespace + '/' + object.metadata.name");
      // The same hash as the operator's, over the same key, modulo this install's count.
      const inlined = variable("shard").replace("size(variables.key)", `size(${key})`).replace("variables.key.charAt(i)", `(${key}).charAt(i)`);
      expect(inlined).toBe(shardExpression(shards));
      expect(policy.spec.mutations).toHaveLength(1);
      expect(policy.spec.mutations[0].patchType).toBe("ApplyConfiguration");
      // Immutable: the old object's label wins over the computed one.
      expect(policy.spec.mutations[0].applyConfiguration.expression.trim()).toBe(
        `Object{metadata: Object.metadata{labels: {"${LABELS.shard}": oldObject != null && has(oldObject.metadata.labels) && '${LABELS.shard}' in oldObject.metadata.labels ? oldObject.metadata.labels['${LABELS.shard}'] : variables.shard}}}`,
      );
      const binding = find(objects, "MutatingAdmissionPolicyBinding", `${RELEASE}-shard`);
      expect(binding.metadata.labels).toMatchObject({ "app.kubernetes.io/instance": RELEASE, "app.kubernetes.io/component": "admission" });
      expect(binding.spec).toEqual({ policyName: policy.metadata.name });

      // The operator gets the same count.
      expect(operatorContainer(objects).args).toContain(`--shards=${shards}`);
      expect(optionsOf(objects).shards).toBe(shards);
    }
  });

  it("binds the policy to the watched namespaces only, when there are some", async () => {
    const objects = await render({ watchNamespaces: ["agents", "lab"], sharding: { shards: 4 } }, { namespace: NS });
    expect(find(objects, "MutatingAdmissionPolicyBinding", `${RELEASE}-shard`).spec).toEqual({
      policyName: `${RELEASE}-shard`,
      matchResources: { namespaceSelector: { matchExpressions: [{ key: "kubernetes.io/metadata.name", operator: "In", values: ["agents", "lab"] }] } },
    });
  });

  it("lets the replicas list their Leases, and the operator label runs and pods", async () => {
    const objects = await render({ sharding: { shards: 8 }, replicaCount: 3 }, { namespace: NS });
    expect(find(objects, "Role", `${RELEASE}-leader-election`).rules[0]).toEqual({ apiGroups: ["coordination.k8s.io"], resources: ["leases"], verbs: ["get", "list", "create", "update"] });
    const verbs = (resource: string): string[] => find(objects, "ClusterRole", `${RELEASE}-manager`).rules.find((r: any) => r.resources.includes(resource)).verbs;
    expect(verbs("agentruns")).toContain("patch");
    expect(verbs("pods")).toContain("patch");
    expect(ok(await helm(["lint", "--strict", chartDir, "--values", writeValues({ sharding: { shards: 8 }, replicaCount: 3 })]), "helm lint --strict (sharded)").stdout).not.toMatch(
      /\[(WARNING|ERROR)\]/,
    );
  });
});

describe("the values schema and the templates refuse bad values with a clear message", () => {
  const cases: [string, Json, string[], RegExp][] = [
    ["a duration in words", { watchdog: { defaults: { heartbeatTimeout: "five minutes" } } }, [], /\/watchdog\/defaults\/heartbeatTimeout.*does not match pattern/],
    ["a number of replicas in words", {}, ["--set-string", "replicaCount=two"], /\/replicaCount.*got string, want integer/],
    ["an unknown value", { replicas: 2 }, [], /additional properties 'replicas' not allowed/],
    ["an unknown watchdog default", { watchdog: { defaults: { heartbeatTimout: "5m" } } }, [], /\/watchdog\/defaults.*additional properties 'heartbeatTimout' not allowed/],
    ["an unknown sandbox mode", { sandbox: { serviceAccount: "pod" } }, [], /\/sandbox\/serviceAccount.*value must be one of 'namespace', 'run', 'none'/],
    ["an unknown log level", { logLevel: "verbose" }, [], /\/logLevel.*value must be one of/],
    ["a factor below one", { watchdog: { defaults: { backoff: { factor: 0.5 } } } }, [], /\/watchdog\/defaults\/backoff\/factor.*minimum/],
    ["a token shorter than the API server allows", { sandbox: { tokenExpiration: "5m" } }, [], /\/sandbox\/tokenExpiration.*does not match pattern/],
    ["a zero duration", { watchdog: { defaults: { stall: { timeout: "0s" } } } }, [], /watchdog\.defaults\.stall\.timeout: must be a positive duration/],
    ["a bad validation action", { admission: { fencing: { validationActions: ["Reject"] } } }, [], /\/admission\/fencing\/validationActions\/0.*value must be one of/],
    ["an exempt namespace that is no name", { admission: { podSecurity: { exemptNamespaces: [""] } } }, [], /\/admission\/podSecurity\/exemptNamespaces\/0.*minLength/],
    ["replicas without leader election", { leaderElection: { enabled: false } }, [], /replicaCount > 1 needs leaderElection\.enabled/],
    ["shards without leader election", { replicaCount: 1, leaderElection: { enabled: false }, sharding: { shards: 2 } }, [], /sharding\.shards > 1 needs leaderElection\.enabled/],
    ["no shard at all", { sharding: { shards: 0 } }, [], /\/sharding\/shards.*minimum/],
    ["more shards than the operator takes", { sharding: { shards: 257 } }, [], /\/sharding\/shards.*maximum/],
    ["a fraction of a shard", { sharding: { shards: 2.5 } }, [], /\/sharding\/shards.*want integer/],
    ["shard Lease names longer than the API server allows", { sharding: { shards: 4 }, leaderElection: { id: "a".repeat(234) } }, [], /leader election id "a+" is 234 characters, at most 233/],
    ["the history API over plain HTTP", { metrics: { tls: { enabled: false } } }, [], /history\.apiService\.enabled needs metrics\.tls\.enabled/],
    ["the history API with no CA to trust it by", { metrics: { tls: { secretName: "mine" } } }, [], /history\.apiService: no CA to trust the operator with; put ca\.crt in the Secret mine, set history\.apiService\.caBundle/],
    ["an operator ServiceAccount that looks like a sandbox", { serviceAccount: { name: "ops-sandbox" } }, [], /ends in -sandbox, which marks sandbox identities/],
    ["sandboxes' FlowSchema matched before the operator's", { apiPriority: { operator: { matchingPrecedence: 900 } } }, [], /apiPriority\.operator\.matchingPrecedence \(900\) must be below apiPriority\.sandboxes\.matchingPrecedence \(850\)/],
    ["a priority level with no share", { apiPriority: { sandboxes: { nominalConcurrencyShares: 0 } } }, [], /\/apiPriority\/sandboxes\/nominalConcurrencyShares.*minimum/],
    ["a negative borrowing limit", { apiPriority: { sandboxes: { borrowingLimitPercent: -1 } } }, [], /\/apiPriority\/sandboxes\/borrowingLimitPercent.*minimum/],
  ];
  for (const [what, values, args, message] of cases) {
    it(`refuses ${what}`, async () => {
      const result = await template(values, { args });
      expect(result.code, result.stdout.slice(0, 200)).not.toBe(0);
      expect(result.stderr).toMatch(message);
    });
  }
});

describe("the chart stays in step with the operator and its own documentation", () => {
  const values = parseYaml(readFileSync(join(chartDir, "values.yaml"), "utf8"));
  const schema = JSON.parse(readFileSync(join(chartDir, "values.schema.json"), "utf8"));

  it("offers exactly the fields of spec.watchdog as install defaults, all empty by default", () => {
    const defaults = values.watchdog.defaults;
    const schemaDefaults = schema.properties.watchdog.properties.defaults.properties;
    // Every field a run may set, but the agent container: only a run names its own containers.
    const spec = Object.keys(WatchdogSpec.shape).filter((k) => k !== "agentContainer").sort();
    expect(Object.keys(defaults).sort()).toEqual(spec);
    expect(Object.keys(schemaDefaults).sort()).toEqual(spec);
    for (const key of ["backoff", "rateLimitBackoff"]) {
      expect(Object.keys(defaults[key]).sort()).toEqual(Object.keys(BackoffSpec.shape).sort());
      expect(Object.keys(schema.definitions.backoff.properties).sort()).toEqual(Object.keys(BackoffSpec.shape).sort());
    }
    expect(Object.keys(defaults.stall).sort()).toEqual(Object.keys(StallSpec.shape).sort());
    expect(Object.keys(schemaDefaults.stall.properties).sort()).toEqual(Object.keys(StallSpec.shape).sort());
    const leaves = (o: any): unknown[] => (o !== null && typeof o === "object" ? Object.values(o).flatMap(leaves) : [o]);
    expect(leaves(defaults).every((v) => v === "" || v === null)).toBe(true);
  });

  it("documents every value in the chart's README", () => {
    const readme = readFileSync(join(chartDir, "README.md"), "utf8");
    // Kubernetes objects passed through as a whole are documented as a whole.
    const whole = ["resources", "podSecurityContext", "securityContext", "probes.liveness", "probes.readiness"];
    const paths: string[] = [];
    const walk = (node: any, path: string) => {
      if (node !== null && typeof node === "object" && !Array.isArray(node) && Object.keys(node).length > 0 && !whole.includes(path)) {
        for (const [k, v] of Object.entries(node)) walk(v, path ? `${path}.${k}` : k);
      } else paths.push(path);
    };
    walk(values, "");
    expect(paths.length).toBeGreaterThan(80);
    expect(paths.filter((p) => !readme.includes(`\`${p}\``))).toEqual([]);
  });
});
