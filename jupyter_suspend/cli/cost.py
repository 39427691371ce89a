"""What suspending cost and saved, computed from journal entries: pure functions, no I/O.

``jupyter suspend report`` and ``jupyter suspend simulate`` share these; docs/cost.md
defines every figure. The cycles come from the server's own reading of the journal
(:func:`~jupyter_suspend.server.replay.replay`, durations from
:func:`~jupyter_suspend.server.timeline.cycle_to_dict`); this module adds what a bill
needs: how long the node and its GPUs were really free, what was stored meanwhile,
and how long the returning user waited.
"""

from __future__ import annotations

import math
import random
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..server.metrics import reason_label
from ..server.replay import Cycle, replay
from ..server.timeline import cycle_to_dict

HOUR = 3600.0
DAY = 86400.0
GB = 1e9  # storage is billed in decimal gigabytes
GIB = 2**30  # memory is measured in binary gibibytes

DEFAULT_CLASS = "unclassified"
DEFAULT_ORIGIN = "user"
#: The backend's ``gpu_measurement`` when it really counted the devices (NVML).
GPU_MEASURED = "nvml"
#: A backend entry may say whether other pods ran on the released node (``node_other_workloads``: bool).
NODE_OTHER_WORKLOADS = "node_other_workloads"

SNAPSHOT_READY_KIND = "gke_snapshot_ready"
SNAPSHOT_DELETED_KIND = "gke_snapshot_deleted"
AUTO_SUSPEND_CANCELLED = "auto_suspend_cancelled"


