// Which pods are the run's and which may still run (sandboxes.ts, rule 9), in its own words: pods
// belong by owner uid or by the uid the status tracks; a deleted pod is confirmed gone by its final
// phase, its final state, its node's disappearance or shutdown, or its node's contact since for
// longer than the longest grace its kubelet may use; until then the run is busy, wakes up to look
// again, and says after unconfirmedAfter why it still waits.
import { describe, expect, it } from "vitest";
import { MAX_TERMINATING, type TerminatingPod } from "../../../operator/api/agentrun.ts";
import { resolveWatchdog, toSettings } from "../../../operator/api/defaults.ts";
import { isoSeconds } from "../../../operator/api/timestamp.ts";
import { podView, type NodeView, type PodView } from "../../../operator/watchdog/observe.ts";
import {
  CONTACT_MARGIN_MS,
  CONTACT_POLL_MS,
  entryFor,
  longestGraceMs,
  ownedPods,
  sandboxes,
  vanishedEntry,
  type SandboxInputs,
} from "../../../operator/watchdog/sandboxes.ts";
import { OWNER, T0, pod } from "../fixtures.ts";

const S = 1000;
const M = 60 * S;
const settings = toSettings(resolveWatchdog(undefined)); // unconfirmedAfter 2m
const GRACE_MS = 30 * S; // the default pod's grace, deletion's and own

const view = (attempt: number, overrides: Parameters<typeof pod>[1] = {}): PodView => podView(pod(attempt, overrides));
/** Attempt n's pod in a final phase with its agent stopped. */
const finished = (attempt: number, overrides: Parameters<typeof pod>[1] = {}): PodView => view(attempt, { phase: "Failed", exitCode: 1, ...overrides });
const inputs = (overrides: Partial<SandboxInputs> = {}): SandboxInputs => ({ runUid: "uid-r", pods: [], tombstones: new Map(), nodes: undefined, terminating: [], now: T0, settings, ...overrides });
const node = (overrides: Partial<NodeView> = {}): NodeView => ({ name: "node-1", ready: "True", outOfService: false, ...overrides });
const nodes = (...list: NodeView[]) => new Map(list.map((n) => [n.name, n]));
/** Attempt 1's pod, deleted at T0 with the default grace and gone from the API server. */
const deleted = (extra: Partial<TerminatingPod> = {}): TerminatingPod => ({ name: "r-1", uid: "uid-pod-1", since: isoSeconds(T0), gracePeriodSeconds: 30, podGracePeriodSeconds: 30, ...extra });

describe("the run's pods", () => {
  it("are those its uid controls and those its status tracks by uid, never another run's of the same name", () => {
    const mine = view(1);
    const earlierRun = view(2, { owner: { ...OWNER, uid: "uid-earlier" } });
    const quarantined = view(3, { owner: null });
    expect(ownedPods("uid-r", [mine, earlierRun, quarantined])).toEqual([mine]);
    expect(ownedPods("uid-r", [mine, earlierRun, quarantined], new Set(["uid-pod-3"]))).toEqual([mine, quarantined]);
    // A pod without a uid is never taken for a tracked one.
    const noUid = { ...quarantined, uid: undefined };
    expect(ownedPods("uid-r", [noUid], new Set([""]))).toEqual([]);
    expect(ownedPods(undefined, [mine, { ...earlierRun, ownerUid: undefined }])).toEqual([]);
  });

  it("keep the run busy while one of them may run, and not once they are all finished", () => {
    expect(sandboxes(inputs({ pods: [view(1)] }))).toMatchObject({ busy: true, terminating: [], unconfirmed: [], confirmed: [] });
    expect(sandboxes(inputs({ pods: [finished(1)] })).busy).toBe(false);
    expect(sandboxes(inputs({ pods: [view(1, { owner: { ...OWNER, uid: "uid-earlier" } })] })).busy).toBe(false);
    expect(sandboxes(inputs()).busy).toBe(false);
  });
});

