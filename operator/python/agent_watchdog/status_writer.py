"""One status write at a time, always the newest state, always with the heartbeat (status-writer.ts).

Everything the sandbox reports is a JSON merge patch on its own run's status subresource naming
only sandbox-owned fields (heartbeat, toolCalls, checkpoint). Writes go out one at a time from one
thread, each carrying the newest state, so a slow write can never land after a newer one and undo
it (merge patch replaces arrays whole: toolCalls is always the full list the sandbox holds). Every
write carries the heartbeat with this sandbox's attempt, so every write is a sign of life and
admission can fence stale attempts by looking at one field. The heartbeat also carries the
attempt's usage as it stands when the write is made (usage.py): a change of usage alone is no
reason to write, it rides the next write; and the first writes clear what an earlier attempt
reported (null for the fields this one does not report yet), since a merge patch would keep it.

Callers get a ``Future`` that resolves once a write including their change is acknowledged by the
API server. A write that fails for a reason that passes (the network, a 5xx, a 429 with its
Retry-After) is retried with backoff, without limit, because giving up would lose a tool record or
a checkpoint. One the server refuses for what it carries (422 Invalid, 400, 413, etcd's "request is
too large") is never tried again: whoever waited on it (the call that saved a checkpoint or
recorded a tool call) learns why, the refused content is dropped, and the heartbeats after it go
out as usual.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, Optional

from . import _json
from .api_client import RETRY, SandboxApi, api_error_code, is_not_found, is_transient, retry_after_s
from .errors import FencedError
from .log import SandboxLogger
from .protocol import NOT_CURRENT_SANDBOX, SANDBOX_FIELD_MANAGER, Checkpoint, SandboxState, ToolCall, iso_now
from .timers import wait_s

#: How long after start a refusal for not being the run's current pod is taken as "not yet": the
#: operator names the pod just after creating it, but when that write is lost a new leader names
#: it on adoption, after the Lease's duration and its own retries (a minute is not unusual under
#: a storm of conflicts). A sandbox that really was replaced learns it sooner from its watch of
#: the run, and its writes are refused meanwhile anyway.
FENCING_GRACE_S = 180.0
#: The longest Retry-After honoured: the writer looks again at least this often, since every
#: retry also carries the heartbeat.
MAX_RETRY_AFTER_S = 60.0
#: What the API server's refusal by an admission policy says, unlike RBAC's.
ADMISSION_REFUSAL = "ValidatingAdmissionPolicy"
#: The usage fields an attempt may not report from its first write on.
CLEARED_USAGE_FIELDS = ("cost", "model")

_UNSET: Any = object()


class StatusWriter:
    def __init__(
        self,
        *,
        client: SandboxApi,
        path: str,
        attempt: int,
        log: SandboxLogger,
        on_gone: Callable[[], None],
        tool_calls: Optional[list[ToolCall]] = None,
        usage: Optional[Callable[[], dict[str, Any]]] = None,
        started_at: float | None = None,
        wall: Callable[[], float] = time.time,
        mono: Callable[[], float] = time.monotonic,
    ) -> None:
        self._client = client
        self._path = path
        self._attempt = attempt
        self._log = log
        self._on_gone = on_gone
        #: The attempt's usage now, written with every heartbeat (status.heartbeat.usage).
        self._usage = usage
        #: The usage the last acknowledged write carried, once one has landed.
        self._acked_usage: Optional[dict[str, Any]] = None
        self._wall = wall
        self._mono = mono
        self._started_at = mono() if started_at is None else started_at
        #: Acknowledged writes, of those the heartbeat-only ones, and failed tries.
        self.counts = {"writes": 0, "heartbeat_writes": 0, "failed_writes": 0}

        self._cond = threading.Condition()
        # what the next write reports, and what of it changed since the last one
        #: At start, the records status holds: what the sandbox's part of status already carries.
        self._tool_calls: list[ToolCall] = list(tool_calls or [])
        self._checkpoint: Optional[Checkpoint] = None
        self._dirty_tool_calls = False
        self._dirty_checkpoint = False
        #: Activity to send; None (the first write) clears what an earlier attempt left behind.
        self._activity: Any = None
        self._state: SandboxState = "Planning"
        self._sent_state: Optional[str] = None
        self._heartbeat_requested = False
        # the queue: a version per change, resolved once a write that includes it is acknowledged
        self._version = 0
        self._waiters: list[tuple[int, Future[None]]] = []
        self._in_flight = False
        #: Writes only once asked to (write()); then goes on while changes are pending, as each
        #: write that lands may find newer changes made while it was in flight.
        self._active = False
        self._retry_at: Optional[float] = None
        self._retry_s = RETRY["first"]
        self._fenced_by: Optional[str] = None
        self._stopped = False
        #: Monotonic time of the last acknowledged write of any kind (every write is a heartbeat).
        self.last_write_at = 0.0
        self._thread = threading.Thread(target=self._run, name="agent-watchdog-status-writer", daemon=True)
        self._thread.start()

    # -- what the next write carries ---------------------------------------------------------------

    def set_tool_calls(self, calls: list[ToolCall]) -> None:
        """The full list of tool records, which replaces the list in status."""
        with self._cond:
            self._tool_calls = list(calls)
            self._dirty_tool_calls = True

    def set_checkpoint(self, checkpoint: Checkpoint) -> None:
        with self._cond:
            self._checkpoint = checkpoint
            self._dirty_checkpoint = True

    def status_with(self, checkpoint: Checkpoint) -> dict[str, Any]:
        """The sandbox's part of status as a write of everything held now, with ``checkpoint``,
        leaves it."""
        with self._cond:
            part: dict[str, Any] = {"heartbeat": self._heartbeat(self._state, self._activity), "checkpoint": checkpoint}
            if self._tool_calls:
                part["toolCalls"] = self._tool_calls
            return part

    def set_activity(self, activity: dict[str, str]) -> None:
        with self._cond:
            self._activity = activity

    def set_state(self, state: SandboxState) -> None:
        """A new state goes out with the next write; it is not a reason to write on its own."""
        with self._cond:
            self._state = state

    # -- writing -----------------------------------------------------------------------------------

    def write(self) -> "Future[None]":
        """A future that resolves once everything changed so far is acknowledged."""
        future: Future[None] = Future()
        with self._cond:
            if self._fenced_by is not None:
                future.set_exception(FencedError(self._fenced_by))
                return future
            if self._stopped:
                future.set_exception(RuntimeError("the sandbox is closed"))
                return future
            self._version += 1
            self._waiters.append((self._version, future))
            self._active = True
            self._cond.notify_all()
        return future

    def write_now(self) -> "Future[None]":
        """A write now, even when nothing but the usage changed (a report that reaches a limit of
        the run's budget); when a write is under way, the one after it."""
        with self._cond:
            self._heartbeat_requested = True
        return self.write()

    @property
    def usage_unsent(self) -> bool:
        """Whether the attempt's usage has changed since the last acknowledged write."""
        return self._usage is not None and self._usage() != self._acked_usage

    def beat(self) -> None:
        """A heartbeat-only write, unless a write is under way: that one carries the heartbeat."""
        with self._cond:
            if self._in_flight or self._has_pending():
                return
            self._heartbeat_requested = True
        self.write()  # a failed heartbeat is retried; the next beat tries again anyway

    def drain(self, deadline_s: float) -> None:
        """Sends what is pending at once (no retry backoff) and waits for it, at most ``deadline_s``."""
        with self._cond:
            self._retry_at = None
            # The last report of an attempt is what the operator adds into status.spent.
            if self.usage_unsent and self._fenced_by is None:
                self._heartbeat_requested = True
            self._cond.notify_all()
            if not self._has_pending() and not self._in_flight:
                return
        future = self.write()
        try:
            future.result(timeout=deadline_s)
        except Exception:  # noqa: BLE001 - the deadline, or a refusal already logged
            pass

    def fence(self, reason: str, err: BaseException) -> None:
        """Nothing more is written: this sandbox no longer speaks for the run."""
        with self._cond:
            self._fenced_by = reason
            self._retry_at = None
            self._reject(err)
            self._cond.notify_all()

    def stop(self, err: BaseException | None = None) -> None:
        """Ends the writer thread; whoever still waits learns why (used by close and abandon)."""
        with self._cond:
            self._stopped = True
            self._retry_at = None
            self._reject(err or RuntimeError("the sandbox is closed"))
            self._cond.notify_all()

    # -- the writer thread -------------------------------------------------------------------------

    def _has_pending(self) -> bool:
        return (
            self._dirty_tool_calls
            or self._dirty_checkpoint
            or self._activity is not _UNSET
            or self._state != self._sent_state
            or self._heartbeat_requested
        )

    def _run(self) -> None:
        while True:
            with self._cond:
                while True:
                    if self._stopped or self._fenced_by is not None:
                        return
                    if self._retry_at is not None:
                        remaining = self._retry_at - self._mono()
                        if remaining > 0:
                            self._cond.wait(wait_s(remaining))
                            continue
                        self._retry_at = None
                    if not self._active:
                        self._cond.wait()
                        continue
                    if not self._waiters and not self._has_pending():
                        self._active = False  # idle until the next write()
                        continue
                    up_to = self._version
                    if not self._has_pending():
                        self._settle(up_to)  # everything asked for went out with an earlier write
                        continue
                    break
                sent_tool_calls = self._dirty_tool_calls
                sent_checkpoint = self._dirty_checkpoint
                sent_activity = self._activity
                sent_state = self._state
                heartbeat_only = not sent_tool_calls and not sent_checkpoint and sent_activity is _UNSET and sent_state == self._sent_state
                heartbeat = self._heartbeat(sent_state, sent_activity)
                status: dict[str, Any] = {"heartbeat": heartbeat}
                if sent_tool_calls:
                    status["toolCalls"] = self._tool_calls
                if sent_checkpoint:
                    status["checkpoint"] = self._checkpoint
                self._dirty_tool_calls = False
                self._dirty_checkpoint = False
                self._activity = _UNSET
                self._heartbeat_requested = False
                self._in_flight = True
                try:
                    # Copied here, under the lock, as the JSON it becomes: later changes cannot
                    # alter what goes out, and NaN is null as in JSON.stringify.
                    patch: Any = json.loads(_json.dumps({"status": status}))
                except (TypeError, ValueError) as err:
                    patch = err
            error: BaseException | None = None
            unsendable = isinstance(patch, BaseException)
            if unsendable:
                error = patch
            else:
                try:
                    # Under its own field manager: the API server's record of this write
                    # (managedFields) is the heartbeat's time on the server's clock, which is what
                    # the watchdog measures by.
                    self._client.merge_patch(self._path, patch, {"fieldManager": SANDBOX_FIELD_MANAGER})
                except Exception as err:  # noqa: BLE001
                    error = err
            gone = False
            with self._cond:
                self._in_flight = False
                if error is None:
                    self.counts["writes"] += 1
                    if heartbeat_only:
                        self.counts["heartbeat_writes"] += 1
                    self.last_write_at = self._mono()
                    if isinstance(heartbeat.get("usage"), dict):
                        self._acked_usage = {k: v for k, v in heartbeat["usage"].items() if v is not None}
                    self._sent_state = sent_state
                    self._retry_s = RETRY["first"]
                    self._settle(up_to)
                    continue
                self.counts["failed_writes"] += 1
                if is_not_found(error):
                    gone = True
                elif unsendable or not self._retryable(error):
                    # The server refused this content; sending it again would fail the same way.
                    # Whoever waited for it learns why; what it carried is dropped (it was taken
                    # out above), and changes made since go out with the next write, as do the
                    # heartbeats.
                    self._log.error("status write refused; not retried", err=str(error), carried={"toolCalls": sent_tool_calls, "checkpoint": sent_checkpoint})
                    self._sent_state = sent_state
                    self._reject(error, up_to)
                    continue
                else:
                    # Put back what did not go out, unless something newer replaced it meanwhile.
                    self._dirty_tool_calls = self._dirty_tool_calls or sent_tool_calls
                    self._dirty_checkpoint = self._dirty_checkpoint or sent_checkpoint
                    if self._activity is _UNSET:
                        self._activity = sent_activity
                    # A server that says when to come back is not asked sooner.
                    delay = max(self._retry_s, min(MAX_RETRY_AFTER_S, retry_after_s(error) or 0.0))
                    self._log.warn("status write failed; retrying", err=str(error), retryInMs=int(delay * 1000))
                    self._retry_at = self._mono() + delay
                    self._retry_s = min(RETRY["max"], self._retry_s * 2)
                    continue
            if gone:
                self._on_gone()  # fences this writer, among others; outside the lock

    def _heartbeat(self, state: str, activity: Any) -> dict[str, Any]:
        heartbeat: dict[str, Any] = {"time": iso_now(self._wall()), "attempt": self._attempt, "state": state}
        if activity is not _UNSET:
            heartbeat["activity"] = activity
        if self._usage is not None:
            usage = dict(self._usage())
            # Until a write has landed, what this attempt does not report is cleared: an earlier
            # attempt's cost or model would otherwise stay in place and be counted as this one's.
            if self._acked_usage is None:
                for field in CLEARED_USAGE_FIELDS:
                    usage.setdefault(field, None)
            heartbeat["usage"] = usage
        return heartbeat

    def _retryable(self, err: BaseException) -> bool:
        """Besides transient errors: admission refuses a sandbox whose pod the run does not name
        yet, and the operator writes that name just after it creates the pod, so right after start
        that refusal is a matter of moments, not a verdict."""
        if is_transient(err):
            return True
        if api_error_code(err) != 403:
            return False
        # RBAC's refusal is not about what the write carries: an API server that has just
        # restarted refuses everyone until its authorizer has loaded the roles, and a RoleBinding
        # made a moment ago may not be seen yet. Tried again with backoff; were it for good, the
        # heartbeats that never land get the sandbox replaced by the watchdog.
        if ADMISSION_REFUSAL not in str(err):
            return True
        not_yet_named = NOT_CURRENT_SANDBOX in str(err)
        return not_yet_named and self._mono() - self._started_at < FENCING_GRACE_S

    def _settle(self, up_to: int) -> None:
        done = [f for v, f in self._waiters if v <= up_to]
        self._waiters = [(v, f) for v, f in self._waiters if v > up_to]
        for future in done:
            if not future.done():
                future.set_result(None)

    def _reject(self, err: BaseException, up_to: float = float("inf")) -> None:
        failed = [f for v, f in self._waiters if v <= up_to]
        self._waiters = [(v, f) for v, f in self._waiters if v > up_to]
        for future in failed:
            if not future.done():
                future.set_exception(err)
