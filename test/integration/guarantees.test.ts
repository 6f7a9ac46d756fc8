// The watchdog's guarantees end to end: the classes of test/unit/watchdog/guarantees.test.ts, each
// against the real API server with a real operator process. No kubelet runs these pods (at most
// kwok, on a fake node): the test plays the kubelet (setPodPhase) and the sandbox (heartbeats and
// tool records, merge patches on the status subresource), and finds pods by their attempt label and
// owner uid, never by name. Every wait has a deadline; every hold is checked all along.
import fc from "fast-check";
import { afterAll, describe, expect, it } from "vitest";
import { ACTIVITY_KINDS, SANDBOX_STATES } from "../../operator/api/agentrun.ts";
import { SANDBOX_FIELD_MANAGER } from "../../operator/api/annotations.ts";
import { ApiError, isNotFound, paths } from "../../operator/kube/client.ts";
import { createLogger } from "../../operator/log.ts";
import { argsHash, idempotencyKey } from "../../operator/sandbox/keys.ts";
import { EXIT_CODES, runAgent } from "../../operator/sandbox/index.ts";
import { OPERATOR_STATUS_FIELDS } from "../../operator/watchdog/plan.ts";
import { condition, createRun, getRun, kube, listEvents, listPods, ofAttempt, runManifest } from "../support/cluster.ts";
import { crdStatusProblems } from "../support/crd-schema.ts";
import { annotate, apiWrites, beat, cluster, deletionOf, heartbeatAcceptedAt, keepBeating, phaseOf, podEnv, podOf, removeWatchdogFinalizer, running, seriesValue, untouched, warnings, writesSettled, type Target } from "../support/guarantees.ts";
import { startOperator } from "../support/operator-process.ts";
import { heartbeat, setPodPhase, writeToolCalls } from "../support/sandbox.ts";
import { holds, waitFor } from "../support/wait.ts";

const S = 1000;
const H = 3600 * S;

// --- the guarantees -------------------------------------------------------------------------

describe("2. pods belong to runs by owner uid", () => {
  const env = cluster("owner");

  it("a run re-created under the same name never completes from, adopts or deletes the orphaned pod of the earlier one", async () => {
    const { client, ns } = env;
    const watchdog = { heartbeatTimeout: "30s", backoff: { initial: "30s" } };
    const earlier = await createRun(client, ns, runManifest("r", watchdog));
    const earlierUid = (earlier.metadata as any).uid as string;
    const orphan = await running(env, "r", 1, earlierUid);
    await beat(env, "r", 1, "Planning");
    await phaseOf(env, "r", "Planning");

    // While the operator is down, kubectl delete --cascade=orphan and the watchdog's finalizer taken
    // off by hand: the run goes at once, its pod stays, and the garbage collector removes the pod's
    // owner reference. (With the operator up, the run would stay until its sandbox is gone.)
    await env.operator.stop();
    await client.delete(paths.run(ns, "r"), { apiVersion: "v1", kind: "DeleteOptions", propagationPolicy: "Orphan" });
    await removeWatchdogFinalizer(client, ns, "r");
    await waitFor("run r gone and its pod orphaned", async () => {
      const gone = await getRun(client, ns, "r").then(() => false, (err) => isNotFound(err));
      const pod = await client.get<any>(paths.pod(ns, orphan.metadata.name));
      return gone && !(pod.metadata.ownerReferences ?? []).some((o: any) => o.uid === earlierUid);
    }, { timeoutMs: 60_000, intervalMs: 200 });
    env.operator = await startOperator(ns);
    // The orphan's agent finishes: exit 0.
    await setPodPhase(client, ns, orphan.metadata.name, "Succeeded", 0);

    const again = await createRun(client, ns, runManifest("r", watchdog));
    const uid = (again.metadata as any).uid as string;
    expect(uid).not.toBe(earlierUid);
    const own = await podOf(env, "r", 1, uid);
    expect(own.metadata.name).not.toBe(orphan.metadata.name);
    expect(own.metadata.name).toBe(`r-1-${uid.replace(/[^a-z0-9]/g, "").slice(0, 5)}`);
    expect(own.metadata.ownerReferences).toEqual([expect.objectContaining({ kind: "AgentRun", name: "r", uid, controller: true })]);
    // Two pods now carry run=r and attempt=1; only one is this run's.
    expect((await listPods(client, ns, "r")).filter(ofAttempt(1)).map((p) => p.metadata.name).sort()).toEqual([orphan.metadata.name, own.metadata.name].sort());

    // The orphan reported success, but it is not this run's: the run does not complete from it,
    // and does not delete it either.
    const orphanAlone = async () => {
      const o = await client.get<any>(paths.pod(ns, orphan.metadata.name));
      return !o.metadata.deletionTimestamp && o.status?.phase === "Succeeded";
    };
    await holds("the new run not Completed, the orphan left alone", async () => {
      const r = await getRun(client, ns, "r");
      return r.status?.phase !== "Completed" && (await orphanAlone());
    }, 3000, 200);
    const starting = await getRun(client, ns, "r");
    expect(starting.status).toMatchObject({ phase: "Starting", attempt: 1, restarts: 0, podName: own.metadata.name });

    // Its own attempt 1 proceeds as any other.
    await setPodPhase(client, ns, own.metadata.name, "Running");
    await beat(env, "r", 1, "Planning");
    const planning = await phaseOf(env, "r", "Planning");
    expect(planning.status).toMatchObject({ attempt: 1, restarts: 0, podName: own.metadata.name, podUID: own.metadata.uid });
    await holds("attempt 1 runs on, the orphan still left alone", async () => {
      const r = await getRun(client, ns, "r");
      return r.status?.phase === "Planning" && r.status.attempt === 1 && (await untouched(env, own.metadata.name)) && (await orphanAlone());
    }, 2000, 200);
  });

  it("nor adopts, waits for or completes from an orphan that is still running when the run is re-created", async () => {
    const { client, ns } = env;
    const watchdog = { heartbeatTimeout: "30s", backoff: { initial: "30s" } };
    const earlier = await createRun(client, ns, runManifest("q", watchdog));
    const earlierUid = (earlier.metadata as any).uid as string;
    const orphan = await running(env, "q", 1, earlierUid);
    await beat(env, "q", 1, "Planning");
    await phaseOf(env, "q", "Planning");
    await env.operator.stop();
    await client.delete(paths.run(ns, "q"), { apiVersion: "v1", kind: "DeleteOptions", propagationPolicy: "Orphan" });
    await removeWatchdogFinalizer(client, ns, "q");
    await waitFor("run q gone and its pod orphaned", async () => {
      const gone = await getRun(client, ns, "q").then(() => false, (err) => isNotFound(err));
      const pod = await client.get<any>(paths.pod(ns, orphan.metadata.name));
      return gone && !(pod.metadata.ownerReferences ?? []).some((o: any) => o.uid === earlierUid);
    }, { timeoutMs: 60_000, intervalMs: 200 });
    env.operator = await startOperator(ns);

    // Re-created while the orphan still runs: it is not this run's, so the run neither adopts it
    // (attempt label and run label match) nor waits for it to be gone.
    const again = await createRun(client, ns, runManifest("q", watchdog));
    const uid = (again.metadata as any).uid as string;
    const own = await podOf(env, "q", 1, uid);
    const starting = await waitFor("q Starting with its own pod", async () => {
      const r = await getRun(client, ns, "q");
      return r.status?.phase === "Starting" ? r : undefined;
    });
    expect(starting.status).toMatchObject({ attempt: 1, restarts: 0, podName: own.metadata.name });
    expect(await untouched(env, orphan.metadata.name), "the orphan is not the run's to delete").toBe(true);

    // The orphan's agent exits 0: not this run's completion.
    await setPodPhase(client, ns, orphan.metadata.name, "Succeeded", 0);
    await holds("q not Completed by the orphan", async () => (await getRun(client, ns, "q")).status?.phase === "Starting", 2000, 200);
    await setPodPhase(client, ns, own.metadata.name, "Running");
    await beat(env, "q", 1, "Planning");
    const planning = await phaseOf(env, "q", "Planning");
    expect(planning.status).toMatchObject({ attempt: 1, restarts: 0, podName: own.metadata.name, podUID: own.metadata.uid });
  });
});