describe("a pod being deleted", () => {
  it("is tracked as terminating whoever deleted it, with its node, and keeps the run busy", () => {
    const going = view(1, { deleting: true, nodeName: "node-1" });
    const result = sandboxes(inputs({ pods: [going], now: T0 + 5 * S }));
    const entry = { name: "r-1", uid: "uid-pod-1", since: isoSeconds(T0 - GRACE_MS), gracePeriodSeconds: 30, podGracePeriodSeconds: 30, nodeName: "node-1" };
    expect(result.terminating).toEqual([entry]);
    expect(result.unconfirmed).toEqual([{ entry, pod: going, overdue: false, reason: "NodeUnreachable" }]);
    expect(result.busy).toBe(true);
  });

  it("is tracked beside the pods the status already lists", () => {
    const result = sandboxes(inputs({ pods: [view(2, { deleting: true })], terminating: [deleted({ nodeName: "node-1" })] }));
    expect(result.terminating.map((e) => e.uid)).toEqual(["uid-pod-1", "uid-pod-2"]);
  });

  it("is tracked once, however often the status lists it", () => {
    const result = sandboxes(inputs({ pods: [view(1, { deleting: true })], terminating: [deleted(), deleted()] }));
    expect(result.terminating).toHaveLength(1);
    expect(result.unconfirmed).toHaveLength(1);
  });

  it("takes the node it is bound to into its entry once it has one", () => {
    const result = sandboxes(inputs({ pods: [view(1, { deleting: true, nodeName: "node-2" })], terminating: [deleted()] }));
    expect(result.terminating[0]!.nodeName).toBe("node-2");
    const kept = sandboxes(inputs({ pods: [view(1, { deleting: true, nodeName: "node-2" })], terminating: [deleted({ nodeName: "node-1" })] }));
    expect(kept.terminating[0]!.nodeName).toBe("node-1");
  });

  it("is confirmed gone once it reached a final phase with its containers stopped", () => {
    const result = sandboxes(inputs({ pods: [finished(1, { deleting: true })], terminating: [deleted()] }));
    expect(result).toMatchObject({ terminating: [], unconfirmed: [], confirmed: [deleted()], busy: false });
  });

  it("waits for the kubelet on a Ready node (TerminationPending), and calls a node that is not Ready unreachable", () => {
    const going = view(1, { deleting: true, nodeName: "node-1" });
    expect(sandboxes(inputs({ pods: [going], nodes: nodes(node()) })).unconfirmed[0]!.reason).toBe("TerminationPending");
    expect(sandboxes(inputs({ pods: [going], nodes: nodes(node({ ready: "Unknown" })) })).unconfirmed[0]!.reason).toBe("NodeUnreachable");
    const withNode = sandboxes(inputs({ pods: [going], nodes: nodes(node()) })).unconfirmed[0]!;
    expect(withNode.node).toEqual(node());
  });

  it("is overdue unconfirmedAfter after its deletion, and wakes the run then, not after", () => {
    const going = view(1, { deleting: true });
    const since = T0 - GRACE_MS;
    const before = sandboxes(inputs({ pods: [going], now: since + 2 * M - 1 }));
    expect(before.unconfirmed[0]!.overdue).toBe(false);
    expect(before.wakeAt).toEqual([since + 2 * M]);
    const at = sandboxes(inputs({ pods: [going], now: since + 2 * M }));
    expect(at.unconfirmed[0]!.overdue).toBe(true);
    expect(at.wakeAt).toEqual([]);
  });

  it("counts a terminating entry with no readable time as deleted now", () => {
    const result = sandboxes(inputs({ terminating: [deleted({ since: "not a time" as string, nodeName: "node-1" })], now: T0 }));
    expect(result.unconfirmed[0]!.overdue).toBe(false);
    expect(result.wakeAt).toContain(T0 + 2 * M);
  });

  it("keeps only the newest terminating entries the status has room for", () => {
    const many = Array.from({ length: MAX_TERMINATING + 2 }, (_, i) => deleted({ name: `r-${i}`, uid: `uid-${i}`, nodeName: "node-1" }));
    const result = sandboxes(inputs({ terminating: many }));
    expect(result.terminating.map((e) => e.uid)).toEqual(many.slice(-MAX_TERMINATING).map((e) => e.uid));
    expect(result.unconfirmed).toHaveLength(MAX_TERMINATING + 2);
  });
});

