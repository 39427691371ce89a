"""The lifecycle core without a server: every state x every request, every
transition, cold starts, journal replay of every entry kind, the wording.

A ``Lifecycle`` over ``tests/fakes.py`` (a fake environment, a scripted
backend) and a real ``Journal`` in ``tmp_path``; the whole file runs in seconds.
"""

from __future__ import annotations

import asyncio
import itertools
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from jupyter_suspend.server import wording
from jupyter_suspend.server.backends.base import Capabilities, ColdStartVerdict
from jupyter_suspend.server.environment import KernelRecord
from jupyter_suspend.server.journal import Journal
from jupyter_suspend.server.lifecycle import Lifecycle
from jupyter_suspend.server.live_state import VerifyError
from jupyter_suspend.server.replay import EntryKind, ReplayResult, replay
from jupyter_suspend.server.states import (
    TRANSITIONS,
    CapacityUnavailable,
    FlushFailed,
    IllegalState,
    OperationInProgress,
    RestoreFailed,
    RestoreKind,
    State,
)
from jupyter_suspend.server.timeline import build as build_timeline

from .fakes import (
    GKE_LIKE,
    LOCAL_LIKE,
    FakeBackend,
    FakeEnvironment,
    held,
    make_lifecycle,
    never,
    raising,
    reach,
    returned_live,
    settle,
    start_kernels,
    stop_kernels,
)

ARCHITECTURE = Path(__file__).resolve().parent.parent / "docs" / "architecture.md"


# -- situations: the lifecycle driven through its real paths into each state -------------------
class Situation:
    def __init__(self, tmp_path: Path, capabilities: Capabilities = LOCAL_LIKE):
        self.env = FakeEnvironment()
        self.env.add_kernel("k1", "nb.ipynb")
        self.backend = FakeBackend(capabilities)
        self.lifecycle = make_lifecycle(tmp_path, self.env, self.backend)
        self.gates: list[asyncio.Event] = []

    def gate(self) -> asyncio.Event:
        gate = asyncio.Event()
        self.gates.append(gate)
        return gate

    async def suspended(self) -> None:
        self.lifecycle.start_suspend("test")
        await settle(self.lifecycle)
        assert self.lifecycle.state == State.SUSPENDED

    async def resume(self) -> None:
        self.lifecycle.start_resume()


async def _running(s: Situation) -> None:
    pass


async def _flushing(s: Situation) -> None:
    s.gates.append(s.env.hold("checkpoint"))
    s.lifecycle.start_suspend()
    await reach(s.lifecycle, State.FLUSHING)


async def _snapshotting(s: Situation) -> None:
    s.backend.then_release(held(s.gate(), stop_kernels))
    s.lifecycle.start_suspend()
    await reach(s.lifecycle, State.SNAPSHOTTING)


async def _suspended(s: Situation) -> None:
    await s.suspended()


async def _waiting(s: Situation) -> None:
    await s.suspended()
    s.lifecycle.settings.capacity_max_wait = 60
    s.backend.then_restore(raising(CapacityUnavailable("no memory", retry_after=0.01)))
    s.backend.then_restore(held(s.gate(), start_kernels))
    await s.resume()
    await reach(s.lifecycle, State.WAITING_FOR_CAPACITY)


async def _restoring(s: Situation) -> None:
    await s.suspended()
    s.backend.then_restore(held(s.gate(), start_kernels))
    await s.resume()
    await reach(s.lifecycle, State.RESTORING)


async def _ready(s: Situation) -> None:
    await s.suspended()
    await s.resume()
    await settle(s.lifecycle)


async def _failed_with_plan(s: Situation) -> None:
    await s.suspended()
    s.backend.then_restore(raising(RestoreFailed("the kernel spec is gone", "install it, then resume")))
    await s.resume()
    await settle(s.lifecycle)


async def _failed_without_plan(s: Situation) -> None:
    # A live return whose verification crashes: failed, and nothing is left to resume.
    s.backend.then_release(returned_live)
    s.env.fail("verify", RuntimeError("kernel vanished"))
    s.lifecycle.start_suspend()
    await settle(s.lifecycle)
    s.env._failures.clear()


