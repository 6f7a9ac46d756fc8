// Guarantee defects the project has fixed (BUGS.md), each re-introducible on its own, so that the
// soak can record what it does and `npm run check-history` can be shown to flag it: the checker is
// proven on defects that really happened, not only on histories written by hand.
//
// A development switch only. The image build (hack/image/to-javascript.mjs) replaces this module
// with one in which every switch is off and no environment is read, so no setting of a released
// operator can turn a defect back on. From the sources, AGENT_WATCHDOG_REINTRODUCE=<name> turns
// one on; the operator refuses an unknown name and says at start which one is on.

/** The defects that can be re-introduced, by name, with their number in BUGS.md and what they do. */
export const DEFECTS = {
  "sandbox-clock": "BUGS.md 3: liveness measured on the sandbox's own clock (heartbeat.time), not the server's",
  "unbound-answers": "BUGS.md 5 and 13: an answer given while nothing is pending is kept, and counts for the pending request whatever request it names",
  "resurrected-pod": "BUGS.md 17: the late answer to a pod delete brings a pod the watch saw deleted back into the cache",
  "late-naming": "BUGS.md 18: the first heartbeat's deadline counts from the container's start, even when the run named the pod later",
} as const;

export type Defect = keyof typeof DEFECTS;

export const REINTRODUCE_ENV = "AGENT_WATCHDOG_REINTRODUCE";

/** The defect the environment asks for, or an error naming the known ones. */
export function chosenDefect(env: Record<string, string | undefined>): { defect?: Defect; error?: string } {
  const name = env[REINTRODUCE_ENV];
  if (name === undefined || name === "") return {};
  if (Object.hasOwn(DEFECTS, name)) return { defect: name as Defect };
  return { error: `${REINTRODUCE_ENV}=${JSON.stringify(name)} names no defect; known: ${Object.keys(DEFECTS).join(", ")}` };
}

// Read once, at load: the core stays a function of its inputs for the life of the process.
const chosen = chosenDefect(process.env).defect;

/** Whether `defect` is re-introduced in this process (never, in the image). */
export function reintroduced(defect: Defect): boolean {
  return chosen === defect;
}
