"""Read a resume's checkpoints while the restarted kernel is still starting.

A resume restarts the kernel, waits until it answers ``kernel_info``, then
asks it to restore its checkpoints (``restore`` request). Without this module
the read and the checks start only then; the kernel's own start (1-3 s) and
the read run one after the other.

The server (:class:`~jupyter_suspend.server.backends.local.LocalBackend`)
starts the restarted kernel with

* ``--InteractiveShellApp.extra_extensions=jupyter_suspend.kernel.preload``
  appended to the kernel's command line: IPython's documented option "for
  specifying extra extensions to load on the command-line" (IPython >= 7.10,
  https://ipython.readthedocs.io/en/8.23.0/api/generated/IPython.core.shellapp.html,
  ``IPython/core/shellapp.py``); it is loaded after the user's own
  ``extensions`` and before ``exec_lines`` and startup files, which all still
  run. ipykernel loads extensions in ``IPKernelApp.initialize`` before
  ``kernel.start()``, so this runs before the kernel answers anything;
* :data:`ENV_TICKET` naming a *ticket*: a JSON file the server wrote for this
  kernel id (checkpoint folder, names, deadline).

:func:`load_ipython_extension` claims the ticket (an atomic rename: one
process, once; the server removes an unclaimed ticket once the kernel
answered) and starts one background thread that reads and verifies the
checkpoints (:meth:`~jupyter_suspend.kernel.store.CheckpointStore.read_ahead`:
the same reads and digest checks a restore does, nothing unpickled, nothing
put in the user's namespace). When the server's ``restore`` request arrives,
:meth:`~jupyter_suspend.kernel.helper.KernelHelper.on_restore` waits for that
thread and hands its reads to the normal load, which unpickles them and binds
the names then, with the same result and messages as a load from disk.

A kernel the user starts (or restarts: jupyter_client reuses the command line
and the environment) finds no ticket, or one already claimed, and reads
nothing. A read nobody takes by the ticket's deadline is dropped.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..common.kernel_protocol import PRELOAD_ENV, PRELOAD_TICKET_VERSION
from .canary import own_kernel_id

if TYPE_CHECKING:  # the server imports this module's names; the store (numpy) only in the kernel
    from .store import ReadAhead

ENV_TICKET = PRELOAD_ENV
TICKET_VERSION = PRELOAD_TICKET_VERSION


class Preload:
    """One read ahead: started at kernel start, taken by the restore request (or dropped)."""

    def __init__(self, folder: Path, names: list[str], deadline: float):
        self.folder = folder
        self.names = names
        self.deadline = deadline
        self.started_at: float | None = None
        self.finished_at: float | None = None
        self.taken_at: float | None = None
        self.dropped: str | None = None  # why the read was dropped, if it was
        self.error: str | None = None  # an unexpected failure: the restore reads from disk instead
        self._ahead: dict[str, ReadAhead] | None = None
        self._done = threading.Event()
        self._taken = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="jupyter-suspend-preload", daemon=True)

    def start(self) -> Preload:
        self.started_at = time.time()
        self._thread.start()
        return self

    def _run(self) -> None:
        try:
            from .store import CheckpointStore

            ahead = CheckpointStore(self.folder).read_ahead(self.names)
        except Exception as exc:  # noqa: BLE001 - the restore will read from disk and report
            ahead = None
            self.error = f"{type(exc).__name__}: {exc}"
        with self._lock:
            self._ahead = ahead
            self.finished_at = time.time()
        self._done.set()
        # Nobody came for it (the resume failed, or the restore was not asked
        # for): free the memory at the deadline.
        if not self._taken.wait(max(0.0, self.deadline - time.time())):
            self.drop("not taken by its deadline")

    def drop(self, why: str) -> None:
        with self._lock:
            if self.taken_at is None and self.dropped is None:
                self._ahead = None
                self.dropped = why

    def matches(self, folder: Path, names: list[str]) -> bool:
        try:
            same_folder = folder.resolve() == self.folder.resolve()
        except OSError:
            return False
        return same_folder and set(names) <= set(self.names)

    def wait(self) -> None:
        self._done.wait()

    def take(self) -> dict[str, ReadAhead] | None:
        """Wait for the read and take it: once (None when it was dropped or failed)."""
        self._done.wait()
        with self._lock:
            if self.taken_at is not None or self._ahead is None or not self._done.is_set():
                return None
            ahead, self._ahead = self._ahead, None
            self.taken_at = time.time()
            self._taken.set()
            return ahead

    def report(self) -> dict[str, Any]:
        """What the restore reply says about the read ahead (times are epoch seconds)."""
        return {
            "started_at": self.started_at,
            "finished_at": self.finished_at,
            "taken_at": self.taken_at,
            "dropped": self.dropped,
            "error": self.error,
        }


_pending: Preload | None = None
#: The read ahead the last restore request found (taken, or dropped as another's).
last: Preload | None = None


def pending() -> Preload | None:
    """The read ahead this kernel began at its start, until a restore request takes it."""
    return _pending


def take(folder: Path, names: list[str]) -> tuple[dict[str, ReadAhead] | None, Preload | None]:
    """The read ahead for a restore of ``names`` from ``folder`` (None when
    there is none or it was of something else, which is then dropped: the
    restore reads from disk, never with a second copy held)."""
    global _pending, last
    preload, _pending = _pending, None
    if preload is None:
        return None, None
    last = preload
    if not preload.matches(folder, names):
        preload.wait()  # a running read finishes (and is freed) before the restore reads again
        preload.drop(f"the restore asked for other names or another folder ({folder})")
        return None, preload
    return preload.take(), preload


def claim_ticket(path: str, kernel_id: str | None) -> dict[str, Any] | None:
    """Read and consume the server's ticket; None when there is none for this
    process (already claimed, expired, another kernel's, malformed)."""
    claimed = f"{path}.claimed-{os.getpid()}"
    try:
        os.rename(path, claimed)  # atomic: of several processes, one claims it
    except OSError:
        return None
    try:
        ticket = json.loads(Path(claimed).read_text())
    except (OSError, ValueError):
        return None
    finally:
        with contextlib.suppress(OSError):
            os.unlink(claimed)
    if not isinstance(ticket, dict) or ticket.get("version") != TICKET_VERSION:
        return None
    folder, names, deadline = ticket.get("folder"), ticket.get("names"), ticket.get("deadline")
    if not isinstance(folder, str) or not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        return None
    if not isinstance(deadline, int | float) or deadline <= time.time():
        return None
    if kernel_id is not None and ticket.get("kernel_id") != kernel_id:
        return None
    return ticket


def start_from_environment(kernel_id: str | None) -> Preload | None:
    global _pending
    path = os.environ.get(ENV_TICKET)
    if not path:
        return None
    ticket = claim_ticket(path, kernel_id)
    if ticket is None or not ticket["names"]:
        return None
    _pending = Preload(Path(ticket["folder"]), list(ticket["names"]), float(ticket["deadline"])).start()
    return _pending


def load_ipython_extension(shell: Any) -> None:
    if start_from_environment(own_kernel_id()) is None:
        return
    # The server's restore request comes as soon as the kernel answers, and is served by
    # ``%load_ext jupyter_suspend``, which the server would otherwise load first with a request
    # of its own: load it now, while the read runs (the same extension, loaded the same way).
    try:
        shell.extension_manager.load_extension("jupyter_suspend")
    except Exception:  # the server loads it itself, as without a read ahead
        shell.log.warning("jupyter-suspend: could not load the extension at kernel start", exc_info=True)
