// The AgentRun API (watchdog.dev/v1alpha1). These zod schemas are the single source of truth:
// the CRD in crds/ is generated from them (hack/generate-crds.ts), and the operator and the
// sandbox SDK parse objects with them. Constraints written here become CEL rules in the CRD.
import { z } from "zod";
import { DECIMAL_PATTERN, PRICE_PATTERN } from "./decimal.ts";
import { DURATION_PATTERN, durationNanos } from "./duration.ts";
import { isCalendarDay, TIMESTAMP_RE } from "./timestamp.ts";

export const GROUP = "watchdog.dev";
export const VERSION = "v1alpha1";
export const API_VERSION = `${GROUP}/${VERSION}`;
export const KIND = "AgentRun";
export const PLURAL = "agentruns";
export const SINGULAR = "agentrun";
export const SHORT_NAMES = ["ar"];

/** Meta key read by the CRD generator: the string is a positive Go duration. */
export const DURATION_META = "x-watchdog-duration";
/** Meta key read by the CRD generator: keep arbitrary JSON below this node. */
export const FREE_FORM_META = "x-kubernetes-preserve-unknown-fields";
/** Meta key read by the CRD generator: the duration must be at least this long (a Go duration). */
export const MIN_DURATION_META = "x-watchdog-min-duration";
/** Meta key read by the CRD generator: CEL rules to add at this node, as zod's refinements check. */
export const CEL_META = "x-watchdog-cel";

const duration = (description: string, min?: string) => {
  // Parsed once per schema, not once per value: every run read (each heartbeat's event) checks these.
  const minNanos = min === undefined ? undefined : (durationNanos(min) as bigint);
  return z
    .string()
    .max(32)
    .regex(DURATION_PATTERN, "must be a positive duration such as 30s, 5m or 1h30m")
    // What CEL's duration() takes, to the nanosecond: more than zero, and no more than int64 nanoseconds.
    .refine((text) => !DURATION_PATTERN.test(text) || (durationNanos(text) ?? 0n) > 0n, "must be a positive duration such as 30s, 5m or 1h30m")
    .refine((text) => minNanos === undefined || (durationNanos(text) ?? 0n) === 0n || (durationNanos(text) as bigint) >= minNanos, `must be at least ${min}`)
    .meta({ description, [DURATION_META]: true, ...(min ? { [MIN_DURATION_META]: min } : {}) });
};

const count = (min: number, description: string) => z.int().min(min).max(1_000_000).meta({ description });

/** A count that may grow large (tokens): up to 2^53 - 1, what JavaScript holds exactly. */
const amount = (description: string) => z.int().min(0).max(Number.MAX_SAFE_INTEGER).meta({ description });

/** Money as a decimal string (see decimal.ts): never a float. */
const decimal = (description: string) =>
  z.string().max(37).regex(DECIMAL_PATTERN, "must be a decimal number such as 12.50 (at most 18 digits either side of the point)").meta({ description });

const timestamp = (description: string) =>
  z
    .string()
    .regex(TIMESTAMP_RE, "must be an RFC 3339 time such as 2026-12-01T10:00:00Z, with at most 9 fraction digits")
    .refine((text) => !TIMESTAMP_RE.test(text) || isCalendarDay(text), "must be a day of the calendar")
    // The API server checks the pattern and, for format date-time, the calendar.
    .meta({ description, format: "date-time" });

// ---------------------------------------------------------------------------------------------
// spec

export const BackoffSpec = z
  .strictObject({
    initial: duration("Wait before the first retry.").optional(),
    factor: z.number().min(1).max(100).meta({ description: "Multiplier applied to the wait for each further retry (>= 1)." }).optional(),
    max: duration("Upper bound of the wait.").optional(),
  })
  // The CRD states this rule in CEL (BACKOFF_MAX_RULE); both compare only valid durations.
  .refine(
    (b) => {
      const initial = b.initial === undefined ? undefined : durationNanos(b.initial);
      const max = b.max === undefined ? undefined : durationNanos(b.max);
      return !initial || !max || max >= initial;
    },
    { message: "max must be greater than or equal to initial", path: ["max"] },
  )
  .meta({ description: "Exponential backoff: the wait before retry n is min(max, initial * factor^(n-1))." });

