"""Every endpoint is authorized against the ``jupyter_suspend`` resource."""

from __future__ import annotations

import json
from typing import Any

import pytest
from jupyter_server.auth.authorizer import Authorizer
from tornado.httpclient import HTTPClientError

from jupyter_suspend.server.handlers import AUTH_RESOURCE


class ReadOnlySuspend(Authorizer):
    """May look at the suspend state, may not change it."""

    checked: list[tuple[str, str]] = []

    def is_authorized(self, handler: Any, user: Any, action: str, resource: str) -> bool:
        if resource == AUTH_RESOURCE:
            self.checked.append((action, resource))
            return action == "read"
        return True


@pytest.fixture
def jp_server_config(jp_server_config: dict[str, Any]) -> dict[str, Any]:
    jp_server_config["ServerApp"]["authorizer_class"] = ReadOnlySuspend
    return jp_server_config


async def test_read_allowed_write_denied(jp_fetch: Any, jp_serverapp: Any) -> None:
    ReadOnlySuspend.checked.clear()
    response = await jp_fetch("jupyter-suspend", "api", "status")
    assert json.loads(response.body)["state"] == "running"
    await jp_fetch("jupyter-suspend", "api", "timeline")
    for endpoint in ("suspend", "checkpoint", "resume", "acknowledge"):
        with pytest.raises(HTTPClientError) as info:
            await jp_fetch("jupyter-suspend", "api", endpoint, method="POST", body="{}")
        assert info.value.code == 403, endpoint
    assert ("read", AUTH_RESOURCE) in ReadOnlySuspend.checked
    assert ("write", AUTH_RESOURCE) in ReadOnlySuspend.checked
    lifecycle = jp_serverapp.web_app.settings["jupyter_suspend_lifecycle"]
    assert lifecycle.state.value == "running"
    assert lifecycle.operation is None
