// What operators of agent-watchdog look at: the Prometheus alerts, the Grafana dashboard, and
// the kind script that runs the image. The alerts are checked and unit-tested with promtool; the
// dashboard's queries are parsed by promtool too; and every metric either of them names is
// looked up in the /metrics of a real operator, with the ledger on, after it has done the things
// that create its event-driven series.
import { execFileSync, spawnSync } from "node:child_process";
import { mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { parseAllDocuments, parse as parseYaml, stringify as stringifyYaml } from "yaml";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { SANDBOX_FIELD_MANAGER } from "../../operator/api/annotations.ts";
import { paths, type KubeClient } from "../../operator/kube/client.ts";
import { createDatabase, type TestDatabase } from "../ledger/support.ts";
import { createRun, deleteNamespace, getRun, kube, newNamespace, runManifest } from "../support/cluster.ts";
import { startOperator, type OperatorProcess } from "../support/operator-process.ts";
import { waitFor } from "../support/wait.ts";

const root = fileURLToPath(new URL("../..", import.meta.url));
const RULES = join(root, "charts/agent-watchdog/files/prometheus-rules.yaml");
const DASHBOARD = join(root, "charts/agent-watchdog/files/dashboard.json");
const RUNBOOK = join(root, "charts/agent-watchdog/files/RUNBOOK.md");
const ALERT_TESTS = join(root, "test/alerts");

interface Rule {
  alert?: string;
  record?: string;
  expr: string;
  for?: string;
  labels?: Record<string, string>;
  annotations?: Record<string, string>;
}
interface RuleFile {
  groups: { name: string; rules: Rule[] }[];
}

const ruleFile = parseYaml(readFileSync(RULES, "utf8")) as RuleFile;
const alerts = ruleFile.groups.flatMap((g) => g.rules).filter((r): r is Rule & { alert: string } => r.alert !== undefined);
const dashboard = JSON.parse(readFileSync(DASHBOARD, "utf8"));

let promtoolPath: string | undefined;
function promtool(args: string[]): { code: number | null; output: string } {
  promtoolPath ??= execFileSync("bash", [join(root, "hack/control-plane.sh"), "bin", "promtool"], { encoding: "utf8", stdio: ["ignore", "pipe", "inherit"] }).trim();
  const result = spawnSync(promtoolPath, args, { cwd: root, encoding: "utf8", timeout: 120_000 });
  return { code: result.status, output: `${result.stdout}${result.stderr}` };
}

// ---------------------------------------------------------------------------------------------
// PromQL: the metric names and label matchers an expression uses

interface Matcher {
  label: string;
  op: "=" | "!=" | "=~" | "!~";
  value: string;
}
interface Selector {
  metric: string;
  matchers: Matcher[];
}

type Token = { kind: "ident" | "number" | "string" | "punct"; text: string };

/** Tokens of a PromQL expression; range and subquery brackets (`[5m]`, `[1h:5m]`) are dropped. */
function tokenize(expr: string): Token[] {
  const tokens: Token[] = [];
  let i = 0;
  while (i < expr.length) {
    const c = expr[i] as string;
    if (/\s/.test(c)) {
      i++;
    } else if (c === "#") {
      while (i < expr.length && expr[i] !== "\n") i++;
    } else if (c === '"' || c === "'" || c === "`") {
      let value = "";
      i++;
      while (i < expr.length && expr[i] !== c) {
        if (expr[i] === "\\" && c !== "`") i++;
        value += expr[i];
        i++;
      }
      if (i >= expr.length) throw new Error(`unterminated string in ${expr}`);
      i++;
      tokens.push({ kind: "string", text: value });
    } else if (c === "[") {
      const end = expr.indexOf("]", i);
      if (end < 0) throw new Error(`unterminated [ in ${expr}`);
      i = end + 1;
    } else if (/[A-Za-z_:]/.test(c)) {
      const m = /^[A-Za-z_:][A-Za-z0-9_:]*/.exec(expr.slice(i))![0];
      tokens.push({ kind: "ident", text: m });
      i += m.length;
    } else if (/[0-9.]/.test(c)) {
      // numbers, hex, exponents and durations (offset 10m) are one token
      const m = /^[0-9.][0-9A-Za-z_.]*([eE][+-]?[0-9]+)?/.exec(expr.slice(i))![0];
      tokens.push({ kind: "number", text: m });
      i += m.length;
    } else {
      const two = expr.slice(i, i + 2);
      const op = ["=~", "!~", "!=", "==", ">=", "<="].includes(two) ? two : c;
      tokens.push({ kind: "punct", text: op });
      i += op.length;
    }
  }
  return tokens;
}

const GROUPING = new Set(["by", "without", "on", "ignoring", "group_left", "group_right"]);
const KEYWORDS = new Set(["and", "or", "unless", "offset", "bool", "inf", "nan", "atan2"]);

/** Every series selector in a PromQL expression (Grafana variables allowed). */
function selectors(rawExpr: string): Selector[] {
  // Grafana's variables: inside ranges and strings they vanish anyway; elsewhere they are values.
  const expr = rawExpr.replace(/\$\{[^}]*\}|\$\w+/g, "1");
  const tokens = tokenize(expr);
  const out: Selector[] = [];
  const matchersAt = (start: number): { matchers: Matcher[]; next: number } => {
    const matchers: Matcher[] = [];
    let j = start + 1;
    while (tokens[j] && tokens[j]!.text !== "}") {
      const label = tokens[j];
      const op = tokens[j + 1];
      const value = tokens[j + 2];
      if (label?.kind !== "ident" && label?.kind !== "string") throw new Error(`bad matcher in ${rawExpr}`);
      if (!op || !["=", "!=", "=~", "!~"].includes(op.text) || value?.kind !== "string") throw new Error(`bad matcher in ${rawExpr}`);
      matchers.push({ label: label.text, op: op.text as Matcher["op"], value: value.text });
      j += 3;
      if (tokens[j]?.text === ",") j++;
    }
    if (!tokens[j]) throw new Error(`unterminated { in ${rawExpr}`);
    return { matchers, next: j + 1 };
  };
  for (let i = 0; i < tokens.length; ) {
    const token = tokens[i]!;
    const next = tokens[i + 1];
    if (token.kind === "ident" && GROUPING.has(token.text.toLowerCase())) {
      // a label list, not series: skip to its closing parenthesis
      i++;
      if (tokens[i]?.text === "(") {
        while (tokens[i] && tokens[i]!.text !== ")") i++;
        i++;
      }
    } else if (token.kind === "ident" && KEYWORDS.has(token.text.toLowerCase())) {
      i++;
    } else if (token.kind === "ident" && (next?.text === "(" || (next?.kind === "ident" && ["by", "without"].includes(next.text.toLowerCase())))) {
      i++; // a function, or an aggregation (`sum by (x) (...)`)
    } else if (token.kind === "ident") {
      if (next?.text === "{") {
        const { matchers, next: after } = matchersAt(i + 1);
        out.push({ metric: token.text, matchers });
        i = after;
      } else {
        out.push({ metric: token.text, matchers: [] });
        i++;
      }
    } else if (token.text === "{") {
      const { matchers, next: after } = matchersAt(i);
      const name = matchers.find((m) => m.label === "__name__" && m.op === "=");
      if (!name) throw new Error(`a selector without a metric name in ${rawExpr}`);
      out.push({ metric: name.value, matchers: matchers.filter((m) => m !== name) });
      i = after;
    } else {
      i++;
    }
  }
  return out;
}

