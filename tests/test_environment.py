"""JupyterServerEnvironment against a real server: every wait has a deadline
that holds, and a kernel in an awkward moment never turns an answer into a 500."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from jupyter_suspend.server.jupyter_environment import JupyterServerEnvironment

from .conftest import SuspendClient

STREAM_FOREVER = """
import threading, time, sys
def _stream():
    while True:
        print("step", flush=True)
        time.sleep(0.02)
threading.Thread(target=_stream, daemon=True).start()
"""


@pytest.mark.slow
async def test_kernel_ready_wait_ends_although_output_keeps_streaming(suspend_api: SuspendClient) -> None:
    """Issue 8 item 3: the wait once needed 0.2 s of IOPub silence, so streaming output kept it forever."""
    session = await suspend_api.open_notebook()
    kernel_id = session["kernel"]["id"]
    await suspend_api.run(kernel_id, STREAM_FOREVER)
    environment = JupyterServerEnvironment(suspend_api.serverapp)
    started = time.monotonic()
    await asyncio.wait_for(environment.wait_kernel_ready(kernel_id, 10), 20)
    assert time.monotonic() - started < 10


@pytest.mark.slow
async def test_kernel_ready_wait_ends_at_its_timeout(suspend_api: SuspendClient) -> None:
    session = await suspend_api.open_notebook()
    kernel_id = session["kernel"]["id"]
    environment = JupyterServerEnvironment(suspend_api.serverapp)
    async with suspend_api.busy(kernel_id, 20):  # kernel_info waits behind the running cell
        started = time.monotonic()
        with pytest.raises(TimeoutError, match="within 2s"):
            await asyncio.wait_for(environment.wait_kernel_ready(kernel_id, 2), 15)
        assert time.monotonic() - started < 5
    km = suspend_api.serverapp.kernel_manager
    await km.interrupt_kernel(kernel_id)


@pytest.mark.slow
async def test_a_dry_run_while_a_kernel_has_no_model_yet_answers(
    suspend_api: SuspendClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 8 item 3: a kernel still starting has no last_activity; listing the
    sessions then raises, and the dry run answered 500."""
    session = await suspend_api.open_notebook()

    async def no_model_yet(*args: Any, **kwargs: Any) -> Any:
        raise AttributeError("'AsyncIOLoopKernelManager' object has no attribute 'last_activity'")

    monkeypatch.setattr(suspend_api.serverapp.session_manager, "list_sessions", no_model_yet)
    preflight = await suspend_api.json("POST", "suspend", {"dry_run": True})
    assert [k["path"] for k in preflight["kernels"]] == [session["path"]]
    assert [k["session_id"] for k in preflight["kernels"]] == [session["id"]]
