#!/usr/bin/env python
"""Record the plugin's jest fixtures (``src/__tests__/fixtures.json``) from a real server.

Starts ``jupyter server`` with the extension (local backend, token auth) on a
temporary directory, opens a notebook, and walks the lifecycle the way a user
does: running, the dry-run preflight, a suspend, suspended, a refused second
suspend, a cold resume, ready, the timeline and a live-state check; then a
second notebook whose kernel cannot come back (its kernelspec is removed while
suspended), failed, and the acknowledge that leaves it. Every answer on the
way is checked against the API contract (``tests/servers.py`` does it for
each request), so fixtures that do not match their schemas are never written.

    python scripts/record-fixtures.py             # writes src/__tests__/fixtures.json
    python scripts/record-fixtures.py --out x.json

``tests/test_contract.py`` runs the same walk (:func:`record`) in the test suite.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tests.servers import ServerProcess  # noqa: E402

DEFAULT_OUT = ROOT / "src" / "__tests__" / "fixtures.json"


def _settled(status: dict[str, Any]) -> bool:
    return status["operation"] is not None and not status["operation"]["in_progress"]


def _open_notebook(server: ServerProcess, name: str, kernel_name: str = "python3") -> dict[str, Any]:
    notebook = {"cells": [], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    (server.root_dir / name).write_text(json.dumps(notebook))
    code, session = server.request(
        "POST", "api/sessions", {"path": name, "name": name, "type": "notebook", "kernel": {"name": kernel_name}}
    )
    assert code == 201, session
    _settle_kernel(server, session["kernel"]["id"])
    return dict(session)


def _settle_kernel(server: ServerProcess, kernel_id: str, timeout: float = 60) -> None:
    """Until the server reports the kernel idle: kernel_info round trips, each a busy -> idle on iopub.

    The server learns the state from iopub only; it can miss a kernel's first status messages (it
    subscribes late on a loaded machine) and then says "starting" until the next one. A new round trip
    every few seconds gives it one, where a single round trip and a long wait could time out.
    """
    deadline = time.monotonic() + timeout
    client = server.kernel_client(kernel_id, timeout=timeout)
    try:
        while True:
            client.kernel_info(reply=True, timeout=max(1.0, deadline - time.monotonic()))
            round_end = min(deadline, time.monotonic() + 3.0)
            while time.monotonic() < round_end:
                if server.request("GET", f"api/kernels/{kernel_id}")[1].get("execution_state") == "idle":
                    return
                time.sleep(0.1)
            assert time.monotonic() < deadline, f"the server never reported kernel {kernel_id} idle"
    finally:
        client.stop_channels()


def _install_kernelspec(server: ServerProcess, name: str) -> Path:
    spec = server.base / "data" / "kernels" / name
    spec.mkdir(parents=True, exist_ok=True)
    argv = [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"]
    (spec / "kernel.json").write_text(json.dumps({"argv": argv, "display_name": name, "language": "python"}))
    return spec


def record(base: Path) -> dict[str, Any]:
    """Walk a real server through running, suspended, ready (cold) and failed; return its answers by name.

    Names say which schema holds them: ``status_*`` status, ``preflight``,
    ``started_*`` the 202 answer, ``timeline``, ``verify_*``, ``error_*``.
    """
    server = ServerProcess(base, base / "state").start()
    answers: dict[str, Any] = {}
    try:
        session = _open_notebook(server, "nb.ipynb")
        kernel_id = session["kernel"]["id"]
        answers["status_running"] = server.api("GET", "status")
        answers["preflight"] = server.api("POST", "suspend", {"dry_run": True})
        answers["error_not_recorded"] = server.api("POST", "verify", {"kernel_id": kernel_id}, expect=404)
        answers["error_bad_request"] = server.api("POST", "suspend", {"dry_run": "yes"}, expect=400)

        answers["started_suspend"] = server.api("POST", "suspend", {"reason": "fixture"}, expect=202)
        answers["status_suspended"] = server.wait(_settled)
        assert answers["status_suspended"]["state"] == "suspended", answers["status_suspended"]
        answers["error_conflict"] = server.api("POST", "suspend", {}, expect=409)

        answers["started_resume"] = server.api("POST", "resume", {}, expect=202)
        answers["status_ready_cold"] = server.wait(lambda s: s["operation"]["kind"] == "resume" and _settled(s))
        assert answers["status_ready_cold"]["state"] == "ready", answers["status_ready_cold"]
        answers["timeline"] = server.api("GET", "timeline")
        _settle_kernel(server, kernel_id)
        answers["verify_cold"] = server.api("POST", "verify", {"kernel_id": kernel_id})

        # A kernel whose environment disappears while suspended cannot come back: failed
        # (when it is the only one: a resume that brings any kernel back is ready).
        code, _ = server.request("DELETE", f"api/sessions/{session['id']}")
        assert code == 204, code
        spec = _install_kernelspec(server, "gone-env")
        _open_notebook(server, "train.ipynb", "gone-env")
        server.api("POST", "suspend", {"reason": "fixture: environment removed"}, expect=202)
        assert server.wait(_settled)["state"] == "suspended"
        shutil.rmtree(spec)
        server.api("POST", "resume", {}, expect=202)
        answers["status_failed"] = server.wait(lambda s: s["operation"]["kind"] == "resume" and _settled(s))
        assert answers["status_failed"]["state"] == "failed", answers["status_failed"]
        answers["status_acknowledged"] = server.api("POST", "acknowledge", {})
        assert answers["status_acknowledged"]["state"] == "running", answers["status_acknowledged"]
    finally:
        server.stop()
    return answers


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="jupyter-suspend-fixtures-") as tmp:
        answers = record(Path(tmp))
    args.out.write_text(json.dumps(answers, indent=2) + "\n")
    print(f"wrote {len(answers)} answers to {args.out}")


if __name__ == "__main__":
    main()
