"""Issue 17 item 10: a dry run that arrives while a kernel is starting (a resume restarting kernels, or a
user opening a notebook) answers 200, never 500.

jupyter_client lists a kernel as soon as it has started, and jupyter_server sets its ``last_activity`` and
``execution_state`` only after that; a read in between raised traitlets' TraitError ("expected a datetime,
not the NoneType None"), not the AttributeError a ``getattr`` default catches. The window is widened here by
holding the real kernel manager at exactly that point (the kernel really starts; nothing is faked).
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from jupyter_suspend.server.jupyter_environment import kernel_attribute

from .conftest import SuspendClient


@pytest.mark.slow  # seconds: the fast loop (README, Development) leaves it to the full suite
async def test_item10_a_dry_run_while_a_kernel_starts_answers_200(
    suspend_api: SuspendClient, jp_serverapp: Any
) -> None:
    km = jp_serverapp.kernel_manager
    original = km._add_kernel_when_ready
    listed = asyncio.Event()

    async def hold_after_listing(kernel_id: str, manager: Any, awaitable: Any) -> None:
        await original(kernel_id, manager, awaitable)
        listed.set()  # listed now; jupyter_server sets last_activity once this returns
        await asyncio.sleep(1.5)

    km._add_kernel_when_ready = hold_after_listing
    try:
        starting = asyncio.ensure_future(km.start_kernel(kernel_name="python3"))
        await asyncio.wait_for(listed.wait(), 120)
        kernel_id = next(iter(km.list_kernel_ids()))
        assert kernel_attribute(km.get_kernel(kernel_id), "last_activity") is None  # inside the window
        answer = await suspend_api.json("POST", "suspend", {"dry_run": True})
        assert [k["kernel_id"] for k in answer["kernels"]] == [kernel_id]
        status = await suspend_api.status()
        assert status["state"] == "running"
        await starting
    finally:
        km._add_kernel_when_ready = original
    await km.shutdown_kernel(kernel_id, now=True)
