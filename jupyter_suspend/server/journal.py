"""Durable, append-only journal of the suspend lifecycle.

The journal lives on the persistent volume so that a server process that
starts cold (after a failed or absent snapshot restore, a pod replacement or a
plain restart) can read what the previous process was doing.

Format: JSON Lines, one entry per line, file mode 0600 (entries hold paths,
pids and canary hashes). Every append is one ``write`` on an ``O_APPEND``
descriptor followed by ``fsync``. The file stays *line-exact* whatever fails:

* an append that fails part-way (disk full, I/O error) is cut off again
  (``ftruncate`` to the size before it) and raises :class:`JournalWriteError`;
  if even that fails, the next append starts with a newline, so the torn line
  is reported as corrupt on its own and never swallows a good entry;
* a sequence number is used once: a failed append burns its number, since the
  entry may have reached the disk anyway;
* a crash can only leave a torn *last* line, which the reader reports.

Every entry is validated on read (:data:`FIELD_CHECKS`: ``kind`` a string,
``seq`` an integer, ``wall`` epoch seconds...); a line that does not parse or
has a field of the wrong type is reported in :attr:`JournalReadout.problems`
and skipped, never fatal. A journal that cannot be written at all (its path is
a directory, the state directory is read-only) does not stop the server:
:attr:`Journal.usable` is False and :attr:`Journal.problem` says why, until
:meth:`Journal.check` (or an append) finds it writable again.

Rotation starts when the file exceeds ``max_bytes`` and rewrites it down to
half of that (the *low-water mark*), always keeping the newest entry of each
kind the reader needs (``pinned_kinds``, given by the server from
:data:`jupyter_suspend.server.replay.PINNED_KINDS` and the backend's own
``Backend.pinned_kinds``); the new file is written with mode
0600, fsynced, renamed over the journal and the directory fsynced. Appends
therefore cost O(1) amortised.
"""

from __future__ import annotations

import contextlib
import errno
import json
import math
import os
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from ..common.durable import fsync_directory

JOURNAL_FILENAME = "journal.jsonl"
#: Identifies this server process: entries written by another boot id were
#: written by a previous process (possibly in another pod).
BOOT_ID = uuid.uuid4().hex
_EXCERPT = 120


class JournalWriteError(OSError):
    """An entry could not be written durably (the file is left line-exact).

    Raised by :meth:`Journal.append`; :attr:`Journal.problem` says the same.
    """


@dataclass(frozen=True)
class JournalProblem:
    """A line of the journal that could not be read (or the journal itself)."""

    line: int  # 1-based; 0 for the journal as a whole
    kind: str  # "truncated_tail" | "corrupt" | "invalid" | "unusable"
    excerpt: str
    message: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"line": self.line, "kind": self.kind, "excerpt": self.excerpt, "message": self.message}


@dataclass
class JournalReadout:
    entries: list[dict[str, Any]] = field(default_factory=list)
    problems: list[JournalProblem] = field(default_factory=list)


def utc_iso(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, tz=timezone.utc).isoformat()


# -- validation ------------------------------------------------------------------

Check = tuple[Callable[[Any], bool], str]


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def is_epoch(value: Any) -> bool:
    """Epoch seconds :func:`utc_iso` can format (year 1970 to about 5000)."""
    return _is_number(value) and 0 <= value < 1e11


def _optional(check: Check) -> Check:
    test, what = check
    return (lambda value: value is None or test(value)), f"{what} or null"


def _list_of_objects(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(item, dict) for item in value)


STR: Check = (lambda v: isinstance(v, str), "a string")
INT: Check = (_is_int, "an integer")
NUMBER: Check = (_is_number, "a finite number")
EPOCH: Check = (is_epoch, "epoch seconds")
BOOL: Check = (lambda v: isinstance(v, bool), "true or false")
OBJECT: Check = (lambda v: isinstance(v, dict), "an object")
LIST: Check = (lambda v: isinstance(v, list), "a list")
OBJECTS: Check = (_list_of_objects, "a list of objects")

