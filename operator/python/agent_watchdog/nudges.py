"""Stall nudges (nudges.ts).

When the agent has said its final text and then gone quiet, the operator records a nudge in
status.stall; the sandbox delivers it into the agent's session (listeners, the transcript,
``next_nudge()``). Each nudge reaches the agent once, however often the watch shows the same
status, and only nudges made during this attempt count: one that stood in status when the sandbox
started was for an earlier attempt. Listeners run on the watch's thread: keep them short.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, Optional

from .api_client import AbortSignal
from .errors import FencedError
from .log import SandboxLogger
from .protocol import Nudge, new_nudge
from .timers import wait_event
from .transcript import Transcript


class Nudges:
    def __init__(self, found: Any, log: SandboxLogger, transcript: Transcript) -> None:
        last = found.get("lastNudge") if isinstance(found, dict) else None
        #: The time of the last nudge handled.
        self._last: Optional[str] = last.get("time") if isinstance(last, dict) else None
        self._log = log
        self._transcript = transcript
        self._lock = threading.Lock()
        self._listeners: list[Callable[[Nudge], None]] = []

    def on(self, listener: Callable[[Nudge], None]) -> Callable[[], None]:
        with self._lock:
            self._listeners.append(listener)

        def off() -> None:
            with self._lock:
                if listener in self._listeners:
                    self._listeners.remove(listener)

        return off

    def observe(self, stall: Any) -> None:
        with self._lock:
            nudge = new_nudge(stall, self._last)
            if nudge is None:
                return
            self._last = nudge.time
            listeners = list(self._listeners)
        self._transcript.record("system", "nudge", nudge.message)
        self._log.info(f"nudge: {nudge.message}", nudge=nudge.count, time=nudge.time)
        for listener in listeners:
            try:
                listener(nudge)
            except Exception as err:  # noqa: BLE001
                self._log.error("nudge listener threw", err=str(err))

    def next(self, signal: AbortSignal, why: Callable[[], Optional[str]], timeout: Optional[float] = None) -> Nudge:
        """The next nudge; FencedError when ``signal`` aborts, TimeoutError after ``timeout``."""
        got: list[Nudge] = []
        ready = threading.Event()

        def take(nudge: Nudge) -> None:
            if not got:
                got.append(nudge)
            ready.set()

        off = self.on(take)
        remove = signal.add_listener(lambda _reason: ready.set())
        try:
            if not wait_event(ready, timeout):
                raise TimeoutError("no nudge arrived in time")
        finally:
            off()
            remove()
        if got:
            return got[0]
        raise FencedError(why() or "sandbox closed")
