"""The sandbox side of the AgentRun protocol as pure functions (operator/sandbox/protocol.ts).

When to heartbeat, what a replayed tool call does, whether a checkpoint fits, which nudge is new,
when this sandbox must fence itself, how an approval request is recognised across attempts,
whether a give-up was a rate limit. The modules around them only do I/O; keeping the decisions
here, free of threads and sockets, is what lets them be tested exhaustively and compared line by
line with the TypeScript SDK.

Times are milliseconds (floats), as in the TypeScript SDK, so that the numbers in both read alike.
"""

from __future__ import annotations

import datetime as _dt
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Optional, TypedDict, Union

from . import _json
from .errors import CheckpointTooLargeError, SandboxConfigError

# ---------------------------------------------------------------------------------------------
# names of the contract (operator/api/annotations.ts, operator/api/agentrun.ts)

GROUP = "watchdog.dev"
VERSION = "v1alpha1"
PLURAL = "agentruns"

#: The env vars the operator sets on every sandbox pod (SANDBOX_ENV).
SANDBOX_ENV = {
    "run_name": "WATCHDOG_RUN_NAME",
    "run_namespace": "WATCHDOG_RUN_NAMESPACE",
    "attempt": "WATCHDOG_ATTEMPT",
}
#: Log level of the default logger (the TypeScript SDK reads the same variable).
LOG_LEVEL_ENV = "WATCHDOG_LOG_LEVEL"
#: Field manager name of the sandbox SDKs' status writes (SANDBOX_FIELD_MANAGER).
SANDBOX_FIELD_MANAGER = "agent-watchdog-sandbox"
#: Words in the admission policy's refusal of a write from a pod the run does not name (yet).
NOT_CURRENT_SANDBOX = "is not the current sandbox"
#: The built-in heartbeat timeout (operator/api/defaults.ts).
DEFAULT_HEARTBEAT_TIMEOUT = "5m"
#: The largest checkpoint (status.checkpoint as JSON, UTF-8 bytes) a sandbox may write (limits.ts).
MAX_CHECKPOINT_BYTES = 256 * 1024
#: The largest sandbox part of status: heartbeat, toolCalls and checkpoint together (limits.ts).
MAX_SANDBOX_STATUS_BYTES = 512 * 1024


def json_bytes(value: Any) -> int:
    """UTF-8 bytes of a value as JSON (``JSON.stringify``): what the API server stores of it."""
    return len(_json.dumps(value).encode("utf-8"))

SandboxState = Literal["Planning", "ExecutingTool", "AwaitingReply"]
ActivityKind = Literal["text", "delta", "toolResult", "userMessage", "noReply", "emptyText"]
ACTIVITY_KINDS = ("text", "delta", "toolResult", "userMessage", "noReply", "emptyText")
TOOL_CALL_STATES = ("Started", "Succeeded", "Failed")
PHASES = (
    "Queued",
    "Starting",
    "Planning",
    "ExecutingTool",
    "AwaitingReply",
    "NeedsHumanIntervention",
    "Suspended",
    "Completed",
    "Failed",
)


class ToolCallErrorRecord(TypedDict, total=False):
    message: str
    httpStatus: int
    retryAfterSeconds: float


class ToolCall(TypedDict, total=False):
    """A record in status.toolCalls, as on the wire (camelCase: it is the API's JSON)."""

    id: str
    name: str
    argsHash: str
    idempotencyKey: str
    idempotent: bool
    attempt: int
    state: Literal["Started", "Succeeded", "Failed"]
    error: ToolCallErrorRecord
    startedAt: str
    finishedAt: str
    result: str


class Checkpoint(TypedDict, total=False):
    step: int
    data: Any


class FailureRecord(TypedDict, total=False):
    """status.lastFailure: why the previous attempt ended."""

    reason: str
    message: str
    time: str
    attempt: int
    state: str
    tool: dict[str, str]


def api_paths(namespace: str, name: str | None = None) -> dict[str, str]:
    """The collection, the run and its status subresource."""
    base = f"/apis/{GROUP}/{VERSION}/namespaces/{namespace}/{PLURAL}"
    paths = {"runs": base}
    if name is not None:
        paths["run"] = f"{base}/{name}"
        paths["status"] = f"{base}/{name}/status"
    return paths