describe("a pod whose object disappeared", () => {
  const bound = deleted({ nodeName: "node-1" });

  it("is confirmed gone by a final state that shows its containers stopped, or that it never had a node", () => {
    const tomb = (p: PodView) => new Map([["uid-pod-1", p]]);
    expect(sandboxes(inputs({ terminating: [bound], tombstones: tomb(finished(1)) })).confirmed).toEqual([bound]);
    // The kubelet's own final delete: every container terminated, the phase not reported yet.
    const stopped = podView({ ...pod(1, { nodeName: "node-1" }), status: { phase: "Running", containerStatuses: [{ name: "agent", state: { terminated: { exitCode: 0 } } }] } });
    expect(sandboxes(inputs({ terminating: [bound], tombstones: tomb(stopped) })).confirmed).toEqual([bound]);
    expect(sandboxes(inputs({ terminating: [deleted()], tombstones: tomb(view(1)) })).confirmed).toEqual([deleted()]);
  });

  it("is not taken for another of the run's pods that is still there", () => {
    // Attempt 2's pod runs; attempt 1's vanished from a node that is gone since.
    const result = sandboxes(inputs({ pods: [view(2)], terminating: [bound], nodes: nodes(node({ name: "node-2" })) }));
    expect(result.confirmed).toEqual([bound]);
    expect(result.unconfirmed).toEqual([]);
    expect(result.busy).toBe(true);
  });

  it("that may still run is looked for on the node its final state names", () => {
    const tomb = new Map([["uid-pod-1", view(1, { nodeName: "node-2" })]]);
    const result = sandboxes(inputs({ terminating: [deleted()], tombstones: tomb, nodes: nodes(node({ name: "node-2", lastContact: T0 - S })) }));
    expect(result.terminating).toEqual([deleted({ nodeName: "node-2", vanishedAt: isoSeconds(T0) })]);
  });

  it("is confirmed gone when its node is gone, or declared shut down", () => {
    expect(sandboxes(inputs({ terminating: [bound], nodes: nodes(node({ name: "node-2" })) })).confirmed).toEqual([bound]);
    expect(sandboxes(inputs({ terminating: [bound], nodes: nodes(node({ outOfService: true, ready: "False" })) })).confirmed).toEqual([bound]);
  });

  it("is not confirmed when the operator cannot see nodes: it records when it vanished and looks again after the poll", () => {
    const result = sandboxes(inputs({ terminating: [bound], now: T0 + 3 * S }));
    expect(result.confirmed).toEqual([]);
    expect(result.terminating).toEqual([{ ...bound, vanishedAt: isoSeconds(T0 + 3 * S) }]);
    expect(result.wakeAt).toContain(T0 + 3 * S + CONTACT_POLL_MS);
    // The time it vanished is kept from the first sighting on.
    const later = sandboxes(inputs({ terminating: result.terminating, now: T0 + 20 * S }));
    expect(later.terminating[0]!.vanishedAt).toBe(isoSeconds(T0 + 3 * S));
  });

  it("waits while its node has not been heard from since it vanished", () => {
    const vanished = { ...bound, vanishedAt: isoSeconds(T0) };
    for (const lastContact of [undefined, T0 - S, T0]) {
      const result = sandboxes(inputs({ terminating: [vanished], nodes: nodes(node({ ready: "Unknown", ...(lastContact === undefined ? {} : { lastContact }) })), now: T0 + M }));
      expect(result.terminating, `last contact ${String(lastContact)}`).toEqual([vanished]);
      expect(result.wakeAt).toContain(T0 + M + CONTACT_POLL_MS);
    }
  });

  it("is confirmed gone once its node has been in contact since for its grace and the margin, not a moment before", () => {
    const vanished = { ...bound, vanishedAt: isoSeconds(T0) };
    const back = T0 + 10 * M;
    const done = back + GRACE_MS + CONTACT_MARGIN_MS;
    const heard = nodes(node({ lastContact: back }));
    const waiting = sandboxes(inputs({ terminating: [vanished], nodes: heard, now: done - 1 }));
    expect(waiting.terminating).toEqual([{ ...vanished, contactAt: isoSeconds(back) }]);
    expect(waiting.wakeAt).toContain(done);
    expect(sandboxes(inputs({ terminating: [vanished], nodes: heard, now: done })).confirmed).toEqual([vanished]);
  });

  it("counts from the first contact it recorded, whatever the node says later", () => {
    const contacted = { ...bound, vanishedAt: isoSeconds(T0), contactAt: isoSeconds(T0 + M) };
    const done = T0 + M + GRACE_MS + CONTACT_MARGIN_MS;
    const later = nodes(node({ lastContact: T0 + 5 * M }));
    const waiting = sandboxes(inputs({ terminating: [contacted], nodes: later, now: done - 1 }));
    expect(waiting.terminating).toEqual([contacted]);
    expect(waiting.wakeAt).toContain(done);
    expect(sandboxes(inputs({ terminating: [contacted], nodes: later, now: done })).confirmed).toEqual([contacted]);
  });

  it("waits the longer of the deletion's grace and the pod's own", () => {
    const vanished = { ...bound, vanishedAt: isoSeconds(T0), contactAt: isoSeconds(T0 + M), gracePeriodSeconds: 5, podGracePeriodSeconds: 120 };
    const done = T0 + M + 120 * S + CONTACT_MARGIN_MS;
    expect(sandboxes(inputs({ terminating: [vanished], nodes: nodes(node()), now: done - 1 })).confirmed).toEqual([]);
    expect(sandboxes(inputs({ terminating: [vanished], nodes: nodes(node()), now: done })).confirmed).toEqual([vanished]);
  });
});

