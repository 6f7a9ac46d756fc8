"""Waits the platform's threads can hold (timers.ts).

``threading`` refuses a timeout beyond ``threading.TIMEOUT_MAX`` with OverflowError, which in a
background thread (the heartbeat's) would end the thread, and with it the heartbeats, without a
word; an agent's own ``timeout=`` could do the same to its call. Every wait the SDK computes from a
run's settings, a server's Retry-After or a caller's timeout goes through here. Waits are cut at
the TypeScript SDK's limit, 2**31-1 ms: whoever waits looks again when it ends, so a wait cut short
is only an early look.
"""

from __future__ import annotations

import threading
import time
from typing import Optional

#: The longest single wait, in seconds: Node's timer limit (2**31-1 ms), well under TIMEOUT_MAX.
MAX_WAIT_S = (2**31 - 1) / 1000


def wait_s(seconds: Optional[float]) -> Optional[float]:
    """``seconds`` as a timeout threading accepts: None waits for ever; else between 0 and
    MAX_WAIT_S (NaN is 0)."""
    if seconds is None:
        return None
    if not seconds > 0:
        return 0.0
    return min(MAX_WAIT_S, seconds)


def wait_event(event: threading.Event, timeout: Optional[float]) -> bool:
    """``event.wait(timeout)`` for any timeout, infinity included: a long one is waited out in
    pieces threading accepts. True once the event is set."""
    if timeout is None:
        return event.wait()
    deadline = time.monotonic() + max(0.0, timeout)
    while True:
        remaining = deadline - time.monotonic()
        if not remaining > 0:
            return event.is_set()
        if event.wait(wait_s(remaining)):
            return True


__all__ = ["MAX_WAIT_S", "wait_event", "wait_s"]