#: Every known field, whatever the entry kind (unknown fields are not checked).
FIELD_CHECKS: dict[str, Check] = {
    "seq": INT,
    "kind": STR,
    "time": STR,
    "wall": EPOCH,
    "monotonic": NUMBER,
    "boot_id": STR,
    "pid": _optional(INT),
    "to": STR,
    "from": STR,
    "state": STR,
    "previous_state": _optional(STR),
    "previous_boot_id": _optional(STR),
    "operation_id": _optional(STR),
    "operation_kind": _optional(STR),
    "cycle_id": _optional(STR),
    "kernel_id": _optional(STR),
    "message": _optional(STR),
    "reason": _optional(STR),
    "restore": _optional(STR),
    "outcome": _optional(STR),
    "verdict": _optional(STR),
    "error": _optional(STR),
    "snapshot": _optional(STR),
    "failure": _optional(OBJECT),
    "options": _optional(OBJECT),
    "released": _optional(OBJECT),
    "restore_record": _optional(OBJECT),
    "checkpoints_restored": _optional(OBJECT),
    "kernels": OBJECTS,
    "steps": _optional(LIST),
    "names": _optional(LIST),
    "verification": _optional(OBJECTS),
    "partial": _optional(BOOL),
    "active_work_ended": _optional(EPOCH),
    "environment_stopped_at": _optional(EPOCH),
    "node_released_at": _optional(EPOCH),
    "resume_requested_at": _optional(EPOCH),
    "capacity_available_at": _optional(EPOCH),
    "restored_at": _optional(EPOCH),
    "first_cell_runnable_at": _optional(EPOCH),
}
#: Fields whose type depends on the entry kind.
KIND_FIELD_CHECKS: dict[str, dict[str, Check]] = {
    "server_started": {"backend": STR},
    "suspend_requested": {"backend": _optional(OBJECT)},
}
#: The fields of each object in ``kernels`` (flushed, checkpointed, restored...).
KERNEL_FIELD_CHECKS: dict[str, Check] = {
    "kernel_id": _optional(STR),
    "path": _optional(STR),
    "status": _optional(STR),
    "message": _optional(STR),
    "checkpoints": _optional(OBJECTS),
    "canary": _optional(OBJECT),
    "checkpoint_dir": _optional(STR),
    "pid": _optional(INT),
    "process_start": _optional(NUMBER),
    "error": _optional(STR),
    "runnable_at": _optional(EPOCH),
}
REQUIRED_KEYS = frozenset({"seq", "kind", "wall", "monotonic", "boot_id"})


def validate_entry(entry: Any) -> str | None:
    """Why a parsed line is not a journal entry of the right shape (None when it is)."""
    if not isinstance(entry, dict):
        return f"not an object but {type(entry).__name__}"
    missing = sorted(REQUIRED_KEYS - entry.keys())
    if missing:
        return f"missing {', '.join(missing)}"
    checks = FIELD_CHECKS
    kind = entry["kind"]
    if isinstance(kind, str) and kind in KIND_FIELD_CHECKS:
        checks = {**FIELD_CHECKS, **KIND_FIELD_CHECKS[kind]}
    for name, (test, what) in checks.items():
        if name in entry and not test(entry[name]):
            return f"field {name!r} is {_shown(entry[name])}, expected {what}"
    for index, kernel in enumerate(entry.get("kernels") or []):
        for name, (test, what) in KERNEL_FIELD_CHECKS.items():
            if name in kernel and not test(kernel[name]):
                return f"field 'kernels[{index}].{name}' is {_shown(kernel[name])}, expected {what}"
    checkpoints_restored = entry.get("checkpoints_restored") or {}
    for kernel_id, report in checkpoints_restored.items():
        if not isinstance(report, dict):
            return f"field 'checkpoints_restored.{kernel_id}' is {_shown(report)}, expected an object"
    return None


def _shown(value: Any) -> str:
    if isinstance(value, float) and not math.isfinite(value):
        return repr(value)
    return f"{type(value).__name__} {json.dumps(value, default=str)[:40]}"


def _parse_line(line: bytes) -> tuple[dict[str, Any] | None, str]:
    try:
        entry = json.loads(line)
    except RecursionError:
        return None, "nested too deeply to read"
    except (ValueError, UnicodeDecodeError) as exc:
        return None, f"not JSON: {exc}"
    problem = validate_entry(entry)
    if problem is not None:
        return None, problem
    assert isinstance(entry, dict)
    return entry, ""