describe("a pod that vanished unseen with no node on record", () => {
  const unbound = deleted({ vanishedAt: isoSeconds(T0) });

  it("looks again after the poll when the operator cannot see nodes", () => {
    const result = sandboxes(inputs({ terminating: [deleted()], now: T0 + S }));
    expect(result.terminating).toEqual([deleted({ vanishedAt: isoSeconds(T0 + S) })]);
    expect(result.wakeAt).toContain(T0 + S + CONTACT_POLL_MS);
  });

  it("waits while any node in service has not been heard from since", () => {
    const list = nodes(node({ lastContact: T0 + M }), node({ name: "node-2", lastContact: T0 }));
    const result = sandboxes(inputs({ terminating: [unbound], nodes: list, now: T0 + 5 * M }));
    expect(result.terminating).toEqual([unbound]);
    expect(result.wakeAt).toContain(T0 + 5 * M + CONTACT_POLL_MS);
    const silent = nodes(node({ lastContact: T0 + M }), node({ name: "node-2" }));
    expect(sandboxes(inputs({ terminating: [unbound], nodes: silent, now: T0 + 5 * M })).terminating).toEqual([unbound]);
  });

  it("is confirmed gone once every node in service has been heard from, counting from the last of them", () => {
    const list = nodes(node({ lastContact: T0 + M }), node({ name: "node-2", lastContact: T0 + 2 * M }), node({ name: "node-3", outOfService: true }));
    const done = T0 + 2 * M + GRACE_MS + CONTACT_MARGIN_MS;
    const waiting = sandboxes(inputs({ terminating: [unbound], nodes: list, now: done - 1 }));
    expect(waiting.terminating).toEqual([{ ...unbound, contactAt: isoSeconds(T0 + 2 * M) }]);
    expect(waiting.wakeAt).toContain(done);
    expect(sandboxes(inputs({ terminating: [unbound], nodes: list, now: done })).confirmed).toEqual([unbound]);
  });

  it("counts from the contact it recorded, even when nodes cannot be seen", () => {
    const contacted = { ...unbound, contactAt: isoSeconds(T0 + M) };
    const done = T0 + M + GRACE_MS + CONTACT_MARGIN_MS;
    const waiting = sandboxes(inputs({ terminating: [contacted], now: done - 1 }));
    expect(waiting.terminating).toEqual([contacted]);
    expect(waiting.wakeAt).toContain(done);
    expect(sandboxes(inputs({ terminating: [contacted], now: done })).confirmed).toEqual([contacted]);
  });
});

