// What the console's server sends its pages, shared by both sides (the pages import these types
// only): a run as the list and the queue show it.

export interface ApprovalSummary {
  id?: string;
  state: string;
  question?: string;
  requestedAt?: string;
}

export interface RunSummary {
  namespace: string;
  name: string;
  uid: string;
  createdAt: string;
  phase?: string;
  attempt?: number;
  restarts?: number;
  maxRestarts?: number;
  heartbeatTime?: string;
  nudges?: number;
  maxNudges?: number;
  reason?: string;
  message?: string;
  suspended: boolean;
  /** NeedsHumanIntervention, or AwaitingReply with a request pending: a person is needed. */
  needsPerson: boolean;
  approval?: ApprovalSummary;
}