_EPOCH = _dt.datetime(1970, 1, 1, tzinfo=_dt.timezone.utc)


def iso_now(now_s: float) -> str:
    """A time as JavaScript's Date.toISOString writes it: UTC, milliseconds, Z."""
    ms = math.floor(now_s * 1000)
    at = _EPOCH + _dt.timedelta(milliseconds=ms)  # integer arithmetic: no float rounding of the ms
    return at.strftime("%Y-%m-%dT%H:%M:%S.") + f"{ms % 1000:03d}Z"


_RFC3339 = re.compile(
    r"^(\d{4})-(\d{2})-(\d{2})[Tt](\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,9}))?([Zz]|[+-]\d{2}:\d{2})$"
)


def parse_time_ms(text: Any) -> float | None:
    """Milliseconds since the epoch of an RFC 3339 time, or None (Date.parse gives NaN)."""
    if not isinstance(text, str):
        return None
    m = _RFC3339.match(text.strip())
    if not m:
        return None
    year, month, day, hour, minute, second = (int(g) for g in m.groups()[:6])
    fraction = (m.group(7) or "").ljust(3, "0")[:3]
    zone = m.group(8)
    try:
        tz = _dt.timezone.utc
        if zone not in ("Z", "z"):
            sign = 1 if zone[0] == "+" else -1
            tz = _dt.timezone(sign * _dt.timedelta(hours=int(zone[1:3]), minutes=int(zone[4:6])))
        at = _dt.datetime(year, month, day, hour, minute, second, tzinfo=tz)
    except ValueError:
        return None
    return math.floor(at.timestamp()) * 1000 + int(fraction)


# ---------------------------------------------------------------------------------------------
# configuration


@dataclass(frozen=True)
class SandboxIdentity:
    """The run, namespace and attempt a sandbox pod serves."""

    run_name: str
    namespace: str
    attempt: int


def identity_from_env(env: Mapping[str, str]) -> SandboxIdentity:
    """From the env vars the operator sets; SandboxConfigError (exit 2) when they are missing."""
    run_name = env.get(SANDBOX_ENV["run_name"]) or ""
    namespace = env.get(SANDBOX_ENV["run_namespace"]) or ""
    attempt_text = env.get(SANDBOX_ENV["attempt"]) or ""
    missing = [
        name
        for name, value in (
            (SANDBOX_ENV["run_name"], run_name),
            (SANDBOX_ENV["run_namespace"], namespace),
            (SANDBOX_ENV["attempt"], attempt_text),
        )
        if not value
    ]
    if missing:
        raise SandboxConfigError(f"not in a sandbox pod: {', '.join(missing)} not set")
    try:
        number = float(attempt_text.strip())
    except ValueError:
        number = math.nan
    if not math.isfinite(number) or number != int(number) or number < 1:
        raise SandboxConfigError(f"{SANDBOX_ENV['attempt']}={attempt_text} is not a positive integer")
    return SandboxIdentity(run_name=run_name, namespace=namespace, attempt=int(number))


# ---------------------------------------------------------------------------------------------
# durations (operator/api/duration.ts: Go's time.ParseDuration, to the nanosecond)

_DURATION = re.compile(r"^([0-9]+([.][0-9]+)?(ns|us|µs|ms|s|m|h))+$")
_DURATION_PART = re.compile(r"([0-9]+)(?:[.]([0-9]+))?(ns|us|µs|ms|s|m|h)")
_UNIT_NS = {"ns": 1, "us": 1_000, "µs": 1_000, "ms": 1_000_000, "s": 1_000_000_000, "m": 60_000_000_000, "h": 3_600_000_000_000}
_MAX_DURATION_NS = (1 << 63) - 1
_LIMIT = 1 << 63


