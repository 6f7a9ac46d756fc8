// The operator restarts (a fresh Ledger with empty memory) after runs changed unobserved. The
// new ledger catches up from the run objects; where more transitions happened than an object
// keeps, it records the gap and says so, once, however often it catches up again.
import { spawnSync } from "node:child_process";
import { fileURLToPath } from "node:url";
import { expect, it } from "vitest";
import type { Ledger} from "../../operator/ledger/ledger.ts";
import { type LedgerOptions } from "../../operator/ledger/ledger.ts";
import { waitFor } from "../support/wait.ts";
import { capturingLogger, fileDatabase, ledgerProblems, NODE, RunSim, storedTransitions } from "./support.ts";

const root = fileURLToPath(new URL("../..", import.meta.url));

const file = fileDatabase(import.meta.filename);

function openLedger(options: Partial<LedgerOptions> = {}) {
  const { log, lines } = capturingLogger();
  return { ledger: file.openLedger(options, log), lines };
}

async function caughtUp(ledger: Ledger, count = 1): Promise<void> {
  await waitFor("the catch-up", () => ledger.catchUps >= count && !ledger.catchingUp && ledger.bufferedRows === 0, { timeoutMs: 20_000 });
}

/** Flips between Planning and ExecutingTool, with a reason that says which flip it was. */
function flips(sim: RunSim, count: number): void {
  for (let i = 0; i < count; i++) sim.to(sim.phase === "Planning" ? "ExecutingTool" : "Planning", `Flip${i}`);
}

it("catches up after a restart and records the transitions no object holds any more", async () => {
  const lost = new RunSim("restart", "lost").to("Queued").to("Starting", "PodCreated").to("Planning");
  const kept = new RunSim("restart", "kept").to("Queued").to("Starting", "PodCreated").to("Planning");
  const sims = [lost, kept];
  const first = openLedger({ listRuns: () => sims.map((s) => s.object()) });
  for (const sim of sims) first.ledger.observe(sim.object());
  await waitFor("the first ledger to write", async () => (await ledgerProblems(file.db, sims)).length === 0);
  await first.ledger.close();

  // While no operator runs: 25 transitions on one run (an object keeps 20), 15 on the other,
  // and a run that is created and finishes.
  flips(lost, 24);
  lost.to("NeedsHumanIntervention", "ToolLoop");
  flips(kept, 15);
  const born = new RunSim("restart", "born").to("Queued").to("Starting").to("Planning").to("Completed", "PodSucceeded");
  sims.push(born);

  const second = openLedger({ listRuns: () => sims.map((s) => s.object()) });
  await caughtUp(second.ledger);

  // What the ledger holds of "lost": its first three transitions and the object's 20.
  const oldest = lost.history.at(-20)!;
  const lastStored = lost.history[2]!;
  expect(oldest.from).not.toBe(lastStored.phase); // the stored history does not chain
  const stored = (await storedTransitions(file.db, lost.uid)).map((t) => t.time.toISOString());
  expect(stored).toEqual([...lost.history.slice(0, 3), ...lost.history.slice(-20)].map((t) => t.time));
  expect(await ledgerProblems(file.db, [kept, born])).toEqual([]);

  const gaps = await file.db.query("SELECT * FROM ledger_gaps ORDER BY id");
  expect(gaps).toHaveLength(1);
  expect(gaps[0]).toMatchObject({
    run_uid: lost.uid,
    namespace: "restart",
    name: "lost",
    kind: "transitions",
    cause: "chain",
    after_phase: lastStored.phase,
    before_from: oldest.from,
    before_phase: oldest.phase,
    missing: null,
  });
  expect(gaps[0].after_time.toISOString()).toBe(lastStored.time);
  expect(gaps[0].before_time.toISOString()).toBe(oldest.time);

  const said = second.lines.filter((l) => String(l.msg).includes("could not recover"));
  expect(said).toHaveLength(1);
  expect(said[0]).toMatchObject({ level: 40, namespace: "restart", name: "lost", uid: lost.uid });
  expect(said[0]!.msg).toBe(
    `ledger could not recover one or more transitions after Planning at ${lastStored.time}, before ${oldest.from} -> ${oldest.phase} at ${oldest.time} (the stored transitions do not chain)`,
  );
  expect(second.ledger.gapsRecorded).toBe(1);

  // The history says so too, in its place in the timeline.
  const history = await second.ledger.history("restart", "lost");
  expect(history?.gaps).toEqual([
    {
      runUid: lost.uid,
      namespace: "restart",
      name: "lost",
      kind: "transitions",
      cause: "chain",
      after: { time: lastStored.time, phase: lastStored.phase },
      before: { time: oldest.time, from: oldest.from, phase: oldest.phase },
      detectedAt: expect.any(String),
    },
  ]);
  const cli = spawnSync(NODE, [`${root}operator/ledger/cli.ts`, "history", "restart", "lost"], {
    env: { ...process.env, DATABASE_URL: file.db.url },
    encoding: "utf8",
  });
  expect(cli.status).toBe(0);
  const lines = cli.stdout.split("\n");
  const gapLine = lines.findIndex((l) => l.includes("GAP"));
  expect(lines[gapLine]).toContain("could not recover one or more transitions after Planning");
  expect(lines[gapLine - 1]).toContain(`${lastStored.time}  phase  Starting -> Planning`);
  expect(lines[gapLine + 1]).toContain(`${oldest.time}  phase  ${oldest.from} -> ${oldest.phase}`);

  // Catching up again, or by a third ledger, finds the same gap and records nothing new.
  second.ledger.requestCatchUp();
  await caughtUp(second.ledger, 2);
  const third = openLedger({ listRuns: () => sims.map((s) => s.object()) });
  await caughtUp(third.ledger);
  expect(await file.db.query("SELECT count(*)::int AS n FROM ledger_gaps")).toEqual([{ n: 1 }]);
  expect(third.ledger.gapsRecorded).toBe(0);
  expect(third.lines.filter((l) => String(l.msg).includes("could not recover"))).toEqual([]);
});

