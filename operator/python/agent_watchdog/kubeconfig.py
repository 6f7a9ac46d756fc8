"""Where the API server is and how to prove who we are, from the standard library alone.

Sources, in this order (the TypeScript SDK's client-node ``loadFromDefault`` order, with one
explicit override in front):

1. ``AGENT_WATCHDOG_KUBECONFIG_JSON``: a whole kubeconfig as JSON text in the environment, for
   launchers that would rather not write a file.
2. ``KUBECONFIG``: one or more files (``os.pathsep``-separated, merged as kubectl merges them: the
   first file that names a current-context wins, and the first definition of a name wins).
3. ``~/.kube/config``.
4. In-cluster: ``KUBERNETES_SERVICE_HOST``/``KUBERNETES_SERVICE_PORT``, the service account's
   ``ca.crt`` and its token, which is read again (the kubelet rotates projected tokens) at least
   every minute and at once after a 401.

Kubeconfig files may be JSON (which is also YAML) or YAML. The standard library has no YAML
parser, and a dependency is not an option for an SDK that must run in any agent image, so
:func:`parse_yaml` reads the subset kubeconfig files use: block mappings and sequences (including
kubectl's sequences at their key's indentation), plain, single- and double-quoted scalars, ``|``
and ``>`` block scalars, comments, and one-line flow collections such as ``{}`` and ``[]``. That
covers what kubectl, kind, k3s, client-go and this project's control plane write. Anchors,
aliases, tags and multi-line flow collections are refused with a message that says to use JSON.

Supported user credentials: ``token``, ``tokenFile``, ``client-certificate(-data)`` with
``client-key(-data)``, and ``username``/``password``. ``exec`` and ``auth-provider`` plugins are
not supported: they are refused with a clear error rather than silently ignored. Cluster fields:
``server``, ``certificate-authority(-data)``, ``insecure-skip-tls-verify`` and
``tls-server-name``; ``proxy-url`` is not supported.
"""

from __future__ import annotations

import base64
import json
import os
import re
import shutil
import ssl
import tempfile
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Optional

__all__ = [
    "ClusterConfig",
    "KubeConfigError",
    "KUBECONFIG_JSON_ENV",
    "SERVICE_ACCOUNT_DIR",
    "in_cluster_config",
    "load_config",
    "load_kubeconfig",
    "parse_kubeconfig_text",
    "parse_yaml",
]

KUBECONFIG_JSON_ENV = "AGENT_WATCHDOG_KUBECONFIG_JSON"
SERVICE_ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
#: How long a token read from a file is reused before it is read again.
TOKEN_TTL_S = 60.0


class KubeConfigError(Exception):
    """No usable credentials, or a kubeconfig this SDK cannot read."""


# ---------------------------------------------------------------------------------------------
# a YAML subset


class _Line:
    __slots__ = ("indent", "text", "number")

    def __init__(self, indent: int, text: str, number: int) -> None:
        self.indent = indent
        self.text = text
        self.number = number


def _strip_comment(text: str) -> str:
    """Drops a `` #`` comment outside quotes."""
    quote: str | None = None
    i = 0
    while i < len(text):
        ch = text[i]
        if quote:
            if ch == "\\" and quote == '"':
                i += 2
                continue
            if ch == quote:
                if quote == "'" and i + 1 < len(text) and text[i + 1] == "'":
                    i += 2
                    continue
                quote = None
        elif ch in "\"'" and (i == 0 or text[i - 1] in " \t:-[{,"):
            quote = ch
        elif ch == "#" and (i == 0 or text[i - 1] in " \t"):
            return text[:i].rstrip()
        i += 1
    return text.rstrip()


_INT = re.compile(r"^[-+]?(0|[1-9][0-9]*)$")
_FLOAT = re.compile(r"^[-+]?(\.[0-9]+|(0|[1-9][0-9]*)\.[0-9]*|(0|[1-9][0-9]*)(\.[0-9]*)?[eE][-+]?[0-9]+)$")
_ESCAPES = {"0": "\0", "a": "\a", "b": "\b", "t": "\t", "\t": "\t", "n": "\n", "v": "\v", "f": "\f", "r": "\r", "e": "\x1b", " ": " ", '"': '"', "/": "/", "\\": "\\", "N": "\x85", "_": "\xa0"}


class YamlError(KubeConfigError):
    pass


