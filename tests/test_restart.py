"""A new server process reads the journal the previous one left behind."""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path

import nbformat
import pytest

from .servers import ServerProcess

pytestmark = pytest.mark.slow


def open_notebook(server: ServerProcess, name: str) -> dict:
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("x = 1")]), server.root_dir / name)
    code, session = server.request(
        "POST", "api/sessions", {"path": name, "name": name, "type": "notebook", "kernel": {"name": "python3"}}
    )
    assert code == 201, session
    return session


def test_suspended_state_survives_a_server_restart(tmp_path: Path) -> None:
    state_dir = tmp_path / "state"
    first = ServerProcess(tmp_path, state_dir).start()
    try:
        session = open_notebook(first, "night.ipynb")
        first.api("POST", "suspend", {"reason": "overnight"}, expect=202)
        status = first.wait(lambda s: s["operation"] and not s["operation"]["in_progress"])
        assert status["state"] == "suspended"
    finally:
        first.stop()

    second = ServerProcess(tmp_path, state_dir).start()
    try:
        status = second.api("GET", "status")
        assert status["state"] == "suspended"
        assert status["can_resume"] is True
        assert status["cold_start"]["previous_state"] == "suspended"
        assert "restarted while suspended" in status["cold_start"]["message"]
        assert (
            status["server"]["boot_id"]
            != json.loads((state_dir / "journal.jsonl").read_text().splitlines()[0])["boot_id"]
        )

        second.api("POST", "resume", {}, expect=202)
        status = second.wait(lambda s: s["operation"] and not s["operation"]["in_progress"])
        assert status["state"] == "ready"
        assert status["restore"] == "cold"
        code, sessions = second.request("GET", "api/sessions")
        assert code == 200
        assert [(s["id"], s["kernel"]["id"], s["path"]) for s in sessions] == [
            (session["id"], session["kernel"]["id"], "night.ipynb")
        ]
        timeline = second.api("GET", "timeline")
        cycle = timeline["cycles"][-1]
        assert cycle["outcome"] == "resumed"
        assert cycle["reason"] == "overnight"
        assert any("server started cold" in note for note in cycle["notes"])
        # Both processes' marks are in one cycle: suspend by the first, resume by the second.
        assert cycle["times"]["environment_stopped"] < cycle["times"]["resume_requested"]
    finally:
        second.stop()


def test_server_killed_during_flush_starts_running_and_says_why(tmp_path: Path) -> None:
    state_dir = tmp_path / "state"
    first = ServerProcess(tmp_path, state_dir).start()
    try:
        session = open_notebook(first, "slow.ipynb")
        # A kernel whose checkpoint takes long keeps the suspend in "flushing".
        _run_in_kernel(first, session["kernel"]["id"], SLOW_CHECKPOINT)
        first.api("POST", "suspend", {}, expect=202)
        first.wait(lambda s: s["state"] == "flushing")
    finally:
        first.stop(signal.SIGKILL)

    second = ServerProcess(tmp_path, state_dir).start()
    try:
        status = second.api("GET", "status")
        assert status["state"] == "running"
        assert status["cold_start"]["previous_state"] == "flushing"
        assert "stopped during a flush" in status["cold_start"]["message"]
        assert status["can_suspend"] is True
    finally:
        second.stop()


def test_snapshot_that_never_returns_means_a_cold_start(tmp_path: Path) -> None:
    state_dir = tmp_path / "state"
    config = "c.SuspendApp.backend = 'tests.backends:SnapshotLikeBackend'\nc.SnapshotLikeBackend.never_returns = True\n"
    first = ServerProcess(tmp_path, state_dir, config).start()
    try:
        open_notebook(first, "gpu.ipynb")
        first.api("POST", "suspend", {}, expect=202)
        first.wait(lambda s: s["state"] == "snapshotting")
    finally:
        first.stop(signal.SIGKILL)  # the pod is gone; no restore happens

    second = ServerProcess(tmp_path, state_dir, config).start()
    try:
        status = second.api("GET", "status")
        assert status["state"] == "ready"
        assert status["restore"] == "cold"
        assert "a snapshot was requested at" in status["cold_start"]["message"]
        assert "recover from checkpoints" in status["cold_start"]["message"]
    finally:
        second.stop()


def test_torn_journal_tail_is_reported_not_fatal(tmp_path: Path) -> None:
    state_dir = tmp_path / "state"
    first = ServerProcess(tmp_path, state_dir).start()
    first.stop()
    with open(state_dir / "journal.jsonl", "ab") as fh:
        fh.write(b'{"seq": 99, "kind": "transi')
    second = ServerProcess(tmp_path, state_dir).start()
    try:
        status = second.api("GET", "status")
        assert status["state"] == "running"
        assert [p["kind"] for p in status["journal"]["problems"]] == ["truncated_tail"]
        second.api("POST", "checkpoint", {}, expect=202)
        second.wait(lambda s: s["operation"] and not s["operation"]["in_progress"])
    finally:
        second.stop()


SLOW_CHECKPOINT = """
from jupyter_suspend.kernel import protocol as _p
import time as _t
_p.register_handler("checkpoint", lambda request: (_t.sleep(30), {"checkpoints": []})[1])
"""


def _run_in_kernel(server: ServerProcess, kernel_id: str, code: str) -> None:
    """Execute code through the server's kernel websocket, as the browser does."""
    import asyncio

    from tornado.websocket import websocket_connect

    async def run() -> None:
        url = server.url.replace("http", "ws") + f"api/kernels/{kernel_id}/channels?token={server.token}"
        ws = await websocket_connect(url)
        msg_id = f"test-{time.time()}"
        ws.write_message(
            json.dumps(
                {
                    "header": {
                        "msg_id": msg_id,
                        "msg_type": "execute_request",
                        "username": "test",
                        "session": "test",
                        "version": "5.3",
                        "date": "",
                    },
                    "parent_header": {},
                    "metadata": {},
                    "content": {"code": code, "silent": False, "store_history": False, "allow_stdin": False},
                    "channel": "shell",
                }
            )
        )
        while True:
            raw = await asyncio.wait_for(ws.read_message(), 60)
            assert raw is not None
            msg = json.loads(raw)
            if msg.get("parent_header", {}).get("msg_id") == msg_id and msg["msg_type"] == "execute_reply":
                assert msg["content"]["status"] == "ok", msg["content"]
                break
        ws.close()

    asyncio.run(run())
