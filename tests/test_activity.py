"""What counts as activity, read by a real jupyter_server from real ipykernel kernels.

The idle policy is off here (its default): ``GET activity`` still reads every
signal and says what the policy would decide.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import pytest

from jupyter_suspend.server.activity import KernelActivity
from jupyter_suspend.server.jupyter_environment import own_client

from .conftest import SuspendClient


async def settled(api: SuspendClient, kernel_id: str) -> None:
    """Run a cell, then wait until the server has seen the kernel idle. (Right after a start the
    server's kernel may stay 'starting' until its next message: its IOPub listener can join
    after the start's last status.)"""
    await api.run(kernel_id, "pass")
    await api.wait_until_idle(kernel_id)


async def activity(api: SuspendClient) -> dict[str, Any]:
    return await api.json("GET", "activity")  # held to the OpenAPI contract by SuspendClient


def signal(answer: dict[str, Any], name: str) -> dict[str, Any]:
    return next(s for s in answer["signals"] if s["name"] == name)


async def jupyter_activity(api: SuspendClient, kernel_id: str) -> tuple[str, str]:
    """(``/api/status`` last_activity, the kernel model's last_activity) as jupyter_server reports them."""
    status = json.loads((await api.fetch("api", "status")).body)
    # (no_track_activity: reading the kernel model would otherwise be API activity itself)
    kernel = json.loads((await api.fetch("api", "kernels", kernel_id, params={"no_track_activity": "1"})).body)
    return status["last_activity"], kernel["last_activity"]


@pytest.mark.slow
async def test_a_cell_running_quietly_keeps_the_session_active(suspend_api: SuspendClient) -> None:
    session = await suspend_api.open_notebook("quiet.ipynb")
    kernel_id = session["kernel"]["id"]
    await settled(suspend_api, kernel_id)
    await asyncio.sleep(0.5)  # the start-up's last messages are behind us
    async with suspend_api.busy(kernel_id, 3.0):
        _, kernel_before = await jupyter_activity(suspend_api, kernel_id)
        await asyncio.sleep(1.5)
        during = await activity(suspend_api)
        _, kernel_during = await jupyter_activity(suspend_api, kernel_id)
        # jupyter_server's own reading sees nothing of a cell that prints nothing...
        assert kernel_during == kernel_before
        # ... ours counts it as running.
        assert during["active_now"] == ["kernel_execution"]
        assert during["idle_seconds"] == 0
        assert signal(during, "kernel_execution")["active"] is True
        assert during["decision"]["action"] == "disabled"
        await suspend_api.wait_until_idle(kernel_id, timeout=10)
    after = await activity(suspend_api)
    assert after["active_now"] == []
    assert after["last_signal"] == "kernel_execution"  # the cell's end is the last activity
    assert after["idle_seconds"] < 2


@pytest.mark.slow
async def test_our_own_polling_moves_no_activity(suspend_api: SuspendClient) -> None:
    session = await suspend_api.open_notebook("polled.ipynb")
    kernel_id = session["kernel"]["id"]
    await settled(suspend_api, kernel_id)
    await asyncio.sleep(0.5)
    before = await jupyter_activity(suspend_api, kernel_id)
    first = await activity(suspend_api)
    for _ in range(5):
        await asyncio.sleep(0.2)
        await suspend_api.status()
        await suspend_api.json("GET", "timeline")
        await suspend_api.json("GET", "openapi.json")
        await activity(suspend_api)
    assert await jupyter_activity(suspend_api, kernel_id) == before
    last = await activity(suspend_api)
    assert last["last_activity"] == first["last_activity"]
    assert last["idle_seconds"] >= first["idle_seconds"] + 1.0


@pytest.mark.slow
async def test_the_preflight_probe_of_a_kernel_is_not_activity(suspend_api: SuspendClient) -> None:
    session = await suspend_api.open_notebook("probed.ipynb")
    kernel_id = session["kernel"]["id"]
    await settled(suspend_api, kernel_id)
    await asyncio.sleep(0.5)
    before = await activity(suspend_api)
    preflight = await suspend_api.json("POST", "suspend", {"dry_run": True})
    assert [k["kernel_id"] for k in preflight["kernels"]] == [kernel_id]  # the kernel was probed
    await suspend_api.wait_until_idle(kernel_id)
    await asyncio.sleep(0.3)
    after = await activity(suspend_api)
    assert after["last_activity"] == before["last_activity"]
    for name in ("kernel_execution", "kernel_output", "kernel_connection"):
        assert signal(after, name)["last_activity"] == signal(before, name)["last_activity"], name


async def test_output_and_frontend_requests_are_activity(suspend_api: SuspendClient) -> None:
    session = await suspend_api.open_notebook("loud.ipynb")
    kernel_id = session["kernel"]["id"]
    await settled(suspend_api, kernel_id)
    await asyncio.sleep(0.3)
    before = await activity(suspend_api)
    started = time.time()
    await suspend_api.run(kernel_id, "print('hello')")
    # (Our IOPub listener is a socket of its own: its copy of the output may come a moment later.)
    deadline = time.monotonic() + 10
    while True:
        after_run = await activity(suspend_api)
        if signal(after_run, "kernel_output")["last_activity"] != signal(before, "kernel_output")["last_activity"]:
            break
        assert time.monotonic() < deadline, after_run
        await asyncio.sleep(0.05)
    assert after_run["last_signal"] in ("kernel_output", "kernel_execution")
    assert after_run["idle_seconds"] <= time.time() - started

    # A frontend asking the kernel something (here whether a line is complete) is someone at the keyboard.
    client = own_client(suspend_api.serverapp.kernel_manager.get_kernel(kernel_id))
    client.start_channels()
    try:
        reply = await client.is_complete("x = (", reply=True, timeout=20)
        assert reply["content"]["status"] == "incomplete"
    finally:
        client.stop_channels()
    # (before it, the connection's last request may be none: kernel_info requests do not count)
    earlier = signal(after_run, "kernel_connection")["last_activity"] or ""
    deadline = time.monotonic() + 10
    while (signal(await activity(suspend_api), "kernel_connection")["last_activity"] or "") <= earlier:
        assert time.monotonic() < deadline, "the frontend's request was not seen"
        await asyncio.sleep(0.05)


async def test_a_terminal_in_use_is_activity(suspend_api: SuspendClient, jp_ws_fetch: Any) -> None:
    before = signal(await activity(suspend_api), "terminals")
    assert before["measured"] is True
    response = await suspend_api.fetch("api", "terminals", method="POST", body="{}")
    name = json.loads(response.body)["name"]
    ws = await jp_ws_fetch("terminals", "websocket", name)
    try:
        await ws.write_message(json.dumps(["stdin", "echo typed\r"]))
        deadline = time.monotonic() + 20
        while True:
            after = signal(await activity(suspend_api), "terminals")
            if after["last_activity"] is not None and after["last_activity"] != before["last_activity"]:
                break
            assert time.monotonic() < deadline, after
            await asyncio.sleep(0.1)
    finally:
        ws.close()
        await suspend_api.fetch("api", "terminals", name, method="DELETE")


async def test_the_gpu_without_nvml_is_not_measured_and_never_idle(suspend_api: SuspendClient) -> None:
    answer = await activity(suspend_api)
    gpu = signal(answer, "gpu")
    # No NVML here (no pynvml, no GPU): reported as such, and it adds nothing either way.
    assert gpu == {**gpu, "measured": False, "counted": False, "active": False, "last_activity": None}
    assert gpu["detail"].startswith("not measured")
    assert "gpu" not in answer["active_now"]


async def test_without_kernels_idle_time_runs_from_the_start(suspend_api: SuspendClient) -> None:
    answer = await activity(suspend_api)
    assert answer["last_signal"] == "environment_started"
    assert answer["state"] == "running"
    assert answer["warning"] is None
    assert answer["workload_class"]["source"] == "default"
    assert answer["workload_class"]["name"] == "interactive-gpu"


def test_kernel_activity_counts_only_cells_a_user_started() -> None:
    """The IOPub reading on its own: silent requests (ours) publish no execute_input."""
    k = KernelActivity("k")
    probe = {"msg_id": "probe", "msg_type": "execute_request"}
    k.on_message("status", probe, {"execution_state": "busy"}, 1.0)
    k.on_message("status", probe, {"execution_state": "idle"}, 2.0)
    assert (k.cell_running, k.last_execution, k.last_output, k.last_request) == (False, None, None, None)
    cell = {"msg_id": "cell", "msg_type": "execute_request"}
    k.on_message("status", cell, {"execution_state": "busy"}, 3.0)
    k.on_message("execute_input", cell, None, 3.0)
    assert k.cell_running
    k.on_message("status", cell, {"execution_state": "idle"}, 9.0)
    assert not k.cell_running
    assert k.last_execution == 9.0
    k.on_message("status", {"msg_id": "c", "msg_type": "complete_request"}, {"execution_state": "busy"}, 10.0)
    assert k.last_request == 10.0
    k.on_message("comm_msg", {"msg_id": "w"}, None, 11.0)
    assert k.last_output == 11.0
