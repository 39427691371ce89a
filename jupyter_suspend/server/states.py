"""Plain data of the lifecycle: states, legal transitions, operations.

Nothing here knows about tornado or Jupyter; the lifecycle core and the
backends share these types.
"""

from __future__ import annotations

import enum
import time
import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .journal import utc_iso

if TYPE_CHECKING:
    from .backends.base import Capabilities


class State(str, enum.Enum):
    RUNNING = "running"
    FLUSHING = "flushing"
    SNAPSHOTTING = "snapshotting"
    SUSPENDED = "suspended"
    WAITING_FOR_CAPACITY = "waiting_for_capacity"
    RESTORING = "restoring"
    READY = "ready"
    FAILED = "failed"


#: States in which the user's session is up and a suspend may start.
STEADY_STATES = frozenset({State.RUNNING, State.READY})

#: Only these transitions are legal; anything else is a bug and raises.
#: Every edge is taken by some path of the code (tests/test_state_machine.py
#: walks them all); docs/architecture.md draws this table.
TRANSITIONS: dict[State, frozenset[State]] = {
    State.RUNNING: frozenset({State.FLUSHING}),
    State.READY: frozenset({State.FLUSHING}),
    # A failed flush (or anything that goes wrong before the release) aborts:
    # back to running, nothing released.
    State.FLUSHING: frozenset({State.SNAPSHOTTING, State.RUNNING}),
    # SNAPSHOTTING -> RESTORING: a backend whose server process is frozen with
    # the pod (GKE) continues here after a live restore; -> RUNNING: the
    # backend refused before releasing anything.
    State.SNAPSHOTTING: frozenset({State.SUSPENDED, State.RESTORING, State.RUNNING, State.FAILED}),
    # A resume always starts by restoring; the backend may then ask to wait.
    State.SUSPENDED: frozenset({State.RESTORING}),
    State.WAITING_FOR_CAPACITY: frozenset({State.RESTORING, State.FAILED}),
    State.RESTORING: frozenset({State.READY, State.WAITING_FOR_CAPACITY, State.FAILED}),
    # From failed: retry the restore, acknowledge and carry on working, or
    # (with nothing left to resume) suspend again.
    State.FAILED: frozenset({State.RESTORING, State.RUNNING, State.FLUSHING}),
}


class OperationKind(str, enum.Enum):
    SUSPEND = "suspend"
    RESUME = "resume"
    CHECKPOINT = "checkpoint"


class Action(str, enum.Enum):
    """What a user may ask for: the three operations, and acknowledging a failure."""

    SUSPEND = "suspend"
    RESUME = "resume"
    CHECKPOINT = "checkpoint"
    ACKNOWLEDGE = "acknowledge"


@dataclass(frozen=True)
class Decision:
    """The answer of :func:`allowed`: true when the action may start now, else why not."""

    allowed: bool
    reason: str = ""
    #: Refused because another operation is running (a 409 naming it).
    operation_in_progress: bool = False

    def __bool__(self) -> bool:
        return self.allowed


def allowed(
    action: Action,
    state: State,
    has_resume_plan: bool,
    capabilities: Capabilities,
    operation_in_progress: bool,
) -> Decision:
    """The one rule for what may start now; ``_claim`` and ``status()`` both ask it.

    Pure. A suspend starts from a working session (running, ready), or from
    failed when nothing waits to be resumed (a failed live return: suspending
    again forgets nothing); never from failed with a resume plan, which a new
    suspend would forget. A resume needs a plan, and a backend the server
    resumes. A checkpoint flushes whatever runs, also after a failure.
    """
    if operation_in_progress:
        return Decision(False, f"another operation is running while {state.value}", operation_in_progress=True)
    if action == Action.SUSPEND:
        ok = State.FLUSHING in TRANSITIONS[state] and (state in STEADY_STATES or not has_resume_plan)
        why = "" if ok else f"cannot suspend while {state.value}"
        if not ok and state == State.FAILED:
            why += ": the recorded sessions wait to be resumed (resume, or acknowledge to forget them)"
        return Decision(ok, why)
    if action == Action.RESUME:
        if not capabilities.resume_from_server:
            return Decision(False, "resumed by the platform, not by this server")
        ok = has_resume_plan and state in (State.SUSPENDED, State.FAILED)
        why = "" if ok else f"cannot resume while {state.value}"
        if not ok and state in (State.SUSPENDED, State.FAILED):
            why += ": nothing recorded to resume"
        return Decision(ok, why)
    if action == Action.CHECKPOINT:
        ok = state in STEADY_STATES or state == State.FAILED
        return Decision(ok, "" if ok else f"cannot checkpoint while {state.value}")
    ok = state == State.FAILED
    return Decision(ok, "" if ok else f"nothing to acknowledge while {state.value}")


