"""The SDK's logs: one JSON object a line on stdout, shaped as the TypeScript SDK's pino output.

Why not plain ``logging`` output: the operator, the local sandbox runner and whoever reads the
pod's logs expect pino's JSON shape (``level`` as a label, ISO ``time``, ``pid``, ``logger``, the
run's ``namespace``/``run``/``attempt`` and ``msg``), whichever SDK the agent runs. Agents that log
elsewhere pass their own logger: anything with ``debug``/``info``/``warn``/``error`` taking a
message and keyword fields, and ``child(**bindings)``; a ``logging.Logger`` is wrapped with
:class:`StdlibLogger`.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
from typing import IO, Any, Protocol, runtime_checkable

from . import _json
from .protocol import LOG_LEVEL_ENV, iso_now

__all__ = ["SandboxLogger", "JsonLogger", "StdlibLogger", "default_logger", "as_logger"]

_LEVELS = {"trace": 10, "debug": 20, "info": 30, "warn": 40, "warning": 40, "error": 50, "fatal": 60, "silent": 1000}


@runtime_checkable
class SandboxLogger(Protocol):
    def debug(self, msg: str, **fields: Any) -> None: ...
    def info(self, msg: str, **fields: Any) -> None: ...
    def warn(self, msg: str, **fields: Any) -> None: ...
    def error(self, msg: str, **fields: Any) -> None: ...
    def child(self, **bindings: Any) -> "SandboxLogger": ...


def _safe(value: Any) -> Any:
    try:
        _json.dumps(value)
        return value
    except (TypeError, ValueError):
        return repr(value)


class JsonLogger:
    """pino-shaped JSON lines; thread-safe (heartbeat, writer and watch threads all log)."""

    def __init__(self, level: str = "info", stream: IO[str] | None = None, bindings: dict[str, Any] | None = None, _lock: threading.Lock | None = None) -> None:
        self.level = level if level in _LEVELS else "info"
        self._threshold = _LEVELS[self.level]
        self._stream = stream
        self._bindings = dict(bindings or {})
        self._lock = _lock or threading.Lock()

    def child(self, **bindings: Any) -> "JsonLogger":
        return JsonLogger(self.level, self._stream, {**self._bindings, **bindings}, self._lock)

    def _log(self, level: str, msg: str, fields: dict[str, Any]) -> None:
        if _LEVELS[level] < self._threshold:
            return
        record: dict[str, Any] = {"level": level, "time": iso_now(time.time()), "pid": os.getpid(), "logger": "sandbox"}
        record.update(self._bindings)
        record.update({k: _safe(v) for k, v in fields.items()})
        record["msg"] = msg
        line = _json.dumps(record) + "\n"
        with self._lock:
            stream = self._stream or sys.stdout
            try:
                stream.write(line)
                stream.flush()
            except (OSError, ValueError):
                pass  # a closed stdout must not break the agent

    def debug(self, msg: str, **fields: Any) -> None:
        self._log("debug", msg, fields)

    def info(self, msg: str, **fields: Any) -> None:
        self._log("info", msg, fields)

    def warn(self, msg: str, **fields: Any) -> None:
        self._log("warn", msg, fields)

    def error(self, msg: str, **fields: Any) -> None:
        self._log("error", msg, fields)


class StdlibLogger:
    """Adapts a ``logging.Logger``: the fields go into the message as JSON and into ``extra``."""

    def __init__(self, logger: logging.Logger, bindings: dict[str, Any] | None = None) -> None:
        self._logger = logger
        self._bindings = dict(bindings or {})

    def child(self, **bindings: Any) -> "StdlibLogger":
        return StdlibLogger(self._logger, {**self._bindings, **bindings})

    def _log(self, level: int, msg: str, fields: dict[str, Any]) -> None:
        if not self._logger.isEnabledFor(level):
            return
        merged = {**self._bindings, **{k: _safe(v) for k, v in fields.items()}}
        self._logger.log(level, "%s %s", msg, _json.dumps(merged), extra={"watchdog": merged})

    def debug(self, msg: str, **fields: Any) -> None:
        self._log(logging.DEBUG, msg, fields)

    def info(self, msg: str, **fields: Any) -> None:
        self._log(logging.INFO, msg, fields)

    def warn(self, msg: str, **fields: Any) -> None:
        self._log(logging.WARNING, msg, fields)

    def error(self, msg: str, **fields: Any) -> None:
        self._log(logging.ERROR, msg, fields)


def default_logger(level: str | None = None) -> JsonLogger:
    """JSON on stdout at WATCHDOG_LOG_LEVEL (default info; ``silent`` logs nothing)."""
    return JsonLogger(level or os.environ.get(LOG_LEVEL_ENV) or "info")


def as_logger(logger: Any) -> SandboxLogger:
    if logger is None:
        return default_logger()
    if isinstance(logger, logging.Logger):
        return StdlibLogger(logger)
    return logger  # type: ignore[no-any-return]
