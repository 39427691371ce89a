"""Flush everything durable before anything is released.

Notebooks: the frontend saves dirty documents before it calls suspend; here
each notebook open in a session is checked on disk (present, a regular file,
valid notebook JSON) and fsynced together with its directory, so that what the
user sees as saved really is on the persistent volume before the pod or the
kernels go away.

Kernels: each kernel is asked to run its application-checkpoint hooks (see
:mod:`jupyter_suspend.kernel.protocol`). Kernels without the helper keep
files only; a busy kernel that does not answer in time is reported as
"kernel busy: checkpoint skipped". After a cold resume,
:func:`reload_application_checkpoints` puts them back into the restarted kernels.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..common.checkpoints import folder_name
from ..common.durable import fsync_directory
from . import wording
from .environment import Environment, KernelRecord, KernelReply
from .states import FlushFailed, Operation

if TYPE_CHECKING:
    from .backends.base import RestoredKernel


@dataclass
class NotebookFlush:
    path: str
    status: str  # fsynced | checked (not a local file system) | failed
    bytes: int = 0
    message: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class KernelFlush:
    kernel_id: str
    path: str | None
    status: str  # checkpointed | no_helper | busy_skipped | failed | not_running
    message: str = ""
    checkpoints: list[dict[str, Any]] = field(default_factory=list)
    canary: dict[str, Any] | None = None
    checkpoint_dir: str | None = None
    #: The process as the server saw it: identifies it even without a canary.
    pid: int | None = None
    process_start: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


#: How long the flush waits for a kernel the server reports busy running a cell: a
#: busy kernel answers only once its cell ends, and a suspend must not sit in
#: "flushing" for the whole ``flush_kernel_timeout`` to learn that (issue 17 item 4).
#: Not less: the kernel that ran ``%suspend`` is reported busy until its cell ends.
FLUSH_BUSY_GRACE_SECONDS = 5.0


def checkpoint_dir_for(root: Path, record: KernelRecord) -> Path:
    """Where a kernel's application checkpoints go: one folder per notebook
    (so that anyone can recover the work from the notebook's name), flat and
    free of path tricks whatever the session path contains. The kernel side
    derives the same name (:func:`~jupyter_suspend.common.checkpoints.folder_name`)."""
    return root / folder_name(record.path or f"kernel-{record.kernel_id}")


def _fsync_notebook(os_path: str) -> int:
    path = Path(os_path)
    if not path.is_file():
        raise FileNotFoundError(f"{os_path} is not a regular file")
    with open(path, "rb") as fh:
        data = fh.read()
        json.loads(data)  # a torn or corrupt notebook must not be trusted
        os.fsync(fh.fileno())
    fsync_directory(path.parent)
    return len(data)


async def flush_notebooks(environment: Environment, kernels: list[KernelRecord]) -> list[NotebookFlush]:
    """Check and fsync every notebook open in a session; raise on the first failure."""
    results = []
    paths = sorted({k.path for k in kernels if k.path and k.type == "notebook"})
    for api_path in paths:
        if not await environment.file_exists(api_path):
            raise FlushFailed("flush.notebooks", f"notebook {api_path} is not on disk; save it first")
        os_path = environment.os_path(api_path)
        if os_path is None:
            results.append(NotebookFlush(api_path, "checked", message="contents are not on a local file system"))
            continue
        try:
            size = await asyncio.to_thread(_fsync_notebook, os_path)
        except ValueError as exc:
            raise FlushFailed("flush.notebooks", f"notebook {api_path} on disk is not valid JSON: {exc}") from exc
        except OSError as exc:
            raise FlushFailed("flush.notebooks", f"notebook {api_path} could not be synced: {exc}") from exc
        results.append(NotebookFlush(api_path, "fsynced", bytes=size))
    return results


def classify_kernel_reply(record: KernelRecord, reply: KernelReply, checkpoint_dir: Path) -> KernelFlush:
    result = KernelFlush(
        kernel_id=record.kernel_id,
        path=record.path,
        status="failed",
        checkpoint_dir=str(checkpoint_dir),
        pid=record.pid,
        process_start=record.process_start,
    )
    if reply.ok:
        result.status = "checkpointed"
        result.message = reply.message
        result.checkpoints = list(reply.content.get("checkpoints", []))
        result.canary = reply.content.get("canary")
    elif reply.no_helper:
        result.status = "no_helper"
        result.message = reply.message
    elif reply.busy:
        result.status = "busy_skipped"
        result.message = f"kernel busy: checkpoint skipped ({reply.message})"
    elif reply.not_running:
        result.status = "not_running"
        result.message = reply.message
    else:
        result.message = reply.message or "checkpoint failed"
    return result


async def flush_kernels(
    environment: Environment,
    kernels: list[KernelRecord],
    checkpoint_root: Path,
    timeout: float,
    operation_id: str,
) -> list[KernelFlush]:
    """Ask every kernel to write its application checkpoints, concurrently."""

    async def one(record: KernelRecord) -> KernelFlush:
        directory = checkpoint_dir_for(checkpoint_root, record)
        wait = min(timeout, FLUSH_BUSY_GRACE_SECONDS) if record.reported_busy else timeout
        reply = await environment.kernel_request(
            record.kernel_id,
            "checkpoint",
            wait,
            checkpoint_dir=str(directory),
            operation_id=operation_id,
            notebook_path=record.path,
        )
        return classify_kernel_reply(record, reply, directory)

    return list(await asyncio.gather(*(one(k) for k in kernels)))


async def flush(
    environment: Environment,
    operation: Operation,
    kernels: list[KernelRecord],
    checkpoint_root: Path,
    timeout: float,
    abort_on_busy: bool,
) -> list[KernelFlush]:
    """Notebooks, then kernels, as steps of ``operation``; FlushFailed on the first failure.

    ``abort_on_busy``: a kernel too busy to checkpoint aborts (a suspend on a
    backend that does not keep live memory would lose its work).
    """
    step = operation.step("flush.notebooks")
    try:
        notebooks = await flush_notebooks(environment, kernels)
    except FlushFailed as exc:
        step.finish("failed", exc.reason)
        raise
    step.finish("ok", f"{len(notebooks)} notebook(s) on disk", notebooks=[n.to_dict() for n in notebooks])

    step = operation.step("flush.kernels")
    results = await flush_kernels(environment, kernels, checkpoint_root, timeout, operation.id)
    detail = {"kernels": [r.to_dict() for r in results]}
    failed = [r for r in results if r.status == "failed"]
    if failed:
        reason = "application checkpoint failed: " + "; ".join(f"{r.path or r.kernel_id}: {r.message}" for r in failed)
        step.finish("failed", reason, **detail)
        raise FlushFailed("flush.kernels", reason)
    busy = [r for r in results if r.status == "busy_skipped"]
    if busy and abort_on_busy:
        message = wording.busy_kernels_abort(", ".join(r.path or r.kernel_id for r in busy))
        step.finish("failed", message, **detail)
        raise FlushFailed("flush.kernels", message)
    summary = ", ".join(f"{r.status}: {sum(1 for x in results if x.status == r.status)}" for r in results)
    step.finish("ok", summary or "no kernels", **detail)
    return results


def checkpoints_to_restore(flushed_kernels: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """kernel id -> ``{"checkpoint_dir", "names"}``: what :func:`reload_application_checkpoints`
    will ask each restarted kernel to restore (the kernels checkpointed at the flush)."""
    return {
        f["kernel_id"]: {
            "checkpoint_dir": f.get("checkpoint_dir"),
            "names": [c.get("name") for c in f.get("checkpoints", []) if c.get("name")],
        }
        for f in flushed_kernels
        if f.get("status") == "checkpointed"
    }


async def reload_application_checkpoints(
    environment: Environment,
    operation: Operation,
    flushed_kernels: list[dict[str, Any]],
    kernels: list[RestoredKernel],
    timeout: float,
) -> dict[str, Any]:
    """Put application checkpoints back into the restarted kernels that wrote them
    at the suspend's flush (``flushed_kernels``); kernel id -> what came back."""
    step = operation.step("restore.checkpoints")
    by_kernel = checkpoints_to_restore(flushed_kernels)
    reloaded: dict[str, Any] = {}

    async def one(kernel: RestoredKernel, flushed: dict[str, Any]) -> dict[str, Any]:
        reply = await environment.load_helper_and_request(
            kernel.kernel_id,
            "restore",
            timeout,
            checkpoint_dir=flushed["checkpoint_dir"],
            names=flushed["names"],
            operation_id=operation.id,
        )
        return {
            "path": kernel.path,
            "outcome": reply.outcome.value,
            "message": reply.message,
            **{key: reply.content.get(key, []) for key in ("restored", "missing", "failed")},
        }

    # Every kernel reads its own checkpoints at once (each verifies its own
    # hashes): a resume waits for the slowest kernel, not for their sum.
    todo = [
        (kernel, by_kernel[kernel.kernel_id])
        for kernel in kernels
        if kernel.kernel_id in by_kernel and kernel.runnable_at is not None
    ]
    answers = await asyncio.gather(*(one(kernel, flushed) for kernel, flushed in todo))
    for (kernel, _), answer in zip(todo, answers, strict=True):
        reloaded[kernel.kernel_id] = answer
    failed = [r for r in reloaded.values() if r["outcome"] != "ok"]
    step.finish("failed" if failed else "ok", f"{len(reloaded) - len(failed)} kernel(s) restored", kernels=reloaded)
    return reloaded


# -- page-cache warm-up while restarted kernels start ----------------------------

_GENERATION_RE = re.compile(r"\d{8}T\d{6}\.\d{6}Z-[0-9a-f]{6}")
_PREFETCH_BLOCK = 8 * 2**20


def newest_generation_files(folder: Path) -> list[Path]:
    """The files of a checkpoint folder's newest complete generation, in the
    order a restore reads them (manifest, then each name's files by name);
    empty when there is none. Only a hint for the page cache: the kernel
    reads and verifies the checkpoints itself."""
    try:
        candidates = sorted(
            (c for c in folder.iterdir() if _GENERATION_RE.fullmatch(c.name) and (c / "manifest.json").is_file()),
            key=lambda c: c.name,
            reverse=True,
        )
    except OSError:
        return []
    if not candidates:
        return []
    generation = candidates[0]
    files: list[Path] = [generation / "manifest.json"]
    try:
        manifest = json.loads(files[0].read_bytes())
        objects = manifest["objects"]
        for name in sorted(objects):
            entry = objects[name]
            for key in ("pickle", "data", "callbacks"):
                if isinstance(entry.get(key), dict) and isinstance(entry[key].get("file"), str):
                    files.append(generation / entry[key]["file"])
            if isinstance(entry.get("folder"), str):
                files += sorted(p for p in (generation / entry["folder"]).rglob("*") if p.is_file())
    except (OSError, ValueError, RecursionError, KeyError, TypeError, AttributeError):
        files += sorted(p for p in generation.rglob("*") if p.is_file() and p != files[0])
    seen: set[Path] = set()
    inside = generation.resolve()
    ordered = []
    for path in files:
        try:
            real = path.resolve()
        except (OSError, RuntimeError):
            continue
        if real in seen or not real.is_relative_to(inside) or not real.is_file():
            continue
        seen.add(real)
        ordered.append(real)
    return ordered


class CheckpointPrefetch:
    """Read checkpoint files into the page cache in a background thread, so that
    a resume's disk reads overlap with the kernels' start-up and imports (the
    kernels then read them from memory, still checking every chunk's SHA-256).

    Skipped when the files would not fit in half of the available memory
    (warming them would only evict each other). :meth:`stop` ends it early.
    """

    def __init__(self, folders: list[Path], available_bytes: int | None = None):
        self.files = [f for folder in folders for f in newest_generation_files(folder)]
        self.total_bytes = 0
        for path in self.files:
            with contextlib.suppress(OSError):
                self.total_bytes += path.stat().st_size
        self.available_bytes = available_bytes
        self.bytes_read = 0
        self.seconds = 0.0
        self.skipped = ""
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> CheckpointPrefetch:
        if not self.files:
            self.skipped = "no checkpoint files"
        elif self.available_bytes is not None and self.total_bytes > self.available_bytes // 2:
            self.skipped = "larger than half the available memory"
        else:
            self._thread = threading.Thread(target=self._run, name="jupyter-suspend-prefetch", daemon=True)
            self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()

    def join(self, timeout: float | None = None) -> None:
        if self._thread is not None:
            self._thread.join(timeout)

    def _run(self) -> None:
        started = time.monotonic()
        block = bytearray(_PREFETCH_BLOCK)
        view = memoryview(block)
        for path in self.files:
            if self._stop.is_set():
                break
            try:
                fd = os.open(path, os.O_RDONLY)
            except OSError:
                continue
            try:
                with contextlib.suppress(AttributeError, OSError):
                    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_SEQUENTIAL)
                while not self._stop.is_set():
                    got = os.readv(fd, [view])
                    if not got:
                        break
                    self.bytes_read += got
            except OSError:
                pass
            finally:
                os.close(fd)
        self.seconds = time.monotonic() - started