SITUATIONS: dict[str, tuple[Callable[[Situation], Any], State, bool]] = {
    # name: (how to get there, the state, an operation is in progress)
    "running": (_running, State.RUNNING, False),
    "flushing": (_flushing, State.FLUSHING, True),
    "snapshotting": (_snapshotting, State.SNAPSHOTTING, True),
    "suspended": (_suspended, State.SUSPENDED, False),
    "waiting_for_capacity": (_waiting, State.WAITING_FOR_CAPACITY, True),
    "restoring": (_restoring, State.RESTORING, True),
    "ready": (_ready, State.READY, False),
    "failed_with_plan": (_failed_with_plan, State.FAILED, False),
    "failed_without_plan": (_failed_without_plan, State.FAILED, False),
}

ACTIONS = ("suspend", "resume", "checkpoint", "acknowledge")

#: What may start in each situation, written out (not derived from the code under test).
ALLOWED = {
    "running": {"suspend", "checkpoint"},
    "flushing": set(),
    "snapshotting": set(),
    "suspended": {"resume"},
    "waiting_for_capacity": set(),
    "restoring": set(),
    "ready": {"suspend", "checkpoint"},
    "failed_with_plan": {"resume", "checkpoint", "acknowledge"},
    "failed_without_plan": {"suspend", "checkpoint", "acknowledge"},
}


async def situation(tmp_path: Path, name: str, capabilities: Capabilities = LOCAL_LIKE) -> Situation:
    s = Situation(tmp_path, capabilities)
    await SITUATIONS[name][0](s)
    return s


async def release(s: Situation) -> None:
    for gate in s.gates:
        gate.set()
    await s.lifecycle.stop()


def attempt(lifecycle: Lifecycle, action: str) -> None:
    if action == "suspend":
        lifecycle.start_suspend("again")
    elif action == "resume":
        lifecycle.start_resume()
    elif action == "checkpoint":
        lifecycle.start_checkpoint()
    else:
        lifecycle.acknowledge()


def transitions(journal: Journal) -> list[tuple[str, str]]:
    return [(e["from"], e["to"]) for e in journal.read().entries if e["kind"] == "transition"]


@pytest.mark.parametrize("name", sorted(SITUATIONS))
async def test_each_situation_is_reached_by_its_real_path(tmp_path: Path, name: str) -> None:
    s = await situation(tmp_path, name)
    try:
        _, state, in_progress = SITUATIONS[name]
        assert s.lifecycle.state == state
        operation = s.lifecycle.operation
        assert bool(operation and operation.in_progress) == in_progress
        for a, b in transitions(s.lifecycle.journal):
            assert State(b) in TRANSITIONS[State(a)], (a, b)
    finally:
        await release(s)


@pytest.mark.parametrize("action", ACTIONS)
@pytest.mark.parametrize("name", sorted(SITUATIONS))
async def test_every_request_in_every_state(tmp_path: Path, name: str, action: str) -> None:
    """Allowed, or a 409 with the state unchanged and nothing journaled."""
    s = await situation(tmp_path, name)
    lifecycle = s.lifecycle
    try:
        state, operation = lifecycle.state, lifecycle.operation
        entries = len(lifecycle.journal.read().entries)
        if action in ALLOWED[name]:
            attempt(lifecycle, action)
            if action == "acknowledge":
                assert lifecycle.state == State.RUNNING
            else:
                assert lifecycle.operation is not operation
                assert lifecycle.operation is not None
                assert lifecycle.operation.kind.value == action
            return
        with pytest.raises(IllegalState) as info:
            attempt(lifecycle, action)
        assert info.value.status_code == 409
        if SITUATIONS[name][2]:
            assert isinstance(info.value, OperationInProgress)
            assert info.value.operation is operation
        assert lifecycle.state == state
        assert lifecycle.operation is operation
        assert len(lifecycle.journal.read().entries) == entries
    finally:
        await release(s)


@pytest.mark.parametrize("action", ACTIONS)
@pytest.mark.parametrize("name", sorted(SITUATIONS))
async def test_status_says_what_the_claim_does(tmp_path: Path, name: str, action: str) -> None:
    s = await situation(tmp_path, name)
    try:
        says = s.lifecycle.status()[f"can_{action}"]
        try:
            attempt(s.lifecycle, action)
            did = True
        except IllegalState:
            did = False
        assert says is did
    finally:
        await release(s)


def test_a_suspend_from_failed_with_nothing_to_resume_is_the_table_s_edge() -> None:
    """failed -> flushing is legal; the rule allows it exactly when nothing waits to be resumed."""
    assert State.FLUSHING in TRANSITIONS[State.FAILED]
    assert "suspend" in ALLOWED["failed_without_plan"]
    assert "suspend" not in ALLOWED["failed_with_plan"]


