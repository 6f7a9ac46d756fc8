// Liveness on the server's clock (rule 2). A heartbeat's age is measured from when the API server
// accepted the sandbox's write (the managedFields time of status.heartbeat.time), or from when this
// operator saw it change; never from heartbeat.time alone, which is the sandbox's own clock. A
// sandbox clock off by an hour therefore neither kills a healthy run nor keeps a dead one alive.
// The sandbox's other times (its activity, for the stall timer) are moved onto the server's clock
// by the offset between its heartbeat time and the server's acceptance of it.
import { Heartbeat } from "../api/agentrun.ts";
import { HEARTBEAT_FIELD, serverWriteTime } from "../api/managed-fields.ts";
import { toMillis } from "../api/timestamp.ts";
import { reintroduced } from "../defects.ts";

export interface CurrentHeartbeat {
  heartbeat: Heartbeat;
  /** When the server accepted it (or the operator saw it), ms on the server's clock. */
  acceptedAt?: number;
  /** Sandbox clock minus server clock, ms (0 when unknown). */
  skewMs: number;
}

/** managedFields times have whole seconds: the true time is up to this much later. */
export const SERVER_TIME_RESOLUTION_MS = 999;

/**
 * The current attempt's heartbeat with its server time. `serverTime` is the managedFields time of
 * the heartbeat field (whole seconds); `seenAt` is the operator's own observation of this heartbeat
 * value. Both are upper bounds of the moment the write was accepted: the server's time rounded up
 * to the end of its second, and the operator's sight of the watch event, which can only come after
 * it. For deadlines the earlier of the two is taken, so that a healthy sandbox is never killed
 * early and a dead one waits for no more than the watch's delay instead of up to a whole second;
 * a restarted operator, which saw nothing, uses the server's time and kills at most a second
 * later. For the sandbox's clock offset the server's time is taken as it is (a nudge may then come
 * up to a second early, never late).
 */
export function currentHeartbeat(heartbeat: Heartbeat | undefined, attempt: number, serverTime: number | undefined, seenAt: number | undefined): CurrentHeartbeat | undefined {
  if (!heartbeat || heartbeat.attempt !== attempt) return undefined; // a stale attempt's heartbeat is ignored
  const at = serverTime ?? seenAt;
  const sandboxTime = toMillis(heartbeat.time);
  const skewMs = at !== undefined && sandboxTime !== undefined ? sandboxTime - at : 0;
  if (at === undefined) return { heartbeat, skewMs };
  if (reintroduced("sandbox-clock") && sandboxTime !== undefined) return { heartbeat, acceptedAt: sandboxTime, skewMs: 0 };
  const bounds = [serverTime !== undefined ? serverTime + SERVER_TIME_RESOLUTION_MS : undefined, seenAt].filter((t): t is number => t !== undefined);
  return { heartbeat, acceptedAt: Math.min(...bounds), skewMs };
}

/**
 * What the watchdog believed about the current attempt's liveness, kept by the controller between
 * events. It matters when a late write from an earlier attempt's sandbox replaces the current
 * heartbeat on the object (a merge patch replaces status.heartbeat as a whole): that write says
 * nothing about the current sandbox, and must neither make it look dead nor keep it alive.
 */
export interface LivenessMemory {
  runUid: string;
  attempt: number;
  /** The newest heartbeat of this attempt the operator saw, with its server time. */
  heartbeat?: CurrentHeartbeat;
  /**
   * When a late write of an earlier attempt was accepted while nothing of this attempt was
   * remembered (a fresh operator): the current sandbox is taken as alive then, once, so that the
   * write cannot get a healthy sandbox killed, and repeated late writes cannot keep a dead one alive.
   */
  erasedAt?: number;
}

export interface Belief {
  heartbeat?: CurrentHeartbeat;
  erasedAt?: number;
  memory?: LivenessMemory;
}

export interface LivenessFacts {
  runUid: string;
  attempt: number;
  heartbeat: Heartbeat | undefined;
  serverTime: number | undefined;
  seenAt: number | undefined;
}

/** The heartbeat the watchdog may believe for the current attempt, and what to remember of it. */
export function believe(facts: LivenessFacts, memory: LivenessMemory | undefined): Belief {
  const { runUid, attempt, heartbeat } = facts;
  const current = currentHeartbeat(heartbeat, attempt, facts.serverTime, facts.seenAt);
  if (current) return { heartbeat: current, memory: current.acceptedAt !== undefined ? { runUid, attempt, heartbeat: current } : undefined };
  const mine = memory?.runUid === runUid && memory.attempt === attempt ? memory : undefined;
  // Only an earlier attempt's heartbeat is stood in for: a missing or unreadable one is the current
  // sandbox's own doing, and a heartbeat ahead of the run is reported, not believed.
  if (!heartbeat || heartbeat.attempt >= attempt) return mine ? { memory: mine } : {};
  if (mine) return { ...(mine.heartbeat ? { heartbeat: mine.heartbeat } : {}), ...(mine.erasedAt !== undefined ? { erasedAt: mine.erasedAt } : {}), memory: mine };
  // An earlier attempt's heartbeat: left from before this attempt began (then it is older than this
  // attempt's pod, and changes nothing), or a late write that replaced this attempt's.
  const at = facts.serverTime !== undefined ? facts.serverTime + SERVER_TIME_RESOLUTION_MS : facts.seenAt;
  return at === undefined ? {} : { erasedAt: at, memory: { runUid, attempt, erasedAt: at } };
}

