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


# -- journals: one environment's entries, each once ------------------------------------

#: An entry is the one its writer numbered: a server process (``boot_id``, a random id per
#: process) numbers its entries with the journal's ``seq``, so the pair names one entry of one
#: environment wherever a copy of it is found.
EntryKey = tuple[str, int]


def entry_key(entry: dict[str, Any]) -> EntryKey:
    return (str(entry["boot_id"]), int(entry["seq"]))


@dataclass
class Problem:
    """Something in the journals that a reader of the figures must know (``problems`` of the output)."""

    kind: str
    environment: str
    journal: str
    message: str
    #: The cycle concerned, if one.
    cycle_id: str | None = None
    #: Whether the figures leave it out (suspect cycles without ``--include-suspect``, duplicates).
    excluded: bool = False
    count: int | None = None
    first: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "kind": self.kind,
            "environment": self.environment,
            "journal": self.journal,
            "cycle_id": self.cycle_id,
            "message": self.message,
            "excluded": self.excluded,
        }
        if self.count is not None:
            out["count"] = self.count
        if self.first is not None:
            out["first"] = self.first
        return out


@dataclass
class JournalRead:
    """One journal file as read: its display name, path, valid entries and whether its tail was torn."""

    name: str
    path: str
    entries: list[dict[str, Any]]
    torn: bool = False


@dataclass
class EnvironmentJournal:
    """The entries of one environment, each once, from one or more journal files."""

    name: str
    journals: list[str]
    entries: list[dict[str, Any]]
    torn: bool = False


def combine_journals(reads: Sequence[JournalRead]) -> tuple[list[EnvironmentJournal], list[Problem]]:
    """Journals grouped into environments by the entries they share, each entry counted once.

    A journal is identified by what it holds, not by its path: the same file named twice, a
    folder and a file inside it, or a backup copy beside the live journal share entries (the
    same ``boot_id`` and ``seq``) and are read as one environment; an entry repeated within a
    file (a journal concatenated with itself) is read once. Each duplicate is named."""
    problems: list[Problem] = []
    files: list[tuple[JournalRead, list[dict[str, Any]], set[EntryKey]]] = []
    for read in reads:
        seen: set[EntryKey] = set()
        unique = []
        for entry in read.entries:
            key = entry_key(entry)
            if key not in seen:
                seen.add(key)
                unique.append(entry)
        repeated = len(read.entries) - len(unique)
        if repeated:
            problems.append(
                Problem(
                    "duplicate_entries",
                    read.name,
                    read.path,
                    f"{repeated} entr{'y' if repeated == 1 else 'ies'} repeated within the journal (the same "
                    "server process and sequence number): each counted once",
                    excluded=True,
                    count=repeated,
                )
            )
        files.append((read, unique, seen))
    # Union of the files that share an entry.
    parent = list(range(len(files)))

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    owner: dict[EntryKey, int] = {}
    for index, (_, _, keys) in enumerate(files):
        for key in keys:
            if key in owner:
                parent[root(index)] = root(owner[key])
            else:
                owner[key] = index
    groups: dict[int, list[int]] = {}
    for index in range(len(files)):
        groups.setdefault(root(index), []).append(index)
    out = []
    for members in sorted(groups.values()):
        if len(members) == 1:
            read, unique, _ = files[members[0]]
            out.append(EnvironmentJournal(read.name, [read.path], unique, read.torn))
            continue
        merged: dict[EntryKey, dict[str, Any]] = {}
        for index in members:
            for entry in files[index][1]:
                merged.setdefault(entry_key(entry), entry)
        entries = sorted(merged.values(), key=lambda e: int(e["seq"]))
        # The live journal is the one holding the newest entry: it names the environment, and
        # only its torn tail can hide how a cycle ended.
        live = next(i for i in members if entry_key(entries[-1]) in files[i][2])
        main = files[live][0]
        for index in members:
            if index == live:
                continue
            read, _, keys = files[index]
            problems.append(
                Problem(
                    "duplicate_journal",
                    main.name,
                    read.path,
                    f"{read.path} holds entries of the same environment as {main.path} "
                    f"({len(keys & files[live][2])} shared): read as one environment, each entry once",
                    excluded=True,
                )
            )
        paths = [main.path, *(files[i][0].path for i in members if i != live)]
        out.append(EnvironmentJournal(main.name, paths, entries, main.torn))
    return out, problems


