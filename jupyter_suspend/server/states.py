"""Plain data of the lifecycle: states, legal transitions, operations.

Nothing here knows about tornado or Jupyter; the lifecycle core and the
backends share these types.
"""

from __future__ import annotations

import enum
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from .journal import utc_iso


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
TRANSITIONS: dict[State, frozenset[State]] = {
    State.RUNNING: frozenset({State.FLUSHING}),
    State.READY: frozenset({State.FLUSHING}),
    # A failed flush aborts: back to running, nothing released.
    State.FLUSHING: frozenset({State.SNAPSHOTTING, State.RUNNING, State.FAILED}),
    # SNAPSHOTTING -> RESTORING: a backend whose server process is frozen with
    # the pod (GKE) continues here after a live restore.
    State.SNAPSHOTTING: frozenset({State.SUSPENDED, State.RESTORING, State.RUNNING, State.FAILED}),
    State.SUSPENDED: frozenset({State.RESTORING, State.WAITING_FOR_CAPACITY}),
    State.WAITING_FOR_CAPACITY: frozenset({State.RESTORING, State.SUSPENDED, State.FAILED}),
    State.RESTORING: frozenset({State.READY, State.WAITING_FOR_CAPACITY, State.FAILED}),
    # From failed: retry the restore, or acknowledge and carry on working.
    State.FAILED: frozenset({State.RESTORING, State.WAITING_FOR_CAPACITY, State.RUNNING, State.FLUSHING}),
}


class OperationKind(str, enum.Enum):
    SUSPEND = "suspend"
    RESUME = "resume"
    CHECKPOINT = "checkpoint"


class Outcome(str, enum.Enum):
    SUCCEEDED = "succeeded"
    ABORTED = "aborted"  # nothing was released; the session keeps running
    FAILED = "failed"


class RestoreKind(str, enum.Enum):
    LIVE = "live"  # the same processes survived (proved by the live-state canary)
    COLD = "cold"  # new processes; recover from files and application checkpoints


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