export const StallSpec = z
  .strictObject({
    enabled: z.boolean().meta({ description: "Whether stall nudges are sent. Default true." }).optional(),
    timeout: duration(
      "How long final agent text may stand with no newer activity before a nudge is sent. Default 30s.",
    ).optional(),
    maxNudges: count(0, "Nudges sent before the run needs a person (StallUnresolved). Default 3.").optional(),
    message: z
      .string()
      .min(1)
      .max(2048)
      .meta({ description: "Text delivered into the agent's session as the nudge." })
      .optional(),
  })
  .meta({ description: "Stall watchdog: nudges an agent whose reply chain has broken." });

export const WatchdogSpec = z
  .strictObject({
    heartbeatTimeout: duration(
      "An active run (Starting, Planning, ExecutingTool) with no heartbeat for longer is hung. Default 5m.",
    ).optional(),
    maxRestarts: count(
      0,
      "Recovery allowance: hung or crashed sandboxes are replaced at most this many times. Default 3.",
    ).optional(),
    backoff: BackoffSpec.meta({
      description: "Wait before a replacement sandbox. Defaults: initial 60s, factor 2, max 10m.",
    }).optional(),
    rateLimitBackoff: BackoffSpec.meta({
      description:
        "Wait when the failure was a rate limit (HTTP 429; a reported Retry-After wins). Does not spend maxRestarts. Defaults: initial 2s, factor 2, max 5m.",
    }).optional(),
    maxConsecutiveToolFailures: count(
      1,
      "The same tool with the same arguments failing this many times in a row is a loop (ToolLoop). Default 3.",
    ).optional(),
    maxRateLimitRequeues: count(
      0,
      "Rate-limit allowance: an attempt that gives up on a rate limit (the SDK's rate-limited exit after an HTTP 429) is requeued with rateLimitBackoff at most this many times in a row, spending no restart; one more needs a person (RateLimitRequeuesExhausted). A call that gets through resets the count. Default 10.",
    ).optional(),
    stall: StallSpec.optional(),
    releaseAwaitingAfter: duration(
      "A run awaiting a reply (AwaitingReply) keeps its sandbox pod this long, then the pod is deleted to free resources; approving starts a new sandbox that resumes from the checkpoint. Default 10m.",
    ).optional(),
    approvalTimeout: duration(
      "A run still awaiting a reply this long after asking fails with reason ApprovalTimeout. Default: wait forever.",
    ).optional(),
    startTimeout: duration(
      "A sandbox whose agent container has not started this long after its pod was created (scheduling, image pull) failed to start: reason StartTimeout, counted against maxRestarts. Default 10m.",
    ).optional(),
    agentContainer: z
      .string()
      .min(1)
      .max(63)
      .meta({
        description:
          "The container whose exit ends the attempt: exit 0 completes the run, any other exit is a crash. Other containers, sidecars included, do not decide. Must name a container of the template. Default: the first container.",
      })
      .optional(),
    killGracePeriod: duration(
      "Grace period when the watchdog kills a sandbox (hung, tool loop, budget spent, start timeout); at least 1s. Other deletions (suspend, release, resume) use the pod's own terminationGracePeriodSeconds. A pod is never force-deleted. Default 2s.",
      "1s",
    ).optional(),
    unconfirmedAfter: duration(
      "A deleted sandbox pod not confirmed gone this long (the kubelet has not stopped its containers: the node may be cut off) sets SandboxUnconfirmed; no replacement starts until it is confirmed gone. Default 2m.",
    ).optional(),
  })
  .meta({
    description:
      "Watchdog settings. Each field left out takes the operator's install default, then the built-in default.",
  });

// ---------------------------------------------------------------------------------------------
// run budgets

/** The limits a run budget can set, in the order a breach names them. Also the `limit` label of watchdog_budget_exhausted_total. */
export const BUDGET_LIMITS = ["tokens", "inputTokens", "outputTokens", "cost", "toolCalls", "wallClock"] as const;
export type BudgetLimit = (typeof BUDGET_LIMITS)[number];

export const CostLimit = z
  .strictObject({
    amount: decimal('The most the run may cost, all attempts together, as a decimal string such as "12.50".'),
    currency: z
      .string()
      .min(1)
      .max(16)
      .regex(/^[A-Za-z][A-Za-z0-9_-]*$/, "must be a currency code such as USD")
      .meta({ description: "The currency of amount, of the cost the sandbox reports and of spec.budget.prices, such as USD. The operator converts nothing." }),
  })
  .meta({ description: "A cost limit: the run stops for a person (BudgetExhausted) once its cost reaches amount." });