/** The facts of `believe` from a run as read (raw JSON), for a controller that watches runs. */
export function livenessFacts(run: unknown, seenAt: number | undefined, serverTime?: number): LivenessFacts | undefined {
  const object = run as { metadata?: { uid?: unknown }; status?: { attempt?: unknown; heartbeat?: unknown } } | undefined;
  const runUid = object?.metadata?.uid;
  if (typeof runUid !== "string") return undefined;
  const attempt = typeof object?.status?.attempt === "number" ? object.status.attempt : 0;
  const parsed = Heartbeat.safeParse(object?.status?.heartbeat);
  return { runUid, attempt, heartbeat: parsed.success ? parsed.data : undefined, serverTime: serverTime ?? serverWriteTime(run, HEARTBEAT_FIELD), seenAt };
}

/** A time the sandbox reported, on the server's clock. */
export function onServerClock(hb: CurrentHeartbeat | undefined, sandboxTime: string | undefined): number | undefined {
  const t = toMillis(sandboxTime);
  return t === undefined ? undefined : t - (hb?.skewMs ?? 0);
}

/**
 * The last sign of life of an active sandbox: its newest accepted heartbeat, or the start of its
 * agent container (or, when later, the moment the run named its pod) when it has not heartbeated
 * yet, or the moment a late write erased what it had (see LivenessMemory). Undefined while the
 * agent has not started
 * (startTimeout covers that).
 */
export function lastSignOfLife(hb: CurrentHeartbeat | undefined, agentStartedAt: number | undefined, erasedAt?: number, namedAt?: number): number | undefined {
  const times = [hb?.acceptedAt, agentStartedAt, erasedAt, namedAt].filter((t): t is number => t !== undefined);
  return times.length ? Math.max(...times) : undefined;
}

/**
 * Whether the current heartbeat was accepted after the pod was created, whatever the rounding of
 * either time: then this pod's sandbox wrote it (the attempt's earlier pod, if any, was gone before
 * this one was made: rule 9), after its agent had started, and the agent's start says nothing
 * more of its liveness. It matters because the start is known only as an upper bound that moves:
 * the time of the kubelet's newest write of the pod's container states, which the kubelet makes
 * again for reasons of its own (after an API server restart, when a paused node comes back). To an
 * operator that did not see the start (restarted, or given the run's shard), that write would
 * pass for the start and put off a hung sandbox's kill by up to a whole heartbeat timeout. A
 * heartbeat that may predate the pod (the same attempt resumed in a new sandbox after an approval)
 * leaves the start in force.
 */
export function heartbeatAfterPodCreated(hb: CurrentHeartbeat | undefined, podCreatedAt: number): boolean {
  // acceptedAt is at most a second past the true moment; creationTimestamp is at most a second before it.
  return hb?.acceptedAt !== undefined && hb.acceptedAt - SERVER_TIME_RESOLUTION_MS > podCreatedAt + SERVER_TIME_RESOLUTION_MS;
}

/** Where the API server records the kubelet's (or any node agent's) writes of a pod's container states. */
const CONTAINER_STATES_FIELD = ["f:status", "f:containerStatuses"];

/**
 * When the agent container's start was known on the API server's clock, for a pod whose agent has
 * started (rule 2: the node's clock never decides a kill). Upper bounds of the moment the API server
 * accepted the kubelet's report of it: the time of the newest write of the pod's container states
 * (managedFields: whole seconds, rounded up; a later status write only moves it later), and this
 * operator's own sight of the running container. The earlier of the two is taken. With neither
 * (an API server that keeps no managedFields, seen by an operator that was not watching), the
 * kubelet's own record is the only one, kept within the pod's life.
 */
export function agentStartOnServer(pod: unknown, view: { createdAt: number; agent: { startedAt?: number } }, seenAt: number | undefined): number | undefined {
  if (view.agent.startedAt === undefined) return undefined;
  const written = serverWriteTime(pod, CONTAINER_STATES_FIELD);
  const bounds = [written !== undefined ? written + SERVER_TIME_RESOLUTION_MS : undefined, seenAt].filter((t): t is number => t !== undefined);
  if (bounds.length) return Math.max(view.createdAt, Math.min(...bounds));
  return Math.max(view.createdAt, view.agent.startedAt);
}
