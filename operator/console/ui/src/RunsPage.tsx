// #/ — every AgentRun the stream holds, in one table: the ones that need a person first.
import { Component } from "preact";
import { useMemo } from "preact/hooks";
import { PHASES, runHref, runKey } from "./api.ts";
import type { RunSummary, Session } from "./api.ts";
import { BudgetCell } from "./budget.tsx";
import { Notice, PhaseBadge, useTitle } from "./common.tsx";
import { ageAt, ratio } from "./format.ts";
import { runsStore } from "./runs.ts";
import type { RunsView } from "./runs.ts";
import { tickCell, untickCell } from "./tick.tsx";

/** The namespace, or "all namespaces", for sentences ("No AgentRuns in team-a."). */
export function scope(namespace: string): string {
  return namespace || "all namespaces";
}

const count = (n: number): string => n.toLocaleString("en");

/** A run has no phase until the operator first writes its status: the filter counts it as Pending. */
function inPhase(run: RunSummary, phase: string): boolean {
  return phase === "" || run.phase === phase || (phase === "Pending" && run.phase === undefined);
}

// A row renders again only when its run's summary changes; its two ages tick on their own
// (tickCell rewrites their text every second without rendering the row).
class Row extends Component<{ run: RunSummary }> {
  private heartbeat: HTMLElement | null = null;
  private age: HTMLElement | null = null;
  private setHeartbeat = (el: HTMLElement | null) => {
    this.heartbeat = el;
  };
  private setAge = (el: HTMLElement | null) => {
    this.age = el;
  };
  override shouldComponentUpdate(next: { run: RunSummary }): boolean {
    return next.run !== this.props.run;
  }
  override componentDidMount(): void {
    this.track();
  }
  override componentDidUpdate(): void {
    this.track();
  }
  override componentWillUnmount(): void {
    untickCell(this.heartbeat);
    untickCell(this.age);
  }
  private track(): void {
    const r = this.props.run;
    // A run without a heartbeat shows "-", which does not tick.
    if (r.heartbeatTime) tickCell(this.heartbeat, r.heartbeatTime);
    else untickCell(this.heartbeat);
    tickCell(this.age, r.createdAt);
  }
  override render() {
    const r = this.props.run;
    const now = Date.now();
    return (
      <tr data-run={runKey(r)} class={r.needsPerson ? "needs-person" : undefined}>
        <td data-col="namespace">{r.namespace}</td>
        <td data-col="name">
          <a href={runHref(r.namespace, r.name)}>{r.name}</a>
        </td>
        <td data-col="phase">
          <PhaseBadge phase={r.phase} />
        </td>
        <td data-col="attempt" class="num">
          {r.attempt ?? "-"}
        </td>
        <td data-col="restarts" class="num">
          {ratio(r.restarts, r.maxRestarts)}
        </td>
        <td data-col="heartbeat" class="num">
          <span class="tick" ref={this.setHeartbeat}>
            {ageAt(r.heartbeatTime, now)}
          </span>
        </td>
        <td data-col="nudges" class="num">
          {ratio(r.nudges, r.maxNudges)}
        </td>
        <td data-col="budget">
          <BudgetCell budget={r.budget} />
        </td>
        <td data-col="reason">{r.reason ?? "-"}</td>
        <td data-col="age" class="num">
          <span class="tick" ref={this.setAge}>
            {ageAt(r.createdAt, now)}
          </span>
        </td>
      </tr>
    );
  }
}

export function RunsPage({
  view,
  session,
  phase,
  setPhase,
}: {
  view: RunsView;
  session: Session | undefined;
  phase: string;
  setPhase: (phase: string) => void;
}) {
  useTitle(view.namespace ? `Runs in ${view.namespace}` : "Runs");
  const rows = useMemo(() => (phase === "" ? view.runs : view.runs.filter((r) => inPhase(r, phase))), [view.runs, phase]);
  const namespaces = useMemo(() => {
    const all = new Set(view.namespaces);
    if (session?.namespace) all.add(session.namespace);
    if (view.namespace) all.add(view.namespace);
    return [...all].sort();
  }, [view.namespaces, view.namespace, session?.namespace]);
  const where = scope(view.namespace);

  return (
    <>
      <h1 tabIndex={-1}>Runs</h1>
      {view.stream.error && <Notice kind="error">{view.stream.error}</Notice>}
      {view.problem && <Notice kind="error">{view.problem}</Notice>}
      <div class="filters">
        <div class="filter">
          <label for="filter-namespace">Namespace</label>
          <select id="filter-namespace" value={view.namespace} onChange={(e) => runsStore.open(e.currentTarget.value)}>
            <option value="">All namespaces</option>
            {namespaces.map((ns) => (
              <option key={ns} value={ns}>
                {ns}
              </option>
            ))}
          </select>
        </div>
        <div class="filter">
          <label for="filter-phase">Phase</label>
          <select id="filter-phase" value={phase} onChange={(e) => setPhase(e.currentTarget.value)}>
            <option value="">All</option>
            {PHASES.map((p) => (
              <option key={p} value={p}>
                {p}
              </option>
            ))}
          </select>
        </div>
        <p class="counts" id="runs-counts" aria-live="polite">
          {view.loaded &&
            (phase
              ? `${count(rows.length)} of ${count(view.runs.length)} runs in ${where} are ${phase}`
              : `${count(view.runs.length)} ${view.runs.length === 1 ? "run" : "runs"} in ${where}, ${count(view.needPerson)} ${view.needPerson === 1 ? "needs" : "need"} a person`)}
        </p>
      </div>
      {!view.loaded ? (
        <p class="placeholder">{view.started ? `Loading the AgentRuns in ${where}…` : "Loading…"}</p>
      ) : view.runs.length === 0 ? (
        <p class="placeholder empty">No AgentRuns in {where}.</p>
      ) : rows.length === 0 ? (
        <p class="placeholder empty">
          No AgentRuns in {where} in phase {phase}.
        </p>
      ) : (
        <div class="table-wrap runs-wrap">
          {/* Named "AgentRuns" alone: a name that said "namespace" or "phase" would answer to the filters' labels too. */}
          <table class="runs" aria-label="AgentRuns" aria-describedby="runs-counts">
            <caption class="sr-only">AgentRuns, the ones that need a person first</caption>
            <colgroup>
              <col class="c-namespace" />
              <col class="c-name" />
              <col class="c-phase" />
              <col class="c-attempt" />
              <col class="c-restarts" />
              <col class="c-heartbeat" />
              <col class="c-nudges" />
              <col class="c-budget" />
              <col class="c-reason" />
              <col class="c-age" />
            </colgroup>
            <thead>
              <tr>
                <th scope="col">Namespace</th>
                <th scope="col">Name</th>
                <th scope="col">Phase</th>
                <th scope="col" class="num">
                  Attempt
                </th>
                <th scope="col" class="num">
                  Restarts
                </th>
                <th scope="col" class="num">
                  Heartbeat
                </th>
                <th scope="col" class="num">
                  Nudges
                </th>
                <th scope="col">Budget</th>
                <th scope="col">Reason</th>
                <th scope="col" class="num">
                  Age
                </th>
              </tr>
            </thead>
            <tbody>
              {rows.map((r) => (
                <Row key={runKey(r)} run={r} />
              ))}
            </tbody>
          </table>
        </div>
      )}
    </>
  );
}
