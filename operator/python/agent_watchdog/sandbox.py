"""The sandbox: what agent code running in a sandbox pod uses to speak the AgentRun protocol.

The Python twin of operator/sandbox/sandbox.ts. The Sandbox is the agent's handle on its run;
each part of the protocol lives in its own module:

    status_writer.py  one merge-patch write at a time, always the newest state and the heartbeat
    heartbeat.py      when a heartbeat is due, and when the agent counts as wedged
    tool_runner.py    tool calls: Started before they run, idempotency keys, replays
    checkpoints.py    the committed checkpoint and the step in progress
    approvals.py      asking a person and waiting for the answer, across attempts
    nudges.py         stall nudges from the operator, each delivered once
    run_watch.py      the watch of the run that brings answers, nudges and fencing
    usage.py          the attempt's usage in every heartbeat, and the run's budget as the SDK sees it
    timers.py         waits threading can hold, whatever a run, a server or a caller asks for

Threads, not asyncio: agent code in Python is mostly synchronous (model SDKs, subprocesses,
HTTP clients that block), and an SDK that required an event loop would force every agent to be
written around one. Three daemon threads do the SDK's background work (status writer, heartbeat,
watch); every method an agent calls blocks until what it reported is acknowledged by the API
server, as awaiting the TypeScript SDK's promises does. The methods are safe to call from several
threads at once.

Fencing. The SDK watches its own run. When status.attempt moves past this sandbox's attempt (the
watchdog has replaced it) or the operator stops the run, the SDK aborts the agent (``signal``,
``on_fenced`` callbacks, FencedError from every further call; under ``run_agent`` also an
exception raised into the agent's thread) and writes nothing more.
"""

from __future__ import annotations

import functools
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Optional, TypeVar

from . import _json
from .api_client import AbortSignal, ApiClient, SandboxApi
from .approvals import Approvals, PendingApproval
from .checkpoints import Checkpoints
from .errors import ApprovalDeniedError, BudgetBreach, BudgetExhaustedError, ExitCode, FencedError, UnconfirmedSideEffectError
from .heartbeat import HeartbeatLoop
from .kubeconfig import load_config
from .log import SandboxLogger, as_logger
from .nudges import Nudges
from .protocol import (
    ACTIVITY_KINDS,
    DEFAULT_MAX_TOOL_CALLS,
    ActivityKind,
    ApprovalOutcome,
    Checkpoint,
    FailureRecord,
    Nudge,
    SandboxIdentity,
    SandboxState,
    ToolCall,
    api_paths,
    fence_reason,
    identity_from_env,
    iso_now,
    unwrap_checkpoint,
)
from .read_run import read_own_run, read_run
from .run_watch import RunWatch
from .status_writer import StatusWriter
from .tool_runner import ToolContext, ToolOutcome, ToolRunner
from .tracing import SandboxTracer
from .transcript import Transcript, TranscriptEntry
from .usage import BudgetView, Cost, Spending, UsageMeter, spending_of

__all__ = ["Sandbox", "SandboxStats", "StreamHandle", "ResumedApproval"]

FLUSH_DEADLINE_S = 10.0
#: How long the first read of the run is retried while the API server cannot be reached.
START_DEADLINE_S = 60.0
DEFAULT_TERMINATION_LOG = "/dev/termination-log"

A = TypeVar("A")
R = TypeVar("R")
F = TypeVar("F", bound=Callable[..., Any])

_TERMINAL = (FencedError, UnconfirmedSideEffectError, ApprovalDeniedError)


@dataclass(frozen=True)
class SandboxStats:
    #: Status writes acknowledged by the API server.
    writes: int
    #: Of those, writes that carried nothing but the heartbeat.
    heartbeat_writes: int
    failed_writes: int
    watch_restarts: int
    heartbeat_timeout_s: float
    heartbeat_interval_s: float
    #: When the sandbox started (seconds since the epoch).
    started_at: float


