"""Errors of the sandbox SDK, the exit codes, and how anything a tool raises becomes the small
failure record the watchdog reads (operator/sandbox/errors.ts).

The watchdog acts on those fields: HTTP 429 means "rate limited, back off without spending
restarts", and a Retry-After sets the wait. The exit code of the agent container is the final word
on an attempt, so the codes are the TypeScript SDK's, one for one.
"""

from __future__ import annotations

import datetime as _dt
import email.utils
import enum
import json
import math
import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Optional

#: Upper bounds of the ToolCallError fields in the CRD.
MAX_ERROR_MESSAGE = 4096
MAX_RETRY_AFTER_SECONDS = 86_400

#: Exit codes of the agent container that mean something to the watchdog (SANDBOX_EXIT_CODES).
SANDBOX_EXIT_CODES = {"unconfirmed_side_effect": 3, "rate_limited": 6}


class ExitCode(enum.IntEnum):
    """How a sandbox process ends. Only 0 completes the run; UNCONFIRMED_SIDE_EFFECT stops it for a
    person (NeedsHumanIntervention, never a restart); RATE_LIMITED requeues it with the rate-limit
    backoff; every other code is a crash to the watchdog."""

    COMPLETED = 0
    FAILED = 1
    #: The sandbox env does not name a run.
    CONFIG = 2
    #: A non-idempotent call of an earlier attempt has an unknown outcome (rule 10).
    UNCONFIRMED_SIDE_EFFECT = SANDBOX_EXIT_CODES["unconfirmed_side_effect"]
    #: A newer attempt took over, or the operator stopped the run.
    FENCED = 4
    #: The approval was rejected or timed out.
    APPROVAL_DENIED = 5
    #: The agent gave up its attempt on a rate limit: its newest tool call failed with HTTP 429,
    #: or it raised a ToolError with that status. The watchdog requeues the run with the
    #: rate-limit backoff (or the call's Retry-After) without spending a restart (rule 4).
    RATE_LIMITED = SANDBOX_EXIT_CODES["rate_limited"]


#: The same codes under the TypeScript SDK's names (EXIT_CODES), in Python spelling.
EXIT_CODES: Mapping[str, int] = {
    "completed": ExitCode.COMPLETED,
    "failed": ExitCode.FAILED,
    "config": ExitCode.CONFIG,
    "unconfirmed_side_effect": ExitCode.UNCONFIRMED_SIDE_EFFECT,
    "fenced": ExitCode.FENCED,
    "approval_denied": ExitCode.APPROVAL_DENIED,
    "rate_limited": ExitCode.RATE_LIMITED,
}


