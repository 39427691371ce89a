"""Durable, append-only journal of the suspend lifecycle.

The journal lives on the persistent volume so that a server process that
starts cold (after a failed or absent snapshot restore, a pod replacement or a
plain restart) can read what the previous process was doing.

Format: JSON Lines, one entry per line. Every append is a single ``write`` on
an ``O_APPEND`` descriptor followed by ``fsync``; a crash can therefore only
leave a truncated *last* line, which the reader tolerates and reports. Lines
that do not parse anywhere else are reported as corrupt and skipped, never
fatal. Rotation rewrites the kept tail to a temporary file, fsyncs it, renames
it over the journal and fsyncs the directory.
"""

from __future__ import annotations

import json
import os
import threading
import time
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from ..common.durable import fsync_directory

JOURNAL_FILENAME = "journal.jsonl"
#: Identifies this server process: entries written by another boot id were
#: written by a previous process (possibly in another pod).
BOOT_ID = uuid.uuid4().hex


@dataclass(frozen=True)
class JournalProblem:
    """A line of the journal that could not be read."""

    line: int
    kind: str  # "truncated_tail" | "corrupt"
    excerpt: str

    def to_dict(self) -> dict[str, Any]:
        return {"line": self.line, "kind": self.kind, "excerpt": self.excerpt}


@dataclass
class JournalReadout:
    entries: list[dict[str, Any]] = field(default_factory=list)
    problems: list[JournalProblem] = field(default_factory=list)


def utc_iso(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, tz=timezone.utc).isoformat()


class Journal:
    """Append-only JSONL journal with fsync on every entry."""

    REQUIRED_KEYS = frozenset({"seq", "kind", "wall", "monotonic", "boot_id"})

    def __init__(self, directory: Path, *, max_bytes: int = 4 * 1024 * 1024, keep_entries: int = 2000):
        self.directory = Path(directory)
        self.path = self.directory / JOURNAL_FILENAME
        self.max_bytes = max_bytes
        self.keep_entries = keep_entries
        self._lock = threading.Lock()
        self.directory.mkdir(parents=True, exist_ok=True)
        readout = self.read()
        #: What was wrong with the journal when this process opened it (a torn
        #: tail is repaired on open, so later reads call it "corrupt").
        self.startup_problems = readout.problems
        self._next_seq = max((e["seq"] for e in readout.entries), default=0) + 1
        self._repair_unterminated_tail()

    def _repair_unterminated_tail(self) -> None:
        """Terminate a torn last line so the next entry starts on a line of its own."""
        if not self.path.exists() or self.path.stat().st_size == 0:
            return
        with open(self.path, "rb") as fh:
            fh.seek(-1, os.SEEK_END)
            last = fh.read(1)
        if last != b"\n":
            self._append_bytes(b"\n")

    def _append_bytes(self, data: bytes) -> None:
        created = not self.path.exists()
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            written = os.write(fd, data)
            if written != len(data):  # pragma: no cover - disk full or similar
                raise OSError(f"short write to journal: {written} of {len(data)} bytes")
            os.fsync(fd)
        finally:
            os.close(fd)
        if created:
            fsync_directory(self.directory)

    def append(self, kind: str, **data: Any) -> dict[str, Any]:
        """Append one entry durably and return it."""
        with self._lock:
            wall = time.time()
            entry: dict[str, Any] = {
                "seq": self._next_seq,
                "kind": kind,
                "time": utc_iso(wall),
                "wall": wall,
                "monotonic": time.monotonic(),
                "boot_id": BOOT_ID,
                "pid": os.getpid(),
                **data,
            }
            line = json.dumps(entry, separators=(",", ":"), default=str).encode() + b"\n"
            self._append_bytes(line)
            self._next_seq += 1
            if self.path.stat().st_size > self.max_bytes:
                self._rotate()
            return entry

    def read(self) -> JournalReadout:
        """Read every entry; report (never raise on) torn or corrupt lines."""
        readout = JournalReadout()
        try:
            raw = self.path.read_bytes()
        except FileNotFoundError:
            return readout
        lines = raw.split(b"\n")
        ends_with_newline = raw.endswith(b"\n")
        if ends_with_newline:
            lines = lines[:-1]
        for index, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            is_last = index == len(lines)
            entry = _parse_entry(line, self.REQUIRED_KEYS)
            if entry is None:
                kind = "truncated_tail" if is_last and not ends_with_newline else "corrupt"
                excerpt = line[:120].decode("utf-8", errors="replace")
                readout.problems.append(JournalProblem(index, kind, excerpt))
                continue
            readout.entries.append(entry)
        return readout

    def _rotate(self) -> None:
        """Keep the newest entries; atomic replace, durable rename."""
        entries = self.read().entries[-self.keep_entries :]
        tmp = self.path.with_suffix(".jsonl.tmp")
        with open(tmp, "wb") as fh:
            for entry in entries:
                fh.write(json.dumps(entry, separators=(",", ":"), default=str).encode() + b"\n")
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, self.path)
        fsync_directory(self.directory)


def _parse_entry(line: bytes, required: frozenset[str]) -> dict[str, Any] | None:
    try:
        entry = json.loads(line)
    except (ValueError, UnicodeDecodeError):
        return None
    if not isinstance(entry, dict) or not required.issubset(entry):
        return None
    if not isinstance(entry["seq"], int):
        return None
    return entry
