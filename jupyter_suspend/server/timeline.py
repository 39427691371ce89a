"""Suspend/resume cycles measured from the journal.

Each cycle records, separately, what the mission asks a trial to record:
when active work ended, when the environment stopped, when the node (or, on
the local backend, the kernels' memory and GPU memory) was free, when resume
was asked for, when capacity was there, and when the returning user could run
the next cell; plus what was released and for how long.

Durations between two entries of the same server process use the monotonic
clock (immune to wall-clock jumps such as the one a gVisor restore causes);
across processes they fall back to wall-clock time.
"""

from __future__ import annotations

import time
from typing import Any

from .journal import utc_iso

_MARKS = (
    "active_work_ended",
    "suspend_requested",
    "flush_completed",
    "environment_stopped",
    "node_released",
    "resume_requested",
    "capacity_available",
    "restored",
    "first_cell_runnable",
)


class _Cycle:
    def __init__(self, cycle_id: str):
        self.id = cycle_id
        self.marks: dict[str, float] = {}
        # (wall, monotonic, boot_id) of the journal entries behind the marks
        self.clocks: dict[str, tuple[float, float, str]] = {}
        self.data: dict[str, Any] = {
            "id": cycle_id,
            "reason": "",
            "outcome": "in_progress",
            "restore": None,
            "kernels": 0,
            "released": None,
            "notes": [],
        }

    def mark(self, name: str, wall: float | None, entry: dict[str, Any] | None = None) -> None:
        if wall is None:
            return
        self.marks[name] = float(wall)
        if entry is not None and abs(entry.get("wall", 0) - wall) < 1e-6:
            self.clocks[name] = (entry["wall"], entry["monotonic"], entry["boot_id"])

    def seconds(self, start: str, end: str) -> float | None:
        if start not in self.marks or end not in self.marks:
            return None
        a, b = self.clocks.get(start), self.clocks.get(end)
        if a and b and a[2] == b[2]:
            return round(b[1] - a[1], 3)
        return round(self.marks[end] - self.marks[start], 3)

    def to_dict(self, now: float) -> dict[str, Any]:
        out = dict(self.data)
        out["times"] = {name: utc_iso(self.marks[name]) if name in self.marks else None for name in _MARKS}
        released_from = self.marks.get("node_released", self.marks.get("environment_stopped"))
        released_until = self.marks.get("resume_requested")
        released_seconds = None
        if released_from is not None and self.data["outcome"] != "aborted":
            released_seconds = round((released_until or now) - released_from, 3)
        out["durations"] = {
            "idle_before_suspend": self.seconds("active_work_ended", "suspend_requested"),
            "flush": self.seconds("suspend_requested", "flush_completed"),
            "suspend": self.seconds("suspend_requested", "environment_stopped"),
            "release": self.seconds("environment_stopped", "node_released"),
            "suspended": released_seconds,
            "waiting_for_capacity": self.seconds("resume_requested", "capacity_available"),
            "resume_to_runnable": self.seconds("resume_requested", "first_cell_runnable"),
        }
        released = self.data.get("released") or {}
        gpus = len(released.get("gpu_devices", []))
        hours = (released_seconds or 0) / 3600
        out["released_totals"] = {
            "kernel_memory_gib_hours": round(released.get("kernel_memory_bytes", 0) / 2**30 * hours, 6),
            "gpu_memory_gib_hours": round(released.get("gpu_memory_bytes", 0) / 2**30 * hours, 6),
            "gpu_hours": round(gpus * hours, 6),
            "ongoing": released_until is None and released_seconds is not None,
        }
        return out


def build(entries: list[dict[str, Any]], now: float | None = None) -> dict[str, Any]:
    """Fold journal entries into cycles, oldest first."""
    now = time.time() if now is None else now
    cycles: dict[str, _Cycle] = {}
    order: list[str] = []

    for entry in entries:
        kind = entry.get("kind")
        op = entry.get("operation_id")
        if kind == "suspend_requested" and op:
            c = cycles[op] = _Cycle(op)
            order.append(op)
            c.data["reason"] = entry.get("reason", "")
            c.data["kernels"] = len(entry.get("kernels", []))
            c.data["backend"] = (entry.get("backend") or {}).get("name")
            c.mark("suspend_requested", entry.get("wall"), entry)
            c.mark("active_work_ended", entry.get("active_work_ended"))
            continue
        # Resume entries name the cycle they resume; a capacity wait or a
        # failed resume belongs to the latest cycle.
        target = entry.get("cycle_id") or op
        if kind in {"capacity_wait", "operation_finished"} and entry.get("operation_kind") != "suspend":
            target = order[-1] if order else None
        found = cycles.get(target) if target else None
        if found is not None:
            _apply(found, kind, entry)

    cycle_dicts = [cycles[i].to_dict(now) for i in order]
    return {
        "cycles": cycle_dicts,
        "totals": {
            "cycles": len(cycle_dicts),
            "resumed": sum(1 for c in cycle_dicts if c["outcome"] == "resumed"),
            "aborted": sum(1 for c in cycle_dicts if c["outcome"] == "aborted"),
            "gpu_hours_released": round(sum(c["released_totals"]["gpu_hours"] for c in cycle_dicts), 6),
            "kernel_memory_gib_hours_released": round(
                sum(c["released_totals"]["kernel_memory_gib_hours"] for c in cycle_dicts), 6
            ),
        },
    }


def _apply(c: _Cycle, kind: str | None, entry: dict[str, Any]) -> None:
    notes: list[str] = c.data["notes"]
    if kind == "flushed":
        c.mark("flush_completed", entry.get("wall"), entry)
        kernels = entry.get("kernels", [])
        c.data["checkpointed_kernels"] = sum(1 for k in kernels if k.get("status") == "checkpointed")
    elif kind == "released":
        c.mark("environment_stopped", entry.get("environment_stopped_at"))
        c.mark("node_released", entry.get("node_released_at"))
        c.data["released"] = entry.get("released")
        if entry.get("partial"):
            notes.append(f"release failed part-way: {entry.get('error')}")
        if entry.get("snapshot"):
            c.data["snapshot"] = entry["snapshot"]
    elif kind == "resume_requested":
        c.mark("resume_requested", entry.get("wall"), entry)
    elif kind == "capacity_wait":
        notes.append(f"waited for capacity: {entry.get('reason')}")
    elif kind == "restored":
        c.mark("resume_requested", entry.get("resume_requested_at"))
        c.mark("capacity_available", entry.get("capacity_available_at"))
        c.mark("restored", entry.get("restored_at"))
        c.mark("first_cell_runnable", entry.get("first_cell_runnable_at"))
        c.data["restore"] = entry.get("restore")
        c.data["checkpoints_restored"] = entry.get("checkpoints_restored")
        c.data["outcome"] = "resumed"
    elif kind == "operation_finished" and entry.get("operation_kind") == "suspend":
        outcome = entry.get("outcome")
        if outcome in {"aborted", "failed"}:
            c.data["outcome"] = outcome
            notes.append(entry.get("message", ""))
        elif c.data["outcome"] == "in_progress":
            c.data["outcome"] = "suspended"
    elif kind == "operation_finished" and entry.get("operation_kind") == "resume":
        if entry.get("outcome") == "failed":
            notes.append(f"resume failed: {entry.get('message', '')}")
    elif kind == "recovered":
        notes.append(f"server started cold: {entry.get('message', '')}")