# -- report ---------------------------------------------------------------------------

#: How far the wall clock may run from the monotonic clock between two entries of one process
#: before the interval is suspect (NTP slews by at most 500 ppm; 60 s covers a step correction).
CLOCK_TOLERANCE = 60.0
#: A timestamp this much later than the report's time is "in the future".
FUTURE_TOLERANCE = 300.0
#: An interval still open is believed until now only while the journal's last entry is this recent.
DEFAULT_MAX_ONGOING = 7 * DAY


@dataclass(frozen=True)
class Options:
    """What a report is computed with."""

    now: float
    gpus_per_node: int | None = None
    #: Count suspect cycles (odd clocks) in the totals instead of leaving them out.
    include_suspect: bool = False
    max_ongoing: float = DEFAULT_MAX_ONGOING


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
    kernel_memory_bytes: int | None
    gpu_memory_bytes: int | None
    checkpoint_bytes: int
    snapshot_bytes: int | None
    storage_gb_days: float
    resume_to_runnable: float | None
    node_other_workloads: str
    #: When the user's work ended before the suspend, and when it could go on again
    #: (first runnable cell, restore, or the state left suspended/failed): what ``simulate`` reads.
    active_work_ended: float | None = None
    back_at: float | None = None
    resume_attempts: int = 0
    resume_attempts_failed: int = 0
    #: Why the cycle's figures are not to be trusted (odd clocks); empty: none.
    suspect: list[str] = field(default_factory=list)
    #: Left out of the totals (suspect, without ``--include-suspect``).
    excluded: bool = False
    #: When the suspend was asked for, and every time the cycle's entries name (for the clock checks).
    requested_at: float | None = None
    #: The backend checkpoints the server process while the node is away (releases it, keeps live memory).
    freezes: bool = False
    times: list[float] = field(default_factory=list)
    durations: dict[str, float | None] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    @property
    def released_hours(self) -> float:
        if self.released_from is None or self.released_until is None:
            return 0.0
        return _hours(max(0.0, self.released_until - self.released_from) / HOUR)

    @property
    def node_hours_released(self) -> float:
        return self.released_hours if self.node_released else 0.0

    @property
    def gpu_hours_released(self) -> float | None:
        """GPU-hours given back to the cloud: 0 when nothing was released or the node stays."""
        if self.released_hours == 0 or not self.node_released:
            return 0.0
        return None if self.gpus is None else _hours(self.gpus * self.released_hours)

    @property
    def gpu_hours_kept_allocated(self) -> float | None:
        """GPU-hours of a suspend that kept its node (local): the GPUs stayed allocated, idle."""
        if self.released_hours == 0 or self.node_released:
            return 0.0
        return None if self.gpus is None else _hours(self.gpus * self.released_hours)

    def memory_gib_hours(self, size: int | None) -> float | None:
        if self.released_hours == 0:
            return 0.0
        return None if size is None else _hours(size / GIB * self.released_hours)

    def to_dict(self) -> dict[str, Any]:
        return {
            "environment": self.environment,
            "cycle_id": self.cycle_id,
            "backend": self.backend,
            "workload_class": self.workload_class,
            "origin": self.origin,
            "reason": self.reason,
            "result": self.result,
            "released_hours": self.released_hours,
            "released_ongoing": self.released_ongoing,
            "node_released": self.node_released,
            "node_hours_released": self.node_hours_released,
            "gpus": self.gpus,
            "gpu_count_source": self.gpu_count_source,
            "gpu_hours_released": self.gpu_hours_released,
            "gpu_hours_kept_allocated": self.gpu_hours_kept_allocated,
            "kernel_memory_gib_hours": self.memory_gib_hours(self.kernel_memory_bytes),
            "gpu_memory_gib_hours": self.memory_gib_hours(self.gpu_memory_bytes),
            "checkpoint_bytes": self.checkpoint_bytes,
            "snapshot_bytes": self.snapshot_bytes,
            "data_stored_bytes": self.checkpoint_bytes + (self.snapshot_bytes or 0),
            "storage_gb_days": _round(self.storage_gb_days),
            "resume_to_runnable_seconds": self.resume_to_runnable,
            "resume_attempts": self.resume_attempts,
            "resume_attempts_failed": self.resume_attempts_failed,
            "node_other_workloads": self.node_other_workloads,
            "suspect": self.suspect,
            "excluded": self.excluded,
            "durations": self.durations,
            "notes": self.notes,
        }


