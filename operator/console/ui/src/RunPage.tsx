// #/runs/NS/NAME — one run, live from ./api/stream/run: its state, budget, spec, effective
// watchdog settings, conditions, approval, merged timeline and sandbox logs, and what a person can
// do.
import { useCallback, useEffect, useRef, useState } from "preact/hooks";
import { ActionForms, hasActions, useOutcomes } from "./actions.tsx";
import { ApiError, getDetails, getLogs, query, runKey, UNREACHABLE } from "./api.ts";
import type { AgentRun, BudgetSummary, RunDetails, RunLogs, RunSummary } from "./api.ts";
import { BudgetSection } from "./budget.tsx";
import { Field, Notice, PhaseBadge, useTitle } from "./common.tsx";
import { formatTime, ratio } from "./format.ts";
import { Stream } from "./stream.ts";
import type { StreamState } from "./stream.ts";
import { Age } from "./tick.tsx";

const APPROVAL_REQUEST_KEY = "watchdog.dev/approval-request";
const DETAILS_DEBOUNCE_MS = 1000;

type RunState = { state: "loading" } | { state: "found"; run: AgentRun } | { state: "gone" };

function errorText(err: unknown): string {
  return err instanceof ApiError ? err.message : UNREACHABLE;
}

/** The question the sandbox saved in its checkpoint while it awaits a reply. */
function checkpointQuestion(run: AgentRun): string | undefined {
  const data = run.status?.checkpoint?.data;
  if (!data || typeof data !== "object" || Array.isArray(data)) return undefined;
  const request = (data as Record<string, unknown>)[APPROVAL_REQUEST_KEY];
  const question = request && typeof request === "object" ? (request as { question?: unknown }).question : undefined;
  return typeof question === "string" && question !== "" ? question : undefined;
}

function useRunStream(namespace: string, name: string): { run: RunState; budget: BudgetSummary | undefined; stream: StreamState; problem: string | undefined } {
  const [run, setRun] = useState<RunState>({ state: "loading" });
  // Sent right after each version of the run: what the server works out of it.
  const [budget, setBudget] = useState<BudgetSummary | undefined>(undefined);
  const [stream, setStream] = useState<StreamState>({ open: false });
  const [problem, setProblem] = useState<string | undefined>(undefined);
  useEffect(() => {
    const s = new Stream(
      `./api/stream/run${query({ namespace, name })}`,
      {
        run: (data) => {
          if (data && typeof data === "object" && (data as AgentRun).metadata) {
            setRun({ state: "found", run: data as AgentRun });
            setProblem(undefined);
          }
        },
        summary: (data) => {
          if (data && typeof data === "object") setBudget((data as RunSummary).budget);
        },
        remove: () => {
          setRun({ state: "gone" });
          setBudget(undefined);
          setProblem(undefined);
        },
        problem: (data) => {
          const message = (data as { message?: unknown } | null)?.message;
          setProblem(typeof message === "string" ? message : "The console's server reported a problem.");
        },
      },
      (state) => {
        setStream(state);
        if (state.status === 404) setRun({ state: "gone" });
      },
    );
    return () => s.close();
  }, [namespace, name]);
  return { run, budget, stream, problem };
}

type DetailsState = { state: "loading" } | { state: "ok"; details: RunDetails } | { state: "error"; message: string };

/** The merged timeline, fetched once the run is there and again ~1 s after each new version. */
function useDetails(namespace: string, name: string, resourceVersion: string | undefined): DetailsState {
  const [details, setDetails] = useState<DetailsState>({ state: "loading" });
  const asked = useRef(0);
  const controller = useRef<AbortController | undefined>(undefined);
  useEffect(() => {
    const c = new AbortController();
    controller.current = c;
    return () => c.abort();
  }, []);
  useEffect(() => {
    if (resourceVersion === undefined) return undefined;
    const load = () => {
      const signal = controller.current?.signal;
      const n = ++asked.current;
      getDetails(namespace, name, signal).then(
        (d) => {
          if (n !== asked.current) return; // a newer answer is coming
          setDetails({ state: "ok", details: { timeline: Array.isArray(d.timeline) ? d.timeline : [], notes: Array.isArray(d.notes) ? d.notes : [] } });
        },
        (err: unknown) => {
          if (signal?.aborted || n !== asked.current) return;
          // A failed refetch keeps the timeline shown.
          setDetails((old) => (old.state === "ok" ? old : { state: "error", message: errorText(err) }));
        },
      );
    };
    if (asked.current === 0) {
      load();
      return undefined;
    }
    const timer = setTimeout(load, DETAILS_DEBOUNCE_MS);
    return () => clearTimeout(timer);
  }, [namespace, name, resourceVersion]);
  return details;
}