@pytest.mark.parametrize("name", sorted(SITUATIONS))
async def test_verify_in_every_state_answers_and_changes_nothing(tmp_path: Path, name: str) -> None:
    s = await situation(tmp_path, name)
    try:
        state = s.lifecycle.state
        before = transitions(s.lifecycle.journal)
        if "k1" not in s.lifecycle.live_state.records:  # nothing flushed yet
            with pytest.raises(VerifyError) as info:
                await s.lifecycle.verify("k1")
            assert info.value.status_code == 404
            assert "suspend or checkpoint first" in str(info.value)
        elif s.env.has_kernel("k1"):
            result = await s.lifecycle.verify("k1")
            assert result["verdict"] in ("LIVE", "COLD", "MISMATCH")
        else:
            with pytest.raises(VerifyError) as info:
                await s.lifecycle.verify("k1")
            assert info.value.status_code == 409
            assert "is not running" in str(info.value)
        assert s.lifecycle.state == state
        assert transitions(s.lifecycle.journal) == before
    finally:
        await release(s)


# -- every legal transition, by the paths that take it ----------------------------------------
async def _path_suspend_resume(s: Situation) -> None:
    await s.suspended()
    await s.resume()
    await settle(s.lifecycle)
    s.lifecycle.start_suspend()  # from ready
    await settle(s.lifecycle)


async def _path_flush_fails(s: Situation) -> None:
    s.env.fail("checkpoint", OSError("disk full"))  # the flush crashes: aborted, back to running
    s.lifecycle.start_suspend()
    await settle(s.lifecycle)


async def _path_release_refused(s: Situation) -> None:
    s.backend.then_release(raising(FlushFailed("release", "the platform said no")))
    s.lifecycle.start_suspend()
    await settle(s.lifecycle)


async def _path_release_breaks(s: Situation) -> None:
    s.backend.then_release(raising(RuntimeError("half the kernels stopped")))
    s.lifecycle.start_suspend()
    await settle(s.lifecycle)
    s.lifecycle.start_resume()  # failed -> restoring -> ready
    await settle(s.lifecycle)


async def _path_capacity(s: Situation) -> None:
    await s.suspended()
    s.backend.then_restore(raising(CapacityUnavailable("busy node", retry_after=0.01)))
    await s.resume()  # restoring -> waiting -> restoring -> ready
    await settle(s.lifecycle)
    s.lifecycle.start_suspend()
    await settle(s.lifecycle)
    for _ in range(200):
        s.backend.then_restore(raising(CapacityUnavailable("never", retry_after=0.01)))
    s.lifecycle.settings.capacity_max_wait = 0.05
    await s.resume()  # waiting -> failed
    await settle(s.lifecycle)
    s.backend.restores.clear()


async def _path_restore_fails_then_acknowledged(s: Situation) -> None:
    await s.suspended()
    s.backend.then_restore(raising(RestoreFailed("gone", "")))
    await s.resume()  # restoring -> failed
    await settle(s.lifecycle)
    s.lifecycle.acknowledge()  # failed -> running


async def _path_live_return(s: Situation) -> None:
    s.backend.then_release(returned_live)
    s.lifecycle.start_suspend()  # snapshotting -> restoring -> ready
    await settle(s.lifecycle)


async def _path_suspend_again_after_a_failed_live_return(s: Situation) -> None:
    await _failed_without_plan(s)
    s.lifecycle.start_suspend()  # failed -> flushing
    await settle(s.lifecycle)


PATHS: dict[str, tuple[Callable[[Situation], Any], list[str], str]] = {
    "suspend_resume": (
        _path_suspend_resume,
        ["flushing", "snapshotting", "suspended", "restoring", "ready", "flushing", "snapshotting", "suspended"],
        "suspended",
    ),
    "flush_fails": (_path_flush_fails, ["flushing", "running"], "running"),
    "release_refused": (_path_release_refused, ["flushing", "snapshotting", "running"], "running"),
    "release_breaks": (
        _path_release_breaks,
        ["flushing", "snapshotting", "failed", "restoring", "ready"],
        "ready",
    ),
    "capacity": (
        _path_capacity,
        [
            *("flushing", "snapshotting", "suspended", "restoring", "waiting_for_capacity", "restoring", "ready"),
            *("flushing", "snapshotting", "suspended", "restoring", "waiting_for_capacity", "failed"),
        ],
        "failed",
    ),
    "restore_fails": (
        _path_restore_fails_then_acknowledged,
        ["flushing", "snapshotting", "suspended", "restoring", "failed", "running"],
        "running",
    ),
    "live_return": (_path_live_return, ["flushing", "snapshotting", "restoring", "ready"], "ready"),
    "suspend_after_failed_live_return": (
        _path_suspend_again_after_a_failed_live_return,
        [
            *("flushing", "snapshotting", "restoring", "failed"),
            *("flushing", "snapshotting", "suspended"),
        ],
        "suspended",
    ),
}


