"""A small client of one Jupyter server's REST API, for commands run from outside it.

Token authentication (``Authorization: token ...``; with a token, jupyter_server
needs no XSRF header), the standard library for HTTP, and tornado's websocket
client for running code in a kernel through the server, as JupyterLab does.
Every call has a deadline: a server that does not answer ends in
:class:`ServerUnreachable`, never a hang.
"""

from __future__ import annotations

import ast
import asyncio
import base64
import json
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from dataclasses import dataclass, field
from typing import Any

from jupyter_suspend.common.api import API_PREFIX


class ServerError(Exception):
    """The server answered with an unexpected status."""

    def __init__(self, method: str, path: str, code: int, answer: Any):
        message = answer.get("message") if isinstance(answer, dict) else None
        super().__init__(f"{method} {path}: HTTP {code}" + (f": {message}" if message else ""))
        self.code = code
        self.answer = answer


class ServerUnreachable(Exception):
    """No answer from the server (refused, timed out, not HTTP)."""


class KernelExecutionError(Exception):
    """A cell did not run to an ``ok`` reply within its deadline."""


@dataclass
class Execution:
    """What one ``execute_request`` produced."""

    status: str
    #: user expression name -> its value (``repr`` parsed back when it is a literal), or the error text
    expressions: dict[str, Any] = field(default_factory=dict)
    stdout: str = ""
    error: str = ""
    #: ``time.time()`` when the ``execute_reply`` arrived: the cell had run
    replied_at: float = 0.0


def normalize_url(url: str) -> str:
    """``http://host:port/base/`` (with the trailing slash every path is joined to)."""
    parsed = urllib.parse.urlsplit(url)
    if parsed.scheme not in {"http", "https"} or not parsed.netloc:
        raise ValueError(f"not an http(s) URL of a Jupyter server: {url!r}")
    return urllib.parse.urlunsplit((parsed.scheme, parsed.netloc, parsed.path.rstrip("/") + "/", "", ""))


def _quote_path(path: str) -> str:
    return urllib.parse.quote(path.strip("/"), safe="/")


