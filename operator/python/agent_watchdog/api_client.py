"""The SDK's own client for the Kubernetes API, on ``http.client`` and ``ssl`` (api-client.ts).

A sandbox talks to one object, its AgentRun: it reads it, merge-patches its status and watches
it. Plain JSON in and out, and an error that carries the HTTP status and the Status reason, which
is what the SDK decides by. ``http.client`` rather than ``urllib.request``: the watch needs a
socket this SDK owns, so that stopping the watch from another thread can shut it down and wake
the thread reading it, and the status writes reuse one kept-alive connection instead of paying a
TLS handshake each.
"""

from __future__ import annotations

import http.client
import json
import socket
import ssl
import threading
import urllib.parse
from collections.abc import Callable, Mapping
from typing import Any, Optional, Protocol, Union

from . import _json
from .errors import parse_retry_after
from .kubeconfig import ClusterConfig, load_config
from .timers import wait_event

__all__ = [
    "ApiClient",
    "ApiError",
    "AbortSignal",
    "SandboxApi",
    "api_error_code",
    "is_not_found",
    "is_too_large",
    "is_transient",
    "retry_after_s",
    "MERGE_PATCH",
    "RETRY",
]

Json = dict[str, Any]
Query = Mapping[str, Union[str, int, float, bool, None]]

MERGE_PATCH = "application/merge-patch+json"
#: Backoff of retried reads and writes: 200 ms doubling to 5 s (seconds here).
RETRY = {"first": 0.2, "max": 5.0}
REQUEST_TIMEOUT_S = 30.0
#: client-node's default: a watch silent this long is taken as a dead connection.
WATCH_INACTIVITY_S = 30.0


class AbortSignal:
    """Set once, with a reason; listeners run when it is set. The Python counterpart of the
    AbortSignal the TypeScript SDK hands to agents and tools: check ``aborted``, ``wait()`` on it
    instead of ``time.sleep`` so that a fenced sandbox stops at once, or ``raise_if_aborted()``."""

    def __init__(self) -> None:
        self._event = threading.Event()
        self._lock = threading.Lock()
        self._listeners: list[Callable[[BaseException | None], None]] = []
        self.reason: BaseException | None = None

    @property
    def aborted(self) -> bool:
        return self._event.is_set()

    def abort(self, reason: BaseException | None = None) -> None:
        with self._lock:
            if self._event.is_set():
                return
            self.reason = reason
            self._event.set()
            listeners, self._listeners = self._listeners, []
        for listener in listeners:
            try:
                listener(reason)
            except Exception:  # noqa: BLE001 - a listener must not stop the others
                pass

    def add_listener(self, listener: Callable[[BaseException | None], None]) -> Callable[[], None]:
        """Calls ``listener(reason)`` when aborted (at once if already); returns a remover."""
        with self._lock:
            if not self._event.is_set():
                self._listeners.append(listener)
                return lambda: self._remove(listener)
        listener(self.reason)
        return lambda: None

    def _remove(self, listener: Callable[[BaseException | None], None]) -> None:
        with self._lock:
            if listener in self._listeners:
                self._listeners.remove(listener)

    def wait(self, timeout: float | None = None) -> bool:
        """Sleeps up to ``timeout`` seconds (any number, infinity included); True (at once) when
        aborted."""
        return wait_event(self._event, timeout)

    def raise_if_aborted(self) -> None:
        if self.aborted:
            raise self.reason if self.reason is not None else RuntimeError("aborted")


class ApiError(Exception):
    """An API server's refusal: HTTP status, the Status reason and the body, and how long the
    server asks the client to wait (``retry_after_seconds``: its Retry-After header, or the Status's
    details), if it does."""

    def __init__(self, method: str, path: str, code: int, body: Any, retry_after: Optional[str] = None) -> None:
        status = body if isinstance(body, Mapping) else {}
        self.code = code
        self.reason = str(status.get("reason") or "")
        self.body = body
        details = status.get("details")
        self.retry_after_seconds = parse_retry_after(retry_after)
        if self.retry_after_seconds is None and isinstance(details, Mapping):
            self.retry_after_seconds = parse_retry_after(details.get("retryAfterSeconds"))
        super().__init__(f"{method} {path}: {code} {self.reason} {status.get('message') or ''}".strip())