/** Selectors of a Grafana variable query: label_values(<selector>, <label>) or plain PromQL. */
function variableSelectors(query: string): { selectors: Selector[]; label?: string } {
  const m = /^\s*label_values\(\s*(.+?)\s*,\s*(\w+)\s*\)\s*$/.exec(query);
  if (m) return { selectors: selectors(m[1]!), label: m[2]! };
  return { selectors: selectors(query) };
}

// ---------------------------------------------------------------------------------------------
// Prometheus text exposition

interface Exposition {
  /** family name -> type, from # TYPE lines */
  types: Map<string, string>;
  /** sample name -> the label sets of its samples */
  samples: Map<string, Record<string, string>[]>;
}

function parseExposition(text: string): Exposition {
  const types = new Map<string, string>();
  const samples = new Map<string, Record<string, string>[]>();
  for (const line of text.split("\n")) {
    const type = /^# TYPE (\S+) (\S+)/.exec(line);
    if (type) types.set(type[1]!, type[2]!);
    if (!line || line.startsWith("#")) continue;
    const m = /^([A-Za-z_:][A-Za-z0-9_:]*)(\{(.*)\})?\s+\S+/.exec(line);
    if (!m) throw new Error(`unparseable metrics line: ${line}`);
    const labels: Record<string, string> = {};
    for (const l of (m[3] ?? "").matchAll(/(\w+)="((?:[^"\\]|\\.)*)"/g)) labels[l[1]!] = l[2]!.replace(/\\(.)/g, "$1");
    samples.set(m[1]!, [...(samples.get(m[1]!) ?? []), labels]);
  }
  return { types, samples };
}

