"""Find the Jupyter server that started this kernel and call its REST API.

Standard library only (urllib/http.client): the kernel must stay cheap.

The server is found, in order, through:

1. ``JUPYTER_SUSPEND_SERVER_URL`` (the server's URL including its base URL)
   and ``JUPYTER_SUSPEND_TOKEN``: for kernels that run apart from their
   server (gateways, remote kernels) or platforms that prefer to say it;
2. the runtime info file ``jpserver-<pid>.json`` that jupyter_server writes
   into ``jupyter_runtime_dir()``, for ``JPY_PARENT_PID`` (set by
   jupyter_client when it launches a kernel) and then for each ancestor
   process. Only the server that is an ancestor of this kernel is used: a
   guess could suspend someone else's environment.
"""

from __future__ import annotations

import http.client
import json
import os
import socket
import ssl
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..common.api import API_PREFIX

API = API_PREFIX
ENV_URL = "JUPYTER_SUSPEND_SERVER_URL"
ENV_TOKEN = "JUPYTER_SUSPEND_TOKEN"


class ServerNotFound(Exception):
    """No server could be reached; the message says why and what to do."""


@dataclass
class ServerInfo:
    url: str  # ends with "/", includes the base URL
    token: str
    source: str
    sock: str = ""
    root_dir: str = ""


class ApiError(Exception):
    def __init__(self, status: int, body: dict[str, Any], url: str):
        message = body.get("message") or body.get("reason") or f"HTTP {status}"
        super().__init__(f"{message} (HTTP {status})")
        self.status = status
        self.body = body
        self.url = url


def _ancestors(limit: int = 32) -> list[int]:
    pids: list[int] = []
    pid = os.getppid()
    while pid > 1 and len(pids) < limit:
        pids.append(pid)
        try:
            with open(f"/proc/{pid}/stat") as fh:
                pid = int(fh.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            break
    return pids


def _runtime_dir() -> Path:
    from jupyter_core.paths import jupyter_runtime_dir

    return Path(jupyter_runtime_dir())


def find_server(environ: dict[str, str] | None = None) -> ServerInfo:
    env = os.environ if environ is None else environ
    url = env.get(ENV_URL, "").strip()
    if url:
        return ServerInfo(url.rstrip("/") + "/", env.get(ENV_TOKEN, ""), f"${ENV_URL}")
    candidates: list[int] = []
    parent = env.get("JPY_PARENT_PID", "")
    if parent.isdigit():
        candidates.append(int(parent))
    candidates += [p for p in _ancestors() if p not in candidates]
    runtime = _runtime_dir()
    for pid in candidates:
        path = runtime / f"jpserver-{pid}.json"
        try:
            info = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        return ServerInfo(
            str(info.get("url") or f"http://localhost:{info.get('port')}{info.get('base_url', '/')}").rstrip("/") + "/",
            str(info.get("token") or ""),
            str(path),
            str(info.get("sock") or ""),
            str(info.get("root_dir") or ""),
        )
    raise ServerNotFound(
        "no Jupyter server found for this kernel: no runtime file jpserver-<pid>.json in "
        f"{runtime} for its parent processes {candidates or '(none)'} and ${ENV_URL} is not set. "
        f"If the kernel runs apart from its server, set ${ENV_URL} and ${ENV_TOKEN}."
    )


class _UnixConnection(http.client.HTTPConnection):
    def __init__(self, path: str, timeout: float):
        super().__init__("localhost", timeout=timeout)
        self._path = path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        sock.connect(self._path)
        self.sock = sock


class SuspendAPI:
    """The jupyter-suspend REST API of one server, authenticated with its token."""

    def __init__(self, info: ServerInfo, timeout: float = 15.0):
        self.info = info
        self.timeout = timeout

    @classmethod
    def discover(cls, timeout: float = 15.0) -> SuspendAPI:
        return cls(find_server(), timeout)

    def url(self, endpoint: str) -> str:
        return urllib.parse.urljoin(self.info.url, f"{API}/{endpoint}")

    def get(self, endpoint: str) -> dict[str, Any]:
        return self._call("GET", self.url(endpoint), None)

    def post(self, endpoint: str, body: dict[str, Any]) -> dict[str, Any]:
        return self._call("POST", self.url(endpoint), body)

    def wait_seen_busy(self, kernel_id: str, timeout: float = 3.0) -> bool:
        """Wait until the server has seen this kernel go busy (it learns that
        from the kernel's status messages, a moment after the cell started):
        until then it would try to probe us and wait for an answer that can
        only come when the cell ends."""
        url = urllib.parse.urljoin(self.info.url, f"api/kernels/{urllib.parse.quote(kernel_id)}")
        deadline = time.monotonic() + timeout
        while True:
            try:
                state = self._call("GET", url, None).get("execution_state")
            except ApiError:
                return False
            if state == "busy" or time.monotonic() > deadline:
                return state == "busy"
            time.sleep(0.05)

    def _call(self, method: str, url: str, body: dict[str, Any] | None) -> dict[str, Any]:
        headers = {"Accept": "application/json"}
        if self.info.token:
            headers["Authorization"] = f"token {self.info.token}"
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        try:
            status, raw = self._send(method, url, data, headers)
        except (OSError, http.client.HTTPException) as exc:
            reason = getattr(exc, "reason", exc)
            raise ServerNotFound(
                f"the Jupyter server at {self.info.url} (from {self.info.source}) is not reachable: {reason}"
            ) from exc
        try:
            parsed = json.loads(raw) if raw else {}
        except ValueError:
            parsed = {"message": raw[:200].decode(errors="replace")}
        # Our own 404 (an unknown kernel id) names the kernel; any other 404
        # means the extension is not there.
        if status == 404 and not (isinstance(parsed, dict) and "kernel_id" in parsed) and API in url:
            raise ServerNotFound(
                f"the Jupyter server at {self.info.url} does not serve {API}: "
                "is the jupyter_suspend server extension enabled?"
            )
        if status in (401, 403):
            raise ServerNotFound(
                f"the Jupyter server at {self.info.url} refused the request (HTTP {status}): "
                f"the token from {self.info.source} is not accepted; set ${ENV_TOKEN}."
            )
        if not isinstance(parsed, dict):
            parsed = {"value": parsed}
        if status >= 400:
            raise ApiError(status, parsed, url)
        return parsed

    def _send(self, method: str, url: str, data: bytes | None, headers: dict[str, str]) -> tuple[int, bytes]:
        if self.info.sock:
            conn = _UnixConnection(self.info.sock, self.timeout)
            try:
                path = urllib.parse.urlsplit(url).path
                conn.request(method, path, body=data, headers=headers)
                response = conn.getresponse()
                return response.status, response.read()
            finally:
                conn.close()
        request = urllib.request.Request(url, data=data, headers=headers, method=method)
        context = None
        if url.startswith("https:") and os.environ.get("JUPYTER_SUSPEND_SSL_VERIFY", "1") == "0":
            context = ssl._create_unverified_context()
        try:
            with urllib.request.urlopen(request, timeout=self.timeout, context=context) as response:
                return int(response.status), response.read()
        except urllib.error.HTTPError as exc:
            return int(exc.code), exc.read()