describe("3. liveness on the server's clock", () => {
  const env = cluster("clock");
  const TIMEOUT = 4 * S;

  it("never kills sandboxes whose clocks are an hour fast or slow, costs no API write per heartbeat, and kills within 2 s of the server-side deadline", async () => {
    const { client, ns } = env;
    const targets: Target[] = [
      { run: "fast", attempt: 1, skewMs: +H },
      { run: "slow", attempt: 1, skewMs: -H },
    ];
    for (const t of targets) await createRun(client, ns, runManifest(t.run, { heartbeatTimeout: "4s", backoff: { initial: "30s" } }));
    const pods = await Promise.all(targets.map((t) => running(env, t.run, 1)));
    const beating = keepBeating(env, targets);
    let last: Map<string, any>;
    try {
      await Promise.all(targets.map((t) => phaseOf(env, t.run, "Planning")));
      // The writes a new run costs (its pod, its phase, its pod's uid and node) are done.
      const writesBefore = await writesSettled(env.operator);
      const eventsBefore = (await listEvents(client, ns)).length;
      // Longer than two heartbeat timeouts of heartbeats only.
      await holds("neither run killed", async () => {
        for (const [i, t] of targets.entries()) {
          const r = await getRun(client, ns, t.run);
          if (r.status?.restarts !== 0 || r.status.attempt !== 1 || r.status.phase !== "Planning") return false;
          if (!(await untouched(env, pods[i].metadata.name))) return false;
        }
        return true;
      }, 2 * TIMEOUT + 1500, 250);
      expect(beating.errors).toEqual([]);
      expect(await apiWrites(env.operator), "API writes (PATCH, POST, DELETE, PUT) for heartbeat-only changes").toBe(writesBefore);
      expect((await listEvents(client, ns)).length, "Events for heartbeat-only changes").toBe(eventsBefore);
    } finally {
      last = await beating.stop();
    }

    // They stop: each is killed by the deadline the server's clock sets, whatever its own clock says.
    await Promise.all(
      targets.map(async (t, i) => {
        const written = last.get(t.run);
        const accepted = heartbeatAcceptedAt(written);
        // The sandbox's clock really was off.
        expect(Math.abs(Date.parse(written.status.heartbeat.time) - accepted - (t.skewMs ?? 0))).toBeLessThan(5 * S);
        const deadline = accepted + 1 * S + TIMEOUT;
        const deleted = await deletionOf(env, pods[i].metadata.name);
        expect(deleted.lastAliveAt, `${t.run}: not killed before its heartbeat's timeout`).toBeGreaterThanOrEqual(accepted + TIMEOUT);
        expect(deleted.seenAt, `${t.run}: killed within 2 s of the server-side deadline`).toBeLessThanOrEqual(deadline + 2 * S);
        const queued = await waitFor(`${t.run} requeued`, async () => {
          const r = await getRun(client, ns, t.run);
          return r.status?.lastFailure?.attempt === 1 ? r : undefined;
        });
        expect(queued.status).toMatchObject({ phase: "Queued", reason: "HeartbeatTimeout", attempt: 2, restarts: 1, lastFailure: { reason: "HeartbeatTimeout" } });
      }),
    );
  });

  it("a late heartbeat from the previous attempt's sandbox does not get the current, heartbeating sandbox killed", async () => {
    // Rule 9: heartbeats whose attempt is not the current one are ignored. Ignored must mean they
    // neither keep a dead run alive nor make a live one look dead: the merge patch of a stale
    // heartbeat replaces the current attempt's in status, and the current sandbox writes its next
    // one within its interval. (At 633af08 this fails: the stale heartbeat leaves the current
    // attempt with no heartbeat the core counts, its container's start is older than the timeout,
    // and the run is killed for HeartbeatTimeout at once. Admission fencing, where installed,
    // refuses such writes; this cluster has none, and rule 9 asks the operator to ignore them.)
    const { client, ns } = env;
    await createRun(client, ns, runManifest("zombie", { heartbeatTimeout: "4s", backoff: { initial: "1s" } }));
    const first = await running(env, "zombie", 1);
    await beat(env, "zombie", 1, "Planning");
    await phaseOf(env, "zombie", "Planning");
    await setPodPhase(client, ns, first.metadata.name, "Failed", 1); // attempt 1 is over; a write of its sandbox is still on its way
    const second = await running(env, "zombie", 2);
    const beating = keepBeating(env, [{ run: "zombie", attempt: 2 }]);
    const alive = async () => {
      const r = await getRun(client, ns, "zombie");
      return r.status?.attempt === 2 && r.status.restarts === 1 && r.status.phase === "Planning" && (await untouched(env, second.metadata.name));
    };
    try {
      await phaseOf(env, "zombie", "Planning");
      await waitFor("attempt 2 Planning", async () => (await getRun(client, ns, "zombie")).status?.attempt === 2);
      // Longer than the timeout since attempt 2's container started: only its heartbeats keep it.
      await holds("attempt 2 alive while it heartbeats", alive, TIMEOUT + 1500, 250);
      await beat(env, "zombie", 1, "Planning"); // the old attempt's late write
      await holds("attempt 2 still alive after the old attempt's write", alive, 3000, 100);
      expect(beating.errors).toEqual([]);
    } finally {
      await beating.stop();
    }
  });

  it("an operator SIGKILLed right after the last heartbeat is replaced by a fresh one that kills on the same deadline", async () => {
    const { client, ns } = env;
    // A longer timeout than above, so that the fresh operator is surely up before the deadline
    // (starting it takes a few seconds on a loaded machine); the bound is the same 2 s.
    const timeout = 8 * S;
    await createRun(client, ns, runManifest("durable", { heartbeatTimeout: "8s", backoff: { initial: "30s" } }));
    const pod = await running(env, "durable", 1);
    const beating = keepBeating(env, [{ run: "durable", attempt: 1, skewMs: -H }]);
    try {
      await phaseOf(env, "durable", "Planning");
      // Heartbeats for a while, so that the deadline they set is well after any other sign of
      // life (the agent container's start): an operator that forgot them would kill early.
      await holds("durable alive while it heartbeats", async () => (await getRun(client, ns, "durable")).status?.phase === "Planning", 4000, 250);
    } finally {
      await beating.stop();
    }
    const last = await beat(env, "durable", 1, "Planning", undefined, { skewMs: -H });
    await env.operator.stop("SIGKILL");
    const accepted = heartbeatAcceptedAt(last);
    const deadline = accepted + 1 * S + timeout;
    env.operator = await startOperator(ns);
    expect(Date.now(), "the fresh operator is ready before the deadline").toBeLessThan(deadline - 1 * S);
    const deleted = await deletionOf(env, pod.metadata.name);
    expect(deleted.lastAliveAt, "not killed before the heartbeat's timeout").toBeGreaterThanOrEqual(accepted + timeout);
    expect(deleted.seenAt, "killed within 2 s of the deadline, by an operator that never saw the heartbeat arrive").toBeLessThanOrEqual(deadline + 2 * S);
    const queued = await waitFor("durable requeued", async () => {
      const r = await getRun(client, ns, "durable");
      return r.status?.lastFailure?.attempt === 1 ? r : undefined;
    });
    expect(queued.status).toMatchObject({ phase: "Queued", reason: "HeartbeatTimeout", restarts: 1 });
  });
});

