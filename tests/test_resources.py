"""Measuring what a kernel holds and confirming that it was freed.

Host memory is measured on real processes. GPU memory needs an NVIDIA driver,
which these machines do not have: the NVML path is exercised with a stand-in
``pynvml`` module that answers like the real library (marked below), and the
real-machine behaviour without NVML (report says "not measured") is tested as is.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import types
from typing import Any

import pytest

from jupyter_suspend.server.resources import GpuProbe, alive, measure, process_tree, wait_until_gone


def test_without_nvml_gpu_is_reported_unmeasured() -> None:
    probe = GpuProbe()
    if probe.available:  # pragma: no cover - only on a machine with a GPU
        pytest.skip("this machine has NVML")
    assert probe.usage_by_pid() == {}
    assert "nvidia-ml-py" in probe.reason or "NVML" in probe.reason


def test_rss_of_a_process_tree_and_release() -> None:
    child_code = "import time; x = bytearray(32 * 2**20); time.sleep(60)"
    code = (
        "import subprocess, sys, time; b = bytearray(48 * 2**20); "
        f"c = subprocess.Popen([sys.executable, '-c', {child_code!r}]); time.sleep(60)"
    )
    parent = subprocess.Popen([sys.executable, "-c", code])
    try:
        deadline = time.monotonic() + 20
        while True:
            usage = measure(parent.pid, GpuProbe())
            if len(usage.pids) == 2 and usage.rss_bytes > 80 * 2**20:
                break
            assert time.monotonic() < deadline, f"child never appeared: {usage}"
            time.sleep(0.05)
        assert usage.pids[0] == parent.pid
    finally:
        for proc in process_tree(parent.pid):
            proc.kill()
        parent.wait()
    released_at, holding = wait_until_gone(usage.pids, GpuProbe(), timeout=10)
    assert holding == []
    assert released_at is not None
    assert alive(usage.pids) == []


class _FakeNvml(types.ModuleType):
    """Stand-in for nvidia-ml-py: two GPUs, one kernel process on each."""

    def __init__(self, usage: dict[int, list[tuple[int, int]]]):
        super().__init__("pynvml")
        self._usage = usage  # device index -> [(pid, bytes)]

    def nvmlInit(self) -> None:
        pass

    def nvmlDeviceGetCount(self) -> int:
        return len(self._usage)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        return index

    def nvmlDeviceGetName(self, handle: int) -> bytes:
        return b"NVIDIA L4"

    def nvmlDeviceGetComputeRunningProcesses(self, handle: int) -> list[Any]:
        return [types.SimpleNamespace(pid=pid, usedGpuMemory=used) for pid, used in self._usage[handle]]


def test_gpu_memory_per_process_tree_through_nvml(monkeypatch: pytest.MonkeyPatch) -> None:
    """Stand-in NVML (no GPU here): checks how device memory is attributed to a kernel's tree."""
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        me = os.getpid()
        fake = _FakeNvml({0: [(child.pid, 3 * 2**30), (999_999, 2**30)], 1: [(child.pid, 2**30)]})
        monkeypatch.setitem(sys.modules, "pynvml", fake)
        probe = GpuProbe()
        assert probe.available
        assert probe.usage_by_pid()[child.pid] == (4 * 2**30, ["0:NVIDIA L4", "1:NVIDIA L4"])
        usage = measure(child.pid, probe)
        assert usage.gpu_memory_bytes == 4 * 2**30
        assert usage.pids == [child.pid]
        assert usage.gpu_devices == ["0:NVIDIA L4", "1:NVIDIA L4"]
        assert me not in usage.pids
    finally:
        child.kill()
        child.wait()
    # Still listed by NVML after exit: the release is not confirmed.
    released_at, holding = wait_until_gone([child.pid], probe, timeout=0.3)
    assert released_at is None
    assert holding == [child.pid]
    fake._usage = {0: [], 1: []}
    released_at, holding = wait_until_gone([child.pid], probe, timeout=1)
    assert released_at is not None
    assert holding == []