@pytest.mark.parametrize("name", sorted(PATHS))
async def test_transition_paths(tmp_path: Path, name: str) -> None:
    s = Situation(tmp_path)
    try:
        script, expected, final = PATHS[name]
        await script(s)
        assert [to for _, to in transitions(s.lifecycle.journal)] == expected
        assert s.lifecycle.state.value == final
    finally:
        await release(s)


def test_the_paths_take_every_legal_transition_and_no_other() -> None:
    taken: set[tuple[str, str]] = set()
    for _, expected, _ in PATHS.values():
        states = ["running", *expected]
        taken |= set(itertools.pairwise(states))
    table = {(a.value, b.value) for a, targets in TRANSITIONS.items() for b in targets}
    assert taken == table


# -- cold starts: a new Lifecycle over the journal a killed one left ---------------------------
#: situation -> (state after a restart, can_resume, words in the cold-start message or None)
COLD_LOCAL = {
    "running": ("running", False, None),
    "flushing": ("running", False, "stopped during a flush"),
    "snapshotting": ("suspended", True, "stopped during the release"),
    "suspended": ("suspended", True, "restarted while suspended"),
    "waiting_for_capacity": ("suspended", True, "restarted while suspended"),
    "restoring": ("suspended", True, "restarted while suspended"),
    "ready": ("running", False, None),
    "failed_with_plan": ("failed", True, "recorded a failure"),
    "failed_without_plan": ("running", False, "nothing was left to resume"),
}


async def restart(s: Situation, tmp_path: Path, capabilities: Capabilities = LOCAL_LIKE) -> Lifecycle:
    """Kill the first process (its task is cancelled mid-step, nothing more is journaled)
    and start a second one over the same journal, with the kernels gone."""
    await s.lifecycle.stop()
    env = FakeEnvironment()
    return make_lifecycle(tmp_path, env, FakeBackend(capabilities))


@pytest.mark.parametrize("name", sorted(COLD_LOCAL))
async def test_cold_start_after_each_state(tmp_path: Path, name: str) -> None:
    s = await situation(tmp_path, name)
    second = await restart(s, tmp_path)
    try:
        state, can_resume, words = COLD_LOCAL[name]
        status = second.status()
        assert status["state"] == state
        assert status["can_resume"] is can_resume
        if words is None:
            assert status["cold_start"] is None
        else:
            assert words in status["cold_start"]["message"]
            assert status["cold_start"]["previous_state"] == SITUATIONS[name][1].value
        if can_resume:
            # Whatever the cold start says can be resumed, can: the same kernel comes back.
            second.start_resume()
            await settle(second)
            assert second.state == State.READY, second.status()
            assert second.environment.has_kernel("k1")
    finally:
        await second.stop()


async def test_cold_start_on_a_platform_whose_server_does_not_survive_says_so(tmp_path: Path) -> None:
    s = await situation(tmp_path, "snapshotting", GKE_LIKE)
    second = await restart(s, tmp_path, GKE_LIKE)
    status = second.status()
    assert status["state"] == "ready"
    assert status["restore"] == "cold"
    assert status["cold_start"]["message"].startswith("The server restarted")
    assert status["can_resume"] is False
    assert status["can_suspend"] is True


class ResumesAtStart(FakeBackend):
    """A platform that resumes by itself and reads a cold pod as suspended (as gke does): the core resumes at once."""

    def interpret_cold_start(self, last_state: State, last_entry: dict[str, Any] | None) -> ColdStartVerdict:
        if last_state in (State.SNAPSHOTTING, State.SUSPENDED):
            return ColdStartVerdict(State.SUSPENDED, "the pod started cold")
        return super().interpret_cold_start(last_state, last_entry)


