"""A stand-in for the Kubernetes API server, on http.server, for the SDK's tests.

It serves one AgentRun the way kube-apiserver serves it to a sandbox: a JSON GET of the run, a
list of the collection by field selector, a JSON merge patch (application/merge-patch+json only)
of .../agentruns/<name>/status that changes nothing but status, and a watch
(?watch=true&fieldSelector=metadata.name%3D<name>) that streams newline-delimited JSON events,
chunked, from the resourceVersion asked for. Hooks hold, fail or refuse writes, fail reads, drop
watches, and play the operator's side (changes to status, and by default its reconcile of each
sandbox write: see _reconcile) so that tests can drive the protocol through a real socket and the
SDK's real HTTP client. Optionally over TLS, with client certificates.
"""

from __future__ import annotations

import copy
import json
import ssl
import threading
import time
import urllib.parse
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Optional

BASE = "/apis/watchdog.dev/v1alpha1/namespaces"
APPROVAL_REQUEST_KEY = "watchdog.dev/approval-request"
#: The phases in which the phase mirrors what the sandbox reports.
ACTIVE_PHASES = ("Starting", "Planning", "ExecutingTool", "AwaitingReply")


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = copy.deepcopy(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def status_body(code: int, reason: str, message: str) -> dict[str, Any]:
    return {"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": code, "reason": reason, "message": message}


class FakeApiServer:
    def __init__(
        self,
        status: Optional[dict[str, Any]] = None,
        spec: Optional[dict[str, Any]] = None,
        *,
        name: str = "r",
        namespace: str = "ns",
        uid: str = "uid-r",
        tls: Optional[ssl.SSLContext] = None,
    ) -> None:
        self.name = name
        self.namespace = namespace
        self.cond = threading.Condition()
        self.rv = 1
        base_status = {"phase": "Starting", "attempt": 1, "watchdog": {"heartbeatTimeout": "2s"}}
        base_status.update(status or {})
        self.run: dict[str, Any] = {
            "apiVersion": "watchdog.dev/v1alpha1",
            "kind": "AgentRun",
            "metadata": {"name": name, "namespace": namespace, "uid": uid, "resourceVersion": "1", "generation": 1},
            "spec": {"template": {"spec": {"containers": [{"name": "agent"}]}}, **(spec or {})},
            "status": {k: v for k, v in base_status.items() if v is not None},
        }
        self.deleted = False
        #: Every status merge patch the sandbox sent, in order, with its query and content type.
        self.patches: list[dict[str, Any]] = []
        self.patch_queries: list[dict[str, list[str]]] = []
        self.patch_times: list[float] = []
        self.content_types: list[str] = []
        #: (method, path, query, headers) of every request.
        self.requests: list[tuple[str, str, dict[str, list[str]], dict[str, str]]] = []
        #: The request targets as sent (path and query, still encoded).
        self.raw_paths: list[str] = []
        #: (resourceVersion, type, object) of every change, for watches from a resourceVersion.
        self.events: list[tuple[int, str, dict[str, Any]]] = []
        #: When set, each write waits until the event is set.
        self.hold: Optional[threading.Event] = None
        #: (code, body) or (code, body, headers) the next writes fail with, in order.
        self.failures: list[tuple[Any, ...]] = []
        #: A server that refuses some content every time: (code, body) for a patch it refuses.
        self.refuse: Optional[Callable[[dict[str, Any]], Optional[tuple[int, Any]]]] = None
        #: Whether each sandbox write is followed by the operator's reconcile of it (_reconcile).
        self.reconciles = True
        self._requests_opened = 0
        #: (code, body) the next reads of the run fail with, in order.
        self.read_failures: list[tuple[int, Any]] = []
        #: Called with the Authorization header; returns False to answer 401.
        self.authorize: Optional[Callable[[Optional[str]], bool]] = None
        #: Watches open now, and watches ever opened.
        self.watchers = 0
        self.watches_opened = 0
        self.watch_generation = 0
        self.stopping = False
        server = self

        class Handler(_Handler):
            fake = server

        self.httpd = _Server(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.scheme = "http"
        if tls is not None:
            self.httpd.socket = tls.wrap_socket(self.httpd.socket, server_side=True)
            self.scheme = "https"
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    # -- lifecycle ---------------------------------------------------------------------------------

    def start(self) -> "FakeApiServer":
        self.thread.start()
        return self

    def stop(self) -> None:
        with self.cond:
            self.stopping = True
            if self.hold is not None:
                self.hold.set()
            self.cond.notify_all()
        self.httpd.shutdown()
        self.httpd.server_close()

    @property
    def url(self) -> str:
        host, port = self.httpd.server_address[:2]
        return f"{self.scheme}://{host}:{port}"

    # -- the operator's side -----------------------------------------------------------------------

    @property
    def status(self) -> dict[str, Any]:
        with self.cond:
            return copy.deepcopy(self.run.get("status") or {})

    def operator(self, status_patch: dict[str, Any]) -> None:
        """Changes status as the operator would, and tells the watches."""
        with self.cond:
            self._apply({"status": status_patch})

    def _reconcile(self) -> None:
        """The operator's part in what the sandbox reads back, after a write of the current
        attempt: in an active phase the phase mirrors the state the sandbox reports; entering
        AwaitingReply opens a new request (a new id, with the question and key of the checkpoint's
        request), unless the request still pending has that key; leaving it while the request is
        pending withdraws the request. Called with the lock held."""
        status = self.run.get("status") or {}
        heartbeat = status.get("heartbeat") or {}
        phase, state = status.get("phase"), heartbeat.get("state")
        if not self.reconciles or heartbeat.get("attempt") != status.get("attempt") or phase not in ACTIVE_PHASES or state == phase:
            return
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        patch: dict[str, Any] = {"phase": state}
        approval = status.get("approval") or {}
        if state == "AwaitingReply":
            data = (status.get("checkpoint") or {}).get("data")
            asked = data.get(APPROVAL_REQUEST_KEY) if isinstance(data, dict) else None
            asked = asked if isinstance(asked, dict) else {}
            if not (approval.get("state") == "Pending" and asked.get("key") and approval.get("requestKey") == asked.get("key")):
                self._requests_opened += 1
                patch["approval"] = {
                    "id": f"req-{self._requests_opened}",
                    "state": "Pending",
                    "question": asked.get("question"),
                    "requestKey": asked.get("key"),
                    "attempt": status.get("attempt"),
                    "requestedAt": now,
                    "answer": None,
                    "reason": None,
                    "decidedAt": None,
                }
        elif phase == "AwaitingReply" and approval.get("state") == "Pending":
            patch["approval"] = {"state": "Withdrawn", "decidedAt": now}
        self._apply({"status": patch})

    def _lowers_usage(self, patch: Any) -> Optional[tuple[int, Any]]:
        """The CRD's transition rule on status.heartbeat (USAGE_MONOTONIC_RULE): within an attempt,
        a write may not lower a usage figure the attempt already reported, nor drop one. Called
        with the lock held."""
        old = (self.run.get("status") or {}).get("heartbeat")
        status = patch.get("status") if isinstance(patch, dict) and isinstance(patch.get("status"), dict) else {}
        new = (merge_patch(self.run.get("status") or {}, status) or {}).get("heartbeat")
        if not isinstance(old, dict) or not isinstance(old.get("usage"), dict) or not isinstance(new, dict) or new.get("attempt") != old.get("attempt"):
            return None
        before, after = old["usage"], new.get("usage") if isinstance(new.get("usage"), dict) else {}
        lowered = [f for f in ("inputTokens", "outputTokens", "toolCalls", "cost") if f in before and (f not in after or float(after[f]) < float(before[f]))]
        if not lowered:
            return None
        message = f'AgentRun.watchdog.dev "{self.name}" is invalid: status.heartbeat.usage: heartbeat.usage may not go down within an attempt ({", ".join(lowered)})'
        return (422, status_body(422, "Invalid", message))

    def delete(self) -> None:
        with self.cond:
            self.deleted = True
            self.rv += 1
            obj = copy.deepcopy(self.run)
            obj["metadata"]["resourceVersion"] = str(self.rv)
            self.events.append((self.rv, "DELETED", obj))
            self.cond.notify_all()

    def drop_watches(self) -> None:
        with self.cond:
            self.watch_generation += 1
            self.cond.notify_all()

    def wait_for(self, predicate: Callable[[], bool], timeout: float = 10.0, what: str = "condition") -> None:
        deadline = time.monotonic() + timeout
        with self.cond:
            while not predicate():
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise AssertionError(f"timed out waiting for {what}")
                self.cond.wait(min(remaining, 0.05))

    def _apply(self, patch: dict[str, Any]) -> dict[str, Any]:
        self.run = merge_patch(self.run, patch)
        self.rv += 1
        self.run["metadata"]["resourceVersion"] = str(self.rv)
        obj = copy.deepcopy(self.run)
        self.events.append((self.rv, "MODIFIED", obj))
        self.cond.notify_all()
        return obj


class _Server(ThreadingHTTPServer):
    def handle_error(self, request: Any, client_address: Any) -> None:
        import sys

        if not isinstance(sys.exc_info()[1], OSError):  # a client that went away is no news
            super().handle_error(request, client_address)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    fake: FakeApiServer

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - quiet
        pass

    # -- helpers -----------------------------------------------------------------------------------

    def _send_json(self, code: int, body: Any, headers: Optional[dict[str, str]] = None) -> None:
        data = json.dumps(body).encode("utf-8")
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)

    def _route(self) -> tuple[str, dict[str, list[str]]]:
        url = urllib.parse.urlsplit(self.path)
        query = urllib.parse.parse_qs(url.query, keep_blank_values=True)
        with self.fake.cond:
            self.fake.requests.append((self.command, url.path, query, {k: v for k, v in self.headers.items()}))
            self.fake.raw_paths.append(self.path)
        return url.path, query

    def _authorized(self) -> bool:
        check = self.fake.authorize
        if check is not None and not check(self.headers.get("Authorization")):
            self._send_json(401, status_body(401, "Unauthorized", "Unauthorized"))
            return False
        return True

    # -- verbs -------------------------------------------------------------------------------------

    def do_GET(self) -> None:  # noqa: N802
        fake = self.fake
        path, query = self._route()
        if not self._authorized():
            return
        runs = f"{BASE}/{fake.namespace}/agentruns"
        if path == f"{runs}/{fake.name}":
            with fake.cond:
                failure = fake.read_failures.pop(0) if fake.read_failures else None
                run = None if fake.deleted else copy.deepcopy(fake.run)
            if failure:
                self._send_json(failure[0], failure[1])
            elif run is None:
                self._send_json(404, status_body(404, "NotFound", f'agentruns.watchdog.dev "{fake.name}" not found'))
            else:
                self._send_json(200, run)
            return
        if path == runs:
            selector = (query.get("fieldSelector") or [""])[0]
            matches = selector in ("", f"metadata.name={fake.name}")
            if (query.get("watch") or [""])[0] == "true":
                self._watch(query, matches)
                return
            with fake.cond:
                items = [copy.deepcopy(fake.run)] if matches and not fake.deleted else []
                rv = str(fake.rv)
            self._send_json(200, {"kind": "AgentRunList", "apiVersion": "watchdog.dev/v1alpha1", "metadata": {"resourceVersion": rv}, "items": items})
            return
        self._send_text(404, "404 page not found\n")

    def _send_text(self, code: int, text: str) -> None:
        data = text.encode()
        self.send_response(code)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()

    def _watch(self, query: dict[str, list[str]], matches: bool) -> None:
        fake = self.fake
        since = int((query.get("resourceVersion") or ["0"])[0] or 0)
        timeout = float((query.get("timeoutSeconds") or ["300"])[0])
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        self.wfile.flush()
        end_at = time.monotonic() + timeout
        with fake.cond:
            fake.watchers += 1
            fake.watches_opened += 1
            generation = fake.watch_generation
            fake.cond.notify_all()
        sent = since
        try:
            while True:
                with fake.cond:
                    while True:
                        if fake.stopping or generation != fake.watch_generation or time.monotonic() >= end_at:
                            pending = None
                            break
                        pending = [(rv, t, o) for rv, t, o in fake.events if rv > sent]
                        if pending:
                            break
                        fake.cond.wait(0.05)
                if pending is None:
                    break
                for rv, kind, obj in pending:
                    sent = rv
                    if matches:
                        self._chunk((json.dumps({"type": kind, "object": obj}) + "\n").encode())
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        except OSError:
            pass
        finally:
            self.close_connection = True
            with fake.cond:
                fake.watchers -= 1
                fake.cond.notify_all()

    def do_PATCH(self) -> None:  # noqa: N802
        fake = self.fake
        path, query = self._route()
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length)
        if not self._authorized():
            return
        if path != f"{BASE}/{fake.namespace}/agentruns/{fake.name}/status":
            self._send_json(404, status_body(404, "NotFound", "not found"))
            return
        content_type = self.headers.get("Content-Type") or ""
        if content_type != "application/merge-patch+json":
            self._send_json(415, status_body(415, "UnsupportedMediaType", f"the body of the request was in an unknown format: {content_type}"))
            return
        hold = fake.hold
        if hold is not None:
            hold.wait(30)
        try:
            patch = json.loads(body)
        except ValueError:
            self._send_json(400, status_body(400, "BadRequest", "invalid JSON"))
            return
        with fake.cond:
            failure = fake.failures.pop(0) if fake.failures else None
            if failure is None and fake.refuse is not None:
                failure = fake.refuse(patch)
            if failure is None:
                failure = fake._lowers_usage(patch)
            if failure is None and not fake.deleted:
                fake.patches.append(copy.deepcopy(patch))
                fake.patch_queries.append(query)
                fake.patch_times.append(time.monotonic())
                fake.content_types.append(content_type)
                # the status subresource changes status only
                obj = fake._apply({"status": patch.get("status") if isinstance(patch.get("status"), dict) else {}})
                fake._reconcile()
            deleted = fake.deleted
        if failure is not None:
            self._send_json(failure[0], failure[1], failure[2] if len(failure) > 2 else None)
        elif deleted:
            self._send_json(404, status_body(404, "NotFound", f'agentruns.watchdog.dev "{fake.name}" not found'))
        else:
            self._send_json(200, obj)