describe("the grace a kubelet may use", () => {
  it("is the longer of the deletion's and the pod's own, 30 s for either unknown, and never under the kubelet's floor of 2 s", () => {
    expect(longestGraceMs({ gracePeriodSeconds: 5, podGracePeriodSeconds: 60 })).toBe(60 * S);
    expect(longestGraceMs({ gracePeriodSeconds: 90, podGracePeriodSeconds: 10 })).toBe(90 * S);
    expect(longestGraceMs({ gracePeriodSeconds: 0, podGracePeriodSeconds: 0 })).toBe(2 * S);
    expect(longestGraceMs({ gracePeriodSeconds: 1 })).toBe(30 * S);
    expect(longestGraceMs({ podGracePeriodSeconds: 1 })).toBe(30 * S);
  });
});

describe("a terminating entry", () => {
  it("of a pod being deleted counts from when its deletion was asked for, with the deletion's grace and the pod's own", () => {
    const going = view(1, { deleting: true, nodeName: "node-1" });
    expect(entryFor(going, T0 + M)).toEqual({ name: "r-1", uid: "uid-pod-1", since: isoSeconds(T0 - GRACE_MS), gracePeriodSeconds: 30, podGracePeriodSeconds: 30, nodeName: "node-1" });
    // A deletion stamped ahead of the operator's clock counts from now.
    expect(entryFor(going, T0 - M).since).toBe(isoSeconds(T0 - M));
  });

  it("of a pod this decision deletes counts from now with the grace it gives, in whole seconds, never negative", () => {
    const p = { ...view(1), podGracePeriodSeconds: 12.5 };
    expect(entryFor(p, T0 + S, 2.5)).toEqual({ name: "r-1", uid: "uid-pod-1", since: isoSeconds(T0 + S), gracePeriodSeconds: 3, podGracePeriodSeconds: 13 });
    expect(entryFor({ ...p, podGracePeriodSeconds: -4 }, T0, -1)).toMatchObject({ gracePeriodSeconds: 0, podGracePeriodSeconds: 0 });
    expect(entryFor({ ...p, uid: undefined }, T0).uid).toBe("");
    // A pod marked deleting with no time of its deletion counts from now.
    expect(entryFor({ ...p, deleting: true }, T0 + S).since).toBe(isoSeconds(T0 + S));
    expect("nodeName" in entryFor(p, T0)).toBe(false);
  });

  it("of a pod that vanished unasked carries the grace the run recorded at its creation, 30 s when it recorded none", () => {
    expect(vanishedEntry("r-1", "uid-pod-1", undefined, T0)).toEqual({ name: "r-1", uid: "uid-pod-1", since: isoSeconds(T0), gracePeriodSeconds: 30, podGracePeriodSeconds: 30 });
    expect(vanishedEntry("r-1", "uid-pod-1", "node-1", T0, 45)).toEqual({ name: "r-1", uid: "uid-pod-1", since: isoSeconds(T0), gracePeriodSeconds: 45, podGracePeriodSeconds: 45, nodeName: "node-1" });
  });
});
