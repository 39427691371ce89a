"""The journal survives crashes: torn tails and corrupt lines are reported, never fatal."""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path
from typing import Any

import pytest

from jupyter_suspend.server.journal import BOOT_ID, Journal


def test_append_is_durable_and_ordered(tmp_path: Path) -> None:
    journal = Journal(tmp_path)
    first = journal.append("transition", to="flushing")
    second = journal.append("transition", to="snapshotting")
    assert (first["seq"], second["seq"]) == (1, 2)
    assert first["boot_id"] == BOOT_ID
    assert first["pid"] == os.getpid()
    assert second["monotonic"] >= first["monotonic"]
    lines = (tmp_path / "journal.jsonl").read_text().splitlines()
    assert [json.loads(line)["to"] for line in lines] == ["flushing", "snapshotting"]
    assert oct((tmp_path / "journal.jsonl").stat().st_mode & 0o777) == "0o600"


def test_reopen_continues_sequence(tmp_path: Path) -> None:
    Journal(tmp_path).append("a")
    Journal(tmp_path).append("b")
    entries = Journal(tmp_path).read().entries
    assert [e["seq"] for e in entries] == [1, 2]


def test_truncated_tail_is_reported_and_repaired(tmp_path: Path) -> None:
    journal = Journal(tmp_path)
    journal.append("transition", to="flushing")
    with open(journal.path, "ab") as fh:
        fh.write(b'{"seq": 2, "kind": "transition", "to": "snap')  # a crash mid-write
    reopened = Journal(tmp_path)
    assert [p.kind for p in reopened.startup_problems] == ["truncated_tail"]
    assert reopened.startup_problems[0].line == 2
    assert [e["seq"] for e in reopened.read().entries] == [1]

    # Reopening terminated the torn line so new entries stay readable.
    reopened.append("transition", to="running")
    readout = reopened.read()
    assert [e.get("to") for e in readout.entries] == ["flushing", "running"]
    assert [p.kind for p in readout.problems] == ["corrupt"]
    assert readout.problems[0].line == 2


def test_corrupt_lines_in_the_middle_are_skipped(tmp_path: Path) -> None:
    journal = Journal(tmp_path)
    journal.append("one")
    with open(journal.path, "ab") as fh:
        fh.write(b"\x00\xff garbage\n")
        fh.write(b'{"not": "an entry"}\n')
        fh.write(b"[1, 2, 3]\n")
    journal = Journal(tmp_path)
    journal.append("two")
    readout = journal.read()
    assert [e["kind"] for e in readout.entries] == ["one", "two"]
    assert [p.line for p in readout.problems] == [2, 3, 4]
    # Not JSON is corrupt; JSON that is not an entry is invalid (and says why).
    assert [p.kind for p in readout.problems] == ["corrupt", "invalid", "invalid"]
    assert readout.problems[1].message == "missing boot_id, kind, monotonic, seq, wall"


def test_missing_journal_reads_empty(tmp_path: Path) -> None:
    readout = Journal(tmp_path / "new").read()
    assert readout.entries == []
    assert readout.problems == []


def test_rotation_keeps_newest_entries_atomically(tmp_path: Path) -> None:
    journal = Journal(tmp_path, max_bytes=4096, keep_entries=10)
    for index in range(100):
        journal.append("tick", index=index, padding="x" * 50)
    entries = journal.read().entries
    assert len(entries) <= 40
    assert entries[-1]["index"] == 99
    assert [e["index"] for e in entries] == sorted(e["index"] for e in entries)
    assert journal.path.stat().st_size <= 4096 + 200
    assert not list(tmp_path.glob("*.tmp"))


# -- faults at the OS-call seam (issue 8, item 2) ------------------------------------


def _is_journal_fd(fd: int, journal_path: Path) -> bool:
    try:
        return os.readlink(f"/proc/self/fd/{fd}") == str(journal_path)
    except OSError:
        return False


