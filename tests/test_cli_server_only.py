"""Issue 17 item 7: ``jupyter suspend status/resume/snapshots list --url`` against a real notebook server on the
local backend, with no Kubernetes credentials anywhere (docs/trial.md on the local backend); and a command
that needs the cluster without credentials exits 3 (not 2, "bad arguments") and says what to do."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import nbformat
import pytest

from jupyter_suspend.cli.base import EXIT_NO_CREDENTIALS

from .cli_helpers import validate_output
from .servers import ServerProcess


def cli(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """The CLI as a user without any Kubernetes credentials runs it: no kubeconfig, not in a pod."""
    env = {k: v for k, v in os.environ.items() if k not in ("KUBECONFIG", "KUBERNETES_SERVICE_HOST", "JUPYTER_TOKEN")}
    env["HOME"] = str(home)
    return subprocess.run(
        [sys.executable, "-m", "jupyter_suspend.cli.app", *args], capture_output=True, text=True, timeout=120, env=env
    )


@pytest.fixture
def server(tmp_path: Path) -> Any:
    server = ServerProcess(tmp_path, tmp_path / "state").start()
    yield server
    server.stop()


@pytest.mark.slow
def test_item7_status_resume_and_snapshots_through_the_server_alone(server: ServerProcess, tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    url, token = server.url, server.token
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("x = 1")]), server.root_dir / "a.ipynb")
    code, session = server.request(
        "POST",
        "api/sessions",
        {"path": "a.ipynb", "name": "a.ipynb", "type": "notebook", "kernel": {"name": "python3"}},
    )
    assert code == 201, session

    done = cli(home, "status", "notebook", "--url", url, "--token", token, "--json")
    assert done.returncode == 0, done.stderr
    status = validate_output(json.loads(done.stdout), "status")
    assert (status["kind"], status["namespace"], status["state"]) == ("server", None, "ready")

    server.api("POST", "suspend", {"reason": "trial"}, expect=202)
    server.wait(lambda s: s["state"] == "suspended")
    done = cli(home, "status", "notebook", "--url", url, "--token", token, "--json")
    assert done.returncode == 0, done.stderr
    assert validate_output(json.loads(done.stdout), "status")["state"] == "suspended"

    done = cli(home, "snapshots", "list", "notebook", "--url", url, "--token", token, "--json")
    assert done.returncode == 0, done.stderr
    listing = validate_output(json.loads(done.stdout), "snapshots")
    assert listing["snapshots"] == []
    assert "keeps no snapshots" in listing["errors"][0]["message"]

    started = time.monotonic()
    done = cli(home, "resume", "notebook", "--url", url, "--token", token, "--wait", "--timeout", "90", "--json")
    assert done.returncode == 0, done.stderr
    resumed = validate_output(json.loads(done.stdout), "resume")
    assert (resumed["action"], resumed["state"], resumed["restore"]) == ("resumed", "ready", "cold")
    assert resumed["restore_source"] == "server"
    assert time.monotonic() - started < 90
    assert server.api("GET", "status")["state"] == "ready"
    # A second resume changes nothing.
    done = cli(home, "resume", "notebook", "--url", url, "--token", token, "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["action"] == "already_ready"
    # A wrong token: a failure that says what to do, exit 1, no Kubernetes error.
    done = cli(home, "status", "notebook", "--url", url, "--token", "wrong")
    assert done.returncode == 1
    assert "give the server's token" in done.stdout


@pytest.mark.slow
@pytest.mark.parametrize(
    "args",
    [("status", "notebook"), ("resume", "notebook"), ("snapshots", "list", "notebook"), ("release", "notebook")],
)
def test_item7_missing_credentials_exit_3_not_usage(tmp_path: Path, args: tuple[str, ...]) -> None:
    done = cli(tmp_path, *args)
    assert done.returncode == EXIT_NO_CREDENTIALS == 3, done.stderr
    assert "no Kubernetes credentials" in done.stderr
    assert "--url" in done.stderr
    assert "(see: jupyter" not in done.stderr  # not presented as a usage error