describe("5. no nudges during work", () => {
  const env = cluster("work");

  it("holds the stall timer while a tool call is in flight, and nudges once the call is done", async () => {
    const { client, ns } = env;
    const stall = { timeout: "2s", maxNudges: 2 };
    await createRun(client, ns, runManifest("work", { heartbeatTimeout: "30s", stall }));
    await running(env, "work", 1);
    // Final text arms the stall timer; right after it the agent starts a long tool call.
    await beat(env, "work", 1, "Planning", { kind: "text" });
    const started = { id: "a1-1", name: "build", argsHash: "b1", idempotencyKey: "k1", idempotent: true, attempt: 1, state: "Started", startedAt: new Date().toISOString() };
    await writeToolCalls(client, ns, "work", [started]);
    const beating = keepBeating(env, [{ run: "work", attempt: 1, state: "ExecutingTool" }]);
    try {
      await phaseOf(env, "work", "ExecutingTool");
      // Longer than stall.timeout x (maxNudges + 1): without the hold the run would need a person by now.
      await holds("no nudge while the tool runs", async () => {
        const r = await getRun(client, ns, "work");
        return (r.status?.stall?.nudges ?? 0) === 0 && r.status?.phase !== "NeedsHumanIntervention";
      }, 8000, 200);
      expect(beating.errors).toEqual([]);
    } finally {
      await beating.stop();
    }
    expect((await listEvents(client, ns)).filter((e) => e.reason === "StallDetected")).toEqual([]);

    // The call returns; the agent is armed still (by its text), timed from the result. The record
    // and its toolResult activity go in one write, as the SDK sends them: between two writes the
    // operator would see a finished call with the text's older activity, and rightly nudge.
    const resultAt = Date.now();
    await heartbeat(client, ns, "work", 1, "Planning", { kind: "toolResult" }, { toolCalls: [{ ...started, state: "Succeeded", finishedAt: new Date().toISOString(), result: "{}" }] }, { fieldManager: SANDBOX_FIELD_MANAGER });
    const nudged = await waitFor("a nudge after the stall timeout", async () => {
      const r = await getRun(client, ns, "work");
      return (r.status?.stall?.nudges ?? 0) >= 1 ? r : undefined;
    }, { timeoutMs: 15_000 });
    expect(nudged.status.stall).toMatchObject({ state: "Fired", nudges: 1 });
    // Not before the timeout (a nudge may come up to a second early: whole-second server times).
    expect(Date.parse(nudged.status.stall.lastNudge.time)).toBeGreaterThanOrEqual(resultAt + 1000);
    expect(nudged.status.phase).not.toBe("NeedsHumanIntervention");
  });
});

