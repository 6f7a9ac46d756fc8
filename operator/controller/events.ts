// Events through events.k8s.io/v1, attached to the run. Best effort, and asynchronous like
// client-go's recorder: a reconcile hands its Events over and moves on, so a slow API server
// delays the next kill by no Event write. One that cannot be written is logged, never allowed to
// fail a reconcile; those still in flight at shutdown are waited for (flush).
import { randomBytes } from "node:crypto";
import type { Logger } from "pino";
import { API_VERSION, KIND } from "../api/agentrun.ts";
import { cutToBytes } from "../api/limits.ts";
import { paths, type Json, type KubeClient } from "../kube/client.ts";
import type { PlannedEvent } from "../watchdog/plan.ts";

export const REPORTING_CONTROLLER = "watchdog.dev/agent-watchdog";
/** events.k8s.io/v1 refuses an Event whose note is longer. */
export const EVENT_NOTE_MAX_BYTES = 1024;

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

  private readonly inFlight = new Set<Promise<void>>();
  /** Whether this replica may write now (it leads); an Event from one that does not is dropped. */
  canWrite: () => boolean = () => true;

  /** Sends the Event in the background. */
  record(run: Json, event: PlannedEvent, now = Date.now()): void {
    if (!this.canWrite()) return;
    const sending = this.send(run, event, now).finally(() => this.inFlight.delete(sending));
    this.inFlight.add(sending);
  }

  /** Waits for the Events handed over so far (at most `timeoutMs`). */
  async flush(timeoutMs = 5_000): Promise<void> {
    let timer: NodeJS.Timeout | undefined;
    const timeout = new Promise<void>((resolve) => (timer = setTimeout(resolve, timeoutMs)));
    await Promise.race([Promise.all(this.inFlight), timeout]);
    clearTimeout(timer);
  }

  private async send(run: Json, event: PlannedEvent, now: number): Promise<void> {
    const meta = run.metadata as { name: string; namespace: string; uid?: string; resourceVersion?: string };
    const body = {
      apiVersion: "events.k8s.io/v1",
      kind: "Event",
      metadata: { name: `${meta.name}.${now.toString(16)}${randomBytes(4).toString("hex")}`, namespace: meta.namespace },
      eventTime: microTime(now),
      type: event.type,
      reason: event.reason,
      action: event.action,
      // The API limits a note to 1 kB, in bytes: a cut by characters would drop non-ASCII warnings.
      note: cutToBytes(event.note, EVENT_NOTE_MAX_BYTES),
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
