"""The pure comparison behind LIVE / COLD / MISMATCH, and cheap kernel imports."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

from jupyter_suspend.server.live_state import compare, record_from_flush

CANARY = {"hash": "a" * 64, "pid": 1234, "process_start": 1000.0}


def record(**checkpoints: str | None) -> dict[str, Any]:
    kernel = {
        "kernel_id": "k1",
        "path": "nb.ipynb",
        "status": "checkpointed",
        "canary": CANARY,
        "checkpoints": [{"name": n, "content_hash": h, "tensors_hash": None} for n, h in checkpoints.items()],
    }
    return record_from_flush(kernel, "suspend", "op1", "2026-01-01T00:00:00Z")


def observed(canary_hash: str | None = "a" * 64, pid: int = 1234, start: float = 1000.0, **names: Any) -> dict:
    return {
        "canary_hash": canary_hash,
        "pid": pid,
        "process_start": start,
        "restored": [],
        "names": {n: ({"content_hash": h} if isinstance(h, str) else h) for n, h in names.items()},
    }


def test_same_canary_is_live() -> None:
    result = compare("k1", observed(model="h1"), record(model="h1"), names=["model"])
    assert result["verdict"] == "LIVE"
    assert result["message"].startswith("LIVE: same kernel process (pid 1234) survived")
    assert "unchanged: model" in result["message"]
    assert result["details"]["names"]["model"]["status"] == "match"
    assert result["checkpoints_restored"] == []


def test_live_after_snapshot_restore_tolerates_moved_start_time() -> None:
    result = compare("k1", observed(start=5000.0), record())
    assert result["verdict"] == "LIVE"
    assert any("clock jumps" in n for n in result["details"]["notes"])


def test_new_process_is_cold_and_lists_restored_checkpoints() -> None:
    obs = observed("b" * 64, pid=999, start=2000.0, model="h1")
    obs["restored"] = ["model"]
    result = compare("k1", obs, record(model="h1"), names=["model"])
    assert result["verdict"] == "COLD"
    assert result["checkpoints_restored"] == ["model"]
    assert "checkpoints restored: model" in result["message"]
    assert "identical to the saved objects: model" in result["message"]


def test_changed_object_is_a_mismatch() -> None:
    result = compare("k1", observed(model="h2"), record(model="h1"), names=["model"])
    assert result["verdict"] == "MISMATCH"
    assert "model differs" in result["message"]
    assert result["details"]["names"]["model"] == {
        "recorded": "h1",
        "observed": "h2",
        "status": "differs",
        "note": "its content differs from the checkpoint",
    }


def test_missing_restored_name_is_a_mismatch() -> None:
    obs = observed("b" * 64, pid=999, model={"error": "'model' is not defined in this kernel"})
    result = compare("k1", obs, record(model="h1"), names=["model"])
    assert result["verdict"] == "MISMATCH"
    assert "model is not in the kernel" in result["message"]


def test_contradictory_identity_is_a_mismatch() -> None:
    result = compare("k1", observed("b" * 64), record())
    assert result["verdict"] == "MISMATCH"
    assert "different canary" in result["message"]


def test_without_helper_pid_and_start_decide_and_restore_report_is_used() -> None:
    obs = {"canary_hash": None, "pid": 999, "process_start": 3000.0, "helper": False, "names": {}}
    report = {"time": "2026-01-02T00:00:00Z", "checkpoints_restored": {"k1": {"restored": ["model", "data"]}}}
    result = compare("k1", obs, record(), report)
    assert result["verdict"] == "COLD"
    assert result["checkpoints_restored"] == ["model", "data"]
    assert result["details"]["canary"] == "unavailable"
    same = compare("k1", {**obs, "pid": 1234, "process_start": 1000.0}, record(), report)
    assert same["verdict"] == "LIVE"
    assert "pid and start time match" in same["message"]


def test_names_never_recorded_are_reported_not_judged() -> None:
    result = compare("k1", observed(other="x"), record(), names=["other"])
    assert result["verdict"] == "LIVE"
    assert result["details"]["names"]["other"]["status"] == "not_recorded"


def test_importing_the_package_in_a_kernel_stays_cheap() -> None:
    code = (
        "import sys, jupyter_suspend, jupyter_suspend.kernel, jupyter_suspend.kernel.protocol\n"
        "import jupyter_suspend.kernel.store, jupyter_suspend.kernel.registry, jupyter_suspend.kernel.client\n"
        "import jupyter_suspend.kernel.canary, jupyter_suspend.kernel.extension\n"
        "jupyter_suspend.register('x', 1)\n"
        "heavy = ('jupyter_server', 'tornado', 'numpy', 'torch', 'jsonschema', 'psutil')\n"
        "print(sorted({m.split('.')[0] for m in sys.modules if m.split('.')[0] in heavy}))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout
