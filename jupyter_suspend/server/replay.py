"""Reading the journal back: the entry kinds, named once, and one pure replay.

:func:`replay` folds journal entries (oldest first) into what a server
process needs to know about the past: the last recorded state, what is waiting
to be resumed (the *resume plan*), the live-state records that verification
compares against, the last restore report, and the suspend/resume cycles the
timeline measures. The lifecycle core runs it once at start-up; the timeline
runs it on every ``GET timeline``. No I/O.
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from . import live_state, wording
from .journal import is_epoch, utc_iso
from .states import RestoreKind, State

if TYPE_CHECKING:
    from .backends.base import Backend


class EntryKind(str, enum.Enum):
    """Every kind of journal entry (the ``kind`` field); docs/architecture.md lists their fields."""

    SERVER_STARTED = "server_started"  # a server process opened the journal
    RECOVERED = "recovered"  # how that process read the previous one's journal (a transition too)
    TRANSITION = "transition"  # the state machine moved
    OPERATION_STARTED = "operation_started"  # a suspend, resume or checkpoint was claimed
    OPERATION_FINISHED = "operation_finished"  # ... and ended (succeeded, aborted, failed)
    SUSPEND_REQUESTED = "suspend_requested"  # a suspend cycle begins: the kernels it found
    FLUSHED = "flushed"  # every kernel's checkpoint answer at the suspend
    RELEASE_STARTED = "release_started"  # the resume plan, durable before anything is released
    RELEASED = "released"  # the environment is down (or came back live): what was freed
    RESUME_REQUESTED = "resume_requested"
    CAPACITY_WAIT = "capacity_wait"  # the resume waits for capacity
    RESTORED = "restored"  # the environment is back: live or cold, what was restored
    CHECKPOINTED = "checkpointed"  # a checkpoint without suspend
    VERIFIED = "verified"  # a live-state verdict


#: Kinds whose newest entry a cold start needs: journal rotation never drops it.
PINNED_KINDS: frozenset[str] = frozenset(
    kind.value
    for kind in (
        EntryKind.TRANSITION,
        EntryKind.RECOVERED,
        EntryKind.SUSPEND_REQUESTED,
        EntryKind.FLUSHED,
        EntryKind.RELEASE_STARTED,
        EntryKind.RELEASED,
        EntryKind.RESTORED,
        EntryKind.CHECKPOINTED,
    )
)

#: The cycle marks, in the order they happen (timeline ``times``).
MARKS = (
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


#: What a backend's own mark may be called (``mark`` of its journal entries).
MARK_NAME = re.compile(r"[a-z][a-z0-9_]{0,63}")


@dataclass
class ResumeAttempt:
    """One resume request of a cycle and how it ended (``outcome`` None: not ended in the journal)."""

    operation_id: str | None
    requested_at: float
    outcome: str | None = None  # "failed" | "resumed"
    ended_at: float | None = None


@dataclass
class Cycle:
    """One suspend and what followed it, as the journal tells it."""

    id: str
    marks: dict[str, float] = field(default_factory=dict)
    #: (wall, monotonic, boot_id) of the journal entries behind the marks
    clocks: dict[str, tuple[float, float, str]] = field(default_factory=dict)
    data: dict[str, Any] = field(default_factory=dict)
    #: The backend's own marks (:func:`backend_mark`): (time, name, kind), in journal order.
    events: list[tuple[float, str, str]] = field(default_factory=list)
    #: Every resume asked for in this cycle, in journal order (the ``resume_requested`` mark is
    #: the latest one): the cost report measures the user's wait from the first.
    resume_attempts: list[ResumeAttempt] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.data = {
            "id": self.id,
            "reason": "",
            "outcome": "in_progress",
            "restore": None,
            "kernels": 0,
            "released": None,
            "notes": [],
            **self.data,
        }

    def mark(self, name: str, wall: Any, entry: dict[str, Any] | None = None) -> None:
        if not isinstance(wall, (int, float)) or isinstance(wall, bool):
            return
        self.marks[name] = float(wall)
        if entry is not None and entry.get("wall") == wall:
            self.clocks[name] = (entry["wall"], entry["monotonic"], entry["boot_id"])


@dataclass
class ReplayResult:
    #: The last ``transition``/``recovered`` entry (None: no state was ever recorded).
    last_transition: dict[str, Any] | None = None
    #: What a resume needs (None: nothing waits to be resumed).
    resume_plan: dict[str, Any] | None = None
    #: The suspend cycle the next resume belongs to.
    cycle_id: str | None = None
    #: Every kernel's answer at that suspend's flush.
    flushed_kernels: list[dict[str, Any]] = field(default_factory=list)
    #: kernel id -> its live-state record (see :mod:`~jupyter_suspend.server.live_state`).
    live_state_records: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: What the status says about the last restore.
    last_restore: dict[str, Any] | None = None
    cycles: list[Cycle] = field(default_factory=list)

    @property
    def last_state(self) -> State | None:
        if self.last_transition is None:
            return None
        try:
            return State(self.last_transition.get("to"))
        except ValueError:
            return State.RUNNING


def restore_report(entry: dict[str, Any]) -> dict[str, Any]:
    """What the status says about the last restore, from its ``restored`` entry."""
    checkpoints = entry.get("checkpoints_restored") or {}
    return {
        "operation_id": entry.get("operation_id"),
        "cycle_id": entry.get("cycle_id"),
        "restore": entry.get("restore"),
        "time": entry.get("time"),
        "first_cell_runnable_at": utc_iso(entry["first_cell_runnable_at"])
        if entry.get("first_cell_runnable_at")
        else None,
        "kernels": [
            {"kernel_id": k.get("kernel_id"), "path": k.get("path"), "error": k.get("error")}
            for k in entry.get("kernels", [])
        ],
        "checkpoints_restored": checkpoints,
        "checkpoints_restored_count": sum(len(c.get("restored", [])) for c in checkpoints.values()),
        "verification": entry.get("verification"),
    }


def resume_plan_of(entry: dict[str, Any]) -> dict[str, Any] | None:
    """The plan an entry carries (journals before the rename call it ``restore_record``)."""
    plan = entry.get("resume_plan", entry.get("restore_record"))
    return plan if isinstance(plan, dict) else None


def replay(entries: list[dict[str, Any]]) -> ReplayResult:
    """Fold journal entries, oldest first, into a :class:`ReplayResult`."""
    result = ReplayResult()
    cycles: dict[str, Cycle] = {}
    for entry in entries:
        try:
            kind = EntryKind(entry.get("kind"))
        except ValueError:
            # A backend's own kind (or one from a newer version): not ours to
            # interpret, but a mark it carries goes on its cycle's timeline.
            _fold_backend_mark(cycles, entry)
            continue
        _server_view(result, kind, entry)
        _fold_cycle(result, cycles, kind, entry)
    return result


def backend_mark(entry: dict[str, Any]) -> tuple[str, float] | None:
    """(name, epoch seconds) of the timeline mark a backend's own entry carries.

    A backend puts one of its facts on the cycle's timeline by journaling it
    (``ctx.record``) with ``mark`` (a name, ``[a-z][a-z0-9_]*``) and, if the
    fact happened at another time than the entry was written (a Kubernetes
    condition's time, say), ``mark_at`` (epoch seconds); otherwise the entry's
    own ``wall`` is the mark's time. None: no mark."""
    name = entry.get("mark")
    if not isinstance(name, str) or not MARK_NAME.fullmatch(name):
        return None
    for at in (entry.get("mark_at"), entry.get("wall")):
        if isinstance(at, (int, float)) and is_epoch(at):
            return name, float(at)
    return None


def _fold_backend_mark(cycles: dict[str, Cycle], entry: dict[str, Any]) -> None:
    """A backend's mark goes on the cycle it names (``cycle_id``, else its suspend's ``operation_id``)."""
    mark = backend_mark(entry)
    target = entry.get("cycle_id") or entry.get("operation_id")
    cycle = cycles.get(target) if isinstance(target, str) else None
    if mark is not None and cycle is not None:
        cycle.events.append((mark[1], mark[0], str(entry.get("kind"))))


def _server_view(result: ReplayResult, kind: EntryKind, entry: dict[str, Any]) -> None:
    """What the lifecycle core restores from one entry."""
    if kind in (EntryKind.TRANSITION, EntryKind.RECOVERED):
        result.last_transition = entry
        if entry.get("to") in (State.RUNNING.value, State.READY.value):
            result.resume_plan = None  # resumed or acknowledged: nothing left to resume
    elif kind == EntryKind.SUSPEND_REQUESTED:
        result.cycle_id = entry.get("operation_id")
        result.resume_plan = None
        result.flushed_kernels = []
    elif kind == EntryKind.FLUSHED:
        result.flushed_kernels = list(entry.get("kernels", []))
        live_state.record_live_state(result.live_state_records, result.flushed_kernels, "suspend", entry)
    elif kind == EntryKind.CHECKPOINTED:
        live_state.record_live_state(result.live_state_records, entry.get("kernels", []), "checkpoint", entry)
    elif kind in (EntryKind.RELEASE_STARTED, EntryKind.RELEASED):
        result.resume_plan = resume_plan_of(entry)
    elif kind == EntryKind.RESTORED:
        result.last_restore = restore_report(entry)


def _fold_cycle(result: ReplayResult, cycles: dict[str, Cycle], kind: EntryKind, entry: dict[str, Any]) -> None:
    """What the timeline learns from one entry."""
    op = entry.get("operation_id")
    if kind == EntryKind.SUSPEND_REQUESTED and op:
        cycle = cycles[op] = Cycle(op)
        result.cycles.append(cycle)
        cycle.data["reason"] = entry.get("reason", "")
        cycle.data["kernels"] = len(entry.get("kernels", []))
        cycle.data["backend"] = (entry.get("backend") or {}).get("name")
        cycle.mark("suspend_requested", entry.get("wall"), entry)
        cycle.mark("active_work_ended", entry.get("active_work_ended"))
        return
    # Resume entries name the cycle they resume; a capacity wait or a
    # failed resume belongs to the latest cycle.
    target = entry.get("cycle_id") or op
    if kind in (EntryKind.CAPACITY_WAIT, EntryKind.OPERATION_FINISHED) and entry.get("operation_kind") != "suspend":
        target = result.cycles[-1].id if result.cycles else None
    found = cycles.get(target) if target else None
    if found is None:
        return
    c, notes = found, found.data["notes"]
    if kind == EntryKind.FLUSHED:
        c.mark("flush_completed", entry.get("wall"), entry)
        c.data["checkpointed_kernels"] = sum(1 for k in entry.get("kernels", []) if k.get("status") == "checkpointed")
    elif kind == EntryKind.RELEASED:
        c.mark("environment_stopped", entry.get("environment_stopped_at"))
        c.mark("node_released", entry.get("node_released_at"))
        c.data["released"] = entry.get("released")
        if entry.get("partial"):
            notes.append(f"release failed part-way: {entry.get('error')}")
        if entry.get("snapshot"):
            c.data["snapshot"] = entry["snapshot"]
    elif kind == EntryKind.RESUME_REQUESTED:
        c.mark("resume_requested", entry.get("wall"), entry)
        if isinstance(entry.get("wall"), (int, float)):
            c.resume_attempts.append(ResumeAttempt(op if isinstance(op, str) else None, float(entry["wall"])))
    elif kind == EntryKind.CAPACITY_WAIT:
        notes.append(f"waited for capacity: {entry.get('reason')}")
    elif kind == EntryKind.RESTORED:
        c.mark("resume_requested", entry.get("resume_requested_at"))
        c.mark("capacity_available", entry.get("capacity_available_at"))
        c.mark("restored", entry.get("restored_at"))
        c.mark("first_cell_runnable", entry.get("first_cell_runnable_at"))
        c.data["restore"] = entry.get("restore")
        c.data["checkpoints_restored"] = entry.get("checkpoints_restored")
        c.data["outcome"] = "resumed"
        _end_attempt(c, op, entry.get("resume_requested_at"), "resumed", entry.get("wall"))
    elif kind == EntryKind.OPERATION_FINISHED and entry.get("operation_kind") == "suspend":
        outcome = entry.get("outcome")
        if outcome in ("aborted", "failed"):
            c.data["outcome"] = outcome
            notes.append(entry.get("message", ""))
        elif c.data["outcome"] == "in_progress":
            c.data["outcome"] = "suspended"
    elif kind == EntryKind.OPERATION_FINISHED and entry.get("operation_kind") == "resume":
        if entry.get("outcome") == "failed":
            notes.append(f"resume failed: {entry.get('message', '')}")
            _end_attempt(c, op, None, "failed", entry.get("wall"))
    elif kind == EntryKind.RECOVERED:
        notes.append(f"server started cold: {entry.get('message', '')}")


def _end_attempt(c: Cycle, op: Any, requested_at: Any, outcome: str, wall: Any) -> None:
    """The attempt ``op`` ended (else the latest open one); a restore without a ``resume_requested``
    entry (a live return journaled by the restored process) is an attempt of its own."""
    attempt = next((a for a in c.resume_attempts if op is not None and a.operation_id == op), None)
    if attempt is None:
        attempt = next((a for a in reversed(c.resume_attempts) if a.outcome is None), None)
    if attempt is None:
        if not isinstance(requested_at, (int, float)) or isinstance(requested_at, bool):
            return
        attempt = ResumeAttempt(op if isinstance(op, str) else None, float(requested_at))
        c.resume_attempts.append(attempt)
    attempt.outcome = outcome
    attempt.ended_at = float(wall) if isinstance(wall, (int, float)) and not isinstance(wall, bool) else None


@dataclass
class ColdStart:
    """How a server process that finds a previous process's journal reads it."""

    state: State
    restore: RestoreKind | None
    message: str
    next_step: str
    previous_state: State
    previous: dict[str, Any]

    def to_dict(self) -> dict[str, Any]:
        """``cold_start`` of ``GET status``."""
        return {
            "previous_state": self.previous_state.value,
            "previous_time": self.previous.get("time"),
            "message": self.message,
            "next_step": self.next_step,
        }


def read_cold_start(past: ReplayResult, backend: Backend) -> ColdStart | None:
    """The backend interprets the last recorded state; nothing to resume means
    running (never a promise of a resume without a plan). None: no state was
    ever recorded (a first start)."""
    last_state, last = past.last_state, past.last_transition
    if last_state is None or last is None:
        return None
    verdict = backend.interpret_cold_start(last_state, last)
    state, message, next_step = verdict.state, verdict.message, verdict.next_step
    if state in (State.SUSPENDED, State.FAILED) and past.resume_plan is None:
        # Nothing recorded to resume from: the honest state is running.
        state, next_step = State.RUNNING, ""
        message = wording.nothing_to_resume(last_state, str(last.get("time", "an unknown time")))
    message = wording.server_restarted(backend.capabilities, message)
    return ColdStart(state, verdict.restore, message, next_step, last_state, last)
