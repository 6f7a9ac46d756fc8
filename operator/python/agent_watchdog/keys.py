"""Stable names for tool calls, byte for byte those of the TypeScript SDK (operator/sandbox/keys.ts).

A replacement sandbox must recognise a call it (or an earlier attempt) already made, so the
idempotency key is derived only from what is the same when the agent replays its work from the
last checkpoint: the run, the step in progress, the position of the call within that step, the
tool and its arguments. Nothing random, no clock. The canonical JSON is JavaScript's (see
``_json``), so a Python and a TypeScript sandbox give the same call the same key and hash.
"""

from __future__ import annotations

import hashlib
from typing import Any

from . import _json

__all__ = ["ARGS_HASH_LENGTH", "args_hash", "canonical_json", "idempotency_key"]

#: How many hex digits of the arguments' sha256 are kept: short enough to read, 64 bits wide.
ARGS_HASH_LENGTH = 16


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def canonical_json(value: Any) -> str:
    """JSON with object keys sorted at every depth, so that ``{a, b}`` and ``{b, a}`` hash alike,
    with numbers and strings written exactly as ``JSON.stringify`` writes them. ``None`` (the
    Python spelling of JavaScript's ``undefined`` and ``null`` alike) is ``"null"``."""
    return _json.dumps(value, canonical=True)


def args_hash(args: Any) -> str:
    """Short hex sha256 of the canonical JSON of a call's arguments."""
    return _sha256(canonical_json(args))[:ARGS_HASH_LENGTH]


def idempotency_key(run_uid: str, step: int, index: int, name: str, args_hash: str) -> str:
    """The key handed to a tool so that the service behind it can recognise a repeated request:
    sha256 of ``<run uid>/<step>/<index>/<name>/<args hash>``."""
    return _sha256(f"{run_uid}/{int(step)}/{int(index)}/{name}/{args_hash}")
