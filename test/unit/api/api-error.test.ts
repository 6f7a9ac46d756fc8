// One ApiError for every client of the API server: the operator's, the sandbox SDK's and the
// CLI's throw the same class, so `instanceof` and the predicates hold whichever threw it, and each
// carries the server's Retry-After.
import { describe, expect, it } from "vitest";
import { ApiError, isAlreadyExists, isConflict, isNotFound, MAX_RETRY_AFTER_SECONDS } from "../../../operator/api/api-error.ts";
import { ApiError as OperatorApiError } from "../../../operator/kube/client.ts";
import { ApiError as SandboxApiError } from "../../../operator/sandbox/api-client.ts";

describe("ApiError", () => {
  it("is one class for the operator's client and the sandbox SDK's", () => {
    expect(OperatorApiError).toBe(ApiError);
    expect(SandboxApiError).toBe(ApiError);
  });

  it("says the method, path, code, reason and message, and keeps the Status", () => {
    const status = { kind: "Status", reason: "Conflict", message: "the object has been modified" };
    const err = new ApiError("PATCH", "/apis/x", 409, status);
    expect(err.message).toBe("PATCH /apis/x: 409 Conflict the object has been modified");
    expect(err).toMatchObject({ name: "ApiError", code: 409, reason: "Conflict", body: status });
    expect(err.retryAfterSeconds).toBeUndefined();
    expect([isConflict(err), isNotFound(err), isAlreadyExists(err)]).toEqual([true, false, false]);
    expect(isAlreadyExists(new ApiError("POST", "/p", 409, { reason: "AlreadyExists" }))).toBe(true);
    expect(isNotFound(new ApiError("GET", "/p", 404, undefined))).toBe(true);
    expect(new ApiError("GET", "/p", 500, undefined).message).toBe("GET /p: 500");
  });

  it("takes the wait from the Retry-After header first, then from the Status's details, bounded to a day", () => {
    expect(new ApiError("GET", "/p", 429, { details: { retryAfterSeconds: 7 } }, "3").retryAfterSeconds).toBe(3);
    expect(new ApiError("GET", "/p", 429, { details: { retryAfterSeconds: 7 } }).retryAfterSeconds).toBe(7);
    expect(new ApiError("GET", "/p", 429, undefined, "9999999").retryAfterSeconds).toBe(MAX_RETRY_AFTER_SECONDS);
    expect(new ApiError("GET", "/p", 429, undefined, "soon").retryAfterSeconds).toBeUndefined();
  });
});
