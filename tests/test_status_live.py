"""``GET status`` after a live return: a kernel the restore verified LIVE and that was restarted
(or stopped) since is not claimed live any more. Real kernels under a real jupyter_server, the
snapshot-like test backend (the kernels keep running through the "snapshot")."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from jupyter_suspend.server.environment import KernelProcess
from jupyter_suspend.server.live_state import live_lost

from .conftest import SuspendClient
from .test_kernel_api import SETUP, open_with_extension, verdict


@pytest.fixture
def suspend_config() -> dict[str, Any]:
    return {"backend": "tests.backends:SnapshotLikeBackend", "flush_kernel_timeout": 10.0}


@pytest.mark.slow
async def test_status_stops_claiming_live_once_a_restored_kernel_is_restarted_or_gone(
    suspend_api: SuspendClient, kernel_server_env: Path
) -> None:
    restarted = await open_with_extension(suspend_api, "restarted.ipynb", SETUP)
    stopped = await open_with_extension(suspend_api, "stopped.ipynb", SETUP)
    status = await suspend_api.suspend(reason="snapshot")
    assert (status["state"], status["restore"]) == ("ready", "live"), status
    assert status["message"] == "ready (live restore)"
    assert status["last_restore"]["live_lost"] == []
    pid = suspend_api.kernel_pid(restarted)

    # A restart by hand, as the notebook's Restart Kernel does: same kernel id, new process.
    await suspend_api.fetch("api", "kernels", restarted, "restart", method="POST", body="{}")
    await suspend_api.kernel_ready(restarted)
    assert suspend_api.kernel_pid(restarted) != pid
    status = await suspend_api.status()
    said = "kernel restarted.ipynb was restarted since the live restore: its memory is not the restored one"
    assert status["message"] == f"ready (live restore); {said}", status["message"]
    assert status["restore"] == "live"  # how the environment came back: the history stays
    lost = status["last_restore"]["live_lost"]
    assert lost == [
        {
            "kernel_id": restarted,
            "path": "restarted.ipynb",
            "reason": "restarted",
            "verified_pid": pid,
            "pid": suspend_api.kernel_pid(restarted),
        }
    ]
    await suspend_api.run(restarted, "%load_ext jupyter_suspend")  # a new process: the extension is not loaded
    text, _ = await verdict(suspend_api, restarted)  # the verification says the same
    assert not text.startswith("LIVE"), text

    # A kernel shut down since: its restored memory is gone too.
    await suspend_api.fetch("api", "kernels", stopped, method="DELETE")
    status = await suspend_api.status()
    assert [(k["kernel_id"], k["reason"]) for k in status["last_restore"]["live_lost"]] == [
        (restarted, "restarted"),
        (stopped, "gone"),
    ]
    assert "kernel stopped.ipynb has stopped since the live restore: its restored memory is lost" in status["message"]


def _verified(kernel_id: str, pid: int, verdict_: str = "LIVE") -> dict[str, Any]:
    return {
        "kernel_id": kernel_id,
        "verdict": verdict_,
        "message": "",
        "details": {"observed": {"pid": pid, "process_start": 100.0}, "recorded": {"path": f"{kernel_id}.ipynb"}},
    }


def test_live_lost_judges_only_live_kernels_and_only_what_it_can_read() -> None:
    verification = [_verified("same", 10), _verified("new", 11), _verified("gone", 12), _verified("cold", 13, "COLD")]
    now = {
        "same": KernelProcess(pid=10, running=True),
        "new": KernelProcess(pid=99, running=True),
        "cold": KernelProcess(pid=1, running=None),
    }
    lost = live_lost(verification, now.get)
    assert [(k["kernel_id"], k["reason"], k["pid"]) for k in lost] == [("new", "restarted", 99), ("gone", "gone", None)]
    # The same pid whose process ended (a kernel that died and was not restarted) is gone.
    assert live_lost([_verified("same", 10)], lambda _k: KernelProcess(pid=10, running=False))[0]["reason"] == "gone"
    # An environment that cannot say a kernel's pid: only a kernel that is gone is judged.
    assert live_lost([_verified("same", 10)], lambda _k: KernelProcess(pid=None, running=None)) == []
    assert live_lost(None, now.get) == []