async def test_a_cold_start_that_resumes_by_itself_says_so_not_restoring_a_snapshot(tmp_path: Path) -> None:
    s = await situation(tmp_path, "snapshotting", GKE_LIKE)
    await s.lifecycle.stop()
    gate = asyncio.Event()
    backend = ResumesAtStart(GKE_LIKE)
    backend.then_restore(held(gate, start_kernels))
    second = make_lifecycle(tmp_path, FakeEnvironment(), backend)
    try:
        await reach(second, State.RESTORING)
        message = second.status()["message"]
        assert message == wording.resuming_after_cold_start(GKE_LIKE, restore_checkpoints=True)
        assert message == (
            "the pod started cold, not from its snapshot: starting the recorded sessions again "
            "and restoring their application checkpoints"
        )
        assert message != wording.resuming(GKE_LIKE)  # "restoring the pod from its snapshot": false here
        gate.set()
        await settle(second)
        assert (second.state, second.restore) == (State.READY, RestoreKind.COLD)
        assert backend.restore_calls == 1
    finally:
        await second.stop()
    # Without checkpoints to restore, it does not promise them.
    assert "checkpoints" not in wording.resuming_after_cold_start(GKE_LIKE, restore_checkpoints=False)


async def test_a_killed_suspend_leaves_its_plan_before_the_first_kernel_stops(tmp_path: Path) -> None:
    """Issue 8 item 4: the plan is durable before the release begins."""
    s = Situation(tmp_path)
    seen: list[bool] = []

    async def release_checks_the_journal(ctx: Any) -> Any:
        seen.append(any(e["kind"] == "release_started" for e in s.lifecycle.journal.read().entries))
        return await never(ctx)

    s.backend.then_release(release_checks_the_journal)
    s.lifecycle.start_suspend()
    await reach(s.lifecycle, State.SNAPSHOTTING)
    await asyncio.sleep(0.01)
    assert seen == [True]
    second = await restart(s, tmp_path)
    assert second.status()["can_resume"] is True


# -- journal replay of every entry kind --------------------------------------------------------
def _journal_of(tmp_path: Path, *entries: tuple[EntryKind, dict[str, Any]]) -> list[dict[str, Any]]:
    journal = Journal(tmp_path / "replay")
    for kind, data in entries:
        journal.append(kind.value, **data)
    return journal.read().entries


KERNEL = {"kernel_id": "k1", "path": "nb.ipynb", "pid": 11, "process_start": 1.0}
FLUSHED_KERNEL = {
    **KERNEL,
    "status": "checkpointed",
    "canary": {"hash": "c1", "pid": 11},
    "checkpoints": [{"name": "w"}],
}
PLAN = {"kernels": [{"kernel_id": "k1", "kernel_name": "python3"}]}
SUSPEND = (EntryKind.SUSPEND_REQUESTED, {"operation_id": "op1", "reason": "night", "kernels": [KERNEL]})


def _check_server_started(r: ReplayResult, t: dict[str, Any]) -> None:
    assert r.last_state is None
    assert t["cycles"] == []


def _check_recovered(r: ReplayResult, t: dict[str, Any]) -> None:
    assert r.last_state == State.RUNNING
    assert r.resume_plan is None
    assert any("server started cold: gone" in n for n in t["cycles"][0]["notes"])


def _check_transition(r: ReplayResult, t: dict[str, Any]) -> None:
    assert r.last_state == State.FAILED
    assert r.last_transition is not None
    assert r.last_transition["from"] == "restoring"


def _check_operation_started(r: ReplayResult, t: dict[str, Any]) -> None:
    assert r.last_state is None
    assert t["cycles"][0]["outcome"] == "in_progress"


def _check_operation_finished(r: ReplayResult, t: dict[str, Any]) -> None:
    assert t["cycles"][0]["outcome"] == "aborted"
    assert "busy kernel" in t["cycles"][0]["notes"]
    assert t["totals"]["aborted"] == 1


def _check_suspend_requested(r: ReplayResult, t: dict[str, Any]) -> None:
    assert r.cycle_id == "op1"
    assert r.resume_plan is None  # a new suspend forgets an older plan
    assert t["cycles"][0]["reason"] == "night"
    assert t["cycles"][0]["kernels"] == 1


def _check_flushed(r: ReplayResult, t: dict[str, Any]) -> None:
    assert r.flushed_kernels == [FLUSHED_KERNEL]
    assert r.live_state_records["k1"]["canary"]["hash"] == "c1"
    assert r.live_state_records["k1"]["source"] == "suspend"
    assert t["cycles"][0]["times"]["flush_completed"] is not None


def _check_release_started(r: ReplayResult, t: dict[str, Any]) -> None:
    assert r.resume_plan == PLAN


def _check_released(r: ReplayResult, t: dict[str, Any]) -> None:
    assert r.resume_plan == {"kernels": [], "legacy": True}  # the older field name is still read
    assert t["cycles"][0]["times"]["environment_stopped"] is not None
    assert t["cycles"][0]["released"] == {"kernel_memory_bytes": 2**30}


