// The stall watchdog's state machine (rule 7): final text arms it, a stream, a user message, no
// reply or empty text disarms it, a tool result restarts its timer; past the timeout it nudges, up
// to maxNudges, then escalates. Every deadline comes from times in the object, passed explicitly.
import { describe, expect, it } from "vitest";
import type { Activity, StallStatus } from "../../../operator/api/agentrun.ts";
import { DISARMED, stepStall, type StallSettings } from "../../../operator/watchdog/stall.ts";
import { T0, iso } from "../fixtures.ts";

const S = 1000;
const settings: StallSettings = { enabled: true, timeoutMs: 30 * S, maxNudges: 2, message: "are you there?" };
const at = (kind: Activity["kind"], ms: number): Activity => ({ kind, time: iso(ms) });
const armed = (ms: number, nudges = 0): StallStatus => ({ state: "Armed", nudges, armedAt: iso(ms) });
const fired = (armedMs: number, nudgeMs: number, nudges = 1): StallStatus => ({
  state: "Fired",
  nudges,
  armedAt: iso(armedMs),
  lastNudge: { time: iso(nudgeMs), message: settings.message },
});

describe("a disabled stall watchdog", () => {
  it("leaves a disarmed state as it is and never nudges", () => {
    const current: StallStatus = { state: "Disarmed", nudges: 0 };
    const step = stepStall(current, at("text", T0), T0 + 10 * 60 * S, { ...settings, enabled: false }, false);
    expect(step).toEqual({ stall: current, nudge: false, escalate: false });
    expect(step.stall).toBe(current);
  });

  it("disarms a fired state and forgets its nudges, keeping the rest of the record", () => {
    const step = stepStall(fired(T0, T0 + 30 * S, 2), undefined, T0 + 10 * 60 * S, { ...settings, enabled: false }, false);
    expect(step).toEqual({ stall: { ...fired(T0, T0 + 30 * S), state: "Disarmed", nudges: 0 }, nudge: false, escalate: false });
  });

  it("starts from Disarmed for a run that has no stall state yet", () => {
    expect(stepStall(undefined, undefined, T0, { ...settings, enabled: false }, false)).toEqual({ stall: DISARMED, nudge: false, escalate: false });
  });
});

describe("arming", () => {
  it("a run without a stall state and without activity stays disarmed, with no timer", () => {
    expect(stepStall(undefined, undefined, T0, settings, false)).toEqual({ stall: { state: "Disarmed", nudges: 0 }, nudge: false, escalate: false });
  });

  it("final text arms the timer at the text's time and wakes at its deadline", () => {
    expect(stepStall(undefined, at("text", T0), T0 + 5 * S, settings, false)).toEqual({
      stall: { state: "Armed", nudges: 0, armedAt: iso(T0) },
      nudge: false,
      escalate: false,
      wakeAt: T0 + 30 * S,
    });
  });

  it("an activity whose time cannot be read changes nothing: text with a broken time does not arm", () => {
    expect(stepStall(undefined, { kind: "text", time: "not a time" }, T0 + 60 * S, settings, false)).toEqual({ stall: DISARMED, nudge: false, escalate: false });
  });

  it("newer text after a nudge re-arms the timer from it and keeps the nudges spent", () => {
    const step = stepStall(fired(T0, T0 + 30 * S), at("text", T0 + 40 * S), T0 + 41 * S, settings, false);
    expect(step).toEqual({
      stall: { ...fired(T0, T0 + 30 * S), state: "Armed", armedAt: iso(T0 + 40 * S) },
      nudge: false,
      escalate: false,
      wakeAt: T0 + 70 * S,
    });
  });

  it("the text that armed the timer, seen again, does not re-arm a fired watchdog", () => {
    const step = stepStall(fired(T0, T0 + 30 * S), at("text", T0), T0 + 31 * S, settings, false);
    expect(step.stall.state).toBe("Fired");
    expect(step.wakeAt).toBe(T0 + 60 * S);
  });

  it("text older than the arming text does not move the arming time", () => {
    const step = stepStall(armed(T0), at("text", T0 - 5 * S), T0 + S, settings, false);
    expect(step.stall).toEqual(armed(T0));
    expect(step.wakeAt).toBe(T0 + 30 * S);
  });
});

