// #/queue — the runs that wait for a person, each with what can be done for it. A run acted on
// here keeps its card, with the server's answer, while the request is in flight and for
// LINGER_MS after (the watch may report the run moving on before or just after the answer
// comes); then the card goes, and the answer stays in the "Handled here" list until dismissed.
import { useEffect, useMemo, useState } from "preact/hooks";
import { runHref, runKey } from "./api.ts";
import type { RunSummary } from "./api.ts";
import { ActionForms, dismiss, LINGER_MS, useOutcomes } from "./actions.tsx";
import { BudgetCell } from "./budget.tsx";
import type { ActionOutcome } from "./actions.tsx";
import { Field, Notice, PhaseBadge, useTitle } from "./common.tsx";
import { formatTime } from "./format.ts";
import type { RunsView } from "./runs.ts";
import { scope } from "./RunsPage.tsx";
import { Age } from "./tick.tsx";

/** An element id for the run: "__" cannot occur in a namespace or a name, nor come of their dots. */
function idFor(r: RunSummary): string {
  return `q-${r.namespace}__${r.name}`.replace(/[^A-Za-z0-9_-]/g, "_");
}

function QueueItem({ run }: { run: RunSummary }) {
  const headingId = `${idFor(run)}-h`;
  return (
    <article data-run={runKey(run)} class={run.needsPerson ? "card needs-person" : "card"} aria-labelledby={headingId}>
      <h2 id={headingId}>
        <a href={runHref(run.namespace, run.name)}>{run.name}</a>
      </h2>
      <dl class="fields">
        <Field label="Namespace">{run.namespace}</Field>
        <Field label="Phase" always>
          <PhaseBadge phase={run.phase} />
          {!run.needsPerson && <span class="meta"> (no longer waiting for a person)</span>}
        </Field>
        <Field label="Reason">{run.reason}</Field>
        <Field label="Message">{run.message}</Field>
        {/* What a person raising a limit before resuming needs to see. */}
        {run.budget?.nearest && (
          <Field label="Budget">
            <BudgetCell budget={run.budget} />
          </Field>
        )}
        {run.approval?.state === "Pending" && run.approval.requestedAt && (
          <Field label="Asked">
            <time dateTime={run.approval.requestedAt}>{formatTime(run.approval.requestedAt)}</time> (<Age since={run.approval.requestedAt} /> ago)
          </Field>
        )}
      </dl>
      <ActionForms run={run} idPrefix={idFor(run)} freshOnly />
    </article>
  );
}

/** Whether a run acted on keeps its card: in flight, or answered less than LINGER_MS ago. */
function lingers(outcome: ActionOutcome | undefined, now: number): boolean {
  return outcome !== undefined && (outcome.busy === true || (outcome.at !== undefined && now - outcome.at <= LINGER_MS));
}

export function QueuePage({ view }: { view: RunsView }) {
  const { outcomes, version } = useOutcomes();
  const [now, setNow] = useState(Date.now);
  const items = useMemo(() => {
    const cards = view.runs.filter((r) => r.needsPerson || lingers(outcomes.get(runKey(r)), now));
    const handled = view.runs.filter((r) => {
      const o = outcomes.get(runKey(r));
      return !r.needsPerson && o !== undefined && !lingers(o, now) && (o.ok !== undefined || o.error !== undefined);
    });
    return { cards, handled, waiting: cards.filter((r) => r.needsPerson).length };
  }, [view.runs, outcomes, version, now]);
  // Render again when the next lingering card is due to go.
  useEffect(() => {
    let next = Infinity;
    for (const o of outcomes.values()) if (o.at !== undefined && o.at + LINGER_MS >= now) next = Math.min(next, o.at + LINGER_MS);
    if (next === Infinity) return undefined;
    const timer = setTimeout(() => setNow(Date.now()), next - Date.now() + 50);
    return () => clearTimeout(timer);
  }, [outcomes, version, now]);
  useTitle(view.needPerson > 0 ? `Queue (${view.needPerson})` : "Queue");
  const where = scope(view.namespace);

  return (
    <>
      <h1 tabIndex={-1}>Queue</h1>
      {view.stream.error && <Notice kind="error">{view.stream.error}</Notice>}
      {view.problem && <Notice kind="error">{view.problem}</Notice>}
      <p class="intro">
        Runs in {where} that wait for a person: NeedsHumanIntervention (resume it) and AwaitingReply with a pending approval (approve or reject
        it). {view.namespace && <a href="#/">Change the namespace on the Runs page.</a>}
      </p>
      {!view.loaded ? (
        <p class="placeholder">{view.started ? `Loading the AgentRuns in ${where}…` : "Loading…"}</p>
      ) : (
        items.waiting === 0 && <p class="placeholder empty">Nobody is needed: no run is waiting for a person.</p>
      )}
      {items.cards.length > 0 && (
        <div class="cards">
          {items.cards.map((r) => (
            <QueueItem key={runKey(r)} run={r} />
          ))}
        </div>
      )}
      {items.handled.length > 0 && (
        <section aria-labelledby="handled-h" class="handled">
          <h2 id="handled-h">Handled here</h2>
          <ul class="handled-list">
            {items.handled.map((r) => {
              const o = outcomes.get(runKey(r));
              return (
                <li key={runKey(r)}>
                  <a href={runHref(r.namespace, r.name)}>{r.name}</a> <span class="meta">({r.namespace}, now {r.phase ?? "-"})</span>:{" "}
                  {o?.error ? <span class="error-text">Error: {o.error}</span> : o?.ok}{" "}
                  <button type="button" class="link" onClick={() => dismiss(runKey(r))}>
                    Dismiss
                  </button>
                </li>
              );
            })}
          </ul>
        </section>
      )}
    </>
  );
}
