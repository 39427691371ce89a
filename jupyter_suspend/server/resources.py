"""Measure what a kernel holds and confirm that it was freed.

Host memory comes from psutil (resident set size of the kernel's process
tree). Accelerator memory comes from NVML (``nvidia-ml-py``) where the driver
and the library are present; elsewhere the report says so instead of
claiming zero.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import psutil

#: A ResourceReport's ``gpu_measurement`` when NVML really measured the devices (also ``cli.cost.GPU_MEASURED``).
GPU_MEASURED = "nvml"


def gpu_measured(released: dict[str, Any]) -> bool:
    return released.get("gpu_measurement") == GPU_MEASURED


def not_measured_as_null(released: dict[str, Any]) -> dict[str, Any]:
    """A release report (``ResourceReport.to_dict()``, or one read back from an older journal) whose
    GPU memory is ``None`` where nothing measured it: without NVML a 0 would claim a GPU held nothing."""
    if gpu_measured(released):
        return released
    out = dict(released)
    if "gpu_memory_bytes" in out:  # a report without the field says nothing about it: left as it is
        out["gpu_memory_bytes"] = None
    per_kernel = released.get("per_kernel")
    if isinstance(per_kernel, dict):
        out["per_kernel"] = {
            kernel_id: {**usage, "gpu_memory_bytes": None} if isinstance(usage, dict) else usage
            for kernel_id, usage in per_kernel.items()
        }
    return out


@dataclass
class ProcessUsage:
    pids: list[int] = field(default_factory=list)
    rss_bytes: int = 0
    gpu_memory_bytes: int = 0
    gpu_devices: list[str] = field(default_factory=list)


def process_tree(pid: int) -> list[psutil.Process]:
    try:
        root = psutil.Process(pid)
        return [root, *root.children(recursive=True)]
    except psutil.Error:
        return []


class GpuProbe:
    """Per-process accelerator memory through NVML, when available."""

    def __init__(self) -> None:
        self.available = False
        self.reason = "nvidia-ml-py is not installed"
        self._nvml: Any = None
        try:
            import pynvml  # from nvidia-ml-py
        except ImportError:
            return
        try:
            pynvml.nvmlInit()
        except Exception as exc:  # noqa: BLE001 - any NVML error means "no GPU here"
            self.reason = f"NVML unavailable: {exc}"
            return
        self._nvml = pynvml
        self.available = True
        self.reason = "nvml"

    def usage_by_pid(self) -> dict[int, tuple[int, list[str]]]:
        """pid -> (bytes of device memory on all devices, ["index:name", ...])."""
        if not self.available:
            return {}
        nvml = self._nvml
        usage: dict[int, tuple[int, list[str]]] = {}
        for index in range(nvml.nvmlDeviceGetCount()):
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
            name = nvml.nvmlDeviceGetName(handle)
            device = f"{index}:{name.decode() if isinstance(name, bytes) else name}"
            for proc in nvml.nvmlDeviceGetComputeRunningProcesses(handle):
                used, devices = usage.get(proc.pid, (0, []))
                usage[proc.pid] = (used + (proc.usedGpuMemory or 0), [*devices, device])
        return usage


def measure(pid: int | None, gpu: GpuProbe) -> ProcessUsage:
    if pid is None:
        return ProcessUsage()
    usage = ProcessUsage()
    gpu_by_pid = gpu.usage_by_pid()
    for proc in process_tree(pid):
        try:
            usage.rss_bytes += proc.memory_info().rss
        except psutil.Error:
            continue
        usage.pids.append(proc.pid)
        if proc.pid in gpu_by_pid:
            used, devices = gpu_by_pid[proc.pid]
            usage.gpu_memory_bytes += used
            usage.gpu_devices += [d for d in devices if d not in usage.gpu_devices]
    return usage


def alive(pids: list[int]) -> list[int]:
    """The pids that still run (zombies count as gone: their memory is freed)."""
    running = []
    for pid in pids:
        try:
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                running.append(pid)
        except psutil.Error:
            continue
    return running


def wait_until_gone(pids: list[int], gpu: GpuProbe, timeout: float) -> tuple[float | None, list[int]]:
    """Block until the processes exited and hold no device memory.

    Returns (time when everything was released or None, pids still holding).
    Blocking: call it in a worker thread.
    """
    deadline = time.monotonic() + timeout
    while True:
        holding = alive(pids)
        if gpu.available:
            gpu_pids = gpu.usage_by_pid()
            holding += [p for p in pids if p in gpu_pids and p not in holding]
        if not holding:
            return time.time(), []
        if time.monotonic() > deadline:
            return None, holding
        time.sleep(0.05)
