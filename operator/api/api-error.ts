// An error answer of the Kubernetes API server, as every client of the project (the operator's,
// the sandbox SDK's, the CLI's) reports it: the HTTP code, the Status's reason and message, and how
// long the server asks the client to wait. One class, so that `instanceof ApiError` and the
// predicates below hold whichever client threw it.

/** No server may park a client for longer than a day, whatever its Retry-After says. */
export const MAX_RETRY_AFTER_SECONDS = 86_400;

/** Seconds to wait from a Retry-After value: delta-seconds or an HTTP date. */
export function parseRetryAfter(value: unknown, now: number): number | undefined {
  let seconds: number | undefined;
  if (typeof value === "number") seconds = value;
  else if (typeof value === "string" && value.trim() !== "") {
    const text = value.trim();
    if (/^\d+(\.\d+)?$/.test(text)) seconds = Number(text);
    else {
      const at = Date.parse(text);
      if (!Number.isNaN(at)) seconds = Math.ceil((at - now) / 1000);
    }
  }
  if (seconds === undefined || !Number.isFinite(seconds)) return undefined;
  return Math.min(MAX_RETRY_AFTER_SECONDS, Math.max(0, seconds));
}

export class ApiError extends Error {
  readonly code: number;
  readonly reason: string;
  readonly body: unknown;
  /** How long the server asks the client to wait (its Retry-After header, or the Status's details). */
  readonly retryAfterSeconds?: number;
  constructor(method: string, path: string, code: number, body: unknown, retryAfter?: string | null) {
    const status = body as { message?: string; reason?: string; details?: { retryAfterSeconds?: unknown } } | undefined;
    super(`${method} ${path}: ${code} ${status?.reason ?? ""} ${status?.message ?? ""}`.trim());
    this.name = "ApiError";
    this.code = code;
    this.reason = status?.reason ?? "";
    this.body = body;
    const seconds = parseRetryAfter(retryAfter ?? undefined, Date.now()) ?? parseRetryAfter(status?.details?.retryAfterSeconds, Date.now());
    if (seconds !== undefined) this.retryAfterSeconds = seconds;
  }
}

export const isNotFound = (e: unknown) => e instanceof ApiError && e.code === 404;
export const isConflict = (e: unknown) => e instanceof ApiError && e.code === 409;
export const isAlreadyExists = (e: unknown) => isConflict(e) && (e as ApiError).reason === "AlreadyExists";