class ToolError(Exception):
    """What a tool raises to report a failure the watchdog should understand."""

    def __init__(self, message: str, *, http_status: int | None = None, retry_after_seconds: float | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.http_status = http_status
        self.retry_after_seconds = retry_after_seconds


class UnconfirmedSideEffectError(Exception):
    """A non-idempotent call was started by an earlier attempt and never confirmed: it may or may
    not have had its effect, so running it again is not safe. The agent must stop for a person."""

    def __init__(self, call: Mapping[str, Any]) -> None:
        attempt = call.get("attempt")
        super().__init__(
            f"tool {call.get('name')} (call {call.get('id')}, idempotency key {call.get('idempotencyKey') or 'none'}) "
            f"was started by attempt {attempt if attempt is not None else '?'} and its outcome is unknown; it is not "
            "idempotent, so it is not run again. A person must check its effect and resume the run."
        )
        self.call = dict(call)


class FencedError(Exception):
    """This sandbox no longer speaks for the run: a newer attempt took over, or the run stopped."""

    def __init__(self, reason: str = "the sandbox was fenced") -> None:
        super().__init__(f"sandbox fenced: {reason}")
        self.reason = reason


class ApprovalDeniedError(Exception):
    """The approval the agent waited for was rejected or timed out; the operator fails the run."""

    def __init__(self, state: Literal["Rejected", "TimedOut"], reason: str | None = None) -> None:
        super().__init__(f"approval rejected{': ' + reason if reason else ''}" if state == "Rejected" else "approval timed out")
        self.state = state
        self.reason = reason


class CheckpointTooLargeError(ValueError):
    """A checkpoint too large for the run's status (operator/api/limits.ts), refused at the call:
    nothing was written, the last committed checkpoint stands, and heartbeats go on."""

    def __init__(self, step: int, what: Literal["checkpoint", "sandbox status"], size: int, limit: int) -> None:
        if what == "checkpoint":
            message = f"the checkpoint of step {step} is {size} bytes as JSON, over the limit of {limit} bytes; nothing was written"
        else:
            message = (
                f"the checkpoint of step {step} would make the sandbox's part of status (heartbeat, tool calls and checkpoint) "
                f"{size} bytes as JSON, over the limit of {limit} bytes; nothing was written"
            )
        super().__init__(message)
        self.step = step
        #: What is over its limit: the checkpoint itself, or the sandbox's whole part of status.
        self.what = what
        #: UTF-8 bytes of it as JSON.
        self.size = size
        self.limit = limit


class SandboxConfigError(Exception):
    """The sandbox's environment does not name a run, a namespace and an attempt."""


SpendingLimit = Literal["tokens", "inputTokens", "outputTokens", "cost", "toolCalls"]


@dataclass(frozen=True)
class BudgetBreach:
    """A limit of the run's budget that its spending has reached (usage.py)."""

    limit: SpendingLimit
    #: What is spent of the limit and what it allows, as text: "120000" (tokens), "12.5" (cost).
    used: str
    allowed: str
    #: "token budget exhausted: 120000 of 100000 tokens spent"
    message: str


class BudgetExhaustedError(Exception):
    """The run's spending (status.spent plus this attempt's usage) has reached a limit of its
    budget (spec.budget), so the SDK refuses to start more work: a tool call, or whatever the agent
    guards with ``sandbox.assert_within_budget()`` (a model call). The operator stops the run for a
    person (NeedsHumanIntervention, BudgetExhausted) on the report that reached the limit;
    ``run_agent`` waits a little for that before it exits."""

    def __init__(self, breaches: Sequence[BudgetBreach]) -> None:
        parts = "; ".join(b.message.replace(" budget exhausted: ", " budget: ", 1) for b in breaches) or "a limit is reached"
        fields = " or ".join(f"spec.budget.{b.limit}" for b in breaches) or "the limit"
        super().__init__(f"run budget exhausted: {parts}; no more work is started (raise {fields}, then resume the run)")
        #: Every limit reached, in the order the operator names them.
        self.breaches: tuple[BudgetBreach, ...] = tuple(breaches)

    @property
    def limit(self) -> Optional[SpendingLimit]:
        """The first limit reached."""
        return self.breaches[0].limit if self.breaches else None


# ---------------------------------------------------------------------------------------------
# turning errors into failure records


@dataclass
class ValidationIssue:
    #: Dotted path of the offending field; empty for the arguments as a whole.
    path: str
    message: str
    expected: Optional[str] = None


class ToolValidationError(Exception):
    """What a ``validate`` function raises to say which arguments are wrong and why. Any other
    exception from ``validate`` is reported too, as one issue."""

    def __init__(self, issues: Sequence[ValidationIssue | tuple[Any, str] | Mapping[str, Any]]) -> None:
        normalized: list[ValidationIssue] = []
        for issue in issues:
            if isinstance(issue, ValidationIssue):
                normalized.append(issue)
            elif isinstance(issue, Mapping):
                normalized.append(ValidationIssue(_format_path(issue.get("path", "")), str(issue.get("message", "")), issue.get("expected")))
            else:
                path, message = issue
                normalized.append(ValidationIssue(_format_path(path), str(message)))
        self.issues = normalized
        super().__init__("; ".join(f"{i.path}: {i.message}" if i.path else i.message for i in normalized))


@dataclass
class ToolFailure:
    """A tool failure as the agent reads it and as the status records it. kind: validation (the
    arguments were wrong: fix them and retry), error (the tool failed), unconfirmed (an earlier
    attempt started the call and its outcome is unknown)."""

    kind: Literal["validation", "error", "unconfirmed"]
    message: str
    http_status: Optional[int] = None
    retry_after_seconds: Optional[float] = None
    issues: list[ValidationIssue] = field(default_factory=list)


def _format_path(path: Any) -> str:
    if isinstance(path, str):
        return path
    parts = []
    for i, p in enumerate(path or ()):
        parts.append(f"[{p}]" if isinstance(p, int) else f"{'.' if i > 0 else ''}{p}")
    return "".join(parts)


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def validation_failure(tool_name: str, err: ToolValidationError) -> ToolFailure:
    """A validation error as a message the agent (or the model behind it) can act on, e.g.
    ``invalid arguments for send_email: to: expected a string``."""
    parts = [f"{i.path}: {i.message}" if i.path else i.message for i in err.issues]
    message = _clip(f"invalid arguments for {tool_name}: {'; '.join(parts) or 'rejected by the schema'}", MAX_ERROR_MESSAGE)
    return ToolFailure(kind="validation", message=message, issues=list(err.issues))


_NUMERIC = re.compile(r"^\d+(\.\d+)?$")


def parse_retry_after(value: Any, now_s: float | None = None) -> float | None:
    """Seconds to wait from a Retry-After value: delta-seconds or an HTTP (or RFC 3339) date."""
    now_s = time.time() if now_s is None else now_s
    seconds: float | None = None
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        seconds = float(value)
    elif isinstance(value, str) and value.strip():
        text = value.strip()
        if _NUMERIC.match(text):
            seconds = float(text)
        else:
            at: _dt.datetime | None = None
            try:
                at = email.utils.parsedate_to_datetime(text)
            except (TypeError, ValueError, IndexError):
                try:
                    at = _dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
                except ValueError:
                    at = None
            if at is not None:
                if at.tzinfo is None:
                    at = at.replace(tzinfo=_dt.timezone.utc)
                seconds = float(math.ceil(at.timestamp() - now_s))
    if seconds is None or not math.isfinite(seconds):
        return None
    result = min(MAX_RETRY_AFTER_SECONDS, max(0.0, seconds))
    return int(result) if result == int(result) else result


def _header(headers: Any, name: str) -> Any:
    try:
        if headers is None:
            return None
        getter = getattr(headers, "get", None)
        if isinstance(headers, Mapping):
            for key, value in headers.items():
                if isinstance(key, str) and key.lower() == name:
                    return value[0] if isinstance(value, (list, tuple)) and value else value
            return None
        if callable(getter):
            return getter(name)  # e.g. http.client.HTTPMessage, case-insensitive
    except Exception:  # noqa: BLE001
        pass
    return None


def _attr(obj: Any, name: str) -> Any:
    """getattr that never raises: a tool's exception is whatever its library made it."""
    try:
        return getattr(obj, name, None)
    except Exception:  # noqa: BLE001
        return None


def _http_status(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and 100 <= value <= 599 else None


def describe_failure(err: BaseException | Any, now_s: float | None = None, tool_name: str = "the tool") -> ToolFailure:
    """The failure record of anything a tool raised. HTTP status from ``http_status``, ``status``,
    ``status_code``, a numeric ``code`` (urllib's HTTPError) or ``response.status(_code)``
    (requests, httpx); Retry-After from ``retry_after_seconds``, ``retry_after`` or a
    ``Retry-After`` header on the error or its response."""
    if isinstance(err, ToolValidationError):
        return validation_failure(tool_name, err)
    if isinstance(err, BaseException):
        try:
            message = str(err) or type(err).__name__
        except Exception:  # noqa: BLE001
            message = type(err).__name__
    elif isinstance(err, str):
        message = err
    else:
        try:
            message = json.dumps(err)
        except (TypeError, ValueError):
            message = str(err)
    failure = ToolFailure(kind="error", message=_clip(message, MAX_ERROR_MESSAGE))
    response = _attr(err, "response")
    for candidate in (
        _attr(err, "http_status"),
        _attr(err, "status"),
        _attr(err, "status_code"),
        _attr(err, "code"),
        _attr(response, "status"),
        _attr(response, "status_code"),
    ):
        status = _http_status(candidate)
        if status is not None:
            failure.http_status = status
            break
    for candidate in (
        _attr(err, "retry_after_seconds"),
        _attr(err, "retry_after"),
        _header(_attr(err, "headers"), "retry-after"),
        _header(_attr(response, "headers"), "retry-after"),
    ):
        seconds = parse_retry_after(candidate, now_s)
        if seconds is not None:
            failure.retry_after_seconds = seconds
            break
    return failure


#: How many causes deep a rate limit is looked for: enough for wrappers, and no cycle spins.
_MAX_CAUSES = 8


def is_rate_limit_error(err: Any) -> bool:
    """Whether ``err`` is, or wraps (``raise ... from``, or raised while handling it), a ToolError
    with HTTP 429."""
    for _ in range(_MAX_CAUSES):
        if not isinstance(err, BaseException):
            return False
        if isinstance(err, ToolError) and err.http_status == 429:
            return True
        err = err.__cause__ if err.__cause__ is not None or err.__suppress_context__ else err.__context__
    return False


def is_budget_exhausted(err: Any) -> bool:
    """Whether ``err`` is, or wraps, a BudgetExhaustedError."""
    for _ in range(_MAX_CAUSES):
        if not isinstance(err, BaseException):
            return False
        if isinstance(err, BudgetExhaustedError):
            return True
        err = err.__cause__ if err.__cause__ is not None or err.__suppress_context__ else err.__context__
    return False


def exit_code_for(err: BaseException) -> int:
    """The exit code for an error that ended the agent's work."""
    if isinstance(err, UnconfirmedSideEffectError):
        return ExitCode.UNCONFIRMED_SIDE_EFFECT
    if isinstance(err, FencedError):
        return ExitCode.FENCED
    if isinstance(err, ApprovalDeniedError):
        return ExitCode.APPROVAL_DENIED
    if isinstance(err, SandboxConfigError):
        return ExitCode.CONFIG
    if is_rate_limit_error(err):
        return ExitCode.RATE_LIMITED
    return ExitCode.FAILED
