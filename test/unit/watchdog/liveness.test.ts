// Liveness on the server's clock (rule 2): a heartbeat's age counts from when the API server
// accepted it (managedFields, whole seconds) or when the operator saw it, never from the sandbox's
// own clock; a late write of an earlier attempt neither kills the current sandbox nor keeps it alive.
import { describe, expect, it } from "vitest";
import type { Heartbeat } from "../../../operator/api/agentrun.ts";
import {
  SERVER_TIME_RESOLUTION_MS,
  agentStartOnServer,
  believe,
  currentHeartbeat,
  heartbeatAfterPodCreated,
  lastSignOfLife,
  livenessFacts,
  onServerClock,
  type CurrentHeartbeat,
  type LivenessFacts,
} from "../../../operator/watchdog/liveness.ts";
import { T0, heartbeatManagedFields, iso, pod, run } from "../fixtures.ts";

const S = 1000;
const H = 60 * 60 * S;
/** A heartbeat of `attempt`, written by a sandbox whose clock reads `sandboxMs`. */
const beat = (attempt: number, sandboxMs = T0): Heartbeat => ({ time: iso(sandboxMs), attempt, state: "Planning" });
const facts = (fields: Partial<LivenessFacts>): LivenessFacts => ({ runUid: "uid-r", attempt: 2, heartbeat: undefined, serverTime: undefined, seenAt: undefined, ...fields });

describe("the current heartbeat", () => {
  it("is none without a heartbeat", () => {
    expect(currentHeartbeat(undefined, 2, T0, T0)).toBeUndefined();
  });

  it("is none for another attempt's heartbeat: a stale sandbox's word is ignored", () => {
    expect(currentHeartbeat(beat(1), 2, T0, T0)).toBeUndefined();
    expect(currentHeartbeat(beat(3), 2, T0, T0)).toBeUndefined();
  });

  it("without a server time or a sighting has no accepted time and no known skew", () => {
    expect(currentHeartbeat(beat(2, T0 + H), 2, undefined, undefined)).toEqual({ heartbeat: beat(2, T0 + H), skewMs: 0 });
  });

  it("counts from the end of the server's second, and measures the sandbox's skew from the server's time", () => {
    expect(currentHeartbeat(beat(2, T0 + H), 2, T0, undefined)).toEqual({ heartbeat: beat(2, T0 + H), acceptedAt: T0 + 999, skewMs: H });
  });

  it("counts from the operator's sighting when the server's time is unknown, and measures skew from it", () => {
    expect(currentHeartbeat(beat(2, T0 - H), 2, undefined, T0 + 300)).toEqual({ heartbeat: beat(2, T0 - H), acceptedAt: T0 + 300, skewMs: -H - 300 });
  });

  it("takes the sighting when it is earlier than the end of the server's second, the skew still from the server's time", () => {
    expect(currentHeartbeat(beat(2, T0), 2, T0, T0 + 400)).toEqual({ heartbeat: beat(2, T0), acceptedAt: T0 + 400, skewMs: 0 });
  });

  it("takes the end of the server's second when the sighting came later (a slow watch)", () => {
    expect(currentHeartbeat(beat(2, T0), 2, T0, T0 + 5 * S)).toMatchObject({ acceptedAt: T0 + 999 });
  });

  it("knows no skew for a heartbeat whose own time cannot be read, but still counts from the server's", () => {
    const hb = { ...beat(2), time: "garbage" };
    expect(currentHeartbeat(hb, 2, T0, undefined)).toEqual({ heartbeat: hb, acceptedAt: T0 + 999, skewMs: 0 });
  });

  it("the server's resolution is just under a second", () => {
    expect(SERVER_TIME_RESOLUTION_MS).toBe(999);
  });
});

