// Answers bound to questions (rule 11): an approve or reject counts only when watchdog.dev/approval-id
// names the pending request; any other answer is refused, with the exact reason, and removed.
import { describe, expect, it } from "vitest";
import type { AgentRun, ApprovalStatus } from "../../../operator/api/agentrun.ts";
import { readAnswers, requestId } from "../../../operator/watchdog/answers.ts";
import { T0, iso, run } from "../fixtures.ts";

const APPROVE = "watchdog.dev/approve";
const REJECT = "watchdog.dev/reject";
const ID = "watchdog.dev/approval-id";

const annotated = (annotations: Record<string, string>) => run({ annotations }) as AgentRun;
const request = (state: ApprovalStatus["state"], id?: string): ApprovalStatus => ({ state, requestedAt: iso(T0), ...(id !== undefined ? { id } : {}) });
const pending = request("Pending", "1-abc");

/** The refusal readAnswers gives for `what` with `why`: a Warning Event, and the answer annotations present consumed. */
const refusal = (what: string, why: string, consume: string[]) => ({
  refused: {
    summary: `refused ${what}: ${why}`,
    consume,
    events: [{ type: "Warning", reason: "AnswerRefused", action: "RefuseAnswer", note: `${what} refused and removed: ${why}` }],
  },
});

describe("reading answers", () => {
  it("a run without answer annotations has no answer and refuses nothing, pending request or not", () => {
    expect(readAnswers(annotated({ [ID]: "1-abc", other: "x" }), pending)).toEqual({});
    expect(readAnswers(annotated({}), undefined)).toEqual({});
  });

  it("a run whose metadata has no annotations at all reads as one without answers", () => {
    const bare = run() as AgentRun;
    delete bare.metadata.annotations;
    expect(readAnswers(bare, pending)).toEqual({});
  });

  it("an approve naming the pending request answers it with the given text", () => {
    expect(readAnswers(annotated({ [APPROVE]: "go ahead", [ID]: "1-abc" }), pending)).toEqual({ answer: { kind: "approve", answer: "go ahead", requestId: "1-abc" } });
  });

  it("an empty approve naming the pending request answers it with the default text 'approved'", () => {
    expect(readAnswers(annotated({ [APPROVE]: "", [ID]: "1-abc" }), pending)).toEqual({ answer: { kind: "approve", answer: "approved", requestId: "1-abc" } });
  });

  it("a reject naming the pending request rejects it with the given reason", () => {
    expect(readAnswers(annotated({ [REJECT]: "too costly", [ID]: "1-abc" }), pending)).toEqual({ answer: { kind: "reject", reason: "too costly", requestId: "1-abc" } });
  });

  it("an empty reject naming the pending request rejects it with the default reason 'rejected'", () => {
    expect(readAnswers(annotated({ [REJECT]: "", [ID]: "1-abc" }), pending)).toEqual({ answer: { kind: "reject", reason: "rejected", requestId: "1-abc" } });
  });

  it("a reject wins over an approve given together: refusing is the safe reading", () => {
    expect(readAnswers(annotated({ [APPROVE]: "yes", [REJECT]: "no", [ID]: "1-abc" }), pending)).toEqual({ answer: { kind: "reject", reason: "no", requestId: "1-abc" } });
  });

  it("refuses an answer given while no request exists, and consumes it so that it cannot answer a later one", () => {
    expect(readAnswers(annotated({ [APPROVE]: "yes" }), undefined)).toEqual(refusal(APPROVE, "no approval request is pending", [APPROVE]));
  });

  it("refuses a reject given while no request exists, naming the reject annotation", () => {
    expect(readAnswers(annotated({ [REJECT]: "no", [ID]: "1-abc" }), undefined)).toEqual(refusal(REJECT, "no approval request is pending", [REJECT, ID]));
  });

  it("refuses an answer without approval-id, telling which id to set", () => {
    expect(readAnswers(annotated({ [APPROVE]: "yes" }), pending)).toEqual(
      refusal(APPROVE, "it does not name the pending request (set watchdog.dev/approval-id=1-abc)", [APPROVE]),
    );
  });

  it("refuses an answer naming another request, quoting the id it names and the pending one", () => {
    expect(readAnswers(annotated({ [APPROVE]: "yes", [ID]: "0-old" }), pending)).toEqual(
      refusal(APPROVE, 'it names request "0-old", but the pending request is 1-abc', [APPROVE, ID]),
    );
  });

  it("quotes at most 64 code points of a long foreign id, so the refusal Event stays small", () => {
    const long = "x".repeat(100);
    const refused = readAnswers(annotated({ [REJECT]: "no", [ID]: long }), pending).refused;
    expect(refused?.summary).toBe(`refused ${REJECT}: it names request "${"x".repeat(64)}", but the pending request is 1-abc`);
  });

  it("consumes every answer annotation present, in the contract's order, and no others", () => {
    expect(readAnswers(annotated({ [ID]: "0-old", [REJECT]: "no", [APPROVE]: "yes", other: "kept" }), pending).refused?.consume).toEqual([APPROVE, REJECT, ID]);
  });

  it("refuses an answer naming a request that was answered, saying it has ended and how", () => {
    expect(readAnswers(annotated({ [APPROVE]: "yes", [ID]: "1-abc" }), request("Approved", "1-abc"))).toEqual(
      refusal(APPROVE, "request 1-abc has ended (Approved)", [APPROVE, ID]),
    );
  });

  it("refuses an answer naming a request that timed out, saying it has ended (TimedOut)", () => {
    expect(readAnswers(annotated({ [REJECT]: "late", [ID]: "1-abc" }), request("TimedOut", "1-abc")).refused?.summary).toBe(`refused ${REJECT}: request 1-abc has ended (TimedOut)`);
  });

  it("refuses an answer naming a withdrawn request, explaining that the run left the wait", () => {
    expect(readAnswers(annotated({ [APPROVE]: "yes", [ID]: "1-abc" }), request("Withdrawn", "1-abc")).refused?.summary).toBe(
      `refused ${APPROVE}: request 1-abc has ended (withdrawn: the run left the wait without an answer)`,
    );
  });

  it("refuses an answer naming another id than the ended request's as one given while nothing is pending", () => {
    expect(readAnswers(annotated({ [APPROVE]: "yes", [ID]: "0-old" }), request("Rejected", "1-abc")).refused?.summary).toBe(`refused ${APPROVE}: no approval request is pending`);
  });

  it("does not call an id-less answer the answer to an ended request that has no id either", () => {
    expect(readAnswers(annotated({ [APPROVE]: "yes" }), request("Approved")).refused?.summary).toBe(`refused ${APPROVE}: no approval request is pending`);
  });

  it("treats a pending request without an id as none pending: no answer can name it", () => {
    expect(readAnswers(annotated({ [APPROVE]: "yes" }), request("Pending")).refused?.summary).toBe(`refused ${APPROVE}: no approval request is pending`);
  });
});

describe("request ids", () => {
  it("are the attempt and the time in base 36, so two requests of one attempt at different times differ", () => {
    expect(requestId(3, 36)).toBe("3-10");
    expect(requestId(1, T0)).toBe(`1-${T0.toString(36)}`);
    expect(requestId(1, T0 + 1)).not.toBe(requestId(1, T0));
  });
});
