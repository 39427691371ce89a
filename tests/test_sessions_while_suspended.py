"""While suspended, no kernel starts for a recorded notebook; a resume leaves one session per path.

A real server, real kernels: the requests JupyterLab 4 sends when a notebook
page is opened (``POST /api/sessions`` at a random path in the notebook's
folder, then ``PATCH /api/sessions/{id}`` with the notebook's path), and a
session slipped in behind the guard's back.
"""

from __future__ import annotations

import json
import uuid
from collections import Counter
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from tornado.httpclient import HTTPClientError, HTTPResponse

from jupyter_suspend.server.session_guard import lifecycle_refusal
from jupyter_suspend.server.states import State

from .conftest import SuspendClient

REFUSED = "the environment is suspended: resume it to get this notebook's kernel back"


async def sessions_api(
    suspend_api: SuspendClient, method: str, *parts: str, body: dict[str, Any] | None = None
) -> HTTPResponse:
    kwargs: dict[str, Any] = {"method": method}
    if body is not None:
        kwargs["body"] = json.dumps(body)
    try:
        response: HTTPResponse = await suspend_api.fetch("api", "sessions", *parts, **kwargs)
    except HTTPClientError as exc:
        if exc.response is None:  # a timeout, not an HTTP answer
            raise
        response = exc.response
    return response


def new_session(path: str) -> dict[str, Any]:
    return {"path": path, "name": Path(path).name, "type": "notebook", "kernel": {"name": "python3"}}


async def suspended_with_checkpoint(suspend_api: SuspendClient, path: str) -> dict[str, Any]:
    """A notebook whose kernel holds a checkpointed ``answer``, then a suspend."""
    session = await suspend_api.open_notebook(path)
    reply = await suspend_api.run(
        session["kernel"]["id"], "%load_ext jupyter_suspend\nanswer = 42\n%checkpoint add answer"
    )
    assert reply["status"] == "ok", reply["stdout"]
    status = await suspend_api.suspend()
    assert status["state"] == "suspended", status
    assert await suspend_api.sessions() == []
    return session


async def assert_one_restored_session(suspend_api: SuspendClient, recorded: dict[str, Any]) -> None:
    sessions = await suspend_api.sessions()
    assert Counter(s["path"] for s in sessions)[recorded["path"]] == 1, sessions
    (mine,) = [s for s in sessions if s["path"] == recorded["path"]]
    assert (mine["id"], mine["kernel"]["id"]) == (recorded["id"], recorded["kernel"]["id"])
    reply = await suspend_api.run(mine["kernel"]["id"], "print(answer)")
    assert reply["stdout"].strip() == "42", reply


@pytest.mark.slow
async def test_a_recorded_notebook_gets_no_kernel_while_suspended(
    suspend_api: SuspendClient, kernel_server_env: Path
) -> None:
    recorded = await suspended_with_checkpoint(suspend_api, "work/model.ipynb")
    kernels = sorted(suspend_api.serverapp.kernel_manager.list_kernel_ids())

    refused = await sessions_api(suspend_api, "POST", body=new_session("work/model.ipynb"))
    assert refused.code == 409, refused.body
    message = json.loads(refused.body)["message"]
    assert REFUSED in message, message
    assert "checkpoints of answer" in message, message
    assert sorted(suspend_api.serverapp.kernel_manager.list_kernel_ids()) == kernels
    assert await suspend_api.sessions() == []

    # A notebook no plan records may get a kernel: the user works on something else.
    (suspend_api.root_dir / "work" / "other.ipynb").write_text((suspend_api.root_dir / recorded["path"]).read_text())
    other = await sessions_api(suspend_api, "POST", body=new_session("work/other.ipynb"))
    assert other.code == 201, other.body
    await suspend_api.kernel_ready(json.loads(other.body)["kernel"]["id"])

    status = await suspend_api.resume()
    assert status["state"] == "ready", status
    await assert_one_restored_session(suspend_api, recorded)
    assert sorted(s["path"] for s in await suspend_api.sessions()) == ["work/model.ipynb", "work/other.ipynb"]