@dataclass(frozen=True)
class ResumedApproval:
    """The question an earlier attempt was waiting on when it ended, and where it stands."""

    question: str
    outcome: ApprovalOutcome


class StreamHandle:
    """A stream of agent output: chunks are progress (no write), the end is the final text."""

    def __init__(self, sandbox: "Sandbox") -> None:
        self._sandbox = sandbox
        self._chunks: list[str] = []

    def chunk(self, text: str) -> None:
        self._chunks.append(text)
        self._sandbox.progress()

    def end(self, final_text: Optional[str] = None) -> None:
        """Reports the final text (default: the chunks joined) as ``text`` or ``emptyText``."""
        self._sandbox.say("".join(self._chunks) if final_text is None else final_text)


def _sdk_call(method: F) -> F:
    """Marks the calling thread as inside the SDK while the method runs (run_agent never raises
    into a thread that is: the SDK's own waits end with FencedError), and notes the errors that
    end the agent's work, so that a fence arriving meanwhile cannot replace them."""

    @functools.wraps(method)
    def wrapper(self: "Sandbox", *args: Any, **kwargs: Any) -> Any:
        ident = threading.get_ident()
        with self._sdk_lock:
            self._sdk_depth[ident] = self._sdk_depth.get(ident, 0) + 1
        try:
            return method(self, *args, **kwargs)
        except _TERMINAL:
            self._terminal_raised = True
            raise
        finally:
            with self._sdk_lock:
                depth = self._sdk_depth.get(ident, 1) - 1
                if depth <= 0:
                    self._sdk_depth.pop(ident, None)
                else:
                    self._sdk_depth[ident] = depth

    return wrapper  # type: ignore[return-value]


def _write_termination_message(path: str, message: str) -> None:
    """Leaves the message where the kubelet reads it into the pod's status, so the watchdog's
    lastFailure says why. Only into a file that exists: the kubelet provides it in a pod, and
    outside one nothing should be created."""
    try:
        with open(path, "r+", encoding="utf-8") as f:
            f.truncate(0)
            f.write(message[:4096])
    except OSError:
        pass  # not in a pod, or not writable: the log line carries the message