export const ModelPrice = z
  .strictObject({
    model: z.string().min(1).max(256).meta({ description: "The model name as the sandbox reports it in status.heartbeat.usage.model." }),
    inputPerMillion: z
      .string()
      .max(28)
      .regex(PRICE_PATTERN, "must be a decimal number such as 3.00 (at most 12 fraction digits)")
      .meta({ description: 'Price of a million input tokens, in the cost currency, as a decimal string such as "3.00".' }),
    outputPerMillion: z
      .string()
      .max(28)
      .regex(PRICE_PATTERN, "must be a decimal number such as 15.00 (at most 12 fraction digits)")
      .meta({ description: 'Price of a million output tokens, in the cost currency, as a decimal string such as "15.00".' }),
  })
  .meta({ description: "How one model's tokens become cost." });
export type ModelPrice = z.infer<typeof ModelPrice>;

/** How many prices a budget lists. */
export const MAX_PRICES = 32;

export const BudgetSpec = z
  .strictObject({
    tokens: amount(
      "Input plus output tokens the run may use, all attempts together. The run stops for a person (BudgetExhausted) once it has used this many. Default: no limit.",
    ).optional(),
    inputTokens: amount("Input (prompt) tokens the run may use, all attempts together. Default: no limit.").optional(),
    outputTokens: amount("Output (completion) tokens the run may use, all attempts together. Default: no limit.").optional(),
    cost: CostLimit.optional(),
    wallClock: duration(
      "How long the run may take from the start of its first sandbox, across attempts, backoff and waits for a reply included (the Job controller's activeDeadlineSeconds, except that suspending does not restart it); measured on the API server's clock, whether or not the sandbox reports. Not acted on while spec.suspend is true. Default: no limit.",
    ).optional(),
    toolCalls: amount("Tool calls the run may make, all attempts together. Default: no limit.").optional(),
    warnAt: z
      .number()
      .gt(0)
      .max(1)
      .meta({
        description:
          "The fraction of any limit at which a Warning Event BudgetWarning is sent, once per limit (and again if the limit is changed). 0 < warnAt <= 1. Default 0.8.",
      })
      .optional(),
    prices: z
      .array(ModelPrice)
      .max(MAX_PRICES)
      .meta({
        description:
          "How reported tokens become cost where the sandbox reports no cost: the price of the model its usage names (the first entry for a model counts). Install default prices apply to models the run does not price.",
      })
      .optional(),
  })
  .meta({
    description:
      "Run budget: limits on what the whole run may spend, all attempts together. Each field left out takes the operator's install default, if any. status.spent holds what ended attempts spent.",
  });
export type BudgetSpec = z.infer<typeof BudgetSpec>;

// The sandbox pod template. The pod spec itself is validated by the API server when the operator
// creates the pod; here we insist on what every pod needs: at least one named container.
export const Container = z
  .looseObject({
    name: z.string().min(1).max(63).meta({ description: "Container name." }),
    image: z.string().min(1).meta({ description: "Container image." }).optional(),
  })
  .meta({ description: "A container of the sandbox pod (core/v1 Container)." });

export const PodTemplateSpec = z
  .strictObject({
    metadata: z
      .looseObject({})
      .meta({ description: "Labels and annotations for the sandbox pod." })
      .optional(),
    spec: z
      .looseObject({
        containers: z.array(Container).min(1).max(64).meta({ description: "The sandbox containers; at least one." }),
      })
      .meta({ description: "Pod spec of the sandbox (core/v1 PodSpec)." }),
  })
  .meta({ description: "Pod template of the sandbox (core/v1 PodTemplateSpec)." });

/** The container that decides the attempt, when the run names one, must be one of the template's. */
const AGENT_CONTAINER_RULE = {
  rule: "!has(self.watchdog) || !has(self.watchdog.agentContainer) || self.template.spec.containers.exists(c, c.name == self.watchdog.agentContainer)",
  message: "watchdog.agentContainer must name a container of template.spec.containers",
  fieldPath: ".watchdog.agentContainer",
  reason: "FieldValueInvalid",
};

export const AgentRunSpec = z
  .strictObject({
    template: PodTemplateSpec,
    goal: z.string().max(65_536).meta({ description: "The task, handed to the sandbox." }).optional(),
    suspend: z
      .boolean()
      .meta({
        description:
          "Pause the run: the sandbox pod is removed, no timer fires and nothing is nudged. Set false to resume.",
      })
      .optional(),
    watchdog: WatchdogSpec.optional(),
    budget: BudgetSpec.optional(),
  })
  .refine(
    (spec) => spec.watchdog?.agentContainer === undefined || spec.template.spec.containers.some((c) => c.name === spec.watchdog?.agentContainer),
    { message: AGENT_CONTAINER_RULE.message, path: ["watchdog", "agentContainer"] },
  )
  .meta({ description: "Desired state of an agent run, written by the user.", [CEL_META]: [AGENT_CONTAINER_RULE] });

