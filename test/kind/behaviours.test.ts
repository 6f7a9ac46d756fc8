// Every example behaviour in a real cluster: the chart's operator (two replicas, leader election,
// sandbox identity and admission fencing on) and the example agent in real pods from the image.
// The same scenario and the same verdicts as npm run demo, so what the demo shows locally is
// what a cluster does. Run by hack/kind-e2e.sh, which sets AGENT_WATCHDOG_E2E_KUBECONFIG and
// AGENT_WATCHDOG_IMAGE.
import { randomBytes } from "node:crypto";
import { afterAll, beforeAll, expect, it } from "vitest";
import { KubeConfig } from "@kubernetes/client-node";
import { KubeClient, paths, type Json } from "../../operator/kube/client.ts";
import { driveUntilSettled, type Run } from "../../harness/driver.ts";
import { judge } from "../../harness/judge.ts";
import { DEMO_RUNS, EXAMPLE_ENV, manifestFor } from "../../harness/scenario.ts";
import { waitFor } from "../support/wait.ts";

const kubeconfig = process.env.AGENT_WATCHDOG_E2E_KUBECONFIG;
const image = process.env.AGENT_WATCHDOG_IMAGE;
if (!kubeconfig || !image) throw new Error("set AGENT_WATCHDOG_E2E_KUBECONFIG and AGENT_WATCHDOG_IMAGE (hack/kind-e2e.sh does)");

const kc = new KubeConfig();
kc.loadFromFile(kubeconfig);
const client = new KubeClient(kc);
const ns = `e2e-${randomBytes(3).toString("hex")}`;
// One volume for every attempt of the run that sends e-mail, so a replay finds the first send.
const OUTBOX = { claim: "outbox", mountPath: "/outbox" };

/** The demo's run, with the image, the example agent's settings and the shared outbox. */
function inCluster(manifest: Json): Json {
  const spec = manifest.spec as { template: { spec: Json } };
  const env = [...Object.entries(EXAMPLE_ENV).map(([name, value]) => ({ name, value })), { name: "EXAMPLE_OUTBOX_DIR", value: OUTBOX.mountPath }];
  spec.template.spec = {
    containers: [{ name: "agent", image, imagePullPolicy: "IfNotPresent", args: ["example-agent"], env, volumeMounts: [{ name: "outbox", mountPath: OUTBOX.mountPath }] }],
    volumes: [{ name: "outbox", persistentVolumeClaim: { claimName: OUTBOX.claim } }],
  };
  return manifest;
}

async function emailsIn(run: string): Promise<number> {
  // Read the outbox from a pod that mounts it, with the same image.
  const name = `outbox-reader-${randomBytes(2).toString("hex")}`;
  await client.create(paths.pods(ns), {
    apiVersion: "v1",
    kind: "Pod",
    metadata: { name },
    spec: {
      restartPolicy: "Never",
      containers: [
        {
          name: "reader",
          image,
          imagePullPolicy: "IfNotPresent",
          command: ["node", "-e", "import('/app/operator/example-agent/outbox.js').then(async (m) => console.log(JSON.stringify(await new m.Outbox('/outbox').sent())))"],
          volumeMounts: [{ name: "outbox", mountPath: OUTBOX.mountPath }],
        },
      ],
      volumes: [{ name: "outbox", persistentVolumeClaim: { claimName: OUTBOX.claim } }],
    },
  });
  await waitFor("the outbox reader", async () => ((await client.get<Json>(paths.pod(ns, name))).status as { phase?: string })?.phase === "Succeeded", { timeoutMs: 120_000, intervalMs: 1000 });
  const log = await client.request<string>("GET", `${paths.pod(ns, name)}/log`, { text: true });
  const sent = JSON.parse(log) as { subject: string }[];
  return sent.filter((e) => e.subject === `Report for ${run}`).length;
}

beforeAll(async () => {
  await client.create("/api/v1/namespaces", { apiVersion: "v1", kind: "Namespace", metadata: { name: ns } });
  await waitFor("default ServiceAccount", () => client.get(`/api/v1/namespaces/${ns}/serviceaccounts/default`).then(() => true, () => undefined));
  await client.create(`/api/v1/namespaces/${ns}/persistentvolumeclaims`, {
    apiVersion: "v1",
    kind: "PersistentVolumeClaim",
    metadata: { name: OUTBOX.claim },
    spec: { accessModes: ["ReadWriteOnce"], resources: { requests: { storage: "10Mi" } } },
  });
  for (const run of DEMO_RUNS) await client.create(paths.runs(ns), inCluster(manifestFor(run)));
});

afterAll(async () => {
  await client.delete(`/api/v1/namespaces/${ns}`).catch(() => {});
});

it("brings every example behaviour to the end state the rules require", async () => {
  const { runs, settled, approved } = await driveUntilSettled({ client, namespace: ns, deadline: Date.now() + 600_000, intervalMs: 2000, approveAfterMs: 2000 });
  expect(settled, JSON.stringify(runs.map((r: Run) => [r.metadata.name, r.status?.phase]))).toBe(true);
  const emails = await emailsIn("email-report");
  const verdicts = DEMO_RUNS.map((demo) =>
    judge(demo, runs.find((r: Run) => r.metadata.name === demo.name), {
      emailsSent: (run) => (run === "email-report" ? emails : 0),
      approvedAfterRelease: (run) => approved.has(run),
    }),
  );
  expect(verdicts.filter((v) => !v.ok)).toEqual([]);
});
