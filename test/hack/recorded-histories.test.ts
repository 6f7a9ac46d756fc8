// The checker on histories that real soaks recorded with a fixed defect re-introduced
// (`npm run soak -- --reintroduce NAME`, kept gzipped in test/hack/histories/), and on one that
// found a new defect before its fix: it flags each with the invariant the defect breaks, names the run and the
// events, and nothing else.
// A change to the checker that stopped seeing a real defect fails here, not in a soak months later.
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";
import { INVARIANTS, type Invariant } from "../../measure/soak/analyse.ts";
import { checkHistoryCommand, judge, readHistory } from "../../measure/soak/verdict.ts";

const dir = fileURLToPath(new URL("histories/", import.meta.url));

/** What each recorded history holds: the defect its operator ran with, and what the checker must count. */
const RECORDED: { file: string; defect?: string; counts: Partial<Record<Invariant, number>>; says: RegExp[] }[] = [
  {
    // Two of the soak's stray answers (naming a request that was not pending) approved the pending request.
    file: "unbound-answers.json.gz",
    defect: "unbound-answers",
    counts: { misappliedAnswers: 2 },
    says: [/request \S+ was Approved with the stray answer "stray answer 1", which named stray-1/, /"stray answer 3", which named stray-3/],
  },
  {
    // The healthy run whose sandbox clock is 10 minutes slow was killed while it heartbeated, and
    // spent its restarts on it.
    file: "sandbox-clock.json.gz",
    defect: "sandbox-clock",
    counts: { falseKills: 1, lostOrStuckRuns: 1 },
    says: [/pod r0-healthy-2-\S+ was killed as hung 2 s after a heartbeat \(timeout 60 s\)/, /r0-healthy: ended Completed \(Completed\), attempt 4, restarts 3/],
  },
  {
    // A pod delete's answer, arriving after the watch's DELETED event, put the killed pod back in
    // the cache: the run's next attempt waited for a pod that was gone, past its retry-after.
    file: "resurrected-pod.json.gz",
    defect: "resurrected-pod",
    counts: { lostOrStuckRuns: 2 },
    says: [/r25-hang-in-tool: ended Queued \(HeartbeatTimeout\), attempt 2, restarts 1/, /r25-hang-in-tool at \S+: Queued past its retry-after with no pod for more than 15 s while a replica led/],
  },
  {
    // No defect re-introduced: a soak with --skewed-steps 60 (seed 11) whose ledger lacks the first
    // two tool calls of a sandbox's third attempt, made while no replica led, just before
    // PostgreSQL was stopped: the defect the soak found (BUGS.md 21), recorded before its fix.
    file: "ledger-gap.json.gz",
    counts: { ledgerGaps: 2 },
    says: [/r16-healthy: tool call a3-1 is in the ledger 0 times/, /r16-healthy: tool call a3-2 is in the ledger 0 times/],
  },
];

describe("histories recorded with a defect", () => {
  it.each(RECORDED)("$file: flagged by exactly the invariants its defect breaks", ({ file, defect, counts, says }) => {
    const history = readHistory(join(dir, file));
    expect(history.reintroduced).toBe(defect);
    const verdict = judge(history);
    expect(verdict.ok).toBe(false);
    for (const invariant of INVARIANTS) expect(verdict.findings.counts[invariant], invariant).toBe(counts[invariant] ?? 0);
    for (const pattern of says) expect(verdict.text).toMatch(pattern);
    if (defect) expect(verdict.text).toContain(`re-introduced on purpose: ${defect}`);
    else expect(verdict.text).not.toContain("re-introduced on purpose");
  });

  it("npm run check-history reads a gzipped history and fails on it", () => {
    const out: string[] = [];
    const write = process.stdout.write.bind(process.stdout);
    process.stdout.write = ((chunk: string) => out.push(chunk) > 0) as typeof process.stdout.write;
    try {
      expect(checkHistoryCommand([join(dir, "unbound-answers.json.gz")])).toBe(1);
    } finally {
      process.stdout.write = write;
    }
    expect(out.join("")).toContain('"misappliedAnswers":2');
  });
});
