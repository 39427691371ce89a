"""The API calls this process's ``kubernetes`` clients send, as the real API server receives them.

The control plane keeps no audit log a test could read, so the calls are recorded on their way out: every
request the real client sends (``RESTClientObject.request``, the one place each call passes) is kept as a
:class:`Call` parsed from its method and URL the way the API server's RequestInfo parses it (verb, API group,
resource, subresource, name). The answers still come from the real server: a test asks "what was sent", the
server decides what it allows. The simulated GKE controller's own calls are left out. Only in-process commands
are seen (``run_cli`` without ``subprocess``, the resume core in threads, a release ``Watcher``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import threading
from collections.abc import Iterable, Iterator
from typing import Any
from urllib.parse import parse_qs, urlsplit

Triple = tuple[str, str, str]


@dataclasses.dataclass(frozen=True)
class Call:
    verb: str
    group: str
    resource: str
    subresource: str | None
    namespace: str | None
    name: str | None
    query: dict[str, list[str]]

    @property
    def full_resource(self) -> str:
        return self.resource if self.subresource is None else f"{self.resource}/{self.subresource}"


_VERBS = {"POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}


def parse(method: str, url: str) -> Call:
    """Method and URL to a request's attributes, as kube-apiserver's RequestInfoFactory derives them
    (k8s.io/apiserver pkg/endpoints/request/requestinfo.go): /api/v1/... is the core group, /apis/G/V/...
    a named one; GET on a collection is ``list`` (``watch`` with ?watch=true), on one object ``get``."""
    parts = urlsplit(url)
    query = parse_qs(parts.query)
    segments = [s for s in parts.path.split("/") if s]
    if segments[:1] == ["api"]:
        group, rest = "", segments[2:]
    else:
        group, rest = segments[1], segments[3:]
    namespace = None
    if rest[:1] == ["namespaces"] and len(rest) >= 3:
        namespace, rest = rest[1], rest[2:]
    resource = rest[0]
    name = rest[1] if len(rest) > 1 else None
    subresource = rest[2] if len(rest) > 2 else None
    if method == "GET":
        watching = query.get("watch", ["false"])[0] in ("true", "1")
        verb = "watch" if watching else ("get" if name else "list")
    else:
        verb = _VERBS.get(method, method.lower())
    return Call(verb, group, resource, subresource, namespace, name, query)


class Recorder:
    def __init__(self) -> None:
        self.calls: list[Call] = []
        self._lock = threading.Lock()

    def add(self, call: Call) -> None:
        with self._lock:
            self.calls.append(call)

    def reset(self) -> None:
        with self._lock:
            self.calls.clear()

    def matching(self, verb: str | None = None, resource: str | None = None, name: str | None = None) -> list[Call]:
        with self._lock:
            calls = list(self.calls)
        return [
            c
            for c in calls
            if verb in (None, c.verb) and resource in (None, c.full_resource) and name in (None, c.name)
        ]

    def writes(self) -> list[Call]:
        return [c for c in self.matching() if c.verb not in ("get", "list", "watch")]

    def triples(self) -> set[Triple]:
        return {(c.group, c.full_resource, c.verb) for c in self.matching()}


@contextlib.contextmanager
def recording() -> Iterator[Recorder]:
    """Every request this process's ``kubernetes`` clients send while the block runs."""
    from kubernetes.client import rest

    recorder = Recorder()
    original = rest.RESTClientObject.request

    def request(self: Any, method: str, url: str, *args: Any, **kwargs: Any) -> Any:
        # The simulated GKE controller's threads (tests/cluster/gke.py) are not the command under test.
        if not threading.current_thread().name.startswith("gke-"):
            recorder.add(parse(method, url))
        return original(self, method, url, *args, **kwargs)

    rest.RESTClientObject.request = request  # type: ignore[method-assign]
    try:
        yield recorder
    finally:
        rest.RESTClientObject.request = original  # type: ignore[method-assign]


def granted(rules: Iterable[dict[str, Any]]) -> set[Triple]:
    """What RBAC ``rules`` grant as (group, resource[/subresource], verb), names aside; no wildcard anywhere."""
    triples: set[Triple] = set()
    for rule in rules:
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                for verb in rule["verbs"]:
                    assert "*" not in (group, resource, verb), rule
                    triples.add((group, resource, verb))
    return triples


class ConnectionCounter:
    """A TCP port a kubeconfig can point at: it counts the connections made to it and answers none (any API call
    would be one). Shows "no API call" without any API server."""

    def __init__(self) -> None:
        import socket

        self.sock = socket.create_server(("127.0.0.1", 0))
        self.sock.settimeout(0.1)
        self.connections = 0
        self._closing = threading.Event()
        self._thread = threading.Thread(target=self._count, name="connection-counter", daemon=True)
        self._thread.start()

    @property
    def server(self) -> str:
        return f"https://127.0.0.1:{self.sock.getsockname()[1]}"

    def _count(self) -> None:
        while not self._closing.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            self.connections += 1
            conn.close()

    def kubeconfig(self, path: Any) -> str:
        """A kubeconfig (token credentials) for this port, written to ``path``."""
        import json

        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "nowhere", "cluster": {"server": self.server, "insecure-skip-tls-verify": True}}],
            "users": [{"name": "someone", "user": {"token": "unused"}}],
            "contexts": [{"name": "nowhere", "context": {"cluster": "nowhere", "user": "someone", "namespace": "ns"}}],
            "current-context": "nowhere",
        }
        with open(path, "w") as out:
            out.write(json.dumps(config))
        return str(path)

    def close(self) -> None:
        self._closing.set()
        self._thread.join(5)
        self.sock.close()