def _hours(value: float) -> float:
    """Hours are rounded once, where they are computed (6 decimals: 3.6 ms); every sum and
    difference is then made of the rounded parts, so the printed figures add up exactly."""
    return round(value, 6)


@dataclass
class EnvironmentCost:
    """One environment over the period its journal covers."""

    name: str
    start: float | None
    end: float | None
    cycles: list[CycleCost]
    gpus: int | None
    auto_suspends_cancelled: Counter[tuple[str, str]] = field(default_factory=Counter)
    #: The journal's last entry (``end`` runs on to now while a cycle is still suspended).
    last_entry: float | None = None
    journals: list[str] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)
    #: Seconds of wall-clock jumps the monotonic clock contradicts, taken out of the period (0 with
    #: ``include_suspect``): the period a bill sees is the time that passed, not the clock's mistake.
    clock_adjustment: float = 0.0
    #: The environment whose cycles this one only repeats (a rewritten copy): left out of every total.
    copy_of: str | None = None

    @property
    def period_hours(self) -> float:
        if self.start is None or self.end is None or self.copy_of is not None:
            return 0.0
        return _hours(max(0.0, self.end - self.start - self.clock_adjustment) / HOUR)

    @property
    def counted(self) -> list[CycleCost]:
        return [c for c in self.cycles if not c.excluded]


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


def _unique_notes(notes: Iterable[str]) -> list[str]:
    """Each note once, in order; a repeated one says how often."""
    counts = Counter(notes)
    out = []
    for note in dict.fromkeys(notes):
        out.append(note if counts[note] == 1 else f"{note} ({counts[note]} times)")
    return out


@dataclass(frozen=True)
class ClockJump:
    """Two consecutive entries of one server process whose wall clocks moved apart from their monotonic clocks."""

    since: float
    until: float
    jump: float  # seconds the wall clock moved more than the monotonic clock (negative: back)
    seq: tuple[int, int]


def clock_jumps(entries: Sequence[dict[str, Any]]) -> list[ClockJump]:
    """Where the wall clock and the monotonic clock of one process disagree by more than the tolerance."""
    last: dict[str, dict[str, Any]] = {}
    out = []
    for entry in entries:
        boot = str(entry["boot_id"])
        before = last.get(boot)
        last[boot] = entry
        if before is None:
            continue
        walls = float(entry["wall"]) - float(before["wall"])
        monotonic = float(entry["monotonic"]) - float(before["monotonic"])
        jump = walls - monotonic
        if abs(jump) > CLOCK_TOLERANCE + 0.001 * abs(monotonic):
            since, until = sorted((float(before["wall"]), float(entry["wall"])))
            out.append(ClockJump(since, until, jump, (int(before["seq"]), int(entry["seq"]))))
    return out


def _describe_hours(seconds: float) -> str:
    return f"{seconds / HOUR:.1f} h" if abs(seconds) >= HOUR else f"{seconds:.0f} s"