def _double_quoted(body: str, number: int) -> str:
    out: list[str] = []
    i = 0
    while i < len(body):
        ch = body[i]
        if ch == "\\":
            if i + 1 >= len(body):
                raise YamlError(f"line {number}: a backslash ends a double-quoted string")
            esc = body[i + 1]
            if esc in _ESCAPES:
                out.append(_ESCAPES[esc])
                i += 2
                continue
            width = {"x": 2, "u": 4, "U": 8}.get(esc)
            if width is None:
                raise YamlError(f"line {number}: unknown escape \\{esc}")
            out.append(chr(int(body[i + 2 : i + 2 + width], 16)))
            i += 2 + width
            continue
        out.append(ch)
        i += 1
    return "".join(out)


def _scalar(text: str, number: int) -> Any:
    text = text.strip()
    if not text:
        return None
    if text[0] == '"':
        if len(text) < 2 or text[-1] != '"':
            raise YamlError(f"line {number}: unterminated double-quoted string (multi-line strings are not supported; use JSON)")
        return _double_quoted(text[1:-1], number)
    if text[0] == "'":
        if len(text) < 2 or text[-1] != "'":
            raise YamlError(f"line {number}: unterminated single-quoted string (multi-line strings are not supported; use JSON)")
        return text[1:-1].replace("''", "'")
    if text[0] in "[{":
        value, end = _flow(text, 0, number)
        if text[end:].strip():
            raise YamlError(f"line {number}: unexpected text after a flow collection")
        return value
    if text[0] in "&*!%@`":
        raise YamlError(f"line {number}: anchors, aliases and tags are not supported by this parser; write the kubeconfig as JSON")
    if text in ("~", "null", "Null", "NULL"):
        return None
    if text in ("true", "True", "TRUE"):
        return True
    if text in ("false", "False", "FALSE"):
        return False
    if _INT.match(text):
        return int(text)
    if _FLOAT.match(text) and any(c.isdigit() for c in text):
        return float(text)
    return text


def _flow(text: str, i: int, number: int) -> tuple[Any, int]:
    """A one-line flow collection or scalar starting at ``text[i]``."""
    while i < len(text) and text[i] == " ":
        i += 1
    if i >= len(text):
        raise YamlError(f"line {number}: unterminated flow collection (use JSON)")
    ch = text[i]
    if ch in "[{":
        closing = "]" if ch == "[" else "}"
        items: list[Any] = []
        mapping: dict[Any, Any] = {}
        i += 1
        while True:
            while i < len(text) and text[i] == " ":
                i += 1
            if i < len(text) and text[i] == closing:
                return (items if ch == "[" else mapping), i + 1
            if ch == "[":
                value, i = _flow(text, i, number)
                items.append(value)
            else:
                key, i = _flow(text, i, number)
                while i < len(text) and text[i] == " ":
                    i += 1
                if i < len(text) and text[i] == ":":
                    value, i = _flow(text, i + 1, number)
                else:
                    value = None
                mapping[key] = value
            while i < len(text) and text[i] == " ":
                i += 1
            if i < len(text) and text[i] == ",":
                i += 1
            elif i < len(text) and text[i] == closing:
                continue
            else:
                raise YamlError(f"line {number}: malformed flow collection (use JSON)")
    if ch in "\"'":
        j = i + 1
        while j < len(text):
            if text[j] == "\\" and ch == '"':
                j += 2
                continue
            if text[j] == ch:
                if ch == "'" and j + 1 < len(text) and text[j + 1] == "'":
                    j += 2
                    continue
                break
            j += 1
        return _scalar(text[i : j + 1], number), j + 1
    j = i
    while j < len(text) and text[j] not in ",]}" and not (text[j] == ":" and (j + 1 == len(text) or text[j + 1] in " ,]}")):
        j += 1
    return _scalar(text[i:j], number), j


def _split_key(text: str, number: int) -> tuple[Any, str] | None:
    """``key: rest`` -> (key, rest); None when the text is not a mapping entry."""
    if text[0] in "\"'":
        quote = text[0]
        j = 1
        while j < len(text):
            if text[j] == "\\" and quote == '"':
                j += 2
                continue
            if text[j] == quote:
                if quote == "'" and j + 1 < len(text) and text[j + 1] == "'":
                    j += 2
                    continue
                break
            j += 1
        rest = text[j + 1 :]
        if rest.startswith(":") and (len(rest) == 1 or rest[1] == " "):
            return _scalar(text[: j + 1], number), rest[1:].strip()
        return None
    if text[0] in "[{":
        return None
    m = re.search(r":( |$)", text)
    if not m:
        return None
    key = text[: m.start()].strip()
    if text.startswith("? "):
        raise YamlError(f"line {number}: complex keys are not supported (use JSON)")
    return key, text[m.end() :].strip()