def duration_nanos(text: str) -> int | None:
    """Nanoseconds in a Go duration such as ``30s`` or ``1h30m``, or None where Go refuses it."""
    if not isinstance(text, str) or not _DURATION.match(text):
        return None
    total = 0
    for m in _DURATION_PART.finditer(text):
        whole = int(m.group(1))
        unit = _UNIT_NS[m.group(3)]
        if whole >= _LIMIT or whole > _LIMIT // unit:
            return None
        part = whole * unit
        if m.group(2) is not None:
            value, scale = 0, 1
            for digit in m.group(2):
                if value > _MAX_DURATION_NS // 10:
                    break
                nxt = value * 10 + int(digit)
                if nxt > _LIMIT:
                    break
                value, scale = nxt, scale * 10
            if value > 0:
                # Go multiplies in float64 and truncates; so must this (0.3h).
                part += math.trunc(float(value) * (float(unit) / float(scale)))
            if part > _LIMIT:
                return None
        total += part
        if total > _LIMIT:
            return None
    return None if total > _MAX_DURATION_NS else total


def parse_duration_ms(text: str) -> float:
    """Milliseconds in a duration string; ValueError on anything the CRD rejects."""
    nanos = duration_nanos(text)
    if nanos is None:
        raise ValueError(f"invalid duration {text!r}: use a form such as 30s, 5m or 1h30m")
    return float(nanos) / 1e6


# ---------------------------------------------------------------------------------------------
# heartbeats

#: Heartbeat-only writes are spaced a quarter of the timeout apart (up to the ceiling below).
HEARTBEATS_PER_TIMEOUT = 4
#: Floor of the heartbeat interval, so that a tiny timeout cannot turn into a write storm.
MIN_HEARTBEAT_INTERVAL_MS = 100


def _quarter_ms(timeout_ms: float) -> float:
    quarter = timeout_ms / HEARTBEATS_PER_TIMEOUT
    return math.floor(quarter) if math.isfinite(quarter) else quarter