def environment_cost(
    name: str,
    entries: list[dict[str, Any]],
    now: float,
    gpus_per_node: int | None,
    *,
    include_suspect: bool = False,
    max_ongoing: float = DEFAULT_MAX_ONGOING,
    torn: bool = False,
    journals: Sequence[str] = (),
) -> EnvironmentCost:
    """Every cycle of one environment's journal priced; ``now`` ends what is still suspended (and the period).

    Odd clocks make a cycle *suspect* (a problem each, left out of the totals unless
    ``include_suspect``): a timestamp later than ``now``; the wall clock moving apart from the
    monotonic clock of the same process across the cycle (unless it is the freeze of a live
    return, :func:`_frozen`); an interval still open that the journal's last entry no longer
    vouches for (older than ``max_ongoing``, or a torn tail). Unless ``include_suspect``, the
    period leaves out the jumps the monotonic clock contradicts."""
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
    walls = [float(e["wall"]) for e in entries]
    present = [w for w in walls if w <= now + FUTURE_TOLERANCE]
    last_entry = max(present, default=None)
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
        for c in replay(entries).cycles
    ]
    problems: list[Problem] = []
    journal = ", ".join(journals)
    future = [w for w in walls if w > now + FUTURE_TOLERANCE]
    if future:
        problems.append(
            Problem(
                "future_timestamp",
                name,
                journal,
                f"{len(future)} entr{'y' if len(future) == 1 else 'ies'} dated after the report's time "
                f"(the latest {_describe_hours(max(future) - now)} ahead): a wrong clock; not counted in the period",
                excluded=not include_suspect,
                count=len(future),
            )
        )
    jumps = [j for j in clock_jumps(entries) if not any(_frozen(j, c) for c in costs)]
    for cost in costs:
        _check_clocks(cost, jumps, now, last_entry, max_ongoing, torn)
        if cost.suspect:
            cost.excluded = not include_suspect
            problems.append(
                Problem(
                    "suspect_clock",
                    name,
                    journal,
                    f"cycle {cost.cycle_id}: "
                    + "; ".join(cost.suspect)
                    + ("" if include_suspect else " (left out of the totals; --include-suspect counts it)"),
                    cycle_id=cost.cycle_id,
                    excluded=cost.excluded,
                )
            )
    for jump in jumps:
        if not any(_overlaps(jump, c.requested_at, max(c.times, default=None)) for c in costs):
            problems.append(
                Problem(
                    "suspect_clock",
                    name,
                    journal,
                    f"the wall clock moved {_describe_hours(jump.jump)} apart from the monotonic clock between "
                    f"entries {jump.seq[0]} and {jump.seq[1]} (no cycle concerned)"
                    + ("" if include_suspect else ": the period counts the monotonic clock's time there"),
                    excluded=not include_suspect,
                )
            )
    end = last_entry
    if end is not None and any(c.released_ongoing and not c.excluded for c in costs):
        end = max(end, now)
    measured = [c.gpus for c in costs if c.gpu_count_source == "measured" and c.gpus is not None]
    env_gpus = max(measured) if measured else gpus_per_node
    start = min(present, default=None)
    env = EnvironmentCost(name, start, end, costs, env_gpus, cancelled, last_entry, list(journals), problems)
    if not include_suspect:
        env.clock_adjustment = sum(j.jump for j in jumps)
    return env


def drop_repeated_cycles(environments: Sequence[EnvironmentCost]) -> list[Problem]:
    """A cycle id (a suspend's operation id: random per suspend) already counted in an earlier
    environment is left out of a later one: two journals that hold it are copies, whatever their
    paths, even when they share no entry (a copy whose lines were rewritten)."""
    seen: dict[str, str] = {}
    problems = []
    for env in environments:
        for cycle in env.cycles:
            if cycle.cycle_id in seen and not cycle.excluded:
                cycle.excluded = True
                cycle.notes.append(f"also in {seen[cycle.cycle_id]}: counted there")
                problems.append(
                    Problem(
                        "duplicate_cycle",
                        env.name,
                        ", ".join(env.journals),
                        f"cycle {cycle.cycle_id} is also in {seen[cycle.cycle_id]}: counted once, there",
                        cycle_id=cycle.cycle_id,
                        excluded=True,
                    )
                )
            else:
                seen.setdefault(cycle.cycle_id, env.name)
        repeats = [c for c in env.cycles if any(n.startswith("also in ") for n in c.notes)]
        if repeats and len(repeats) == len(env.cycles):
            env.copy_of = seen[repeats[0].cycle_id]
            problems.append(
                Problem(
                    "duplicate_journal",
                    env.name,
                    ", ".join(env.journals),
                    f"holds only cycles of {env.copy_of}: a copy, its period left out of every total",
                    excluded=True,
                )
            )
    return problems