describe("6. answers bound to questions", () => {
  const env = cluster("answers");

  it("refuses and removes answers that name no pending request, accepts the one that does, and never lets an old answer answer a new question", async () => {
    const { client, ns } = env;
    const refusals = async (n: number) =>
      waitFor(`${n} AnswerRefused Warnings`, async () => {
        const events = await warnings(env, "ask", "AnswerRefused");
        return events.length >= n ? events : undefined;
      });
    const answerAnnotations = (r: any) => Object.keys(r.metadata.annotations ?? {}).filter((k) => ["watchdog.dev/approve", "watchdog.dev/reject", "watchdog.dev/approval-id"].includes(k));
    const removed = (what: string) =>
      waitFor(`the ${what} removed`, async () => {
        const r = await getRun(client, ns, "ask");
        return answerAnnotations(r).length === 0 ? r : undefined;
      });
    const pending = (id?: string) =>
      waitFor(`a pending request${id ? ` ${id}` : ""}`, async () => {
        const r = await getRun(client, ns, "ask");
        return r.status?.approval?.state === "Pending" && r.status.approval.id && (id === undefined || r.status.approval.id === id) ? r : undefined;
      });
    const staysPending = (id: string, what: string) =>
      holds(what, async () => {
        const r = await getRun(client, ns, "ask");
        return r.status?.approval?.state === "Pending" && r.status.approval.id === id && r.status.phase === "AwaitingReply";
      }, 2000, 200);

    await createRun(client, ns, runManifest("ask", { heartbeatTimeout: "30s", releaseAwaitingAfter: "5m" }));
    await running(env, "ask", 1);
    await beat(env, "ask", 1, "Planning");
    await phaseOf(env, "ask", "Planning");

    // (a) An answer while nothing is pending.
    await annotate(env, "ask", { "watchdog.dev/approve": "yes to anything" });
    await removed("early answer");
    await refusals(1);
    await beat(env, "ask", 1, "AwaitingReply");
    const first = (await pending()).status.approval.id as string;
    await staysPending(first, "the early answer not answering the request");

    // (b) An answer that names no request, then one that names another.
    await annotate(env, "ask", { "watchdog.dev/approve": "no id" });
    await removed("answer without an id");
    await refusals(2);
    await annotate(env, "ask", { "watchdog.dev/approve": "wrong id", "watchdog.dev/approval-id": "1-notthisone" });
    await removed("answer with a wrong id");
    await refusals(3);
    await staysPending(first, "refused answers not answering the request");

    // (c) The answer that names the pending request.
    await annotate(env, "ask", { "watchdog.dev/approve": "ship it", "watchdog.dev/approval-id": first });
    const approved = await waitFor("the request approved", async () => {
      const r = await getRun(client, ns, "ask");
      return r.status?.approval?.state === "Approved" ? r : undefined;
    });
    expect(approved.status.approval).toMatchObject({ id: first, state: "Approved", answer: "ship it" });
    await removed("accepted answer");

    // (d) The sandbox reads the answer, works, and asks again: a new request, with a new id.
    await beat(env, "ask", 1, "Planning");
    await phaseOf(env, "ask", "Planning");
    await beat(env, "ask", 1, "AwaitingReply");
    const second = await waitFor("a second request", async () => {
      const r = await getRun(client, ns, "ask");
      return r.status?.approval?.state === "Pending" && r.status.approval.id !== first ? (r.status.approval.id as string) : undefined;
    });
    // A GitOps tool applies the manifest it holds again: the first answer, naming the first request.
    await annotate(env, "ask", { "watchdog.dev/approve": "ship it", "watchdog.dev/approval-id": first });
    await removed("re-applied answer");
    await refusals(4);
    await staysPending(second, "the re-applied answer not answering the second request");
    expect(await warnings(env, "ask", "AnswerRefused")).toHaveLength(4);
  });
});