describe("what the watchdog believes", () => {
  const remembered = (fields: { heartbeat?: CurrentHeartbeat; erasedAt?: number } = {}) => ({ runUid: "uid-r", attempt: 2, ...fields });
  const known: CurrentHeartbeat = { heartbeat: beat(2), acceptedAt: T0 + 999, skewMs: 0 };

  it("the current attempt's accepted heartbeat, and remembers it", () => {
    expect(believe(facts({ heartbeat: beat(2), serverTime: T0 }), undefined)).toStrictEqual({ heartbeat: known, memory: remembered({ heartbeat: known }) });
  });

  it("the current heartbeat with no time to count from, remembering nothing", () => {
    expect(believe(facts({ heartbeat: beat(2) }), remembered({ heartbeat: known }))).toStrictEqual({ heartbeat: { heartbeat: beat(2), skewMs: 0 }, memory: undefined });
  });

  it("with no heartbeat at all, keeps what it remembered of this run's attempt but does not stand in for it", () => {
    const memory = remembered({ heartbeat: known });
    expect(believe(facts({}), memory)).toStrictEqual({ memory });
  });

  it("with no heartbeat and nothing remembered, nothing", () => {
    expect(believe(facts({}), undefined)).toStrictEqual({});
  });

  it("ignores a memory of another run or another attempt", () => {
    expect(believe(facts({}), { ...remembered({ heartbeat: known }), runUid: "uid-other" })).toStrictEqual({});
    expect(believe(facts({}), { ...remembered({ heartbeat: known }), attempt: 1 })).toStrictEqual({});
  });

  it("does not believe a heartbeat ahead of the run's attempt, nor erase anything for it", () => {
    expect(believe(facts({ heartbeat: beat(3), serverTime: T0 }), undefined)).toStrictEqual({});
    const memory = remembered({ heartbeat: known });
    expect(believe(facts({ heartbeat: beat(3), serverTime: T0 }), memory)).toStrictEqual({ memory });
  });

  it("when a late write of an earlier attempt replaced the heartbeat, keeps believing the remembered one", () => {
    const memory = remembered({ heartbeat: known });
    expect(believe(facts({ heartbeat: beat(1), serverTime: T0 + 30 * S }), memory)).toStrictEqual({ heartbeat: known, memory });
  });

  it("when a late write replaces the heartbeat again, keeps the first erasure: repeated late writes cannot keep a dead sandbox alive", () => {
    const memory = remembered({ erasedAt: T0 + 999 });
    expect(believe(facts({ heartbeat: beat(1), serverTime: T0 + 60 * S }), memory)).toStrictEqual({ erasedAt: T0 + 999, memory });
  });

  it("a fresh operator that finds an earlier attempt's write takes the current sandbox as alive at that write's server time", () => {
    expect(believe(facts({ heartbeat: beat(1), serverTime: T0 }), undefined)).toStrictEqual({ erasedAt: T0 + 999, memory: remembered({ erasedAt: T0 + 999 }) });
  });

  it("or at its own sighting of the write, when the server's time is unknown", () => {
    expect(believe(facts({ heartbeat: beat(1), seenAt: T0 + 5 }), undefined)).toStrictEqual({ erasedAt: T0 + 5, memory: remembered({ erasedAt: T0 + 5 }) });
  });

  it("prefers the server's time to the sighting for an erasure", () => {
    expect(believe(facts({ heartbeat: beat(1), serverTime: T0, seenAt: T0 + 5 }), undefined).erasedAt).toBe(T0 + 999);
  });

  it("an earlier attempt's heartbeat with no time at all erases nothing", () => {
    expect(believe(facts({ heartbeat: beat(1) }), undefined)).toStrictEqual({});
  });
});

describe("the facts of a run as read", () => {
  const withHeartbeat = (hb: unknown, attempt: unknown = 2) => {
    const r = run({ status: { attempt, heartbeat: hb } });
    r.metadata.managedFields = heartbeatManagedFields(T0 + 1500);
    return r;
  };

  it("are the run's uid and attempt, its heartbeat, and the server's time of the heartbeat write", () => {
    expect(livenessFacts(withHeartbeat(beat(2)), T0 + 7)).toEqual({ runUid: "uid-r", attempt: 2, heartbeat: beat(2), serverTime: T0 + 1000, seenAt: T0 + 7 });
  });

  it("take a server time given by the caller over the run's managedFields", () => {
    expect(livenessFacts(withHeartbeat(beat(2)), undefined, T0 + 42)?.serverTime).toBe(T0 + 42);
  });

  it("have no heartbeat when what the sandbox wrote is not one", () => {
    expect(livenessFacts(withHeartbeat({ time: "x", attempt: -3, state: 42 }), undefined)?.heartbeat).toBeUndefined();
    // Nothing to read at all: no run, a run with no metadata.
    expect(livenessFacts(undefined, T0)).toBeUndefined();
    expect(livenessFacts({}, T0)).toBeUndefined();
  });

  it("count a run with no attempt number as attempt 0", () => {
    expect(livenessFacts(withHeartbeat(beat(2), "2"), undefined)?.attempt).toBe(0);
    expect(livenessFacts(run(), undefined)).toEqual({ runUid: "uid-r", attempt: 0, heartbeat: undefined, serverTime: undefined, seenAt: undefined });
  });

  it("are none for an object without a uid", () => {
    const r = run();
    delete r.metadata.uid;
    expect(livenessFacts(r, T0)).toBeUndefined();
    expect(livenessFacts({ metadata: { uid: 7 } }, T0)).toBeUndefined();
    expect(livenessFacts(undefined, T0)).toBeUndefined();
  });
});

describe("the server's clock for the sandbox's times", () => {
  it("moves a sandbox time by the heartbeat's skew", () => {
    expect(onServerClock({ heartbeat: beat(2), skewMs: H }, iso(T0 + H))).toBe(T0);
  });

  it("takes a sandbox time as it is when no heartbeat gives a skew", () => {
    expect(onServerClock(undefined, iso(T0))).toBe(T0);
  });

  it("places no time that cannot be read", () => {
    expect(onServerClock({ heartbeat: beat(2), skewMs: H }, undefined)).toBeUndefined();
    expect(onServerClock(undefined, "soon")).toBeUndefined();
  });
});