def _encode(entry: dict[str, Any]) -> bytes:
    return json.dumps(entry, separators=(",", ":"), default=str).encode() + b"\n"


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view.nbytes:
        written = os.write(fd, view)
        if written <= 0:  # pragma: no cover - POSIX raises instead
            raise OSError(errno.EIO, "write returned 0")
        view = view[written:]


def _describe(path: Path, exc: OSError) -> str:
    if exc.errno == errno.EISDIR or path.is_dir():
        return f"the journal path {path} is a directory, not a file: move it away"
    return f"the journal {path} cannot be written ({exc.strerror or exc})"


def read_journal_file(path: Path) -> JournalReadout:
    """Read every valid entry of a journal file (no side effects: the command line's reports use it too);
    report (never raise on) unreadable, torn, corrupt or invalid lines."""
    readout = JournalReadout()
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return readout
    except OSError as exc:
        readout.problems.append(JournalProblem(0, "unusable", str(path), _describe(path, exc)))
        return readout
    lines = raw.split(b"\n")
    ends_with_newline = raw.endswith(b"\n")
    if ends_with_newline:
        lines = lines[:-1]
    for index, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        entry, why = _parse_line(line)
        if entry is None:
            is_last = index == len(lines)
            if is_last and not ends_with_newline:
                kind = "truncated_tail"
            elif why.startswith("not JSON") or why.startswith("nested"):
                kind = "corrupt"
            else:
                kind = "invalid"
            excerpt = line[:_EXCERPT].decode("utf-8", errors="replace")
            readout.problems.append(JournalProblem(index, kind, excerpt, why))
            continue
        readout.entries.append(entry)
    return readout


# -- the journal -----------------------------------------------------------------