// ---------------------------------------------------------------------------------------------
// status written by the sandbox (the sandbox protocol)

export const SANDBOX_STATES = ["Planning", "ExecutingTool", "AwaitingReply"] as const;
export const ACTIVITY_KINDS = ["text", "delta", "toolResult", "userMessage", "noReply", "emptyText"] as const;
export const TOOL_CALL_STATES = ["Started", "Succeeded", "Failed"] as const;

export const Activity = z
  .strictObject({
    kind: z.enum(ACTIVITY_KINDS).meta({
      description:
        "text: final non-empty agent text (arms the stall watchdog); delta: a stream started (disarms); toolResult: resets the stall timer; userMessage, noReply, emptyText: disarm.",
    }),
    time: timestamp("When the activity happened."),
  })
  .meta({ description: "The agent's latest activity, which drives the stall watchdog." });

export const Usage = z
  .strictObject({
    inputTokens: amount("Input (prompt) tokens the attempt has used so far.").optional(),
    outputTokens: amount("Output (completion) tokens the attempt has used so far.").optional(),
    cost: decimal(
      "What the attempt has cost so far, in the budget's currency, as a decimal string. Left out, the operator prices the tokens from spec.budget.prices by model.",
    ).optional(),
    toolCalls: amount("Tool calls the attempt has made so far.").optional(),
    model: z.string().min(1).max(256).meta({ description: "The model the tokens were used with, as spec.budget.prices names it." }).optional(),
  })
  .meta({
    description:
      "The current attempt's cumulative spending. Written with every heartbeat from the attempt's first on (zeros before anything is spent), since a merge patch would otherwise keep an earlier attempt's figures. Never goes down within an attempt.",
  });
export type Usage = z.infer<typeof Usage>;

/**
 * Within one attempt a report never lowers what the attempt already reported; a new attempt
 * starts from anything. Checked by the API server on every heartbeat write (a transition rule), so
 * that a sandbox cannot spend, lower its figures and spend again. Cost is compared as a double:
 * rounding is monotonic, so an honest report always passes.
 */
const notLower = (field: string, compare: (v: string) => string = (v) => v) =>
  `(!has(oldSelf.usage.${field}) || (has(self.usage.${field}) && ${compare(`self.usage.${field}`)} >= ${compare(`oldSelf.usage.${field}`)}))`;
export const USAGE_MONOTONIC_RULE = {
  rule:
    "self.attempt != oldSelf.attempt || !has(oldSelf.usage) || (has(self.usage) && " +
    [notLower("inputTokens"), notLower("outputTokens"), notLower("toolCalls"), notLower("cost", (v) => `double(${v})`)].join(" && ") +
    ")",
  message: "heartbeat.usage may not go down within an attempt: a report may not lower what the attempt already reported",
  fieldPath: ".usage",
  reason: "FieldValueInvalid",
};

export const Heartbeat = z
  .strictObject({
    time: timestamp("When the sandbox last reported it was alive."),
    attempt: count(1, "The attempt the writing sandbox belongs to; stale attempts are ignored."),
    state: z.enum(SANDBOX_STATES).meta({ description: "What the agent is doing." }),
    activity: Activity.optional(),
    usage: Usage.optional(),
  })
  .meta({ description: "Liveness report written by the sandbox.", "x-kubernetes-validations": [USAGE_MONOTONIC_RULE] });

export const ToolCallError = z
  .strictObject({
    message: z.string().max(4096).meta({ description: "What went wrong." }).optional(),
    httpStatus: z.int().min(0).max(999).meta({ description: "HTTP status of the failure, if any (429 means rate limited)." }).optional(),
    retryAfterSeconds: z.number().min(0).max(86_400).meta({ description: "Retry-After reported with the failure." }).optional(),
  })
  .meta({ description: "Why the call failed." });

