import { describe, expect, it } from "vitest";
import { z } from "zod";
import { SANDBOX_EXIT_CODES } from "../../../operator/api/annotations.ts";
import {
  EXIT_CODES,
  FencedError,
  ToolError,
  UnconfirmedSideEffectError,
  describeFailure,
  exitCodeFor,
  isRateLimitError,
  parseRetryAfter,
  validationFailure,
} from "../../../operator/sandbox/errors.ts";

const NOW = Date.parse("2026-11-30T12:00:00Z");

describe("validation errors", () => {
  const Email = z.strictObject({ to: z.email(), subject: z.string().min(1), tags: z.array(z.string()).optional() });

  it("names each wrong field and what was expected", () => {
    const parsed = Email.safeParse({ to: 42, tags: ["ok", 7] });
    expect(parsed.success).toBe(false);
    const failure = validationFailure("send_email", parsed.error!);
    expect(failure.kind).toBe("validation");
    expect(failure.message).toMatch(/^invalid arguments for send_email: /);
    expect(failure.message).toContain("to: Invalid input: expected string, received number");
    expect(failure.message).toContain("subject: Invalid input: expected string, received undefined");
    expect(failure.message).toContain("tags[1]: Invalid input: expected string, received number");
    expect(failure.issues).toEqual(
      expect.arrayContaining([
        { path: "to", message: "Invalid input: expected string, received number", expected: "string" },
        { path: "tags[1]", message: "Invalid input: expected string, received number", expected: "string" },
      ]),
    );
  });

  it("reports problems with the arguments as a whole without a path", () => {
    const parsed = Email.safeParse({ to: "a@example.com", subject: "s", extra: 1 });
    const failure = validationFailure("send_email", parsed.error!);
    expect(failure.message).toBe('invalid arguments for send_email: Unrecognized key: "extra"');
  });

  it("understands a ZodError thrown by the tool itself", () => {
    let thrown: unknown;
    try {
      z.object({ n: z.number() }).parse({ n: "x" });
    } catch (err) {
      thrown = err;
    }
    expect(describeFailure(thrown, NOW, "count")).toMatchObject({ kind: "validation", message: "invalid arguments for count: n: Invalid input: expected number, received string" });
  });
});

describe("failure records from thrown errors", () => {
  it("takes status and Retry-After from a ToolError", () => {
    expect(describeFailure(new ToolError("slow down", { httpStatus: 429, retryAfterSeconds: 7 }), NOW)).toEqual({
      kind: "error",
      message: "slow down",
      httpStatus: 429,
      retryAfterSeconds: 7,
    });
  });

  it("takes them from the usual shapes of HTTP client errors", () => {
    const fetchLike = Object.assign(new Error("Too Many Requests"), { status: 429, headers: new Headers({ "Retry-After": "12" }) });
    expect(describeFailure(fetchLike, NOW)).toMatchObject({ httpStatus: 429, retryAfterSeconds: 12 });
    const axiosLike = Object.assign(new Error("Request failed"), { response: { status: 503, headers: { "retry-after": "Mon, 30 Nov 2026 12:01:00 GMT" } } });
    expect(describeFailure(axiosLike, NOW)).toMatchObject({ httpStatus: 503, retryAfterSeconds: 60 });
    const plain = Object.assign(new Error("x"), { statusCode: 500, retryAfter: 3 });
    expect(describeFailure(plain, NOW)).toMatchObject({ httpStatus: 500, retryAfterSeconds: 3 });
  });

  it("does not mistake a Node error code for an HTTP status", () => {
    const err = Object.assign(new Error("connect ECONNREFUSED"), { code: "ECONNREFUSED" });
    expect(describeFailure(err, NOW)).toEqual({ kind: "error", message: "connect ECONNREFUSED" });
  });

  it("describes things that are not errors, and clips long messages to the CRD's limit", () => {
    expect(describeFailure("just a string", NOW).message).toBe("just a string");
    expect(describeFailure({ weird: true }, NOW).message).toBe('{"weird":true}');
    expect(describeFailure(new Error("x".repeat(10_000)), NOW).message).toHaveLength(4096);
  });
});

describe("Retry-After", () => {
  it("accepts seconds and HTTP dates, clamped to what the CRD allows", () => {
    expect(parseRetryAfter("120", NOW)).toBe(120);
    expect(parseRetryAfter(1.5, NOW)).toBe(1.5);
    expect(parseRetryAfter("Mon, 30 Nov 2026 12:00:30 GMT", NOW)).toBe(30);
    expect(parseRetryAfter("Mon, 30 Nov 2026 11:00:00 GMT", NOW)).toBe(0);
    expect(parseRetryAfter(10_000_000, NOW)).toBe(86_400);
    expect(parseRetryAfter(-5, NOW)).toBe(0);
    expect(parseRetryAfter("soon", NOW)).toBeUndefined();
    expect(parseRetryAfter(undefined, NOW)).toBeUndefined();
  });
});

describe("exit codes", () => {
  it("maps each way the agent's work can end", () => {
    const call = { id: "a1-1", name: "charge", argsHash: "h", state: "Started" as const, attempt: 1, idempotent: false };
    expect(exitCodeFor(new UnconfirmedSideEffectError(call))).toBe(EXIT_CODES.unconfirmedSideEffect);
    expect(exitCodeFor(new FencedError("superseded"))).toBe(EXIT_CODES.fenced);
    expect(exitCodeFor(new Error("boom"))).toBe(EXIT_CODES.failed);
    expect(EXIT_CODES.completed).toBe(0);
    expect(new Set(Object.values(EXIT_CODES)).size).toBe(Object.keys(EXIT_CODES).length);
  });

  it("exits as rate limited for a ToolError with HTTP 429, thrown or wrapped, with the code the watchdog reads", () => {
    expect(EXIT_CODES.rateLimited).toBe(SANDBOX_EXIT_CODES.rateLimited);
    const limited = new ToolError("429 Too Many Requests", { httpStatus: 429, retryAfterSeconds: 5 });
    expect(exitCodeFor(limited)).toBe(EXIT_CODES.rateLimited);
    expect(exitCodeFor(new Error("giving up", { cause: new Error("the model", { cause: limited }) }))).toBe(EXIT_CODES.rateLimited);
    // A ToolError of another copy of the SDK counts alike.
    expect(exitCodeFor(Object.assign(new Error("busy"), { name: "ToolError", httpStatus: 429 }))).toBe(EXIT_CODES.rateLimited);
  });

  it("exits as failed for any other error, whatever its status", () => {
    expect(exitCodeFor(new ToolError("upstream down", { httpStatus: 503 }))).toBe(EXIT_CODES.failed);
    expect(exitCodeFor(Object.assign(new Error("Too Many Requests"), { status: 429 }))).toBe(EXIT_CODES.failed); // not a ToolError
    const cycle: { name: string; cause?: unknown } = { name: "Error" };
    cycle.cause = cycle;
    expect(isRateLimitError(cycle)).toBe(false);
    expect(isRateLimitError(undefined)).toBe(false);
  });
});