type LogsState = { state: "loading"; last?: RunLogs } | { state: "ok"; logs: RunLogs } | { state: "error"; message: string };

function useLogs(namespace: string, name: string): { logs: LogsState; refresh: () => void } {
  const [logs, setLogs] = useState<LogsState>({ state: "loading" });
  const [version, setVersion] = useState(0);
  useEffect(() => {
    const controller = new AbortController();
    setLogs((old) => ({ state: "loading", ...(old.state === "ok" ? { last: old.logs } : {}) }));
    getLogs(namespace, name, controller.signal).then(
      (l) => setLogs({ state: "ok", logs: l }),
      (err: unknown) => {
        if (!controller.signal.aborted) setLogs({ state: "error", message: errorText(err) });
      },
    );
    return () => controller.abort();
  }, [namespace, name, version]);
  const refresh = useCallback(() => setVersion((v) => v + 1), []);
  return { logs, refresh };
}

/** status.watchdog flattened to the CRD's field paths: backoff.initial, stall.maxNudges, ... */
function flatten(value: unknown, prefix = ""): [string, string][] {
  if (value === null || value === undefined) return [];
  if (typeof value !== "object" || Array.isArray(value)) return [[prefix, typeof value === "string" ? value : JSON.stringify(value)]];
  return Object.entries(value as Record<string, unknown>).flatMap(([k, v]) => flatten(v, prefix ? `${prefix}.${k}` : k));
}

function When({ time }: { time: string | undefined }) {
  if (!time) return <>-</>;
  return (
    <>
      <time dateTime={time}>{formatTime(time)}</time> <span class="meta">(<Age since={time} /> ago)</span>
    </>
  );
}

export function RunPage({ namespace, name }: { namespace: string; name: string }) {
  const { run, budget, stream, problem } = useRunStream(namespace, name);
  const found = run.state === "found" ? run.run : undefined;
  const details = useDetails(namespace, name, found?.metadata.resourceVersion ?? (found ? "" : undefined));
  const gone = run.state === "gone";
  useTitle(gone ? "Run not found" : `${name} (${namespace})`);

  if (gone) {
    return (
      <>
        <h1 tabIndex={-1}>Run not found</h1>
        {problem && <Notice kind="error">{problem}</Notice>}
        <p>
          There is no AgentRun <strong>{name}</strong> in namespace <strong>{namespace}</strong>: it may have been deleted. The page shows it again
          if it is created.
        </p>
        <p>
          <a href="#/">Back to the runs</a>
        </p>
      </>
    );
  }

  return (
    <>
      <p class="crumbs">
        <a href="#/">Runs</a> <span aria-hidden="true">/</span> {namespace}
      </p>
      <h1 tabIndex={-1}>{name}</h1>
      {stream.error && <Notice kind="error">{stream.error}</Notice>}
      {problem && <Notice kind="error">{problem}</Notice>}
      {!found ? <p class="placeholder">Loading the AgentRun…</p> : <RunBody run={found} budget={budget} namespace={namespace} name={name} details={details} />}
    </>
  );
}

