"""The journal survives crashes: torn tails and corrupt lines are reported, never fatal."""

from __future__ import annotations

import json
import os
from pathlib import Path

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
    assert all(p.kind == "corrupt" for p in readout.problems)


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
