"""The browsers' kernel websockets across a local-backend suspend and resume.

A browser talks to its kernel over ``/api/kernels/<id>/channels``. The resume
starts the kernel again under the same id but on new ZMQ ports, so a websocket
left open from before would carry the browser's messages to nowhere (a cell
run in the notebook would wait forever). These tests use a real kernel over a
real websocket, as JupyterLab does.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from datetime import datetime, timezone
from typing import Any

import pytest
from jupyter_server.services.kernels.connection.channels import ZMQChannelsWebsocketConnection
from tornado.websocket import WebSocketClientConnection

from .conftest import SuspendClient


def execute_request(code: str, session: str) -> str:
    msg_id = uuid.uuid4().hex
    return json.dumps(
        {
            "channel": "shell",
            "header": {
                "msg_id": msg_id,
                "msg_type": "execute_request",
                "session": session,
                "username": "test",
                "version": "5.3",
                "date": datetime.now(timezone.utc).isoformat(),
            },
            "parent_header": {},
            "metadata": {},
            "content": {"code": code, "silent": False, "store_history": False, "allow_stdin": False},
            "buffers": [],
        }
    )


async def run_over_websocket(ws: WebSocketClientConnection, code: str, timeout: float = 30.0) -> str:
    """Run code through a kernel websocket; return its stdout once replied and idle again."""
    session = uuid.uuid4().hex
    await ws.write_message(execute_request(code, session))
    deadline = time.monotonic() + timeout
    stdout: list[str] = []
    replied = idle = False
    while not (replied and idle):
        raw = await asyncio.wait_for(ws.read_message(), deadline - time.monotonic())
        assert raw is not None, "the kernel websocket closed before the reply"
        msg: dict[str, Any] = json.loads(raw)
        if msg["parent_header"].get("session") != session:
            continue
        if msg["msg_type"] == "stream":
            stdout.append(msg["content"]["text"])
        elif msg["msg_type"] == "execute_reply":
            assert msg["content"]["status"] == "ok", msg["content"]
            replied = True
        elif msg["msg_type"] == "status" and msg["content"]["execution_state"] == "idle":
            idle = True  # (IOPub and shell are relayed apart: either can come first)
    return "".join(stdout)


async def closed_within(ws: WebSocketClientConnection, timeout: float) -> bool:
    """Whether the server closes the websocket within `timeout` seconds."""
    deadline = time.monotonic() + timeout
    try:
        while await asyncio.wait_for(ws.read_message(), deadline - time.monotonic()) is not None:
            pass
        return True
    except asyncio.TimeoutError:
        return False


@pytest.mark.slow
async def test_suspend_closes_kernel_websockets_and_resume_serves_new_ones(
    suspend_api: SuspendClient, jp_ws_fetch: Any
) -> None:
    session = await suspend_api.open_notebook()
    kernel_id = session["kernel"]["id"]
    ws = await jp_ws_fetch("api", "kernels", kernel_id, "channels")
    assert "6 7" in await run_over_websocket(ws, "print(6, 7)")

    # Read all along, as a browser does (an unread tornado client would not
    # answer the close handshake and the server would wait for its timeout).
    closed = asyncio.ensure_future(closed_within(ws, 30.0))
    status = await suspend_api.suspend()
    assert status["state"] == "suspended"
    # Closed by the server: the browser learns at once that its kernel went away.
    assert await closed

    status = await suspend_api.resume()
    assert status["state"] == "ready"
    again = await jp_ws_fetch("api", "kernels", kernel_id, "channels")
    try:
        assert "True" in await run_over_websocket(again, "print('x' not in globals())")
    finally:
        again.close()


@pytest.mark.slow
async def test_a_browser_slow_to_close_gets_fresh_channels_with_its_session_id(
    suspend_api: SuspendClient, jp_ws_fetch: Any
) -> None:
    # A connection torn down only after the resume started the kernel again
    # under the same id would act on the new kernel. JupyterLab reconnects
    # under its own session id, as here.
    session = await suspend_api.open_notebook()
    kernel_id = session["kernel"]["id"]
    client_session = {"session_id": uuid.uuid4().hex}
    ws = await jp_ws_fetch("api", "kernels", kernel_id, "channels", params=client_session)
    assert "1" in await run_over_websocket(ws, "print(1)")
    # This client reads nothing from now on: it answers the close handshake
    # late (tornado's server gives up on it after 5 s).
    await ws.write_message(execute_request("pass", uuid.uuid4().hex))

    assert (await suspend_api.suspend())["state"] == "suspended"
    assert (await suspend_api.resume())["state"] == "ready"
    # Reconnect only once the old connection is gone on the server, however
    # late that is.
    deadline = time.monotonic() + 30
    while any(c.kernel_id == kernel_id for c in list(ZMQChannelsWebsocketConnection._open_sockets)):
        assert time.monotonic() < deadline, "the old kernel websocket was never torn down"
        await asyncio.sleep(0.1)
    again = await jp_ws_fetch("api", "kernels", kernel_id, "channels", params=client_session)
    try:
        assert "back" in await run_over_websocket(again, "print('back')", timeout=15)
        # One browser connected, as the server counts it (a teardown of the old
        # connection landing on the new kernel would have taken one off).
        response = await suspend_api.fetch("api", "kernels", kernel_id)
        assert json.loads(response.body)["connections"] == 1
    finally:
        again.close()
        ws.close()
