"""Issue 17 item 3: nothing unsaved is lost on any suspend, whatever started it.

A real jupyter_server; the "page" is a real subscriber of ``/api/events/subscribe``
that answers on ``POST jupyter-suspend/api/save-requests`` as the plugin does,
and saves through the contents API.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import nbformat
import pytest

from jupyter_suspend.server.save_requests import EVENT_SCHEMA_ID, SaveRequests

from .conftest import SuspendClient


@pytest.fixture
def suspend_config() -> dict[str, Any]:
    return {"flush_kernel_timeout": 5.0, "save_answer_window": 5.0, "save_timeout": 3.0}


async def next_save_request(ws: Any, timeout: float = 30.0) -> dict[str, Any]:
    """The next save-requested event on an event-bus socket (other events are skipped)."""

    async def read() -> dict[str, Any]:
        while True:
            message = await ws.read_message()
            assert message is not None, "the event socket closed"
            event = json.loads(message)
            if event["schema_id"] == EVENT_SCHEMA_ID:
                return event

    return await asyncio.wait_for(read(), timeout)


def notebook_json(source: str) -> dict[str, Any]:
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(source)]
    return json.loads(nbformat.writes(nb))


async def answer(api: SuspendClient, expect: int = 200, **body: Any) -> dict[str, Any]:
    return await api.json("POST", "save-requests", body, expect=expect)


def step(status: dict[str, Any], name: str) -> dict[str, Any]:
    return next(s for s in status["operation"]["steps"] if s["name"] == name)


async def test_item3_a_rest_suspend_asks_the_page_to_save_before_the_flush(
    suspend_api: SuspendClient, jp_ws_fetch: Any
) -> None:
    session = await suspend_api.open_notebook("work.ipynb", ["x = 1"])
    ws = await jp_ws_fetch("api", "events", "subscribe")
    try:
        await suspend_api.json("POST", "suspend", {"reason": "from the REST API"}, expect=202)
        event = await next_save_request(ws)
        assert event["dry_run"] is False
        assert event["reason"] == "from the REST API"
        request_id = event["request_id"]
        await answer(suspend_api, request_id=request_id, client_id="page-1", state="saving", saving=["work.ipynb"])
        # What the tab held reaches the disk, through the contents API as JupyterLab saves.
        await suspend_api.fetch(
            "api",
            "contents",
            "work.ipynb",
            method="PUT",
            body=json.dumps({"type": "notebook", "format": "json", "content": notebook_json("x = 'unsaved output'")}),
        )
        await answer(suspend_api, request_id=request_id, client_id="page-1", state="done", saved=["work.ipynb"])
        status = await suspend_api.wait_done()
    finally:
        ws.close()
    assert status["state"] == "suspended", status
    saved = step(status, "flush.save")
    assert saved["status"] == "ok"
    assert saved["detail"]["saved"] == [{"path": "work.ipynb", "client_id": "page-1"}]
    assert "1 document(s) saved" in saved["message"]
    # The flush checked what the page saved, and the journal keeps the step.
    on_disk = nbformat.read(str(suspend_api.root_dir / "work.ipynb"), as_version=4)
    assert on_disk.cells[0].source == "x = 'unsaved output'"
    app = next(iter(suspend_api.serverapp.extension_manager.extension_apps["jupyter_suspend"]))
    journal = app.lifecycle.journal
    finished = [e for e in journal.read().entries if e["kind"] == "operation_finished"][-1]
    assert any(s["name"] == "flush.save" and s["detail"]["saved"] for s in finished["steps"])
    assert session["path"] == "work.ipynb"
    # Who suspended, when, and after how long idle: what a returning user is told.
    last = status["last_suspend"]
    assert last["origin"] == "user"
    assert last["reason"] == "from the REST API"
    assert last["suspended_at"] is not None
    assert last["operation_id"] == status["operation"]["id"]


async def test_item3_a_document_the_page_cannot_save_aborts_the_suspend(
    suspend_api: SuspendClient, jp_ws_fetch: Any
) -> None:
    ws = await jp_ws_fetch("api", "events", "subscribe")
    try:
        await suspend_api.json("POST", "suspend", {}, expect=202)
        request_id = (await next_save_request(ws))["request_id"]
        await answer(
            suspend_api,
            request_id=request_id,
            client_id="page-1",
            state="done",
            failed=[{"path": "gone/draft.ipynb", "error": "No such file or directory"}],
        )
        status = await suspend_api.wait_done()
    finally:
        ws.close()
    assert status["state"] == "running"
    assert status["operation"]["outcome"] == "aborted"
    assert "gone/draft.ipynb could not be saved: No such file or directory" in status["operation"]["message"]
    assert step(status, "flush.save")["status"] == "failed"


@pytest.mark.slow  # seconds: the fast loop (README, Development) leaves it to the full suite
async def test_item3_a_page_that_does_not_finish_saving_by_the_deadline_aborts_the_suspend(
    suspend_api: SuspendClient, jp_ws_fetch: Any
) -> None:
    ws = await jp_ws_fetch("api", "events", "subscribe")
    try:
        await suspend_api.json("POST", "suspend", {}, expect=202)
        request_id = (await next_save_request(ws))["request_id"]
        await answer(suspend_api, request_id=request_id, client_id="slow", state="saving", saving=["big.ipynb"])
        status = await suspend_api.wait_done()
        # Too late: the suspend went on without it, and says so.
        late = await answer(suspend_api, expect=409, request_id=request_id, client_id="slow", state="done")
    finally:
        ws.close()
    assert status["operation"]["outcome"] == "aborted"
    assert "did not finish saving big.ipynb" in status["operation"]["message"]
    assert "is over" in late["message"]


async def test_item3_the_dry_run_lists_the_pages_unsaved_documents(
    suspend_api: SuspendClient, jp_ws_fetch: Any
) -> None:
    ws = await jp_ws_fetch("api", "events", "subscribe")
    try:
        dry = asyncio.ensure_future(suspend_api.json("POST", "suspend", {"dry_run": True}))
        event = await next_save_request(ws)
        assert event["dry_run"] is True
        await answer(suspend_api, request_id=event["request_id"], client_id="page-1", state="done", unsaved=["a.ipynb"])
        report = await dry
    finally:
        ws.close()
    assert report["unsaved_documents"]["unsaved"] == [{"path": "a.ipynb", "client_id": "page-1"}]
    assert report["unsaved_documents"]["answered"] == 1
    # Nothing was saved or suspended.
    assert (await suspend_api.status())["state"] == "running"


async def test_item3_without_a_connected_page_the_suspend_does_not_wait(suspend_api: SuspendClient) -> None:
    status = await suspend_api.suspend()
    assert status["state"] == "suspended"
    saved = step(status, "flush.save")
    assert saved["status"] == "ok"
    assert saved["message"] == "no JupyterLab page is connected"


@pytest.mark.parametrize(
    "body",
    [
        b"{not json",
        b"[]",
        json.dumps({"request_id": "0123456789abcdef", "client_id": "p", "state": "done", "extra": 1}).encode(),
        json.dumps({"request_id": "0123456789abcdef", "client_id": "p", "state": "finished"}).encode(),
        json.dumps({"request_id": "../../etc/passwd", "client_id": "p", "state": "done"}).encode(),
        json.dumps({"request_id": "0123456789abcdef", "client_id": "p", "state": "done", "saved": "a"}).encode(),
        json.dumps({"request_id": "0123456789abcdef", "client_id": "p/../x", "state": "done"}).encode(),
        json.dumps({"request_id": "0123456789abcdef", "state": "done"}).encode(),
        json.dumps({"request_id": "0123456789abcdef\n", "client_id": "p", "state": "done"}).encode(),
        json.dumps(
            {"request_id": "0123456789abcdef", "client_id": "p", "state": "done", "failed": [{"path": "a"}]}
        ).encode(),
    ],
)
async def test_item3_a_bad_answer_gets_a_400(suspend_api: SuspendClient, body: bytes) -> None:
    response = await suspend_api.call("POST", "save-requests", raw=body)
    assert response.code == 400, response.body
    assert "message" in json.loads(response.body)


async def test_item3_an_answer_to_no_request_gets_a_404(suspend_api: SuspendClient) -> None:
    body = {"request_id": "0123456789abcdef", "client_id": "p", "state": "done"}
    assert "no save request" in (await answer(suspend_api, expect=404, **body))["message"]


async def test_item3_the_window_ends_early_once_every_listener_answered() -> None:
    sent: list[dict[str, Any]] = []
    requests = SaveRequests(sent.append, lambda: 1, answer_window=30.0, timeout=60.0)
    task = asyncio.ensure_future(requests.collect(operation_id="op", reason="r"))
    while not sent:
        await asyncio.sleep(0.01)
    requests.answer({"request_id": sent[0]["request_id"], "client_id": "p", "state": "done", "saved": ["a"]})
    report = await asyncio.wait_for(task, 5.0)
    assert report.saved == [{"path": "a", "client_id": "p"}]
    assert report.seconds < 5.0
    assert not report.problems


@pytest.mark.slow  # seconds: the fast loop (README, Development) leaves it to the full suite
@pytest.mark.parametrize("suspend_config", [{"flush_kernel_timeout": 60.0}])
async def test_item4_a_busy_kernel_does_not_keep_a_suspend_flushing_for_the_whole_timeout(
    suspend_api: SuspendClient,
) -> None:
    from jupyter_suspend.server.flush import FLUSH_BUSY_GRACE_SECONDS

    from .conftest import checkpoint_handler_code

    session = await suspend_api.open_notebook("busy.ipynb")
    kernel_id = session["kernel"]["id"]
    await suspend_api.run(kernel_id, checkpoint_handler_code())
    async with suspend_api.busy(kernel_id, 40):
        await suspend_api.wait_until_busy(kernel_id)
        started = time.monotonic()
        status = await suspend_api.suspend(force=True)
        took = time.monotonic() - started
    assert status["state"] == "suspended"
    flushed = step(status, "flush.kernels")
    assert flushed["detail"]["kernels"][0]["status"] == "busy_skipped"
    # Not flush_kernel_timeout (60 s): the grace a kernel reported busy gets, plus the rest of the suspend.
    assert took < FLUSH_BUSY_GRACE_SECONDS + 20, took
