"""What the agent said and heard during this attempt (transcript.ts): its text, user messages,
tool outcomes, nudges and answers, for the agent's recent context. In memory only: what must
survive an attempt goes into the checkpoint."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from .protocol import iso_now

#: The transcript is for the agent's recent context, not an archive: the newest entries are kept.
MAX_TRANSCRIPT = 1000

Role = Literal["agent", "user", "tool", "system"]


@dataclass(frozen=True)
class TranscriptEntry:
    time: str
    role: Role
    kind: str
    text: str


class Transcript:
    def __init__(self, wall: Callable[[], float] = time.time) -> None:
        self._wall = wall
        self._entries: list[TranscriptEntry] = []
        self._lock = threading.Lock()

    @property
    def entries(self) -> list[TranscriptEntry]:
        with self._lock:
            return list(self._entries)

    def record(self, role: Role, kind: str, text: str) -> None:
        with self._lock:
            self._entries.append(TranscriptEntry(iso_now(self._wall()), role, kind, text))
            if len(self._entries) > MAX_TRANSCRIPT:
                del self._entries[: len(self._entries) - MAX_TRANSCRIPT]
