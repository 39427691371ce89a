"""Legal transitions, checkpoint folders and request validation: pure logic."""

from __future__ import annotations

from pathlib import Path

import pytest

from jupyter_suspend.server.environment import KernelRecord
from jupyter_suspend.server.flush import checkpoint_dir_for
from jupyter_suspend.server.states import STEADY_STATES, TRANSITIONS, State
from jupyter_suspend.server.validation import BadRequest, parse_body


def test_every_state_has_transitions_and_targets_are_states() -> None:
    assert set(TRANSITIONS) == set(State)
    for targets in TRANSITIONS.values():
        assert targets <= set(State)


def test_suspend_only_starts_from_a_working_session() -> None:
    starts = {s for s, targets in TRANSITIONS.items() if State.FLUSHING in targets}
    assert starts == set(STEADY_STATES) | {State.FAILED}
    # Nothing jumps from running straight to suspended: the flush always comes first.
    assert State.SUSPENDED not in TRANSITIONS[State.RUNNING]
    assert State.SNAPSHOTTING not in TRANSITIONS[State.RUNNING]


def test_ready_is_reached_only_through_restoring() -> None:
    assert {s for s, t in TRANSITIONS.items() if State.READY in t} == {State.RESTORING}


@pytest.mark.parametrize(
    "path",
    ["../../etc/passwd", "/abs/path.ipynb", "a/../../b.ipynb", "weird name ✓.ipynb", "..", "", "x" * 500],
)
def test_checkpoint_folder_stays_inside_root(tmp_path: Path, path: str) -> None:
    record = KernelRecord(kernel_id="k1", kernel_name="python3", path=path or None)
    folder = checkpoint_dir_for(tmp_path, record)
    assert folder.parent == tmp_path
    assert folder.resolve().is_relative_to(tmp_path.resolve())
    assert "/" not in folder.name
    assert len(folder.name) < 100


def test_checkpoint_folders_differ_per_notebook(tmp_path: Path) -> None:
    a = checkpoint_dir_for(tmp_path, KernelRecord("k1", "python3", path="a/b.ipynb"))
    b = checkpoint_dir_for(tmp_path, KernelRecord("k2", "python3", path="a_b.ipynb"))
    same = checkpoint_dir_for(tmp_path, KernelRecord("k3", "python3", path="a/b.ipynb"))
    assert a != b
    assert a == same  # keyed by notebook, not by kernel: anyone can find the work again


def test_empty_body_means_defaults() -> None:
    assert parse_body(b"", "suspend", 1024) == {}
    assert parse_body(b"  \n", "resume", 1024) == {}


def test_valid_body_passes() -> None:
    assert parse_body(b'{"reason": "night", "dry_run": false, "force": true}', "suspend", 1024) == {
        "reason": "night",
        "dry_run": False,
        "force": True,
    }


@pytest.mark.parametrize(
    ("raw", "fragment"),
    [
        (b"\xff\xfe", "not valid JSON"),
        (b"null", "is not of type 'object'"),
        (b'{"force": 1}', "force: 1 is not of type 'boolean'"),
        (b'{"reason": null}', "reason: None is not of type 'string'"),
    ],
)
def test_bad_bodies_are_rejected_with_a_message(raw: bytes, fragment: str) -> None:
    with pytest.raises(BadRequest) as info:
        parse_body(raw, "suspend", 1024)
    assert fragment in str(info.value)


def test_size_limit_is_checked_before_parsing() -> None:
    with pytest.raises(BadRequest, match="the limit is 10"):
        parse_body(b'{"reason": "0123456789"}', "suspend", 10)