export const ToolCall = z
  .strictObject({
    id: z.string().min(1).max(128).meta({ description: "Unique id of the call." }),
    name: z.string().min(1).max(256).meta({ description: "Tool name." }),
    argsHash: z.string().max(128).meta({ description: "Hash of the call's arguments." }),
    idempotencyKey: z.string().max(256).meta({ description: "Stable key the tool uses to recognise a repeated request." }).optional(),
    idempotent: z.boolean().meta({ description: "Whether running the tool twice is harmless." }).optional(),
    attempt: count(1, "The attempt that made the call.").optional(),
    state: z.enum(TOOL_CALL_STATES).meta({ description: "Started is recorded (intent committed) before the tool runs." }),
    error: ToolCallError.optional(),
    startedAt: timestamp("When the call started.").optional(),
    finishedAt: timestamp("When the call finished.").optional(),
    result: z.string().max(8192).meta({ description: "Small saved result (JSON text), returned on replay." }).optional(),
  })
  .meta({ description: "A tool call record." });

export const Checkpoint = z
  .strictObject({
    step: z.int().min(0).meta({ description: "Last committed step." }),
    data: z.unknown().meta({ description: "State a new attempt resumes from.", [FREE_FORM_META]: true }).optional(),
  })
  .meta({ description: "The last committed state that a new attempt resumes from." });

/** The status fields a sandbox may write; everything else in status belongs to the operator. */
export const SANDBOX_STATUS_FIELDS = ["heartbeat", "toolCalls", "checkpoint"] as const;

// ---------------------------------------------------------------------------------------------
// status written by the operator

export const PHASES = [
  "Queued",
  "Starting",
  "Planning",
  "ExecutingTool",
  "AwaitingReply",
  "NeedsHumanIntervention",
  "Suspended",
  "Completed",
  "Failed",
] as const;
export type Phase = (typeof PHASES)[number];
export const TERMINAL_PHASES: readonly Phase[] = ["Completed", "Failed"];
/** Phases in which a sandbox pod is expected to be alive. */
export const ACTIVE_PHASES: readonly Phase[] = ["Starting", "Planning", "ExecutingTool", "AwaitingReply"];

export const CONDITION_TYPES = ["Running", "BackingOff", "NeedsHumanIntervention", "Succeeded", "SandboxReportValid", "SandboxUnconfirmed"] as const;
export type ConditionType = (typeof CONDITION_TYPES)[number];

export const Condition = z
  .strictObject({
    type: z.string().min(1).max(316).meta({ description: "Condition type." }),
    status: z.enum(["True", "False", "Unknown"]).meta({ description: "True, False or Unknown." }),
    observedGeneration: z.int().min(0).meta({ description: "Generation the condition was set for." }).optional(),
    lastTransitionTime: timestamp("When the status last changed."),
    reason: z.string().min(1).max(1024).meta({ description: "Machine-readable reason in CamelCase." }),
    message: z.string().max(32_768).meta({ description: "Human-readable detail." }),
  })
  .meta({ description: "A metav1.Condition." });
export type Condition = z.infer<typeof Condition>;

export const STALL_STATES = ["Disarmed", "Armed", "Fired"] as const;
export const StallStatus = z
  .strictObject({
    state: z.enum(STALL_STATES).meta({ description: "Disarmed, Armed (final text seen, timer running) or Fired (nudged)." }),
    nudges: count(0, "Nudges sent since the stall watchdog was last disarmed."),
    armedAt: timestamp("Time of the activity that armed the timer.").optional(),
    lastNudge: z
      .strictObject({
        time: timestamp("When the nudge was recorded."),
        message: z.string().max(2048).meta({ description: "The nudge text the sandbox delivers." }),
      })
      .meta({ description: "The newest nudge; the sandbox delivers each new one into the agent's session." })
      .optional(),
  })
  .meta({ description: "Stall watchdog state." });

export const FailureRecord = z
  .strictObject({
    reason: z.string().max(256).meta({ description: "HeartbeatTimeout, PodFailed, RateLimited, ToolLoop, ..." }),
    message: z.string().max(4096).meta({ description: "Human-readable detail." }),
    time: timestamp("When the failure was detected."),
    attempt: count(1, "The attempt that failed.").optional(),
    state: z.enum(SANDBOX_STATES).meta({ description: "What the agent was doing when it failed." }).optional(),
    tool: z
      .strictObject({
        name: z.string().max(256).meta({ description: "Tool name." }),
        argsHash: z.string().max(128).meta({ description: "Hash of the call's arguments." }),
        state: z.enum(TOOL_CALL_STATES).meta({ description: "The call's last recorded state." }),
      })
      .meta({ description: "The newest tool call of the failed attempt, if any." })
      .optional(),
  })
  .meta({ description: "Why the last attempt ended." });

const resolvedBackoff = z
  .strictObject({
    initial: z.string().meta({ description: "Wait before the first retry." }),
    factor: z.number().meta({ description: "Multiplier for each further retry." }),
    max: z.string().meta({ description: "Upper bound of the wait." }),
  })
  .meta({ description: "Effective backoff." });