def api_error_code(err: BaseException | None) -> int | None:
    """The HTTP status of an API error, None for anything else (a network error has none)."""
    if isinstance(err, ApiError):
        return err.code
    code = getattr(err, "code", None)
    if type(err).__name__ == "ApiError" and isinstance(code, int):
        return code
    return None


def is_not_found(err: BaseException | None) -> bool:
    return api_error_code(err) == 404


def _server_message(err: BaseException | None) -> str:
    """What the server said, from its Status object, else the error's own message."""
    body = getattr(err, "body", None)
    message = body.get("message") if isinstance(body, Mapping) else None
    return message if isinstance(message, str) else str(err or "")


def is_too_large(err: BaseException | None) -> bool:
    """The storage's size limit: etcd refuses a request over its limit ("etcdserver: request is too
    large"), which the API server passes on as a 500. The same request would fail again."""
    return "too large" in _server_message(err).lower()


def is_transient(err: BaseException | None) -> bool:
    """Worth retrying: the server or the network may recover. No status at all is the network; 401
    is a token the kubelet is about to rotate (the client has already read it afresh once); 408,
    409 and 429 pass; a 5xx is the server's trouble, unless it is a size limit. Anything else is
    the server refusing this request, and it would refuse it again."""
    code = api_error_code(err)
    if code is None or code == 0 or code in (401, 408, 409, 429):
        return True
    return code >= 500 and not is_too_large(err)


def retry_after_s(err: BaseException | None) -> float | None:
    """The wait a server asked for with its refusal (Retry-After), in seconds, if it asked."""
    seconds = getattr(err, "retry_after_seconds", None)
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not seconds >= 0:
        return None
    return float(seconds)


class SandboxApi(Protocol):
    """What the SDK needs of an API client (tests may hand in their own)."""

    def get(self, path: str, query: Optional[Query] = None) -> Any: ...

    def merge_patch(self, path: str, patch: Any, query: Optional[Query] = None) -> Any: ...

    def watch(
        self,
        path: str,
        query: Query,
        on_event: Callable[[str, Json], None],
        signal: AbortSignal,
        inactivity_timeout: Optional[float] = None,
    ) -> None:
        """Blocks while the watch runs, calling ``on_event(type, object)`` per event; returns when
        the server closes the stream or ``signal`` aborts, raises on any other end."""
        ...


def _query_string(query: Optional[Query]) -> str:
    pairs = []
    for key, value in (query or {}).items():
        if value is None:
            continue
        if isinstance(value, bool):
            value = "true" if value else "false"  # as JavaScript's String(true)
        pairs.append((key, str(value)))
    return urllib.parse.urlencode(pairs)


def _parse_body(data: bytes) -> Any:
    """A response body as JSON; plain text (a path the server does not serve) becomes the message."""
    if not data:
        return None
    text = data.decode("utf-8", "replace")
    try:
        return json.loads(text)
    except ValueError:
        return {"message": text.strip()[:200]}


class _HTTPSConnection(http.client.HTTPSConnection):
    """Lets ``tls-server-name`` differ from the host connected to."""

    def __init__(self, host: str, port: int | None, *, context: ssl.SSLContext, timeout: float, server_hostname: str | None) -> None:
        super().__init__(host, port, timeout=timeout, context=context)
        self._server_hostname = server_hostname
        self._ssl_context = context

    def connect(self) -> None:
        sock = socket.create_connection((self.host, self.port), self.timeout, self.source_address)
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except OSError:
            pass
        self.sock = self._ssl_context.wrap_socket(sock, server_hostname=self._server_hostname or self.host)