def percentile(values: Sequence[float], q: float) -> float | None:
    """The ``q`` quantile (0..1) with linear interpolation between closest ranks; None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    position = (len(ordered) - 1) * q
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def _round(value: float | None, digits: int = 6) -> float | None:
    return None if value is None else round(value, digits)


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return float(value)


# -- report ---------------------------------------------------------------------------


@dataclass
class CycleCost:
    """One suspend cycle of one environment, with what the bill needs."""

    environment: str
    cycle_id: str
    backend: str
    workload_class: str
    origin: str
    reason: str
    #: live | cold | failed | aborted | suspended (still suspended at the end of the journal)
    result: str
    released_from: float | None
    released_until: float | None
    released_ongoing: bool
    node_released: bool
    gpus: int | None
    gpu_count_source: str
    kernel_memory_bytes: int
    gpu_memory_bytes: int
    checkpoint_bytes: int
    snapshot_bytes: int | None
    storage_gb_days: float
    resume_to_runnable: float | None
    node_other_workloads: str
    durations: dict[str, float | None] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    @property
    def released_hours(self) -> float:
        if self.released_from is None or self.released_until is None:
            return 0.0
        return max(0.0, self.released_until - self.released_from) / HOUR

    @property
    def node_hours_released(self) -> float:
        return self.released_hours if self.node_released else 0.0

    @property
    def gpu_hours_released(self) -> float | None:
        return None if self.gpus is None else self.gpus * self.released_hours

    def to_dict(self) -> dict[str, Any]:
        return {
            "environment": self.environment,
            "cycle_id": self.cycle_id,
            "backend": self.backend,
            "workload_class": self.workload_class,
            "origin": self.origin,
            "reason": self.reason,
            "result": self.result,
            "released_hours": _round(self.released_hours),
            "released_ongoing": self.released_ongoing,
            "node_released": self.node_released,
            "node_hours_released": _round(self.node_hours_released),
            "gpus": self.gpus,
            "gpu_count_source": self.gpu_count_source,
            "gpu_hours_released": _round(self.gpu_hours_released),
            "kernel_memory_gib_hours": _round(self.kernel_memory_bytes / GIB * self.released_hours),
            "gpu_memory_gib_hours": _round(self.gpu_memory_bytes / GIB * self.released_hours),
            "checkpoint_bytes": self.checkpoint_bytes,
            "snapshot_bytes": self.snapshot_bytes,
            "data_stored_bytes": self.checkpoint_bytes + (self.snapshot_bytes or 0),
            "storage_gb_days": _round(self.storage_gb_days),
            "resume_to_runnable_seconds": self.resume_to_runnable,
            "node_other_workloads": self.node_other_workloads,
            "durations": self.durations,
            "notes": self.notes,
        }


@dataclass
class EnvironmentCost:
    """One journal: one environment over the period it covers."""

    name: str
    start: float | None
    end: float | None
    cycles: list[CycleCost]
    gpus: int | None
    auto_suspends_cancelled: Counter[tuple[str, str]] = field(default_factory=Counter)

    @property
    def period_hours(self) -> float:
        if self.start is None or self.end is None:
            return 0.0
        return max(0.0, self.end - self.start) / HOUR


def _by_operation(entries: Iterable[dict[str, Any]], kind: str) -> dict[str, dict[str, Any]]:
    return {e["operation_id"]: e for e in entries if e.get("kind") == kind and isinstance(e.get("operation_id"), str)}


def _checkpoint_bytes(flushed: dict[str, Any] | None) -> int:
    total = 0
    for kernel in (flushed or {}).get("kernels") or []:
        for checkpoint in kernel.get("checkpoints") or []:
            size = _number(checkpoint.get("bytes")) if isinstance(checkpoint, dict) else None
            total += int(size or 0)
    return total


def _object(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _cycle_of(entry: dict[str, Any]) -> str | None:
    target = entry.get("cycle_id") or entry.get("operation_id")
    return target if isinstance(target, str) else None


def _result(c: Cycle) -> str:
    outcome = c.data.get("outcome")
    if outcome == "resumed":
        return str(c.data.get("restore") or "cold")
    if outcome in ("failed", "aborted"):
        return str(outcome)
    if any(str(note).startswith("resume failed") for note in c.data.get("notes", [])):
        return "failed"
    return "suspended"


def environment_cost(
    name: str, entries: list[dict[str, Any]], now: float, gpus_per_node: int | None
) -> EnvironmentCost:
    """Every cycle of one journal priced; ``now`` ends what is still suspended (and the period)."""
    requested = _by_operation(entries, "suspend_requested")
    flushed = _by_operation(entries, "flushed")
    snapshot_sizes: dict[str, tuple[float, int]] = {}
    deleted: dict[str, float] = {}
    other_work: dict[str, bool] = {}
    cancelled: Counter[tuple[str, str]] = Counter()
    for entry in entries:
        kind, cycle = entry.get("kind"), _cycle_of(entry)
        if kind == SNAPSHOT_READY_KIND and cycle is not None:
            size = _number(entry.get("size_bytes"))
            at = _number(entry.get("mark_at")) or float(entry["wall"])
            if size is not None:
                snapshot_sizes[cycle] = (at, int(size))
        elif kind == SNAPSHOT_DELETED_KIND and cycle is not None:
            deleted[cycle] = float(entry["wall"])
        elif kind == AUTO_SUSPEND_CANCELLED:
            cancelled[(str(entry.get("workload_class") or DEFAULT_CLASS), reason_label(entry))] += 1
        if cycle is not None and isinstance(entry.get(NODE_OTHER_WORKLOADS), bool):
            other_work[cycle] = entry[NODE_OTHER_WORKLOADS]
    # The state left suspended/failed without a restore (acknowledged, a new suspend): the interval ends there.
    left = sorted(
        float(e["wall"])
        for e in entries
        if e.get("kind") in ("transition", "recovered") and e.get("to") in ("running", "ready", "flushing")
    )
    cycles = replay(entries).cycles
    walls = [float(e["wall"]) for e in entries]
    costs = [
        _cycle_cost(
            name,
            c,
            requested.get(c.id, {}),
            flushed.get(c.id),
            snapshot_sizes,
            deleted,
            other_work,
            left,
            now,
            gpus_per_node,
        )
        for c in cycles
    ]
    end = max(walls, default=None)
    if end is not None and any(c.released_ongoing for c in costs):
        end = max(end, now)
    measured = [c.gpus for c in costs if c.gpu_count_source == "measured" and c.gpus is not None]
    releases_node = any(c.node_released for c in costs)
    env_gpus = max(measured) if measured else (gpus_per_node if releases_node else None)
    return EnvironmentCost(name, min(walls, default=None), end, costs, env_gpus, cancelled)


def _cycle_cost(
    environment: str,
    c: Cycle,
    requested: dict[str, Any],
    flushed: dict[str, Any] | None,
    snapshot_sizes: dict[str, tuple[float, int]],
    deleted: dict[str, float],
    other_work: dict[str, bool],
    left: list[float],
    now: float,
    gpus_per_node: int | None,
) -> CycleCost:
    backend = _object(requested.get("backend"))
    capabilities = _object(backend.get("capabilities"))
    node_released = bool(capabilities.get("releases_node"))
    result = _result(c)
    released = _object(c.data.get("released"))
    notes = [str(n) for n in c.data.get("notes", []) if n]

    # The node (or the memory) is free from its release until the returning
    # environment holds capacity again; still suspended: until ``now``.
    released_from = c.marks.get("node_released", c.marks.get("environment_stopped"))
    released_until = next(
        (c.marks[m] for m in ("capacity_available", "restored", "first_cell_runnable") if m in c.marks), None
    )
    ongoing = False
    if result == "aborted" or released_from is None:
        released_from = released_until = None
    elif released_until is None:
        left_at = next((at for at in left if at > released_from), None)
        if left_at is not None:
            released_until = left_at
            notes.append("left the suspended state without a restore")
        else:
            released_until, ongoing = now, True

    devices = released.get("gpu_devices")
    if released.get("gpu_measurement") == GPU_MEASURED and isinstance(devices, list):
        gpus, source = len(devices), "measured"
    elif node_released and gpus_per_node is not None:
        gpus, source = gpus_per_node, "assumed"
        notes.append(f"GPU count not measured: --gpus-per-node {gpus_per_node} assumed")
    else:
        gpus, source = None, "unknown"

    checkpoint_bytes = _checkpoint_bytes(flushed)
    storage = 0.0
    stored_from = c.marks.get("flush_completed")
    stored_until = released_until if released_until is not None else stored_from
    if stored_from is not None and stored_until is not None:
        storage += checkpoint_bytes / GB * max(0.0, stored_until - stored_from) / DAY
    snapshot_bytes: int | None = None
    if c.id in snapshot_sizes:
        ready_at, snapshot_bytes = snapshot_sizes[c.id]
        kept_until = deleted.get(c.id)
        if kept_until is None:
            kept_until = now
            notes.append("snapshot not deleted in this journal: stored until the report's end")
        storage += snapshot_bytes / GB * max(0.0, kept_until - ready_at) / DAY

    if c.id in other_work:
        others = "yes" if other_work[c.id] else "no"
    elif not node_released and released_from is not None:
        others = "yes"  # the node was never released: this server itself kept running on it
    else:
        others = "unknown"

    durations = cycle_to_dict(c, now)["durations"]
    return CycleCost(
        environment=environment,
        cycle_id=c.id,
        backend=str(c.data.get("backend") or backend.get("name") or "unknown"),
        workload_class=str(requested.get("workload_class") or DEFAULT_CLASS),
        origin=str(requested.get("origin") or DEFAULT_ORIGIN),
        reason=str(c.data.get("reason") or ""),
        result=result,
        released_from=released_from,
        released_until=released_until,
        released_ongoing=ongoing,
        node_released=node_released,
        gpus=gpus,
        gpu_count_source=source,
        kernel_memory_bytes=int(_number(released.get("kernel_memory_bytes")) or 0),
        gpu_memory_bytes=int(_number(released.get("gpu_memory_bytes")) or 0),
        checkpoint_bytes=checkpoint_bytes,
        snapshot_bytes=snapshot_bytes,
        storage_gb_days=storage,
        resume_to_runnable=durations.get("resume_to_runnable"),
        node_other_workloads=others,
        durations=durations,
        notes=notes,
    )


def summarize(cycles: Sequence[CycleCost]) -> dict[str, Any]:
    """Totals of a set of cycles (all of them, or one workload class)."""
    results = Counter(c.result for c in cycles)
    ended = results["live"] + results["cold"] + results["failed"]
    waits = [c.resume_to_runnable for c in cycles if c.resume_to_runnable is not None]
    gpu_hours = [c.gpu_hours_released for c in cycles]
    known = [g for g in gpu_hours if g is not None]
    return {
        "cycles": len(cycles),
        "results": {name: results[name] for name in ("live", "cold", "failed", "aborted", "suspended")},
        "rates": {name: _round(results[name] / ended, 4) if ended else None for name in ("live", "cold", "failed")},
        "released_hours": _round(sum(c.released_hours for c in cycles)),
        "node_hours_released": _round(sum(c.node_hours_released for c in cycles)),
        "gpu_hours_released": _round(sum(known)) if known else None,
        "gpu_hours_unknown_cycles": sum(1 for g in gpu_hours if g is None),
        "kernel_memory_gib_hours": _round(sum(c.kernel_memory_bytes / GIB * c.released_hours for c in cycles)),
        "gpu_memory_gib_hours": _round(sum(c.gpu_memory_bytes / GIB * c.released_hours for c in cycles)),
        "data_stored_bytes": sum(c.checkpoint_bytes + (c.snapshot_bytes or 0) for c in cycles),
        "storage_gb_days": _round(sum(c.storage_gb_days for c in cycles)),
        "resume_to_runnable_seconds": {
            "count": len(waits),
            "p50": _round(percentile(waits, 0.5), 3),
            "p95": _round(percentile(waits, 0.95), 3),
        },
    }


def report(environments: Sequence[EnvironmentCost]) -> dict[str, Any]:
    """The report's figures (without its problems and sources, which the command adds)."""
    cycles = [c for env in environments for c in env.cycles]
    envs = []
    observed_node = released_node = 0.0
    observed_gpu: float | None = None
    released_gpu = 0.0
    for env in environments:
        totals = summarize(env.cycles)
        period = env.period_hours
        observed_node += period
        if env.gpus is not None:
            observed_gpu = (observed_gpu or 0.0) + env.gpus * period
            released_gpu += totals["gpu_hours_released"] or 0.0
        released_node += totals["node_hours_released"]
        envs.append(
            {
                "environment": env.name,
                "period_hours": _round(period),
                "gpus": env.gpus,
                "node_hours": {
                    "observed": _round(period),
                    "released": totals["node_hours_released"],
                    "allocated": _round(period - totals["node_hours_released"]),
                },
                "cycles": totals["cycles"],
            }
        )
    classes = sorted({c.workload_class for c in cycles})
    cancelled: Counter[tuple[str, str]] = Counter()
    for env in environments:
        cancelled.update(env.auto_suspends_cancelled)
    return {
        "environments": envs,
        "cycles": [c.to_dict() for c in cycles],
        "totals": {
            **summarize(cycles),
            "node_hours": {
                "observed": _round(observed_node),
                "released": _round(released_node),
                "allocated": _round(observed_node - released_node),
            },
            "gpu_node_hours": {
                "observed": _round(observed_gpu),
                "released": _round(released_gpu) if observed_gpu is not None else None,
                "allocated": _round(observed_gpu - released_gpu) if observed_gpu is not None else None,
            },
        },
        "by_class": {name: summarize([c for c in cycles if c.workload_class == name]) for name in classes},
        "auto_suspends": {
            "suspended": dict(sorted(Counter(c.workload_class for c in cycles if c.origin == "idle_policy").items())),
            "cancelled": [{"workload_class": k[0], "reason": k[1], "count": n} for k, n in sorted(cancelled.items())],
        },
    }