def _check_resume_requested(r: ReplayResult, t: dict[str, Any]) -> None:
    assert t["cycles"][0]["times"]["resume_requested"] is not None


def _check_capacity_wait(r: ReplayResult, t: dict[str, Any]) -> None:
    assert "waited for capacity: no GPU" in t["cycles"][0]["notes"]


def _check_restored(r: ReplayResult, t: dict[str, Any]) -> None:
    assert r.last_restore is not None
    assert r.last_restore["restore"] == "cold"
    assert r.last_restore["checkpoints_restored_count"] == 1
    assert t["cycles"][0]["outcome"] == "resumed"


def _check_checkpointed(r: ReplayResult, t: dict[str, Any]) -> None:
    assert r.live_state_records["k1"]["source"] == "checkpoint"
    assert r.flushed_kernels == []  # a checkpoint is not a suspend


def _check_verified(r: ReplayResult, t: dict[str, Any]) -> None:
    assert r.live_state_records == {}  # a verdict is history, not a record
    assert r.last_state is None


REPLAY_CASES: dict[EntryKind, tuple[list[tuple[EntryKind, dict[str, Any]]], Callable[..., None]]] = {
    EntryKind.SERVER_STARTED: (
        [(EntryKind.SERVER_STARTED, {"backend": "local", "state": "running"})],
        _check_server_started,
    ),
    EntryKind.RECOVERED: (
        [
            SUSPEND,
            (EntryKind.RELEASED, {"operation_id": "op1", "resume_plan": PLAN}),
            (EntryKind.RECOVERED, {"to": "running", "operation_id": "op1", "message": "gone"}),
        ],
        _check_recovered,
    ),
    EntryKind.TRANSITION: ([(EntryKind.TRANSITION, {"from": "restoring", "to": "failed"})], _check_transition),
    EntryKind.OPERATION_STARTED: (
        [SUSPEND, (EntryKind.OPERATION_STARTED, {"operation_id": "op2", "operation_kind": "checkpoint"})],
        _check_operation_started,
    ),
    EntryKind.OPERATION_FINISHED: (
        [
            SUSPEND,
            (
                EntryKind.OPERATION_FINISHED,
                {"operation_id": "op1", "operation_kind": "suspend", "outcome": "aborted", "message": "busy kernel"},
            ),
        ],
        _check_operation_finished,
    ),
    EntryKind.SUSPEND_REQUESTED: (
        [(EntryKind.RELEASED, {"operation_id": "op0", "resume_plan": PLAN}), SUSPEND],
        _check_suspend_requested,
    ),
    EntryKind.FLUSHED: (
        [SUSPEND, (EntryKind.FLUSHED, {"operation_id": "op1", "kernels": [FLUSHED_KERNEL]})],
        _check_flushed,
    ),
    EntryKind.RELEASE_STARTED: (
        [SUSPEND, (EntryKind.RELEASE_STARTED, {"operation_id": "op1", "resume_plan": PLAN})],
        _check_release_started,
    ),
    EntryKind.RELEASED: (
        [
            SUSPEND,
            (
                EntryKind.RELEASED,
                {
                    "operation_id": "op1",
                    "restore_record": {"kernels": [], "legacy": True},
                    "environment_stopped_at": 1000.0,
                    "released": {"kernel_memory_bytes": 2**30},
                },
            ),
        ],
        _check_released,
    ),
    EntryKind.RESUME_REQUESTED: (
        [SUSPEND, (EntryKind.RESUME_REQUESTED, {"operation_id": "op2", "cycle_id": "op1"})],
        _check_resume_requested,
    ),
    EntryKind.CAPACITY_WAIT: (
        [SUSPEND, (EntryKind.CAPACITY_WAIT, {"operation_id": "op2", "reason": "no GPU"})],
        _check_capacity_wait,
    ),
    EntryKind.RESTORED: (
        [
            SUSPEND,
            (
                EntryKind.RESTORED,
                {
                    "operation_id": "op2",
                    "cycle_id": "op1",
                    "restore": "cold",
                    "checkpoints_restored": {"k1": {"restored": ["w"]}},
                },
            ),
        ],
        _check_restored,
    ),
    EntryKind.CHECKPOINTED: (
        [(EntryKind.CHECKPOINTED, {"operation_id": "op3", "kernels": [FLUSHED_KERNEL]})],
        _check_checkpointed,
    ),
    EntryKind.VERIFIED: (
        [(EntryKind.VERIFIED, {"kernel_id": "k1", "verdict": "LIVE", "names": [], "message": "LIVE"})],
        _check_verified,
    ),
}


