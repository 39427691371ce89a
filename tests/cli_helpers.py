"""Running ``jupyter suspend`` commands in tests (against the real control plane of tests/cluster/, or none).

* :func:`run_cli` runs one command in this process (fast) or, with ``subprocess=True``, as the real installed
  ``jupyter suspend`` executable; either way the result has the exit code, stdout, stderr and the ``--json`` answer.
* :func:`kube_client` is the real ``kubernetes`` ApiClient for a kubeconfig (for in-process cores in threads).
* :func:`validate_output` holds a ``--json`` answer to its ``cli-<command>.json`` schema.
* :func:`statefulset` is a one-pod notebook StatefulSet manifest.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import os
import subprocess as sp
import sys
from importlib.resources import files
from pathlib import Path
from typing import Any

from jsonschema import Draft202012Validator


@dataclasses.dataclass
class CliResult:
    code: int
    stdout: str
    stderr: str

    def json(self) -> Any:
        return json.loads(self.stdout)


def run_cli(
    *args: str,
    kubeconfig: str | None = None,
    subprocess: bool = False,
    env: dict[str, str] | None = None,
    timeout: float = 60.0,
) -> CliResult:
    """``jupyter suspend <args>`` (``--kubeconfig`` added when given); never raises for a non-zero exit."""
    argv = [*args, *([f"--kubeconfig={kubeconfig}"] if kubeconfig else [])]
    if subprocess:
        jupyter = Path(sys.executable).parent / "jupyter"
        done = sp.run(
            [str(jupyter), "suspend", *argv],
            capture_output=True,
            text=True,
            timeout=timeout,
            env={**os.environ, **(env or {})},
        )
        return CliResult(done.returncode, done.stdout, done.stderr)
    from jupyter_suspend.cli.app import SuspendCommandApp

    out, err = io.StringIO(), io.StringIO()
    code = 0
    app = SuspendCommandApp()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), _environ(env or {}):
        try:
            app.initialize(argv)
            app.start()
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        finally:
            # Jupyter applications are singletons: let the next command make its own.
            sub = app.subapp
            while sub is not None:
                type(sub).clear_instance()
                sub = getattr(sub, "subapp", None)
            SuspendCommandApp.clear_instance()
    return CliResult(code, out.getvalue(), err.getvalue())


@contextlib.contextmanager
def _environ(extra: dict[str, str]) -> Any:
    saved = {key: os.environ.get(key) for key in extra}
    os.environ.update(extra)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def kube_client(kubeconfig: str) -> Any:
    """The real client for ``kubeconfig`` (one per thread: its connection pool is small)."""
    from kubernetes import client, config

    configuration = client.Configuration()
    config.load_kube_config(config_file=kubeconfig, client_configuration=configuration, persist_config=False)
    return client.ApiClient(configuration)


def output_schema(command: str) -> dict[str, Any]:
    text = files("jupyter_suspend.common.schemas").joinpath(f"cli-{command}.json").read_text()
    schema: dict[str, Any] = json.loads(text)
    return schema


def validate_output(answer: Any, command: str) -> Any:
    """Raises when ``answer`` breaks ``cli-<command>.json``; returns it."""
    Draft202012Validator(output_schema(command), format_checker=Draft202012Validator.FORMAT_CHECKER).validate(answer)
    return answer


def statefulset(
    name: str, replicas: int = 0, namespace: str = "default", image: str = "jupyter/gpu:1"
) -> dict[str, Any]:
    labels = {"app": "notebook", "environment": name}
    return {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "replicas": replicas,
            "serviceName": name,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": dict(labels)},
                "spec": {"containers": [{"name": "notebook", "image": image}]},
            },
        },
    }