describe("disarming", () => {
  for (const kind of ["delta", "userMessage", "noReply", "emptyText"] as const) {
    it(`${kind} after the arming text disarms the watchdog and resets its nudges`, () => {
      const step = stepStall(fired(T0, T0 + 30 * S, 2), at(kind, T0 + 31 * S), T0 + 32 * S, settings, false);
      expect(step).toEqual({ stall: { ...fired(T0, T0 + 30 * S), state: "Disarmed", nudges: 0 }, nudge: false, escalate: false });
    });
  }

  it("a disarming activity at the very time of the arming text disarms (the text came first)", () => {
    expect(stepStall(armed(T0), at("delta", T0), T0 + S, settings, false).stall).toEqual({ ...armed(T0), state: "Disarmed" });
  });

  it("a disarming activity older than the arming text is stale and changes nothing", () => {
    const step = stepStall(armed(T0), at("userMessage", T0 - S), T0 + S, settings, false);
    expect(step).toEqual({ stall: armed(T0), nudge: false, escalate: false, wakeAt: T0 + 30 * S });
  });

  it("disarms an armed state that has no arming time", () => {
    expect(stepStall({ state: "Armed", nudges: 1 }, at("noReply", T0), T0, settings, false).stall).toEqual({ state: "Disarmed", nudges: 0 });
  });

  it("a disarming activity on a disarmed watchdog keeps its state as it is", () => {
    const current: StallStatus = { state: "Disarmed", nudges: 0 };
    expect(stepStall(current, at("delta", T0), T0, settings, false).stall).toBe(current);
  });

  it("a tool result does not disarm: it restarts the timer from its own time", () => {
    expect(stepStall(armed(T0), at("toolResult", T0 + 20 * S), T0 + 30 * S, settings, false)).toEqual({
      stall: armed(T0),
      nudge: false,
      escalate: false,
      wakeAt: T0 + 50 * S,
    });
  });

  it("a tool result older than the arming text does not shorten the timer", () => {
    expect(stepStall(armed(T0), at("toolResult", T0 - 20 * S), T0, settings, false).wakeAt).toBe(T0 + 30 * S);
  });
});