def test_every_entry_kind_has_a_replay_case() -> None:
    assert set(REPLAY_CASES) == set(EntryKind)


@pytest.mark.parametrize("kind", list(EntryKind), ids=lambda k: k.value)
def test_replay_of_each_entry_kind(tmp_path: Path, kind: EntryKind) -> None:
    entries, check = REPLAY_CASES[kind]
    read = _journal_of(tmp_path, *entries)
    assert [e["kind"] for e in read] == [k.value for k, _ in entries]
    check(replay(read), build_timeline(read))


def test_a_backend_s_own_marks_go_on_their_cycle_in_time_order(tmp_path: Path) -> None:
    """A backend's entries (``ctx.record``) with a ``mark`` are the cycle's ``events``; the rest are skipped."""
    from tests.test_contract import schema_validator

    journal = Journal(tmp_path / "marks")
    start = journal.append(SUSPEND[0].value, **SUSPEND[1])["wall"]
    journal.append("gke_identity", operation_id="op1", pod_uid="u1")  # no mark: not on the timeline
    journal.append("gke_snapshot_requested", operation_id="op1", mark="snapshot_requested", mark_at=start + 1)
    # Learned late (after the return), happened earlier: placed by its time, not by when it was written.
    journal.append("gke_pod_stopped", operation_id="op1", mark="pod_stopped", mark_at=start + 3)
    journal.append("gke_checkpoint_done", operation_id="op1", mark="checkpoint_done", mark_at=start + 2)
    journal.append("gke_other", operation_id="op-unknown", mark="elsewhere")  # no such cycle
    journal.append("gke_bad", operation_id="op1", mark="Not A Name", mark_at=start + 3)
    unusable = journal.append("gke_late", operation_id="op1", mark="no_usable_time", mark_at=1e12)  # its wall then
    # A resume's entries name the cycle they resume.
    journal.append("gke_cold_start", operation_id="op2", cycle_id="op1", mark="pod_started_cold", mark_at=start + 4)
    entries = journal.read().entries
    assert journal.read().problems == []
    assert replay(entries).last_state is None  # a backend's entries never change what the core reads
    timeline = build_timeline(entries)
    schema_validator("timeline.json").validate(timeline)
    events = timeline["cycles"][0]["events"]
    # By time, not by when each was written (the checkpoint's time may be learned after the pod stopped).
    assert [e["name"] for e in events] == [
        "no_usable_time",
        "snapshot_requested",
        "checkpoint_done",
        "pod_stopped",
        "pod_started_cold",
    ]
    by_name = {e["name"]: e for e in events}
    assert by_name["checkpoint_done"]["kind"] == "gke_checkpoint_done"
    assert by_name["checkpoint_done"]["since_suspend_requested"] == pytest.approx(2.0, abs=1e-3)
    assert by_name["no_usable_time"]["time"] == unusable["time"]
    # A cycle without a backend's marks says so with an empty list.
    plain = build_timeline(_journal_of(tmp_path / "plain", SUSPEND))
    assert plain["cycles"][0]["events"] == []


async def test_stopping_the_lifecycle_stops_the_backend_and_the_environment(tmp_path: Path) -> None:
    backend, environment = FakeBackend(), FakeEnvironment()
    lifecycle = make_lifecycle(tmp_path, environment=environment, backend=backend)
    await lifecycle.stop()
    assert backend.stop_calls == 1
    assert environment.closed  # its background work (activity put back) is ended
    environment.closed = False

    # A backend that fails to stop does not stop the shutdown.
    async def broken() -> None:
        raise RuntimeError("boom")

    backend.stop = broken  # type: ignore[method-assign]
    await lifecycle.stop()
    assert environment.closed


async def test_the_core_writes_only_known_entry_kinds(tmp_path: Path) -> None:
    s = Situation(tmp_path)
    await _path_release_breaks(s)
    await s.lifecycle.verify("k1")
    await s.lifecycle.stop()
    kinds = {e["kind"] for e in s.lifecycle.journal.read().entries}
    assert kinds <= {k.value for k in EntryKind}
    assert len(kinds) >= 11


# -- wording from capabilities --------------------------------------------------------------------
TEXT_KEYS = {"keeps", "loses", "release_step", "restore_step", "while_suspended", "resume_by"}


