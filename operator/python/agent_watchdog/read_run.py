"""The run as the sandbox finds it at start (read-run.ts).

Read with retries while the API server cannot be reached, and checked as leniently as the
operator checks it. What earlier attempts left decides what tools do now, so a record that does
not fit the API's schema is dropped rather than trusted, and reported rather than raised: one
malformed ``toolCalls`` element drops only itself, so that garbage beside a Started
non-idempotent call can never hide it from the replay rules. The checks are those of the zod
schemas in operator/api/agentrun.ts for the fields the SDK reads.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Optional

from .api_client import RETRY, SandboxApi, api_error_code, is_not_found, is_transient
from .errors import FencedError
from .log import SandboxLogger
from .protocol import ACTIVITY_KINDS, PHASES, TOOL_CALL_STATES, SandboxIdentity, api_paths

#: The CRD's bound on status.toolCalls: anything beyond the newest 64 was never valid.
MAX_TOOL_CALLS = 64

_TIMESTAMP = re.compile(
    r"^[0-9]{4}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])T([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9]([.][0-9]{1,9})?(Z|[+-]([01][0-9]|2[0-3]):[0-5][0-9])$"
)
_SANDBOX_STATES = ("Planning", "ExecutingTool", "AwaitingReply")
#: A cost as the CRD admits it (operator/api/decimal.ts DECIMAL_PATTERN).
_COST = re.compile(r"^[0-9]{1,18}([.][0-9]{1,18})?$")


class _Invalid(Exception):
    pass


def _is_int(v: Any, lo: int | None = None, hi: int | None = None) -> bool:
    if isinstance(v, bool):
        return False
    if isinstance(v, float) and v.is_integer():
        v = int(v)
    return isinstance(v, int) and (lo is None or v >= lo) and (hi is None or v <= hi)


def _is_number(v: Any, lo: float, hi: float) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and lo <= v <= hi


def _is_timestamp(v: Any) -> bool:
    if not isinstance(v, str) or not _TIMESTAMP.match(v):
        return False
    year, month, day = int(v[0:4]), int(v[5:7]), int(v[8:10])
    leap = (year % 4 == 0 and year % 100 != 0) or year % 400 == 0
    days = [31, 29 if leap else 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31][month - 1]
    return 1 <= day <= days


def _is_str(v: Any, lo: int = 0, hi: int | None = None) -> bool:
    return isinstance(v, str) and len(v) >= lo and (hi is None or len(v) <= hi)


def _strict(obj: Any, path: str, fields: dict[str, tuple[bool, Callable[[Any], bool]]]) -> None:
    """A strict object: known keys only, required ones present, each value checked."""
    if not isinstance(obj, dict):
        raise _Invalid(f"{path}: expected an object")
    for key in obj:
        if key not in fields:
            raise _Invalid(f"{path}: unrecognized key {key!r}")
    for key, (required, check) in fields.items():
        if key not in obj or obj[key] is None:
            if required:
                raise _Invalid(f"{path}.{key}: required")
            continue
        if not check(obj[key]):
            raise _Invalid(f"{path}.{key}: invalid")


def _tool_call_error(v: Any) -> bool:
    try:
        _strict(v, "error", {
            "message": (False, lambda x: _is_str(x, 0, 4096)),
            "httpStatus": (False, lambda x: _is_int(x, 0, 999)),
            "retryAfterSeconds": (False, lambda x: _is_number(x, 0, 86_400)),
        })
        return True
    except _Invalid:
        return False


def check_tool_call(v: Any, path: str) -> None:
    _strict(v, path, {
        "id": (True, lambda x: _is_str(x, 1, 128)),
        "name": (True, lambda x: _is_str(x, 1, 256)),
        "argsHash": (True, lambda x: _is_str(x, 0, 128)),
        "idempotencyKey": (False, lambda x: _is_str(x, 0, 256)),
        "idempotent": (False, lambda x: isinstance(x, bool)),
        "attempt": (False, lambda x: _is_int(x, 1, 1_000_000)),
        "state": (True, lambda x: x in TOOL_CALL_STATES),
        "error": (False, _tool_call_error),
        "startedAt": (False, _is_timestamp),
        "finishedAt": (False, _is_timestamp),
        "result": (False, lambda x: _is_str(x, 0, 8192)),
    })


def _check_checkpoint(v: Any, path: str) -> None:
    _strict(v, path, {"step": (True, lambda x: _is_int(x, 0)), "data": (False, lambda x: True)})


def _check_heartbeat(v: Any, path: str) -> None:
    def activity(x: Any) -> bool:
        try:
            _strict(x, "activity", {"kind": (True, lambda k: k in ACTIVITY_KINDS), "time": (True, _is_timestamp)})
            return True
        except _Invalid:
            return False

    def usage(x: Any) -> bool:
        try:
            _strict(x, "usage", {
                "inputTokens": (False, lambda n: _is_int(n, 0, 2**53 - 1)),
                "outputTokens": (False, lambda n: _is_int(n, 0, 2**53 - 1)),
                "cost": (False, lambda c: _is_str(c, 0, 37) and _COST.match(c) is not None),
                "toolCalls": (False, lambda n: _is_int(n, 0, 2**53 - 1)),
                "model": (False, lambda m: _is_str(m, 1, 256)),
            })
            return True
        except _Invalid:
            return False

    _strict(v, path, {
        "time": (True, _is_timestamp),
        "attempt": (True, lambda x: _is_int(x, 1, 1_000_000)),
        "state": (True, lambda x: x in _SANDBOX_STATES),
        "activity": (False, activity),
        "usage": (False, usage),
    })


def _check_approval(v: Any, path: str) -> None:
    _strict(v, path, {
        "id": (False, lambda x: _is_str(x, 0, 128)),
        "state": (True, lambda x: x in ("Pending", "Approved", "Rejected", "TimedOut")),
        "requestedAt": (True, _is_timestamp),
        "answer": (False, lambda x: _is_str(x, 0, 4096)),
        "reason": (False, lambda x: _is_str(x, 0, 4096)),
        "decidedAt": (False, _is_timestamp),
    })


def _check_stall(v: Any, path: str) -> None:
    def last(x: Any) -> bool:
        try:
            _strict(x, "lastNudge", {"time": (True, _is_timestamp), "message": (True, lambda m: _is_str(m, 0, 2048))})
            return True
        except _Invalid:
            return False

    _strict(v, path, {
        "state": (True, lambda x: x in ("Disarmed", "Armed", "Fired")),
        "nudges": (True, lambda x: _is_int(x, 0, 1_000_000)),
        "armedAt": (False, _is_timestamp),
        "lastNudge": (False, last),
    })


def _check_failure(v: Any, path: str) -> None:
    _strict(v, path, {
        "reason": (True, lambda x: _is_str(x, 0, 256)),
        "message": (True, lambda x: _is_str(x, 0, 4096)),
        "time": (True, _is_timestamp),
        "attempt": (False, lambda x: _is_int(x, 1, 1_000_000)),
        "state": (False, lambda x: x in _SANDBOX_STATES),
        "tool": (False, lambda x: isinstance(x, dict)),
    })


def _check_watchdog(v: Any, path: str) -> None:
    if not isinstance(v, dict):
        raise _Invalid(f"{path}: expected an object")


def _value(predicate: Callable[[Any], bool]) -> Callable[[Any, str], None]:
    def check(v: Any, path: str) -> None:
        if not predicate(v):
            raise _Invalid(f"{path}: invalid")

    return check


_SANDBOX_FIELDS: dict[str, Callable[[Any, str], None]] = {"heartbeat": _check_heartbeat, "checkpoint": _check_checkpoint}
_OPERATOR_FIELDS: dict[str, Callable[[Any, str], None]] = {
    "phase": _value(lambda v: v in PHASES),
    "attempt": _value(lambda v: _is_int(v, 0, 1_000_000)),
    "toolCallsResetAfter": _value(lambda v: _is_str(v, 0, 128)),
    "approval": _check_approval,
    "stall": _check_stall,
    "lastFailure": _check_failure,
    "watchdog": _check_watchdog,
}


@dataclass
class ReadRun:
    run: dict[str, Any]
    #: The status fields that passed their checks (others dropped).
    status: dict[str, Any]
    problems: list[str] = field(default_factory=list)


def _read_tool_calls(value: Any, problems: list[str]) -> Optional[list[dict[str, Any]]]:
    if not isinstance(value, list):
        problems.append("status.toolCalls: expected an array")
        return None
    calls: list[dict[str, Any]] = []
    dropped, first = 0, None
    window = value[-MAX_TOOL_CALLS:]
    for i, element in enumerate(window):
        try:
            check_tool_call(element, f"status.toolCalls[{i}]")
            calls.append(dict(element))
        except _Invalid as err:
            dropped += 1
            first = first or str(err)
    if dropped:
        problems.append(f"{dropped} of {len(window)} status.toolCalls records are invalid and ignored ({first})")
    return calls


def read_run(raw: Any) -> ReadRun:
    """Metadata and spec must be there (the CRD guarantees the spec); each status field is checked
    on its own. A sandbox field that does not pass is dropped with a problem report; an operator
    field that does not pass is dropped silently, as the operator rewrites it from scratch."""
    if not isinstance(raw, dict):
        raise ValueError("the run is not an object")
    metadata = raw.get("metadata") if raw.get("metadata") is not None else {}
    if not isinstance(metadata, dict):
        raise ValueError("metadata: expected an object")
    spec = raw.get("spec")
    if not isinstance(spec, dict) or not isinstance(spec.get("template"), dict):
        raise ValueError("spec.template: required")
    if spec.get("goal") is not None and not isinstance(spec.get("goal"), str):
        raise ValueError("spec.goal: expected a string")
    problems: list[str] = []
    raw_status = raw.get("status") if isinstance(raw.get("status"), dict) else {}
    status: dict[str, Any] = {}
    for key, value in raw_status.items():
        if value is None:
            continue
        if key == "toolCalls":
            calls = _read_tool_calls(value, problems)
            if calls is not None:
                status["toolCalls"] = calls
            continue
        check = _SANDBOX_FIELDS.get(key) or _OPERATOR_FIELDS.get(key)
        if check is None:
            status[key] = value  # an operator field the SDK does not read
            continue
        try:
            check(value, f"status.{key}")
            status[key] = value
        except _Invalid as err:
            if key in _SANDBOX_FIELDS:
                problems.append(str(err))
    return ReadRun(run=raw, status=status, problems=problems)


_WAIT_REPORT_S = 10.0


def read_own_run(
    client: SandboxApi,
    identity: SandboxIdentity,
    deadline_s: float,
    log: Optional[SandboxLogger] = None,
    mono: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> dict[str, Any]:
    """An API server that restarts, or a network still coming up in a new pod, is a matter of
    seconds: the first read is retried (200 ms doubling to 5 s) up to the start deadline. So is a
    403 at start: the sandbox's RoleBinding is made just before its pod, and an authorizer that
    has not seen it yet (its cache refilling after an API server restart, say) refuses it.
    A sandbox that never reports in is killed as hung with nothing to say why unless it says so
    here: the first refusal is logged, then one line per 10 s while they last."""
    started_at = mono()
    give_up_at = started_at + deadline_s
    wait = RETRY["first"]
    path = api_paths(identity.namespace, identity.run_name)["run"]
    reported_at: Optional[float] = None
    tries = 0
    while True:
        tries += 1
        try:
            run = client.get(path)
            if not isinstance(run, dict):
                raise ValueError(f"GET {path}: not an object")
            if reported_at is not None and log is not None:
                log.info("read the run", tries=tries, waitedMs=round((mono() - started_at) * 1000))
            return run
        except Exception as err:  # noqa: BLE001
            if is_not_found(err):
                raise FencedError(f"run {identity.namespace}/{identity.run_name} does not exist") from err
            if not (is_transient(err) or api_error_code(err) == 403) or mono() + wait > give_up_at:
                raise
            if log is not None and (reported_at is None or mono() - reported_at >= _WAIT_REPORT_S):
                reported_at = mono()
                log.warn(
                    "cannot read the run yet; trying again",
                    tries=tries,
                    code=api_error_code(err),
                    error=str(err),
                    giveUpInMs=round((give_up_at - reported_at) * 1000),
                )
        sleep(wait)
        wait = min(RETRY["max"], wait * 2)


__all__ = ["ReadRun", "read_run", "read_own_run", "check_tool_call"]
