"""Suspend/resume cycles measured from the journal.

Each cycle records, separately, what the mission asks a trial to record:
when active work ended, when the environment stopped, when the node (or, on
the local backend, the kernels' memory and GPU memory) was free, when resume
was asked for, when capacity was there, and when the returning user could run
the next cell; plus what was released and for how long. Beside these marks of
the core, ``events`` lists the backend's own (a snapshot requested, the pod
stopped...: see :func:`~jupyter_suspend.server.replay.backend_mark`).

The cycles themselves are folded by :func:`~jupyter_suspend.server.replay.replay`
(the one reading of the journal); this module turns them into durations.
Durations between two entries of the same server process use the monotonic
clock (immune to wall-clock jumps such as the one a gVisor restore causes);
across processes they fall back to wall-clock time.
"""

from __future__ import annotations

import time
from typing import Any

from .journal import utc_iso
from .replay import MARKS, Cycle, replay
from .resources import gpu_measured, not_measured_as_null


def _seconds(c: Cycle, start: str, end: str) -> float | None:
    if start not in c.marks or end not in c.marks:
        return None
    a, b = c.clocks.get(start), c.clocks.get(end)
    if a and b and a[2] == b[2]:
        return round(b[1] - a[1], 3)
    return round(c.marks[end] - c.marks[start], 3)


def events(c: Cycle) -> list[dict[str, Any]]:
    """The backend's own marks of a cycle, oldest first (journal order among equal times)."""
    start = c.marks.get("suspend_requested")
    return [
        {
            "name": name,
            "kind": kind,
            "time": utc_iso(at),
            "since_suspend_requested": round(at - start, 3) if start is not None else None,
        }
        for at, name, kind in sorted(c.events, key=lambda event: event[0])
    ]


def cycle_to_dict(c: Cycle, now: float) -> dict[str, Any]:
    out = dict(c.data)
    out["times"] = {name: utc_iso(c.marks[name]) if name in c.marks else None for name in MARKS}
    out["events"] = events(c)
    released_from = c.marks.get("node_released", c.marks.get("environment_stopped"))
    released_until = c.marks.get("resume_requested")
    released_seconds = None
    if released_from is not None and c.data["outcome"] != "aborted":
        released_seconds = round((released_until or now) - released_from, 3)
    out["durations"] = {
        "idle_before_suspend": _seconds(c, "active_work_ended", "suspend_requested"),
        "flush": _seconds(c, "suspend_requested", "flush_completed"),
        "suspend": _seconds(c, "suspend_requested", "environment_stopped"),
        "release": _seconds(c, "environment_stopped", "node_released"),
        "suspended": released_seconds,
        "waiting_for_capacity": _seconds(c, "resume_requested", "capacity_available"),
        "resume_to_runnable": _seconds(c, "resume_requested", "first_cell_runnable"),
    }
    released = c.data.get("released") or {}
    if c.data.get("released"):  # journals written before "not measured" was null said 0
        out["released"] = not_measured_as_null(released)
    measured = gpu_measured(released)
    gpus = len(released.get("gpu_devices", []))
    hours = (released_seconds or 0) / 3600
    out["released_totals"] = {
        "kernel_memory_gib_hours": round(released.get("kernel_memory_bytes", 0) / 2**30 * hours, 6),
        "gpu_memory_gib_hours": round((released.get("gpu_memory_bytes") or 0) / 2**30 * hours, 6) if measured else None,
        # Devices NVML saw x hours (0 when it looked and saw none, or when nothing was released: an aborted
        # suspend); null when a release happened and nothing looked (no NVML): unknown, never 0 GPU-hours.
        "gpu_hours": round(gpus * hours, 6) if measured or released_seconds is None else None,
        "gpu_measured": measured,
        "ongoing": released_until is None and released_seconds is not None,
    }
    return out


def build(entries: list[dict[str, Any]], now: float | None = None) -> dict[str, Any]:
    """The timeline answer: every cycle, oldest first, and the totals."""
    now = time.time() if now is None else now
    cycle_dicts = [cycle_to_dict(c, now) for c in replay(entries).cycles]
    # Cycles that released something (an aborted suspend released nothing, so it is neither known nor unknown).
    released_cycles = [c for c in cycle_dicts if c["durations"]["suspended"] is not None]
    gpu_hours = [c["released_totals"]["gpu_hours"] for c in released_cycles]
    known = [hours for hours in gpu_hours if hours is not None]
    return {
        "cycles": cycle_dicts,
        "totals": {
            "cycles": len(cycle_dicts),
            "resumed": sum(1 for c in cycle_dicts if c["outcome"] == "resumed"),
            "aborted": sum(1 for c in cycle_dicts if c["outcome"] == "aborted"),
            # The sum of the measured cycles; null when none was measured; the unmeasured ones are counted apart
            # (the shape of `jupyter suspend report`'s totals).
            "gpu_hours_released": round(sum(known), 6) if known else None,
            "gpu_hours_unknown_cycles": len(gpu_hours) - len(known),
            "kernel_memory_gib_hours_released": round(
                sum(c["released_totals"]["kernel_memory_gib_hours"] for c in cycle_dicts), 6
            ),
        },
    }