export const Transition = z
  .strictObject({
    phase: z.enum(PHASES).meta({ description: "The phase entered." }),
    from: z.enum(PHASES).meta({ description: "The phase left." }).optional(),
    reason: z.string().max(256).meta({ description: "Why." }).optional(),
    message: z.string().max(1024).meta({ description: "Human-readable detail." }).optional(),
    attempt: count(0, "The run's attempt after the transition."),
    time: timestamp("When the operator made the transition (milliseconds; unique per run)."),
  })
  .meta({ description: "A phase transition." });
export type Transition = z.infer<typeof Transition>;
/** How many transitions status keeps; the ledger holds the full history. */
export const MAX_TRANSITIONS = 20;

export const APPROVAL_STATES = ["Pending", "Approved", "Rejected", "TimedOut", "Withdrawn"] as const;
export const ApprovalStatus = z
  .strictObject({
    id: z
      .string()
      .max(128)
      .meta({ description: "Identifies this request; an answer counts only with watchdog.dev/approval-id naming it. New for every request." })
      .optional(),
    state: z.enum(APPROVAL_STATES).meta({
      description:
        "Pending while the agent awaits a reply; then Approved, Rejected or TimedOut; or Withdrawn when the run left the wait without an answer (the agent moved on, or its sandbox ended): an answer naming a withdrawn request is refused.",
    }),
    question: z
      .string()
      .max(4096)
      .meta({ description: "The question as the sandbox asked it, recorded by the operator when the request was made: what an approver answers, whatever the sandbox writes later." })
      .optional(),
    requestKey: z
      .string()
      .max(128)
      .meta({ description: "The key the sandbox gave its question (status.checkpoint), so that it knows which request is its own." })
      .optional(),
    attempt: count(1, "The attempt that asked.").optional(),
    requestedAt: timestamp("When the agent started awaiting a reply."),
    answer: z.string().max(4096).meta({ description: "The answer given with watchdog.dev/approve; the next sandbox reads it." }).optional(),
    reason: z.string().max(4096).meta({ description: "Why the request was rejected." }).optional(),
    decidedAt: timestamp("When the request was answered.").optional(),
  })
  .meta({ description: "The current or last approval request of the run." });

export const EffectiveWatchdog = z
  .strictObject({
    heartbeatTimeout: z.string().meta({ description: "Effective heartbeat timeout." }),
    maxRestarts: z.int().meta({ description: "Effective recovery allowance." }),
    backoff: resolvedBackoff,
    rateLimitBackoff: resolvedBackoff,
    maxConsecutiveToolFailures: z.int().meta({ description: "Effective loop limit." }),
    // Optional: what an earlier version of the operator recorded has none.
    maxRateLimitRequeues: z.int().meta({ description: "Effective rate-limit allowance." }).optional(),
    stall: z
      .strictObject({
        enabled: z.boolean().meta({ description: "Whether stall nudges are sent." }),
        timeout: z.string().meta({ description: "Stall timeout." }),
        maxNudges: z.int().meta({ description: "Nudges before escalation." }),
        message: z.string().meta({ description: "Nudge text." }),
      })
      .meta({ description: "Effective stall settings." }),
    releaseAwaitingAfter: z.string().meta({ description: "Effective time a run awaiting a reply keeps its pod." }),
    approvalTimeout: z.string().meta({ description: "Effective approval timeout, if any." }).optional(),
    startTimeout: z.string().meta({ description: "Effective start timeout." }),
    agentContainer: z.string().meta({ description: "The container whose exit ends the attempt." }).optional(),
    killGracePeriod: z.string().meta({ description: "Effective grace period of a kill." }),
    unconfirmedAfter: z.string().meta({ description: "Effective time after which an unconfirmed deletion sets SandboxUnconfirmed." }),
  })
  .meta({ description: "Effective watchdog settings: the run's spec.watchdog over the install defaults over built-in defaults." });
export type EffectiveWatchdog = z.infer<typeof EffectiveWatchdog>;