function RunBody({ run, budget, namespace, name, details }: { run: AgentRun; budget: BudgetSummary | undefined; namespace: string; name: string; details: DetailsState }) {
  const status = run.status ?? {};
  const spec = run.spec ?? {};
  const { outcomes } = useOutcomes();
  // The question as the operator recorded it when the request was made: what the sandbox writes
  // into its checkpoint afterwards cannot change what an approver reads. (The checkpoint's is only
  // shown while no request has recorded one.)
  const question = status.approval?.question ?? checkpointQuestion(run);
  const approval = status.approval ? { ...status.approval, ...(question ? { question } : {}) } : undefined;
  const actionable = { namespace, name, ...(status.phase ? { phase: status.phase } : {}), ...(approval ? { approval } : {}) };
  const showActions = hasActions(actionable) || outcomes.has(runKey(actionable));
  const containers = spec.template?.spec?.containers ?? [];
  const watchdog = flatten(status.watchdog);
  const conditions = status.conditions ?? [];

  return (
    <>
      <div class="run-head">
        <dl class="fields inline">
          <Field label="Namespace">{namespace}</Field>
          <Field label="Phase" always>
            <PhaseBadge phase={status.phase} />
          </Field>
          <Field label="Reason">{status.reason}</Field>
        </dl>
        {status.message && <p class="message">{status.message}</p>}
        <dl class="fields grid">
          <Field label="Attempt">{status.attempt ?? "-"}</Field>
          <Field label="Restarts">{ratio(status.restarts, status.watchdog?.maxRestarts as number | undefined)}</Field>
          <Field label="Heartbeat" always>
            {status.heartbeat?.time ? (
              <>
                <Age since={status.heartbeat.time} /> ago{status.heartbeat.state ? `, ${status.heartbeat.state}` : ""}
              </>
            ) : (
              "-"
            )}
          </Field>
          <Field label="Nudges">{ratio(status.stall?.nudges, (status.watchdog?.stall as { maxNudges?: number } | undefined)?.maxNudges)}</Field>
          <Field label="Sandbox pod">{status.podName ?? "-"}</Field>
          <Field label="Node">{status.nodeName}</Field>
          <Field label="Created" always>
            <When time={run.metadata.creationTimestamp} />
          </Field>
          {status.completionTime && (
            <Field label="Finished">
              <When time={status.completionTime} />
            </Field>
          )}
        </dl>
        {status.lastFailure?.reason && (
          <p class="meta">
            Last failure: <strong>{status.lastFailure.reason}</strong>
            {status.lastFailure.attempt !== undefined ? ` (attempt ${status.lastFailure.attempt})` : ""}
            {status.lastFailure.message ? `: ${status.lastFailure.message}` : ""}
          </p>
        )}
      </div>

      {showActions && (
        <section aria-labelledby="sec-actions" class="card needs-person">
          <h2 id="sec-actions">What you can do</h2>
          <ActionForms run={actionable} idPrefix="run" />
        </section>
      )}

      {budget && <BudgetSection budget={budget} attempt={status.attempt} />}

      <section aria-labelledby="sec-spec">
        <h2 id="sec-spec">Spec</h2>
        <dl class="fields">
          <Field label="Goal" always>
            {spec.goal ? <p class="goal">{spec.goal}</p> : <span class="meta">No goal given.</span>}
          </Field>
          <Field label="Suspend" always>
            {spec.suspend ? "true (the run is paused)" : "false"}
          </Field>
          <Field label="Containers" always>
            {containers.length === 0 ? (
              "-"
            ) : (
              <ul class="plain">
                {containers.map((c) => (
                  <li key={c.name}>
                    <code>{c.name}</code>: <code>{c.image ?? "(no image)"}</code>
                  </li>
                ))}
              </ul>
            )}
          </Field>
        </dl>
      </section>

      <section aria-labelledby="sec-watchdog">
        <h2 id="sec-watchdog">Watchdog settings</h2>
        {watchdog.length === 0 ? (
          <p class="meta">The operator has not recorded this run's effective settings yet.</p>
        ) : (
          <>
            <p class="meta">In effect for this run: its spec.watchdog over the install defaults over the built-in defaults.</p>
            <dl class="fields settings">
              {watchdog.map(([key, value]) => (
                <div class="field" key={key}>
                  <dt>
                    <code>{key}</code>
                  </dt>
                  <dd>{value}</dd>
                </div>
              ))}
            </dl>
          </>
        )}
      </section>

      <section aria-labelledby="sec-conditions">
        <h2 id="sec-conditions">Conditions</h2>
        {conditions.length === 0 ? (
          <p class="meta">No conditions yet.</p>
        ) : (
          // Focusable: on a narrow screen the table scrolls sideways, and the keyboard must reach that too.
          <div class="table-wrap" role="region" aria-label="Conditions table" tabIndex={0}>
            <table aria-labelledby="sec-conditions">
              <thead>
                <tr>
                  <th scope="col">Type</th>
                  <th scope="col">Status</th>
                  <th scope="col">Reason</th>
                  <th scope="col">Message</th>
                  <th scope="col">Last transition</th>
                </tr>
              </thead>
              <tbody>
                {conditions.map((c) => (
                  <tr key={c.type} data-condition={c.type}>
                    <td>{c.type}</td>
                    <td>{c.status}</td>
                    <td>{c.reason ?? "-"}</td>
                    <td class="wrap">{c.message || "-"}</td>
                    <td>
                      <When time={c.lastTransitionTime} />
                    </td>
                  </tr>
                ))}
              </tbody>
            </table>
          </div>
        )}
      </section>

      {(approval || question) && (
        <section aria-labelledby="sec-approval">
          <h2 id="sec-approval">Approval</h2>
          <dl class="fields">
            <Field label="Question" always>
              {question ?? <span class="meta">Not recorded.</span>}
            </Field>
            <Field label="State" always>
              {approval?.state ?? "-"}
            </Field>
            <Field label="Request id">{approval?.id ? <code>{approval.id}</code> : undefined}</Field>
            {approval?.requestedAt && (
              <Field label="Requested">
                <When time={approval.requestedAt} />
              </Field>
            )}
            <Field label="Answer">{approval?.answer}</Field>
            <Field label="Rejection reason">{approval?.reason}</Field>
            {approval?.decidedAt && (
              <Field label="Decided">
                <When time={approval.decidedAt} />
              </Field>
            )}
          </dl>
        </section>
      )}

      <section aria-labelledby="sec-timeline">
        <h2 id="sec-timeline">Timeline</h2>
        <Timeline details={details} />
      </section>

      <section aria-labelledby="sec-logs">
        <h2 id="sec-logs">Sandbox logs</h2>
        <Logs namespace={namespace} name={name} />
      </section>
    </>
  );
}

