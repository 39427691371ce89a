"""Faults the core must survive (issue 8), without a server: a journal that
cannot be written, at each step of each operation."""

from __future__ import annotations

from pathlib import Path

import pytest

from jupyter_suspend.server.lifecycle import Lifecycle
from jupyter_suspend.server.states import IllegalState, JournalUnavailable, RestoreFailed, State

from .fakes import FakeBackend, FakeEnvironment, FaultyJournal, make_lifecycle, raising, settle

DISK_FULL = "No space left on device"


def build(tmp_path: Path) -> tuple[Lifecycle, FakeEnvironment, FakeBackend, FaultyJournal]:
    env = FakeEnvironment()
    env.add_kernel("k1", "nb.ipynb")
    backend = FakeBackend()
    journal = FaultyJournal(tmp_path)
    return make_lifecycle(tmp_path, env, backend, journal), env, backend, journal


def nothing_claimed(lifecycle: Lifecycle) -> bool:
    return lifecycle.operation is None or not lifecycle.operation.in_progress


async def test_a_journal_that_cannot_be_written_refuses_the_start_and_claims_nothing(tmp_path: Path) -> None:
    lifecycle, _, _, journal = build(tmp_path)
    journal.fault = DISK_FULL
    for start in (lifecycle.start_suspend, lifecycle.start_checkpoint):
        with pytest.raises(JournalUnavailable) as info:
            start()
        assert info.value.status_code == 409
        assert DISK_FULL in str(info.value)
    status = lifecycle.status()
    assert status["state"] == "running"
    assert status["operation"] is None
    assert DISK_FULL in status["failure"]["reason"]
    assert status["can_suspend"] is True  # the next call tries again

    journal.fault = None
    lifecycle.start_suspend()
    await settle(lifecycle)
    assert lifecycle.state == State.SUSPENDED
    assert lifecycle.status()["failure"] is None


@pytest.mark.parametrize(
    ("kind", "state_after", "kernel_running"),
    [
        ("transition", State.RUNNING, True),  # the first step cannot be recorded: nothing starts
        ("suspend_requested", State.RUNNING, True),  # flushing: aborted, nothing released
        ("flushed", State.RUNNING, True),
        ("release_started", State.RUNNING, True),  # the plan cannot be made durable: nothing stops
        ("released", State.FAILED, False),  # the kernels stopped: failed, and resumable
    ],
)
async def test_a_journal_fault_during_a_suspend_ends_it_cleanly(
    tmp_path: Path, kind: str, state_after: State, kernel_running: bool
) -> None:
    lifecycle, env, _, journal = build(tmp_path)
    journal.fault, journal.fault_kinds = DISK_FULL, {kind}
    lifecycle.start_suspend()
    await settle(lifecycle)
    assert nothing_claimed(lifecycle)
    assert lifecycle.operation is not None
    assert lifecycle.operation.outcome is not None
    assert lifecycle.operation.outcome.value in ("aborted", "failed")
    assert lifecycle.state == state_after
    assert env.has_kernel("k1") is kernel_running
    status = lifecycle.status()
    assert status["failure"] is not None
    if state_after == State.RUNNING:
        assert DISK_FULL in status["failure"]["reason"]

    journal.fault = None
    if state_after == State.FAILED:
        assert status["can_resume"] is True
        lifecycle.start_resume()
    else:
        lifecycle.start_suspend()
    await settle(lifecycle)
    assert lifecycle.state in (State.READY, State.SUSPENDED)
    assert lifecycle.operation.outcome is not None
    assert lifecycle.operation.outcome.value == "succeeded"


@pytest.mark.parametrize("kind", ["resume_requested", "transition", "restored"])
async def test_a_journal_fault_during_a_resume_leaves_it_resumable(tmp_path: Path, kind: str) -> None:
    lifecycle, _, _, journal = build(tmp_path)
    lifecycle.start_suspend()
    await settle(lifecycle)
    journal.fault, journal.fault_kinds = DISK_FULL, {kind}
    lifecycle.start_resume()
    await settle(lifecycle)
    assert nothing_claimed(lifecycle)
    assert lifecycle.state in (State.SUSPENDED, State.FAILED)
    assert lifecycle.status()["can_resume"] is True
    journal.fault = None
    lifecycle.start_resume()
    await settle(lifecycle)
    assert lifecycle.state == State.READY


async def test_acknowledge_with_a_broken_journal_keeps_the_failure_and_its_words(tmp_path: Path) -> None:
    lifecycle, _, backend, journal = build(tmp_path)
    lifecycle.start_suspend()
    await settle(lifecycle)
    backend.then_restore(raising(RestoreFailed("the kernel spec is gone", "install it")))
    lifecycle.start_resume()
    await settle(lifecycle)
    journal.fault = DISK_FULL
    with pytest.raises(IllegalState):
        lifecycle.acknowledge()
    assert lifecycle.state == State.FAILED
    assert lifecycle.status()["failure"]["reason"] == "the kernel spec is gone"
    journal.fault = None
    lifecycle.acknowledge()
    assert lifecycle.state == State.RUNNING


async def test_a_verdict_is_answered_even_when_the_journal_cannot_keep_it(tmp_path: Path) -> None:
    lifecycle, _, _, journal = build(tmp_path)
    lifecycle.start_checkpoint()
    await settle(lifecycle)
    journal.fault = DISK_FULL
    assert (await lifecycle.verify("k1"))["verdict"] == "LIVE"


async def test_the_capacity_wait_ends_at_its_deadline_whatever_the_backend_asks(tmp_path: Path) -> None:
    """A backend asking to retry in 60 s does not stretch a 0.3 s capacity wait to a minute."""
    import time

    from jupyter_suspend.server.states import CapacityUnavailable

    lifecycle, _, backend, _ = build(tmp_path)
    lifecycle.start_suspend()
    await settle(lifecycle)
    lifecycle.settings.capacity_max_wait = 0.3
    for _ in range(5):
        backend.then_restore(raising(CapacityUnavailable("no GPU node", retry_after=60.0)))
    started = time.monotonic()
    lifecycle.start_resume()
    await settle(lifecycle, timeout=10.0)
    assert lifecycle.state == State.FAILED
    assert time.monotonic() - started < 5.0
    assert "no GPU node" in lifecycle.status()["failure"]["reason"]