# -- simulation -----------------------------------------------------------------------

Interval = tuple[float, float]


def upper_bound(week_hours: float, active_hours: float) -> float:
    """Node-hours a suspend can release at most: every hour not worked (before suspend and restore time)."""
    if not 0 <= active_hours <= week_hours:
        raise ValueError(f"active hours {active_hours:g} must be between 0 and the week's {week_hours:g}")
    return week_hours - active_hours


def merge(intervals: Iterable[Interval]) -> list[Interval]:
    """Sorted, overlapping or touching intervals joined; empty ones dropped."""
    out: list[Interval] = []
    for start, end in sorted(i for i in intervals if i[1] > i[0]):
        if out and start <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], end))
        else:
            out.append((start, end))
    return out


@dataclass(frozen=True)
class SweepRow:
    threshold_seconds: float
    released_hours: float
    interruptions: int
    returns: int
    waiting_added_seconds: float
    suspends_not_paying: int

    def to_dict(self) -> dict[str, Any]:
        return {
            "threshold_seconds": self.threshold_seconds,
            "released_hours": round(self.released_hours, 6),
            "interruptions": self.interruptions,
            "returns": self.returns,
            "waiting_added_seconds": round(self.waiting_added_seconds, 3),
            "suspends_not_paying": self.suspends_not_paying,
        }


