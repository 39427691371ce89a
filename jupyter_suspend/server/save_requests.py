"""Ask every connected frontend to save its unsaved documents before a flush.

Whatever starts a suspend (the toolbar, ``%suspend``, the idle policy, the
CLI, the REST API), what a browser tab still holds must reach the disk before
the flush checks and fsyncs the notebooks. The server emits a "save requested"
event (schema ``save-request-event.json``) on the Jupyter event bus, which
every JupyterLab page with the plugin receives on ``/api/events/subscribe``;
each page saves its dirty documents and answers on ``POST save-requests``
(``save-answer-request.json``): first "saving" with the documents it is
saving, then "done" with what was saved and what could not be, and why.

How long the server waits: every subscriber of the event bus is given
``answer_window`` seconds to answer at all (a subscriber that is not a
JupyterLab page with this plugin never answers); a page that answered
"saving" is waited for until ``timeout``. No subscriber: no wait. Knows
nothing of tornado.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

#: The event's schema id (``jupyter_suspend/common/schemas/save-request-event.json``).
EVENT_SCHEMA_ID = "https://schema.jupyter.org/jupyter_suspend/api/v1/save-request-event.json"
#: Answers kept per round: more frontends than this is not a notebook server.
MAX_CLIENTS = 64
#: Finished rounds remembered, so that a late answer gets a clear 409 rather than a 404.
KEEP_FINISHED = 16


class UnknownSaveRequest(LookupError):
    """An answer names a request this server never made (404)."""


class SaveRequestClosed(RuntimeError):
    """An answer comes after its request's deadline (409): the suspend went on without it."""


@dataclass
class ClientAnswer:
    client_id: str
    done: bool = False
    saving: list[str] = field(default_factory=list)
    saved: list[str] = field(default_factory=list)
    failed: list[dict[str, str]] = field(default_factory=list)
    unsaved: list[str] = field(default_factory=list)


@dataclass
class SaveReport:
    """What a round of save requests achieved (journaled with the flush's ``flush.save`` step)."""

    request_id: str
    dry_run: bool
    listeners: int | None
    seconds: float
    saved: list[dict[str, str]] = field(default_factory=list)
    failed: list[dict[str, str]] = field(default_factory=list)
    #: Dry run: the unsaved documents a suspend would save now.
    unsaved: list[dict[str, str]] = field(default_factory=list)
    #: Frontends that said they were saving and did not finish before the deadline.
    unfinished: list[dict[str, Any]] = field(default_factory=list)
    answered: int = 0
    skipped: str = ""

    @property
    def problems(self) -> list[str]:
        """One sentence per document that may not be on disk (empty: nothing unsaved is lost)."""
        out = [f"{f['path']} could not be saved: {f['error']}" for f in self.failed]
        for u in self.unfinished:
            paths = ", ".join(u["saving"]) or "its documents"
            out.append(f"a JupyterLab page did not finish saving {paths} in {self.seconds:.0f} s")
        return out

    def summary(self) -> str:
        if self.skipped:
            return self.skipped
        if self.dry_run:
            return f"{len(self.unsaved)} unsaved document(s) in {self.answered} JupyterLab page(s)"
        text = f"{len(self.saved)} document(s) saved by {self.answered} JupyterLab page(s)"
        return text + (f"; {len(self.problems)} problem(s)" if self.problems else "")

    def to_dict(self) -> dict[str, Any]:
        return {
            "request_id": self.request_id,
            "dry_run": self.dry_run,
            "listeners": self.listeners,
            "answered": self.answered,
            "seconds": round(self.seconds, 3),
            "saved": self.saved,
            "failed": self.failed,
            "unsaved": self.unsaved,
            "unfinished": self.unfinished,
            "skipped": self.skipped,
            "problems": self.problems,
        }


@dataclass
class _Round:
    request_id: str
    dry_run: bool
    changed: asyncio.Event
    answers: dict[str, ClientAnswer] = field(default_factory=dict)


