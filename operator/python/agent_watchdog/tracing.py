"""The sandbox's spans (tracing.ts): an ``execute_tool <name>`` span per tool call that runs, under
the attempt's span the operator names in ``TRACEPARENT`` (W3C Trace Context), in the
OpenTelemetry GenAI conventions.

The SDK uses the standard library only, so it carries a small exporter of its own: spans are kept
in memory and sent over OTLP/HTTP (JSON) to ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``, or to
``OTEL_EXPORTER_OTLP_ENDPOINT`` + ``/v1/traces``, in batches and when the sandbox closes, with the
headers of ``OTEL_EXPORTER_OTLP_HEADERS``. Without a readable TRACEPARENT or an endpoint (or with
``OTEL_SDK_DISABLED=true``) nothing is recorded. A failed export is dropped, never retried: traces
are evidence, and nothing waits on the collector. The idempotency key is recorded only as a hash.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Mapping
from typing import Any, Optional

_TRACEPARENT = re.compile(r"^00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$")
#: Spans held before a batch is sent without waiting for the sandbox to close.
BATCH_SPANS = 64
_SCOPE = "agent-watchdog-sandbox"


def parse_traceparent(text: Optional[str]) -> Optional[tuple[str, str, int]]:
    """(trace id, parent span id, flags) of a W3C traceparent, or None when it is not one."""
    match = _TRACEPARENT.match((text or "").strip())
    if not match:
        return None
    trace_id, span_id, flags = match.group(1), match.group(2), int(match.group(3), 16)
    if set(trace_id) == {"0"} or set(span_id) == {"0"}:
        return None
    return trace_id, span_id, flags


def idempotency_key_hash(key: str) -> str:
    """The first 16 hex characters of the key's sha256: enough to tell calls apart, nothing to replay."""
    return hashlib.sha256(key.encode()).hexdigest()[:16]


def _endpoint(env: Mapping[str, str]) -> Optional[str]:
    traces = (env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or "").strip()
    if traces:
        return traces
    base = (env.get("OTEL_EXPORTER_OTLP_ENDPOINT") or "").strip()
    return base.rstrip("/") + "/v1/traces" if base else None


def _headers(env: Mapping[str, str]) -> dict[str, str]:
    headers = {"Content-Type": "application/json"}
    for pair in (env.get("OTEL_EXPORTER_OTLP_TRACES_HEADERS") or env.get("OTEL_EXPORTER_OTLP_HEADERS") or "").split(","):
        name, sep, value = pair.partition("=")
        if sep and name.strip():
            headers[name.strip()] = urllib.parse.unquote(value.strip())
    return headers


def _attribute(key: str, value: Any) -> dict[str, Any]:
    if isinstance(value, bool):
        return {"key": key, "value": {"boolValue": value}}
    if isinstance(value, int):
        return {"key": key, "value": {"intValue": str(value)}}
    return {"key": key, "value": {"stringValue": str(value)}}


class ToolSpan:
    """One tool call's span; ``end`` records its outcome and hands it to the exporter."""

    def __init__(self, tracer: "SandboxTracer", name: str, attributes: dict[str, Any]) -> None:
        self._tracer = tracer
        self._name = name
        self._attributes = attributes
        self._span_id = os.urandom(8).hex()
        self._start = time.time_ns()

    def end(self, failure: Any = None) -> None:
        status: dict[str, Any] = {"code": 1}
        attributes = dict(self._attributes)
        if failure is not None:
            status = {"code": 2, "message": str(getattr(failure, "message", failure))}
            http_status = getattr(failure, "http_status", None)
            attributes["error.type"] = str(http_status) if http_status is not None else str(getattr(failure, "kind", "error"))
            retry_after = getattr(failure, "retry_after_seconds", None)
            if retry_after is not None:
                attributes["watchdog.tool.retry_after_seconds"] = int(retry_after)
        self._tracer._ended(
            {
                "traceId": self._tracer.trace_id,
                "spanId": self._span_id,
                "parentSpanId": self._tracer.parent_span_id,
                "name": self._name,
                "kind": 1,
                "startTimeUnixNano": str(self._start),
                "endTimeUnixNano": str(max(self._start, time.time_ns())),
                "attributes": [_attribute(k, v) for k, v in attributes.items()],
                "status": status,
            }
        )


class SandboxTracer:
    """The attempt's spans, exported over OTLP/HTTP (JSON)."""

    def __init__(self, trace_id: str, parent_span_id: str, endpoint: str, headers: dict[str, str], service: str, timeout: float = 5.0) -> None:
        self.trace_id = trace_id
        self.parent_span_id = parent_span_id
        self._endpoint = endpoint
        self._headers = headers
        self._service = service
        self._timeout = timeout
        self._lock = threading.Lock()
        self._pending: list[dict[str, Any]] = []
        self.exported = 0

    @classmethod
    def from_env(cls, env: Optional[Mapping[str, str]] = None) -> Optional["SandboxTracer"]:
        """A tracer for the attempt in TRACEPARENT, or None when traces are not asked for."""
        env = os.environ if env is None else env
        if (env.get("OTEL_SDK_DISABLED") or "").strip().lower() == "true":
            return None
        parent = parse_traceparent(env.get("TRACEPARENT"))
        endpoint = _endpoint(env)
        if parent is None or endpoint is None or not parent[2] & 1:
            return None
        service = (env.get("OTEL_SERVICE_NAME") or "").strip() or "agent-watchdog-sandbox"
        return cls(parent[0], parent[1], endpoint, _headers(env), service)

    def start_tool(self, name: str, call_id: str, idempotency_key: str, attempt: int, rerun: bool) -> ToolSpan:
        return ToolSpan(
            self,
            f"execute_tool {name}",
            {
                "gen_ai.operation.name": "execute_tool",
                "gen_ai.tool.name": name,
                "gen_ai.tool.call.id": call_id,
                "watchdog.attempt": attempt,
                "watchdog.tool.idempotency_key_hash": idempotency_key_hash(idempotency_key),
                "watchdog.tool.rerun": rerun,
            },
        )

    def _ended(self, span: dict[str, Any]) -> None:
        with self._lock:
            self._pending.append(span)
            full = len(self._pending) >= BATCH_SPANS
        if full:
            self.flush()

    def flush(self) -> None:
        """Sends what is pending; a failure drops it."""
        with self._lock:
            batch, self._pending = self._pending, []
        if not batch:
            return
        body = {
            "resourceSpans": [
                {
                    "resource": {"attributes": [_attribute("service.name", self._service)]},
                    "scopeSpans": [{"scope": {"name": _SCOPE}, "spans": batch}],
                }
            ]
        }
        request = urllib.request.Request(self._endpoint, data=json.dumps(body).encode(), headers=self._headers, method="POST")
        try:
            with urllib.request.urlopen(request, timeout=self._timeout) as response:
                response.read()
            self.exported += len(batch)
        except Exception:  # noqa: BLE001 - the collector's trouble is never the agent's
            pass


__all__ = ["SandboxTracer", "ToolSpan", "idempotency_key_hash", "parse_traceparent"]