describe("7. no input stops a kill", () => {
  const env = cluster("input");

  it("(a) kills a hung pod after huge annotations and a heartbeat time with the most fractional digits the API server takes, and its status writes are accepted", async () => {
    const { client, ns } = env;
    await createRun(client, ns, runManifest("big", { heartbeatTimeout: "5s", backoff: { initial: "30s" }, releaseAwaitingAfter: "5m" }));
    const pod = await running(env, "big", 1);
    const target: Target = { run: "big", attempt: 1, state: "Planning" };
    const beating = keepBeating(env, [target]);
    try {
      await phaseOf(env, "big", "Planning");

      // A resume token of 200,000 characters (the API server takes it: annotations may total 256 KiB).
      await annotate(env, "big", { "watchdog.dev/resume": "r".repeat(200_000) });
      await waitFor("the resume token recorded, cut to the CRD's 256", async () => (await getRun(client, ns, "big")).status?.observedResume === "r".repeat(256));
      // Removed again, to leave room in the 256 KiB for the next annotation.
      await annotate(env, "big", { "watchdog.dev/resume": null });

      // An answer of 100,000 characters to the pending request.
      target.state = "AwaitingReply";
      const id = await waitFor("a pending request", async () => {
        const r = await getRun(client, ns, "big");
        return r.status?.approval?.state === "Pending" ? (r.status.approval.id as string) : undefined;
      });
      await annotate(env, "big", { "watchdog.dev/approve": "a".repeat(100_000), "watchdog.dev/approval-id": id });
      const approved = await waitFor("the long answer recorded", async () => {
        const r = await getRun(client, ns, "big");
        return r.status?.approval?.state === "Approved" ? r : undefined;
      });
      expect(approved.status.approval.answer).toBe("a".repeat(4096));

      // Heartbeats whose time has thousands of fractional digits, if the API server takes them:
      // probed first with dry runs, longest first. (The CRD as generated at 633af08 takes 100,000;
      // a CRD whose timestamp pattern allows at most 9 digits refuses all but 9, and then 9 is
      // the longest it accepts and the one used.)
      const oddTime = (digits: number) => `${new Date().toISOString().slice(0, 19)}.${String(Date.now() % 1000).padStart(3, "0")}${"9".repeat(digits - 3)}Z`;
      let digits: number | undefined;
      for (const n of [5000, 1000, 100, 30, 9]) {
        const probe = { status: { heartbeat: { time: oddTime(n), attempt: 1, state: "Planning" } } };
        const ok = await client.mergePatch(paths.runStatus(ns, "big"), probe, { dryRun: "All", fieldManager: SANDBOX_FIELD_MANAGER }).then(
          () => true,
          (err) => {
            if (err instanceof ApiError && err.code === 422) return false;
            throw err;
          },
        );
        if (ok) {
          digits = n;
          break;
        }
      }
      expect(digits, "the API server takes a heartbeat time with 9 fractional digits at least").toBeDefined();
      console.log(`7(a): heartbeat times with ${digits} fractional digits (the longest of 5000, 1000, 100, 30, 9 the API server accepts)`);
      target.state = "Planning";
      target.time = () => oddTime(digits as number);
      const odd = await waitFor("an odd heartbeat accepted and the run Planning", async () => {
        if (beating.errors.length) throw new Error(`heartbeats refused: ${beating.errors.slice(-1)[0]?.slice(0, 300)}`);
        const r = await getRun(client, ns, "big");
        return r.status?.phase === "Planning" && r.status.heartbeat.time.length >= 21 + (digits as number) ? r : undefined;
      });
      expect(odd.status.heartbeat.time).toMatch(new RegExp(`^\\d{4}-\\d\\d-\\d\\dT\\d\\d:\\d\\d:\\d\\d\\.\\d{${digits}}Z$`));
      expect(beating.errors).toEqual([]);
    } finally {
      await beating.stop();
    }

    // It stops: the pod is still deleted, and the operator's status write is accepted.
    await deletionOf(env, pod.metadata.name, 20_000);
    const queued = await waitFor("big requeued", async () => {
      const r = await getRun(client, ns, "big");
      return r.status?.phase === "Queued" && r.status.lastFailure?.attempt === 1 ? r : undefined;
    });
    expect(queued.status).toMatchObject({ reason: "HeartbeatTimeout", restarts: 1, lastFailure: { reason: "HeartbeatTimeout" } });
    const operatorFields = Object.fromEntries(OPERATOR_STATUS_FIELDS.filter((f) => queued.status[f] !== undefined).map((f) => [f, queued.status[f]]));
    expect(crdStatusProblems(operatorFields)).toEqual([]);
    expect(await warnings(env, "big", "StatusWriteRefused")).toEqual([]);
  });

  describe("(b) a refused status write", () => {
    const policy = () => `guarantees-refuse-queued-${env.ns}`;
    const VAP = "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies";
    const BINDINGS = "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicybindings";
    const removePolicy = async () => {
      for (const path of [`${BINDINGS}/${policy()}`, `${VAP}/${policy()}`]) {
        await env.client.delete(path).catch((err) => {
          if (!isNotFound(err)) throw err;
        });
      }
    };
    afterAll(removePolicy);

    it("never blocks the kill nor loops: the run stops for a person (StatusWriteRefused) and the pod is deleted behind that write", async () => {
      const { client, ns } = env;
      // Denies every status update that leaves these runs Queued, in this namespace only.
      await client.create(VAP, {
        apiVersion: "admissionregistration.k8s.io/v1",
        kind: "ValidatingAdmissionPolicy",
        metadata: { name: policy() },
        spec: {
          failurePolicy: "Fail",
          matchConstraints: { resourceRules: [{ apiGroups: ["watchdog.dev"], apiVersions: ["*"], operations: ["UPDATE"], resources: ["agentruns/status"] }] },
          matchConditions: [{ name: "these-runs", expression: "object.metadata.name in ['refused', 'probe']" }],
          validations: [{ expression: "!has(object.status) || !has(object.status.phase) || object.status.phase != 'Queued'", message: "guarantees test: a status write to Queued is refused" }],
        },
      });
      await client.create(BINDINGS, {
        apiVersion: "admissionregistration.k8s.io/v1",
        kind: "ValidatingAdmissionPolicyBinding",
        metadata: { name: policy() },
        spec: { policyName: policy(), validationActions: ["Deny"], matchResources: { namespaceSelector: { matchLabels: { "kubernetes.io/metadata.name": ns } } } },
      });
      // Policies take a moment to take effect: probe with a dry run until one is denied.
      await createRun(client, ns, runManifest("probe", {}, { suspend: true }));
      await phaseOf(env, "probe", "Suspended");
      await waitFor("the policy to deny a probe write", async () => {
        try {
          await client.mergePatch(paths.runStatus(ns, "probe"), { status: { phase: "Queued" } }, { dryRun: "All" });
          return undefined;
        } catch (err) {
          if (err instanceof ApiError && err.message.includes("guarantees test")) return true;
          throw err;
        }
      }, { timeoutMs: 60_000, intervalMs: 250 });

      await createRun(client, ns, runManifest("refused", { heartbeatTimeout: "4s", backoff: { initial: "30s" } }));
      const pod = await running(env, "refused", 1);
      await beat(env, "refused", 1, "Planning");
      await phaseOf(env, "refused", "Planning");
      const last = await beat(env, "refused", 1, "Planning");
      const deadline = heartbeatAcceptedAt(last) + 1 * S + 4 * S;

      // Hung: the operator's write to Queued is refused for what it holds. The next decision stops
      // the run for a person with the smallest write it can, which is taken, and the kill goes
      // behind that write: never a silent retry loop, never a kill behind a failed write.
      const deleted = await deletionOf(env, pod.metadata.name, 20_000);
      expect(deleted.seenAt).toBeLessThanOrEqual(deadline + 3 * S);
      await waitFor("a StatusWriteRefused Warning", async () => (await warnings(env, "refused", "StatusWriteRefused")).length > 0);
      const refused = await getRun(client, ns, "refused");
      expect(refused.status).toMatchObject({ phase: "NeedsHumanIntervention", reason: "StatusWriteRefused", restarts: 0 });
      expect(refused.status.message).toContain("guarantees test");

      // Once the policy goes, a person resumes it.
      await removePolicy();
      await annotate(env, "refused", { "watchdog.dev/resume": "policy removed" });
      const queued = await waitFor("attempt 2", async () => {
        const r = await getRun(client, ns, "refused");
        return (r.status?.attempt ?? 0) >= 2 && r.status.phase !== "NeedsHumanIntervention" ? r : undefined;
      }, { timeoutMs: 60_000 });
      console.log(`refused status write: stopped for a person (StatusWriteRefused), resumed as attempt ${queued.status.attempt} once the policy was removed`);
    });
  });
});