class ApiClient:
    """JSON GET, merge PATCH and watch against one API server. Thread-safe: the status writer, the
    watch and the agent's thread each use it."""

    def __init__(self, config: ClusterConfig | None = None) -> None:
        self.config = config if config is not None else load_config()
        url = urllib.parse.urlsplit(self.config.server)
        if url.scheme not in ("http", "https") or not url.hostname:
            raise ValueError(f"unsupported API server address {self.config.server!r}")
        self._https = url.scheme == "https"
        self._host = url.hostname
        self._port = url.port
        self._prefix = url.path.rstrip("/")
        self._idle: list[http.client.HTTPConnection] = []
        self._lock = threading.Lock()
        self._closed = False

    def close(self) -> None:
        """Closes the kept-alive connections (a watch closes its own when it ends)."""
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()

    # -- the three calls -------------------------------------------------------------------------

    def get(self, path: str, query: Optional[Query] = None) -> Any:
        return self._json("GET", path, query)

    def merge_patch(self, path: str, patch: Any, query: Optional[Query] = None) -> Any:
        return self._json("PATCH", path, query, _json.dumps(patch).encode("utf-8"), MERGE_PATCH)

    def watch(
        self,
        path: str,
        query: Query,
        on_event: Callable[[str, Json], None],
        signal: AbortSignal,
        inactivity_timeout: Optional[float] = None,
    ) -> None:
        timeout = WATCH_INACTIVITY_S if inactivity_timeout is None else inactivity_timeout
        conn = self._connect(timeout)

        def shut(_reason: BaseException | None) -> None:
            sock = conn.sock
            if sock is not None:
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

        remove = signal.add_listener(shut)
        try:
            if signal.aborted:
                return
            response = self._send(conn, "GET", path, {**query, "watch": True}, None, None, allow_reuse_retry=False)
            if signal.aborted:
                return
            if response.status != 200:
                raise ApiError("GET", path, response.status, _parse_body(response.read()), response.getheader("Retry-After"))
            while not signal.aborted:
                try:
                    line = response.readline()
                except (socket.timeout, TimeoutError) as err:
                    raise TimeoutError(f"watch of {path}: nothing received for {timeout} s") from err
                except (OSError, http.client.HTTPException, ValueError):
                    if signal.aborted:
                        return
                    raise
                if not line:
                    return  # the server closed the watch
                text = line.strip()
                if not text:
                    continue
                # A line that is not an event, or a handler that raises, does not end the watch:
                # ending it would relist and hand the same event over again.
                try:
                    event = json.loads(text)
                    if isinstance(event, dict) and isinstance(event.get("type"), str):
                        obj = event.get("object")
                        on_event(event["type"], obj if isinstance(obj, dict) else {})
                except Exception:  # noqa: BLE001
                    pass
        finally:
            remove()
            conn.close()

    # -- plumbing --------------------------------------------------------------------------------

    def _connect(self, timeout: float) -> http.client.HTTPConnection:
        if self._https:
            context = self.config.ssl_context()
            assert context is not None
            return _HTTPSConnection(self._host, self._port, context=context, timeout=timeout, server_hostname=self.config.tls_server_name)
        return http.client.HTTPConnection(self._host, self._port, timeout=timeout)

    def _json(self, method: str, path: str, query: Optional[Query], body: bytes | None = None, content_type: str | None = None) -> Any:
        with self._lock:
            conn = self._idle.pop() if self._idle else None
        reused = conn is not None
        if conn is None:
            conn = self._connect(REQUEST_TIMEOUT_S)
        try:
            response = self._send(conn, method, path, query, body, content_type, allow_reuse_retry=reused)
            data = response.read()
        except BaseException:
            conn.close()
            raise
        with self._lock:
            keep = not response.will_close and not self._closed and len(self._idle) < 4
            if keep:
                self._idle.append(conn)
        if not keep:
            conn.close()
        if response.status < 200 or response.status > 299:
            raise ApiError(method, path, response.status, _parse_body(data), response.getheader("Retry-After"))
        if not data:
            return None
        try:
            return json.loads(data)
        except ValueError as err:
            raise ValueError(f"{method} {path}: response is not JSON") from err

    def _send(
        self,
        conn: http.client.HTTPConnection,
        method: str,
        path: str,
        query: Optional[Query],
        body: bytes | None,
        content_type: str | None,
        *,
        allow_reuse_retry: bool,
    ) -> http.client.HTTPResponse:
        """One request; a 401 is tried once more with credentials read afresh (a rotated token),
        and a kept-alive connection the server had already closed once more on a new one."""
        qs = _query_string(query)
        target = self._prefix + path + (f"?{qs}" if qs else "")
        refreshed = False
        while True:
            headers = {"Accept": "application/json", "User-Agent": "agent-watchdog-sandbox-python"}
            auth = self.config.authorization(refresh=refreshed)
            if auth:
                headers["Authorization"] = auth
            if body is not None:
                headers["Content-Type"] = content_type or "application/json"
            try:
                conn.request(method, target, body=body, headers=headers)
                response = conn.getresponse()
            except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError):
                if not allow_reuse_retry:
                    raise
                allow_reuse_retry = False
                conn.close()  # http.client reconnects on the next request
                continue
            if response.status == 401 and not refreshed:
                response.read()
                refreshed = True
                continue
            return response
