// Generated AgentRun specs and statuses for the differential test: each field is absent, plainly
// valid, or an edge case (a bound, one past it, a timestamp or duration no sane writer produces,
// the wrong type), so that about half of the values break exactly one or two rules.
import fc from "fast-check";

type Json = Record<string, unknown>;

const ABSENT = Symbol("absent");
type Field = fc.Arbitrary<unknown>;

/** Absent, valid or edge: the weights keep most values close to valid. */
function field(valid: Field, edge: Field): fc.Arbitrary<unknown> {
  return fc.oneof(
    { weight: 5, arbitrary: fc.constant(ABSENT) },
    { weight: 4, arbitrary: valid },
    { weight: 1, arbitrary: edge },
  );
}

/** A required field: mostly valid, sometimes an edge case. */
function mostly(valid: Field, edge: Field): fc.Arbitrary<unknown> {
  return fc.oneof({ weight: 8, arbitrary: valid }, { weight: 1, arbitrary: edge });
}

/** An object of the given fields, absent ones left out; sometimes with a field no schema names. */
function object(fields: Record<string, fc.Arbitrary<unknown>>, required: Record<string, fc.Arbitrary<unknown>> = {}): fc.Arbitrary<Json> {
  const all = { ...Object.fromEntries(Object.entries(fields)), ...required };
  return fc.tuple(fc.record(all), fc.integer({ min: 0, max: 39 })).map(([values, roll]) => {
    const out: Json = {};
    for (const [key, value] of Object.entries(values)) if (value !== ABSENT) out[key] = value;
    if (roll === 0) out.unexpectedField = "x";
    return out;
  });
}

// ------------------------------------------------------------------------------------------------
// leaves

const ASTRAL = "\u{1F600}"; // one code point, two UTF-16 units, four UTF-8 bytes

/** Strings at a length bound: below, at and past it, in ASCII and in characters outside the BMP. */
export function textAround(max: number, min = 0): fc.Arbitrary<unknown> {
  const lengths = [...new Set([min, Math.max(min, 1), max - 1, max, max + 1].filter((n) => n >= 0))];
  return fc.oneof(
    fc.constantFrom(...lengths).map((n) => "a".repeat(n)),
    fc.constantFrom(...lengths).map((n) => ASTRAL.repeat(n)),
    fc.constantFrom(Math.floor(max / 2) + 1, max - 1).filter((n) => n > 0).map((n) => ASTRAL.repeat(n)),
    fc.string({ unit: "grapheme", maxLength: Math.min(max, 20) }).filter((s) => [...s].length >= min),
    fc.string({ unit: "binary", minLength: Math.max(min, 1), maxLength: 8 }),
    fc.constant(7),
  );
}

const plainText = (max: number) => fc.string({ minLength: 1, maxLength: Math.min(max, 24) });

function pad(n: number, width = 2): string {
  return String(n).padStart(width, "0");
}

export const validTimestamp = fc
  .date({ min: new Date("0001-01-01T00:00:00Z"), max: new Date("9999-12-31T23:59:59Z"), noInvalidDate: true })
  .map((d) => d.toISOString());

/** RFC 3339 and its near misses: calendar edges, fractions, offsets, separators and case. */
export const timestampEdge: fc.Arbitrary<unknown> = fc.oneof(
  validTimestamp,
  fc
    .record({
      year: fc.constantFrom("2026", "2024", "2023", "2000", "1900", "0000", "9999", "10000", "26"),
      month: fc.constantFrom(0, 1, 2, 6, 12, 13),
      day: fc.constantFrom(0, 1, 28, 29, 30, 31, 32),
      hour: fc.constantFrom(0, 9, 23, 24),
      minute: fc.constantFrom(0, 59, 60),
      second: fc.constantFrom("00", "59", "60", "61", ""),
      fraction: fc.oneof(
        fc.constant(""),
        fc.integer({ min: 1, max: 12 }).map((n) => `.${"1234567890".repeat(2).slice(0, n)}`),
        fc.constantFrom(".", ",5", ".5", ".123456789", ".1234567890", "." + "9".repeat(4000)),
      ),
      separator: fc.constantFrom("T", "T", "T", "t", " ", "_"),
      zone: fc.constantFrom("Z", "Z", "z", "+00:00", "-00:00", "+01:00", "-12:30", "+23:59", "+24:00", "+14:60", "+0100", "+01", "", " Z"),
    })
    .map((p) => `${p.year}-${pad(p.month)}-${pad(p.day)}${p.separator}${pad(p.hour)}:${pad(p.minute)}${p.second ? `:${p.second}` : ""}${p.second ? p.fraction : ""}${p.zone}`),
  fc.constantFrom("", "now", "2026-12-01", "10:00:00Z", "1764583200", "2026-12-01T10:00:00.000000000Z", "2026-12-01T10:00:00+01:00:00"),
  fc.constantFrom(1764583200, true),
);

