"""Issue 17 items 1, 2 and 10: a wrong setting is loud and safe, and the server still stops on SIGTERM.

A real jupyter_server (in process, and as a ``jupyter server`` subprocess for SIGTERM) with settings that
are wrong in every way the issue lists: the API answers every call with 503 and the problems (held to the
OpenAPI document), the log says each at ERROR, the metric says 1 per setting, the idle policy never runs.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families
from tornado.httpclient import HTTPClientError

from jupyter_suspend.server.app import SuspendApp
from jupyter_suspend.server.configuration import MISCONFIGURED
from jupyter_suspend.server.handlers import handlers
from jupyter_suspend.server.openapi import check_answer, document, routes

from .servers import ServerProcess

BAD_IDLE = {
    "enabled": True,
    "tick_seconds": 0.1,
    "workload_classes": {"interactive-gpu": {"idle_secs": 5}},
    "default_workload_class": "nightly",
    "gpu_busy_percent": 150,
}
BAD_SUSPEND = {"flush_kernel_timeout": -1.0, "capacity_max_wait": "soon"}
EXPECTED = {
    "IdlePolicy.workload_classes": "allowed: description, idle_seconds",
    "IdlePolicy.default_workload_class": "allowed: interactive-gpu, long-training, small-cpu",
    "IdlePolicy.gpu_busy_percent": "allowed: a percentage from 0 to 100",
    "SuspendApp.flush_kernel_timeout": "allowed: 0 or more",
    "SuspendApp.capacity_max_wait": "expected a float",
}


@pytest.fixture
def jp_server_config(state_dir: Path) -> dict[str, Any]:
    return {
        "ServerApp": {"jpserver_extensions": {"jupyter_suspend": True}, "allow_unauthenticated_access": False},
        "SuspendApp": {"state_dir": str(state_dir), **BAD_SUSPEND},
        "IdlePolicy": BAD_IDLE,
    }


def example_path(endpoint: str) -> str:
    return endpoint.replace("{name}", "snap-1")


async def test_item1_misconfiguration_answers_503_on_every_route_and_never_runs_the_policy(
    jp_fetch: Any, jp_serverapp: Any, state_dir: Path
) -> None:
    app: SuspendApp = jp_serverapp.extension_manager.extension_points["jupyter_suspend"].app
    assert {p.setting for p in app.problems} == set(EXPECTED)
    # Every route of the API, every method it has: 503, JSON, the contract of the OpenAPI document.
    answered = 0
    for endpoint, methods in routes(handlers()).items():
        for method in methods:
            kwargs: dict[str, Any] = {"method": method.upper()}
            if method == "post":
                kwargs["body"] = "{}"
            with pytest.raises(HTTPClientError) as caught:
                await jp_fetch("jupyter-suspend/api", example_path(endpoint), **kwargs)
            response = caught.value.response
            assert response is not None
            assert response.code == 503, (method, endpoint)
            assert response.headers["Content-Type"] == "application/json"
            check_answer(method.upper(), endpoint, 503, response.body)
            body = json.loads(response.body)
            assert body["reason"] == MISCONFIGURED
            assert body["message"].startswith("jupyter-suspend is misconfigured (")
            problems = {p["setting"]: p["message"] for p in body["problems"]}
            assert set(problems) == set(EXPECTED)
            for setting, allowed in EXPECTED.items():
                assert allowed in problems[setting], (setting, problems[setting])
            answered += 1
    assert answered >= 13
    # Nothing that could act on a wrong setting was made: no lifecycle, no idle policy timer, no journal.
    assert getattr(app, "lifecycle", None) is None
    assert getattr(app.idle_policy, "_task", None) is None
    await asyncio.sleep(0.3)  # three ticks of the configured timer, had it started
    assert not (state_dir / "journal.jsonl").exists()
    # The metric, for alerting: 1 per wrong setting.
    response = await jp_fetch("jupyter-suspend", "metrics")
    samples = {
        sample.labels.get("setting"): sample.value
        for family in text_string_to_metric_families(response.body.decode())
        if family.name == "jupyter_suspend_misconfigured"
        for sample in family.samples
    }
    assert samples == dict.fromkeys(EXPECTED, 1.0)


async def test_item1_unauthenticated_calls_learn_nothing_of_the_configuration(jp_fetch: Any) -> None:
    with pytest.raises(HTTPClientError) as caught:
        await jp_fetch("jupyter-suspend/api", "status", headers={"Authorization": ""})
    assert caught.value.code == 403
    assert b"problems" not in (caught.value.response.body if caught.value.response else b"")


def test_item1_the_openapi_document_lists_the_503_everywhere() -> None:
    doc = document(handlers())
    for path, operations in doc["paths"].items():
        for method, operation in operations.items():
            if method == "servers" or path == "/metrics":
                continue
            assert "503" in operation["responses"], (path, method)
            assert "Misconfigured" in operation["responses"]["503"]["description"]


def test_item1_every_numeric_setting_is_checked(tmp_path: Path) -> None:
    from jupyter_suspend.server.backends.local import LocalBackend
    from jupyter_suspend.server.configuration import number_problems
    from jupyter_suspend.server.idle_policy import IdlePolicy

    policy = IdlePolicy(tick_seconds=0.0, break_even_factor=-1.0, default_cycle_seconds=float("nan"))
    found = {p.setting: p.message for p in policy.configuration_problems()}
    assert found == {
        "IdlePolicy.tick_seconds": "0.0 is not allowed; allowed: a number above 0",
        "IdlePolicy.break_even_factor": "-1.0 is negative; allowed: 0 or more",
        "IdlePolicy.default_cycle_seconds": "nan is not a number; allowed: 0 or more",
    }
    backend = LocalBackend(release_timeout=-5.0, capacity_retry_seconds=0.0)
    assert {p.setting for p in number_problems(backend)} == {
        "LocalBackend.release_timeout",
        "LocalBackend.capacity_retry_seconds",
    }
    assert IdlePolicy().configuration_problems() == []
    assert number_problems(LocalBackend()) == []


def test_item1_an_unknown_backend_names_the_allowed_ones(tmp_path: Path) -> None:
    app = SuspendApp(backend="nowhere")
    app.serverapp = None
    problems, backend, _policy = app.configuration_problems()
    assert backend is None
    assert [p.setting for p in problems] == ["SuspendApp.backend"]
    assert "allowed: local, gke, kubeflow-notebook, kubeflow-workspace" in problems[0].message


async def test_item2_stop_extension_after_a_failed_load_touches_nothing() -> None:
    # initialize_settings never ran (a load that failed before it): nothing to stop, and no exception.
    await SuspendApp().stop_extension()


@pytest.mark.slow
@pytest.mark.parametrize(
    "extra",
    [
        "c.IdlePolicy.workload_classes = {'interactive-gpu': {'idle_secs': 5}}\n"
        "c.SuspendApp.flush_kernel_timeout = -1\n",
        "c.SuspendApp.backend = 'tests.backends:NoSuchBackend'\n",
    ],
    ids=["misconfigured", "backend-fails"],
)
def test_item2_a_real_server_stops_on_sigterm_after_a_bad_start(tmp_path: Path, extra: str) -> None:
    server = ServerProcess(tmp_path, tmp_path / "state", extra_config=extra).start()
    assert server.process is not None
    try:
        code, body = server.request("GET", "jupyter-suspend/api/status")
        assert (code, body["reason"]) == (503, MISCONFIGURED)
        # The CLI asking this server alone says so, with the next step (no Kubernetes involved).
        env = {k: v for k, v in os.environ.items() if k not in ("KUBECONFIG", "KUBERNETES_SERVICE_HOST")}
        done = subprocess.run(
            [sys.executable, "-m", "jupyter_suspend.cli.app", "status", "nb", f"--url={server.url}",
             f"--token={server.token}"],
            capture_output=True, text=True, timeout=120, env={**env, "HOME": str(tmp_path)},
        )  # fmt: skip
        assert done.returncode == 1, done.stderr
        assert "answered 503: jupyter-suspend is misconfigured" in done.stdout
        assert "fix the settings listed by the server" in done.stdout
        server.process.send_signal(signal.SIGTERM)
        started = time.monotonic()
        returncode = server.process.wait(30)
        # It stopped by itself (not killed), in seconds.
        assert returncode in (0, -signal.SIGTERM), returncode
        assert time.monotonic() - started < 20
    except subprocess.TimeoutExpired:
        pytest.fail(f"the server ignored SIGTERM: {server.log_path.read_text()[-2000:]}")
    finally:
        server.stop(signal.SIGKILL)
    log = server.log_path.read_text()
    assert "jupyter-suspend is misconfigured" in log
    assert "[E " in log
    assert "Bad config" not in log
    assert "Traceback" not in log


def test_item1_a_wrong_type_is_a_problem_and_the_other_settings_load() -> None:
    from traitlets.config import Config

    from jupyter_suspend.server.idle_policy import IdlePolicy

    policy = IdlePolicy(config=Config({"IdlePolicy": {"tick_seconds": "x", "break_even_factor": 2.0}}))
    # The good value is kept, the bad one is a problem (not an exception), its default kept.
    assert (policy.break_even_factor, policy.tick_seconds) == (2.0, 5.0)
    assert [p.setting for p in policy.configuration_problems()] == ["IdlePolicy.tick_seconds"]