const KIND_LABEL: Record<string, string> = { phase: "Phase", event: "Event", tool: "Tool", nudge: "Nudge", gap: "Gap" };

function Timeline({ details }: { details: DetailsState }) {
  if (details.state === "loading") return <p class="placeholder">Loading the timeline…</p>;
  if (details.state === "error") return <Notice kind="error">{details.message}</Notice>;
  const { timeline, notes } = details.details;
  return (
    <>
      {notes.length > 0 && (
        <ul class="notes">
          {notes.map((n, i) => (
            <li key={i}>{n}</li>
          ))}
        </ul>
      )}
      {timeline.length === 0 ? (
        <p class="meta">Nothing recorded yet.</p>
      ) : (
        <ol class="timeline">
          {timeline.map((item, i) => (
            <li key={`${item.time}-${i}`} class={`kind-${item.kind}${item.warning ? " warning" : ""}`} data-kind={item.kind}>
              <time dateTime={item.time}>{formatTime(item.time)}</time>
              <span class="kind">{KIND_LABEL[item.kind] ?? item.kind}</span>
              <div class="body">
                {item.warning && <span class="warn-label">Warning</span>} <span class="title">{item.title}</span>
                {item.detail && <div class="detail">{item.detail}</div>}
              </div>
            </li>
          ))}
        </ol>
      )}
    </>
  );
}

function Logs({ namespace, name }: { namespace: string; name: string }) {
  const { logs, refresh } = useLogs(namespace, name);
  const shown = logs.state === "ok" ? logs.logs : logs.state === "loading" ? logs.last : undefined;
  return (
    <>
      <div class="logs-bar">
        <p class="meta" id="logs-state">
          {shown && "pod" in shown ? (
            <>
              Pod <code>{shown.pod}</code>, container <code>{shown.container}</code>: the last lines.
              {logs.state === "loading" ? " Refreshing…" : ""}
            </>
          ) : logs.state === "loading" ? (
            "Loading the logs…"
          ) : (
            ""
          )}
        </p>
        <button type="button" onClick={refresh} aria-describedby="logs-state">
          Refresh
        </button>
      </div>
      {logs.state === "error" && <Notice kind="error">{logs.message}</Notice>}
      {shown && "message" in shown && <p class="placeholder">{shown.message}</p>}
      {shown && "pod" in shown && (
        <div class="log-scroll" role="region" aria-label="Sandbox log text" tabIndex={0}>
          <pre>{shown.text || "(the log is empty)"}</pre>
        </div>
      )}
    </>
  );
}