def _frozen(jump: ClockJump, cost: CycleCost) -> bool:
    """The jump is the freeze of a checkpointed server process while its node was released.

    A backend that keeps live memory and releases the node checkpoints the server process and
    restores it later (GKE Pod Snapshots: gVisor checkpoint/restore). gVisor moves the restored
    monotonic clock forward by the real time elapsed, "best-effort" (google/gvisor
    pkg/sentry/kernel/timekeeper.go, Timekeeper.SetClocks), so a live return normally shows no
    disagreement; where the adjustment falls short, the gap lies within the released interval
    and is the freeze, not a clock fault."""
    return (
        cost.freezes
        and jump.jump > 0
        and cost.released_from is not None
        and cost.released_until is not None
        and jump.since <= cost.released_until
        and jump.until >= cost.released_from
    )


def _check_clocks(
    cost: CycleCost,
    jumps: list[ClockJump],
    now: float,
    last_entry: float | None,
    max_ongoing: float,
    torn: bool,
) -> None:
    """Why the cycle's clocks cannot be trusted, into ``cost.suspect``."""
    times = cost.times
    latest = max(times, default=None)
    if latest is not None and latest > now + FUTURE_TOLERANCE:
        cost.suspect.append(f"a time {_describe_hours(latest - now)} after the report's time (a wrong clock)")
    start = cost.requested_at
    end = max(times, default=None)
    for jump in jumps:
        if not _overlaps(jump, start, end):
            continue
        cost.suspect.append(
            f"the wall clock moved {_describe_hours(jump.jump)} apart from the monotonic clock between "
            f"entries {jump.seq[0]} and {jump.seq[1]} of one server process"
        )
    if cost.released_ongoing and last_entry is not None and cost.released_from is not None:
        if now - last_entry > max_ongoing:
            cost.suspect.append(
                f"still suspended by the journal, but its last entry is {_describe_hours(now - last_entry)} old "
                f"(more than the {_describe_hours(max_ongoing)} bound): how it ended may be missing"
            )
        elif torn:
            cost.suspect.append("still suspended by the journal, whose last line is torn: how it ended may be lost")


