// Annotation, label and environment names of the AgentRun contract.

export const ANNOTATIONS = {
  /** Current attempt, 1-based (operator). */
  attempt: "watchdog.dev/attempt",
  /** RFC 3339 UTC time before which no sandbox starts: the durable wake-up (operator). */
  retryAfter: "watchdog.dev/retry-after",
  /** Why the run is backing off (operator). */
  backoffReason: "watchdog.dev/backoff-reason",
  /** A new value resumes a run in NeedsHumanIntervention with fresh budgets (user). */
  resume: "watchdog.dev/resume",
  /** Answers a run awaiting a reply; the value is the answer. Consumed by the operator (user). */
  approve: "watchdog.dev/approve",
  /** Rejects a run awaiting a reply; the value is the reason. Ends the run (user). */
  reject: "watchdog.dev/reject",
} as const;

/** Annotations only the operator writes; it never touches the others. */
export const OPERATOR_ANNOTATIONS = [ANNOTATIONS.attempt, ANNOTATIONS.retryAfter, ANNOTATIONS.backoffReason] as const;

export const LABELS = {
  /** On every sandbox pod: the name of its AgentRun. */
  run: "watchdog.dev/run",
  /** On every sandbox pod: the attempt it serves. */
  attempt: "watchdog.dev/attempt",
} as const;

export const SANDBOX_ENV = {
  runName: "WATCHDOG_RUN_NAME",
  runNamespace: "WATCHDOG_RUN_NAMESPACE",
  attempt: "WATCHDOG_ATTEMPT",
} as const;

/** Field manager name for every write the operator makes. */
export const FIELD_MANAGER = "agent-watchdog";

/**
 * Words in the admission policy's refusal of a write from a pod the run does not name (yet). The
 * sandbox SDK recognises them to tell "the operator has not recorded my pod yet" from other refusals.
 */
export const NOT_CURRENT_SANDBOX = "is not the current sandbox";