def sweep_one(
    activity: Sequence[Interval], horizon: Interval, threshold: float, suspend_seconds: float, resume_seconds: float
) -> SweepRow:
    """One idle threshold over one environment's activity (seconds).

    Each idle gap longer than ``threshold`` is one suspend (an interruption),
    requested ``threshold`` after the last activity; the node is free once the
    suspend took ``suspend_seconds`` and until the user comes back (the next
    activity, or the horizon's end: no return). Each return waits
    ``resume_seconds``. A suspend *does not pay* when the node was free for less
    than the ``resume_seconds`` the user then waits."""
    merged = merge(activity)
    start, end = horizon
    gaps: list[tuple[float, float, bool]] = []  # (idle from, idle until, the user comes back)
    cursor = start
    for a, b in merged:
        if a > cursor:  # idle before it, from the horizon's start or the previous activity
            gaps.append((cursor, a, True))
        cursor = max(cursor, b)
    if end > cursor:
        gaps.append((cursor, end, False))
    released = waiting = 0.0
    interruptions = returns = not_paying = 0
    for idle_from, idle_until, comes_back in gaps:
        if idle_until - idle_from <= threshold:
            continue
        interruptions += 1
        free = max(0.0, idle_until - (idle_from + threshold + suspend_seconds))
        released += free
        if comes_back:
            returns += 1
            waiting += resume_seconds
            if free < resume_seconds:
                not_paying += 1
    return SweepRow(threshold, released / HOUR, interruptions, returns, waiting, not_paying)


