"""Flush everything durable before anything is released.

Notebooks: the frontend saves dirty documents before it calls suspend; here
each notebook open in a session is checked on disk (present, a regular file,
valid notebook JSON) and fsynced together with its directory, so that what the
user sees as saved really is on the persistent volume before the pod or the
kernels go away.

Kernels: each kernel is asked to run its application-checkpoint hooks (see
:mod:`jupyter_suspend.kernel.protocol`). Kernels without the helper keep
files only; a busy kernel that does not answer in time is reported as
"kernel busy: checkpoint skipped".
"""

from __future__ import annotations

import asyncio
import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ..common.checkpoints import folder_name
from ..common.durable import fsync_directory
from .jupyter_environment import KernelRecord, KernelReply, Workspace
from .states import FlushFailed


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


def checkpoint_dir_for(root: Path, record: KernelRecord) -> Path:
    """Where a kernel's application checkpoints go: one folder per notebook
    (so that anyone can recover the work from the notebook's name), flat and
    free of path tricks whatever the session path contains. The kernel side
    derives the same name (:func:`~jupyter_suspend.kernel.store.folder_name`)."""
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


async def flush_notebooks(workspace: Workspace, kernels: list[KernelRecord]) -> list[NotebookFlush]:
    """Check and fsync every notebook open in a session; raise on the first failure."""
    results = []
    paths = sorted({k.path for k in kernels if k.path and k.type == "notebook"})
    for api_path in paths:
        if not await workspace.file_exists(api_path):
            raise FlushFailed("flush.notebooks", f"notebook {api_path} is not on disk; save it first")
        os_path = workspace.os_path(api_path)
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
    if reply.outcome == "ok":
        result.status = "checkpointed"
        result.message = reply.message
        result.checkpoints = list(reply.content.get("checkpoints", []))
        result.canary = reply.content.get("canary")
    elif reply.outcome == "absent":
        result.status = "no_helper"
        result.message = reply.message
    elif reply.outcome in {"timeout", "expired"}:
        result.status = "busy_skipped"
        result.message = f"kernel busy: checkpoint skipped ({reply.message})"
    elif reply.outcome == "dead":
        result.status = "not_running"
        result.message = reply.message
    else:
        result.message = reply.message or "checkpoint failed"
    return result


async def flush_kernels(
    workspace: Workspace,
    kernels: list[KernelRecord],
    checkpoint_root: Path,
    timeout: float,
    operation_id: str,
) -> list[KernelFlush]:
    """Ask every kernel to write its application checkpoints, concurrently."""

    async def one(record: KernelRecord) -> KernelFlush:
        directory = checkpoint_dir_for(checkpoint_root, record)
        reply = await workspace.kernel_request(
            record.kernel_id,
            "checkpoint",
            timeout,
            checkpoint_dir=str(directory),
            operation_id=operation_id,
            notebook_path=record.path,
        )
        return classify_kernel_reply(record, reply, directory)

    return list(await asyncio.gather(*(one(k) for k in kernels)))