class _Parser:
    def __init__(self, text: str) -> None:
        self.raw = text.splitlines()
        self.lines: list[_Line] = []
        self.raw_index: list[int] = []
        for number, raw in enumerate(self.raw, start=1):
            stripped = raw.lstrip(" ")
            if "\t" in raw[: len(raw) - len(stripped)]:
                raise YamlError(f"line {number}: tabs are not allowed in indentation")
            content = _strip_comment(stripped)
            if not content or content in ("---", "..."):
                if content in ("---", "...") and self.lines:
                    if content == "---":
                        raise YamlError(f"line {number}: more than one YAML document")
                continue
            if content.startswith("%"):
                continue  # a directive (%YAML 1.2)
            self.lines.append(_Line(len(raw) - len(stripped), content, number))

    def parse(self) -> Any:
        if not self.lines:
            return None
        value, i = self.block(0, self.lines[0].indent)
        if i != len(self.lines):
            line = self.lines[i]
            raise YamlError(f"line {line.number}: unexpected indentation")
        return value

    def block(self, i: int, indent: int) -> tuple[Any, int]:
        line = self.lines[i]
        if line.text == "-" or line.text.startswith("- "):
            return self.sequence(i, indent)
        if _split_key(line.text, line.number) is not None:
            return self.mapping(i, indent)
        if i + 1 < len(self.lines) and self.lines[i + 1].indent > indent:
            raise YamlError(f"line {line.number}: multi-line plain scalars are not supported (use JSON)")
        return _scalar(line.text, line.number), i + 1

    def sequence(self, i: int, indent: int) -> tuple[list[Any], int]:
        items: list[Any] = []
        while i < len(self.lines):
            line = self.lines[i]
            if line.indent != indent or not (line.text == "-" or line.text.startswith("- ")):
                break
            rest = line.text[1:].lstrip(" ")
            if not rest:
                if i + 1 < len(self.lines) and self.lines[i + 1].indent > indent:
                    value, i = self.block(i + 1, self.lines[i + 1].indent)
                else:
                    value, i = None, i + 1
                items.append(value)
                continue
            # "- key: value" opens a mapping whose entries line up with "key"
            offset = indent + (len(line.text) - len(rest))
            self.lines[i] = _Line(offset, rest, line.number)
            value, i = self.block(i, offset)
            items.append(value)
        return items, i

    def mapping(self, i: int, indent: int) -> tuple[dict[Any, Any], int]:
        result: dict[Any, Any] = {}
        while i < len(self.lines):
            line = self.lines[i]
            if line.indent != indent:
                if line.indent > indent:
                    raise YamlError(f"line {line.number}: unexpected indentation")
                break
            if line.text == "-" or line.text.startswith("- "):
                break  # a sequence at its key's indentation has ended the value
            split = _split_key(line.text, line.number)
            if split is None:
                raise YamlError(f"line {line.number}: expected 'key: value'")
            key, rest = split
            if key in result:
                raise YamlError(f"line {line.number}: duplicate key {key!r}")
            if rest and rest[0] in "|>":
                result[key], i = self.block_scalar(i, indent, rest)
                continue
            if rest:
                result[key] = _scalar(rest, line.number)
                i += 1
                continue
            nxt = self.lines[i + 1] if i + 1 < len(self.lines) else None
            if nxt is not None and (nxt.indent > indent or (nxt.indent == indent and (nxt.text == "-" or nxt.text.startswith("- ")))):
                result[key], i = self.block(i + 1, nxt.indent)
            else:
                result[key], i = None, i + 1
        return result, i

    def block_scalar(self, i: int, indent: int, header: str) -> tuple[str, int]:
        line = self.lines[i]
        style, chomp = header[0], ""
        for ch in header[1:].strip():
            if ch in "+-":
                chomp = ch
            elif not ch.isdigit():
                raise YamlError(f"line {line.number}: malformed block scalar header")
        start = line.number  # raw lines after this one (1-based number == 0-based next index)
        body: list[str] = []
        end = start
        block_indent: int | None = None
        while end < len(self.raw):
            raw = self.raw[end]
            if raw.strip() == "":
                body.append("")
                end += 1
                continue
            this_indent = len(raw) - len(raw.lstrip(" "))
            if this_indent <= indent:
                break
            if block_indent is None:
                block_indent = this_indent
            if this_indent < block_indent:
                break
            body.append(raw[block_indent:])
            end += 1
        while i < len(self.lines) and self.lines[i].number <= end:
            i += 1
        trailing = 0
        while body and body[-1] == "":
            body.pop()
            trailing += 1
        if style == "|":
            text = "\n".join(body)
        else:
            text = ""
            for j, part in enumerate(body):
                if j == 0:
                    text = part
                elif part == "" or body[j - 1] == "":
                    text += "\n" if part == "" else part
                else:
                    text += " " + part
        if chomp == "-":
            return text, i
        if chomp == "+":
            return text + "\n" * (1 + trailing), i
        return (text + "\n") if body else "", i