/** Labels Prometheus adds to a target's series; the operator does not expose them itself. */
const TARGET_LABELS = new Set(["job", "instance", "pod", "namespace", "service", "endpoint", "container"]);

/**
 * Problems with the selectors' metrics and label matchers in what the operator exposes: a name
 * must belong to a declared family (histogram series by their _bucket, _sum and _count names)
 * and have samples; an equality or regex matcher on a label the operator sets must match one
 * of them.
 */
function missingFrom(exposition: Exposition, uses: { where: string; selectors: Selector[]; label?: string }[]): string[] {
  const problems: string[] = [];
  for (const use of uses) {
    for (const { metric, matchers } of use.selectors) {
      if (metric === "up") continue; // Prometheus' own, per target
      const family = /^(.*)_(bucket|sum|count)$/.exec(metric)?.[1];
      const familyType = exposition.types.get(metric) ?? (family !== undefined ? exposition.types.get(family) : undefined);
      const declaredAs = exposition.types.has(metric) ? metric : family;
      if (familyType === undefined) {
        problems.push(`${use.where}: ${metric} is not exposed`);
        continue;
      }
      if (declaredAs === family && !["histogram", "summary"].includes(familyType)) {
        problems.push(`${use.where}: ${metric}: ${family} is a ${familyType}, not a histogram`);
        continue;
      }
      const found = exposition.samples.get(metric) ?? [];
      if (found.length === 0) {
        problems.push(`${use.where}: ${metric} is declared (${familyType}) but has no samples${familyType === "histogram" && metric === declaredAs ? "; use its _bucket, _sum or _count series" : ""}`);
        continue;
      }
      for (const matcher of matchers) {
        if (TARGET_LABELS.has(matcher.label) || matcher.op === "!=" || matcher.op === "!~") continue;
        const test = matcher.op === "=" ? (v: string | undefined) => (v ?? "") === matcher.value : (v: string | undefined) => new RegExp(`^(?:${matcher.value})$`).test(v ?? "");
        if (!found.some((labels) => test(labels[matcher.label]))) {
          problems.push(`${use.where}: no ${metric} sample has ${matcher.label}${matcher.op}"${matcher.value}"`);
        }
      }
    }
    if (use.label) {
      for (const { metric } of use.selectors) {
        const found = exposition.samples.get(metric) ?? [];
        if (!TARGET_LABELS.has(use.label) && !found.some((labels) => use.label! in labels)) problems.push(`${use.where}: ${metric} has no label ${use.label}`);
      }
    }
  }
  return problems;
}

interface DashboardTarget {
  expr: string;
  refId: string;
}
interface DashboardPanel {
  id: number;
  type: string;
  title: string;
  datasource?: { type: string; uid: string };
  gridPos: { x: number; y: number; w: number; h: number };
  targets?: (DashboardTarget & { datasource?: { uid: string } })[];
}
const panels = dashboard.panels as DashboardPanel[];
const queryPanels = panels.filter((p) => p.type !== "row");

/** Every PromQL use in the alerts and the dashboard, labelled with where it is. */
function allUses(): { where: string; selectors: Selector[]; label?: string }[] {
  const uses: { where: string; selectors: Selector[]; label?: string }[] = [];
  for (const rule of alerts) uses.push({ where: `alert ${rule.alert}`, selectors: selectors(rule.expr) });
  for (const panel of queryPanels) {
    for (const target of panel.targets ?? []) uses.push({ where: `panel "${panel.title}" ${target.refId}`, selectors: selectors(target.expr) });
  }
  for (const variable of dashboard.templating.list as { name: string; type: string; query: unknown }[]) {
    if (variable.type !== "query") continue;
    const query = typeof variable.query === "string" ? variable.query : (variable.query as { query: string }).query;
    uses.push({ where: `variable $${variable.name}`, ...variableSelectors(query) });
  }
  return uses;
}

