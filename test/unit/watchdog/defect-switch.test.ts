// What each development switch of operator/defects.ts turns back on in the core, and that it
// changes nothing while it is off. The switch is the checker's proof (a soak run with a defect must
// be flagged), so a switch that did less than its defect would prove less than it claims.
import { afterEach, describe, expect, it, vi } from "vitest";
import type { AgentRun, ApprovalStatus, Heartbeat } from "../../../operator/api/agentrun.ts";
import type { Defect } from "../../../operator/defects.ts";
import { readAnswers } from "../../../operator/watchdog/answers.ts";
import { currentHeartbeat } from "../../../operator/watchdog/liveness.ts";
import { T0, iso, run } from "../fixtures.ts";

const on = vi.hoisted(() => ({ defect: undefined as string | undefined }));
vi.mock("../../../operator/defects.ts", () => ({ reintroduced: (defect: Defect) => on.defect === defect }));
afterEach(() => {
  on.defect = undefined;
});

const S = 1000;
const annotated = (annotations: Record<string, string>) => run({ annotations }) as AgentRun;
const pending: ApprovalStatus = { state: "Pending", id: "1-abc", requestedAt: iso(T0) };

describe("unbound-answers (BUGS.md 5 and 13)", () => {
  const early = annotated({ "watchdog.dev/approve": "early", "watchdog.dev/approval-id": "1-abc" });
  const stray = annotated({ "watchdog.dev/approve": "stray", "watchdog.dev/approval-id": "stray-1" });

  it("off: an answer given while nothing is pending, or naming another request, is refused", () => {
    expect(readAnswers(early, undefined).refused?.summary).toBe("refused watchdog.dev/approve: no approval request is pending");
    expect(readAnswers(stray, pending).refused?.summary).toBe('refused watchdog.dev/approve: it names request "stray-1", but the pending request is 1-abc');
  });

  it("on: an answer given while nothing is pending is kept, and one naming another request answers the pending one", () => {
    on.defect = "unbound-answers";
    expect(readAnswers(early, undefined)).toEqual({});
    expect(readAnswers(stray, pending)).toEqual({ answer: { kind: "approve", answer: "stray", requestId: "1-abc" } });
  });

  it("another defect's switch leaves answers bound", () => {
    on.defect = "sandbox-clock";
    expect(readAnswers(stray, pending).refused).toBeDefined();
    expect(readAnswers(early, undefined).refused).toBeDefined();
  });
});

describe("sandbox-clock (BUGS.md 3)", () => {
  const slow: Heartbeat = { time: iso(T0 - 600 * S), attempt: 1, state: "Planning" };

  it("off: the heartbeat counts from the server's acceptance, and the sandbox's clock is only an offset", () => {
    expect(currentHeartbeat(slow, 1, T0, undefined)).toEqual({ heartbeat: slow, acceptedAt: T0 + 999, skewMs: -600 * S });
  });

  it("on: the heartbeat counts from the sandbox's own clock", () => {
    on.defect = "sandbox-clock";
    expect(currentHeartbeat(slow, 1, T0, undefined)).toEqual({ heartbeat: slow, acceptedAt: T0 - 600 * S, skewMs: 0 });
    // With no server time at all there is nothing to replace: the heartbeat is unplaced either way.
    expect(currentHeartbeat(slow, 1, undefined, undefined)).toEqual({ heartbeat: slow, skewMs: 0 });
  });

  it("on, with a heartbeat time that cannot be read: the server's time still counts", () => {
    on.defect = "sandbox-clock";
    const unreadable = { ...slow, time: "not a time" };
    expect(currentHeartbeat(unreadable, 1, T0, undefined)).toEqual({ heartbeat: unreadable, acceptedAt: T0 + 999, skewMs: 0 });
  });
});