def _overlaps(jump: ClockJump, start: float | None, end: float | None) -> bool:
    return start is not None and end is not None and jump.since < end and jump.until > start


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
    requested_at = c.marks.get("suspend_requested")
    left_at = next((at for at in left if requested_at is not None and at > (released_from or requested_at)), None)
    back_at = next((c.marks[m] for m in ("first_cell_runnable", "restored") if m in c.marks), None)
    if back_at is None and result != "aborted":
        back_at = left_at
    ongoing = False
    if result == "aborted" or released_from is None:
        released_from = released_until = None
    elif released_until is None:
        if left_at is not None:
            released_until = left_at
            notes.append("left the suspended state without a restore")
        else:
            released_until, ongoing = now, True

    devices = released.get("gpu_devices")
    if released.get("gpu_measurement") == GPU_MEASURED and isinstance(devices, list):
        gpus, source = len(devices), "measured"
    elif gpus_per_node is not None:
        gpus, source = gpus_per_node, "assumed"
        if released_from is not None:  # the count prices something: say where it came from
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
    seen = [*c.marks.values()]
    if c.id in snapshot_sizes:
        ready_at, snapshot_bytes = snapshot_sizes[c.id]
        kept_until = deleted.get(c.id)
        seen.append(ready_at)
        if kept_until is None:
            kept_until = now
            notes.append("snapshot not deleted in this journal: stored until the report's end")
        else:
            seen.append(kept_until)
        storage += snapshot_bytes / GB * max(0.0, kept_until - ready_at) / DAY

    if c.id in other_work:
        others = "yes" if other_work[c.id] else "no"
    elif not node_released and released_from is not None:
        others = "yes"  # the node was never released: this server itself kept running on it
    else:
        others = "unknown"

    durations = cycle_to_dict(c, now)["durations"]
    attempts = c.resume_attempts
    wait = durations.get("resume_to_runnable")
    runnable = c.marks.get("first_cell_runnable")
    if attempts and runnable is not None:
        # The user waited from the first request of this return, failed attempts included.
        first = min(a.requested_at for a in attempts)
        if first < c.marks.get("resume_requested", first):
            wait = round(runnable - first, 3)
    failed = sum(1 for a in attempts if a.outcome == "failed")
    if failed:
        notes.append(
            f"{failed} failed resume attempt(s) before the return (counted in the wait)"
            if runnable
            else f"{failed} failed resume attempt(s)"
        )
    cost = CycleCost(
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
        kernel_memory_bytes=_size(released.get("kernel_memory_bytes")),
        gpu_memory_bytes=_size(released.get("gpu_memory_bytes")),
        checkpoint_bytes=checkpoint_bytes,
        snapshot_bytes=snapshot_bytes,
        storage_gb_days=storage,
        resume_to_runnable=wait,
        node_other_workloads=others,
        active_work_ended=c.marks.get("active_work_ended", requested_at),
        back_at=back_at,
        resume_attempts=len(attempts),
        resume_attempts_failed=failed,
        durations=durations,
        notes=_unique_notes(notes),
    )
    cost.requested_at = requested_at
    cost.freezes = node_released and bool(capabilities.get("keeps_live_memory"))
    cost.times = [*seen, *(a.requested_at for a in attempts)]
    return cost


def _size(value: Any) -> int | None:
    number = _number(value)
    return None if number is None or number < 0 else int(number)


def _known(values: Sequence[float | None]) -> tuple[float | None, float | None, int]:
    """(total, or None when a part is unknown; the known parts' total, or None when none is known; unknown count)."""
    known = [v for v in values if v is not None]
    unknown = len(values) - len(known)
    known_total = _hours(sum(known)) if known else None
    return (known_total if unknown == 0 else None), known_total, unknown


def summarize(cycles: Sequence[CycleCost]) -> dict[str, Any]:
    """Totals of a set of cycles (all of them, or one workload class): excluded cycles are only counted."""
    counted = [c for c in cycles if not c.excluded]
    results = Counter(c.result for c in counted)
    ended = results["live"] + results["cold"] + results["failed"]
    waits = [c.resume_to_runnable for c in counted if c.resume_to_runnable is not None]
    gpu, gpu_known, gpu_unknown = _known([c.gpu_hours_released for c in counted])
    kept, kept_known, kept_unknown = _known([c.gpu_hours_kept_allocated for c in counted])
    kernel, kernel_known, kernel_unknown = _known([c.memory_gib_hours(c.kernel_memory_bytes) for c in counted])
    gpu_memory, gpu_memory_known, gpu_memory_unknown = _known([c.memory_gib_hours(c.gpu_memory_bytes) for c in counted])
    return {
        "cycles": len(counted),
        "excluded_cycles": len(cycles) - len(counted),
        "results": {name: results[name] for name in ("live", "cold", "failed", "aborted", "suspended")},
        "rates": {name: _round(results[name] / ended, 4) if ended else None for name in ("live", "cold", "failed")},
        "released_hours": _hours(sum(c.released_hours for c in counted)),
        "node_hours_released": _hours(sum(c.node_hours_released for c in counted)),
        "gpu_hours_released": gpu,
        "gpu_hours_released_known": gpu_known,
        "gpu_hours_unknown_cycles": gpu_unknown,
        "gpu_hours_kept_allocated": kept,
        "gpu_hours_kept_allocated_known": kept_known,
        "gpu_hours_kept_allocated_unknown_cycles": kept_unknown,
        "kernel_memory_gib_hours": kernel,
        "kernel_memory_gib_hours_known": kernel_known,
        "kernel_memory_unknown_cycles": kernel_unknown,
        "gpu_memory_gib_hours": gpu_memory,
        "gpu_memory_gib_hours_known": gpu_memory_known,
        "gpu_memory_unknown_cycles": gpu_memory_unknown,
        "data_stored_bytes": sum(c.checkpoint_bytes + (c.snapshot_bytes or 0) for c in counted),
        "storage_gb_days": _round(sum(_round(c.storage_gb_days) or 0.0 for c in counted)),
        "resume_to_runnable_seconds": {
            "count": len(waits),
            "p50": _round(percentile(waits, 0.5), 3),
            "p95": _round(percentile(waits, 0.95), 3),
        },
        "resume_attempts_failed": sum(c.resume_attempts_failed for c in counted),
    }


