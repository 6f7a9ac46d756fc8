"""Where the agent is in its work (checkpoints.ts).

The last committed checkpoint, which a new attempt resumes from, and the step in progress (the one
after it). Tool calls take their idempotency keys from the step and their position in it, so a
replay from the checkpoint meets the same keys again; the position starts again at 0 whenever a
checkpoint moves the step.

A checkpoint too large for the run's status (operator/api/limits.ts) is refused when it is held,
before anything is written; one the API server refuses is taken back, so the step and the keys
stay those of the checkpoint status holds.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, Optional

from .protocol import Checkpoint, checkpoint_refusal, unwrap_checkpoint
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

    def hold(self, checkpoint: Checkpoint) -> Callable[[], None]:
        """Makes ``checkpoint`` what the next status write carries, or raises
        CheckpointTooLargeError and changes nothing. Returns what takes it back if that write is
        refused (unless a newer checkpoint was held meanwhile)."""
        with self._lock:
            refusal = checkpoint_refusal(self._writer.status_with(checkpoint))
            if refusal is not None:
                raise refusal
            before = (self._held, self._committed, self._call_index)
            self._held = checkpoint
            self._writer.set_checkpoint(checkpoint)
            if checkpoint["step"] != self._committed:
                self._call_index = 0
            self._committed = checkpoint["step"]

        def restore() -> None:
            with self._lock:
                if self._held is checkpoint:
                    self._held, self._committed, self._call_index = before

        return restore

    def next_call_index(self) -> int:
        """The 0-based position of the next tool call within the step in progress."""
        with self._lock:
            index = self._call_index
            self._call_index += 1
            return index
