"""The server extension's client of the sidecar container (:mod:`jupyter_suspend.common.sidecar_protocol`).

Transport: one HTTP/1.1 request per connection over ``asyncio.open_unix_connection``
(or ``open_connection`` for a sidecar started with ``--listen 127.0.0.1:PORT``),
with ``Connection: close`` and a minimal response parser. Why not the others:
``tornado.httpclient`` has no simple Unix-socket support, and ``http.client`` in
a thread would hold a worker thread for every long-poll and cannot be cancelled.
This way nothing blocks the server's event loop, a cancelled task closes its
connection, and no dependency is added. The answers are small JSON documents.

The secret file is read on each call: the sidecar writes a new secret every
time it starts, and may have restarted since the last call.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
from typing import Any, cast
from urllib.parse import quote, urlencode

from ..common import sidecar_protocol as proto

#: Answers larger than this are refused (the sidecar's are a few KiB).
MAX_RESPONSE_BYTES = 4 * 1024 * 1024


class SidecarUnavailable(Exception):
    """The sidecar cannot be reached (socket missing or refused, no secret, connection dropped)."""


class SidecarError(Exception):
    """The sidecar answered with an error."""

    def __init__(self, status: int, code: str, message: str, retryable: bool = False, next_step: str = ""):
        super().__init__(f"{status} {code}: {message}" + (f" -- {next_step}" if next_step else ""))
        self.status = status
        self.code = code
        self.message = message
        self.retryable = retryable
        self.next_step = next_step


class SidecarClient:
    """Async client of the sidecar; safe to share, one connection per call."""

    def __init__(
        self,
        socket_path: str = proto.DEFAULT_SOCKET_PATH,
        secret_path: str = proto.DEFAULT_SECRET_PATH,
        timeout: float = 30.0,
        *,
        tcp: tuple[str, int] | None = None,
    ) -> None:
        """``timeout``: seconds for one call (a follow's ``wait`` comes on top).
        ``tcp``: talk to a sidecar started with ``--listen`` instead of the socket."""
        self.socket_path = socket_path
        self.secret_path = secret_path
        self.timeout = timeout
        self.tcp = tcp

    # -- the API -------------------------------------------------------------------

    async def healthy(self) -> bool:
        """True if the sidecar answers its health endpoint (no secret needed)."""
        try:
            body = await self._call("GET", proto.PATH_HEALTH, auth=False)
        except (SidecarUnavailable, SidecarError):
            return False
        return body.get("ok") is True

    async def pod(self) -> proto.PodView:
        return cast(proto.PodView, await self._call("GET", proto.PATH_POD))

    async def request_snapshot(self) -> proto.SnapshotRequested:
        """Ask for a snapshot of this pod; answers the trigger's name (follow it with :meth:`follow`)."""
        return cast(proto.SnapshotRequested, await self._call("POST", proto.PATH_SNAPSHOT_REQUESTS, body={}))

    async def follow(self, trigger: str, wait: float = 0.0, since: str | None = None) -> proto.SnapshotProgress:
        """The progress of a snapshot request. With ``wait`` (<= 30 s) the sidecar holds the answer
        until the phase is terminal or differs from ``since`` (default: the phase it finds first)."""
        params: dict[str, str] = {}
        if wait:
            params[proto.PARAM_WAIT] = f"{min(wait, proto.MAX_WAIT_SECONDS):g}"
        if since:
            params[proto.PARAM_SINCE] = since
        return cast(
            proto.SnapshotProgress,
            await self._call(
                "GET", proto.snapshot_request_path(quote(trigger, safe="")), params=params, extra_time=wait
            ),
        )

    async def snapshots(self) -> proto.SnapshotList:
        return cast(proto.SnapshotList, await self._call("GET", proto.PATH_SNAPSHOTS))

    async def delete_snapshot(self, name: str) -> proto.SnapshotDeleted:
        return cast(proto.SnapshotDeleted, await self._call("DELETE", proto.snapshot_path(quote(name, safe=""))))

    async def workload(self) -> proto.WorkloadView:
        """The Kubeflow Notebook or Workspace that owns this pod (a sidecar started with ``--workload``)."""
        return cast(proto.WorkloadView, await self._call("GET", proto.PATH_WORKLOAD))

    async def stop_workload(self, body: proto.WorkloadStopBody | None = None) -> proto.WorkloadStopped:
        """Ask the pod's Kubeflow owner to stop (the pod then goes away)."""
        return cast(proto.WorkloadStopped, await self._call("POST", proto.PATH_WORKLOAD_STOP, body=dict(body or {})))

    # -- transport -----------------------------------------------------------------

    def _secret(self) -> str:
        try:
            with open(self.secret_path, encoding="ascii") as f:
                secret = f.read().strip()
        except FileNotFoundError:
            raise SidecarUnavailable(
                f"no sidecar secret at {self.secret_path}: is the sidecar container running "
                "(and is its volume mounted in this container)?"
            ) from None
        except OSError as exc:
            raise SidecarUnavailable(f"cannot read the sidecar secret {self.secret_path}: {exc}") from None
        if not secret:
            raise SidecarUnavailable(f"the sidecar secret {self.secret_path} is empty: is the sidecar starting?")
        return secret

    def _where(self) -> str:
        return f"{self.tcp[0]}:{self.tcp[1]}" if self.tcp else self.socket_path

    async def _call(
        self,
        method: str,
        path: str,
        *,
        body: dict[str, Any] | None = None,
        params: dict[str, str] | None = None,
        auth: bool = True,
        extra_time: float = 0.0,
        _retried: bool = False,
    ) -> dict[str, Any]:
        headers = {"Host": "sidecar", "Connection": "close", "Accept": proto.CONTENT_TYPE}
        secret = ""
        if auth:
            # A read of a few bytes from an in-memory emptyDir: not worth a thread.
            secret = self._secret()
            headers[proto.AUTH_HEADER] = f"{proto.AUTH_SCHEME} {secret}"
        payload = b""
        if body is not None:
            payload = json.dumps(body).encode()
            headers["Content-Type"] = proto.CONTENT_TYPE
        if method in ("POST", "PUT", "PATCH") or payload:
            headers["Content-Length"] = str(len(payload))
        target = path + (f"?{urlencode(params)}" if params else "")
        try:
            status, raw = await asyncio.wait_for(
                self._exchange(method, target, headers, payload), self.timeout + max(0.0, extra_time)
            )
        except asyncio.TimeoutError:
            raise SidecarUnavailable(
                f"the sidecar at {self._where()} did not answer {method} {path} within {self.timeout + extra_time:g} s"
            ) from None
        try:
            answer = json.loads(raw) if raw else {}
        except ValueError:
            answer = None
        if not isinstance(answer, dict):
            raise SidecarError(status, proto.E_INTERNAL, f"the sidecar answered {status} without a JSON object")
        if status == 401 and auth and not _retried and self._secret() != secret:
            # The sidecar restarted (a new secret) between our read and its answer: once more.
            return await self._call(
                method, path, body=body, params=params, auth=auth, extra_time=extra_time, _retried=True
            )
        if status >= 400:
            raise SidecarError(
                status,
                str(answer.get("error", "unknown")),
                str(answer.get("message", "")),
                bool(answer.get("retryable", False)),
                str(answer.get("next_step", "")),
            )
        return answer

    async def _exchange(self, method: str, target: str, headers: dict[str, str], payload: bytes) -> tuple[int, bytes]:
        try:
            if self.tcp:
                reader, writer = await asyncio.open_connection(*self.tcp)
            else:
                reader, writer = await asyncio.open_unix_connection(self.socket_path)
        except (FileNotFoundError, ConnectionRefusedError) as exc:
            raise SidecarUnavailable(
                f"cannot connect to the sidecar at {self._where()} ({exc.strerror or exc}): "
                "is the sidecar container running?"
            ) from None
        except OSError as exc:
            raise SidecarUnavailable(f"cannot connect to the sidecar at {self._where()}: {exc}") from None
        try:
            head = f"{method} {target} HTTP/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in headers.items()) + "\r\n"
            writer.write(head.encode("latin-1") + payload)
            await writer.drain()
            chunks: list[bytes] = []
            total = 0
            while data := await reader.read(65536):  # until the sidecar closes (Connection: close)
                total += len(data)
                if total > MAX_RESPONSE_BYTES:
                    raise SidecarUnavailable(f"the sidecar's answer to {method} {target} is too large")
                chunks.append(data)
            response = b"".join(chunks)
        except (ConnectionError, OSError) as exc:
            raise SidecarUnavailable(f"the connection to the sidecar at {self._where()} failed: {exc}") from None
        finally:
            writer.close()
            with contextlib.suppress(OSError, ConnectionError):
                await writer.wait_closed()
        return _parse_response(response, f"{method} {target}")


def _parse_response(response: bytes, what: str) -> tuple[int, bytes]:
    """Status and body of a complete HTTP/1.1 response (Content-Length, chunked, or until close)."""
    head, sep, rest = response.partition(b"\r\n\r\n")
    if not sep:
        raise SidecarUnavailable(f"the sidecar closed the connection during {what} without a complete answer")
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ", 2)
    if len(parts) < 2 or not parts[0].startswith("HTTP/1.") or not parts[1].isdigit():
        raise SidecarUnavailable(f"the sidecar answered {what} with something that is not HTTP/1.1: {lines[0]!r}")
    status = int(parts[1])
    fields: dict[str, str] = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        fields[name.strip().lower()] = value.strip()
    if "chunked" in fields.get("transfer-encoding", "").lower():
        body = b""
        while True:
            size_line, sep, rest = rest.partition(b"\r\n")
            if not sep:
                raise SidecarUnavailable(f"the sidecar's chunked answer to {what} is cut short")
            try:
                size = int(size_line.split(b";")[0].strip() or b"0", 16)
            except ValueError:
                raise SidecarUnavailable(f"the sidecar's chunked answer to {what} is malformed") from None
            if size == 0:
                break
            body += rest[:size]
            rest = rest[size + 2 :]
        return status, body
    if "content-length" in fields:
        length = int(fields["content-length"]) if fields["content-length"].isdigit() else -1
        if not 0 <= length <= len(rest):
            raise SidecarUnavailable(f"the sidecar's answer to {what} is cut short")
        return status, rest[:length]
    return status, rest


def default_client(timeout: float = 30.0) -> SidecarClient:
    """A client for the standard paths, overridable by ``JUPYTER_SUSPEND_SIDECAR_SOCKET`` / ``..._SECRET``."""
    return SidecarClient(
        socket_path=os.environ.get("JUPYTER_SUSPEND_SIDECAR_SOCKET", proto.DEFAULT_SOCKET_PATH),
        secret_path=os.environ.get("JUPYTER_SUSPEND_SIDECAR_SECRET", proto.DEFAULT_SECRET_PATH),
        timeout=timeout,
    )