def _hours_split(observed: float | None, released: float | None) -> dict[str, float | None]:
    return {
        "observed": observed,
        "released": released if observed is not None else None,
        "allocated": _hours(observed - released) if observed is not None and released is not None else None,
    }


def report(environments: Sequence[EnvironmentCost]) -> dict[str, Any]:
    """The report's figures (without its problems and sources, which the command adds)."""
    cycles = [c for env in environments for c in env.cycles]
    envs = []
    observed_node = released_node = 0.0
    gpu_parts: list[dict[str, float | None]] = []
    for env in environments:
        totals = summarize(env.cycles)
        period = env.period_hours
        observed_node = _hours(observed_node + period)
        released_node = _hours(released_node + totals["node_hours_released"])
        gpu_observed = None if env.gpus is None else _hours(env.gpus * period)
        gpu = _hours_split(gpu_observed, totals["gpu_hours_released"])
        gpu_parts.append(gpu)
        envs.append(
            {
                "environment": env.name,
                "journals": env.journals,
                "period_hours": period,
                "gpus": env.gpus,
                "node_hours": _hours_split(period, totals["node_hours_released"]),
                "gpu_node_hours": gpu,
                "gpu_hours_kept_allocated": totals["gpu_hours_kept_allocated"],
                "cycles": totals["cycles"],
                "excluded_cycles": totals["excluded_cycles"],
                "clock_adjustment_hours": _hours(env.clock_adjustment / HOUR),
                "copy_of": env.copy_of,
            }
        )
    known = [g for g in gpu_parts if g["observed"] is not None and g["released"] is not None]
    known_gpu = {
        "environments": len(known),
        "observed": _hours(sum(g["observed"] or 0.0 for g in known)) if known else None,
        "released": _hours(sum(g["released"] or 0.0 for g in known)) if known else None,
        "allocated": _hours(sum(g["allocated"] or 0.0 for g in known)) if known else None,
    }
    all_known = len(known) == len(gpu_parts) and bool(gpu_parts)
    classes = sorted({c.workload_class for c in cycles})
    cancelled: Counter[tuple[str, str]] = Counter()
    for env in environments:
        cancelled.update(env.auto_suspends_cancelled)
    counted = [c for c in cycles if not c.excluded]
    return {
        "environments": envs,
        "cycles": [c.to_dict() for c in cycles],
        "totals": {
            **summarize(cycles),
            "node_hours": _hours_split(observed_node, released_node),
            "gpu_node_hours": {
                "observed": known_gpu["observed"] if all_known else None,
                "released": known_gpu["released"] if all_known else None,
                "allocated": known_gpu["allocated"] if all_known else None,
            },
            "gpu_node_hours_known": known_gpu,
            # Unknown: no count for the environment, or for one of its cycles that released the node.
            "gpu_count_unknown_environments": [
                env.name
                for env, gpu in zip(environments, gpu_parts, strict=True)
                if gpu["observed"] is None or gpu["released"] is None
            ],
        },
        "by_class": {name: summarize([c for c in cycles if c.workload_class == name]) for name in classes},
        "auto_suspends": {
            "suspended": dict(sorted(Counter(c.workload_class for c in counted if c.origin == "idle_policy").items())),
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


def activity(env: EnvironmentCost) -> tuple[list[Interval], Interval]:
    """Active intervals of one environment, read from the same cycles as the report: from the
    journal's start (or the moment work could go on after a cycle: its first runnable cell, its
    restore, or the state leaving suspended/failed, as after an acknowledged failure) to the next
    end of active work; an aborted suspend does not interrupt work. The horizon is the journal's span."""
    if env.start is None or env.last_entry is None:
        return [], (0.0, 0.0)
    horizon = (env.start, env.last_entry)
    active: list[Interval] = []
    since: float | None = horizon[0]
    for c in env.cycles:
        if c.result == "aborted" or c.active_work_ended is None:
            continue  # nothing was released: work went on
        if since is not None:
            active.append((since, c.active_work_ended))
        since = c.back_at
    if since is not None:
        active.append((since, horizon[1]))
    return merge(active), horizon


def activity_from_entries(entries: Sequence[dict[str, Any]]) -> tuple[list[Interval], Interval]:
    """:func:`activity` of one journal's entries, priced at its last entry."""
    walls = [float(e["wall"]) for e in entries]
    if not walls:
        return [], (0.0, 0.0)
    return activity(environment_cost("", list(entries), max(walls), None))


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
WORKDAY_START_HOUR = 9.0


def synthetic_week(
    seed: int, week_hours: float = 168.0, active_hours: float = 40.0, workdays: int = 5
) -> tuple[list[Interval], Interval]:
    """A reproducible week of exactly ``active_hours`` of work in ``week_hours``: on each of the
    first ``workdays`` days (fewer in a shorter week) one session from about 9:00 of active bursts
    and idle gaps drawn from :data:`BURST_MINUTES` and :data:`GAP_MINUTES`, each day's share of the
    active hours; gaps shrink where a day would not hold its session."""
    horizon = week_hours * HOUR
    days = max(1, math.ceil(week_hours / 24))
    working = max(1, min(workdays, days))
    lengths = [min((day + 1) * DAY, horizon) - day * DAY for day in range(days)]
    shares = [active_hours * HOUR / working] * working
    if shares[0] > min(lengths[:working]):  # more work than the workdays hold: spread it over every day
        shares = [active_hours * HOUR * length / sum(lengths) for length in lengths]
    rng = random.Random(seed)
    active: list[Interval] = []
    for day, share in enumerate(shares):
        day_start, day_end = day * DAY, min((day + 1) * DAY, horizon)
        bursts: list[float] = []
        gaps: list[float] = []
        while sum(bursts) < share:
            burst = rng.choices([m for m, _ in BURST_MINUTES], [w for _, w in BURST_MINUTES])[0] * 60.0
            bursts.append(min(burst, share - sum(bursts)))
            gaps.append(rng.choices([m for m, _ in GAP_MINUTES], [w for _, w in GAP_MINUTES])[0] * 60.0)
        gaps = gaps[:-1]  # the last burst ends the session
        start = day_start + WORKDAY_START_HOUR * HOUR + rng.uniform(0, HOUR)
        room = day_end - start - sum(bursts)
        if room < sum(gaps):  # the session does not fit after 9:00: start earlier, then shrink the gaps
            start = max(day_start, day_end - sum(bursts) - sum(gaps))
            room = day_end - start - sum(bursts)
            if room < sum(gaps):
                gaps = [g * room / sum(gaps) for g in gaps] if sum(gaps) else gaps
        t = start
        for index, burst in enumerate(bursts):
            active.append((min(t, day_end), min(t + burst, day_end)))
            t += burst + (gaps[index] if index < len(gaps) else 0.0)
    return merge(active), (0.0, horizon)
