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
  /**
   * The status.approval.id an approve or reject answers (user). Without it, or naming a request
   * that is not pending, the answer is refused and removed.
   */
  approvalId: "watchdog.dev/approval-id",
} as const;

/** The user annotations that answer an approval request; consumed together. */
export const ANSWER_ANNOTATIONS = [ANNOTATIONS.approve, ANNOTATIONS.reject, ANNOTATIONS.approvalId] as const;

/** Annotations only the operator writes; it never touches the others. */
export const OPERATOR_ANNOTATIONS = [ANNOTATIONS.attempt, ANNOTATIONS.retryAfter, ANNOTATIONS.backoffReason] as const;

/** The finalizer that keeps a run being deleted until its sandbox is confirmed gone (operator). */
export const FINALIZER = "watchdog.dev/sandbox-gone";

/**
 * While the agent awaits a reply, the SDK's checkpoint carries the request under this key, beside
 * the agent's own data: the question and the key the sandbox gave it. The operator copies both
 * into status.approval when it opens the request.
 */
export const APPROVAL_REQUEST_KEY = "watchdog.dev/approval-request";

export const LABELS = {
  /** On every sandbox pod: the name of its AgentRun. */
  run: "watchdog.dev/run",
  /** On every sandbox pod: the attempt it serves. */
  attempt: "watchdog.dev/attempt",
  /**
   * On every run (stamped at admission, or by the operator) and copied to its pods: the shard
   * whose Lease holder supervises it (sharding.ts). Never changes once set.
   */
  shard: "watchdog.dev/shard",
} as const;

export const SANDBOX_ENV = {
  runName: "WATCHDOG_RUN_NAME",
  runNamespace: "WATCHDOG_RUN_NAMESPACE",
  attempt: "WATCHDOG_ATTEMPT",
  /** W3C Trace Context of the attempt's span, when the operator traces runs. */
  traceparent: "TRACEPARENT",
} as const;

/** Field manager name for every write the operator makes. */
export const FIELD_MANAGER = "agent-watchdog";
/** Field manager name of the sandbox SDKs' status writes. */
export const SANDBOX_FIELD_MANAGER = "agent-watchdog-sandbox";

/**
 * Exit codes of the agent container that mean something to the watchdog. The SDKs exit with
 * unconfirmedSideEffect when they refuse to run again a non-idempotent call whose outcome is
 * unknown (rule 10): the run then needs a person (UnconfirmedSideEffect), never a restart. They
 * exit with rateLimited when the agent gave up its attempt because its newest tool call was
 * rate limited (HTTP 429): only that exit, with that call on record, is requeued with the
 * rate-limit backoff (rule 4); any other crash, and every hang, spends a restart whatever the
 * last call was.
 */
export const SANDBOX_EXIT_CODES = {
  unconfirmedSideEffect: 3,
  rateLimited: 6,
} as const;

/**
 * Words in the admission policy's refusal of a write from a pod the run does not name (yet). The
 * sandbox SDK recognises them to tell "the operator has not recorded my pod yet" from other refusals.
 */
export const NOT_CURRENT_SANDBOX = "is not the current sandbox";
