"""While the recorded kernels are down, no kernel starts for a recorded notebook.

A notebook opened (or reloaded) while the environment is suspended finds no
session at its path, so JupyterLab starts a new kernel for it; the resume
would then bring the recorded kernel back as well: two sessions for one
notebook, the page on the new, empty kernel. :class:`SessionGuard` wraps the
server's session manager (the one every ``/api/sessions`` request goes
through) so that, while a resume plan records a notebook's kernel and that
kernel is down or on its way back, no session is created for the notebook's
path and no session is renamed to it:

- ``create_session`` (``POST /api/sessions``) raises :class:`NotebookSuspended`,
  a ``DuplicateKernelError``, which jupyter_server answers with ``409`` and the
  message (any other exception there becomes a ``500``);
- ``update_session`` with such a ``path`` (``PATCH /api/sessions/{id}``)
  answers ``409``. JupyterLab 4 starts a notebook's kernel at a random path in
  the notebook's folder and then renames the session to the notebook's path
  (``SessionContext._startSession``: ``startNew`` then ``setPath``); the
  rename is where it is refused, and the session being renamed goes with its
  kernel when it is that placeholder (its path is no file), so that no kernel
  is left behind.

Kernels for paths no plan records (a new notebook, a console) start as usual.
The resume itself does not go through these methods (it starts the kernels
and saves the recorded session rows directly).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from jupyter_client.multikernelmanager import DuplicateKernelError
from jupyter_core.utils import ensure_async
from tornado import web

from .jupyter_environment import close_kernel_websockets
from .states import State

#: The states in which a recorded kernel is down or on its way back (with a
#: resume plan); the frontend holds kernel starts in the same ones.
AWAITING_RESUME = frozenset(
    {State.SNAPSHOTTING, State.SUSPENDED, State.WAITING_FOR_CAPACITY, State.RESTORING, State.FAILED}
)

#: Why a kernel start for ``path`` is refused now, or None when it may start.
Refusal = Callable[[str], "str | None"]


class NotebookSuspended(DuplicateKernelError):
    """A kernel for a recorded notebook while its recorded kernel awaits the resume.

    A ``DuplicateKernelError``: jupyter_server's ``POST /api/sessions`` answers
    it with ``409`` and this message (the recorded kernel is the notebook's
    kernel; another would be a duplicate once it is back).
    """


def _holds(kernel_id: str | None, flushed: list[dict[str, Any]]) -> str:
    names: list[str] = []
    for kernel in flushed:
        if kernel.get("kernel_id") == kernel_id:
            names += [str(c["name"]) for c in kernel.get("checkpoints") or [] if c.get("name")]
    if names:
        return "it holds the checkpoints of " + ", ".join(sorted(set(names)))
    return "it holds its session; no application checkpoints were recorded"


def refusal_message(state: State, path: str, holds: str) -> str:
    if state in (State.RESTORING, State.WAITING_FOR_CAPACITY):
        lead = "the environment is being resumed: this notebook's kernel is on its way back"
    elif state == State.FAILED:
        lead = "the last resume did not finish: resume again to get this notebook's kernel back"
    else:
        lead = "the environment is suspended: resume it to get this notebook's kernel back"
    return f"{lead} ({holds}). No other kernel was started for {path}."


def lifecycle_refusal(lifecycle: Any) -> Refusal:
    """The refusal rule over a :class:`~jupyter_suspend.server.lifecycle.Lifecycle`:
    a path the resume plan records a kernel for, while the environment awaits a resume."""

    def refuse(path: str) -> str | None:
        state = lifecycle.state
        plan = lifecycle.resume_plan
        if state not in AWAITING_RESUME or not isinstance(plan, dict):
            return None
        for kernel in plan.get("kernels") or []:
            if isinstance(kernel, dict) and kernel.get("path") == path:
                return refusal_message(state, path, _holds(kernel.get("kernel_id"), lifecycle.flushed_kernels))
        return None

    return refuse


class SessionGuard:
    """Installs the refusal on a session manager instance (and takes it off again)."""

    def __init__(self, session_manager: Any, refuse: Refusal, log: logging.Logger | None = None):
        self.session_manager = session_manager
        self.refuse = refuse
        self.log = log or logging.getLogger("jupyter_suspend")
        self._originals: dict[str, Any] = {}

    def install(self) -> None:
        sm = self.session_manager
        if sm is None or self._originals:
            return
        create, update = sm.create_session, sm.update_session
        self._originals = {"create_session": create, "update_session": update}

        async def create_session(*args: Any, **kwargs: Any) -> Any:
            path = kwargs["path"] if "path" in kwargs else (args[0] if args else None)
            if isinstance(path, str) and (reason := self.refuse(path)) is not None:
                self.log.info("jupyter-suspend: no session for %s: %s", path, reason)
                raise NotebookSuspended(reason)
            return await ensure_async(create(*args, **kwargs))

        async def update_session(session_id: str, **kwargs: Any) -> Any:
            path = kwargs.get("path")
            if isinstance(path, str) and (reason := self.refuse(path)) is not None:
                await self._refuse_rename(session_id, path, reason)
            return await ensure_async(update(session_id, **kwargs))

        sm.create_session = create_session
        sm.update_session = update_session

    def uninstall(self) -> None:
        for name, method in self._originals.items():
            setattr(self.session_manager, name, method)
        self._originals = {}

    async def _refuse_rename(self, session_id: str, path: str, reason: str) -> None:
        """Refuse a rename to a recorded path (409); a placeholder session
        (JupyterLab's random path, no file there) is shut down with its kernel."""
        sm = self.session_manager
        try:
            before = await sm.get_session(session_id=session_id)
        except web.HTTPError:
            raise web.HTTPError(409, reason) from None
        if before.get("path") == path:
            return  # not a rename: the session is already there
        kernel_id = (before.get("kernel") or {}).get("id")
        if not await ensure_async(sm.contents_manager.file_exists(before.get("path") or "")):
            try:
                await ensure_async(sm.delete_session(session_id))
            except (KeyError, web.HTTPError):
                pass  # gone meanwhile
            finally:
                if kernel_id:
                    await close_kernel_websockets(kernel_id)
            self.log.info("jupyter-suspend: session %s (for %s) shut down: %s", session_id, path, reason)
        raise web.HTTPError(409, reason)
