"""The REST API against a real jupyter_server with real ipykernel kernels."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import psutil
import pytest

from jupyter_suspend.server.app import EVENT_SCHEMA_ID

from .conftest import SuspendClient, checkpoint_handler_code

STATES = {
    "running",
    "flushing",
    "snapshotting",
    "suspended",
    "waiting_for_capacity",
    "restoring",
    "ready",
    "failed",
}


def journal_lines(state_dir: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (state_dir / "journal.jsonl").read_text().splitlines() if line]


async def test_status_starts_running(suspend_api: SuspendClient) -> None:
    status = await suspend_api.status()
    assert status["state"] == "running"
    assert status["restore"] is None
    assert status["failure"] is None
    assert status["backend"]["name"] == "local"
    caps = status["backend"]["capabilities"]
    assert caps["keeps_live_memory"] is False
    assert caps["releases_kernel_memory"] is True
    assert status["can_suspend"] is True
    assert status["can_resume"] is False
    assert status["seconds_in_state"] >= 0


async def test_suspend_and_resume_local_backend(suspend_api: SuspendClient, state_dir: Path) -> None:
    session = await suspend_api.open_notebook("work/model.ipynb", ["big = bytearray(64 * 2**20)"])
    kernel_id = session["kernel"]["id"]
    await suspend_api.run(kernel_id, "big = bytearray(64 * 2**20)\nimport os\npid = os.getpid()")
    pid = suspend_api.kernel_pid(kernel_id)
    assert psutil.pid_exists(pid)

    events: list[dict[str, Any]] = []

    async def listener(logger: Any, schema_id: str, data: dict[str, Any]) -> None:
        events.append(data)

    suspend_api.serverapp.event_logger.add_listener(schema_id=EVENT_SCHEMA_ID, listener=listener)

    accepted = await suspend_api.json("POST", "suspend", {"reason": "end of day"}, expect=202)
    assert accepted["operation"]["kind"] == "suspend"
    status = await suspend_api.wait_done()
    assert status["state"] == "suspended", status
    assert status["operation"]["outcome"] == "succeeded"
    assert status["can_resume"] is True
    await asyncio.sleep(0.2)
    assert (await suspend_api.status())["seconds_in_state"] >= 0.2

    # The kernel process is gone and its memory was measured before it went.
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    assert await suspend_api.sessions() == []
    release = next(s for s in status["operation"]["steps"] if s["name"] == "release")
    released = release["detail"]["released"]
    assert released["kernel_memory_bytes"] > 64 * 2**20
    assert released["per_kernel"][kernel_id]["path"] == "work/model.ipynb"
    notebooks = next(s for s in status["operation"]["steps"] if s["name"] == "flush.notebooks")
    assert notebooks["detail"]["notebooks"][0]["status"] == "fsynced"

    # Every transition was an event, in order.
    await asyncio.sleep(0.2)
    transitions = [(e["previous_state"], e["state"]) for e in events if "outcome" not in e]
    assert transitions == [("running", "flushing"), ("flushing", "snapshotting"), ("snapshotting", "suspended")]
    assert events[-1]["outcome"] == "succeeded"

    status = await suspend_api.resume()
    assert status["state"] == "ready", status
    assert status["restore"] == "cold"

    # Same session and kernel ids, a new process that can run a cell.
    sessions = await suspend_api.sessions()
    assert [s["id"] for s in sessions] == [session["id"]]
    assert sessions[0]["kernel"]["id"] == kernel_id
    assert sessions[0]["path"] == "work/model.ipynb"
    reply = await suspend_api.run(kernel_id, "import os\nprint(os.getpid())\nprint('big' in globals())")
    new_pid, had_big = reply["stdout"].split()
    assert int(new_pid) != pid
    assert had_big == "False"  # a cold restore: live memory did not come back

    timeline = await suspend_api.json("GET", "timeline")
    cycle = timeline["cycles"][-1]
    assert cycle["outcome"] == "resumed"
    assert cycle["restore"] == "cold"
    for mark in (
        "suspend_requested",
        "environment_stopped",
        "node_released",
        "resume_requested",
        "first_cell_runnable",
    ):
        assert cycle["times"][mark] is not None, mark
    assert cycle["durations"]["resume_to_runnable"] > 0
    assert cycle["durations"]["suspended"] > 0
    assert timeline["totals"]["resumed"] == 1

    kinds = [e["kind"] for e in journal_lines(state_dir)]
    for kind in ("suspend_requested", "flushed", "released", "resume_requested", "restored"):
        assert kind in kinds


async def test_dry_run_reports_preflight_per_kernel(suspend_api: SuspendClient, state_dir: Path) -> None:
    with_helper = await suspend_api.open_notebook("a.ipynb")
    without_helper = await suspend_api.open_notebook("b.ipynb")
    await suspend_api.run(with_helper["kernel"]["id"], checkpoint_handler_code())
    before = journal_lines(state_dir)

    preflight = await suspend_api.json("POST", "suspend", {"dry_run": True})
    assert preflight["keeps"] == {
        "files": True,
        "application_checkpoints": True,
        "live_memory": False,
        "gpu_memory": False,
    }
    by_path = {k["path"]: k for k in preflight["kernels"]}
    assert by_path["a.ipynb"]["helper"] == "loaded"
    assert by_path["a.ipynb"]["registered"] == ["weights"]
    assert "application checkpoints: weights" in by_path["a.ipynb"]["keeps"]
    assert "variables not registered for checkpoints" in by_path["a.ipynb"]["loses"]
    assert by_path["b.ipynb"]["helper"] == "absent"
    assert "all variables in kernel memory" in by_path["b.ipynb"]["loses"]
    assert preflight["would_abort"] == []

    # A dry run changes nothing.
    status = await suspend_api.status()
    assert status["state"] == "running"
    assert status["operation"] is None
    assert journal_lines(state_dir) == before
    assert len(await suspend_api.sessions()) == 2
    assert without_helper["kernel"]["id"] in suspend_api.serverapp.kernel_manager


@pytest.mark.slow
async def test_concurrent_operations_get_409(suspend_api: SuspendClient) -> None:
    session = await suspend_api.open_notebook()
    kernel_id = session["kernel"]["id"]
    await suspend_api.run(kernel_id, checkpoint_handler_code(delay=2.0))

    first = await suspend_api.json("POST", "suspend", {}, expect=202)
    op_id = first["operation"]["id"]
    for endpoint in ("suspend", "checkpoint", "resume"):
        conflict = await suspend_api.json("POST", endpoint, {}, expect=409)
        assert conflict["operation"]["id"] == op_id, endpoint
        assert conflict["operation"]["kind"] == "suspend"
    status = await suspend_api.wait_done()
    assert status["state"] == "suspended"
    # Exactly one checkpoint request reached the kernel: no second operation ran.
    flushed = next(s for s in status["operation"]["steps"] if s["name"] == "flush.kernels")
    assert [k["status"] for k in flushed["detail"]["kernels"]] == ["checkpointed"]

    resumed = await suspend_api.json("POST", "resume", {}, expect=202)
    conflict = await suspend_api.json("POST", "resume", {}, expect=409)
    assert conflict["operation"]["id"] == resumed["operation"]["id"]
    await suspend_api.wait_done()
    reply = await suspend_api.run(kernel_id, "print(len(globals().get('_calls', [])))")
    assert reply["stdout"].strip() == "0"  # a new process


async def test_failed_checkpoint_aborts_and_keeps_session(suspend_api: SuspendClient) -> None:
    session = await suspend_api.open_notebook()
    kernel_id = session["kernel"]["id"]
    await suspend_api.run(kernel_id, checkpoint_handler_code(fail="disk quota exceeded") + "\nprecious = 42")
    pid = suspend_api.kernel_pid(kernel_id)

    status = await suspend_api.suspend(reason="test")
    assert status["state"] == "running"
    assert status["operation"]["outcome"] == "aborted"
    assert "disk quota exceeded" in status["operation"]["message"]
    assert "nothing was released" in status["operation"]["message"]

    # The same kernel process still holds the user's state.
    assert suspend_api.kernel_pid(kernel_id) == pid
    reply = await suspend_api.run(kernel_id, "print(precious)")
    assert reply["stdout"].strip() == "42"
    timeline = await suspend_api.json("GET", "timeline")
    assert timeline["cycles"][-1]["outcome"] == "aborted"
    assert timeline["cycles"][-1]["released_totals"]["gpu_hours"] == 0  # nothing released: known, not unknown
    assert timeline["totals"]["gpu_hours_unknown_cycles"] == 0


async def test_missing_notebook_aborts_suspend(suspend_api: SuspendClient) -> None:
    session = await suspend_api.open_notebook("gone.ipynb")
    (suspend_api.root_dir / "gone.ipynb").unlink()
    status = await suspend_api.suspend()
    assert status["state"] == "running"
    assert status["operation"]["outcome"] == "aborted"
    assert "gone.ipynb is not on disk" in status["operation"]["message"]
    assert session["kernel"]["id"] in suspend_api.serverapp.kernel_manager


async def test_corrupt_notebook_on_disk_aborts_suspend(suspend_api: SuspendClient) -> None:
    await suspend_api.open_notebook("torn.ipynb")
    (suspend_api.root_dir / "torn.ipynb").write_text('{"cells": [')
    status = await suspend_api.suspend()
    assert status["operation"]["outcome"] == "aborted"
    assert "not valid JSON" in status["operation"]["message"]


@pytest.mark.slow
@pytest.mark.parametrize("suspend_config", [{"flush_kernel_timeout": 1.0}])
async def test_busy_kernel_aborts_unless_forced(suspend_api: SuspendClient) -> None:
    session = await suspend_api.open_notebook()
    kernel_id = session["kernel"]["id"]
    await suspend_api.run(kernel_id, checkpoint_handler_code())
    async with suspend_api.busy(kernel_id, 6):
        status = await suspend_api.suspend()
        assert status["state"] == "running"
        assert "kernel busy: checkpoint skipped" in status["operation"]["message"]
        assert kernel_id in suspend_api.serverapp.kernel_manager

        status = await suspend_api.suspend(force=True)
        assert status["state"] == "suspended"
        flushed = next(s for s in status["operation"]["steps"] if s["name"] == "flush.kernels")
        assert flushed["detail"]["kernels"][0]["status"] == "busy_skipped"


@pytest.mark.slow
async def test_dry_run_asks_a_kernel_reported_busy_before_calling_it_busy(suspend_api: SuspendClient) -> None:
    session = await suspend_api.open_notebook()
    kernel_id = session["kernel"]["id"]
    await suspend_api.run(kernel_id, checkpoint_handler_code())
    await suspend_api.wait_until_idle(kernel_id)
    # The server's execution_state lags a moment behind a cell that just ended.
    suspend_api.serverapp.kernel_manager.get_kernel(kernel_id).execution_state = "busy"
    preflight = await suspend_api.json("POST", "suspend", {"dry_run": True})
    assert preflight["kernels"][0]["helper"] == "loaded"
    assert preflight["would_abort"] == []

    async with suspend_api.busy(kernel_id, 6):
        preflight = await suspend_api.json("POST", "suspend", {"dry_run": True})
        assert preflight["kernels"][0]["helper"] == "busy"
        assert preflight["kernels"][0]["helper_message"] == "kernel is busy running a cell"
        assert len(preflight["would_abort"]) == 1


async def test_checkpoint_only_flushes(suspend_api: SuspendClient) -> None:
    session = await suspend_api.open_notebook()
    kernel_id = session["kernel"]["id"]
    await suspend_api.run(kernel_id, checkpoint_handler_code())
    pid = suspend_api.kernel_pid(kernel_id)
    await suspend_api.json("POST", "checkpoint", {"reason": "before lunch"}, expect=202)
    status = await suspend_api.wait_done()
    assert status["state"] == "running"
    assert status["operation"]["kind"] == "checkpoint"
    assert status["operation"]["outcome"] == "succeeded"
    assert suspend_api.kernel_pid(kernel_id) == pid
    reply = await suspend_api.run(kernel_id, "print(len(_calls), _calls[0]['action'], _calls[0]['checkpoint_dir'])")
    count, action, directory = reply["stdout"].split()
    assert (count, action) == ("1", "checkpoint")
    assert "experiment.ipynb" in directory


async def test_wrong_state_calls_get_409_and_change_nothing(suspend_api: SuspendClient, state_dir: Path) -> None:
    before = journal_lines(state_dir)
    conflict = await suspend_api.json("POST", "resume", {}, expect=409)
    assert conflict["state"] == "running"
    assert "cannot resume while running" in conflict["message"]
    conflict = await suspend_api.json("POST", "acknowledge", {}, expect=409)
    assert "nothing to acknowledge" in conflict["message"]
    assert journal_lines(state_dir) == before
    assert (await suspend_api.status())["state"] == "running"


@pytest.mark.parametrize(
    ("endpoint", "raw", "message"),
    [
        ("suspend", b"{not json", "not valid JSON"),
        ("suspend", b'{"reason": "x", "unexpected": 1}', "Additional properties are not allowed"),
        ("suspend", b'{"dry_run": "yes"}', "'yes' is not of type 'boolean'"),
        ("suspend", b'["a list"]', "is not of type 'object'"),
        ("suspend", b'{"reason": "' + b"x" * 600 + b'"}', "is too long"),
        ("resume", b'{"kernels": []}', "Additional properties are not allowed"),
        ("checkpoint", b'{"reason": 7}', "7 is not of type 'string'"),
        ("acknowledge", b'{"force": true}', "Additional properties are not allowed"),
        ("suspend", b'{"reason": "' + b"x" * 70_000 + b'"}', "the limit is 65536"),
    ],
)
async def test_bad_input_gets_400_and_changes_nothing(
    suspend_api: SuspendClient, state_dir: Path, endpoint: str, raw: bytes, message: str
) -> None:
    session = await suspend_api.open_notebook()
    before = journal_lines(state_dir)
    response = await suspend_api.call("POST", endpoint, raw=raw)
    assert response.code == 400
    body = json.loads(response.body)
    assert message in body["message"]
    assert journal_lines(state_dir) == before
    status = await suspend_api.status()
    assert status["state"] == "running"
    assert status["operation"] is None
    assert session["kernel"]["id"] in suspend_api.serverapp.kernel_manager


async def test_polling_does_not_count_as_activity(suspend_api: SuspendClient, jp_fetch: Any) -> None:
    async def last_activity() -> str:
        response = await jp_fetch("api", "status")
        return str(json.loads(response.body)["last_activity"])

    await suspend_api.open_notebook()
    await jp_fetch("api", "contents")  # a user action moves last_activity
    before = await last_activity()
    await asyncio.sleep(0.05)
    for _ in range(5):
        await suspend_api.status()
        await suspend_api.json("GET", "timeline")
        await asyncio.sleep(0.01)
    assert await last_activity() == before
    idle = (await suspend_api.status())["idle_seconds"]
    assert idle is not None
    assert idle >= 0.05


async def test_endpoints_require_authentication(http_server_client: Any, jp_base_url: str) -> None:
    from tornado.httpclient import HTTPClientError

    for method, endpoint in [
        ("GET", "status"),
        ("GET", "timeline"),
        ("POST", "suspend"),
        ("POST", "checkpoint"),
        ("POST", "resume"),
        ("POST", "acknowledge"),
    ]:
        with pytest.raises(HTTPClientError) as info:
            await http_server_client.fetch(
                f"{jp_base_url}jupyter-suspend/api/{endpoint}",
                method=method,
                body=b"{}" if method == "POST" else None,
            )
        assert info.value.code == 403, endpoint


@pytest.mark.slow
async def test_capacity_wait_then_restore(suspend_api: SuspendClient) -> None:
    session = await suspend_api.open_notebook()
    status = await suspend_api.suspend()
    assert status["state"] == "suspended"
    backend = suspend_api.serverapp.web_app.settings["jupyter_suspend_lifecycle"].backend
    # An administrator demands more free memory than the machine has.
    backend.capacity_headroom_bytes = 2**60
    backend.capacity_retry_seconds = 0.2
    await suspend_api.json("POST", "resume", {}, expect=202)
    status = await suspend_api.wait_state("waiting_for_capacity")
    assert "required to restore" in status["message"]
    # No concurrent restore while waiting.
    conflict = await suspend_api.json("POST", "resume", {}, expect=409)
    assert conflict["operation"]["kind"] == "resume"
    assert await suspend_api.sessions() == []

    backend.capacity_headroom_bytes = 0
    status = await suspend_api.wait_done()
    assert status["state"] == "ready"
    assert [s["id"] for s in await suspend_api.sessions()] == [session["id"]]
    cycle = (await suspend_api.json("GET", "timeline"))["cycles"][-1]
    assert cycle["durations"]["waiting_for_capacity"] > 0
    assert any("waited for capacity" in note for note in cycle["notes"])


async def test_states_are_spelled_as_documented(suspend_api: SuspendClient) -> None:
    from jupyter_suspend.server.states import State

    assert {s.value for s in State} == STATES
    assert (await suspend_api.status())["state"] in STATES


@pytest.mark.slow
async def test_active_work_ended_ignores_the_suspend_dialog_probe(suspend_api: SuspendClient) -> None:
    session = await suspend_api.open_notebook()
    await suspend_api.run(session["kernel"]["id"], "work = sum(range(10))")
    last_user_activity = (await suspend_api.status())["last_activity"]
    await asyncio.sleep(0.3)
    await suspend_api.json("POST", "suspend", {"dry_run": True})  # probes kernels: not the user's activity
    # Put back (Kubeflow's culler) within the second a probe's activity may take to settle.
    deadline = time.monotonic() + 3
    while (await suspend_api.status())["last_activity"] != last_user_activity and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    assert (await suspend_api.status())["last_activity"] == last_user_activity
    await suspend_api.suspend()
    cycle = (await suspend_api.json("GET", "timeline"))["cycles"][-1]
    assert cycle["times"]["active_work_ended"] == last_user_activity
    assert cycle["durations"]["idle_before_suspend"] >= 0.3