class Outcome(str, enum.Enum):
    SUCCEEDED = "succeeded"
    ABORTED = "aborted"  # nothing was released; the session keeps running
    FAILED = "failed"


class RestoreKind(str, enum.Enum):
    LIVE = "live"  # the same processes survived (proved by the live-state canary)
    COLD = "cold"  # new processes; recover from files and application checkpoints


@dataclass
class Failure:
    """Why the environment is in the failed state, and what the user can do."""

    reason: str
    next_step: str

    def to_dict(self) -> dict[str, str]:
        return {"reason": self.reason, "next_step": self.next_step}


class LifecycleError(Exception):
    """Base class for errors that map to a 4xx answer."""

    status_code = 400


class IllegalState(LifecycleError):
    """The call does not make sense in the current state."""

    status_code = 409

    def __init__(self, message: str, *, state: State, operation: Operation | None = None):
        super().__init__(message)
        self.state = state
        self.operation = operation


class OperationInProgress(IllegalState):
    """Another suspend, resume or checkpoint is running."""


class JournalUnavailable(IllegalState):
    """The journal cannot record this step: nothing starts or moves on unrecorded."""


class FlushFailed(Exception):
    """A flush step failed: the suspend must be aborted, nothing released."""

    def __init__(self, step: str, reason: str):
        super().__init__(f"{step}: {reason}")
        self.step = step
        self.reason = reason


class CapacityUnavailable(Exception):
    """The backend cannot restore yet: compatible capacity is not free."""

    def __init__(self, reason: str, retry_after: float):
        super().__init__(reason)
        self.reason = reason
        self.retry_after = retry_after


class RestoreFailed(Exception):
    def __init__(self, reason: str, next_step: str):
        super().__init__(reason)
        self.reason = reason
        self.next_step = next_step


def new_operation_id() -> str:
    return uuid.uuid4().hex[:12]


@dataclass
class Step:
    name: str
    status: str = "running"  # running | ok | failed | skipped
    started: float = field(default_factory=time.time)
    finished: float | None = None
    detail: dict[str, Any] = field(default_factory=dict)
    message: str = ""

    def finish(self, status: str, message: str = "", **detail: Any) -> None:
        self.status = status
        self.message = message
        self.detail.update(detail)
        self.finished = time.time()

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "status": self.status,
            "message": self.message,
            "started": utc_iso(self.started),
            "finished": utc_iso(self.finished) if self.finished else None,
            "detail": self.detail,
        }


@dataclass
class Operation:
    kind: OperationKind
    reason: str = ""
    id: str = field(default_factory=new_operation_id)
    started: float = field(default_factory=time.time)
    finished: float | None = None
    outcome: Outcome | None = None
    message: str = ""
    steps: list[Step] = field(default_factory=list)
    options: dict[str, Any] = field(default_factory=dict)

    @property
    def in_progress(self) -> bool:
        return self.finished is None

    def step(self, name: str) -> Step:
        step = Step(name)
        self.steps.append(step)
        return step

    def finish(self, outcome: Outcome, message: str = "") -> None:
        self.outcome = outcome
        self.message = message
        self.finished = time.time()

    def summary(self) -> dict[str, Any]:
        return {"id": self.id, "kind": self.kind.value, "in_progress": self.in_progress}

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "kind": self.kind.value,
            "reason": self.reason,
            "in_progress": self.in_progress,
            "started": utc_iso(self.started),
            "finished": utc_iso(self.finished) if self.finished else None,
            "outcome": self.outcome.value if self.outcome else None,
            "message": self.message,
            "steps": [s.to_dict() for s in self.steps],
        }