def parse_yaml(text: str) -> Any:
    """The subset of YAML that kubeconfig files use (see the module's docstring)."""
    return _Parser(text).parse()


# ---------------------------------------------------------------------------------------------
# the configuration


@dataclass
class ClusterConfig:
    """One API server and the credentials for it."""

    server: str
    ca_file: Optional[str] = None
    ca_data: Optional[bytes] = None
    insecure_skip_tls_verify: bool = False
    tls_server_name: Optional[str] = None
    client_cert_file: Optional[str] = None
    client_key_file: Optional[str] = None
    client_cert_data: Optional[bytes] = None
    client_key_data: Optional[bytes] = None
    token: Optional[str] = None
    token_file: Optional[str] = None
    username: Optional[str] = None
    password: Optional[str] = None
    namespace: Optional[str] = None
    #: Where this came from, for logs and errors (never the secrets).
    source: str = ""
    _ssl: Optional[ssl.SSLContext] = field(default=None, repr=False)
    _token_cache: Optional[tuple[str, float]] = field(default=None, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @property
    def is_https(self) -> bool:
        return self.server.lower().startswith("https://")

    def ssl_context(self) -> ssl.SSLContext | None:
        """Built once: the TLS material does not change while the process runs."""
        if not self.is_https:
            return None
        with self._lock:
            if self._ssl is None:
                self._ssl = self._build_ssl()
            return self._ssl

    def _build_ssl(self) -> ssl.SSLContext:
        try:
            if self.ca_data is not None:
                ctx = ssl.create_default_context(cadata=self.ca_data.decode("ascii", "replace"))
            elif self.ca_file:
                ctx = ssl.create_default_context(cafile=self.ca_file)
            else:
                ctx = ssl.create_default_context()
        except (ssl.SSLError, OSError, ValueError) as err:
            raise KubeConfigError(f"{self.source}: cannot load the certificate authority: {err}") from err
        # Python 3.13 verifies strictly (RFC 5280) by default; kubectl (Go) and the TypeScript SDK
        # (Node) do not, and clusters' own CAs are not always strict. Verify as they do.
        strict = getattr(ssl, "VERIFY_X509_STRICT", 0)
        if strict:
            ctx.verify_flags &= ~strict
        if self.insecure_skip_tls_verify:
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
        cert_given = self.client_cert_data is not None or self.client_cert_file
        key_given = self.client_key_data is not None or self.client_key_file
        if cert_given or key_given:
            if not (cert_given and key_given):
                raise KubeConfigError(f"{self.source}: a client certificate needs both the certificate and its key")
            self._load_client_cert(ctx)
        return ctx

    def _load_client_cert(self, ctx: ssl.SSLContext) -> None:
        # ssl loads certificates and keys only from files: embedded data goes through a private
        # temporary directory that is removed at once.
        tmp: str | None = None
        try:
            cert, key = self.client_cert_file, self.client_key_file
            if self.client_cert_data is not None or self.client_key_data is not None:
                tmp = tempfile.mkdtemp(prefix="agent-watchdog-")
                if self.client_cert_data is not None:
                    cert = os.path.join(tmp, "client.crt")
                    _write_private(cert, self.client_cert_data)
                if self.client_key_data is not None:
                    key = os.path.join(tmp, "client.key")
                    _write_private(key, self.client_key_data)
            ctx.load_cert_chain(certfile=str(cert), keyfile=str(key))
        except (ssl.SSLError, OSError) as err:
            raise KubeConfigError(f"{self.source}: cannot load the client certificate: {err}") from err
        finally:
            if tmp:
                shutil.rmtree(tmp, ignore_errors=True)

    def authorization(self, refresh: bool = False) -> str | None:
        """The Authorization header, if any. A token file is read again after TOKEN_TTL_S or
        when ``refresh`` (after a 401): projected service-account tokens rotate."""
        if self.token_file:
            with self._lock:
                cached = self._token_cache
                if refresh or cached is None or time.monotonic() - cached[1] > TOKEN_TTL_S:
                    try:
                        with open(self.token_file, encoding="utf-8") as f:
                            token = f.read().strip()
                    except OSError as err:
                        if cached is None:
                            raise KubeConfigError(f"{self.source}: cannot read the token file {self.token_file}: {err}") from err
                        token = cached[0]  # keep the last good token
                    self._token_cache = cached = (token, time.monotonic())
            return f"Bearer {cached[0]}" if cached[0] else None
        if self.token:
            return f"Bearer {self.token}"
        if self.username is not None and self.password is not None:
            raw = f"{self.username}:{self.password}".encode("utf-8")
            return "Basic " + base64.b64encode(raw).decode("ascii")
        return None


def _write_private(path: str, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)


def _b64(value: Any, what: str, source: str) -> bytes:
    try:
        return base64.b64decode(str(value).strip(), validate=False)
    except (ValueError, TypeError) as err:
        raise KubeConfigError(f"{source}: {what} is not base64") from err


def in_cluster_config(env: Mapping[str, str] | None = None, service_account_dir: str = SERVICE_ACCOUNT_DIR) -> ClusterConfig | None:
    """The pod's own credentials, or None outside a pod."""
    env = os.environ if env is None else env
    host, port = env.get("KUBERNETES_SERVICE_HOST"), env.get("KUBERNETES_SERVICE_PORT")
    token_file = os.path.join(service_account_dir, "token")
    if not host or not port or not os.path.exists(token_file):
        return None
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"  # IPv6
    ca_file = os.path.join(service_account_dir, "ca.crt")
    namespace = None
    try:
        with open(os.path.join(service_account_dir, "namespace"), encoding="utf-8") as f:
            namespace = f.read().strip() or None
    except OSError:
        pass
    return ClusterConfig(
        server=f"https://{host}:{port}",
        ca_file=ca_file if os.path.exists(ca_file) else None,
        token_file=token_file,
        namespace=namespace,
        source="in-cluster service account",
    )


def parse_kubeconfig_text(text: str, source: str) -> dict[str, Any]:
    """JSON when it parses as JSON, else the YAML subset."""
    stripped = text.lstrip()
    if stripped.startswith("{"):
        try:
            doc = json.loads(text)
        except ValueError as err:
            raise KubeConfigError(f"{source}: not valid JSON: {err}") from err
    else:
        try:
            doc = parse_yaml(text)
        except YamlError as err:
            raise KubeConfigError(f"{source}: {err}") from err
    if doc is None:
        doc = {}
    if not isinstance(doc, dict):
        raise KubeConfigError(f"{source}: a kubeconfig is a mapping")
    return doc


def _named(doc: Mapping[str, Any], section: str, inner: str, base: str | None) -> dict[str, tuple[dict[str, Any], str | None]]:
    out: dict[str, tuple[dict[str, Any], str | None]] = {}
    for entry in doc.get(section) or []:
        if isinstance(entry, Mapping) and isinstance(entry.get("name"), str):
            body = entry.get(inner)
            out.setdefault(entry["name"], (dict(body) if isinstance(body, Mapping) else {}, base))
    return out


def _resolve(path: Any, base: str | None) -> str | None:
    if not path:
        return None
    path = os.path.expanduser(str(path))
    if base and not os.path.isabs(path):
        path = os.path.join(base, path)
    return path


def config_from_documents(docs: list[tuple[dict[str, Any], str | None]], source: str, context_name: str | None = None) -> ClusterConfig:
    """Merges kubeconfig documents (each with the directory its relative paths start from) and
    returns the current context's cluster and user."""
    clusters: dict[str, tuple[dict[str, Any], str | None]] = {}
    users: dict[str, tuple[dict[str, Any], str | None]] = {}
    contexts: dict[str, tuple[dict[str, Any], str | None]] = {}
    current = context_name
    for doc, base in docs:
        for name, value in _named(doc, "clusters", "cluster", base).items():
            clusters.setdefault(name, value)
        for name, value in _named(doc, "users", "user", base).items():
            users.setdefault(name, value)
        for name, value in _named(doc, "contexts", "context", base).items():
            contexts.setdefault(name, value)
        if not current and isinstance(doc.get("current-context"), str) and doc["current-context"]:
            current = doc["current-context"]
    if not current:
        raise KubeConfigError(f"{source}: no current-context")
    if current not in contexts:
        raise KubeConfigError(f"{source}: context {current!r} is not defined")
    context, _ = contexts[current]
    cluster_name, user_name = context.get("cluster"), context.get("user")
    if cluster_name not in clusters:
        raise KubeConfigError(f"{source}: cluster {cluster_name!r} of context {current!r} is not defined")
    cluster, cluster_base = clusters[cluster_name]
    user, user_base = users.get(user_name, ({}, None)) if user_name else ({}, None)
    if user_name and user_name not in users:
        raise KubeConfigError(f"{source}: user {user_name!r} of context {current!r} is not defined")
    server = cluster.get("server")
    if not isinstance(server, str) or not server:
        raise KubeConfigError(f"{source}: cluster {cluster_name!r} has no server")
    if cluster.get("proxy-url"):
        raise KubeConfigError(f"{source}: proxy-url is not supported by the Python SDK")
    if user.get("exec") or user.get("auth-provider"):
        raise KubeConfigError(
            f"{source}: user {user_name!r} uses an exec or auth-provider plugin, which the Python SDK does not support; "
            "use a token, a token file or a client certificate"
        )
    where = f"{source} (context {current})"
    config = ClusterConfig(
        server=server.rstrip("/"),
        ca_file=_resolve(cluster.get("certificate-authority"), cluster_base),
        ca_data=_b64(cluster["certificate-authority-data"], "certificate-authority-data", where) if cluster.get("certificate-authority-data") else None,
        insecure_skip_tls_verify=cluster.get("insecure-skip-tls-verify") in (True, "true"),
        tls_server_name=cluster.get("tls-server-name") or None,
        client_cert_file=_resolve(user.get("client-certificate"), user_base),
        client_key_file=_resolve(user.get("client-key"), user_base),
        client_cert_data=_b64(user["client-certificate-data"], "client-certificate-data", where) if user.get("client-certificate-data") else None,
        client_key_data=_b64(user["client-key-data"], "client-key-data", where) if user.get("client-key-data") else None,
        token=str(user["token"]) if user.get("token") else None,
        token_file=_resolve(user.get("tokenFile"), user_base),
        username=str(user["username"]) if user.get("username") is not None else None,
        password=str(user["password"]) if user.get("password") is not None else None,
        namespace=context.get("namespace") or None,
        source=where,
    )
    if config.token:
        config.token_file = None  # a token given inline wins, as in client-go
    return config


def load_kubeconfig(paths: list[str], context_name: str | None = None) -> ClusterConfig:
    docs: list[tuple[dict[str, Any], str | None]] = []
    for path in paths:
        try:
            with open(path, encoding="utf-8") as f:
                text = f.read()
        except FileNotFoundError:
            continue  # kubectl skips files of KUBECONFIG that do not exist
        except OSError as err:
            raise KubeConfigError(f"cannot read kubeconfig {path}: {err}") from err
        docs.append((parse_kubeconfig_text(text, path), os.path.dirname(os.path.abspath(path))))
    if not docs:
        raise KubeConfigError(f"no kubeconfig file found at {os.pathsep.join(paths)}")
    return config_from_documents(docs, "kubeconfig " + os.pathsep.join(paths), context_name)


def load_config(env: Mapping[str, str] | None = None) -> ClusterConfig:
    """The API server and credentials, from the sources listed in the module's docstring."""
    env = os.environ if env is None else env
    inline = env.get(KUBECONFIG_JSON_ENV)
    if inline:
        try:
            doc = json.loads(inline)
        except ValueError as err:
            raise KubeConfigError(f"{KUBECONFIG_JSON_ENV} is not valid JSON: {err}") from err
        if not isinstance(doc, dict):
            raise KubeConfigError(f"{KUBECONFIG_JSON_ENV}: a kubeconfig is a JSON object")
        return config_from_documents([(doc, os.getcwd())], KUBECONFIG_JSON_ENV)
    listed = [p for p in (env.get("KUBECONFIG") or "").split(os.pathsep) if p]
    if listed:
        return load_kubeconfig(listed)
    home = env.get("HOME") or os.path.expanduser("~")
    default = os.path.join(home, ".kube", "config")
    if os.path.exists(default):
        return load_kubeconfig([default])
    cluster = in_cluster_config(env)
    if cluster is not None:
        return cluster
    raise KubeConfigError(
        "no credentials: set KUBECONFIG (or AGENT_WATCHDOG_KUBECONFIG_JSON), or run in a pod with a service account token"
    )
