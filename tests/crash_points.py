"""Test-only seams for the crash-consistency suite (``tests/test_crash_consistency.py``).

``PausingLocalBackend`` is the ``local`` backend that, while its control file
names one of its steps, stops at that step and waits for ever after writing
``<control>.reached``: the test sees it and SIGKILLs the server *at that step*. Nothing here is imported by the product.

``JOURNAL_FAULT`` and ``KERNEL_WRITE_FAULT`` are code the test puts into the
server's config file and into a kernel: while a control file exists, the
journal's writes (from the entry of a given kind on) or a checkpoint file's
write fail as a full or read-only disk does.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from traitlets import Unicode

from jupyter_suspend.server.backends.base import ReleaseContext, RestoreContext, RestoreOutcome, Suspended
from jupyter_suspend.server.backends.local import LocalBackend

#: The steps at which :class:`PausingLocalBackend` can stop.
STEPS = ("release.before", "release.after", "restore.before", "restore.after")


class PausingLocalBackend(LocalBackend):
    control = Unicode("", config=True, help="A file naming the step to stop at (one of STEPS), when it exists.")

    async def _pause(self, step: str) -> None:
        try:
            wanted = Path(self.control).read_text().strip()
        except OSError:
            return
        if step == wanted:
            Path(f"{self.control}.reached").write_text(step)
            await asyncio.Event().wait()

    async def release(self, ctx: ReleaseContext) -> Suspended:
        await self._pause("release.before")  # the plan is durable, no kernel stopped yet
        outcome = await super().release(ctx)
        await self._pause("release.after")  # every kernel stopped, `released` not journaled
        return outcome

    async def restore(self, ctx: RestoreContext) -> RestoreOutcome:
        await self._pause("restore.before")  # restoring journaled, no kernel started
        outcome = await super().restore(ctx)
        await self._pause("restore.after")  # kernels started, checkpoints not reloaded
        return outcome


#: Server config code (format with ``control=``): while the control file holds
#: ``KIND ERRNO``, the first journal write of an entry of that kind fails, and so
#: does every write after it (the disk stays full or read-only) until the control
#: file is removed. ENOSPC writes half of the entry first (a short write).
JOURNAL_FAULT = """
import errno as _errno, os as _os
import jupyter_suspend.server.journal as _journal

def _install_journal_fault(control={control!r}):
    original = _journal._write_all
    if getattr(original, "crash_suite", False):
        return

    def write_all(fd, data):
        try:
            kind, name = open(control).read().split()
        except (OSError, ValueError):
            return original(fd, data)
        tripped = control + ".tripped"
        if not _os.path.exists(tripped):
            if ('"kind":"%s"' % kind).encode() not in bytes(data):
                return original(fd, data)
            open(tripped, "w").close()
        code = getattr(_errno, name)
        if code == _errno.ENOSPC:
            _os.write(fd, bytes(data)[: len(data) // 2])
        raise OSError(code, _os.strerror(code))

    write_all.crash_suite = True
    _journal._write_all = write_all

_install_journal_fault()
"""

#: Kernel code (format with ``control=``): while the control file holds
#: ``ACTION FILENAME``, writing that file of a checkpoint generation blocks
#: (ACTION ``block``, after touching ``<control>.reached``) or fails with that
#: errno (``ENOSPC`` after writing half of it, ``EROFS``).
KERNEL_WRITE_FAULT = """
import errno as _errno, os as _os, time as _time
from jupyter_suspend.kernel import store as _store

def _install_write_fault(control={control!r}, original=_store._write_file):
    def write_file(path, data):
        try:
            action, name = open(control).read().split()
        except (OSError, ValueError):
            return original(path, data)
        if path.name != name:
            return original(path, data)
        if action == "block":
            open(control + ".reached", "w").close()
            _time.sleep(300)
        code = getattr(_errno, action)
        if code == _errno.ENOSPC:
            with open(path, "wb") as fh:
                fh.write(data[: len(data) // 2])
        raise OSError(code, _os.strerror(code), str(path))

    _store._write_file = write_file

_install_write_fault()
"""