class JupyterServerClient:
    """Calls on one server (``url`` including its base URL) with one token."""

    def __init__(self, url: str, token: str, timeout: float = 30.0):
        self.url = normalize_url(url)
        self.token = token
        self.timeout = timeout

    # -- HTTP ---------------------------------------------------------------------------------------------------------
    def request(self, method: str, path: str, body: Any = None, timeout: float | None = None) -> tuple[int, Any]:
        """``(status, parsed JSON or None)``; :class:`ServerUnreachable` when nothing answers."""
        data = None if body is None else json.dumps(body).encode()
        headers = {"Content-Type": "application/json"}
        if self.token:
            headers["Authorization"] = f"token {self.token}"
        req = urllib.request.Request(self.url + path, data=data, method=method, headers=headers)
        try:
            with urllib.request.urlopen(req, timeout=timeout or self.timeout) as response:
                code, raw = response.status, response.read()
        except urllib.error.HTTPError as exc:
            code, raw = exc.code, exc.read()
        except (urllib.error.URLError, OSError) as exc:  # refused, reset, timed out
            raise ServerUnreachable(f"{method} {self.url}{path}: {getattr(exc, 'reason', exc)}") from exc
        try:
            return code, json.loads(raw) if raw else None
        except ValueError:
            return code, None

    def call(
        self, method: str, path: str, body: Any = None, expect: tuple[int, ...] = (200,), timeout: float | None = None
    ) -> Any:
        code, answer = self.request(method, path, body, timeout)
        if code not in expect:
            raise ServerError(method, path, code, answer)
        return answer

    def api(
        self,
        method: str,
        endpoint: str,
        body: Any = None,
        expect: tuple[int, ...] = (200,),
        timeout: float | None = None,
    ) -> Any:
        """Our own API under ``{base_url}jupyter-suspend/api/``."""
        return self.call(method, f"{API_PREFIX}/{endpoint}", body, expect, timeout)

    def status(self, timeout: float | None = None) -> dict[str, Any]:
        answer: dict[str, Any] = self.api("GET", "status", timeout=timeout)
        return answer

    # -- contents and sessions ----------------------------------------------------------------------------------------
    def ensure_directory(self, path: str) -> None:
        parts = [p for p in path.strip("/").split("/") if p]
        for depth in range(1, len(parts) + 1):
            sub = "/".join(parts[:depth])
            code, answer = self.request("GET", f"api/contents/{_quote_path(sub)}?content=0")
            if code == 200 and isinstance(answer, dict) and answer.get("type") == "directory":
                continue
            if code == 200:
                raise ServerError("GET", f"api/contents/{sub}", code, {"message": f"{sub} is not a directory"})
            self.call("PUT", f"api/contents/{_quote_path(sub)}", {"type": "directory"}, expect=(200, 201))

    def save_notebook(self, path: str, notebook: dict[str, Any]) -> None:
        body = {"type": "notebook", "format": "json", "content": notebook}
        self.call("PUT", f"api/contents/{_quote_path(path)}", body, expect=(200, 201))

    def read_notebook(self, path: str) -> dict[str, Any] | None:
        """The notebook's content (nbformat JSON), or None when there is no such file."""
        code, answer = self.request("GET", f"api/contents/{_quote_path(path)}?type=notebook&content=1")
        if code == 404:
            return None
        if code != 200 or not isinstance(answer, dict) or not isinstance(answer.get("content"), dict):
            raise ServerError("GET", f"api/contents/{path}", code, answer)
        content: dict[str, Any] = answer["content"]
        return content

    def read_file(self, path: str) -> bytes | None:
        """The file's bytes, or None when there is no such file."""
        code, answer = self.request("GET", f"api/contents/{_quote_path(path)}?type=file&format=base64&content=1")
        if code == 404:
            return None
        if code != 200 or not isinstance(answer, dict) or not isinstance(answer.get("content"), str):
            raise ServerError("GET", f"api/contents/{path}", code, answer)
        return base64.b64decode(answer["content"])

    def sessions(self) -> list[dict[str, Any]]:
        answer = self.call("GET", "api/sessions")
        return list(answer) if isinstance(answer, list) else []

    def session_for(self, path: str) -> dict[str, Any] | None:
        return next((s for s in self.sessions() if s.get("path") == path.strip("/")), None)

    def start_session(self, path: str, kernel_name: str) -> dict[str, Any]:
        body = {"path": path, "name": path.rsplit("/", 1)[-1], "type": "notebook", "kernel": {"name": kernel_name}}
        answer: dict[str, Any] = self.call("POST", "api/sessions", body, expect=(201,))
        return answer

    def restart_kernel(self, kernel_id: str) -> None:
        self.call("POST", f"api/kernels/{kernel_id}/restart", {}, expect=(200,))

    # -- running code in a kernel -------------------------------------------------------------------------------------
    def execute(
        self, kernel_id: str, code: str, user_expressions: dict[str, str] | None = None, timeout: float = 60.0
    ) -> Execution:
        """Run ``code`` in the kernel through the server's websocket; wait for its reply until ``timeout``."""
        try:
            return asyncio.run(asyncio.wait_for(self._execute(kernel_id, code, user_expressions or {}), timeout))
        except (asyncio.TimeoutError, TimeoutError) as exc:
            raise KernelExecutionError(f"kernel {kernel_id} did not finish the cell within {timeout:.0f} s") from exc
        except OSError as exc:
            raise ServerUnreachable(f"kernel {kernel_id}'s websocket: {exc}") from exc

    async def _execute(self, kernel_id: str, code: str, user_expressions: dict[str, str]) -> Execution:
        from tornado.httpclient import HTTPClientError, HTTPRequest
        from tornado.websocket import websocket_connect

        ws_url = "ws" + self.url[len("http") :] + f"api/kernels/{kernel_id}/channels"
        headers = {"Authorization": f"token {self.token}"} if self.token else {}
        try:
            ws = await websocket_connect(HTTPRequest(ws_url, headers=headers))
        except HTTPClientError as exc:
            raise KernelExecutionError(f"kernel {kernel_id}: the server refused its websocket ({exc})") from exc
        msg_id = uuid.uuid4().hex
        header = {
            "msg_id": msg_id,
            "msg_type": "execute_request",
            "username": "jupyter-suspend",
            "session": uuid.uuid4().hex,
            "version": "5.3",
            "date": "",
        }
        content = {
            "code": code,
            "silent": False,
            "store_history": True,
            "user_expressions": user_expressions,
            "allow_stdin": False,
            "stop_on_error": True,
        }
        ws.write_message(
            json.dumps({"header": header, "parent_header": {}, "metadata": {}, "content": content, "channel": "shell"})
        )
        result = Execution(status="")
        try:
            while True:
                raw = await ws.read_message()
                if raw is None:
                    raise KernelExecutionError(f"kernel {kernel_id}: the websocket closed before the cell ended")
                msg = json.loads(raw)
                if msg.get("parent_header", {}).get("msg_id") != msg_id:
                    continue
                kind, body = msg.get("msg_type"), msg.get("content", {})
                if kind == "stream" and body.get("name") == "stdout":
                    result.stdout += body.get("text", "")
                elif kind == "error":
                    result.error = f"{body.get('ename')}: {body.get('evalue')}"
                elif kind == "execute_reply":
                    result.replied_at = time.time()
                    result.status = body.get("status", "")
                    if result.status != "ok" and not result.error:
                        result.error = f"{body.get('ename')}: {body.get('evalue')}"
                    result.expressions = {
                        name: _expression_value(value) for name, value in (body.get("user_expressions") or {}).items()
                    }
                    return result
        finally:
            ws.close()


def _expression_value(value: dict[str, Any]) -> Any:
    if value.get("status") != "ok":
        return {"error": f"{value.get('ename')}: {value.get('evalue')}"}
    text = value.get("data", {}).get("text/plain", "")
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text
