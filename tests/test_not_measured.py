"""Issue 17 item 8: "not measured" is null, never 0, in the server's, the kernel's and the CLI's status paths.

This machine has no NVML (nvidia-ml-py is not installed, or finds no driver): a real suspend and resume on
the local backend must say the GPU memory was not measured, and %suspend_status must not print 0 GPU-hours.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from jupyter_suspend.kernel.magics import format_status
from jupyter_suspend.server.resources import GpuProbe
from jupyter_suspend.server.timeline import build

from .conftest import SuspendClient

pytestmark = pytest.mark.skipif(GpuProbe().available, reason="NVML measures the GPUs on this machine")


@pytest.mark.slow
async def test_item8_without_nvml_the_gpu_memory_is_null_in_status_timeline_and_magics(
    suspend_api: SuspendClient,
) -> None:
    await suspend_api.open_notebook("model.ipynb")
    status = await suspend_api.suspend(reason="not measured")
    assert status["state"] == "suspended", status
    release = next(s for s in status["operation"]["steps"] if s["name"] == "release")
    assert release["detail"]["released"]["gpu_memory_bytes"] is None
    assert release["detail"]["released"]["kernel_memory_bytes"] > 0  # what was measured is a number
    for usage in release["detail"]["released"]["per_kernel"].values():
        assert usage["gpu_memory_bytes"] is None
        assert usage["rss_bytes"] > 0
    await asyncio.sleep(0.1)
    status = await suspend_api.resume()
    timeline = await suspend_api.json("GET", "timeline")
    cycle = timeline["cycles"][-1]
    assert cycle["released"]["gpu_memory_bytes"] is None
    assert cycle["released_totals"]["gpu_memory_gib_hours"] is None
    assert cycle["released_totals"]["gpu_measured"] is False
    assert cycle["released_totals"]["kernel_memory_gib_hours"] > 0
    assert cycle["released_totals"]["gpu_hours"] is None  # a release happened and nothing measured its GPUs
    assert timeline["totals"]["gpu_hours_released"] is None
    assert timeline["totals"]["gpu_hours_unknown_cycles"] == 1
    text = format_status(status, timeline, None)
    assert "GPU-hours not measured (nvidia-ml-py is not installed)" in text or "GPU-hours not measured (NVML" in text
    assert "0.0000 GPU-hours" not in text


def test_item8_an_older_journal_that_wrote_0_reads_back_as_not_measured() -> None:
    released = {
        "kernel_memory_bytes": 2**30,
        "gpu_memory_bytes": 0,
        "gpu_devices": [],
        "gpu_measurement": "nvidia-ml-py is not installed",
        "per_kernel": {"k1": {"rss_bytes": 2**30, "gpu_memory_bytes": 0}},
    }
    entries: list[dict[str, Any]] = [
        {"seq": 1, "kind": "suspend_requested", "wall": 1000.0, "operation_id": "s1", "reason": "", "kernels": []},
        {"seq": 2, "kind": "flushed", "wall": 1001.0, "operation_id": "s1", "kernels": []},
        {
            "seq": 3,
            "kind": "released",
            "wall": 1002.0,
            "operation_id": "s1",
            "environment_stopped_at": 1002.0,
            "node_released_at": None,
            "released": released,
            "kernels": [],
        },
    ]
    for entry in entries:
        entry.update(monotonic=entry["wall"], boot_id="b", pid=1)
    timeline = build(entries, now=1002.0 + 3600)
    cycle = timeline["cycles"][-1]
    assert cycle["released_totals"]["gpu_hours"] is None  # the old journal's 0 GPUs were never looked at
    assert timeline["totals"]["gpu_hours_released"] is None
    assert timeline["totals"]["gpu_hours_unknown_cycles"] == 1
    assert cycle["released"]["gpu_memory_bytes"] is None
    assert cycle["released"]["per_kernel"]["k1"]["gpu_memory_bytes"] is None
    assert cycle["released_totals"]["gpu_memory_gib_hours"] is None
    # Measured by NVML: the number stays, 0 included.
    measured = {**released, "gpu_measurement": "nvml", "gpu_devices": ["0:A100"]}
    entries[2] = {**entries[2], "released": measured}
    timeline = build(entries, now=1002.0 + 3600)
    cycle = timeline["cycles"][-1]
    assert timeline["totals"]["gpu_hours_released"] == pytest.approx(1.0, abs=0.01)
    assert timeline["totals"]["gpu_hours_unknown_cycles"] == 0
    assert cycle["released"]["gpu_memory_bytes"] == 0
    assert cycle["released_totals"]["gpu_measured"] is True
    assert cycle["released_totals"]["gpu_hours"] == pytest.approx(1.0, abs=0.01)
