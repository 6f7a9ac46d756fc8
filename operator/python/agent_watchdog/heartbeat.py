"""The heartbeat loop (heartbeat.ts).

A heartbeat-only write goes out at most once per heartbeatTimeout/4, and at least once per 75 s
while the agent makes progress (protocol.py: heartbeat_interval_ms); anything that matters to the
watchdog (a state change, a tool record, activity, a checkpoint) goes out at once through the
status writer and moves the heartbeat with it. A heartbeat must mean "the agent is making
progress", so it is written only while the agent shows progress (any SDK call, a streamed chunk,
``progress()``); after progressTimeout (default: the heartbeat timeout) without any, the agent is
wedged, heartbeats stop, and the watchdog replaces the sandbox one timeout later. Waiting on the
SDK itself (for an approval or a nudge) is not being wedged.

Why a thread, when the TypeScript SDK uses a timer on the agent's event loop: a Python agent is
usually synchronous code that blocks (a model call, a subprocess), so a timer on the agent's own
thread would not fire while it works. A thread beats regardless, which is why the progress rule
above, not the thread's liveness, is what stops the heartbeats of a wedged agent. The thread is a
daemon: when the agent's main function returns, run_agent exits the process, and a live heartbeat
thread can never keep a finished (or a wedged) process looking alive.

The loop follows the run's effective heartbeatTimeout as the operator publishes it: a new value
wakes the thread, which reschedules the next heartbeat from the new interval at once.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, Optional

from .log import SandboxLogger
from .protocol import effective_heartbeat_timeout_ms, heartbeat_decision, heartbeat_interval_ms
from .status_writer import StatusWriter
from .timers import wait_s


class HeartbeatLoop:
    def __init__(
        self,
        *,
        writer: StatusWriter,
        log: SandboxLogger,
        heartbeat_timeout_ms: Optional[float] = None,
        progress_timeout_ms: Optional[float] = None,
        mono: Callable[[], float] = time.monotonic,
    ) -> None:
        self._writer = writer
        self._log = log
        self._override_ms = heartbeat_timeout_ms
        self._progress_timeout_ms = progress_timeout_ms
        self._mono = mono
        self._cond = threading.Condition()
        self._timeout_ms = 0.0
        self._interval_ms = 0.0
        self._next_at: Optional[float] = None  # monotonic seconds
        self._stopped = False
        self._thread: Optional[threading.Thread] = None
        self._last_progress_at = mono()
        self.wedged = False
        #: How many calls of the agent are waiting on the SDK for input (an approval, a nudge).
        self._waiting_for_input = 0

    @property
    def timeout_ms(self) -> float:
        return self._timeout_ms

    @property
    def interval_ms(self) -> float:
        return self._interval_ms

    def apply_timeout(self, run: Any) -> None:
        """Follows the timeout the watchdog applies to the run; it may change while the run lives."""
        timeout = self._override_ms if self._override_ms is not None else effective_heartbeat_timeout_ms(run)
        with self._cond:
            if timeout == self._timeout_ms:
                return
            first = self._timeout_ms == 0
            self._timeout_ms = timeout
            self._interval_ms = heartbeat_interval_ms(timeout)
            if not first:
                self._log.info("heartbeat timeout changed", heartbeatTimeoutMs=timeout, heartbeatIntervalMs=self._interval_ms)
                # Not after the old interval, which may be long: the next heartbeat is due by the new one.
                if self._thread is not None:
                    self._schedule(self._writer.last_write_at + self._interval_ms / 1000)

    def start(self) -> None:
        with self._cond:
            if self._thread is not None or self._stopped:
                return
            self._schedule(self._writer.last_write_at + self._interval_ms / 1000)
            self._thread = threading.Thread(target=self._run, name="agent-watchdog-heartbeat", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        with self._cond:
            self._stopped = True
            self._cond.notify_all()

    def progress(self) -> None:
        """A sign of progress: keeps heartbeats going. In memory only; costs no write."""
        with self._cond:
            self._last_progress_at = self._mono()
            if self.wedged:
                self.wedged = False
                self._log.info("progress again; heartbeats resume")

    def poke(self) -> None:
        """Looks at once whether a heartbeat is due (it is written only if it is)."""
        with self._cond:
            self._next_at = self._mono()
            self._cond.notify_all()

    @contextmanager
    def waiting(self) -> Iterator[None]:
        """Marks the agent as waiting on the SDK for input while the block runs."""
        with self._cond:
            self._waiting_for_input += 1
        try:
            yield
        finally:
            with self._cond:
                self._waiting_for_input -= 1
            self.progress()

    def _schedule(self, at: float) -> None:
        self._next_at = at
        self._cond.notify_all()

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._stopped:
                    remaining = (self._next_at or 0) - self._mono()
                    if remaining <= 0:
                        break
                    self._cond.wait(wait_s(remaining))
                if self._stopped:
                    return
                now = self._mono()
                decision = heartbeat_decision(
                    now=now * 1000,
                    last_write_at=self._writer.last_write_at * 1000,
                    interval_ms=self._interval_ms,
                    last_progress_at=self._last_progress_at * 1000,
                    progress_timeout_ms=self._progress_timeout_ms if self._progress_timeout_ms is not None else self._timeout_ms,
                    waiting_for_input=self._waiting_for_input > 0,
                )
                if decision.wedged and not self.wedged:
                    self.wedged = True
                    self._log.warn(
                        "no progress for longer than the progress timeout: heartbeats stop so the watchdog can replace this sandbox",
                        lastProgressSecondsAgo=round(now - self._last_progress_at, 3),
                    )
                self._next_at = decision.next_check_at / 1000
            if decision.write:
                self._writer.beat()