export const EffectiveBudget = z
  .strictObject({
    tokens: z.int().meta({ description: "Effective limit on input plus output tokens." }).optional(),
    inputTokens: z.int().meta({ description: "Effective limit on input tokens." }).optional(),
    outputTokens: z.int().meta({ description: "Effective limit on output tokens." }).optional(),
    cost: z
      .strictObject({
        amount: z.string().meta({ description: "The most the run may cost." }),
        currency: z.string().meta({ description: "Its currency." }),
      })
      .meta({ description: "Effective cost limit." })
      .optional(),
    wallClock: z.string().meta({ description: "Effective limit on the time from the first start." }).optional(),
    toolCalls: z.int().meta({ description: "Effective limit on tool calls." }).optional(),
    warnAt: z.number().meta({ description: "Effective fraction of a limit at which BudgetWarning is sent." }),
  })
  .meta({ description: "Effective run budget: the run's spec.budget over the install defaults. Absent when no limit applies." });
export type EffectiveBudget = z.infer<typeof EffectiveBudget>;

export const Spent = z
  .strictObject({
    inputTokens: amount("Input tokens the ended attempts used."),
    outputTokens: amount("Output tokens the ended attempts used."),
    cost: z
      .string()
      .max(64)
      .meta({ description: "What the ended attempts cost, as a decimal string in the budget's currency: reported, or priced from spec.budget.prices." }),
    toolCalls: amount("Tool calls the ended attempts made."),
    wallClock: z.string().max(64).meta({ description: "Time from the run's first start to the last fold (informational; the wall-clock limit is measured from status.startTime)." }).optional(),
    throughAttempt: count(0, "The last attempt whose usage is included: each attempt is added once, whoever decides and however often."),
  })
  .meta({
    description:
      "What the ended attempts of the run spent, folded in by the operator from each attempt's last status.heartbeat.usage when the attempt ended. The run's spending is this plus the current attempt's heartbeat.usage; the sandbox cannot write it.",
  });
export type Spent = z.infer<typeof Spent>;

export const BudgetWarningRecord = z
  .strictObject({
    limit: z.enum(BUDGET_LIMITS).meta({ description: "The limit warned about." }),
    of: z.string().max(64).meta({ description: "The limit's value the warning was sent for: a changed limit warns again at its own threshold." }),
    time: timestamp("When the BudgetWarning Event was sent."),
  })
  .meta({ description: "A BudgetWarning Event already sent." });
export type BudgetWarningRecord = z.infer<typeof BudgetWarningRecord>;

export const TerminatingPod = z
  .strictObject({
    name: z.string().max(253).meta({ description: "The pod." }),
    uid: z.string().max(128).meta({ description: "Its uid: a newer pod of the same name is another pod." }),
    nodeName: z.string().max(253).meta({ description: "The node it was bound to, if any." }).optional(),
    since: timestamp("When its deletion was asked for or first seen."),
    gracePeriodSeconds: count(0, "The grace its deletion gives its containers to stop.").optional(),
    podGracePeriodSeconds: count(
      0,
      "The pod's own terminationGracePeriodSeconds: the grace its kubelet uses when it finds the pod gone without having seen the deletion (after a relist, or a restart). The pod is confirmed gone only after the longer of the two has passed since its node was back in contact.",
    ).optional(),
    vanishedAt: timestamp("When its object disappeared without a final state that shows its containers stopped.").optional(),
    contactAt: timestamp("When its node was first heard from after the object disappeared.").optional(),
  })
  .meta({ description: "A sandbox pod deleted and not yet confirmed gone: no replacement starts while one is listed." });
export type TerminatingPod = z.infer<typeof TerminatingPod>;
/** How many unconfirmed pods status keeps (one per attempt in practice). */
export const MAX_TERMINATING = 8;