class Sandbox:
    """The agent's handle on its run. Create it with :meth:`start` (or let :func:`run_agent` do it)."""

    run_name: str
    namespace: str
    attempt: int
    #: metadata.uid of the run: part of every idempotency key.
    uid: str
    #: spec.goal of the run.
    goal: Optional[str]
    #: Why the previous attempt ended (status.lastFailure), as found at start.
    last_failure: Optional[FailureRecord]

    @classmethod
    def start(
        cls,
        *,
        client: Optional[SandboxApi] = None,
        env: Optional[Mapping[str, str]] = None,
        identity: Optional[SandboxIdentity] = None,
        heartbeat_timeout: Optional[float] = None,
        progress_timeout: Optional[float] = None,
        max_tool_calls: int = DEFAULT_MAX_TOOL_CALLS,
        start_deadline: float = START_DEADLINE_S,
        on_nudge: Optional[Callable[[Nudge], None]] = None,
        on_fenced: Optional[Callable[[str], None]] = None,
        logger: Any = None,
        exit: Optional[Callable[[int], None]] = None,
        termination_log_path: str = DEFAULT_TERMINATION_LOG,
    ) -> "Sandbox":
        """Connects to the run, reads what earlier attempts left, reports in and starts
        heartbeating.

        ``env``: where WATCHDOG_RUN_NAME, WATCHDOG_RUN_NAMESPACE, WATCHDOG_ATTEMPT (and the
        credentials' variables) are read from, default ``os.environ``. ``client``: an API client,
        default :class:`ApiClient` from the kubeconfig or in-cluster credentials.
        ``heartbeat_timeout`` (seconds) overrides the run's; ``progress_timeout`` (seconds,
        default the heartbeat timeout): no progress for longer and heartbeats stop.
        ``max_tool_calls``: records kept in status (the CRD allows 64). ``start_deadline``: how
        long the first read is retried. ``exit``: how complete() and fail() end the process
        (default ``sys.exit``)."""
        environment = os.environ if env is None else env
        ident = identity if identity is not None else identity_from_env(environment)
        api = client if client is not None else ApiClient(load_config(environment))
        log = as_logger(logger).child(namespace=ident.namespace, run=ident.run_name, attempt=ident.attempt)
        raw = read_own_run(api, ident, start_deadline, log)
        try:
            read = read_run(raw)
        except ValueError as err:
            raise RuntimeError(f"cannot read run {ident.namespace}/{ident.run_name}: {err}") from err
        sandbox = cls(
            _key=_KEY,
            owns_client=client is None,
            identity=ident,
            client=api,
            raw=raw,
            status=read.status,
            heartbeat_timeout=heartbeat_timeout,
            progress_timeout=progress_timeout,
            max_tool_calls=max_tool_calls,
            on_nudge=on_nudge,
            on_fenced=on_fenced,
            log=log,
            exit=exit,
            termination_log_path=termination_log_path,
        )
        for problem in read.problems:
            sandbox._log.warn("ignoring an unreadable sandbox field left in status", problem=problem)
        try:
            sandbox._open(raw)
        except BaseException:
            sandbox.abandon()
            raise
        return sandbox

    def __init__(
        self,
        *,
        _key: object = None,
        owns_client: bool = False,
        identity: SandboxIdentity,
        client: SandboxApi,
        raw: dict[str, Any],
        status: dict[str, Any],
        heartbeat_timeout: Optional[float],
        progress_timeout: Optional[float],
        max_tool_calls: int,
        on_nudge: Optional[Callable[[Nudge], None]],
        on_fenced: Optional[Callable[[str], None]],
        log: SandboxLogger,
        exit: Optional[Callable[[int], None]],
        termination_log_path: str,
    ) -> None:
        if _key is not _KEY:
            raise TypeError("use Sandbox.start() or run_agent()")
        self.run_name = identity.run_name
        self.namespace = identity.namespace
        self.attempt = identity.attempt
        self._client = client
        self._owns_client = owns_client
        self._exit_fn = exit
        self._termination_log_path = termination_log_path
        self._log = log
        self._started_wall = time.time()
        self._signal = AbortSignal()
        self._lock = threading.RLock()
        self._sdk_lock = threading.Lock()
        self._sdk_depth: dict[int, int] = {}
        self._terminal_raised = False
        self._fence_cause: Optional[str] = None
        self._closed = False
        # The attempt's spans, when the operator traces runs (TRACEPARENT) and an endpoint is set.
        self._tracer = SandboxTracer.from_env()
        self._fence_listeners: list[Callable[[str], None]] = []
        self._watch: Optional[RunWatch] = None

        metadata = raw.get("metadata") or {}
        spec = raw.get("spec") or {}
        self.uid = str(metadata.get("uid") or "")
        self.goal = spec.get("goal") if isinstance(spec.get("goal"), str) else None
        self.last_failure = status.get("lastFailure")

        self._history = Transcript()
        self._usage_lock = threading.Lock()
        self._meter = UsageMeter()
        self._budget = BudgetView(self.attempt)
        self._budget.observe(raw)
        self._refused_for_budget = False
        # This attempt reported before (the same attempt's process started again): its figures
        # stand, and a report below them would be refused.
        raw_status = raw.get("status") if isinstance(raw.get("status"), dict) else {}
        earlier = raw_status.get("heartbeat") if isinstance(raw_status.get("heartbeat"), dict) else {}
        if earlier.get("attempt") == self.attempt:
            self._meter.resume(earlier.get("usage"))
        self._writer = StatusWriter(
            client=client,
            path=api_paths(self.namespace, self.run_name)["status"],
            attempt=self.attempt,
            log=self._log,
            on_gone=lambda: self._fence("the run was deleted"),
            tool_calls=list(status.get("toolCalls") or []),
            usage=self._usage_report,
        )
        self._heartbeat = HeartbeatLoop(
            writer=self._writer,
            log=self._log,
            heartbeat_timeout_ms=None if heartbeat_timeout is None else heartbeat_timeout * 1000,
            progress_timeout_ms=None if progress_timeout is None else progress_timeout * 1000,
        )
        self._heartbeat.apply_timeout(raw)
        self._checkpoints = Checkpoints(status.get("checkpoint"), self._writer)
        self._tools = ToolRunner(
            uid=self.uid,
            attempt=self.attempt,
            max_tool_calls=max_tool_calls,
            log=self._log,
            writer=self._writer,
            heartbeat=self._heartbeat,
            checkpoints=self._checkpoints,
            transcript=self._history,
            signal=self._signal,
            assert_open=self._assert_open,
            state_changed=self._state_changed,
            user_code=self._user_code,
            calls=list(status.get("toolCalls") or []),
            reset_after=status.get("toolCallsResetAfter"),
            assert_within_budget=self.assert_within_budget,
            count_tool_call=self._count_tool_call,
            tracer=self._tracer,
        )
        _, request = unwrap_checkpoint(status.get("checkpoint"))
        self._approvals = Approvals(
            attempt=self.attempt,
            log=self._log,
            writer=self._writer,
            heartbeat=self._heartbeat,
            checkpoints=self._checkpoints,
            transcript=self._history,
            state_changed=self._state_changed,
            run=raw,
            approval=status.get("approval"),
            request=request,
        )
        # Only nudges made during this attempt are for this agent.
        self._nudges = Nudges(status.get("stall"), self._log, self._history)
        if on_nudge is not None:
            self._nudges.on(on_nudge)
        if on_fenced is not None:
            self._fence_listeners.append(on_fenced)

    def _open(self, raw: dict[str, Any]) -> None:
        reason = fence_reason(raw.get("status"), self.attempt)
        if reason:
            raise FencedError(reason)
        self._tools.trim()
        checkpoint = self.load_checkpoint()
        self._log.info(
            "sandbox started",
            checkpointStep=checkpoint.get("step") if checkpoint else None,
            lastFailure=(self.last_failure or {}).get("reason"),
            awaitingApproval=self._approvals.pending is not None,
            heartbeatTimeoutMs=self._heartbeat.timeout_ms,
        )
        # The first write says "alive, planning" and clears the activity an earlier attempt left,
        # so the stall watchdog does not judge this attempt by the last one's words.
        self._writer.write().result()
        self._watch = RunWatch(
            self._client,
            self.namespace,
            self.run_name,
            on_run=self._observe,
            on_deleted=lambda: self._fence("the run was deleted"),
            log=self._log,
        )
        self._watch.start()
        self._heartbeat.start()

    # -------------------------------------------------------------------------------------------
    # what the agent reads

    @property
    def step(self) -> int:
        """Step in progress: the one after the last committed checkpoint. Tool keys derive from it."""
        return self._checkpoints.step

    def load_checkpoint(self) -> Optional[Checkpoint]:
        """The last committed checkpoint (``{"step": n, "data": ...}``), or None."""
        return self._checkpoints.current()

    @property
    def pending_approval(self) -> Optional[ResumedApproval]:
        """The approval request an earlier attempt was waiting on when it ended, and where it
        stands; ``await_approval()`` of the same question returns its answer without asking
        again."""
        found = self._approvals.pending
        return ResumedApproval(found[0], found[1]) if found else None

    @property
    def signal(self) -> AbortSignal:
        """Aborted when this sandbox is fenced or closed."""
        return self._signal

    @property
    def fenced(self) -> Optional[str]:
        """Why this sandbox was fenced, if it was."""
        return self._fence_cause

    @property
    def transcript(self) -> list[TranscriptEntry]:
        return self._history.entries

    @property
    def calls(self) -> list[ToolCall]:
        """The tool records this sandbox holds (and writes), newest last."""
        return self._tools.records

    def stats(self) -> SandboxStats:
        counts = self._writer.counts
        return SandboxStats(
            writes=counts["writes"],
            heartbeat_writes=counts["heartbeat_writes"],
            failed_writes=counts["failed_writes"],
            watch_restarts=self._watch.restarts if self._watch else 0,
            heartbeat_timeout_s=self._heartbeat.timeout_ms / 1000,
            heartbeat_interval_s=self._heartbeat.interval_ms / 1000,
            started_at=self._started_wall,
        )

    def on_nudge(self, listener: Callable[[Nudge], None]) -> Callable[[], None]:
        """Calls ``listener(nudge)`` (on the watch's thread) for each new nudge; returns a remover."""
        return self._nudges.on(listener)

    def on_fenced(self, listener: Callable[[str], None]) -> Callable[[], None]:
        """Calls ``listener(reason)`` once when this sandbox is fenced; returns a remover."""
        with self._lock:
            self._fence_listeners.append(listener)

        def off() -> None:
            with self._lock:
                if listener in self._fence_listeners:
                    self._fence_listeners.remove(listener)

        return off

    @_sdk_call
    def next_nudge(self, timeout: Optional[float] = None) -> Nudge:
        """Waits for the next nudge. Waiting here is waiting for input, not being wedged:
        heartbeats go on, and the stall watchdog, not the hung-sandbox watchdog, judges a silent
        agent. FencedError when fenced, TimeoutError after ``timeout`` seconds."""
        self._assert_open()
        with self._heartbeat.waiting():
            return self._nudges.next(self._signal, lambda: self._fence_cause, timeout)

    # -------------------------------------------------------------------------------------------
    # progress and activity

    def progress(self) -> None:
        """A sign of progress: keeps heartbeats going. In memory only; costs no write."""
        self._heartbeat.progress()

    def heartbeat(self) -> None:
        """Progress, and a heartbeat now if one is due. Never more often than the throttle
        (heartbeatTimeout/4 between heartbeat-only writes): usually ``progress()`` is enough."""
        self._heartbeat.progress()
        self._heartbeat.poke()

    @_sdk_call
    def say(self, text: str, *, wait: bool = True) -> None:
        """Final agent text. Non-empty text arms the stall watchdog; empty text reports
        emptyText, which disarms it. Written at once."""
        kind: ActivityKind = "emptyText" if text.strip() == "" else "text"
        self._history.record("agent", kind, text)
        self.report(kind, wait=wait)

    @_sdk_call
    def begin_stream(self) -> StreamHandle:
        """A stream of agent output started: one ``delta`` write per stream, none per chunk."""
        self.report("delta", wait=False)
        return StreamHandle(self)

    @_sdk_call
    def user_message(self, text: str, *, wait: bool = True) -> None:
        """A user message reached the agent (disarms the stall watchdog)."""
        self._history.record("user", "userMessage", text)
        self.report("userMessage", wait=wait)

    @_sdk_call
    def no_reply(self, *, wait: bool = True) -> None:
        """The agent chose not to reply, e.g. answered a nudge with NO_REPLY (disarms)."""
        self._history.record("agent", "noReply", "")
        self.report("noReply", wait=wait)

    @_sdk_call
    def report(self, kind: ActivityKind, *, wait: bool = True) -> None:
        """Reports any activity kind; the helpers above are the usual way. With ``wait`` (the
        default) returns once the API server has it."""
        self._assert_open()
        if kind not in ACTIVITY_KINDS:
            raise ValueError(f"activity kind {kind!r} is not one of {', '.join(ACTIVITY_KINDS)}")
        self.progress()
        self._writer.set_activity({"kind": kind, "time": iso_now(time.time())})
        future = self._writer.write()
        if wait:
            future.result()

    # -------------------------------------------------------------------------------------------
    # checkpoints, tools, approvals

    @_sdk_call
    def save_checkpoint(self, step: int, data: Any = None) -> None:
        """Commits a checkpoint; returns once the API server has it. Later tool calls key on
        step+1. ``data`` must be JSON (it is copied now, so later changes do not leak in). A
        checkpoint too large for the run's status (256 KiB as JSON, or 512 KiB for the sandbox's
        whole part of status with the tool records) raises CheckpointTooLargeError at once, and
        nothing is written. One the API server refuses raises its ApiError; either way the last
        committed checkpoint, and its step, stand."""
        self._assert_open()
        if isinstance(step, bool) or not isinstance(step, int) or step < 0:
            raise ValueError(f"a checkpoint step is an integer >= 0, not {step!r}")
        checkpoint: Checkpoint = {"step": step}
        if data is not None:
            import json

            checkpoint["data"] = json.loads(_json.dumps(data))
        self.progress()
        restore = self._checkpoints.hold(checkpoint)
        try:
            self._writer.write().result()
        except BaseException:
            restore()
            raise

    @_sdk_call
    def tool(
        self,
        name: str,
        args: A,
        fn: Callable[[A, ToolContext], R],
        *,
        idempotent: bool = False,
        validate: Optional[Callable[[A], Any]] = None,
    ) -> ToolOutcome[R]:
        """Runs ``fn(args, ctx)`` under the protocol (see tool_runner.py): Started is committed
        before ``fn`` runs, then Succeeded with a small result or Failed with the error. A call an
        earlier attempt already made is not repeated blindly: a saved result is returned, an
        unfinished idempotent call runs again with the same key, an unfinished non-idempotent call
        is refused with UnconfirmedSideEffectError. Tool failures, including arguments that
        ``validate`` rejects (by raising; it may return the arguments to use instead), come back as
        ``ToolOutcome(ok=False, error=...)`` for the agent to read and act on."""
        return self._tools.run(name, args, fn, idempotent=idempotent, validate=validate)

    @_sdk_call
    def request_approval(self, question: str, checkpoint: Optional[Mapping[str, Any]] = None) -> PendingApproval:
        """Asks a person: saves a checkpoint with the question and a new key (``checkpoint``:
        ``{"step", "data"}`` to save with it, default the current one), reports AwaitingReply and
        returns once the API server has it. If an earlier attempt asked the same question, takes
        up that request instead (a different question is a new request)."""
        self._assert_open()
        return self._approvals.request(question, dict(checkpoint) if checkpoint is not None else None)

    @_sdk_call
    def wait_for_approval(self, pending: Optional[PendingApproval] = None, timeout: Optional[float] = None) -> str:
        """The answer to the question asked (default the one open now). ApprovalDeniedError when
        rejected or timed out (the operator fails the run), FencedError when the operator released
        this pod (the next attempt gets the answer from the same calls), TimeoutError after
        ``timeout`` seconds (the question stays open)."""
        # Not _assert_open(): a rejection fences this sandbox too, and the agent should learn of
        # the rejection; approvals.wait() says FencedError when there is no answer to give.
        if self._closed and not self._fence_cause:
            raise RuntimeError("the sandbox is closed")
        handle = pending if pending is not None else self._approvals.current
        if handle is None:
            raise RuntimeError("no approval was requested")
        return self._approvals.wait(handle, timeout)

    @_sdk_call
    def await_approval(self, question: str, checkpoint: Optional[Mapping[str, Any]] = None) -> str:
        """``request_approval`` and ``wait_for_approval`` in one: the TypeScript SDK's awaitApproval."""
        return self.wait_for_approval(self.request_approval(question, checkpoint))

    # -------------------------------------------------------------------------------------------
    # usage and the run's budget

    def record_usage(
        self,
        input_tokens: int = 0,
        output_tokens: int = 0,
        cost: Optional[Cost] = None,
        model: Optional[str] = None,
    ) -> None:
        """Adds one model call's usage to this attempt's running totals, which every heartbeat
        reports (status.heartbeat.usage). Counts are non-negative integers; ``cost`` is what the
        call cost in the budget's currency, a ``decimal.Decimal`` or a decimal string ("0.0123")
        (an int or float is taken as the decimal it prints as), added exactly; without it the
        operator prices the tokens by ``model`` from spec.budget.prices. Tool calls are counted by
        the SDK itself. A change rides the next heartbeat, except one that brings the run to a
        limit of its budget: that is written at once. Raises ValueError or TypeError for a
        malformed report (nothing is added)."""
        with self._usage_lock:
            within = not self._breaches()
            unpriced = self._meter.record(self._budget.prices, input_tokens, output_tokens, cost, model)
            reached = within and bool(self._breaches())
        for name in unpriced:
            self._log.warn("usage without a cost for a model spec.budget.prices does not price: its tokens add nothing to the cost this attempt reports", model=name)
        self.progress()
        if reached and not self._closed:
            self._writer.write_now()

    @property
    def usage(self) -> dict[str, Any]:
        """This attempt's usage so far, as the heartbeat reports it (status.heartbeat.usage)."""
        return self._usage_report()

    def spending(self) -> Spending:
        """The run's spending as the SDK sees it: what ended attempts spent (status.spent, written
        by the operator) plus this attempt's usage, with tokens reported without a cost priced by
        spec.budget.prices."""
        with self._usage_lock:
            return spending_of(self._current_spending())

    def check_budget(self) -> list[BudgetBreach]:
        """The limits of the run's budget its spending has reached, empty while it is within
        budget. The limits are the effective ones the operator publishes (status.budget), else
        spec.budget; the wall clock is left to the operator, which measures it on the API server's
        clock."""
        with self._usage_lock:
            return self._breaches()

    @_sdk_call
    def assert_within_budget(self) -> None:
        """Raises BudgetExhaustedError when the run's spending has reached a limit of its budget:
        call it before work that spends (a model call). ``tool()`` calls it before every call it
        would run. The operator stops such a run for a person (BudgetExhausted) whether or not the
        agent asks."""
        breaches = self.check_budget()
        if not breaches:
            return
        if not self._refused_for_budget:
            self._refused_for_budget = True
            self._log.warn("the run's budget is exhausted: no more work is started", breaches=[b.message for b in breaches])
        raise BudgetExhaustedError(breaches)

    def wait_for_stop(self, timeout: float) -> bool:
        """Flushes what is pending, then waits (heartbeating) until the operator stops this
        attempt, that is, this sandbox is fenced, at most ``timeout`` seconds. Returns whether it
        was. run_agent uses it when the agent stopped on its budget, so that the run ends as the
        operator's BudgetExhausted rather than as a crash."""
        if self._fence_cause:
            return True
        if self._closed:
            return False
        self._writer.drain(FLUSH_DEADLINE_S)
        stopped = threading.Event()
        off = self.on_fenced(lambda _reason: stopped.set())
        try:
            if self._fence_cause:
                return True
            with self._heartbeat.waiting():
                return stopped.wait(timeout)
        finally:
            off()

    def _usage_report(self) -> dict[str, Any]:
        with self._usage_lock:
            return self._meter.report()

    def _count_tool_call(self) -> None:
        with self._usage_lock:
            self._meter.tool_call()

    def _current_spending(self) -> tuple[int, int, int, int]:
        return self._budget.spending(self._meter.figures(self._budget.prices))

    def _breaches(self) -> list[BudgetBreach]:
        return self._budget.breaches(self._current_spending())

    # -------------------------------------------------------------------------------------------
    # shutting down

    def close(self) -> None:
        """Stops heartbeats and the watch and flushes what is pending. Does not exit."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self._heartbeat.stop()
        self._writer.drain(FLUSH_DEADLINE_S)
        if self._tracer is not None:
            self._tracer.flush()
        if self._watch is not None:
            self._watch.stop()
        self._writer.stop()
        self._close_client()
        self._signal.abort(RuntimeError("sandbox closed"))

    def complete(self) -> None:
        """The agent's work is done: flush and exit 0. The pod's exit 0 completes the run."""
        if self._fence_cause:
            # A fenced sandbox no longer speaks for the run, not even to say it is done.
            self._log.warn("complete() after being fenced; exiting as fenced", reason=self._fence_cause)
            self.close()
            self._exit(ExitCode.FENCED)
            return
        self._log.info("agent completed", stats=self.stats().__dict__)
        self.close()
        self._exit(ExitCode.COMPLETED)

    def fail(self, reason: Any, code: int = ExitCode.FAILED) -> None:
        """The agent failed: flush, leave the message for the kubelet, exit non-zero."""
        message = f"{type(reason).__name__}: {reason}" if isinstance(reason, BaseException) else str(reason)
        self._log.error(f"agent failed: {message}", stats=self.stats().__dict__, code=int(code))
        _write_termination_message(self._termination_log_path, message)
        self.close()
        self._exit(int(code) if code else ExitCode.FAILED)

    def abandon(self) -> None:
        """Stops at once without flushing anything, as a crash would. For tests and emergencies."""
        with self._lock:
            self._closed = True
        self._heartbeat.stop()
        if self._watch is not None:
            self._watch.stop()
        self._writer.stop(FencedError("sandbox abandoned"))
        self._close_client()
        self._signal.abort(RuntimeError("sandbox abandoned"))

    def __enter__(self) -> "Sandbox":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _close_client(self) -> None:
        close = getattr(self._client, "close", None)
        if self._owns_client and callable(close):
            close()

    def _exit(self, code: int) -> None:
        (self._exit_fn or sys.exit)(int(code))

    # -------------------------------------------------------------------------------------------
    # the watch

    def _observe(self, run: dict[str, Any]) -> None:
        if self._fence_cause:
            return
        # Only operator-owned fields are read here, on every event (each of our own writes is one).
        status = run.get("status") if isinstance(run.get("status"), dict) else {}
        self._heartbeat.apply_timeout(run)
        with self._usage_lock:
            self._budget.observe(run)
        self._tools.observe(status.get("toolCallsResetAfter"))
        # The answer first: a rejection also fails the run, and the agent should learn why.
        self._approvals.observe(run, status)
        self._nudges.observe(status.get("stall"))
        reason = fence_reason(status, self.attempt)
        if reason:
            self._fence(reason)

    def _fence(self, reason: str) -> None:
        with self._lock:
            if self._fence_cause:
                return
            self._fence_cause = reason
            self._closed = True
            listeners = list(self._fence_listeners)
        self._log.warn("fenced: this sandbox stops and writes nothing more", reason=reason)
        self._heartbeat.stop()
        if self._watch is not None:
            self._watch.stop()
        err = FencedError(reason)
        self._writer.fence(reason, err)
        self._approvals.fence(err)
        self._signal.abort(err)
        for listener in listeners:
            try:
                listener(reason)
            except Exception as e:  # noqa: BLE001
                self._log.error("fence listener threw", err=str(e))

    def _state_changed(self) -> None:
        state: SandboxState = "AwaitingReply" if self._approvals.awaiting else "ExecutingTool" if self._tools.running > 0 else "Planning"
        self._writer.set_state(state)

    def _assert_open(self) -> None:
        if self._fence_cause:
            raise FencedError(self._fence_cause)
        if self._closed:
            raise RuntimeError("the sandbox is closed")

    @contextmanager
    def _user_code(self) -> Iterator[None]:
        """The agent's own code runs inside an SDK call (a tool's function): for run_agent's
        interruption on fencing it counts as the agent's code, not the SDK's."""
        ident = threading.get_ident()
        with self._sdk_lock:
            saved = self._sdk_depth.pop(ident, 0)
        try:
            yield
        finally:
            with self._sdk_lock:
                if saved:
                    self._sdk_depth[ident] = saved

    def _interruptible(self, ident: int) -> bool:
        """Whether run_agent may raise FencedError into thread ``ident`` now (see runner.py)."""
        return not self._terminal_raised and self._sdk_depth.get(ident, 0) == 0


_KEY = object()
