// Reasons used in conditions, status.reason, Events, the backoff-reason annotation and metrics.
export const REASONS = {
  created: "Created",
  running: "SandboxRunning",
  heartbeatTimeout: "HeartbeatTimeout",
  podFailed: "PodFailed",
  rateLimited: "RateLimited",
  toolLoop: "ToolLoop",
  recoveryBudgetExhausted: "RecoveryBudgetExhausted",
  stallUnresolved: "StallUnresolved",
  stallDetected: "StallDetected",
  stallResolved: "StallResolved",
  suspended: "Suspended",
  unsuspended: "Unsuspended",
  resumed: "Resumed",
  completed: "Completed",
  invalidSandboxReport: "InvalidSandboxReport",
  validSandboxReport: "Valid",
  notFinished: "NotFinished",
  unconfirmedSideEffect: "UnconfirmedSideEffect",
  sandboxReleased: "SandboxReleased",
  approved: "Approved",
  rejected: "Rejected",
  approvalTimeout: "ApprovalTimeout",
  startTimeout: "StartTimeout",
  answerRefused: "AnswerRefused",
  approvalRequested: "ApprovalRequested",
  nodeUnreachable: "NodeUnreachable",
  terminationPending: "TerminationPending",
  sandboxGone: "SandboxGone",
  sandboxAdopted: "SandboxAdopted",
  rateLimitRequeuesExhausted: "RateLimitRequeuesExhausted",
  statusWriteRefused: "StatusWriteRefused",
  sandboxReportTooLarge: "SandboxReportTooLarge",
  approvalWithdrawn: "ApprovalWithdrawn",
  deleting: "Deleting",
  serviceAccountRefused: "ServiceAccountRefused",
  budgetExhausted: "BudgetExhausted",
  budgetWarning: "BudgetWarning",
} as const;

/** Failures that spend the recovery allowance (maxRestarts). */
export type RestartReason = typeof REASONS.heartbeatTimeout | typeof REASONS.podFailed | typeof REASONS.startTimeout;
/** Reasons that leave a run waiting for a person. */
export type InterventionReason =
  | typeof REASONS.toolLoop
  | typeof REASONS.recoveryBudgetExhausted
  | typeof REASONS.stallUnresolved
  | typeof REASONS.unconfirmedSideEffect
  | typeof REASONS.rateLimitRequeuesExhausted
  | typeof REASONS.statusWriteRefused
  | typeof REASONS.sandboxReportTooLarge
  | typeof REASONS.budgetExhausted;
