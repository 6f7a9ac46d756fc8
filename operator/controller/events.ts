// Events through events.k8s.io/v1, attached to the run. Best effort: an Event that cannot be
// written is logged, never allowed to fail a reconcile.
import { randomBytes } from "node:crypto";
import type { Logger } from "pino";
import { API_VERSION, KIND } from "../api/agentrun.ts";
import { paths, type Json, type KubeClient } from "../kube/client.ts";
import type { PlannedEvent } from "../watchdog/plan.ts";

export const REPORTING_CONTROLLER = "watchdog.dev/agent-watchdog";

/** An RFC 3339 time with microseconds, as events.k8s.io's eventTime (MicroTime) wants. */
function microTime(ms: number): string {
  return new Date(ms).toISOString().replace(/\.(\d{3})Z$/, ".$1000Z");
}

export class EventRecorder {
  private readonly client: KubeClient;
  private readonly instance: string;
  private readonly log: Logger;

  constructor(client: KubeClient, instance: string, log: Logger) {
    this.client = client;
    this.instance = instance;
    this.log = log;
  }

  async record(run: Json, event: PlannedEvent, now = Date.now()): Promise<void> {
    const meta = run.metadata as { name: string; namespace: string; uid?: string; resourceVersion?: string };
    const body = {
      apiVersion: "events.k8s.io/v1",
      kind: "Event",
      metadata: { name: `${meta.name}.${now.toString(16)}${randomBytes(4).toString("hex")}`, namespace: meta.namespace },
      eventTime: microTime(now),
      type: event.type,
      reason: event.reason,
      action: event.action,
      note: event.note.slice(0, 1024),
      reportingController: REPORTING_CONTROLLER,
      reportingInstance: this.instance,
      regarding: { apiVersion: API_VERSION, kind: KIND, name: meta.name, namespace: meta.namespace, uid: meta.uid, resourceVersion: meta.resourceVersion },
    };
    try {
      await this.client.create(paths.events(meta.namespace), body);
    } catch (err) {
      this.log.warn({ err: String(err), reason: event.reason }, "could not record event");
    }
  }
}
