"""The live-state canary: a value that exists only in this process's memory.

It is created once per process (a reload of the extension keeps it) and never
written anywhere; only its SHA-256 leaves the process. A kernel that answers
with the same hash after a snapshot restore is the same process, memory
included; a new process, even one with the same notebook open, cannot.
"""

from __future__ import annotations

import hashlib
import os
import re
import secrets
import socket
import time
from typing import Any

_canary: bytes | None = None
_created: float | None = None


def _value() -> bytes:
    global _canary, _created
    if _canary is None:
        _canary = secrets.token_bytes(32)
        _created = time.time()
    return _canary


def canary_hash() -> str:
    return hashlib.sha256(_value()).hexdigest()


def process_start_time(pid: int | None = None) -> float | None:
    """When the process started (epoch seconds), from /proc; None elsewhere."""
    pid = os.getpid() if pid is None else pid
    try:
        with open(f"/proc/{pid}/stat") as fh:
            stat = fh.read()
        with open("/proc/stat") as fh:
            btime = next(int(line.split()[1]) for line in fh if line.startswith("btime"))
    except (OSError, StopIteration, ValueError):
        try:
            import psutil
        except ImportError:
            return None
        return float(psutil.Process(pid).create_time())
    # Fields after the command name (which may contain spaces) start at ")".
    ticks = int(stat.rsplit(")", 1)[1].split()[19])
    return round(btime + ticks / os.sysconf("SC_CLK_TCK"), 2)


def _boot_id() -> str | None:
    try:
        with open("/proc/sys/kernel/random/boot_id") as fh:
            return fh.read().strip()
    except OSError:
        return None


def identity() -> dict[str, Any]:
    """What the server journals before a suspend and compares afterwards."""
    value_hash = canary_hash()
    return {
        "hash": value_hash,
        "pid": os.getpid(),
        "process_start": process_start_time(),
        "hostname": socket.gethostname(),
        "boot_id": _boot_id(),
        "created": _created,
    }


def kernel_id_from_connection_file(path: str) -> str | None:
    """The kernel id in a connection file name ``kernel-<id>.json`` (None otherwise)."""
    # fullmatch, not ``$``: ``$`` also matches before a trailing newline.
    match = re.fullmatch(r"kernel-(.+)\.json", os.path.basename(path or ""))
    return match.group(1) if match else None


def own_kernel_id() -> str | None:
    """This kernel's id (from its connection file), None outside a kernel."""
    env = os.environ.get("JUPYTER_SUSPEND_KERNEL_ID")
    if env:
        return env
    try:
        from ipykernel.kernelapp import IPKernelApp
    except ImportError:
        return None
    if not IPKernelApp.initialized():
        return None
    return kernel_id_from_connection_file(IPKernelApp.instance().connection_file or "")