def _disk_full_after_half(monkeypatch: pytest.MonkeyPatch, journal_path: Path) -> list[int]:
    """``os.write`` on the journal writes half of the next entry, then the disk is full."""
    real_write = os.write
    calls: list[int] = []

    def write(fd: int, data: Any) -> int:
        if not _is_journal_fd(fd, journal_path):
            return real_write(fd, data)
        calls.append(len(data))
        if len(calls) == 1:
            return real_write(fd, bytes(data)[: len(data) // 2])
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "write", write)
    return calls


def test_short_write_leaves_the_journal_line_exact(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    journal = Journal(tmp_path)
    journal.append("transition", to="flushing")
    size_before = journal.path.stat().st_size
    with monkeypatch.context() as patch:
        calls = _disk_full_after_half(patch, journal.path)
        with pytest.raises(OSError) as failure:
            journal.append("released", restore_record={"kernels": []})
        assert calls, "the fault was not injected"
    from jupyter_suspend.server.journal import JournalWriteError

    assert isinstance(failure.value, JournalWriteError)
    assert "journal" in str(failure.value)
    assert "No space left" in str(failure.value)
    # The half-written entry is gone: the file is as it was, line for line.
    assert journal.path.stat().st_size == size_before
    after = journal.append("released", restore_record={"kernels": []})
    readout = journal.read()
    assert readout.problems == []
    assert [e["kind"] for e in readout.entries] == ["transition", "released"]
    # The sequence number of the failed append is never reused (it may have reached the disk).
    assert after["seq"] == 3
    assert journal.read().entries[-1]["seq"] == 3


def test_torn_line_that_cannot_be_cut_off_does_not_swallow_the_next_entry(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    journal = Journal(tmp_path)
    journal.append("transition", to="flushing")
    with monkeypatch.context() as patch:
        _disk_full_after_half(patch, journal.path)
        patch.setattr(os, "ftruncate", lambda fd, size: (_ for _ in ()).throw(OSError(errno.EIO, "I/O error")))
        with pytest.raises(OSError):
            journal.append("flushed", kernels=[])
    journal.append("released", restore_record={"kernels": []})
    readout = journal.read()
    assert [e["kind"] for e in readout.entries] == ["transition", "released"]
    assert [(p.line, p.kind) for p in readout.problems] == [(2, "corrupt")]
    assert len({e["seq"] for e in readout.entries}) == 2


# -- damage is validated on read (issue 8, item 5) ---------------------------------------

GOOD = {"seq": 5, "kind": "transition", "to": "running", "time": "t", "wall": 1.0, "monotonic": 1.0, "boot_id": "b"}

DAMAGED: dict[str, bytes] = {
    "deeply nested": b"[" * 200_000 + b"]" * 200_000,
    "nested object": b'{"a":' * 100_000 + b"1" + b"}" * 100_000,
    "kind a list": json.dumps({**GOOD, "kind": ["transition"]}).encode(),
    "kind a number": json.dumps({**GOOD, "kind": 7}).encode(),
    "seq a string": json.dumps({**GOOD, "seq": "5"}).encode(),
    "seq a bool": json.dumps({**GOOD, "seq": True}).encode(),
    "wall a string": json.dumps({**GOOD, "wall": "yesterday"}).encode(),
    "wall not finite": json.dumps({**GOOD, "wall": float("nan")}).encode(),
    "wall out of range": json.dumps({**GOOD, "wall": 1e300}).encode(),
    "monotonic a string": json.dumps({**GOOD, "monotonic": "x"}).encode(),
    "time a number": json.dumps({**GOOD, "time": 5}).encode(),
    "boot_id a dict": json.dumps({**GOOD, "boot_id": {}}).encode(),
    "to a list": json.dumps({**GOOD, "to": ["running"]}).encode(),
    "kernels a string": json.dumps({**GOOD, "kind": "flushed", "kernels": "k1"}).encode(),
    "kernel not an object": json.dumps({**GOOD, "kind": "flushed", "kernels": ["k1"]}).encode(),
    "checkpoints a dict": json.dumps(
        {**GOOD, "kind": "checkpointed", "kernels": [{"kernel_id": "k", "checkpoints": {"x": 1}}]}
    ).encode(),
    "restore_record a list": json.dumps({**GOOD, "kind": "released", "restore_record": []}).encode(),
    "active_work_ended a string": json.dumps(
        {**GOOD, "kind": "suspend_requested", "active_work_ended": "noon"}
    ).encode(),
    "checkpoints_restored a list": json.dumps({**GOOD, "kind": "restored", "checkpoints_restored": []}).encode(),
}


@pytest.mark.parametrize("damage", sorted(DAMAGED))
def test_damaged_entries_are_reported_and_skipped(tmp_path: Path, damage: str) -> None:
    journal = Journal(tmp_path)
    journal.append("transition", to="flushing")
    with open(journal.path, "ab") as fh:
        fh.write(DAMAGED[damage] + b"\n")
    reopened = Journal(tmp_path)  # never raises
    reopened.append("transition", to="running")
    readout = reopened.read()
    assert [e.get("to") for e in readout.entries] == ["flushing", "running"]
    assert [p.line for p in readout.problems] == [2]
    problem = readout.problems[0]
    assert problem.kind in {"corrupt", "invalid"}
    assert problem.to_dict()["line"] == 2
    assert len(problem.excerpt) <= 120
    # Whatever reads entries (replay, timeline) only sees entries of the right shape.
    from jupyter_suspend.server import timeline

    timeline.build(readout.entries)


def test_invalid_entry_problem_names_the_field(tmp_path: Path) -> None:
    journal = Journal(tmp_path)
    with open(journal.path, "ab") as fh:
        fh.write(json.dumps({**GOOD, "wall": "yesterday"}).encode() + b"\n")
    problem = Journal(tmp_path).read().problems[0]
    assert problem.kind == "invalid"
    assert "wall" in problem.to_dict()["message"]


def test_journal_path_that_is_a_directory_leaves_the_journal_unusable_not_fatal(tmp_path: Path) -> None:
    (tmp_path / "journal.jsonl").mkdir()
    journal = Journal(tmp_path)  # never raises
    assert journal.usable is False
    assert "is a directory" in (journal.problem or "")
    assert journal.read().entries == []
    assert [p.kind for p in journal.startup_problems] == ["unusable"]
    from jupyter_suspend.server.journal import JournalWriteError

    with pytest.raises(JournalWriteError, match="is a directory"):
        journal.append("server_started")
    # Once the fault is gone, the journal works again.
    (tmp_path / "journal.jsonl").rmdir()
    assert journal.check() is True
    assert journal.append("server_started")["seq"] >= 1
    assert journal.usable is True
    assert journal.problem is None


def test_state_directory_that_cannot_be_created_leaves_the_journal_unusable(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("not a directory")
    journal = Journal(tmp_path / "file" / "state")  # never raises
    assert journal.usable is False
    assert journal.problem
    assert "state" in journal.problem


def test_read_only_state_directory_leaves_the_journal_unusable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real_open = os.open
    journal_path = str(tmp_path / "journal.jsonl")

    def read_only_open(path: Any, flags: int, *args: Any, **kwargs: Any) -> int:
        if str(path) == journal_path and flags & (os.O_WRONLY | os.O_RDWR):
            raise OSError(errno.EROFS, "Read-only file system", journal_path)
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", read_only_open)
    journal = Journal(tmp_path)
    assert journal.usable is False
    assert "Read-only file system" in (journal.problem or "")
    monkeypatch.setattr(os, "open", real_open)
    assert journal.check() is True


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only directories")
def test_read_only_state_directory_for_real(tmp_path: Path) -> None:
    tmp_path.chmod(0o500)
    try:
        journal = Journal(tmp_path)
        assert journal.usable is False
    finally:
        tmp_path.chmod(0o700)


# -- rotation (issue 8, item 6) -------------------------------------------------------


def test_rotation_keeps_the_file_private(tmp_path: Path) -> None:
    old_umask = os.umask(0o022)
    try:
        journal = Journal(tmp_path, max_bytes=2048)
        inode = journal.path.stat().st_ino if journal.path.exists() else None
        for index in range(60):
            journal.append("tick", index=index, padding="x" * 50)
        assert journal.path.stat().st_ino != inode  # it did rotate
        assert oct(journal.path.stat().st_mode & 0o777) == "0o600"
    finally:
        os.umask(old_umask)


@pytest.mark.slow
def test_rotation_gets_back_under_the_limit_so_appends_stay_cheap(tmp_path: Path) -> None:
    journal = Journal(tmp_path, max_bytes=8192)
    rewrites = 0
    written = 0
    inode = None
    for index in range(1000):
        entry = journal.append("tick", index=index, padding="x" * 60)
        written += len(json.dumps(entry, separators=(",", ":"))) + 1
        now = journal.path.stat().st_ino
        if inode is not None and now != inode:
            rewrites += 1
        inode = now
        assert journal.path.stat().st_size <= 8192 + 200
    # Every rotation frees at least half the limit (before: one rewrite per append once over it).
    assert 0 < rewrites <= written // (8192 // 2) + 1, (rewrites, written)
    assert journal.read().entries[-1]["index"] == 999


@pytest.mark.slow
def test_rotation_keeps_the_backend_s_pinned_kinds(tmp_path: Path) -> None:
    """What the gke backend's cold-start reading and the last cycle's timeline need survives rotation."""
    from jupyter_suspend.server.app import pinned_kinds
    from jupyter_suspend.server.backends.gke import GKEBackend
    from jupyter_suspend.server.backends.local import LocalBackend
    from jupyter_suspend.server.replay import PINNED_KINDS

    assert pinned_kinds(LocalBackend()) == PINNED_KINDS
    kinds = pinned_kinds(GKEBackend())
    assert kinds > PINNED_KINDS
    assert {"gke_snapshot_requested", "gke_snapshot_ready", "gke_snapshot_aborted", "gke_cold_start"} <= kinds
    journal = Journal(tmp_path, max_bytes=8192, pinned_kinds=kinds)
    journal.append("suspend_requested", operation_id="op1", kernels=[])
    journal.append("gke_snapshot_requested", operation_id="op1", trigger="t-1", mark="snapshot_requested")
    journal.append("gke_snapshot_ready", operation_id="op1", snapshot="s-1", mark="snapshot_ready")
    journal.append("gke_identity", operation_id="op1")
    for index in range(500):
        journal.append("verified", kernel_id="k1", verdict="COLD", index=index, padding="y" * 40)
    kept = [e["kind"] for e in journal.read().entries]
    assert journal.rotations > 0
    assert {"suspend_requested", "gke_snapshot_requested", "gke_snapshot_ready"} <= set(kept)
    assert "gke_identity" not in kept


@pytest.mark.slow
def test_rotation_keeps_what_replay_needs(tmp_path: Path) -> None:
    from jupyter_suspend.server.replay import PINNED_KINDS

    journal = Journal(tmp_path, max_bytes=8192, pinned_kinds=PINNED_KINDS)
    journal.append("suspend_requested", operation_id="op1", kernels=[])
    journal.append("flushed", operation_id="op1", kernels=[{"kernel_id": "k1", "status": "checkpointed"}])
    journal.append("release_started", operation_id="op1", resume_plan={"kernels": [{"kernel_id": "k1"}]})
    journal.append("released", operation_id="op1", resume_plan={"kernels": [{"kernel_id": "k1"}]})
    journal.append("transition", to="suspended", operation_id="op1")
    for index in range(500):
        journal.append("verified", kernel_id="k1", verdict="COLD", index=index, padding="y" * 40)
    kinds = [e["kind"] for e in journal.read().entries]
    for needed in ("suspend_requested", "flushed", "release_started", "released", "transition"):
        assert needed in kinds, needed
    assert journal.path.stat().st_size <= 8192 + 200
