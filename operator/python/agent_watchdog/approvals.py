"""Asking a person and waiting for the answer (approvals.ts, rule 11).

The question is saved in the checkpoint, wrapped around the agent's own data, and the sandbox
reports AwaitingReply, which is never hung. The answer arrives in status.approval through the
watch. If the operator releases the pod meanwhile, this sandbox is fenced; the next attempt,
started when the answer comes, finds the question in the checkpoint and gets the answer from the
same ``await_approval()`` call without asking again. An approval in status counts only if it was
decided after the question was asked: the answer to an earlier question is told apart by its
fingerprint (``supersedes``), exactly as the TypeScript SDK does, so either SDK can resume a
question the other asked. (The operator, for its part, accepts a person's answer only when it
names the pending ``status.approval.id``.)
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Optional

from .checkpoints import Checkpoints
from .errors import ApprovalDeniedError, FencedError
from .heartbeat import HeartbeatLoop
from .log import SandboxLogger
from .protocol import (
    ApprovalOutcome,
    ApprovalRequest,
    approval_fingerprint,
    approval_outcome,
    fence_reason,
    iso_now,
    wrap_approval_checkpoint,
)
from .status_writer import StatusWriter
from .transcript import Transcript


@dataclass(frozen=True)
class PendingApproval:
    """A question asked (or taken up from an earlier attempt), to wait on."""

    question: str
    request: dict[str, Any]
    #: Set when the answer was already in status (an earlier attempt's question, decided).
    decided: Optional[ApprovalOutcome] = None


class Approvals:
    def __init__(
        self,
        *,
        attempt: int,
        log: SandboxLogger,
        writer: StatusWriter,
        heartbeat: HeartbeatLoop,
        checkpoints: Checkpoints,
        transcript: Transcript,
        state_changed: Callable[[], None],
        run: Any,
        approval: Any,
        request: Optional[ApprovalRequest],
        wall: Callable[[], float] = time.time,
    ) -> None:
        self._attempt = attempt
        self._log = log
        self._writer = writer
        self._heartbeat = heartbeat
        self._checkpoints = checkpoints
        self._transcript = transcript
        self._state_changed = state_changed
        self._wall = wall
        self._cond = threading.Condition()
        self._run = run
        self._approval = approval
        #: The request an earlier attempt was waiting on when it ended, until one call takes it up.
        self._resume_request: Optional[dict[str, Any]] = dict(request) if request else None
        self._waiting: Optional[PendingApproval] = None
        self._fenced: Optional[BaseException] = None

    @property
    def awaiting(self) -> bool:
        """Whether the agent is waiting for an answer now: the sandbox reports AwaitingReply."""
        return self._waiting is not None

    @property
    def current(self) -> Optional[PendingApproval]:
        return self._waiting

    @property
    def pending(self) -> Optional[tuple[str, ApprovalOutcome]]:
        """The request an earlier attempt asked, and where it stands, or None."""
        with self._cond:
            if not self._resume_request:
                return None
            return self._resume_request["question"], approval_outcome(self._approval, self._resume_request)

    def observe(self, run: Any, status: dict[str, Any]) -> None:
        """Each event of the watch: status.approval is operator-owned, read as it comes."""
        with self._cond:
            self._run = run
            self._approval = status.get("approval")
            self._cond.notify_all()

    def fence(self, err: BaseException) -> None:
        with self._cond:
            self._fenced = err
            self._cond.notify_all()

    def request(self, question: str, checkpoint: Optional[dict[str, Any]] = None) -> PendingApproval:
        """Asks (or takes up the question an earlier attempt asked) and reports AwaitingReply."""
        self._heartbeat.progress()
        with self._cond:
            request = self._resume_request
            self._resume_request = None  # one resumed request answers one call
        if request:
            outcome = approval_outcome(self._approval, request)
            if outcome.state != "Pending":
                return PendingApproval(request["question"], request, outcome)
            self._log.info("still awaiting the reply an earlier attempt asked for", question=request["question"])
        else:
            # The operator opens a new request when it sees the run enter AwaitingReply; if it
            # has not yet seen us leave the previous one, wait until it has, or our question would
            # be lost.
            with self._heartbeat.waiting():
                with self._cond:
                    while self._fenced is None and not self._left_awaiting(self._run):
                        self._cond.wait()
                    if self._fenced is not None:
                        raise self._fenced
            current = self._checkpoints.current()
            if checkpoint is not None:
                step, data = checkpoint["step"], checkpoint.get("data")
            else:
                step = current["step"] if current else self._checkpoints.committed
                data = current.get("data") if current else None
            request = {"question": question, "askedAt": iso_now(self._wall())}
            supersedes = approval_fingerprint(self._approval)
            if supersedes:
                request["supersedes"] = supersedes
            self._checkpoints.hold(wrap_approval_checkpoint(step, data, request))  # type: ignore[arg-type]
        self._transcript.record("agent", "awaitingApproval", request["question"])
        self._log.info("awaiting approval", question=request["question"])
        handle = PendingApproval(request["question"], request)
        with self._cond:
            self._waiting = handle
        self._state_changed()
        try:
            self._writer.write().result()
        except BaseException as err:
            with self._cond:
                # Answered (a rejection also stops the run, which fences this sandbox) before our
                # write was acknowledged: the answer counts, and wait() returns it.
                decided = isinstance(err, FencedError) and approval_outcome(self._approval, request).state != "Pending"
                if not decided:
                    self._waiting = None
            if not decided:
                self._state_changed()
                raise
        return handle

    def wait(self, handle: PendingApproval, timeout: Optional[float] = None) -> str:
        """The answer; ApprovalDeniedError on a rejection or timeout, FencedError when released or
        stopped, TimeoutError after ``timeout`` seconds (the question stays open)."""
        if handle.decided is not None:
            return self._settle(handle.request, handle.decided)
        deadline = None if timeout is None else time.monotonic() + timeout
        outcome: Optional[ApprovalOutcome] = None
        fenced: Optional[BaseException] = None
        with self._heartbeat.waiting():
            with self._cond:
                while True:
                    # The answer first: a rejection also stops the run (and so fences this
                    # sandbox), and the agent should learn why.
                    outcome = approval_outcome(self._approval, handle.request)
                    if outcome.state != "Pending":
                        break
                    if self._fenced is not None:
                        fenced = self._fenced
                        break
                    remaining = None if deadline is None else deadline - time.monotonic()
                    if remaining is not None and remaining <= 0:
                        raise TimeoutError(f"no answer to {handle.question!r} yet")
                    self._cond.wait(remaining)
                if self._waiting is handle:
                    self._waiting = None
        self._state_changed()
        if fenced is not None:
            raise fenced
        assert outcome is not None
        # Back to work: say so at once, and before the agent can ask again (see request()).
        if outcome.state == "Approved":
            self._writer.write().result()
        return self._settle(handle.request, outcome)

    def _left_awaiting(self, run: Any) -> bool:
        status = run.get("status") if isinstance(run, dict) else None
        phase = status.get("phase") if isinstance(status, dict) else None
        return phase != "AwaitingReply" or fence_reason(status, self._attempt) is not None

    def _settle(self, request: dict[str, Any], outcome: ApprovalOutcome) -> str:
        if outcome.state == "Approved":
            answer = outcome.answer or ""
            self._transcript.record("user", "approved", answer)
            self._log.info("approved", question=request.get("question"), answer=answer)
            return answer
        err = ApprovalDeniedError("Rejected" if outcome.state == "Rejected" else "TimedOut", outcome.reason if outcome.state == "Rejected" else None)
        self._transcript.record("user", "rejected" if outcome.state == "Rejected" else "approvalTimedOut", str(err))
        raise err


__all__ = ["Approvals", "PendingApproval"]