const DURATION_UNITS = ["ns", "us", "µs", "\u03bcs", "ms", "s", "m", "h"] as const;

export const validDuration = fc
  .array(fc.tuple(fc.integer({ min: 1, max: 90 }), fc.constantFrom(...DURATION_UNITS.filter((u) => u !== "\u03bcs"))), { minLength: 1, maxLength: 3 })
  .map((parts) => parts.map(([n, u]) => `${n}${u}`).join(""));

/** Go durations and their near misses: zero, fractions below a nanosecond, overflow, other units. */
export const durationEdge: fc.Arbitrary<unknown> = fc.oneof(
  validDuration,
  fc
    .array(
      fc.tuple(
        fc.constantFrom("0", "1", "5", "0.5", ".5", "5.", "1.5", "0.0000000001", "0.9999999999", "999", "1000", "9223372036", "9223372037", "9223372036854775807", "99999999999999999999", "2562047", "2562048"),
        fc.constantFrom(...DURATION_UNITS, "d", "", "S", "sec"),
      ),
      { minLength: 1, maxLength: 3 },
    )
    .map((parts) => parts.map(([n, u]) => `${n}${u}`).join("")),
  fc.constantFrom("", "0s", "-1s", "+1s", " 1s", "1s ", "1e3s", "1h30m", "0.5ns", "999ms", "999.9999999ms", "1000ms", "1s".repeat(16), "1s".repeat(17), "2562047h47m16.854775807s", "2562047h47m16.854775808s"),
  fc.constant(30),
);

export const intEdge: fc.Arbitrary<unknown> = fc.oneof(
  fc.constantFrom(-1, 0, 1, 2, 3, 999, 999_999, 1_000_000, 1_000_001, 1.5, 2 ** 31, 2 ** 53 - 1, 2 ** 53, 2 ** 60, -(2 ** 53)),
  fc.integer(),
  fc.constantFrom("3", true),
);

const count = (min: number) => fc.integer({ min, max: 1000 });

const numberEdge: fc.Arbitrary<unknown> = fc.oneof(
  fc.constantFrom(0, 0.5, 0.999999, 1, 1.5, 2, 99.999, 100, 100.0001, 1e-300, 1e300, -1),
  fc.double({ noNaN: true, noDefaultInfinity: true }),
  fc.constant("2"),
);

const boolEdge: fc.Arbitrary<unknown> = fc.constantFrom(true, false, "true", 1, 0);

function enumEdge(values: readonly string[]): fc.Arbitrary<unknown> {
  return fc.oneof(fc.constantFrom(...values), fc.constantFrom(...values).map((v) => v.toLowerCase()), fc.constantFrom("", "Unknown", 3));
}

// ------------------------------------------------------------------------------------------------
// spec

const backoff = object({
  initial: field(validDuration, durationEdge),
  factor: field(fc.constantFrom(1, 1.5, 2, 3), numberEdge),
  max: field(validDuration, durationEdge),
});

const stall = object({
  enabled: field(fc.boolean(), boolEdge),
  timeout: field(validDuration, durationEdge),
  maxNudges: field(count(0), intEdge),
  message: field(plainText(2048), textAround(2048, 1)),
});

const CONTAINER_NAMES = ["agent", "sidecar"];

const container = object(
  { image: field(fc.constant("agent-watchdog:test"), fc.oneof(textAround(8, 1), fc.constant(""))), command: field(fc.constant(["sh"]), fc.constant("sh")) },
  { name: mostly(fc.constantFrom(...CONTAINER_NAMES), textAround(63, 1)) },
);

