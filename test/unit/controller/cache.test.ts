import { describe, expect, it } from "vitest";
import { trimPod, trimRun } from "../../../operator/controller/trim.ts";
import { caughtUp, Written, WRITTEN_TTL_MS } from "../../../operator/controller/written.ts";
import { podView } from "../../../operator/watchdog/observe.ts";
import { HEARTBEAT_FIELD, serverWriteTime } from "../../../operator/api/managed-fields.ts";

const run = (rv: string, phase = "Queued") => ({ metadata: { name: "r", namespace: "ns", resourceVersion: rv }, status: { phase } });
const pod = (name: string, rv: string, uid = `${name}-uid`, extra: Record<string, unknown> = {}) => ({ metadata: { name, resourceVersion: rv, uid, ...extra } });

describe("Written", () => {
  it("stands in for the cached run until the watch shows that version or a newer one", () => {
    const written = new Written();
    written.run("ns/r", run("12", "Starting"), 0);
    expect(written.currentRun("ns/r", run("10"), 1)?.status).toEqual({ phase: "Starting" });
    expect(written.currentRun("ns/r", run("12", "Starting"), 2)?.metadata).toMatchObject({ resourceVersion: "12" });
    // caught up: the cache is used again, whatever it says next
    expect(written.currentRun("ns/r", run("11", "Planning"), 3)?.status).toEqual({ phase: "Planning" });
  });

  it("gives way to a newer version written by someone else, and to time", () => {
    const written = new Written();
    written.run("ns/r", run("12", "Starting"), 0);
    expect(written.currentRun("ns/r", run("13", "Planning"), 1)?.status).toEqual({ phase: "Planning" });
    written.run("ns/r", run("20", "Starting"), 0);
    expect(written.currentRun("ns/r", run("15"), WRITTEN_TTL_MS + 1)?.status).toEqual({ phase: "Queued" });
  });

  it("shows a pod it created before the watch does, and a deletion it asked for in place of the cached pod", () => {
    const written = new Written();
    written.pod("ns/r", pod("r-1", "30"), 0);
    expect(written.currentPods("ns/r", [], 1).map((p) => (p.metadata as { name: string }).name)).toEqual(["r-1"]);
    written.pod("ns/r", pod("r-1", "31", "r-1-uid", { deletionTimestamp: "2026-12-01T00:00:00Z" }), 2);
    const [shown] = written.currentPods("ns/r", [pod("r-1", "30")], 3);
    expect((shown?.metadata as { deletionTimestamp?: string }).deletionTimestamp).toBeDefined();
    // the watch caught up
    expect(written.currentPods("ns/r", [pod("r-1", "31")], 4)).toEqual([pod("r-1", "31")]);
  });

  it("drops a stand-in whose pod the watch saw deleted, but not for an older pod of the same name", () => {
    const written = new Written();
    written.pod("ns/r", pod("r-1", "30", "new"), 0);
    written.podGone("ns/r", pod("r-1", "20", "old"));
    expect(written.currentPods("ns/r", [], 1)).toHaveLength(1);
    written.podGone("ns/r", pod("r-1", "30", "new"));
    expect(written.currentPods("ns/r", [], 2)).toHaveLength(0);
  });

  it("never brings back a pod whose deletion the watch showed before the write's answer came", () => {
    const written = new Written();
    written.podGone("ns/r", pod("r-1", "40", "u1"), 0);
    written.pod("ns/r", pod("r-1", "39", "u1", { deletionTimestamp: "2026-12-01T00:00:00Z" }), 1);
    expect(written.currentPods("ns/r", [], 2)).toHaveLength(0);
    // a new pod of the same name is another uid
    written.pod("ns/r", pod("r-1", "41", "u2"), 3);
    expect(written.currentPods("ns/r", [], 4)).toHaveLength(1);
  });

  it("compares resource versions as numbers, and trusts the cache when they are not", () => {
    expect(caughtUp(run("9"), run("10"))).toBe(false);
    expect(caughtUp(run("100"), run("99"))).toBe(true);
    expect(caughtUp(run("abc"), run("10"))).toBe(true);
    expect(caughtUp(undefined, run("10"))).toBe(false);
  });
});

describe("cache transforms", () => {
  it("keep the heartbeat's managedFields time and drop the rest", () => {
    const managedFields = [
      { manager: "agent-watchdog", operation: "Update", subresource: "status", time: "2026-12-01T10:00:00Z", fieldsV1: { "f:status": { "f:phase": {}, "f:conditions": {} } } },
      { manager: "agent-watchdog-sandbox", operation: "Update", subresource: "status", time: "2026-12-01T10:00:07Z", fieldsV1: { "f:status": { "f:heartbeat": { "f:time": {}, "f:state": {} }, "f:toolCalls": {} } } },
    ];
    const full = { metadata: { name: "r", resourceVersion: "5", managedFields }, spec: { a: 1 }, status: { heartbeat: { time: "x" } } };
    const trimmed = trimRun(full);
    expect(serverWriteTime(trimmed, HEARTBEAT_FIELD)).toBe(serverWriteTime(full, HEARTBEAT_FIELD));
    expect((trimmed.metadata as { managedFields: unknown[] }).managedFields).toHaveLength(1);
    expect(JSON.stringify(trimmed).length).toBeLessThan(JSON.stringify(full).length);
    expect(trimmed.spec).toEqual(full.spec);
    expect((trimRun({ metadata: { name: "r", managedFields: [managedFields[0]] } }).metadata as Record<string, unknown>).managedFields).toBeUndefined();
  });

  it("keep of a pod everything the core reads", () => {
    const full = {
      apiVersion: "v1",
      kind: "Pod",
      metadata: {
        name: "r-1",
        uid: "u",
        resourceVersion: "9",
        creationTimestamp: "2026-12-01T10:00:00Z",
        deletionTimestamp: "2026-12-01T10:01:00Z",
        deletionGracePeriodSeconds: 5,
        labels: { "watchdog.dev/run": "r", "watchdog.dev/attempt": "1" },
        ownerReferences: [{ uid: "run-uid", controller: true }],
        managedFields: [{ manager: "kubelet", fieldsV1: { "f:status": {} } }],
      },
      spec: {
        nodeName: "n",
        terminationGracePeriodSeconds: 12,
        containers: [{ name: "agent", image: "i", env: [{ name: "A", value: "x".repeat(1000) }] }],
        initContainers: [{ name: "proxy", restartPolicy: "Always", image: "p" }],
        volumes: [{ name: "v" }],
      },
      status: {
        phase: "Running",
        podIP: "10.0.0.1",
        conditions: [{ type: "Ready", status: "True" }],
        containerStatuses: [{ name: "agent", state: { terminated: { exitCode: 3, reason: "Error", startedAt: "2026-12-01T10:00:02Z" } } }],
        initContainerStatuses: [{ name: "proxy", state: { running: {} } }],
      },
    };
    const trimmed = trimPod(full);
    expect(podView(trimmed)).toEqual(podView(full));
    expect(podView(trimmed, "agent")).toEqual(podView(full, "agent"));
    expect(JSON.stringify(trimmed)).not.toContain("managedFields");
    expect(JSON.stringify(trimmed)).not.toContain("podIP");
    expect(JSON.stringify(trimmed).length).toBeLessThan(JSON.stringify(full).length / 2);
  });
});