describe("the timer", () => {
  it("does not nudge one millisecond before the deadline, and wakes at it", () => {
    expect(stepStall(armed(T0), undefined, T0 + 30 * S - 1, settings, false)).toEqual({ stall: armed(T0), nudge: false, escalate: false, wakeAt: T0 + 30 * S });
  });

  it("nudges exactly at the deadline: Fired, one nudge recorded now with the message, next wake a timeout later", () => {
    expect(stepStall(armed(T0), undefined, T0 + 30 * S, settings, false)).toEqual({
      stall: { state: "Fired", nudges: 1, armedAt: iso(T0), lastNudge: { time: iso(T0 + 30 * S), message: "are you there?" } },
      nudge: true,
      escalate: false,
      wakeAt: T0 + 60 * S,
    });
  });

  it("counts a fired watchdog with no nudge on record (hand-edited) from its arming text", () => {
    const edited: StallStatus = { state: "Fired", nudges: 1, armedAt: iso(T0) };
    expect(stepStall(edited, undefined, T0 + 30 * S - 1, settings, false)).toEqual({ stall: edited, nudge: false, escalate: false, wakeAt: T0 + 30 * S });
  });

  it("counts a fired watchdog's next deadline from its last nudge, not from the arming text", () => {
    expect(stepStall(fired(T0, T0 + 40 * S), undefined, T0 + 70 * S - 1, settings, false).wakeAt).toBe(T0 + 70 * S);
    expect(stepStall(fired(T0, T0 + 40 * S), undefined, T0 + 70 * S, settings, false)).toMatchObject({
      stall: { state: "Fired", nudges: 2, lastNudge: { time: iso(T0 + 70 * S) } },
      nudge: true,
      escalate: false,
    });
  });

  it("escalates once maxNudges nudges are spent and the deadline passes again, without nudging", () => {
    const current = fired(T0, T0 + 30 * S, 2);
    expect(stepStall(current, undefined, T0 + 60 * S, settings, false)).toEqual({ stall: current, nudge: false, escalate: true });
  });

  it("with maxNudges 0 escalates at the first deadline", () => {
    expect(stepStall(armed(T0), undefined, T0 + 30 * S, { ...settings, maxNudges: 0 }, false)).toEqual({ stall: armed(T0), nudge: false, escalate: true });
  });

  it("nudges again with one nudge left before maxNudges", () => {
    expect(stepStall(fired(T0, T0 + 30 * S, 1), undefined, T0 + 60 * S, settings, false)).toMatchObject({ nudge: true, escalate: false, stall: { nudges: 2 } });
  });

  it("an armed state with nudges kept from before its re-arming escalates at its deadline, not sooner", () => {
    expect(stepStall(armed(T0, 2), undefined, T0 + 30 * S - 1, settings, false)).toEqual({ stall: armed(T0, 2), nudge: false, escalate: false, wakeAt: T0 + 30 * S });
    expect(stepStall(armed(T0, 2), undefined, T0 + 30 * S, settings, false)).toEqual({ stall: armed(T0, 2), nudge: false, escalate: true });
  });

  it("is paused while a tool runs: past the deadline, no nudge, no escalation, no wake-up, state kept", () => {
    expect(stepStall(fired(T0, T0 + 30 * S, 2), undefined, T0 + 10 * 60 * S, settings, true)).toEqual({ stall: fired(T0, T0 + 30 * S, 2), nudge: false, escalate: false });
  });

  it("paused, still takes the arming text", () => {
    expect(stepStall(undefined, at("text", T0), T0 + 60 * S, settings, true)).toEqual({ stall: armed(T0), nudge: false, escalate: false });
  });
});

describe("clocks", () => {
  const hourMs = 60 * 60 * S;
  // The sandbox's clock is an hour behind the server's.
  const toServer = (time: string | undefined) => (time === undefined ? undefined : Date.parse(time) + hourMs);

  it("times the arming text on the server's clock", () => {
    expect(stepStall(armed(T0), undefined, T0 + hourMs, settings, false, toServer).wakeAt).toBe(T0 + hourMs + 30 * S);
  });

  it("times a tool result on the server's clock", () => {
    expect(stepStall(armed(T0), at("toolResult", T0 + 10 * S), T0 + hourMs, settings, false, toServer).wakeAt).toBe(T0 + hourMs + 40 * S);
  });

  it("keeps a nudge's time as recorded: it is already the server's", () => {
    // armedAt T0 (sandbox) is T0 + 1h on the server; a nudge recorded at T0 + 1h + 50s counts from there.
    expect(stepStall(fired(T0, T0 + hourMs + 50 * S), undefined, T0 + hourMs + 60 * S, settings, false, toServer).wakeAt).toBe(T0 + hourMs + 80 * S);
  });

  it("an armed watchdog times its deadline from the arming text alone: a nudge on record is not consulted", () => {
    // Re-armed by text at T0 on the sandbox's clock (T0 + 1h on the server's); a nudge recorded at
    // T0 + 1h + 10 s would move the deadline to T0 + 1h + 40 s if it counted outside Fired.
    const current: StallStatus = { ...armed(T0, 1), lastNudge: { time: iso(T0 + hourMs + 10 * S), message: "m" } };
    expect(stepStall(current, undefined, T0 + hourMs, settings, false, toServer).wakeAt).toBe(T0 + hourMs + 30 * S);
  });

  it("a time the server's clock cannot place counts from the epoch: the watchdog fires rather than waiting for ever", () => {
    expect(stepStall(armed(T0), undefined, T0, settings, false, () => undefined)).toMatchObject({ nudge: true, wakeAt: T0 + 30 * S });
  });
});
