"""A small fault-injecting proxy in front of the REAL kube-apiserver: only what a real API server will not do on
request -- a 5xx or a 429 with Retry-After now, a slow answer, a connection cut mid-answer, a watch stream that
ends after K events -- and, beside it, a record of every call that passed (what the loopback server's call log
gave the old tests: "a refused request makes no API call").

It listens on loopback with its own serving certificate issued by the cluster's CA (so a client that trusts the
cluster's ``ca.crt`` trusts it, as it trusts the real API server), and forwards every request over HTTPS to the
real API server with the caller's own ``Authorization`` header: the real authenticator and RBAC authorizer still
decide. Streaming answers (watches, chunked lists) are relayed chunk by chunk as they arrive.

A fault answers with a real ``Status`` object, as kube-apiserver writes it: ``kind: Status``, ``status:
Failure``, the ``reason`` of k8s.io/apimachinery pkg/apis/meta/v1/types.go (``InternalError``,
``ServiceUnavailable``, ``TooManyRequests``, ...), ``code``, and for a retry delay ``details.retryAfterSeconds``
together with the ``Retry-After`` header (k8s.io/apiserver pkg/endpoints/handlers/responsewriters/writers.go
sets the header from the details).

Rules are chosen per test::

    proxy.fail("POST", r"/podsnapshotmanualtriggers$", 500)        # the next matching call
    proxy.fail("GET", r"/pods/notebook-0$", 429, retry_after=2, times=3)
    proxy.delay("GET", r"/podsnapshotmanualtriggers/", 3.0)
    proxy.hang_up("GET", r"/pods/notebook-0$")                       # headers, half the body, then closed
    proxy.cut_watch(r"/podsnapshots", after_events=1)                 # a watch ends after one event

A rule matches a method (``*`` for any) and a regular expression searched in the path (without the query) and
counts down ``times`` matching calls.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import re
import select
import socket
import socketserver
import ssl
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import Any
from urllib.parse import parse_qs, urlsplit

from .control_plane import Cluster

#: StatusReason per code (k8s.io/apimachinery pkg/apis/meta/v1/types.go, "StatusReason...").
REASONS = {
    400: "BadRequest",
    401: "Unauthorized",
    403: "Forbidden",
    404: "NotFound",
    409: "Conflict",
    410: "Expired",
    422: "Invalid",
    429: "TooManyRequests",
    500: "InternalError",
    503: "ServiceUnavailable",
    504: "Timeout",
}

#: Hop-by-hop headers (RFC 9110 §7.6.1): the proxy's own business on each side, never forwarded.
_HOP = {"connection", "keep-alive", "proxy-connection", "te", "trailer", "transfer-encoding", "upgrade", "host"}


@dataclass
class Call:
    """One request that reached the proxy, as RBAC would name it (the verb from the method, the path and
    ``watch``; the object's name for a watch from the field selector ``metadata.name``)."""

    method: str
    path: str
    query: dict[str, list[str]]
    group: str
    version: str
    resource: str
    namespace: str | None
    name: str | None
    subresource: str | None
    verb: str
    status: int = 0
    injected: str | None = None  # the fault that answered instead of the API server

    @property
    def triple(self) -> tuple[str, str, str]:
        return (self.group, self.resource, self.verb)


def parse_call(method: str, target: str) -> Call:
    split = urlsplit(target)
    query = parse_qs(split.query, keep_blank_values=True)
    parts = [p for p in split.path.split("/") if p]
    group = version = resource = ""
    namespace = name = subresource = None
    rest: list[str] = []
    if parts[:1] == ["api"] and len(parts) >= 2:
        version, rest = parts[1], parts[2:]
    elif parts[:1] == ["apis"] and len(parts) >= 3:
        group, version, rest = parts[1], parts[2], parts[3:]
    watch_path = bool(rest) and rest[0] == "watch"  # the deprecated /watch/ paths
    if watch_path:
        rest = rest[1:]
    if len(rest) >= 2 and rest[0] == "namespaces" and len(rest) != 2:
        namespace, rest = rest[1], rest[2:]
    if rest:
        resource = rest[0]
        name = rest[1] if len(rest) > 1 else None
        subresource = rest[2] if len(rest) > 2 else None
    watching = watch_path or query.get("watch", [""])[0] in ("true", "1")
    if name is None:
        for selector in query.get("fieldSelector", []):
            for term in selector.split(","):
                if term.startswith("metadata.name="):
                    name = term.split("=", 1)[1]
    verb = {
        "GET": "watch" if watching else ("get" if rest[1:] else "list"),
        "POST": "create",
        "PUT": "update",
        "PATCH": "patch",
        "DELETE": "delete" if rest[1:] else "deletecollection",
    }.get(method, method.lower())
    return Call(method, split.path, query, group, version, resource, namespace, name, subresource, verb)


@dataclass
class Rule:
    method: str
    pattern: re.Pattern[str]
    times: int
    kind: str  # "fail" | "delay" | "hang_up" | "cut_watch"
    status: int = 500
    message: str = ""
    retry_after: int | None = None
    seconds: float = 0.0
    after_events: int = 0
    abrupt: bool = False
    matched: int = 0

    def matches(self, call: Call) -> bool:
        return (self.method in ("*", call.method)) and self.pattern.search(call.path) is not None


def status_body(code: int, message: str, retry_after: int | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": REASONS.get(code, "Unknown"),
        "code": code,
    }
    if retry_after is not None:
        body["details"] = {"retryAfterSeconds": retry_after}
    return body


@dataclass
class _State:
    rules: list[Rule] = field(default_factory=list)
    calls: list[Call] = field(default_factory=list)
    open_watches: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def setup(self) -> None:
        self.request.settimeout(30)
        self.request.do_handshake()  # here, in the connection's thread, not in the accept loop
        self.request.settimeout(None)
        super().setup()
        self._upstream: http.client.HTTPSConnection | None = None

    def log_message(self, format: str, *args: Any) -> None:  # the tests read the call record instead
        pass

    def finish(self) -> None:
        with contextlib.suppress(OSError):
            super().finish()
        if self._upstream is not None:
            self._upstream.close()

    def do_GET(self) -> None:
        self._handle()

    do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = do_OPTIONS = do_GET

    # -- one request -------------------------------------------------------------
    def _body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            data = b""
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    return data
                data += self.rfile.read(size)
                self.rfile.readline()
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def _handle(self) -> None:
        state = self.server.state
        body = self._body()
        call = parse_call(self.command, self.path)
        rule = None
        with state.lock:
            state.calls.append(call)
            for candidate in state.rules:
                if candidate.times > 0 and candidate.matches(call):
                    candidate.times -= 1
                    candidate.matched += 1
                    rule = candidate
                    break
        if rule is not None and rule.kind == "fail":
            call.injected, call.status = "fail", rule.status
            time.sleep(rule.seconds)
            self._answer_status(rule.status, rule.message or f"injected by the test's fault proxy ({rule.status})",
                                rule.retry_after)  # fmt: skip
            return
        if rule is not None and rule.kind == "delay":
            call.injected = "delay"
            time.sleep(rule.seconds)
        try:
            answer = self._forward(body)
        except (OSError, http.client.HTTPException) as exc:
            call.status = 502
            self._answer_status(503, f"the fault proxy could not reach the API server: {exc}")
            return
        call.status = answer.status
        if rule is not None and rule.kind == "hang_up":
            call.injected = "hang_up"
            self._hang_up(answer)
            return
        watching = call.verb == "watch"
        cut = rule.after_events if rule is not None and rule.kind == "cut_watch" else None
        if cut is not None:
            call.injected = "cut_watch"
        self._relay(answer, watching, cut, rule.abrupt if rule is not None else False)

    def _forward(self, body: bytes) -> http.client.HTTPResponse:
        headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP}
        if body or self.command in ("POST", "PUT", "PATCH"):
            headers["Content-Length"] = str(len(body))
        for attempt in (1, 2):
            if self._upstream is None:
                self._upstream = self.server.upstream()
            try:
                self._upstream.request(self.command, self.path, body=body, headers=headers)
                return self._upstream.getresponse()
            except (ConnectionError, http.client.RemoteDisconnected, http.client.CannotSendRequest):
                # A pooled upstream connection the API server closed meanwhile: one new connection.
                self._upstream.close()
                self._upstream = None
                if attempt == 2:
                    raise
        raise AssertionError("unreachable")

    def _answer_status(self, code: int, message: str, retry_after: int | None = None) -> None:
        data = json.dumps(status_body(code, message, retry_after)).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        if retry_after is not None:
            self.send_header("Retry-After", str(retry_after))
        self.end_headers()
        self.wfile.write(data)

    def _head(self, answer: http.client.HTTPResponse, chunked: bool, length: int | None = None) -> None:
        self.send_response_only(answer.status, answer.reason)
        for name, value in answer.getheaders():
            if name.lower() not in _HOP and name.lower() != "content-length":
                self.send_header(name, value)
        if chunked:
            self.send_header("Transfer-Encoding", "chunked")
        else:
            self.send_header("Content-Length", str(length or 0))
        self.end_headers()

    def _relay(self, answer: http.client.HTTPResponse, watching: bool, cut: int | None, abrupt: bool) -> None:
        if answer.length is not None and not watching:
            data = answer.read()
            self._head(answer, chunked=False, length=len(data))
            self.wfile.write(data)
            return
        self._head(answer, chunked=True)
        state = self.server.state
        relayed = threading.Event()
        if watching:
            with state.lock:
                state.open_watches += 1
            # A caller that hangs up on a watch is otherwise noticed only at the next event: watch its socket.
            threading.Thread(target=self._end_with_caller, args=(relayed,), daemon=True).start()
        events = 0
        try:
            while True:
                # A watch sends one JSON event per line; a line is relayed as soon as it is complete.
                data = answer.readline() if watching else answer.read1(65536)
                if not data:
                    break
                self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                self.wfile.flush()
                events += 1
                if cut is not None and events >= cut:
                    break
            if cut is not None and abrupt:
                self._drop(answer)
                return
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
            if cut is not None:
                self.close_connection = True
                self._drop(answer)
        except OSError:
            # The caller hung up (a long-poll abandoned): the API server's stream goes with it.
            self.close_connection = True
            self._drop(answer)
        finally:
            relayed.set()
            if watching:
                with state.lock:
                    state.open_watches -= 1

    def _end_with_caller(self, relayed: threading.Event) -> None:
        """While a watch is relayed the caller sends nothing; anything readable on its socket (a TLS close_notify,
        the end of the stream) means it hung up: end the API server's stream too, as a direct connection would."""
        upstream = self._upstream
        while not relayed.is_set():
            readable, _, _ = select.select([self.request], [], [], 0.2)
            if readable and not relayed.is_set():
                if upstream is not None and upstream.sock is not None:
                    with contextlib.suppress(OSError):
                        upstream.sock.shutdown(socket.SHUT_RDWR)
                return

    def _hang_up(self, answer: http.client.HTTPResponse) -> None:
        data = answer.read()
        self._head(answer, chunked=False, length=len(data))
        self.wfile.write(data[: len(data) // 2])
        self.wfile.flush()
        self.close_connection = True
        self._drop(None)

    def _drop(self, answer: http.client.HTTPResponse | None) -> None:
        """Close the caller's connection at once (no TLS close_notify) and the upstream one with it."""
        if answer is not None and self._upstream is not None:
            self._upstream.close()
            self._upstream = None
        self.close_connection = True
        with contextlib.suppress(OSError):
            self.request.shutdown(socket.SHUT_RDWR)


class _Server(socketserver.ThreadingMixIn, socketserver.TCPServer):
    daemon_threads = True
    block_on_close = False  # stop() closes the connections; their threads end with them
    allow_reuse_address = True

    def __init__(self, proxy: FaultProxy, context: ssl.SSLContext) -> None:
        self.proxy = proxy
        self.state = proxy.state
        self.context = context
        self.connections: set[socket.socket] = set()
        super().__init__(("127.0.0.1", 0), _Handler)

    def get_request(self) -> tuple[socket.socket, Any]:
        conn, address = self.socket.accept()
        # Headers, chunks and the last chunk go out as separate writes: without TCP_NODELAY, Nagle's algorithm
        # and the caller's delayed ACK hold each answer ~40 ms (a latency the real API server does not add).
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        wrapped = self.context.wrap_socket(conn, server_side=True, do_handshake_on_connect=False)
        self.connections.add(wrapped)
        return wrapped, address

    def shutdown_request(self, request: Any) -> None:
        self.connections.discard(request)
        super().shutdown_request(request)

    def handle_error(self, request: Any, client_address: Any) -> None:
        import sys

        if isinstance(sys.exc_info()[1], OSError):
            return  # the caller hung up (an abandoned long-poll, a client timeout): nothing to say
        super().handle_error(request, client_address)

    def upstream(self) -> http.client.HTTPSConnection:
        return http.client.HTTPSConnection(
            "127.0.0.1", self.proxy.upstream_port, context=self.proxy.client_context, timeout=None
        )


class FaultProxy:
    """``with FaultProxy(cluster) as proxy:`` -- ``proxy.port`` / ``proxy.server`` for the client to use."""

    def __init__(self, cluster: Cluster) -> None:
        if cluster.ca is None:
            raise RuntimeError("the cluster has no CA yet (start it first)")
        self.cluster = cluster
        self.upstream_port = cluster.ports["apiserver"]
        self.state = _State()
        self.client_context = ssl.create_default_context(cafile=str(cluster.ca_file))
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle -----------------------------------------------------------------
    def start(self) -> FaultProxy:
        assert self.cluster.ca is not None
        name = f"fault-proxy-{threading.get_ident()}-{time.monotonic_ns()}"
        cert, key = self.cluster.ca.issue(name, "jupyter-suspend test fault proxy", server_names=("localhost",),
                                          server_ips=("127.0.0.1",))  # fmt: skip
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(cert, key)
        self._server = _Server(self, context)
        self._thread = threading.Thread(target=self._server.serve_forever, name="fault-proxy", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is None:
            return
        self._server.shutdown()
        for conn in list(self._server.connections):
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
        self._server.server_close()
        if self._thread is not None:
            self._thread.join(10)
        self._server = None

    def __enter__(self) -> FaultProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def port(self) -> int:
        assert self._server is not None
        return int(self._server.server_address[1])

    @property
    def server(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    # -- rules -----------------------------------------------------------------------
    def _add(self, method: str, path: str, times: int, kind: str, **options: Any) -> Rule:
        rule = Rule(method.upper(), re.compile(path), times, kind, **options)
        with self.state.lock:
            self.state.rules.append(rule)
        return rule

    def fail(
        self,
        method: str,
        path: str,
        status: int,
        *,
        times: int = 1,
        retry_after: int | None = None,
        message: str = "",
        after: float = 0.0,
    ) -> Rule:
        """The next ``times`` matching calls are answered ``status`` with a Status body (never forwarded), ``after``
        seconds (a slow failure)."""
        return self._add(
            method, path, times, "fail", status=status, retry_after=retry_after, message=message, seconds=after
        )

    def delay(self, method: str, path: str, seconds: float, *, times: int = 1) -> Rule:
        """The next matching calls reach the API server ``seconds`` late (the caller's deadline runs meanwhile)."""
        return self._add(method, path, times, "delay", seconds=seconds)

    def hang_up(self, method: str, path: str, *, times: int = 1) -> Rule:
        """The API server's answer is begun (status, headers, half the body) and the connection closed."""
        return self._add(method, path, times, "hang_up")

    def cut_watch(self, path: str, after_events: int, *, times: int = 1, abrupt: bool = False) -> Rule:
        """A watch stream ends after ``after_events`` events: cleanly (the last chunk, as the API server ends a
        watch at its timeout) or ``abrupt`` (the connection dropped mid-stream)."""
        return self._add("GET", path, times, "cut_watch", after_events=after_events, abrupt=abrupt)

    def clear(self) -> None:
        with self.state.lock:
            self.state.rules.clear()

    # -- what passed ------------------------------------------------------------------
    @property
    def calls(self) -> list[Call]:
        with self.state.lock:
            return list(self.state.calls)

    def reset_calls(self) -> None:
        with self.state.lock:
            self.state.calls.clear()

    @property
    def open_watches(self) -> int:
        with self.state.lock:
            return self.state.open_watches

    def triples(self) -> set[tuple[str, str, str]]:
        """(group, resource, verb) of every call the API server answered (not those a fault answered)."""
        return {c.triple for c in self.calls if c.injected != "fail"}

    def rejected(self) -> list[Call]:
        """Calls the real API server refused as unauthenticated or unauthorized."""
        return [c for c in self.calls if c.injected is None and c.status in (401, 403)]