describe("9. the SDK's refusal is NeedsHumanIntervention, not a restart loop", () => {
  const env = cluster("refusal");

  it("attempt 2's sandbox refuses to repeat attempt 1's Started non-idempotent call and exits 3: the run needs a person, restarts 0", async () => {
    const { client, ns } = env;
    const created = await createRun(client, ns, runManifest("charge", { heartbeatTimeout: "30s", backoff: { initial: "1s" } }));
    const runUid = (created.metadata as any).uid as string;
    await running(env, "charge", 1);
    await beat(env, "charge", 1, "Planning");
    await phaseOf(env, "charge", "Planning");
    // Attempt 1 committed the intent of a payment, as the SDK records it, and then was suspended.
    const args = { cents: 1999 };
    const hash = argsHash(args);
    await writeToolCalls(client, ns, "charge", [
      { id: "a1-1", name: "charge_card", argsHash: hash, idempotencyKey: idempotencyKey({ runUid, step: 1, index: 0, name: "charge_card", argsHash: hash }), idempotent: false, attempt: 1, state: "Started", startedAt: new Date().toISOString() },
    ]);
    await beat(env, "charge", 1, "ExecutingTool");
    await phaseOf(env, "charge", "ExecutingTool");
    await client.mergePatch(paths.run(ns, "charge"), { spec: { suspend: true } });
    await phaseOf(env, "charge", "Suspended");
    await waitFor("attempt 1's pod gone", async () => (await listPods(client, ns, "charge")).filter(ofAttempt(1)).every((p) => p.status?.phase === "Failed" || p.status?.phase === "Succeeded"));
    await client.mergePatch(paths.run(ns, "charge"), { spec: { suspend: false } });

    // Attempt 2: the real SDK finds the call Started, of unknown outcome, and refuses to run it again.
    const pod = await running(env, "charge", 2, runUid);
    let charges = 0;
    const code = await runAgent(
      async (sandbox) => {
        await sandbox.tool("charge_card", args, () => ++charges, { idempotent: false });
      },
      { env: podEnv(pod), client: kube(), logger: createLogger("silent"), exit: () => {} },
    );
    expect(charges).toBe(0);
    expect(code).toBe(EXIT_CODES.unconfirmedSideEffect);
    await setPodPhase(client, ns, pod.metadata.name, "Failed", code);

    const stopped = await phaseOf(env, "charge", "NeedsHumanIntervention");
    expect(stopped.status).toMatchObject({ reason: "UnconfirmedSideEffect", restarts: 0 });
    expect(condition(stopped, "NeedsHumanIntervention")).toMatchObject({ status: "True", reason: "UnconfirmedSideEffect" });
    await holds("no attempt 3, no restart", async () => {
      const r = await getRun(client, ns, "charge");
      return r.status?.phase === "NeedsHumanIntervention" && r.status.restarts === 0 && !(await listPods(client, ns, "charge")).some(ofAttempt(3));
    }, 3000, 200);
  });
});