def all_sentences(caps: Capabilities) -> str:
    record = KernelRecord("k1", "python3", path="nb.ipynb", type="notebook")
    keeps, loses = wording.kernel_keeps_loses(caps, record, ["w"], uses_gpu=True)
    parts: list[str] = [
        *wording.backend_text(caps)["keeps"],
        *wording.backend_text(caps)["loses"],
        *(str(v) for v in wording.backend_text(caps).values()),
        wording.suspended(caps),
        wording.resuming(caps),
        *wording.preflight_notes(caps),
        *keeps,
        *loses,
        *wording.release_failed(caps, "boom"),
    ]
    for last in State:
        for now in (State.RUNNING, State.SUSPENDED, State.FAILED, State.READY):
            message, next_step = wording.cold_start(caps, last, now, "noon")
            parts += [wording.server_restarted(caps, message), next_step]
    return "\n".join(parts)


def test_backend_text_has_the_promised_keys() -> None:
    for caps in (LOCAL_LIKE, GKE_LIKE):
        text = wording.backend_text(caps)
        assert set(text) == TEXT_KEYS
        assert all(isinstance(text[k], str) and text[k] for k in TEXT_KEYS - {"keeps", "loses"})


def test_local_wording_says_what_the_local_backend_does() -> None:
    text = wording.backend_text(LOCAL_LIKE)
    assert "variables in kernel memory" not in text["keeps"]
    assert any("variables in kernel memory" in item for item in text["loses"])
    assert text["restore_step"] == "restarting the recorded sessions"
    assert text["resume_by"].startswith("this server")
    assert wording.suspended(LOCAL_LIKE) == "suspended: kernels stopped, memory released"
    said = all_sentences(LOCAL_LIKE).lower()
    for false in ("snapshot", "node", "sidecar", "platform", "frozen", "new server process"):
        assert false not in said, false


def test_gke_like_wording_says_nothing_false() -> None:
    text = wording.backend_text(GKE_LIKE)
    assert {"variables in kernel memory", "tensors in GPU memory"} <= set(text["keeps"])
    assert not any("memory" in item for item in text["loses"])
    assert "node" in text["release_step"]
    assert "sidecar" in text["while_suspended"]
    assert "frozen" in text["while_suspended"]
    assert text["resume_by"].startswith("the platform")
    assert "node released" in wording.suspended(GKE_LIKE)
    said = all_sentences(GKE_LIKE).lower()
    for false in (
        "kernels stopped",
        "restarting the recorded",
        "resume retries",
        "can be resumed",
        "kernels will be shut down",
        "this server: resume",
    ):
        assert false not in said, false
    assert "the server restarted" in said


def test_the_status_carries_the_backend_s_own_words(tmp_path: Path) -> None:
    lifecycle = make_lifecycle(tmp_path, backend=FakeBackend(GKE_LIKE))
    status = lifecycle.status()
    assert status["backend"]["text"] == wording.backend_text(GKE_LIKE)
    assert {"can_suspend", "can_resume", "can_checkpoint", "can_acknowledge"} <= set(status)


async def test_suspended_message_follows_the_report(tmp_path: Path) -> None:
    s = Situation(tmp_path)

    async def leaves_a_process(ctx: Any) -> Any:
        outcome = await stop_kernels(ctx)
        outcome.resume_plan["still_running_pids"] = [123]
        return outcome

    s.backend.then_release(leaves_a_process)
    await s.suspended()
    assert s.lifecycle.message == "suspended: kernels stopped, 1 process(es) still holding memory"


# -- the diagram in docs/architecture.md is the transition table -----------------------------------
def diagram_edges(text: str) -> set[tuple[str, str]]:
    block = re.search(r"```mermaid\n(stateDiagram-v2\n.*?)```", text, re.S)
    assert block, "no mermaid stateDiagram-v2 block"
    edges = set()
    for line in block.group(1).splitlines():
        match = re.match(r"\s*(\w+)\s*-->\s*(\w+)", line)
        if match and "[*]" not in line:
            edges.add((match.group(1), match.group(2)))
    return edges


def test_the_architecture_diagram_equals_the_transition_table() -> None:
    edges = diagram_edges(ARCHITECTURE.read_text())
    assert edges == {(a.value, b.value) for a, targets in TRANSITIONS.items() for b in targets}


def test_the_diagram_check_sees_a_missing_edge() -> None:
    text = "```mermaid\nstateDiagram-v2\n    [*] --> running\n    running --> flushing\n```\n"
    assert diagram_edges(text) == {("running", "flushing")}
