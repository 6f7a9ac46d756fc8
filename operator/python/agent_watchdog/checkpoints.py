"""Where the agent is in its work (checkpoints.ts).

The last committed checkpoint, which a new attempt resumes from, and the step in progress (the one
after it). Tool calls take their idempotency keys from the step and their position in it, so a
replay from the checkpoint meets the same keys again; the position starts again at 0 whenever a
checkpoint moves the step.
"""

from __future__ import annotations

import threading
from typing import Any, Optional

from .protocol import Checkpoint, unwrap_checkpoint
from .status_writer import StatusWriter


class Checkpoints:
    def __init__(self, found: Any, writer: StatusWriter) -> None:
        self._writer = writer
        self._lock = threading.Lock()
        #: As written in status, with a pending approval request wrapped in (see approvals.py).
        self._held: Optional[Checkpoint] = found if isinstance(found, dict) else None
        inner, _ = unwrap_checkpoint(self._held)
        step = inner.get("step") if inner else 0
        self._committed = step if isinstance(step, int) else 0
        self._call_index = 0

    @property
    def committed(self) -> int:
        """The step of the last committed checkpoint; 0 before the first."""
        return self._committed

    @property
    def step(self) -> int:
        """The step in progress: the one after the last committed checkpoint."""
        return self._committed + 1

    def current(self) -> Optional[Checkpoint]:
        """The agent's own checkpoint (its step and data), without what the SDK wraps around it."""
        with self._lock:
            inner, _ = unwrap_checkpoint(self._held)
        return inner

    def hold(self, checkpoint: Checkpoint) -> None:
        """Makes ``checkpoint`` what the next status write carries."""
        with self._lock:
            self._held = checkpoint
            self._writer.set_checkpoint(checkpoint)
            if checkpoint["step"] != self._committed:
                self._call_index = 0
            self._committed = checkpoint["step"]

    def next_call_index(self) -> int:
        """The 0-based position of the next tool call within the step in progress."""
        with self._lock:
            index = self._call_index
            self._call_index += 1
            return index
