// Durable by construction: an operator killed while a run backs off is replaced by a fresh one
// with empty memory, which creates the next sandbox at retry-after: not before, not much later.
import { afterEach, beforeEach, expect, it } from "vitest";
import type { KubeClient } from "../../operator/kube/client.ts";
import { createRun, deleteNamespace, getRun, kube, listPods, newNamespace, runManifest, ofAttempt } from "../support/cluster.ts";
import { startOperator, type OperatorProcess } from "../support/operator-process.ts";
import { setPodPhase } from "../support/sandbox.ts";
import { holds, waitFor } from "../support/wait.ts";

let client: KubeClient;
let ns: string;
const operators: OperatorProcess[] = [];

beforeEach(async () => {
  client = kube();
  ns = await newNamespace(client, "durability");
});

afterEach(async (ctx) => {
  for (const op of operators.splice(0)) {
    if (ctx.task.result?.state === "fail") console.error(op.logs.slice(-30).join("\n"));
    await op.stop("SIGKILL");
  }
  await deleteNamespace(client, ns);
});

it("creates the replacement at retry-after after the operator is SIGKILLed and restarted", async () => {
  const first = await startOperator(ns);
  operators.push(first);
  await createRun(client, ns, runManifest("durable", { heartbeatTimeout: "5m", backoff: { initial: "12s", factor: 2, max: "1m" } }));
  const pod = await waitFor("pod durable-1", async () => (await listPods(client, ns, "durable"))[0]);
  await setPodPhase(client, ns, pod.metadata.name, "Failed", 1);
  const queued = await waitFor("backing off", async () => {
    const r = await getRun(client, ns, "durable");
    return r.metadata.annotations?.["watchdog.dev/retry-after"] && r.status?.phase === "Queued" ? r : undefined;
  });
  const retryAfter = Date.parse(queued.metadata.annotations["watchdog.dev/retry-after"]);

  await first.stop("SIGKILL");
  const second = await startOperator(ns);
  operators.push(second);

  await holds("no replacement before retry-after", async () => (await listPods(client, ns, "durable")).every((p) => !ofAttempt(2)(p)), retryAfter - Date.now() - 500, 50);
  const replacement = await waitFor("replacement pod", async () => (await listPods(client, ns, "durable")).find(ofAttempt(2)), { timeoutMs: 20_000, intervalMs: 50 });
  const seenAt = Date.now();
  expect(Date.parse(replacement.metadata.creationTimestamp)).toBeGreaterThanOrEqual(Math.floor(retryAfter / 1000) * 1000);
  // "not seconds later": the fresh operator acted on the durable wake-up, not on a resync
  expect(seenAt - retryAfter).toBeLessThan(2000);
});