def sweep(
    activities: Sequence[tuple[Sequence[Interval], Interval]],
    thresholds: Sequence[float],
    suspend_seconds: float,
    resume_seconds: float,
) -> list[SweepRow]:
    """:func:`sweep_one` summed over several environments, per threshold."""
    rows = []
    for threshold in thresholds:
        parts = [sweep_one(a, h, threshold, suspend_seconds, resume_seconds) for a, h in activities]
        rows.append(
            SweepRow(
                threshold,
                sum(p.released_hours for p in parts),
                sum(p.interruptions for p in parts),
                sum(p.returns for p in parts),
                sum(p.waiting_added_seconds for p in parts),
                sum(p.suspends_not_paying for p in parts),
            )
        )
    return rows


def activity_from_entries(entries: Sequence[dict[str, Any]]) -> tuple[list[Interval], Interval]:
    """Active intervals of one journal: from its start (or a cycle's first runnable cell)
    to the next end of active work; the horizon is the journal's span."""
    walls = [float(e["wall"]) for e in entries]
    if not walls:
        return [], (0.0, 0.0)
    horizon = (min(walls), max(walls))
    active: list[Interval] = []
    since: float | None = horizon[0]
    for c in replay(list(entries)).cycles:
        ended = c.marks.get("active_work_ended", c.marks.get("suspend_requested"))
        if since is not None and ended is not None:
            active.append((since, ended))
        since = next((c.marks[m] for m in ("first_cell_runnable", "restored") if m in c.marks), None)
        if c.data.get("outcome") == "aborted":
            since = ended  # nothing was released: work went on
    if since is not None:
        active.append((since, horizon[1]))
    return merge(active), horizon


def measured_times(cycles: Sequence[CycleCost]) -> tuple[float | None, float | None]:
    """Median suspend (requested -> node released) and resume (requested -> runnable) seconds."""
    suspends = []
    for c in cycles:
        d = c.durations
        if d.get("suspend") is not None and c.released_from is not None:
            suspends.append(float(d["suspend"] or 0) + float(d.get("release") or 0))
    resumes = [c.resume_to_runnable for c in cycles if c.resume_to_runnable is not None]
    return percentile(suspends, 0.5), percentile(resumes, 0.5)


#: Synthetic activity: active bursts and idle gaps (minutes) drawn with these weights.
BURST_MINUTES = ((10, 3), (25, 4), (45, 3), (90, 2))
GAP_MINUTES = ((2, 5), (5, 4), (10, 3), (20, 3), (45, 2), (90, 1))


def synthetic_week(seed: int, days: int = 7, workdays: int = 5) -> tuple[list[Interval], Interval]:
    """A reproducible week: on each workday one session from about 9:00 to about 18:00
    of active bursts and idle gaps drawn from :data:`BURST_MINUTES` and :data:`GAP_MINUTES`."""
    rng = random.Random(seed)
    active: list[Interval] = []
    for day in range(days):
        if day >= workdays:
            continue
        t = day * DAY + 9 * HOUR + rng.uniform(0, HOUR)
        stop = day * DAY + 17.5 * HOUR + rng.uniform(0, HOUR)
        while t < stop:
            burst = rng.choices([m for m, _ in BURST_MINUTES], [w for _, w in BURST_MINUTES])[0] * 60.0
            active.append((t, min(t + burst, stop)))
            t += burst + rng.choices([m for m, _ in GAP_MINUTES], [w for _, w in GAP_MINUTES])[0] * 60.0
    return merge(active), (0.0, days * DAY)
