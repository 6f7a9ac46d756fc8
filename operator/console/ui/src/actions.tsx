// What a person can do for a run that waits for one: Resume (NeedsHumanIntervention), Approve or
// Reject (AwaitingReply with a pending approval). The same forms serve the Queue and a run's page.
// The outcome of the last action on a run is kept per run (with the server's sentence), so the
// person still sees it when moving between the two pages, and the Queue can list what was done
// here after the run has left it.
import { useEffect, useState } from "preact/hooks";
import { ApiError, postAction, runKey, UNREACHABLE } from "./api.ts";

export type ActionName = "resume" | "approve" | "reject";

export interface ActionOutcome {
  action: ActionName;
  busy?: boolean;
  ok?: string;
  error?: string;
  /** When the server answered (Date.now()). */
  at?: number;
}

/** How long a run acted on stays in the queue as it was, with its answer, after it stops waiting. */
export const LINGER_MS = 5000;

const outcomes = new Map<string, ActionOutcome>();
const listeners = new Set<() => void>();
let version = 0;

function setOutcome(key: string, outcome: ActionOutcome | undefined): void {
  if (outcome) outcomes.set(key, outcome);
  else outcomes.delete(key);
  version++;
  for (const listener of listeners) listener();
}

export function dismiss(key: string): void {
  setOutcome(key, undefined);
}

/** Every outcome, and a number that changes with any of them (for memo dependencies). */
export function useOutcomes(): { outcomes: ReadonlyMap<string, ActionOutcome>; version: number } {
  const [, setVersion] = useState(0);
  useEffect(() => {
    const listener = () => setVersion(version);
    listeners.add(listener);
    return () => {
      listeners.delete(listener);
    };
  }, []);
  return { outcomes, version };
}

async function act(key: string, action: ActionName, body: Record<string, string>): Promise<void> {
  setOutcome(key, { action, busy: true });
  try {
    setOutcome(key, { action, ok: await postAction(action, body), at: Date.now() });
  } catch (err) {
    setOutcome(key, { action, error: err instanceof ApiError ? err.message : UNREACHABLE, at: Date.now() });
  }
}

export interface Actionable {
  namespace: string;
  name: string;
  phase?: string;
  approval?: { id?: string; state: string; question?: string };
}

/** Whether a person can do something for the run now. */
export function hasActions(run: Actionable): boolean {
  return run.phase === "NeedsHumanIntervention" || (run.phase === "AwaitingReply" && run.approval?.state === "Pending");
}

/**
 * The action forms that apply to the run, and the outcome regions (role=status, role=alert),
 * always there (so that what comes into them is announced) and holding the server's sentence
 * alone. `freshOnly`: a success older than LINGER_MS is not shown (the run is back in the queue
 * for another reason).
 */
export function ActionForms({ run, idPrefix, freshOnly }: { run: Actionable; idPrefix: string; freshOnly?: boolean }) {
  const { outcomes: all } = useOutcomes();
  const key = runKey(run);
  const found = all.get(key);
  const stale = freshOnly && found?.ok !== undefined && found.at !== undefined && Date.now() - found.at > LINGER_MS;
  const outcome: Partial<ActionOutcome> = found && !stale ? found : {};
  const busy = outcome.busy === true;
  const pending = run.phase === "AwaitingReply" && run.approval?.state === "Pending" ? run.approval : undefined;
  return (
    <div class="actions">
      {run.phase === "NeedsHumanIntervention" && (
        <div class="action">
          <p>The watchdog stopped this run and waits for a person. Resume queues a new attempt with fresh budgets.</p>
          <button
            type="button"
            class="primary"
            disabled={busy}
            aria-busy={busy && outcome.action === "resume" ? "true" : undefined}
            onClick={() => void act(key, "resume", { namespace: run.namespace, name: run.name })}
          >
            Resume
          </button>
        </div>
      )}
      {/* A new request (another id) gets fresh, empty fields: an answer is for the question it was typed under. */}
      {pending && <ApprovalForms key={pending.id ?? ""} run={run} approval={pending} idPrefix={idPrefix} outcome={outcome} />}
      {/* Each region holds the server's sentence verbatim and nothing else. */}
      <p role="status" class="outcome ok">
        {outcome.ok}
      </p>
      <p role="alert" class="outcome error">
        {outcome.error}
      </p>
      {busy && <p class="meta">Sending…</p>}
      {(outcome.ok || outcome.error) && (
        <button type="button" class="link" onClick={() => dismiss(key)}>
          Dismiss message
        </button>
      )}
    </div>
  );
}

function ApprovalForms({
  run,
  approval,
  idPrefix,
  outcome,
}: {
  run: Actionable;
  approval: { id?: string; state: string; question?: string };
  idPrefix: string;
  outcome: Partial<ActionOutcome>;
}) {
  const [answer, setAnswer] = useState("");
  const [reason, setReason] = useState("");
  const key = runKey(run);
  const busy = outcome.busy === true;
  const approvalId = approval.id ?? "";
  return (
    <>
      <div class="question">
        <h3 class="small-heading">Question</h3>
        <p class="question-text">{approval.question ?? "The agent did not say what it asks."}</p>
        {approvalId && (
          <p class="meta">
            Request <code>{approvalId}</code>
          </p>
        )}
      </div>
      <form
        class="action"
        onSubmit={(e) => {
          e.preventDefault();
          if (!busy) void act(key, "approve", { namespace: run.namespace, name: run.name, approvalId, answer });
        }}
      >
        <label for={`${idPrefix}-answer`}>Answer</label>
        <input id={`${idPrefix}-answer`} type="text" name="answer" autocomplete="off" value={answer} onInput={(e) => setAnswer(e.currentTarget.value)} />
        <button type="submit" class="primary" disabled={busy} aria-busy={busy && outcome.action === "approve" ? "true" : undefined}>
          Approve
        </button>
      </form>
      <form
        class="action"
        onSubmit={(e) => {
          e.preventDefault();
          if (!busy) void act(key, "reject", { namespace: run.namespace, name: run.name, approvalId, reason });
        }}
      >
        <label for={`${idPrefix}-reason`}>Reason</label>
        <input id={`${idPrefix}-reason`} type="text" name="reason" autocomplete="off" value={reason} onInput={(e) => setReason(e.currentTarget.value)} />
        <button type="submit" class="danger" disabled={busy} aria-busy={busy && outcome.action === "reject" ? "true" : undefined}>
          Reject
        </button>
      </form>
    </>
  );
}
