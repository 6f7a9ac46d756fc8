"""Tool calls under the protocol (tool-runner.ts, rule 10).

The intent is committed before anything can happen: a call is recorded Started, and the API
server has acknowledged the record, before the tool runs; then Succeeded with a small result, or
Failed with the error the watchdog reads (message, HTTP status, Retry-After). A crash in between
leaves a Started record that the watchdog and the next attempt act on.

A call an earlier attempt already made (same run, step, position, name and arguments, hence the
same idempotency key) is not repeated blindly: a saved result is returned without running the
tool, an unfinished idempotent call runs again with the same key, and an unfinished
non-idempotent call, whose effect may or may not have happened, is refused with
UnconfirmedSideEffectError so that a person can look.

Each call recorded in this attempt counts once towards its usage (status.heartbeat.usage
toolCalls), from when its record is acknowledged; a saved result returned instead counts nothing.
A call that would run is refused with BudgetExhaustedError, before anything is recorded, once the
run's spending has reached a limit of its budget.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any, Generic, Optional, TypeVar

from .api_client import AbortSignal
from .checkpoints import Checkpoints
from .errors import ToolFailure, ToolValidationError, UnconfirmedSideEffectError, describe_failure, validation_failure
from .heartbeat import HeartbeatLoop
from .keys import args_hash, idempotency_key
from .log import SandboxLogger
from .protocol import ToolCall, decode_result, encode_result, iso_now, replay_decision, upsert_call
from .status_writer import StatusWriter
from .tracing import SandboxTracer
from .transcript import Transcript

A = TypeVar("A")
R = TypeVar("R")


@dataclass(frozen=True)
class ToolContext:
    """What a tool gets besides its arguments."""

    #: Stable across attempts: pass it to the service so it can recognise a repeated request.
    idempotency_key: str
    call_id: str
    attempt: int
    #: An earlier attempt started this call and its outcome is unknown (idempotent tools only).
    rerun: bool
    #: Aborted when this sandbox is fenced: check it, or ``signal.wait(seconds)`` instead of sleeping.
    signal: AbortSignal
    #: Long-running tools call this to show they are still making progress.
    progress: Callable[[], None] = field(repr=False)


@dataclass(frozen=True)
class ToolOutcome(Generic[R]):
    """``ok`` with ``value`` (``replayed`` when it is a saved result), or not ``ok`` with ``error``."""

    ok: bool
    idempotency_key: str
    call_id: Optional[str]
    value: Optional[R] = None
    replayed: bool = False
    error: Optional[ToolFailure] = None


class ToolRunner:
    def __init__(
        self,
        *,
        uid: str,
        attempt: int,
        max_tool_calls: int,
        log: SandboxLogger,
        writer: StatusWriter,
        heartbeat: HeartbeatLoop,
        checkpoints: Checkpoints,
        transcript: Transcript,
        signal: AbortSignal,
        assert_open: Callable[[], None],
        state_changed: Callable[[], None],
        user_code: Callable[[], AbstractContextManager[None]],
        calls: list[ToolCall],
        reset_after: Optional[str],
        assert_within_budget: Callable[[], None] = lambda: None,
        count_tool_call: Callable[[], None] = lambda: None,
        wall: Callable[[], float] = time.time,
        tracer: Optional[SandboxTracer] = None,
    ) -> None:
        self._tracer = tracer
        self._uid = uid
        self._attempt = attempt
        self._max = max_tool_calls
        self._log = log
        self._writer = writer
        self._heartbeat = heartbeat
        self._checkpoints = checkpoints
        self._transcript = transcript
        self._signal = signal
        self._assert_open = assert_open
        self._state_changed = state_changed
        self._user_code = user_code
        self._assert_within_budget = assert_within_budget
        self._count_tool_call = count_tool_call
        self._wall = wall
        self._lock = threading.RLock()
        self._calls: list[ToolCall] = list(calls)
        #: status.toolCallsResetAfter: the last record a person has seen when resuming the run.
        self._reset_after = reset_after
        self._seq = 0
        self._running = 0

    @property
    def records(self) -> list[ToolCall]:
        """The records this sandbox holds (and writes), newest last."""
        with self._lock:
            return [dict(c) for c in self._calls]  # type: ignore[misc]

    @property
    def running(self) -> int:
        return self._running

    def observe(self, reset_after: Optional[str]) -> None:
        """Operator-owned: a person's resume moves it, and a refused call may then be reported."""
        with self._lock:
            self._reset_after = reset_after if isinstance(reset_after, str) else None

    def trim(self) -> bool:
        """Keeps only the newest records if earlier attempts left more; True when it dropped some."""
        with self._lock:
            if len(self._calls) <= self._max:
                return False
            self._calls = self._calls[-self._max :]
            self._writer.set_tool_calls(self._calls)
            return True

    def run(
        self,
        name: str,
        args: A,
        fn: Callable[[A, ToolContext], R],
        *,
        idempotent: bool = False,
        validate: Optional[Callable[[A], Any]] = None,
    ) -> ToolOutcome[R]:
        self._assert_open()
        self._heartbeat.progress()
        hashed = args_hash(args)
        with self._lock:
            key = idempotency_key(self._uid, self._checkpoints.step, self._checkpoints.next_call_index(), name, hashed)
            decision = replay_decision(self._calls, key, idempotent, self._reset_after)
        previous = decision.previous or {}

        if decision.kind == "saved":
            self._transcript.record("tool", "replayed", f"{name}: saved result of call {previous.get('id')}")
            self._log.info("returning the saved result of an earlier attempt", tool=name, call=previous.get("id"))
            return ToolOutcome(True, key, previous.get("id"), value=decode_result(previous.get("result")), replayed=True)
        if decision.kind == "refuse":
            err = UnconfirmedSideEffectError(previous)
            self._log.error(str(err), tool=name, call=previous.get("id"))
            raise err
        if decision.kind == "unconfirmed":
            attempt = previous.get("attempt")
            failure = ToolFailure(
                kind="unconfirmed",
                message=f"{name} was started by attempt {attempt if attempt is not None else '?'} and its outcome is unknown; "
                "it was not run again. Check its effect before deciding what to do.",
            )
            self._transcript.record("tool", "unconfirmed", failure.message)
            return ToolOutcome(False, key, previous.get("id"), error=failure)

        # Only work that would run is refused: a saved result costs nothing.
        self._assert_within_budget()
        started_at = iso_now(self._wall())
        with self._lock:
            self._seq += 1
            call_id = f"a{self._attempt}-{self._seq}"
        call: ToolCall = {
            "id": call_id,
            "name": name,
            "argsHash": hashed,
            "idempotencyKey": key,
            "idempotent": idempotent,
            "attempt": self._attempt,
            "state": "Started",
            "startedAt": started_at,
        }

        value_in: Any = args
        if validate is not None:
            try:
                validated = validate(args)
            except Exception as err:  # noqa: BLE001
                # Recorded Failed without ever being Started: nothing ran, and the loop rule still
                # sees an agent that keeps sending the same wrong arguments.
                if isinstance(err, ToolValidationError):
                    failure = validation_failure(name, err)
                else:
                    failure = describe_failure(err, self._wall(), name)
                    failure.kind = "validation"
                self._finish({**call, "state": "Failed", "error": {"message": failure.message}, "finishedAt": started_at})  # type: ignore[typeddict-item]
                self._count_tool_call()
                self._transcript.record("tool", "invalidArguments", failure.message)
                return ToolOutcome(False, key, call_id, error=failure)
            if validated is not None:
                value_in = validated

        with self._lock:
            self._running += 1
            self._state_changed()
            self._calls = upsert_call(self._calls, call, self._max)
            self._writer.set_tool_calls(self._calls)
        try:
            self._writer.write().result()
        except BaseException:
            with self._lock:
                self._running -= 1
                # The tool never ran: a Started record left in the list would go out with the
                # next write and tell the watchdog and the next attempt of a call whose outcome
                # is unknown.
                self._calls = [c for c in self._calls if c.get("id") != call_id]
                self._writer.set_tool_calls(self._calls)
            self._state_changed()
            raise
        self._count_tool_call()
        if decision.kind == "rerun":
            self._log.warn("running an unfinished idempotent call again with its key", tool=name, previous=previous.get("id"))

        ctx = ToolContext(
            idempotency_key=key,
            call_id=call_id,
            attempt=self._attempt,
            rerun=decision.kind == "rerun",
            signal=self._signal,
            progress=self._heartbeat.progress,
        )
        span = self._tracer.start_tool(name, call_id, key, self._attempt, ctx.rerun) if self._tracer else None
        try:
            with self._user_code():
                value = fn(value_in, ctx)
        except Exception as err:  # noqa: BLE001 - any failure of the tool is the agent's to read
            with self._lock:
                self._running -= 1
            failure = describe_failure(err, self._wall(), name)
            if span is not None:
                span.end(failure)
            self._assert_open()
            error: dict[str, Any] = {"message": failure.message}
            if failure.http_status is not None:
                error["httpStatus"] = failure.http_status
            if failure.retry_after_seconds is not None:
                error["retryAfterSeconds"] = failure.retry_after_seconds
            self._finish({**call, "state": "Failed", "error": error, "finishedAt": iso_now(self._wall())})  # type: ignore[typeddict-item]
            self._transcript.record("tool", "failed", f"{name}: {failure.message}")
            return ToolOutcome(False, key, call_id, error=failure)
        except BaseException:
            # KeyboardInterrupt, SystemExit: the process is going down; the record stays Started,
            # which is the truth (the outcome is unknown).
            with self._lock:
                self._running -= 1
            raise
        with self._lock:
            self._running -= 1
        if span is not None:
            span.end()
        self._assert_open()
        done: ToolCall = {**call, "state": "Succeeded", "finishedAt": iso_now(self._wall())}  # type: ignore[typeddict-item]
        result = encode_result(value)
        if result is not None:
            done["result"] = result
        self._finish(done)
        self._transcript.record("tool", "succeeded", f"{name}: {result or ''}")
        return ToolOutcome(True, key, call_id, value=value, replayed=False)

    def _finish(self, call: ToolCall) -> None:
        """Records a call's end with a toolResult activity; returns once the API server has it."""
        self._heartbeat.progress()
        with self._lock:
            self._calls = upsert_call(self._calls, call, self._max)
            self._writer.set_tool_calls(self._calls)
            self._writer.set_activity({"kind": "toolResult", "time": call.get("finishedAt") or iso_now(self._wall())})
        self._state_changed()
        self._writer.write().result()


__all__ = ["ToolContext", "ToolOutcome", "ToolRunner"]
