// What the controller's caches keep of each object, as controller-runtime's cache transforms do:
// at 10,000 runs every kilobyte kept per object is 10 MB of heap. Only what the core reads stays.
import type { Json } from "../kube/client.ts";
import { HEARTBEAT_FIELD } from "../api/managed-fields.ts";

/** The managedFields path of the heartbeat time, nested as fieldsV1 has it: {f:status:{f:heartbeat:{f:time:{}}}}. */
const HEARTBEAT_FIELDS_V1: Json = HEARTBEAT_FIELD.reduceRight<Json>((inner, key) => ({ [key]: inner }), {});

function touchesHeartbeat(entry: Json): boolean {
  let fields = entry.fieldsV1 as Json | undefined;
  for (const key of HEARTBEAT_FIELD) fields = fields?.[key] as Json | undefined;
  return fields !== undefined;
}

/**
 * A run keeps everything but its managedFields, of which only the entries that wrote the
 * heartbeat time stay, with their time: that is when the API server accepted the heartbeat, the
 * one thing the core reads there.
 */
export function trimRun(run: Json): Json {
  const meta = run.metadata as Json | undefined;
  const managed = meta?.managedFields as Json[] | undefined;
  if (!meta || !managed) return run;
  const kept = managed.filter(touchesHeartbeat).map((e) => ({ manager: e.manager, operation: e.operation, subresource: e.subresource, time: e.time, fieldsV1: HEARTBEAT_FIELDS_V1 }));
  const { managedFields: _dropped, ...rest } = meta;
  return { ...run, metadata: kept.length ? { ...rest, managedFields: kept } : rest };
}

/** The managedFields path of a pod's container states (the kubelet's status writes). */
const CONTAINER_STATES_FIELDS_V1: Json = { "f:status": { "f:containerStatuses": {} } };

function touchesContainerStates(entry: Json): boolean {
  return ((entry.fieldsV1 as Json | undefined)?.["f:status"] as Json | undefined)?.["f:containerStatuses"] !== undefined;
}

/**
 * A pod keeps its identity, labels, owners, deletion, node, grace, container names, phase and
 * container states, and of its managedFields only the time of the newest write of its container
 * states (when the API server accepted the kubelet's report of a start, on the server's clock):
 * its template (images, env, volumes), addresses and conditions are never read once it exists.
 */
export function trimPod(pod: Json): Json {
  const meta = (pod.metadata ?? {}) as Json;
  const spec = (pod.spec ?? {}) as Json;
  const names = (list: unknown) => (Array.isArray(list) ? (list as Json[]).map((c) => ({ name: c.name, ...(c.restartPolicy !== undefined ? { restartPolicy: c.restartPolicy } : {}) })) : undefined);
  const { managedFields, ...rest } = meta;
  const states = ((managedFields as Json[] | undefined) ?? []).filter(touchesContainerStates);
  const newest = states.reduce<Json | undefined>((a, b) => (a === undefined || String(b.time ?? "") > String(a.time ?? "") ? b : a), undefined);
  const metadata = newest ? { ...rest, managedFields: [{ manager: newest.manager, operation: newest.operation, time: newest.time, fieldsV1: CONTAINER_STATES_FIELDS_V1 }] } : rest;
  return {
    apiVersion: pod.apiVersion,
    kind: pod.kind,
    metadata,
    spec: {
      ...(spec.nodeName !== undefined ? { nodeName: spec.nodeName } : {}),
      ...(spec.terminationGracePeriodSeconds !== undefined ? { terminationGracePeriodSeconds: spec.terminationGracePeriodSeconds } : {}),
      containers: names(spec.containers) ?? [],
      ...(spec.initContainers !== undefined ? { initContainers: names(spec.initContainers) } : {}),
    },
    ...(pod.status !== undefined ? { status: trimPodStatus(pod.status as Json) } : {}),
  };
}

/** Of a pod's status, its phase and why, and each container's state: addresses and conditions go. */
function trimPodStatus(status: Json): Json {
  const containers = (list: unknown) =>
    Array.isArray(list) ? (list as Json[]).map((c) => ({ name: c.name, ...(c.state !== undefined ? { state: c.state } : {}), ...(c.lastState !== undefined ? { lastState: c.lastState } : {}) })) : undefined;
  const out: Json = {};
  for (const field of ["phase", "reason", "message"] as const) if (status[field] !== undefined) out[field] = status[field];
  const regular = containers(status.containerStatuses);
  const init = containers(status.initContainerStatuses);
  if (regular) out.containerStatuses = regular;
  if (init) out.initContainerStatuses = init;
  return out;
}
