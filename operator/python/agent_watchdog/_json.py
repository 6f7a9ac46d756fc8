"""JSON exactly as JavaScript's ``JSON.stringify`` writes it.

Why not ``json.dumps``: the idempotency key of a tool call is a hash of its arguments' JSON, and
the TypeScript SDK computes that JSON with ``JSON.stringify``. For a Python sandbox to produce the
same keys and argument hashes (so that the operator's loop rule, the ledger and any attempt,
whichever SDK it runs, see one call as one call) the bytes must be identical. ``json.dumps``
differs in the places that matter:

* numbers: JavaScript has only doubles and prints them with ECMAScript's Number::toString
  (``1.0`` is ``1``, ``1e16`` is ``10000000000000000``, ``1e21`` is ``1e+21``, ``1e-7`` is
  ``1e-7``); ``NaN`` and the infinities become ``null``; integers beyond 2**53 are the nearest
  double, as ``JSON.parse`` would have made them;
* strings: only ``"``, ``\\`` and control characters are escaped, lone surrogates become
  ``\\udxxx``, everything else is written as is (UTF-8 on the wire);
* object keys: JavaScript orders integer-like keys ("0", "1", ... up to 2**32-2) first, in
  numeric order, whatever the insertion order; the canonical form then sorts the other keys by
  UTF-16 code units, as ``Array.prototype.sort`` does, not by code points.

``datetime`` values are written as ``Date.prototype.toJSON`` writes them
(``2026-01-01T00:00:00.000Z``); lists and tuples are arrays; any mapping is an object.
"""

from __future__ import annotations

import datetime as _dt
import math
import re
from collections.abc import Mapping
from typing import Any

__all__ = ["dumps", "js_number", "js_string", "utf16_len"]

_MAX_SAFE = 2**53
_MAX_ARRAY_INDEX = 2**32 - 2
_NEEDS_ESCAPE = re.compile(r'["\\\x00-\x1f\ud800-\udfff]')
_SHORT_ESCAPES = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t"}


def utf16_len(text: str) -> int:
    """Length in UTF-16 code units, which is what JavaScript's ``String.length`` counts."""
    return len(text) + sum(1 for ch in text if ord(ch) > 0xFFFF)


def js_number(value: float | int) -> str:
    """ECMAScript Number::toString(10) of a double (``repr`` gives the same shortest digits)."""
    if isinstance(value, int):
        if -_MAX_SAFE <= value <= _MAX_SAFE:
            return str(value)
        try:
            value = float(value)
        except OverflowError:
            return "null"  # beyond the largest double: Infinity in JavaScript
    if math.isnan(value) or math.isinf(value):
        return "null"
    if value == 0:
        return "0"  # -0 too
    text = repr(value)
    sign = ""
    if text[0] == "-":
        sign, text = "-", text[1:]
    mantissa, _, exp_text = text.partition("e")
    exponent = int(exp_text) if exp_text else 0
    whole, _, fraction = mantissa.partition(".")
    raw = whole + fraction
    stripped = raw.lstrip("0")
    # value = 0.<digits> * 10**n, digits without leading or trailing zeros
    n = len(whole) - (len(raw) - len(stripped)) + exponent
    digits = stripped.rstrip("0")
    k = len(digits)
    if k <= n <= 21:
        out = digits + "0" * (n - k)
    elif 0 < n <= 21:
        out = digits[:n] + "." + digits[n:]
    elif -6 < n <= 0:
        out = "0." + "0" * (-n) + digits
    else:
        e = n - 1
        exp = ("+" if e >= 0 else "-") + str(abs(e))
        out = (digits if k == 1 else digits[0] + "." + digits[1:]) + "e" + exp
    return sign + out


def _escape(match: re.Match[str]) -> str:
    ch = match.group(0)
    short = _SHORT_ESCAPES.get(ch)
    return short if short is not None else "\\u%04x" % ord(ch)


def js_string(text: str) -> str:
    """A JSON string literal as ``JSON.stringify`` writes it (well-formed, lone surrogates escaped)."""
    if not _NEEDS_ESCAPE.search(text):
        return '"' + text + '"'
    # A surrogate pair held as two code points (e.g. from "surrogatepass" decoding) is one
    # character in JavaScript; join such pairs first, so that only lone surrogates are escaped.
    if any(0xD800 <= ord(ch) <= 0xDFFF for ch in text):
        text = re.sub(
            r"[\ud800-\udbff][\udc00-\udfff]",
            lambda m: chr(0x10000 + ((ord(m.group(0)[0]) - 0xD800) << 10) + (ord(m.group(0)[1]) - 0xDC00)),
            text,
        )
    return '"' + _NEEDS_ESCAPE.sub(_escape, text) + '"'


def _is_array_index(key: str) -> bool:
    return key.isdigit() and key.isascii() and (key == "0" or key[0] != "0") and int(key) <= _MAX_ARRAY_INDEX


def _utf16_key(key: str) -> bytes:
    return key.encode("utf-16-be", "surrogatepass")


def _key_text(key: Any) -> str:
    if isinstance(key, str):
        return key
    if key is None:
        return "null"
    if isinstance(key, bool):
        return "true" if key else "false"
    if isinstance(key, (int, float)):
        return js_number(key)
    raise TypeError(f"object keys must be strings, not {type(key).__name__}")


def _iso(value: _dt.datetime) -> str:
    if value.tzinfo is None:
        value = value.astimezone()  # a naive datetime is local time, as datetime.timestamp() takes it
    value = value.astimezone(_dt.timezone.utc)
    return value.strftime("%Y-%m-%dT%H:%M:%S.") + f"{value.microsecond // 1000:03d}Z"


def _ordered_keys(keys: list[str], canonical: bool) -> list[str]:
    indices = sorted((k for k in keys if _is_array_index(k)), key=int)
    others = [k for k in keys if not _is_array_index(k)]
    if canonical:
        others.sort(key=_utf16_key)
    return indices + others


def _write(value: Any, canonical: bool, out: list[str], depth: int) -> None:
    if depth > 1000:
        raise ValueError("value is nested too deeply for JSON")
    if value is None:
        out.append("null")
    elif value is True:
        out.append("true")
    elif value is False:
        out.append("false")
    elif isinstance(value, str):
        out.append(js_string(value))
    elif isinstance(value, (int, float)):
        out.append(js_number(value))
    elif isinstance(value, _dt.datetime):
        out.append(js_string(_iso(value)))
    elif isinstance(value, Mapping):
        items: dict[str, Any] = {}
        for key, member in value.items():
            items[_key_text(key)] = member  # a later duplicate wins, as assignment does in JS
        out.append("{")
        first = True
        for key in _ordered_keys(list(items), canonical):
            if not first:
                out.append(",")
            first = False
            out.append(js_string(key))
            out.append(":")
            _write(items[key], canonical, out, depth + 1)
        out.append("}")
    elif isinstance(value, (list, tuple)):
        out.append("[")
        for i, member in enumerate(value):
            if i:
                out.append(",")
            _write(member, canonical, out, depth + 1)
        out.append("]")
    else:
        raise TypeError(f"{type(value).__name__} is not JSON serialisable")


def dumps(value: Any, *, canonical: bool = False) -> str:
    """JSON text of ``value``: ``JSON.stringify(value)``, or with ``canonical`` the form whose
    object keys are sorted at every depth (the TypeScript SDK's ``canonicalJson``)."""
    out: list[str] = []
    _write(value, canonical, out, 0)
    return "".join(out)