#: Ceiling of the heartbeat interval: the built-in timeout's quarter (75 s), so no run heartbeats
#: less often than one with the default timeout. A longer timeout makes the watchdog more patient,
#: not the sandbox quieter: the heartbeat's age stays a live sign for people (kubectl's Heartbeat
#: column), and a huge timeout ("100000h") never becomes a wait that a thread cannot hold.
MAX_HEARTBEAT_INTERVAL_MS = _quarter_ms(float((duration_nanos(DEFAULT_HEARTBEAT_TIMEOUT) or 0) // 1_000_000))


def heartbeat_interval_ms(timeout_ms: float) -> float:
    quarter = _quarter_ms(timeout_ms)
    if not quarter < MAX_HEARTBEAT_INTERVAL_MS:  # NaN and infinity too
        return MAX_HEARTBEAT_INTERVAL_MS
    return max(MIN_HEARTBEAT_INTERVAL_MS, quarter)


def _dig(obj: Any, *keys: str) -> Any:
    for key in keys:
        if not isinstance(obj, Mapping):
            return None
        obj = obj.get(key)
    return obj


def effective_heartbeat_timeout_ms(run: Any) -> float:
    """The timeout the watchdog applies: status.watchdog (the operator's effective value, with
    the install's defaults), else the run's spec, else the built-in default."""
    for text in (_dig(run, "status", "watchdog", "heartbeatTimeout"), _dig(run, "spec", "watchdog", "heartbeatTimeout")):
        if not text or not isinstance(text, str):
            continue
        try:
            return parse_duration_ms(text)
        except ValueError:
            pass  # not ours to judge: the next source
    return parse_duration_ms(DEFAULT_HEARTBEAT_TIMEOUT)


@dataclass(frozen=True)
class HeartbeatDecision:
    #: Write a heartbeat-only patch now.
    write: bool
    #: The agent made no progress for longer than the progress timeout.
    wedged: bool
    #: When to look again (ms, on the clock the inputs were given in).
    next_check_at: float


def heartbeat_decision(
    *,
    now: float,
    last_write_at: float,
    interval_ms: float,
    last_progress_at: float,
    progress_timeout_ms: float,
    waiting_for_input: bool,
) -> HeartbeatDecision:
    """Whether to write a heartbeat now. A heartbeat claims that the agent makes progress, so it
    is written only while progress is fresh: an agent wedged in a call that never returns stops
    heartbeating, and the watchdog replaces it one timeout later. Waiting on the SDK for input (an
    approval, a nudge) is not being wedged."""
    wedged = not waiting_for_input and now - last_progress_at > progress_timeout_ms
    due_at = last_write_at + interval_ms
    if now < due_at:
        return HeartbeatDecision(False, wedged, due_at)
    # A wedged agent is looked at again every interval: if it recovers, heartbeats resume.
    return HeartbeatDecision(not wedged, wedged, now + interval_ms)


# ---------------------------------------------------------------------------------------------
# tool calls

#: The CRD allows 64 records; keeping half leaves room and keeps every status write small.
DEFAULT_MAX_TOOL_CALLS = 32
#: The CRD's limit on a saved result.
MAX_RESULT_CHARS = 8192


@dataclass(frozen=True)
class ReplayDecision:
    """run: no earlier record, or the last try failed; saved: it succeeded before, return the
    saved result; rerun: Started, outcome unknown, idempotent, run again with the same key;
    unconfirmed: Started, not idempotent, and a person has since resumed the run (report the
    unknown outcome without running); refuse: Started, not idempotent, the run needs a person."""

    kind: Literal["run", "saved", "rerun", "unconfirmed", "refuse"]
    previous: Optional[ToolCall] = None


def _find(calls: Sequence[ToolCall], key: str) -> int:
    for i in range(len(calls) - 1, -1, -1):
        if calls[i].get("idempotencyKey") == key:
            return i
    return -1


def find_call(calls: Sequence[ToolCall], key: str) -> ToolCall | None:
    """The newest record of a call, found by its idempotency key."""
    at = _find(calls, key)
    return calls[at] if at >= 0 else None


def resumed_after(calls: Sequence[ToolCall], at: int, reset_after_id: str | None) -> bool:
    """Whether a person resumed the run after the record at ``at`` (status.toolCallsResetAfter)."""
    if reset_after_id is None:
        return False
    marker = next((i for i, c in enumerate(calls) if c.get("id") == reset_after_id), -1)
    return marker >= 0 and 0 <= at <= marker


def replay_decision(calls: Sequence[ToolCall], key: str, idempotent: bool, reset_after_id: str | None) -> ReplayDecision:
    """What to do with a call the agent is about to make, given the records in status (rule 10)."""
    at = _find(calls, key)
    if at < 0:
        return ReplayDecision("run")
    previous = calls[at]
    state = previous.get("state")
    if state == "Succeeded":
        return ReplayDecision("saved", previous)
    if state == "Failed":
        return ReplayDecision("run", previous)
    # Started and never finished: the process died while the tool ran. What the tool promised
    # when it was started counts, not what today's code says.
    promised = previous.get("idempotent")
    if (promised if promised is not None else idempotent):
        return ReplayDecision("rerun", previous)
    if resumed_after(calls, at, reset_after_id):
        return ReplayDecision("unconfirmed", previous)
    return ReplayDecision("refuse", previous)


def upsert_call(calls: Sequence[ToolCall], call: ToolCall, max_calls: int) -> list[ToolCall]:
    """Appends or replaces a record (by id) and keeps the newest ``max_calls``, newest last."""
    at = next((i for i, c in enumerate(calls) if c.get("id") == call.get("id")), -1)
    nxt = list(calls)
    if at >= 0:
        nxt[at] = call
    else:
        nxt.append(call)
    return nxt[-max_calls:] if max_calls > 0 else []


def _utf16_prefix(text: str, units: int) -> str:
    if len(text) == _json.utf16_len(text):
        return text[:units]
    return text.encode("utf-16-be", "surrogatepass")[: 2 * units].decode("utf-16-be", "surrogatepass")


def encode_result(value: Any, max_chars: int = MAX_RESULT_CHARS) -> str | None:
    """A tool's result as the small JSON text saved in its record. One too large is saved as
    ``{"truncated":true,"length":n,"preview":"..."}``, still JSON, so a replay returns something the
    agent can recognise (lengths in UTF-16 units, as the TypeScript SDK counts them)."""
    if value is None:
        return None  # like undefined: nothing to save; a replay returns None again
    try:
        text = _json.dumps(value)
    except (TypeError, ValueError) as err:
        text = _json.dumps({"unserializable": True, "error": str(err)})
    length = _json.utf16_len(text)
    if length <= max_chars:
        return text

    def envelope(keep: int) -> str:
        return _json.dumps({"truncated": True, "length": length, "preview": _utf16_prefix(text, keep)})

    fits, too_long = 0, max_chars
    while too_long - fits > 1:
        mid = (fits + too_long) // 2
        if _json.utf16_len(envelope(mid)) <= max_chars:
            fits = mid
        else:
            too_long = mid
    return envelope(fits)


def decode_result(text: str | None) -> Any:
    if text is None:
        return None
    import json

    try:
        return json.loads(text)
    except ValueError:
        return text  # written by someone else as plain text: hand it over as is


def newest_call_rate_limited(calls: Sequence[ToolCall], attempt: int) -> bool:
    """Whether the agent's newest tool call of this attempt failed with HTTP 429. An agent that
    gives up its attempt right after one gave up because of the rate limit (rule 4): its exit
    says so."""
    for call in reversed(calls):
        if call.get("attempt") == attempt:
            error = call.get("error")
            return call.get("state") == "Failed" and isinstance(error, Mapping) and error.get("httpStatus") == 429
    return False


# ---------------------------------------------------------------------------------------------
# checkpoints


def checkpoint_refusal(part: Mapping[str, Any]) -> CheckpointTooLargeError | None:
    """Why a checkpoint cannot be written, or None when it fits: ``part`` is the sandbox's part of
    status as the write would leave it (``heartbeat``, ``toolCalls`` if any, ``checkpoint``). The
    checkpoint as JSON (with whatever the SDK wraps around it) may be MAX_CHECKPOINT_BYTES, the
    whole part MAX_SANDBOX_STATUS_BYTES. Raises what the JSON encoding raises (a set, an object):
    such data cannot be written either."""
    checkpoint = part["checkpoint"]
    step = checkpoint.get("step", 0)
    size = json_bytes(checkpoint)
    if size > MAX_CHECKPOINT_BYTES:
        return CheckpointTooLargeError(step, "checkpoint", size, MAX_CHECKPOINT_BYTES)
    total = json_bytes(part)
    if total > MAX_SANDBOX_STATUS_BYTES:
        return CheckpointTooLargeError(step, "sandbox status", total, MAX_SANDBOX_STATUS_BYTES)
    return None


# ---------------------------------------------------------------------------------------------
# nudges


@dataclass(frozen=True)
class Nudge:
    """A stall nudge of the operator, delivered into the agent's session."""

    time: str
    message: str
    #: How many nudges the operator has sent since the stall watchdog was last disarmed.
    count: int


def new_nudge(stall: Any, last_seen: str | None) -> Nudge | None:
    """The nudge in ``stall`` if it is newer than the last one handled; the sandbox seeds
    ``last_seen`` with the nudge standing at start, so each nudge of this attempt arrives once."""
    nudge = _dig(stall, "lastNudge")
    if not isinstance(nudge, Mapping) or not isinstance(nudge.get("time"), str):
        return None
    time = nudge["time"]
    if last_seen is not None:
        at, seen = parse_time_ms(time), parse_time_ms(last_seen)
        if time == last_seen or (at is not None and seen is not None and at <= seen):
            return None
    count = stall.get("nudges") if isinstance(stall, Mapping) else None
    message = nudge.get("message")
    return Nudge(time=time, message=message if isinstance(message, str) else "", count=count if isinstance(count, int) else 0)


# ---------------------------------------------------------------------------------------------
# fencing

#: Phases in which the operator has stopped the current attempt without starting another.
STOPPED_PHASES = frozenset({"NeedsHumanIntervention", "Suspended", "Completed", "Failed"})


def fence_reason(status: Any, own_attempt: int) -> str | None:
    """Why this sandbox must stop, if it must: a newer attempt took over, or the operator stopped
    the run. An attempt behind ours is the operator catching up (it creates the pod before it
    writes the status naming it), not a reason to stop."""
    if not isinstance(status, Mapping):
        return None
    current = status.get("attempt")
    if isinstance(current, bool) or not isinstance(current, (int, float)):
        current = None
    if current is not None and current > own_attempt:
        return f"attempt {own_attempt} was superseded by attempt {_json.js_number(current)}"
    phase = status.get("phase")
    if current == own_attempt and phase in STOPPED_PHASES:
        return f"the run is {phase}"
    return None


# ---------------------------------------------------------------------------------------------
# approvals

#: While the agent awaits a reply, its checkpoint carries the request under this key.
APPROVAL_REQUEST_KEY = "watchdog.dev/approval-request"
#: Random bytes in a request's key (hex: 32 characters; the protocol allows 64).
APPROVAL_KEY_BYTES = 16
MAX_APPROVAL_KEY_CHARS = 64


class ApprovalRequest(TypedDict, total=False):
    question: str
    askedAt: str
    #: New and random for every question. The operator copies it into status.approval.requestKey
    #: when it opens the request: that is how the sandbox knows the request, and its answer, as
    #: its own. Requests of older SDKs have none, and are never matched.
    key: str


@dataclass(frozen=True)
class ApprovalOutcome:
    #: Withdrawn: the run left the wait before an answer came; the request is never answered.
    state: Literal["Pending", "Approved", "Rejected", "TimedOut", "Withdrawn"]
    answer: Optional[str] = None
    reason: Optional[str] = None


def wrap_approval_checkpoint(step: int, data: Any, request: ApprovalRequest) -> Checkpoint:
    inner: dict[str, Any] = {APPROVAL_REQUEST_KEY: dict(request)}
    if data is not None:
        inner["data"] = data
    return {"step": step, "data": inner}


def _is_key(value: Any) -> bool:
    return isinstance(value, str) and 0 < len(value) <= MAX_APPROVAL_KEY_CHARS


def unwrap_checkpoint(checkpoint: Any) -> tuple[Checkpoint | None, ApprovalRequest | None]:
    """Splits a checkpoint into the agent's own checkpoint and a pending approval request. Status is
    anyone's to write: the request is read field by field, and a key that is not one is left out."""
    if not isinstance(checkpoint, Mapping):
        return None, None
    data = checkpoint.get("data")
    found = data.get(APPROVAL_REQUEST_KEY) if isinstance(data, Mapping) else None
    if not isinstance(found, Mapping) or not isinstance(found.get("question"), str):
        return dict(checkpoint), None  # type: ignore[return-value]
    asked_at = found.get("askedAt")
    request: ApprovalRequest = {"question": found["question"], "askedAt": asked_at if isinstance(asked_at, str) else ""}
    if _is_key(found.get("key")):
        request["key"] = found["key"]
    inner: Checkpoint = {"step": checkpoint.get("step", 0)}
    if isinstance(data, Mapping) and data.get("data") is not None:
        inner["data"] = data["data"]
    return inner, request


def _is_own(approval: Any, key: Optional[str]) -> bool:
    """Whether status.approval is the request the sandbox asked with this key."""
    return isinstance(approval, Mapping) and key is not None and approval.get("requestKey") == key


def opened_request_id(approval: Any, key: Optional[str]) -> Optional[str]:
    """The id of the request the operator opened for this key, when status.approval shows it open:
    the sandbox holds on to it, so that no other request's decision is taken for this one's."""
    if _is_own(approval, key) and approval.get("state") == "Pending" and isinstance(approval.get("id"), str):
        return approval["id"]
    return None


def approval_outcome(approval: Any, key: Optional[str], request_id: Optional[str] = None) -> ApprovalOutcome:
    """Where the request stands, by status.approval: its decision if the approval carries its key
    (and the id it was opened with, ``request_id``, once known), else Pending, for a request not yet
    opened or one whose decision has not come. A state this SDK does not know is no decision."""
    if not _is_own(approval, key):
        return ApprovalOutcome("Pending")
    if request_id is not None and approval.get("id") != request_id:
        return ApprovalOutcome("Pending")
    state = approval.get("state")
    if state == "Approved":
        answer = approval.get("answer")
        return ApprovalOutcome("Approved", answer=answer if isinstance(answer, str) else "")
    if state == "Rejected":
        reason = approval.get("reason")
        return ApprovalOutcome("Rejected", reason=reason if isinstance(reason, str) else None)
    if state in ("TimedOut", "Withdrawn"):
        return ApprovalOutcome(state)
    return ApprovalOutcome("Pending")


JsonObject = dict[str, Any]
RunObject = Union[JsonObject, Mapping[str, Any]]