it("records that a run's beginning is missing when it first sees the run too late", async () => {
  const late = new RunSim("restart", "late").to("Queued").to("Starting").to("Planning");
  flips(late, 20);
  const { ledger, lines } = openLedger({ listRuns: () => [late.object()] });
  await caughtUp(ledger);
  const gaps = await file.db.query("SELECT * FROM ledger_gaps WHERE run_uid = $1", [late.uid]);
  const oldest = late.history.at(-20)!;
  expect(gaps).toHaveLength(1);
  expect(gaps[0]).toMatchObject({ cause: "chain", after_time: null, after_phase: null, before_from: oldest.from, before_phase: oldest.phase });
  expect(lines.map((l) => l.msg)).toContain(
    `ledger could not recover one or more transitions at the start of the run, before ${oldest.from} -> ${oldest.phase} at ${oldest.time} (the stored transitions do not chain)`,
  );
});

it("waits for the run list before catching up, and forgets runs that are gone", async () => {
  const sims = [new RunSim("restart", "a").to("Queued"), new RunSim("restart", "b").to("Queued")];
  let synced = false;
  let asked = 0;
  const { ledger } = openLedger({
    listRuns: () => {
      asked++;
      return synced ? sims.map((s) => s.object()) : undefined;
    },
  });
  await waitFor("the ledger to ask for the runs repeatedly", () => ledger.ready && asked >= 3);
  expect(ledger.catchUps).toBe(0);
  expect(ledger.catchingUp).toBe(true);

  synced = true;
  await caughtUp(ledger);
  expect(await ledgerProblems(file.db, sims)).toEqual([]);
  expect(ledger.trackedRuns).toBe(2);

  sims.pop(); // deleted
  ledger.requestCatchUp();
  await caughtUp(ledger, 2);
  expect(ledger.trackedRuns).toBe(1);
});
