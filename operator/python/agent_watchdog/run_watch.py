"""The sandbox's view of its own AgentRun (run-watch.ts).

A list of that one object (by field selector), then a watch from the list's resourceVersion, both
redone whenever the watch ends. Nudges, approvals and fencing all arrive through it, so it must
never silently stop: every close or error leads to a reconnect with backoff until ``stop()``.

The watch starts from the list's resourceVersion, not the object's: the object may not have
changed for a long time, and after the API server rebuilds its watch cache (a CRD update does
that) a watch from such an old version is refused as too old, again and again, until the object
next changes. The list's version is always current.

It runs on its own daemon thread, so that the agent's thread can block in its own work while
answers, nudges and fencing still arrive.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, Optional

from .api_client import AbortSignal, SandboxApi
from .log import SandboxLogger
from .protocol import api_paths

MIN_BACKOFF_S = 0.5
MAX_BACKOFF_S = 10.0
#: The server ends each watch after this long; a clean close is then just a reconnect.
SERVER_TIMEOUT_SECONDS = 300
#: Longer than the server's own timeout, so the client only gives up on a connection truly gone.
INACTIVITY_TIMEOUT_S = SERVER_TIMEOUT_SECONDS + 30.0


class RunWatch:
    def __init__(
        self,
        client: SandboxApi,
        namespace: str,
        name: str,
        *,
        on_run: Callable[[dict[str, Any]], None],
        on_deleted: Callable[[], None],
        log: SandboxLogger,
    ) -> None:
        self._client = client
        self._path = api_paths(namespace)["runs"]
        self._selector = f"metadata.name={name}"
        self._on_run = on_run
        self._on_deleted = on_deleted
        self._log = log
        self._stopped = threading.Event()
        self._abort: Optional[AbortSignal] = None
        self._lock = threading.Lock()
        self._backoff = MIN_BACKOFF_S
        self._thread: Optional[threading.Thread] = None
        #: How many times the watch was re-established.
        self.restarts = 0

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="agent-watchdog-run-watch", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stopped.set()
        with self._lock:
            abort = self._abort
        if abort is not None:
            abort.abort()

    def _loop(self) -> None:
        first = True
        while not self._stopped.is_set():
            if not first:
                delay = self._backoff
                self._backoff = min(MAX_BACKOFF_S, self._backoff * 2)
                if self._stopped.wait(delay):
                    return
                self.restarts += 1
            first = False
            err = self._connect()
            if err is _DELETED:
                return
            if self._stopped.is_set():
                return
            if err is not None:
                self._log.debug("watch of the run ended; reconnecting", err=str(err))

    def _connect(self) -> Any:
        try:
            listed = self._client.get(self._path, {"fieldSelector": self._selector})
        except Exception as err:  # noqa: BLE001
            return err
        if self._stopped.is_set():
            return None
        items = listed.get("items") if isinstance(listed, dict) else None
        run = items[0] if isinstance(items, list) and items else None
        if not isinstance(run, dict):
            self._on_deleted()
            return _DELETED
        self._handle(self._on_run, run)
        version = (listed.get("metadata") or {}).get("resourceVersion") if isinstance(listed, dict) else None
        query = {
            "fieldSelector": self._selector,
            "resourceVersion": version,
            "allowWatchBookmarks": True,
            "timeoutSeconds": SERVER_TIMEOUT_SECONDS,
        }
        abort = AbortSignal()
        with self._lock:
            self._abort = abort
        if self._stopped.is_set():
            return None
        try:
            self._client.watch(self._path, query, self._on_event, abort, INACTIVITY_TIMEOUT_S)
        except Exception as err:  # noqa: BLE001
            return err
        return None

    def _handle(self, fn: Callable[..., None], *args: Any) -> None:
        try:
            fn(*args)
        except Exception as err:  # noqa: BLE001 - a handler that raises does not end the watch
            self._log.error("handling the run's change failed", err=str(err))

    def _on_event(self, kind: str, obj: dict[str, Any]) -> None:
        if self._stopped.is_set():
            return
        # ERROR (e.g. 410 Gone) is followed by the server closing the stream, and the reconnect
        # lists afresh; it is no sign that the watch works, so it keeps the backoff growing.
        if kind == "ERROR":
            self._log.debug("watch of the run reported an error", status=obj)
            return
        self._backoff = MIN_BACKOFF_S
        if kind in ("ADDED", "MODIFIED"):
            self._handle(self._on_run, obj)
        elif kind == "DELETED":
            self._stopped.set()
            self._handle(self._on_deleted)


_DELETED = object()
