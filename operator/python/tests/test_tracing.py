"""The sandbox's spans (tracing.py) against a real HTTP receiver: each tool call that runs is an
execute_tool span under the attempt's span from TRACEPARENT, sent as OTLP/HTTP JSON when the
sandbox closes, with its outcome and the idempotency key only as a hash; nothing without
TRACEPARENT or an endpoint, and a malformed TRACEPARENT is ignored."""

from __future__ import annotations

import json
import threading
import unittest
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Any
from unittest import mock

from agent_watchdog import ToolError
from agent_watchdog.tracing import SandboxTracer, idempotency_key_hash, parse_traceparent
from test_sandbox import SandboxTestCase

TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
ATTEMPT_SPAN = "00f067aa0ba902b7"


class Receiver:
    """An OTLP/HTTP endpoint that keeps what it is sent."""

    def __init__(self) -> None:
        self.requests: list[tuple[str, dict[str, str], dict[str, Any]]] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                outer.requests.append((self.path, {k.lower(): v for k, v in self.headers.items()}, json.loads(body)))
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.end_headers()
                self.wfile.write(b"{}")

            def log_message(self, *args: Any) -> None:
                pass

        self.server = HTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def spans(self) -> list[dict[str, Any]]:
        return [span for _, _, body in self.requests for resource in body["resourceSpans"] for scope in resource["scopeSpans"] for span in scope["spans"]]

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def attributes(span: dict[str, Any]) -> dict[str, Any]:
    return {a["key"]: next(iter(a["value"].values())) for a in span["attributes"]}


class TracingTest(SandboxTestCase):
    def receiver(self) -> Receiver:
        receiver = Receiver()
        self.addCleanup(receiver.stop)
        return receiver

    def test_each_tool_call_is_an_execute_tool_span_under_the_attempt(self) -> None:
        receiver = self.receiver()
        env = {"TRACEPARENT": f"00-{TRACE}-{ATTEMPT_SPAN}-01", "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.url + "/", "OTEL_EXPORTER_OTLP_HEADERS": "api-key=s%3Dcret"}
        with mock.patch.dict("os.environ", env):
            sandbox = self.start(self.fake())
        ok = sandbox.tool("lookup", {"q": 1}, lambda args, ctx: "found", idempotent=True)

        def busy(args: Any, ctx: Any) -> Any:
            raise ToolError("Too Many Requests", http_status=429, retry_after_seconds=3)

        sandbox.tool("call_model", {"q": 2}, busy)
        self.assertEqual(receiver.requests, [], "nothing is sent before the sandbox closes")
        sandbox.close()
        [(path, headers, _)] = receiver.requests
        self.assertEqual(path, "/v1/traces")
        self.assertEqual(headers.get("api-key"), "s=cret")
        lookup, model = receiver.spans()
        for span in (lookup, model):
            self.assertEqual(span["traceId"], TRACE)
            self.assertEqual(span["parentSpanId"], ATTEMPT_SPAN)
            self.assertRegex(span["spanId"], r"^[0-9a-f]{16}$")
            self.assertLessEqual(int(span["startTimeUnixNano"]), int(span["endTimeUnixNano"]))
        self.assertEqual(lookup["name"], "execute_tool lookup")
        self.assertEqual(
            attributes(lookup),
            {
                "gen_ai.operation.name": "execute_tool",
                "gen_ai.tool.name": "lookup",
                "gen_ai.tool.call.id": "a1-1",
                "watchdog.attempt": "1",
                "watchdog.tool.idempotency_key_hash": idempotency_key_hash(ok.idempotency_key),
                "watchdog.tool.rerun": False,
            },
        )
        self.assertEqual(lookup["status"], {"code": 1})
        self.assertNotIn(ok.idempotency_key, json.dumps(receiver.requests))
        self.assertEqual(model["status"]["code"], 2)
        self.assertIn("Too Many Requests", model["status"]["message"])
        self.assertEqual(attributes(model)["error.type"], "429")
        self.assertEqual(attributes(model)["watchdog.tool.retry_after_seconds"], "3")

    def test_records_nothing_without_traceparent_or_endpoint(self) -> None:
        receiver = self.receiver()
        for env in ({"OTEL_EXPORTER_OTLP_ENDPOINT": receiver.url}, {"TRACEPARENT": f"00-{TRACE}-{ATTEMPT_SPAN}-01"}, {"TRACEPARENT": f"00-{TRACE}-{ATTEMPT_SPAN}-01", "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.url, "OTEL_SDK_DISABLED": "true"}):
            with mock.patch.dict("os.environ", env, clear=True):
                self.assertIsNone(SandboxTracer.from_env(), env)
        with mock.patch.dict("os.environ", {"OTEL_EXPORTER_OTLP_ENDPOINT": receiver.url}, clear=False):
            sandbox = self.start(self.fake())
        sandbox.tool("lookup", {"q": 1}, lambda args, ctx: "found", idempotent=True)
        sandbox.close()
        self.assertEqual(receiver.requests, [])

    def test_ignores_a_traceparent_it_cannot_read(self) -> None:
        for bad in ["", "garbage", f"01-{TRACE}-{ATTEMPT_SPAN}-01", f"00-{'0' * 32}-{ATTEMPT_SPAN}-01", f"00-{TRACE}-{'0' * 16}-01", f"00-{TRACE.upper()}-{ATTEMPT_SPAN}-01"]:
            self.assertIsNone(parse_traceparent(bad), bad)
        self.assertEqual(parse_traceparent(f"00-{TRACE}-{ATTEMPT_SPAN}-01"), (TRACE, ATTEMPT_SPAN, 1))

    def test_a_collector_that_is_down_costs_the_agent_nothing(self) -> None:
        env = {"TRACEPARENT": f"00-{TRACE}-{ATTEMPT_SPAN}-01", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:9/v1/traces"}
        with mock.patch.dict("os.environ", env):
            sandbox = self.start(self.fake())
        outcome = sandbox.tool("lookup", {"q": 1}, lambda args, ctx: "found", idempotent=True)
        self.assertTrue(outcome.ok)
        sandbox.close()


if __name__ == "__main__":
    unittest.main()