// ---------------------------------------------------------------------------------------------

describe("PromQL metric extraction", () => {
  it("finds metrics and ignores functions, keywords, labels, numbers and durations", () => {
    const names = (expr: string) => selectors(expr).map((s) => s.metric).sort();
    expect(names('sum without (instance, pod) (rate(foo_total{job=~"a.*", result="error"}[5m])) / on (job) group_left (x) bar > 0.5')).toEqual(["bar", "foo_total"]);
    expect(names("histogram_quantile(0.99, sum by (le) (rate(lat_seconds_bucket[$__rate_interval])))")).toEqual(["lat_seconds_bucket"]);
    expect(names('absent(up{job=~".*x.*"} == 1)')).toEqual(["up"]);
    expect(names("a unless a offset 10m and on (job, instance) (b offset 1h30m or on (job) time() - c < 600)")).toEqual(["a", "a", "b", "c"]);
    expect(names('count_values("value", d) > bool 1e3 + Inf - NaN')).toEqual(["d"]);
    expect(names("max(e) by (phase) * 0x1F")).toEqual(["e"]);
    expect(names('{__name__="f", x="y"}')).toEqual(["f"]);
    expect(selectors('g{phase=~"A|B", le!="+Inf"}')[0]!.matchers).toEqual([
      { label: "phase", op: "=~", value: "A|B" },
      { label: "le", op: "!=", value: "+Inf" },
    ]);
    expect(variableSelectors("label_values(watchdog_agentruns, job)")).toEqual({ selectors: [{ metric: "watchdog_agentruns", matchers: [] }], label: "job" });
  });
});