describe("a heartbeat certainly accepted after its pod was created", () => {
  const accepted = (at: number | undefined): CurrentHeartbeat => ({ heartbeat: beat(2), ...(at === undefined ? {} : { acceptedAt: at }), skewMs: 0 });

  it("is one whose second came after the pod's, whatever the rounding of either", () => {
    // Created in [T0, T0 + 1 s); accepted at most a second before its bound.
    expect(heartbeatAfterPodCreated(accepted(T0 + 2 * S), T0)).toBe(true);
    expect(heartbeatAfterPodCreated(accepted(T0 + 2 * SERVER_TIME_RESOLUTION_MS + 1), T0)).toBe(true);
    expect(heartbeatAfterPodCreated(accepted(T0 + 2 * SERVER_TIME_RESOLUTION_MS), T0)).toBe(false);
    expect(heartbeatAfterPodCreated(accepted(T0 + S - 1), T0)).toBe(false);
  });

  it("is not one that may be older than the pod, or has no time, or none at all", () => {
    expect(heartbeatAfterPodCreated(accepted(T0 - 10 * S), T0)).toBe(false);
    expect(heartbeatAfterPodCreated(accepted(undefined), T0)).toBe(false);
    expect(heartbeatAfterPodCreated(undefined, T0)).toBe(false);
  });
});

describe("the last sign of life", () => {
  it("is none before the agent started, heartbeated or was named", () => {
    expect(lastSignOfLife(undefined, undefined)).toBeUndefined();
    expect(lastSignOfLife({ heartbeat: beat(2), skewMs: 0 }, undefined)).toBeUndefined();
  });

  it("is the newest of the heartbeat's acceptance, the agent's start, an erasure and the naming of the pod", () => {
    const hb: CurrentHeartbeat = { heartbeat: beat(2), acceptedAt: T0 + 4, skewMs: 0 };
    expect(lastSignOfLife(hb, T0 + 1, T0 + 2, T0 + 3)).toBe(T0 + 4);
    expect(lastSignOfLife(hb, T0 + 5, T0 + 2, T0 + 3)).toBe(T0 + 5);
    expect(lastSignOfLife(hb, T0 + 1, T0 + 6, T0 + 3)).toBe(T0 + 6);
    expect(lastSignOfLife(hb, T0 + 1, T0 + 2, T0 + 7)).toBe(T0 + 7);
  });

  it("counts a time of 0 as a time", () => {
    expect(lastSignOfLife(undefined, 0)).toBe(0);
  });
});

describe("the agent's start on the server's clock", () => {
  const started = (startedAt: number | undefined, createdAt = T0) => ({ createdAt, agent: startedAt === undefined ? {} : { startedAt } });
  /** A pod whose kubelet's container-state write the API server recorded at `ms`. */
  const written = (ms: number) => {
    const p = pod(1);
    p.metadata.managedFields = [{ manager: "kubelet", operation: "Update", subresource: "status", time: iso(ms), fieldsV1: { "f:status": { "f:containerStatuses": {} } } }];
    return p;
  };

  it("is none while the agent has not started, whatever was written", () => {
    expect(agentStartOnServer(written(T0 + 10 * S), started(undefined), T0 + 10 * S)).toBeUndefined();
  });

  it("is the end of the server's second of the kubelet's write, not the node's own clock", () => {
    expect(agentStartOnServer(written(T0 + 10 * S), started(T0 + H), undefined)).toBe(T0 + 10 * S + 999);
  });

  it("is the operator's sighting when it is earlier than the write's second ends", () => {
    expect(agentStartOnServer(written(T0 + 10 * S), started(T0 + H), T0 + 10 * S + 100)).toBe(T0 + 10 * S + 100);
    expect(agentStartOnServer(pod(1), started(T0 + H), T0 + 20 * S)).toBe(T0 + 20 * S);
  });

  it("is never before the pod was created", () => {
    expect(agentStartOnServer(written(T0 - 10 * S), started(T0 - H, T0), undefined)).toBe(T0);
  });

  it("counts only the write of the container states, not a later write of anything else", () => {
    const p = written(T0 + 10 * S);
    (p.metadata.managedFields as unknown[]).push({ manager: "agent-watchdog", operation: "Update", time: iso(T0 + 50 * S), fieldsV1: { "f:metadata": { "f:labels": {} } } });
    expect(agentStartOnServer(p, started(T0 + H), undefined)).toBe(T0 + 10 * S + 999);
  });

  it("with no record on the server's clock, is the kubelet's own, kept within the pod's life", () => {
    expect(agentStartOnServer(pod(1), started(T0 + 5 * S), undefined)).toBe(T0 + 5 * S);
    expect(agentStartOnServer(pod(1), started(T0 - H), undefined)).toBe(T0);
  });
});