const template = fc.oneof(
  { weight: 9, arbitrary: fc.constant({ spec: { containers: [{ name: "agent", image: "agent-watchdog:test" }] } }) },
  {
    weight: 3,
    arbitrary: object(
      { metadata: field(fc.constant({ labels: { team: "a" } }), fc.constantFrom("labels", { annotations: { a: "b" } })) },
      { spec: fc.oneof(fc.array(container, { minLength: 0, maxLength: 3 }), fc.constant(Array.from({ length: 65 }, (_, i) => ({ name: `c${i}`, image: "x" })))).map((containers) => ({ containers })) },
    ),
  },
  { weight: 1, arbitrary: fc.constantFrom({}, { spec: {} }, "pod") },
);

const watchdog = object({
  heartbeatTimeout: field(validDuration, durationEdge),
  maxRestarts: field(count(0), intEdge),
  backoff: field(backoff, fc.constant("60s")),
  rateLimitBackoff: field(backoff, backoff),
  maxConsecutiveToolFailures: field(count(1), intEdge),
  stall: field(stall, stall),
  releaseAwaitingAfter: field(validDuration, durationEdge),
  approvalTimeout: field(validDuration, durationEdge),
  startTimeout: field(validDuration, durationEdge),
  agentContainer: field(fc.constant("agent"), fc.oneof(fc.constantFrom("sidecar", "missing", ""), textAround(63, 1))),
  killGracePeriod: field(fc.constantFrom("1s", "2s", "30s", "1m"), durationEdge),
  unconfirmedAfter: field(validDuration, durationEdge),
});

/** A whole spec, as a user would `kubectl apply` it. */
export const specValue: fc.Arbitrary<Json> = object(
  {
    goal: field(plainText(200), fc.oneof(textAround(65_536), fc.constant(""))),
    suspend: field(fc.boolean(), boolEdge),
    watchdog: field(watchdog, watchdog),
  },
  { template },
);

// ------------------------------------------------------------------------------------------------
// status

const SANDBOX_STATES = ["Planning", "ExecutingTool", "AwaitingReply"];
const ACTIVITY_KINDS = ["text", "delta", "toolResult", "userMessage", "noReply", "emptyText"];
const TOOL_CALL_STATES = ["Started", "Succeeded", "Failed"];
const PHASES = ["Queued", "Starting", "Planning", "ExecutingTool", "AwaitingReply", "NeedsHumanIntervention", "Suspended", "Completed", "Failed"];

const activity = object({}, { kind: mostly(fc.constantFrom(...ACTIVITY_KINDS), enumEdge(ACTIVITY_KINDS)), time: mostly(validTimestamp, timestampEdge) });

const heartbeat = object(
  { activity: field(activity, activity) },
  {
    time: mostly(validTimestamp, timestampEdge),
    attempt: mostly(count(1), intEdge),
    state: mostly(fc.constantFrom(...SANDBOX_STATES), enumEdge(SANDBOX_STATES)),
  },
);

const toolCallError = object({
  message: field(plainText(4096), textAround(4096)),
  httpStatus: field(fc.constantFrom(429, 500), fc.constantFrom(-1, 0, 999, 1000, 429.5)),
  retryAfterSeconds: field(fc.constantFrom(1, 2.5), fc.constantFrom(-0.1, 0, 86_400, 86_400.5, 1e9)),
});

const toolCall = object(
  {
    idempotencyKey: field(plainText(256), textAround(256)),
    idempotent: field(fc.boolean(), boolEdge),
    attempt: field(count(1), intEdge),
    error: field(toolCallError, toolCallError),
    startedAt: field(validTimestamp, timestampEdge),
    finishedAt: field(validTimestamp, timestampEdge),
    result: field(fc.constant('{"ok":true}'), textAround(8192)),
  },
  {
    id: mostly(plainText(128), textAround(128, 1)),
    name: mostly(plainText(256), textAround(256, 1)),
    argsHash: mostly(fc.constant("h1"), textAround(128)),
    state: mostly(fc.constantFrom(...TOOL_CALL_STATES), enumEdge(TOOL_CALL_STATES)),
  },
);

const checkpoint = object(
  { data: field(fc.jsonValue({ maxDepth: 3 }), fc.constantFrom("", 0, [], { deep: { er: [1, "two", { three: 3 }] } })) },
  { step: mostly(fc.nat(), intEdge) },
);