export const AgentRunStatus = z
  .strictObject({
    // operator-owned
    phase: z.enum(PHASES).meta({ description: "Where the run is in its life. Completed and Failed are terminal." }).optional(),
    reason: z.string().max(256).meta({ description: "Why the run is in its phase." }).optional(),
    message: z.string().max(4096).meta({ description: "Human-readable detail of the phase." }).optional(),
    attempt: count(0, "Current attempt, 1-based; each sandbox pod is one attempt.").optional(),
    restarts: count(0, "Hung or crashed sandboxes replaced so far (spends maxRestarts).").optional(),
    rateLimitRequeues: count(0, "Consecutive requeues caused by rate limits (does not spend maxRestarts).").optional(),
    podName: z.string().max(253).meta({ description: "The current attempt's sandbox pod." }).optional(),
    podUID: z.string().max(128).meta({ description: "The uid of the current attempt's sandbox pod; admission fences sandbox writes by it." }).optional(),
    nodeName: z.string().max(253).meta({ description: "The node the current sandbox pod is bound to." }).optional(),
    podGracePeriodSeconds: count(0, "The terminationGracePeriodSeconds the current sandbox pod was created with.").optional(),
    terminating: z
      .array(TerminatingPod)
      .max(MAX_TERMINATING)
      .meta({ description: "Sandbox pods deleted and not yet confirmed gone (rule 9)." })
      .optional(),
    retryAfter: timestamp("No sandbox starts before this time (mirrors the watchdog.dev/retry-after annotation).").optional(),
    startTime: timestamp("When the first sandbox was started; kept across attempts, resumes and suspensions (spec.budget.wallClock counts from it).").optional(),
    completionTime: timestamp("When the run reached a terminal phase.").optional(),
    observedGeneration: z.int().min(0).meta({ description: "The spec generation last acted on." }).optional(),
    observedResume: z.string().max(256).meta({ description: "The last watchdog.dev/resume value acted on." }).optional(),
    toolCallsResetAfter: z
      .string()
      .max(128)
      .meta({ description: "Id of the newest tool call when the failure streak was last reset; loop detection counts only later calls." })
      .optional(),
    lastFailure: FailureRecord.optional(),
    conditions: z
      .array(Condition)
      .max(16)
      // A map keyed by type in the CRD (x-kubernetes-list-map-keys), so the API server refuses a repeated type.
      .refine((conditions) => new Set(conditions.map((c) => c.type)).size === conditions.length, "each condition type may appear once")
      .meta({ description: "Running, BackingOff, NeedsHumanIntervention, Succeeded, SandboxReportValid, SandboxUnconfirmed." })
      .optional(),
    stall: StallStatus.optional(),
    approval: ApprovalStatus.optional(),
    transitions: z
      .array(Transition)
      .max(MAX_TRANSITIONS)
      .meta({ description: "The latest phase transitions, newest last; the ledger catches up from them after an outage." })
      .optional(),
    watchdog: EffectiveWatchdog.optional(),
    budget: EffectiveBudget.optional(),
    spent: Spent.optional(),
    budgetWarnings: z
      .array(BudgetWarningRecord)
      .max(BUDGET_LIMITS.length)
      .meta({ description: "The limits whose BudgetWarning Event has been sent (status.budget.warnAt of them spent), one entry per limit, so that each is sent once." })
      .optional(),
    timeoutsChangedAt: timestamp(
      "When the effective heartbeatTimeout or startTimeout last changed (a spec edit, or a new install default): a deadline counts from here at the earliest, so that a sandbox still on the old heartbeat interval has a whole new timeout to learn it.",
    ).optional(),
    // sandbox-owned
    heartbeat: Heartbeat.optional(),
    toolCalls: z.array(ToolCall).max(64).meta({ description: "The latest tool calls, newest last." }).optional(),
    checkpoint: Checkpoint.optional(),
  })
  .meta({ description: "Observed state. The sandbox writes heartbeat, toolCalls and checkpoint; the operator writes the rest." });

export const ObjectMeta = z.looseObject({
  name: z.string().optional(),
  namespace: z.string().optional(),
  uid: z.string().optional(),
  generation: z.int().optional(),
  resourceVersion: z.string().optional(),
  creationTimestamp: z.union([z.string(), z.date()]).optional(),
  deletionTimestamp: z.union([z.string(), z.date()]).optional(),
  annotations: z.record(z.string(), z.string()).optional(),
  labels: z.record(z.string(), z.string()).optional(),
  finalizers: z.array(z.string()).optional(),
});

export const AgentRun = z.looseObject({
  apiVersion: z.string().optional(),
  kind: z.string().optional(),
  metadata: ObjectMeta,
  spec: AgentRunSpec,
  status: AgentRunStatus.optional(),
});

export type BackoffSpec = z.infer<typeof BackoffSpec>;
export type WatchdogSpec = z.infer<typeof WatchdogSpec>;
export type AgentRunSpec = z.infer<typeof AgentRunSpec>;
export type Activity = z.infer<typeof Activity>;
export type Heartbeat = z.infer<typeof Heartbeat>;
export type ToolCall = z.infer<typeof ToolCall>;
export type Checkpoint = z.infer<typeof Checkpoint>;
export type StallStatus = z.infer<typeof StallStatus>;
export type ApprovalStatus = z.infer<typeof ApprovalStatus>;
export type FailureRecord = z.infer<typeof FailureRecord>;
export type AgentRunStatus = z.infer<typeof AgentRunStatus>;
export type AgentRun = z.infer<typeof AgentRun>;
export type SandboxState = (typeof SANDBOX_STATES)[number];
export type ActivityKind = (typeof ACTIVITY_KINDS)[number];