@pytest.mark.slow
async def test_jupyterlab_start_then_rename_is_refused_at_the_rename(
    suspend_api: SuspendClient, kernel_server_env: Path
) -> None:
    recorded = await suspended_with_checkpoint(suspend_api, "work/model.ipynb")
    kernels = sorted(suspend_api.serverapp.kernel_manager.list_kernel_ids())

    # SessionContext._startSession: a session at a random path in the notebook's folder ...
    placeholder = await sessions_api(suspend_api, "POST", body=new_session(f"work/{uuid.uuid4()}"))
    assert placeholder.code == 201, placeholder.body
    session = json.loads(placeholder.body)
    # ... then renamed to the notebook's path (session.setPath).
    renamed = await sessions_api(
        suspend_api, "PATCH", session["id"], body={"id": session["id"], "path": recorded["path"]}
    )
    assert renamed.code == 409, renamed.body
    assert REFUSED in json.loads(renamed.body)["message"]
    # No kernel left behind, no session either.
    assert sorted(suspend_api.serverapp.kernel_manager.list_kernel_ids()) == kernels
    assert await suspend_api.sessions() == []

    status = await suspend_api.resume()
    assert status["state"] == "ready", status
    await assert_one_restored_session(suspend_api, recorded)


@pytest.mark.slow
async def test_a_session_behind_the_guards_back_is_ended_by_the_resume(
    suspend_api: SuspendClient, kernel_server_env: Path
) -> None:
    recorded = await suspended_with_checkpoint(suspend_api, "work/model.ipynb")
    sm = suspend_api.serverapp.session_manager
    # An older plugin, or the API before the suspend was recorded: the class's
    # own create_session, not the guarded one of the instance.
    intruder = await type(sm).create_session(
        sm, path=recorded["path"], name="model.ipynb", type="notebook", kernel_name="python3"
    )
    await suspend_api.kernel_ready(intruder["kernel"]["id"])
    assert [s["id"] for s in await suspend_api.sessions()] == [intruder["id"]]

    # Busy with a cell: still shut down (the notebook's kernel is the recorded one).
    async with suspend_api.busy(intruder["kernel"]["id"], 60):
        status = await suspend_api.resume()
    assert status["state"] == "ready", status
    await assert_one_restored_session(suspend_api, recorded)
    assert intruder["kernel"]["id"] not in suspend_api.serverapp.kernel_manager
    assert [s["id"] for s in await suspend_api.sessions()] == [recorded["id"]]


@pytest.mark.parametrize(
    ("state", "lead"),
    [
        (State.SNAPSHOTTING, REFUSED),
        (State.SUSPENDED, REFUSED),
        (State.WAITING_FOR_CAPACITY, "the environment is being resumed"),
        (State.RESTORING, "the environment is being resumed"),
        (State.FAILED, "the last resume did not finish: resume again"),
    ],
)
def test_refused_while_the_recorded_kernel_awaits_the_resume(state: State, lead: str) -> None:
    lifecycle = SimpleNamespace(
        state=state,
        resume_plan={"kernels": [{"kernel_id": "k1", "path": "a.ipynb"}, {"kernel_id": "k2", "path": None}]},
        flushed_kernels=[{"kernel_id": "k1", "checkpoints": [{"name": "weights"}, {"name": "step"}]}],
    )
    refuse = lifecycle_refusal(lifecycle)
    message = refuse("a.ipynb")
    assert message is not None
    assert message.startswith(lead), message
    assert "(it holds the checkpoints of step, weights)" in message
    assert refuse("b.ipynb") is None  # a path no plan records


@pytest.mark.parametrize("state", [State.RUNNING, State.READY, State.FLUSHING, State.FAILED])
def test_nothing_refused_without_a_resume_plan(state: State) -> None:
    lifecycle = SimpleNamespace(state=state, resume_plan=None, flushed_kernels=[])
    assert lifecycle_refusal(lifecycle)("a.ipynb") is None