const condition = object(
  { observedGeneration: field(fc.nat(), intEdge) },
  {
    type: mostly(fc.constantFrom("Running", "BackingOff", "SandboxReportValid"), textAround(316, 1)),
    status: mostly(fc.constantFrom("True", "False", "Unknown"), enumEdge(["True", "False"])),
    lastTransitionTime: mostly(validTimestamp, timestampEdge),
    reason: mostly(fc.constant("Heartbeating"), textAround(1024, 1)),
    message: mostly(plainText(100), textAround(32_768)),
  },
);

const approval = object(
  {
    id: field(fc.constant("req-1"), textAround(128)),
    answer: field(plainText(4096), textAround(4096)),
    reason: field(plainText(4096), textAround(4096)),
    decidedAt: field(validTimestamp, timestampEdge),
  },
  {
    state: mostly(fc.constantFrom("Pending", "Approved", "Rejected", "TimedOut"), enumEdge(["Pending", "Approved"])),
    requestedAt: mostly(validTimestamp, timestampEdge),
  },
);

/** A whole status: mostly what a sandbox writes, with some of what the operator writes. */
export const statusValue: fc.Arbitrary<Json> = object({
  heartbeat: mostly(heartbeat, fc.constant(ABSENT)),
  toolCalls: field(fc.array(toolCall, { maxLength: 3 }), fc.oneof(fc.array(toolCall, { minLength: 1, maxLength: 3 }), fc.constant(Array.from({ length: 65 }, (_, i) => ({ id: `c${i}`, name: "t", argsHash: "h", state: "Started" }))))),
  checkpoint: field(checkpoint, checkpoint),
  phase: field(fc.constantFrom(...PHASES), enumEdge(PHASES)),
  reason: field(fc.constant("Heartbeating"), textAround(256)),
  message: field(plainText(100), textAround(4096)),
  attempt: field(count(0), intEdge),
  retryAfter: field(validTimestamp, timestampEdge),
  observedGeneration: field(fc.nat(), intEdge),
  conditions: field(fc.uniqueArray(condition, { maxLength: 3, selector: (c) => c.type }), fc.array(condition, { minLength: 2, maxLength: 3 })),
  approval: field(approval, approval),
});

// ------------------------------------------------------------------------------------------------
// one leaf at a time: the rest of the object valid, so the verdict is about that leaf alone

const MINIMAL_TEMPLATE = { spec: { containers: [{ name: "agent", image: "agent-watchdog:test" }] } };

/** Statuses whose heartbeat time (or activity time) is the only thing in question. */
export const timestampValue: fc.Arbitrary<Json> = fc
  .tuple(timestampEdge, fc.boolean())
  .map(([time, inActivity]) => ({
    heartbeat: inActivity
      ? { time: "2026-12-01T10:00:00Z", attempt: 1, state: "Planning", activity: { kind: "text", time } }
      : { time, attempt: 1, state: "Planning" },
  }));

/** Specs whose one duration (a plain one, or killGracePeriod with its 1s minimum) is in question. */
export const durationValue: fc.Arbitrary<Json> = fc
  .tuple(durationEdge, fc.constantFrom("heartbeatTimeout", "killGracePeriod", "startTimeout"))
  .map(([value, key]) => ({ template: MINIMAL_TEMPLATE, watchdog: { [key]: value } }));

/** Statuses whose one bounded string is in question, in ASCII or outside the BMP. */
export const textValue: fc.Arbitrary<Json> = fc.oneof(
  fc.tuple(textAround(128, 1), fc.constantFrom("id", "argsHash")).map(([text, key]) => ({ toolCalls: [{ id: "c1", name: "t", argsHash: "h", state: "Started", [key]: text }] })),
  textAround(8192).map((result) => ({ toolCalls: [{ id: "c1", name: "t", argsHash: "h", state: "Succeeded", result }] })),
  textAround(4096).map((message) => ({ toolCalls: [{ id: "c1", name: "t", argsHash: "h", state: "Failed", error: { message } }] })),
);

/** `count` values of `arbitrary`, the same ones for the same seed. */
export function sample<T>(arbitrary: fc.Arbitrary<T>, count: number, seed: number): T[] {
  return fc.sample(arbitrary, { numRuns: count, seed });
}
