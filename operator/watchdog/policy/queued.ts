// Queued (rule 1, rule 9): start the attempt's sandbox once retry-after has passed and no pod of the
// run may still be running; adopt the attempt's pod when it was created but the status write that
// named it was lost.
import { ANNOTATIONS } from "../../api/annotations.ts";
import { isLive } from "../observe.ts";
import { event, wait, type Outcome, type OperatorStatus } from "../outcome.ts";
import { REASONS } from "../reasons.ts";
import { attemptOf, type RunView } from "../run-view.ts";
import { FENCED_SUFFIX, unfencedServiceAccount } from "../sandbox-identity.ts";
import { sandboxPodName } from "../sandbox-pod.ts";
import { DEFAULT_POD_GRACE_SECONDS } from "../sandboxes.ts";
import { DISARMED } from "../stall.ts";
import { isoSeconds, toMillis } from "../../api/timestamp.ts";

/**
 * The status copy and the annotation are written by the same plan; the later of the two wins, so
 * that neither a lost annotation write nor a hand-edited status starts a sandbox early.
 */
export function retryAfterOf(view: RunView, next: OperatorStatus): number | undefined {
  const candidates = [toMillis(next.retryAfter), toMillis(view.run.metadata.annotations?.[ANNOTATIONS.retryAfter])].filter((v): v is number => v !== undefined);
  return candidates.length ? Math.max(...candidates) : undefined;
}

/** The terminationGracePeriodSeconds the pod gets from the run's template. */
function templateGracePeriodSeconds(view: RunView): number {
  const grace = (view.run.spec.template.spec as { terminationGracePeriodSeconds?: unknown }).terminationGracePeriodSeconds;
  return typeof grace === "number" && Number.isInteger(grace) && grace >= 0 ? grace : DEFAULT_POD_GRACE_SECONDS;
}

export function queued(view: RunView, next: OperatorStatus): Outcome {
  const attempt = attemptOf(next);
  const own = view.sandboxes.owned.find((p) => p.attempt === attempt && isLive(p) && !p.deleting);
  if (own) {
    return {
      summary: `adopted sandbox pod ${own.name}`,
      phase: { phase: "Starting" },
      set: {
        podName: own.name,
        ...(own.uid ? { podUID: own.uid } : {}),
        ...(own.nodeName ? { nodeName: own.nodeName } : {}),
        podGracePeriodSeconds: own.podGracePeriodSeconds,
        startTime: next.startTime ?? isoSeconds(view.now),
      },
      events: [event("Normal", REASONS.sandboxAdopted, "AdoptPod", `sandbox pod ${own.name} for attempt ${attempt} was created before a status write that was lost; adopted it`)],
      wakeAt: [view.now + view.settings.startTimeoutMs + 1],
    };
  }
  if (view.sandboxes.busy) {
    const names = [...view.sandboxes.unconfirmed.map((u) => u.entry.name), ...view.sandboxes.owned.filter((p) => isLive(p) && !p.deleting).map((p) => p.name)];
    return wait(`waiting for ${[...new Set(names)].join(", ")} to be confirmed gone before attempt ${attempt} starts`);
  }
  const retryAfter = retryAfterOf(view, next);
  if (retryAfter !== undefined && view.now < retryAfter) return wait(`backing off until ${new Date(retryAfter).toISOString()}`, retryAfter);
  const unfenced = unfencedServiceAccount(view.run, view.identity);
  if (unfenced !== undefined) return refuseServiceAccount(view, unfenced);
  const name = sandboxPodName(view.run, attempt);
  return {
    summary: `starting attempt ${attempt}`,
    phase: { phase: "Starting" },
    createPod: true,
    set: {
      podName: name,
      podUID: undefined,
      nodeName: undefined,
      // What its kubelet will take to stop it, should it vanish unseen (rule 9).
      podGracePeriodSeconds: templateGracePeriodSeconds(view),
      startTime: next.startTime ?? isoSeconds(view.now),
      stall: { ...DISARMED },
    },
    // No Event: the start is in status already (the Starting transition with its attempt, and the
    // Running condition naming the pod), and an Event would cost every run a request of its own.
    wakeAt: [view.now + view.settings.startTimeoutMs + 1],
  };
}

/**
 * A template that names a service account the fencing does not apply to never gets a sandbox: its
 * writes would go unchecked against the run's current pod (a stale or foreign pod could heartbeat
 * for it). The run stops here, before any pod exists, and says why.
 */
function refuseServiceAccount(view: RunView, name: string): Outcome {
  const message =
    `spec.template.spec.serviceAccountName ${name} is refused: admission fences a sandbox's writes to its own run and attempt only for ` +
    `service accounts whose name ends in ${FENCED_SUFFIX}; remove the field (the operator gives the sandbox its identity) or name one ending in ${FENCED_SUFFIX}`;
  return {
    summary: `refused service account ${name}`,
    phase: { phase: "Failed", reason: REASONS.serviceAccountRefused, message },
    set: { completionTime: isoSeconds(view.now) },
    events: [event("Warning", REASONS.serviceAccountRefused, "RefuseRun", message)],
  };
}
