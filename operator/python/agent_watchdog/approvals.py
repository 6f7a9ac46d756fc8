"""Asking a person and waiting for the answer (approvals.ts, rule 11).

The question is saved in the checkpoint, wrapped around the agent's own data, with a random key new
for every question, and the sandbox reports AwaitingReply, which is never hung. When the operator
sees the run enter AwaitingReply it opens a request in status.approval with a new id and the
question's key; the sandbox knows the request by that key, holds on to its id, and takes only a
decision of that id: no answer to another question, however close in time, is ever taken for this
one's. The checkpoint's request is the TypeScript SDK's, field for field, so either SDK can resume
a question the other asked. (The operator, for its part, accepts a person's answer only when it
names the pending ``status.approval.id``.)

If the operator releases the pod meanwhile, this sandbox is fenced; the next attempt, started when
the answer comes, finds the question in the checkpoint, and the call that asks the same question
gets the answer without asking again (or waits on, if it is still pending). A call that asks
something else gets a new request, and the old one is dropped. A request withdrawn (the run left
the wait without an answer) is never answered: the same question is asked anew.
"""

from __future__ import annotations

import secrets
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
    APPROVAL_KEY_BYTES,
    ApprovalOutcome,
    ApprovalRequest,
    approval_outcome,
    fence_reason,
    iso_now,
    opened_request_id,
    wrap_approval_checkpoint,
)
from .status_writer import StatusWriter
from .timers import wait_s
from .transcript import Transcript