class Journal:
    """Append-only JSONL journal with fsync on every entry.

    Never raises on open or read; :meth:`append` raises :class:`JournalWriteError`.
    """

    REQUIRED_KEYS = REQUIRED_KEYS

    def __init__(
        self,
        directory: Path,
        *,
        max_bytes: int = 4 * 1024 * 1024,
        keep_entries: int = 2000,
        pinned_kinds: frozenset[str] = frozenset(),
    ):
        self.directory = Path(directory)
        #: Rotation always keeps the newest entry of each of these kinds (what a cold start replays).
        self.pinned_kinds = pinned_kinds
        self.path = self.directory / JOURNAL_FILENAME
        self.max_bytes = max_bytes
        self.keep_entries = keep_entries
        self._lock = threading.Lock()
        #: Why the journal cannot be written now (None while it can).
        self.problem: str | None = None
        self._rotate_at = max_bytes
        #: How often the file was rewritten by rotation (for tests and the log).
        self.rotations = 0
        #: Called with each entry once it is durable (the metrics follow the journal this way); never
        #: with an entry that failed to write. A listener that raises is dropped from this append only.
        self.listeners: list[Callable[[dict[str, Any]], None]] = []
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            self.problem = f"the state directory {self.directory} cannot be created ({exc.strerror or exc})"
        readout = self.read()
        #: What was wrong with the journal when this process opened it (a torn
        #: tail is repaired on open, so later reads call it "corrupt").
        self.startup_problems = list(readout.problems)
        self._next_seq = max((e["seq"] for e in readout.entries), default=0) + 1
        if self.problem is None:
            self._probe()
        if self.problem is not None and not any(p.kind == "unusable" for p in self.startup_problems):
            self.startup_problems.insert(0, JournalProblem(0, "unusable", str(self.path), self.problem))
        if self.problem is None:
            with contextlib.suppress(JournalWriteError):
                self._repair_unterminated_tail()

    # -- can it be written? ---------------------------------------------------
    @property
    def usable(self) -> bool:
        """False while the journal cannot be written (see :attr:`problem`)."""
        return self.problem is None

    def check(self) -> bool:
        """Look again whether the journal can be written; True when it can."""
        with self._lock:
            return self._probe()

    def _probe(self) -> bool:
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o600)
            os.close(fd)
        except OSError as exc:
            self.problem = _describe(self.path, exc)
            return False
        self.problem = None
        return True

    def _repair_unterminated_tail(self) -> None:
        """Terminate a torn last line so the next entry starts on a line of its own."""
        if self.path.is_file() and self.path.stat().st_size > 0:
            self._append_bytes(b"", "repair")

    # -- writing --------------------------------------------------------------
    def _append_bytes(self, data: bytes, what: str) -> None:
        """Append ``data`` durably on a line of its own, or leave the file as it was."""
        try:
            created = not self.path.exists()
            fd = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o600)
        except OSError as exc:
            self.problem = _describe(self.path, exc)
            raise JournalWriteError(exc.errno or errno.EIO, f"{what}: {self.problem}") from exc
        try:
            size = os.fstat(fd).st_size
            if size and os.pread(fd, 1, size - 1) != b"\n":
                data = b"\n" + data  # a torn line that could not be cut off stays on its own
            try:
                if data:
                    _write_all(fd, data)
                os.fsync(fd)
            except OSError as exc:
                with contextlib.suppress(OSError):
                    os.ftruncate(fd, size)
                    os.fsync(fd)
                self.problem = f"the journal {self.path} could not be written ({exc.strerror or exc})"
                raise JournalWriteError(exc.errno or errno.EIO, f"{what} not written: {self.problem}") from exc
        finally:
            os.close(fd)
        if created:
            with contextlib.suppress(OSError):
                fsync_directory(self.directory)
        self.problem = None

    def append(self, kind: str, **data: Any) -> dict[str, Any]:
        """Append one entry durably and return it; :class:`JournalWriteError` if it could not be."""
        with self._lock:
            seq = self._next_seq
            # Burned even if the write fails: part of the entry may be on disk.
            self._next_seq += 1
            wall = time.time()
            entry: dict[str, Any] = {
                "seq": seq,
                "kind": kind,
                "time": utc_iso(wall),
                "wall": wall,
                "monotonic": time.monotonic(),
                "boot_id": BOOT_ID,
                "pid": os.getpid(),
                **data,
            }
            self._append_bytes(_encode(entry), f"journal entry {kind!r} (seq {seq})")
            try:
                size = self.path.stat().st_size
            except OSError:
                size = 0
            if size > self._rotate_at:
                self._rotate(size)
        for listener in list(self.listeners):
            with contextlib.suppress(Exception):  # an observer never fails the lifecycle's append
                listener(entry)
        return entry

    # -- reading --------------------------------------------------------------
    def read(self) -> JournalReadout:
        """Read every valid entry; report (never raise on) unreadable, torn, corrupt or invalid lines."""
        return read_journal_file(self.path)

    # -- rotation -------------------------------------------------------------
    def _keep(self, entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """What a rotation keeps: the newest entry of each replayed kind, then
        the newest entries up to half of ``max_bytes`` (and ``keep_entries``)."""
        pinned: dict[str, int] = {}
        for index, entry in enumerate(entries):
            if entry["kind"] in self.pinned_kinds:
                pinned[entry["kind"]] = index
        keep = set(pinned.values())
        budget = self.max_bytes // 2 - sum(len(_encode(entries[i])) for i in keep)
        count = 0
        for index in range(len(entries) - 1, -1, -1):
            if index in keep:
                continue
            size = len(_encode(entries[index]))
            if size > budget or count >= self.keep_entries:
                break
            keep.add(index)
            budget -= size
            count += 1
        return [entries[i] for i in sorted(keep)]

    def _rotate(self, size: int) -> None:
        """Rewrite the journal down to its low-water mark: atomic replace, durable rename."""
        data = b"".join(_encode(e) for e in self._keep(self.read().entries))
        tmp = self.path.with_name(self.path.name + ".tmp")
        try:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            try:
                os.fchmod(fd, 0o600)  # whatever the umask
                _write_all(fd, data)
                os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(tmp, self.path)
            fsync_directory(self.directory)
        except OSError:
            # The entry itself is durable; rotation is retried after more appends.
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            self._rotate_at = size + max(self.max_bytes // 2, 1)
            return
        self.rotations += 1
        # What replay needs may alone exceed the low-water mark: never rewrite
        # more often than once per as many bytes appended as were kept.
        self._rotate_at = max(self.max_bytes, 2 * len(data))