describe("10. fuzz through the API server", () => {
  // The operator's own verdict on a stuck work loop: /healthz fails once one reconcile runs this
  // long. How long reconciles took under the fuzz is a figure (printed below), not a verdict.
  const STUCK_LIMIT_S = 20;
  const env = cluster("fuzz", [`--stuck-reconcile-limit=${STUCK_LIMIT_S}s`]);

  it("1,000 random sandbox payloads into 20 running runs: the operator stays healthy, hung runs are killed, healthy ones are not", async () => {
    const { client, ns } = env;
    const PAYLOADS = 1000;
    const TIMEOUT = 6 * S;
    const names = (prefix: string, n: number) => Array.from({ length: n }, (_, i) => `${prefix}-${i}`);
    const fuzzed = names("fuzzed", 10);
    const healthy = names("healthy", 5);
    const hung = names("hung", 5);
    const all = [...fuzzed, ...healthy, ...hung];
    const watchdog = { heartbeatTimeout: "6s", backoff: { initial: "60s" }, stall: { timeout: "2s", maxNudges: 1 } };
    await Promise.all(all.map((name) => createRun(client, ns, runManifest(name, watchdog))));
    const pods = new Map<string, any>(await Promise.all(all.map(async (name) => [name, await running(env, name, 1)] as const)));
    const setup = keepBeating(env, [...fuzzed, ...hung].map((run) => ({ run, attempt: 1 })));
    const healthyBeats = keepBeating(env, healthy.map((run) => ({ run, attempt: 1 })));
    await Promise.all(all.map((name) => phaseOf(env, name, "Planning", 60_000)));

    // Random payloads: heartbeats, tool records and checkpoints. Well-formed ones (in range, of
    // the current attempt or not, any state, any clock) and hostile ones, which the API server
    // mostly refuses: one bad field refuses the whole write.
    const nowish = fc.integer({ min: -2 * H, max: 2 * H }).map((ms) => `@now${ms}`);
    const time = fc.oneof(
      { weight: 4, arbitrary: nowish },
      fc.constantFrom("", "yesterday", "2026-13-45T99:99:99Z", "1970-01-01T00:00:00Z", "9999-12-31T23:59:59Z", `2026-12-01T12:00:00.${"9".repeat(3000)}Z`),
      fc.integer(),
    );
    const text = fc.oneof({ weight: 4, arbitrary: fc.string({ maxLength: 20 }) }, fc.constantFrom("", "x".repeat(300), "🧨".repeat(200)));
    const wellFormedCall = fc.record(
      {
        id: fc.constantFrom("c1", "c2", "c3", "c4"),
        name: fc.constantFrom("fetch", "search", "charge_card"),
        argsHash: fc.constantFrom("h1", "h2"),
        idempotencyKey: fc.constantFrom("k1", "k2"),
        idempotent: fc.boolean(),
        attempt: fc.constantFrom(1, 1, 2),
        state: fc.constantFrom("Started", "Succeeded", "Failed"),
        error: fc.record({ message: fc.string({ maxLength: 20 }), httpStatus: fc.constantFrom(429, 500), retryAfterSeconds: fc.constantFrom(1, 2) }, { requiredKeys: [] }),
        startedAt: nowish,
        finishedAt: nowish,
        result: fc.string({ maxLength: 20 }),
      },
      { requiredKeys: ["id", "name", "argsHash", "state"] },
    );
    const hostileCall = fc.oneof(
      fc.record(
        {
          id: text,
          name: text,
          argsHash: text,
          idempotencyKey: text,
          idempotent: fc.boolean(),
          attempt: fc.constantFrom(1, 2, 0),
          state: fc.constantFrom("Started", "Succeeded", "Failed", "Exploded"),
          error: fc.record({ message: text, httpStatus: fc.constantFrom(429, 500, 1000), retryAfterSeconds: fc.constantFrom(1, 100_000) }, { requiredKeys: [] }),
          startedAt: time,
          finishedAt: time,
          result: fc.oneof({ weight: 5, arbitrary: text }, fc.constant("r".repeat(9000))),
        },
        { requiredKeys: [] },
      ),
      fc.jsonValue({ maxDepth: 2 }),
    );
    const wellFormed = fc.record(
      {
        heartbeat: fc.record(
          {
            time: nowish,
            attempt: fc.constantFrom(1, 1, 2),
            state: fc.constantFrom(...SANDBOX_STATES),
            activity: fc.record({ kind: fc.constantFrom(...ACTIVITY_KINDS), time: nowish }),
          },
          { requiredKeys: ["time", "attempt", "state"] },
        ),
        toolCalls: fc.array(wellFormedCall, { maxLength: 8 }),
        checkpoint: fc.record({ step: fc.nat(10), data: fc.jsonValue({ maxDepth: 3 }) }, { requiredKeys: ["step"] }),
      },
      { requiredKeys: [] },
    );
    const hostile = fc.record(
      {
        heartbeat: fc.oneof(
          fc.record(
            {
              time,
              attempt: fc.oneof(fc.constantFrom(1, 2), fc.integer({ min: -1, max: 2_000_000 }), fc.string({ maxLength: 3 })),
              state: fc.constantFrom(...SANDBOX_STATES, "Dancing"),
              activity: fc.record({ kind: fc.constantFrom(...ACTIVITY_KINDS, "?"), time }, { requiredKeys: [] }),
            },
            { requiredKeys: [] },
          ),
          fc.constant(null),
          fc.jsonValue({ maxDepth: 1 }),
        ),
        toolCalls: fc.oneof(fc.array(fc.oneof(wellFormedCall, hostileCall), { maxLength: 70 }), fc.constant(null), fc.jsonValue({ maxDepth: 1 })),
        checkpoint: fc.oneof(fc.record({ step: fc.integer({ min: -1, max: 10 }), data: fc.jsonValue({ maxDepth: 3 }) }, { requiredKeys: [] }), fc.constant(null), fc.jsonValue({ maxDepth: 1 })),
      },
      { requiredKeys: [] },
    );
    const payloadArb = fc.oneof({ weight: 3, arbitrary: wellFormed }, { weight: 2, arbitrary: hostile });
    const seed = Date.now() % 2_147_483_647;
    // Most go to the fuzzed runs. The hung runs get tool records and checkpoints (no heartbeat,
    // and no 429, which would requeue them as RateLimited) before they stop; the healthy ones get
    // checkpoints beside their valid heartbeats.
    const no429 = (value: unknown): unknown => {
      if (Array.isArray(value)) return value.map(no429);
      if (value && typeof value === "object") return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, k === "httpStatus" && v === 429 ? 503 : no429(v)]));
      return value;
    };
    const plan = fc.sample(fc.tuple(fc.nat(99), payloadArb, fc.nat(1_000)), { numRuns: PAYLOADS, seed }).map(([where, payload, which]) => {
      const { toolCalls, checkpoint } = payload as { toolCalls?: unknown; checkpoint?: unknown };
      if (where < 70) return { run: fuzzed[which % fuzzed.length] as string, payload };
      if (where < 85) return { run: hung[which % hung.length] as string, payload: no429({ toolCalls, checkpoint: checkpoint ?? { step: which % 5 } }) };
      return { run: healthy[which % healthy.length] as string, payload: { checkpoint: checkpoint ?? { step: which % 5 } } };
    });
    const materialize = (value: unknown): unknown => {
      if (typeof value === "string" && value.startsWith("@now")) return new Date(Date.now() + Number(value.slice(4))).toISOString();
      if (Array.isArray(value)) return value.map(materialize);
      if (value && typeof value === "object") return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, materialize(v)]));
      return value;
    };
    let accepted = 0;
    let refused = 0;
    const failures: string[] = [];
    const writeAll = async (entries: { run: string; payload: unknown }[]) => {
      let next = 0;
      await Promise.all(
        Array.from({ length: 6 }, async () => {
          while (next < entries.length) {
            const { run, payload } = entries[next++]!;
            try {
              await client.mergePatch(paths.runStatus(ns, run), { status: materialize(payload) }, { fieldManager: SANDBOX_FIELD_MANAGER });
              accepted++;
            } catch (err) {
              if (err instanceof ApiError && err.code >= 400 && err.code < 500) refused++;
              else failures.push(String(err).slice(0, 300));
            }
          }
        }),
      );
    };

    const killedBefore = seriesValue(await env.operator.metrics(), "watchdog_hung_sandboxes_killed_total") ?? 0;
    // The operator watched all along: /healthz, and the longest running reconcile.
    let healthChecks = 0;
    const unhealthy: string[] = [];
    let longestRunning = 0;
    let fuzzing = true;
    const watchUntil = Date.now() + 120_000; // never past the test's own timeout
    const watching = (async () => {
      while (fuzzing && Date.now() < watchUntil) {
        const res = await fetch(`${env.operator.healthUrl}/healthz`).catch((err) => ({ ok: false, status: 0, text: async () => String(err) }));
        healthChecks++;
        if (!res.ok) unhealthy.push(`${res.status} ${await res.text()}`);
        longestRunning = Math.max(longestRunning, seriesValue(await env.operator.metrics(), "workqueue_longest_running_processor_seconds") ?? 0);
        await new Promise((r) => setTimeout(r, 250));
      }
    })();
    const started = Date.now();
    await writeAll(plan.filter((p) => hung.includes(p.run)));
    // The hung set stops writing as the rest of the fuzz begins; so does the fuzzed set's valid
    // heartbeat. A hung run's deadline counts from the server's record of its sandbox's last write.
    await setup.stop();
    const hungDeadlines = new Map(await Promise.all(hung.map(async (name) => [name, heartbeatAcceptedAt(await getRun(client, ns, name)) + 1 * S + TIMEOUT] as const)));

    // Every hung run: its pod deleted, and requeued for HeartbeatTimeout or stopped for a person;
    // watched from now on, while the fuzz runs.
    const killed = Promise.all(
      hung.map(async (name) => {
        const deleted = await deletionOf(env, pods.get(name).metadata.name, 30_000);
        const run = await waitFor(`${name} requeued or needing a person`, async () => {
          const r = await getRun(client, ns, name);
          const requeued = r.status?.phase === "Queued" && r.status.lastFailure?.attempt === 1 && r.status.lastFailure.reason === "HeartbeatTimeout";
          return requeued || r.status?.phase === "NeedsHumanIntervention" ? r : undefined;
        });
        return { name, phase: run.status.phase, latencyMs: deleted.seenAt - (hungDeadlines.get(name) as number) };
      }),
    );
    killed.catch(() => {}); // awaited below; not unhandled meanwhile
    await writeAll(plan.filter((p) => !hung.includes(p.run)));
    const fuzzMs = Date.now() - started;

    let kills: Awaited<typeof killed>;
    try {
      kills = await killed;
    } finally {
      fuzzing = false;
      await watching;
    }

    // No healthy run was killed.
    for (const name of healthy) {
      const r = await getRun(client, ns, name);
      expect(r.status, name).toMatchObject({ attempt: 1, restarts: 0 });
      expect(["Planning", "ExecutingTool"], `${name} phase`).toContain(r.status.phase);
      expect(await untouched(env, pods.get(name).metadata.name), `${name}'s pod untouched`).toBe(true);
    }
    await healthyBeats.stop();
    expect(healthyBeats.errors).toEqual([]);

    // The operator lived through it, healthy, and no reconcile got stuck.
    expect(env.operator.child.exitCode).toBeNull();
    expect(env.operator.child.signalCode).toBeNull();
    const health = await fetch(`${env.operator.healthUrl}/healthz`);
    expect(health.status).toBe(200);
    expect((await health.text()).trim()).toBe("ok");
    expect(unhealthy).toEqual([]);
    expect(longestRunning).toBeLessThan(STUCK_LIMIT_S);
    expect(failures).toEqual([]);
    expect(accepted + refused).toBe(PAYLOADS);
    expect(accepted).toBeGreaterThan(0);
    expect(refused).toBeGreaterThan(0);

    const metrics = await env.operator.metrics();
    const hungKilled = (seriesValue(metrics, "watchdog_hung_sandboxes_killed_total") ?? 0) - killedBefore;
    let podsDeleted = 0;
    for (const name of [...fuzzed, ...hung]) if (!(await untouched(env, pods.get(name).metadata.name))) podsDeleted++;
    const phases = await Promise.all(fuzzed.map(async (name) => {
      const r = await getRun(client, ns, name);
      return `${r.status?.phase}${r.status?.reason ? `/${r.status.reason}` : ""}`;
    }));
    console.log(
      [
        `fuzz (seed ${seed}): ${PAYLOADS} payloads written in ${fuzzMs} ms into ${fuzzed.length} fuzzed, ${hung.length} hung (before they stopped) and ${healthy.length} healthy runs: ${accepted} accepted, ${refused} refused by the API server`,
        `kills: ${hungKilled} hung sandboxes killed (watchdog_hung_sandboxes_killed_total), ${podsDeleted} pods of fuzzed and hung runs deleted; hung set ${kills.map((k) => `${k.name} ${k.phase} ${k.latencyMs} ms after its deadline`).join(", ")}`,
        `fuzzed runs end in ${Object.entries(phases.reduce<Record<string, number>>((acc, p) => ({ ...acc, [p]: (acc[p] ?? 0) + 1 }), {})).map(([p, n]) => `${p} ${n}`).join(", ")}`,
        `operator: /healthz ok in ${healthChecks} checks, longest running reconcile ${longestRunning.toFixed(3)} s; total ${Date.now() - started} ms`,
      ].join("\n"),
    );
  });
});