@dataclass
class PendingApproval:
    """A question asked (or taken up from an earlier attempt), to wait on."""

    question: str
    #: As the checkpoint carries it: the question, when it was asked, and its key.
    request: dict[str, Any]
    #: Set when the answer was already in status (an earlier attempt's question, decided).
    decided: Optional[ApprovalOutcome] = None
    #: The id of the request the operator opened for the key, once seen: only its decision counts.
    request_id: Optional[str] = None

    @property
    def key(self) -> Optional[str]:
        key = self.request.get("key")
        return key if isinstance(key, str) else None


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
            return self._resume_request["question"], approval_outcome(self._approval, self._resume_request.get("key"))

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
        resumed = self._take_resumed(question)
        if resumed is not None:
            outcome = approval_outcome(self._approval, resumed.get("key"))
            if outcome.state == "Withdrawn":
                self._log.info("the request an earlier attempt asked was withdrawn unanswered; asking again", question=question)
                resumed = None
            elif outcome.state != "Pending":
                return PendingApproval(question, resumed, outcome)
            else:
                # Asked again under the same key, so the operator keeps (or opens) the same request.
                self._log.info("still awaiting the reply an earlier attempt asked for", question=question)
        handle = PendingApproval(question, resumed if resumed is not None else self._new_request(question))
        self._ask(handle, checkpoint)
        return handle

    def wait(self, handle: PendingApproval, timeout: Optional[float] = None) -> str:
        """The answer; ApprovalDeniedError on a rejection or timeout, FencedError when released or
        stopped, TimeoutError after ``timeout`` seconds (the question stays open). A request
        withdrawn meanwhile is asked again, under a new key, and waited on."""
        if handle.decided is not None:
            return self._settle(handle, handle.decided)
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            outcome = self._decision(handle, deadline)
            if outcome.state != "Withdrawn":
                break
            self._log.warn("the request was withdrawn before it was answered; asking again", question=handle.question, request=handle.request_id)
            self._writer.write().result()  # the end of the wait, for the operator to see first
            handle.request, handle.request_id = self._new_request(handle.question), None
            self._ask(handle, None)
        # Back to work: say so at once, and before the agent can ask again (see _new_request).
        if outcome.state == "Approved":
            self._writer.write().result()
        return self._settle(handle, outcome)

    # -- steps -------------------------------------------------------------------------------------

    def _take_resumed(self, question: str) -> Optional[dict[str, Any]]:
        """The request an earlier attempt asked, if this call asks the same question. One resumed
        request answers one call, and only its own question; one without a key (an older SDK asked
        it) can never be told apart from another request, so it is asked again."""
        with self._cond:
            resumed, self._resume_request = self._resume_request, None
        if resumed is None:
            return None
        if resumed["question"] != question:
            self._log.info("a different question than the one an earlier attempt asked: a new request", asked=question, earlier=resumed["question"])
            return None
        if not isinstance(resumed.get("key"), str):
            self._log.info("the request an earlier attempt asked has no key; asking again", question=question)
            return None
        return resumed

    def _new_request(self, question: str) -> dict[str, Any]:
        """A new question with a new key, once the operator has seen the previous wait end: it
        opens a new request when it sees the run enter AwaitingReply, and a question asked before
        it saw us leave the last one would be lost."""
        with self._heartbeat.waiting():
            with self._cond:
                while self._fenced is None and not self._left_awaiting(self._run):
                    self._cond.wait()
                if self._fenced is not None:
                    raise self._fenced
        return {"question": question, "askedAt": iso_now(self._wall()), "key": secrets.token_hex(APPROVAL_KEY_BYTES)}

    def _ask(self, handle: PendingApproval, checkpoint: Optional[dict[str, Any]]) -> None:
        """Holds the question (and its key) in the checkpoint, where the operator reads it, and
        reports AwaitingReply; returns once the API server has it."""
        restore = self._hold(handle.request, checkpoint)
        self._transcript.record("agent", "awaitingApproval", handle.question)
        self._log.info("awaiting approval", question=handle.question)
        with self._cond:
            self._waiting = handle
        self._state_changed()
        try:
            self._writer.write().result()
        except BaseException as err:
            with self._cond:
                # Answered (a rejection also stops the run, which fences this sandbox) before our
                # write was acknowledged: the answer counts, and wait() returns it.
                state = approval_outcome(self._approval, handle.key, handle.request_id).state
                decided = isinstance(err, FencedError) and state not in ("Pending", "Withdrawn")
                if not decided:
                    self._waiting = None
            if not decided:
                restore()  # the question never reached the API server, or this sandbox no longer speaks
                self._state_changed()
                raise

    def _hold(self, request: dict[str, Any], checkpoint: Optional[dict[str, Any]]) -> Callable[[], None]:
        current = self._checkpoints.current()
        if checkpoint is not None:
            step, data = checkpoint["step"], checkpoint.get("data")
        else:
            step = current["step"] if current else self._checkpoints.committed
            data = current.get("data") if current else None
        return self._checkpoints.hold(wrap_approval_checkpoint(step, data, request))  # type: ignore[arg-type]

    def _decision(self, handle: PendingApproval, deadline: Optional[float]) -> ApprovalOutcome:
        """Waits for a decision of the handle's request, and ends the wait; FencedError when there
        is none to give, TimeoutError at ``deadline`` (the wait goes on)."""
        fenced: Optional[BaseException] = None
        with self._heartbeat.waiting():
            with self._cond:
                while True:
                    # The operator opened the request for our key: from now on only a decision of
                    # its id counts.
                    handle.request_id = opened_request_id(self._approval, handle.key) or handle.request_id
                    # The answer first: a rejection also stops the run (and so fences this
                    # sandbox), and the agent should learn why.
                    outcome = approval_outcome(self._approval, handle.key, handle.request_id)
                    if outcome.state != "Pending":
                        break
                    if self._fenced is not None:
                        fenced = self._fenced
                        break
                    remaining = None if deadline is None else deadline - time.monotonic()
                    if remaining is not None and remaining <= 0:
                        raise TimeoutError(f"no answer to {handle.question!r} yet")
                    self._cond.wait(wait_s(remaining))
                if self._waiting is handle:
                    self._waiting = None
        self._state_changed()
        if fenced is not None:
            raise fenced
        return outcome

    def _left_awaiting(self, run: Any) -> bool:
        status = run.get("status") if isinstance(run, dict) else None
        phase = status.get("phase") if isinstance(status, dict) else None
        return phase != "AwaitingReply" or fence_reason(status, self._attempt) is not None

    def _settle(self, handle: PendingApproval, outcome: ApprovalOutcome) -> str:
        if outcome.state == "Approved":
            answer = outcome.answer or ""
            self._transcript.record("user", "approved", answer)
            self._log.info("approved", question=handle.question, answer=answer)
            return answer
        err = ApprovalDeniedError("Rejected" if outcome.state == "Rejected" else "TimedOut", outcome.reason if outcome.state == "Rejected" else None)
        self._transcript.record("user", "rejected" if outcome.state == "Rejected" else "approvalTimedOut", str(err))
        raise err


__all__ = ["Approvals", "PendingApproval"]