class SaveRequests:
    """One round per suspend (or dry run): emit the request, collect the answers, report.

    ``emit`` sends the event; ``listeners`` says how many subscribers the event
    bus has (None: unknown, wait the whole answer window)."""

    def __init__(
        self,
        emit: Callable[[dict[str, Any]], None],
        listeners: Callable[[], int | None],
        *,
        answer_window: float = 3.0,
        timeout: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
    ):
        self._emit = emit
        self._listeners = listeners
        self.answer_window = answer_window
        self.timeout = timeout
        self._clock = clock
        self._open: dict[str, _Round] = {}
        self._finished: list[str] = []

    async def collect(self, *, operation_id: str | None, reason: str, dry_run: bool = False) -> SaveReport:
        """Ask every frontend to save (or, dry run, to list what it would save) and wait for the answers."""
        request_id = uuid.uuid4().hex[:16]
        listeners = self._listeners()
        if listeners == 0:
            return SaveReport(request_id, dry_run, 0, 0.0, skipped="no JupyterLab page is connected")
        started = self._clock()
        round_ = _Round(request_id, dry_run, asyncio.Event())
        self._open[request_id] = round_
        try:
            self._emit(
                {
                    "request_id": request_id,
                    "dry_run": dry_run,
                    "reason": reason[:500],
                    "operation_id": operation_id or "",
                    "answer_within_seconds": self.answer_window,
                    "deadline_seconds": self.timeout,
                }
            )
            await self._wait(round_, started, listeners)
        finally:
            del self._open[request_id]
            self._finished = [*self._finished, request_id][-KEEP_FINISHED:]
        return self._report(round_, listeners, self._clock() - started)

    async def _wait(self, round_: _Round, started: float, listeners: int | None) -> None:
        while True:
            elapsed = self._clock() - started
            answers = list(round_.answers.values())
            all_done = all(a.done for a in answers)
            everyone = listeners is not None and len(answers) >= listeners
            if all_done and (everyone or elapsed >= self.answer_window):
                return
            if elapsed >= self.timeout:
                return
            # Past the window only pages that are saving are waited for, up to the deadline.
            until = self.timeout if elapsed >= self.answer_window else self.answer_window
            round_.changed.clear()
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(round_.changed.wait(), timeout=max(0.01, until - elapsed))

    def answer(self, body: dict[str, Any]) -> dict[str, Any]:
        """A frontend's answer (a body valid against ``save-answer-request.json``)."""
        request_id = body["request_id"]
        round_ = self._open.get(request_id)
        if round_ is None:
            if request_id in self._finished:
                raise SaveRequestClosed(f"save request {request_id} is over: the suspend went on without this answer")
            raise UnknownSaveRequest(f"no save request {request_id} on this server")
        client_id = body["client_id"]
        if client_id not in round_.answers and len(round_.answers) >= MAX_CLIENTS:
            raise SaveRequestClosed(f"save request {request_id} already has {MAX_CLIENTS} answers")
        answer = round_.answers.setdefault(client_id, ClientAnswer(client_id))
        if answer.done:
            raise SaveRequestClosed(f"page {client_id} already answered save request {request_id}")
        answer.done = body["state"] == "done"
        answer.saving = list(body.get("saving", answer.saving))
        answer.saved = list(body.get("saved", []))
        answer.failed = [{"path": f["path"], "error": f["error"]} for f in body.get("failed", [])]
        answer.unsaved = list(body.get("unsaved", []))
        round_.changed.set()
        return {"request_id": request_id, "client_id": client_id, "accepted": True}

    @staticmethod
    def _report(round_: _Round, listeners: int | None, seconds: float) -> SaveReport:
        report = SaveReport(round_.request_id, round_.dry_run, listeners, seconds, answered=len(round_.answers))
        for answer in round_.answers.values():
            report.saved += [{"path": p, "client_id": answer.client_id} for p in answer.saved]
            report.failed += [{**f, "client_id": answer.client_id} for f in answer.failed]
            report.unsaved += [{"path": p, "client_id": answer.client_id} for p in answer.unsaved]
            if not answer.done:
                report.unfinished.append({"client_id": answer.client_id, "saving": answer.saving})
        return report
