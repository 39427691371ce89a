"""A damaged or unusable journal never stops the extension from loading (issue 8, item 5):
a real server process starts, answers, and says what it could not read."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from .servers import ServerProcess

pytestmark = pytest.mark.slow

GOOD = {"seq": 1, "kind": "transition", "to": "running", "time": "t", "wall": 1.0, "monotonic": 1.0, "boot_id": "b"}


def test_damaged_journal_lines_are_reported_and_the_extension_loads(tmp_path: Path) -> None:
    state_dir = tmp_path / "state"
    state_dir.mkdir()
    lines = [
        json.dumps({**GOOD, "seq": 1}).encode(),
        b"[" * 100_000 + b"]" * 100_000,  # nested too deeply for json
        json.dumps({**GOOD, "seq": 2, "kind": ["transition"]}).encode(),  # kind of the wrong type
        json.dumps({**GOOD, "seq": 3, "kind": "flushed", "kernels": "k1"}).encode(),  # wrong-typed field
        json.dumps({**GOOD, "seq": 4, "kind": "suspend_requested", "operation_id": "op", "wall": "noon"}).encode(),
    ]
    (state_dir / "journal.jsonl").write_bytes(b"\n".join(lines) + b"\n")
    server = ServerProcess(tmp_path, state_dir).start()
    try:
        status = server.api("GET", "status")
        assert status["state"] == "running"
        problems = status["journal"]["problems"]
        assert [(p["line"], p["kind"]) for p in problems] == [
            (2, "corrupt"),
            (3, "invalid"),
            (4, "invalid"),
            (5, "invalid"),
        ]
        assert "kind" in problems[1]["message"]
        assert "wall" in problems[3]["message"]
        assert server.api("GET", "timeline")["cycles"] == []
        server.api("POST", "checkpoint", {}, expect=202)
        server.wait(lambda s: s["operation"] and not s["operation"]["in_progress"])
    finally:
        server.stop()


def test_journal_path_that_is_a_directory_is_reported_and_the_extension_loads(tmp_path: Path) -> None:
    state_dir = tmp_path / "state"
    (state_dir / "journal.jsonl").mkdir(parents=True)
    server = ServerProcess(tmp_path, state_dir).start()
    try:
        status = server.api("GET", "status")
        assert status["state"] == "running"
        problem = status["journal"]["problems"][0]
        assert problem["kind"] == "unusable"
        assert "is a directory" in problem["message"]
        assert server.api("GET", "timeline")["cycles"] == []
    finally:
        server.stop()