describe("alert rules", () => {
  it("pass promtool check rules, with every lint", () => {
    const { code, output } = promtool(["check", "rules", "--lint=all", "--lint-fatal", RULES]);
    expect(code, output).toBe(0);
    expect(output).toMatch(new RegExp(`SUCCESS: ${alerts.length} rules found`));
  });

  it("pass their promtool unit tests", () => {
    const files = readdirSync(ALERT_TESTS).filter((f) => f.endsWith(".test.yaml")).map((f) => join(ALERT_TESTS, f));
    expect(files.length).toBeGreaterThan(0);
    const { code, output } = promtool(["test", "rules", ...files]);
    expect(code, output).toBe(0);
    expect(output.match(/SUCCESS/g)?.length).toBe(files.length);
  });

  it("fail a promtool unit test that expects the wrong thing (the harness can fail)", () => {
    const dir = mkdtempSync(join(tmpdir(), "agent-watchdog-alerts-"));
    try {
      const wrong = {
        rule_files: [RULES],
        evaluation_interval: "1m",
        tests: [
          {
            interval: "1m",
            input_series: [{ series: 'watchdog_ledger_gaps_total{job="agent-watchdog"}', values: "0x60" }],
            alert_rule_test: [{ eval_time: "30m", alertname: "AgentWatchdogLedgerGaps", exp_alerts: [{ exp_labels: { severity: "warning", job: "agent-watchdog" } }] }],
          },
        ],
      };
      writeFileSync(join(dir, "wrong.test.yaml"), stringifyYaml(wrong));
      const { code, output } = promtool(["test", "rules", join(dir, "wrong.test.yaml")]);
      expect(code, output).not.toBe(0);
      expect(output).toContain("FAILED");
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it("form a document whose only key is groups (what a PrometheusRule's spec.groups takes)", () => {
    expect(Object.keys(parseYaml(readFileSync(RULES, "utf8")))).toEqual(["groups"]);
    expect(alerts.length).toBeGreaterThanOrEqual(10);
    expect(new Set(alerts.map((a) => a.alert)).size).toBe(alerts.length);
  });

  it("each carry a severity, a summary, a description and a runbook section that exists", () => {
    const runbook = readFileSync(RUNBOOK, "utf8");
    for (const rule of alerts) {
      expect(["critical", "warning", "info"], rule.alert).toContain(rule.labels?.severity);
      expect(rule.annotations?.summary, rule.alert).toBeTruthy();
      expect(rule.annotations?.description, rule.alert).toBeTruthy();
      const url = rule.annotations?.runbook_url ?? "";
      const anchor = `runbook-${rule.alert.toLowerCase()}`;
      expect(url, rule.alert).toMatch(new RegExp(`/RUNBOOK\\.md#${anchor}$`));
      expect(runbook, `RUNBOOK.md section for ${rule.alert}`).toContain(`<a id="${anchor}"></a>\n## ${rule.alert}\n`);
    }
  });

  it("cover the required conditions", () => {
    const exprs = alerts.map((a) => a.expr).join("\n");
    for (const needle of [
      "watchdog_agentrun_needs_human_intervention",
      'watchdog_agentruns{phase="NeedsHumanIntervention"}',
      "watchdog_hung_sandboxes_killed_total",
      "leader_election_master_status",
      "absent(up{",
      'result="error"',
      "watchdog_stale_heartbeats",
      'phase=~"Starting|Planning|ExecutingTool"',
      "watchdog_ledger_connected",
      "watchdog_detection_latency_seconds_bucket",
      "workqueue_depth",
    ]) {
      expect(exprs, needle).toContain(needle);
    }
  });

  it("are each unit-tested both firing and not firing", () => {
    const cases = new Map<string, { firing: number; quiet: number }>();
    for (const file of readdirSync(ALERT_TESTS).filter((f) => f.endsWith(".test.yaml"))) {
      const doc = parseYaml(readFileSync(join(ALERT_TESTS, file), "utf8")) as { tests: { alert_rule_test?: { alertname: string; exp_alerts?: unknown[] }[] }[] };
      for (const test of doc.tests) {
        for (const check of test.alert_rule_test ?? []) {
          const seen = cases.get(check.alertname) ?? { firing: 0, quiet: 0 };
          if ((check.exp_alerts ?? []).length > 0) seen.firing++;
          else seen.quiet++;
          cases.set(check.alertname, seen);
        }
      }
    }
    for (const rule of alerts) {
      expect(cases.get(rule.alert)?.firing ?? 0, `${rule.alert} firing cases`).toBeGreaterThan(0);
      expect(cases.get(rule.alert)?.quiet ?? 0, `${rule.alert} not-firing cases`).toBeGreaterThan(0);
    }
    for (const name of cases.keys()) expect(alerts.map((a) => a.alert), `test for unknown alert ${name}`).toContain(name);
  });
});

describe("dashboard", () => {
  it("is a Grafana dashboard with a Prometheus datasource variable", () => {
    expect(dashboard.uid).toBe("agent-watchdog");
    expect(dashboard.schemaVersion).toBe(39);
    expect(dashboard.id).toBeNull();
    const variables = dashboard.templating.list as { name: string; type: string; query: unknown }[];
    expect(variables.find((v) => v.name === "datasource")).toMatchObject({ type: "datasource", query: "prometheus" });
  });

  it("lays out uniquely numbered panels that all use the datasource variable", () => {
    expect(new Set(panels.map((p) => p.id)).size).toBe(panels.length);
    for (const panel of queryPanels) {
      expect(panel.datasource, panel.title).toEqual({ type: "prometheus", uid: "${datasource}" });
      expect(panel.targets?.length, panel.title).toBeGreaterThan(0);
      for (const target of panel.targets ?? []) {
        expect(target.expr, `${panel.title} ${target.refId}`).toBeTruthy();
        expect(target.datasource?.uid ?? "${datasource}", panel.title).toBe("${datasource}");
      }
    }
    // no two panels overlap on the 24-column grid
    const taken = new Map<string, string>();
    for (const panel of panels) {
      const { x, y, w, h } = panel.gridPos;
      expect(x + w, panel.title).toBeLessThanOrEqual(24);
      for (let i = x; i < x + w; i++) {
        for (let j = y; j < y + h; j++) {
          expect(taken.get(`${i},${j}`), `${panel.title} overlaps`).toBeUndefined();
          taken.set(`${i},${j}`, panel.title);
        }
      }
    }
  });

  it("has the panels operators need", () => {
    const uses = (title: string) => {
      const panel = queryPanels.find((p) => p.title === title);
      expect(panel, `panel ${title}`).toBeDefined();
      return panel!.targets!.map((t) => t.expr).join("\n");
    };
    expect(uses("Runs by phase")).toContain("watchdog_agentruns");
    const actions = uses("Kills, requeues and nudges per minute");
    for (const m of ["watchdog_hung_sandboxes_killed_total", "watchdog_requeues_total", "watchdog_nudges_total"]) expect(actions).toContain(m);
    expect(actions).toContain("by (reason)");
    expect(uses("Detection latency")).toMatch(/histogram_quantile\(0\.5,[\s\S]*histogram_quantile\(0\.99,/);
    expect(uses("Runs needing a person")).toContain('phase="NeedsHumanIntervention"');
    expect(uses("Runs waiting for a person")).toMatch(/max by \(namespace, agentrun, reason\) \(label_replace\(watchdog_agentrun_needs_human_intervention/);
    expect(uses("Reconciles per second")).toContain("controller_runtime_reconcile_total");
    expect(uses("Reconcile duration")).toContain("controller_runtime_reconcile_time_seconds_bucket");
    expect(uses("Work queue depth")).toContain("workqueue_depth");
    const queue = uses("Work queue adds and retries per second");
    expect(queue).toContain("workqueue_adds_total");
    expect(queue).toContain("workqueue_retries_total");
    expect(uses("Leader status")).toContain("leader_election_master_status");
    expect(uses("Ledger connection")).toContain("watchdog_ledger_connected");
    expect(uses("Tokens per minute by namespace")).toMatch(/sum by \(namespace, type\) \(rate\(watchdog_tokens_total/);
    expect(uses("Cost per hour by namespace")).toMatch(/sum by \(namespace, currency\) \(rate\(watchdog_cost_total/);
    expect(uses("Tool calls and budget stops")).toContain("watchdog_budget_exhausted_total");
  });

  it("has queries that Prometheus' own parser accepts", () => {
    // Each query becomes a recording rule, with Grafana's variables replaced by values of the
    // right kind, so that promtool parses it.
    const rules = queryPanels.flatMap((panel) =>
      (panel.targets ?? []).map((target, i) => ({
        record: `dashboard:panel_${panel.id}_${i}`,
        expr: target.expr.replace(/\$__rate_interval|\$__interval|\$\{__rate_interval\}/g, "5m").replace(/\$\{?(\w+)\}?/g, ".+"),
      })),
    );
    const dir = mkdtempSync(join(tmpdir(), "agent-watchdog-dashboard-"));
    try {
      writeFileSync(join(dir, "dashboard-queries.yaml"), stringifyYaml({ groups: [{ name: "dashboard", rules }] }));
      const { code, output } = promtool(["check", "rules", join(dir, "dashboard-queries.yaml")]);
      expect(code, output).toBe(0);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

/**
 * The shared PostgreSQL server's URL, starting the server if it was never started. A server that
 * is merely stopped belongs to the ledger's outage tests, which may run alongside this file:
 * starting it would spoil their outage, so this waits for them to start it again.
 */
async function postgresUrl(): Promise<string> {
  const script = join(root, "hack/postgres.sh");
  const status = spawnSync("bash", [script, "status"], { encoding: "utf8" });
  if (status.stdout.includes("postgres: down")) execFileSync("bash", [script, "up"], { stdio: ["ignore", "ignore", "inherit"] });
  return waitFor(
    "PostgreSQL to accept connections",
    () => /export DATABASE_URL=(\S+)/.exec(spawnSync("bash", [script, "env"], { encoding: "utf8" }).stdout)?.[1],
    { timeoutMs: 90_000, intervalMs: 500 },
  );
}

describe("metrics used by the alerts and the dashboard", () => {
  let client: KubeClient;
  let ns: string;
  let db: TestDatabase;
  let operator: OperatorProcess | undefined;
  let exposition: Exposition;
  let metricsText: string;

  beforeAll(async () => {
    client = kube();
    ns = await newNamespace(client, "observability");
    const url = await postgresUrl();
    db = await waitFor("a database of this file's own", () => createDatabase(url, "observability"), { timeoutMs: 90_000, intervalMs: 500 });
    operator = await startOperator(ns, [], { DATABASE_URL: db.url });

    // A run whose sandbox never heartbeats, with one restart allowed: it is killed twice, requeued
    // once, and then needs a person. That creates the series that only appear with events.
    await createRun(client, ns, runManifest("hangs", { heartbeatTimeout: "2s", maxRestarts: 1, backoff: { initial: "1s", factor: 2, max: "2s" } }));
    // A run that reports what it spends: the spending series appear once the operator sees it grow.
    await createRun(client, ns, runManifest("spends", { heartbeatTimeout: "5m" }, { budget: { cost: { amount: "100", currency: "USD" } } }));
    await waitFor("the spending run's first attempt", async () => (await getRun(client, ns, "spends")).status?.attempt === 1, { timeoutMs: 60_000 });
    const usage = { inputTokens: 1200, outputTokens: 300, cost: "0.75", toolCalls: 2 };
    await client.mergePatch(paths.runStatus(ns, "spends"), { status: { heartbeat: { time: new Date().toISOString(), attempt: 1, state: "Planning", usage } } }, { fieldManager: SANDBOX_FIELD_MANAGER });
    await waitFor("the run to need a person", async () => (await getRun(client, ns, "hangs")).status?.phase === "NeedsHumanIntervention", { timeoutMs: 60_000 });
    const text = await waitFor("the ledger to connect and the events to show in /metrics", async () => {
      const t = await operator!.metrics();
      return /^watchdog_ledger_connected 1$/m.test(t) &&
        /^watchdog_needs_human_intervention_total\{reason="RecoveryBudgetExhausted"\} 1$/m.test(t) &&
        t.includes(`watchdog_cost_total{namespace="${ns}",currency="USD"} 0.75`)
        ? t
        : undefined;
    }, { timeoutMs: 60_000 });
    exposition = parseExposition(text);
    metricsText = text;
  }, 180_000);

  afterAll(async () => {
    await operator?.stop();
    if (client && ns) await deleteNamespace(client, ns);
    if (db) await waitFor("the test database to be dropped", () => db.drop().then(() => true), { timeoutMs: 90_000, intervalMs: 500 });
  });

  it("come from an operator that did what creates them", () => {
    const value = (name: string, labels: Record<string, string> = {}) =>
      exposition.samples.get(name)?.some((l) => Object.entries(labels).every(([k, v]) => l[k] === v));
    expect(value("watchdog_requeues_total", { reason: "HeartbeatTimeout" })).toBe(true);
    expect(value("watchdog_detection_latency_seconds_bucket", { le: "+Inf" })).toBe(true);
    expect(value("controller_runtime_reconcile_time_seconds_bucket", { controller: "agentrun" })).toBe(true);
    expect(value("watchdog_ledger_written_rows_total")).toBe(true);
    // What the spending run reported, counted once, under its namespace.
    expect(metricsText).toContain(`watchdog_tokens_total{namespace="${ns}",type="input"} 1200`);
    expect(metricsText).toContain(`watchdog_tokens_total{namespace="${ns}",type="output"} 300`);
    expect(metricsText).toContain(`watchdog_tool_calls_total{namespace="${ns}"} 2`);
    // The run that needs a person, by name, for the alert that says which run.
    expect(metricsText).toContain(`watchdog_agentrun_needs_human_intervention{namespace="${ns}",agentrun="hangs",reason="RecoveryBudgetExhausted"} 1`);
    expect(metricsText).not.toMatch(/watchdog_agentrun_needs_human_intervention\{[^}]*agentrun="spends"/);
  });

  it("are all exposed by the operator's /metrics", () => {
    const uses = allUses();
    const names = new Set(uses.flatMap((u) => u.selectors.map((s) => s.metric)));
    expect(names.size).toBeGreaterThan(20);
    expect(missingFrom(exposition, uses)).toEqual([]);
  });

  it("would be caught misspelled, as a bare histogram family, or with a label value the operator never sets", () => {
    const problems = missingFrom(exposition, [
      { where: "typo", selectors: selectors("rate(watchdog_hung_sandbox_killed_total[5m])") },
      { where: "family", selectors: selectors("rate(watchdog_detection_latency_seconds[5m])") },
      { where: "suffix", selectors: selectors("watchdog_agentruns_count") },
      { where: "label", selectors: selectors('watchdog_agentruns{phase="NeedsHuman"}') },
      { where: "regex", selectors: selectors('watchdog_agentruns{phase=~"Plan"}') },
      { where: "variable", ...variableSelectors("label_values(watchdog_agentruns, reason)") },
    ]);
    expect(problems).toEqual([
      "typo: watchdog_hung_sandbox_killed_total is not exposed",
      "family: watchdog_detection_latency_seconds is declared (histogram) but has no samples; use its _bucket, _sum or _count series",
      "suffix: watchdog_agentruns_count: watchdog_agentruns is a gauge, not a histogram",
      'label: no watchdog_agentruns sample has phase="NeedsHuman"',
      'regex: no watchdog_agentruns sample has phase=~"Plan"',
      "variable: watchdog_agentruns has no label reason",
    ]);
  });
});

describe("hack/kind-e2e.sh", () => {
  const script = join(root, "hack/kind-e2e.sh");

  it("is valid bash and shellcheck-clean", () => {
    expect(spawnSync("bash", ["-n", script], { encoding: "utf8" }).status).toBe(0);
    const shellcheck = spawnSync("shellcheck", ["-x", script], { cwd: root, encoding: "utf8" });
    expect(shellcheck.error, "shellcheck must be installed (Debian package shellcheck)").toBeUndefined();
    expect(shellcheck.status, shellcheck.stdout + shellcheck.stderr).toBe(0);
  });

  it("prints with --dry-run what it would run, and runs nothing", () => {
    const state = mkdtempSync(join(tmpdir(), "agent-watchdog-kind-"));
    try {
      // Every tool is `false`: if the dry run ran anything, it would fail.
      const result = spawnSync("bash", [script, "--dry-run"], {
        cwd: root,
        encoding: "utf8",
        env: {
          PATH: process.env.PATH,
          HOME: process.env.HOME,
          AGENT_WATCHDOG_STATE: state,
          KIND: "false",
          DOCKER: "false",
          HELM: "false",
          KUBECTL: "false",
          IMAGE: "registry.example:5000/agent-watchdog:1.2.3",
          E2E_TEST_COMMAND: "npm run test:e2e -- --bail=1",
        },
      });
      expect(result.status, result.stderr).toBe(0);
      const lines = result.stdout.split("\n").filter((l) => !l.startsWith("    ") && l);
      const kubeconfig = join(state, "kind/agent-watchdog-e2e.kubeconfig");
      const expected = [
        `false delete cluster --name agent-watchdog-e2e --kubeconfig ${kubeconfig}`,
        `false create cluster --name agent-watchdog-e2e --kubeconfig ${kubeconfig} --wait 180s`,
        expect.stringMatching(/^false build --tag registry\.example:5000\/agent-watchdog:1\.2\.3 --build-arg REVISION=\S+ \S+$/),
        "false load docker-image registry.example:5000/agent-watchdog:1.2.3 --name agent-watchdog-e2e",
        expect.stringMatching(
          /^false upgrade --install agent-watchdog \S+\/charts\/agent-watchdog .*--set image\.repository=registry\.example:5000\/agent-watchdog --set image\.tag=1\.2\.3 .*--wait/,
        ),
        `false --kubeconfig ${kubeconfig} create namespace agent-watchdog-samples`,
        `false --kubeconfig ${kubeconfig} apply -f -`,
        expect.stringContaining("agentrun/healthy"),
        expect.stringContaining("agentrun/crash"),
        expect.stringContaining("agentrun/tool-loop"),
        `env KUBECONFIG=${kubeconfig} AGENT_WATCHDOG_E2E_KUBECONFIG=${kubeconfig} AGENT_WATCHDOG_IMAGE=registry.example:5000/agent-watchdog:1.2.3 AGENT_WATCHDOG_NAMESPACE=agent-watchdog bash -c npm\\ run\\ test:e2e\\ --\\ --bail=1`,
      ];
      expect(lines).toEqual(expected);
      // the sample runs it would apply use the image's example agent
      const documents = result.stdout.split("\n").filter((l) => l.startsWith("    ")).map((l) => l.slice(4)).join("\n");
      const manifests = parseAllDocuments(documents).map((d) => d.toJS()).filter(Boolean);
      expect(manifests.map((m: any) => m.metadata.name)).toEqual(["healthy", "crash", "tool-loop"]);
      for (const m of manifests as any[]) {
        expect(m.spec.template.spec.containers[0]).toMatchObject({ image: "registry.example:5000/agent-watchdog:1.2.3", args: ["example-agent"] });
      }
    } finally {
      rmSync(state, { recursive: true, force: true });
    }
  });

  it("refuses an unknown argument", () => {
    const result = spawnSync("bash", [script, "--frobnicate"], { encoding: "utf8" });
    expect(result.status).not.toBe(0);
    expect(result.stderr).toContain("unknown argument --frobnicate");
  });
});
