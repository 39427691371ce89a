"""``jupyter suspend release-check prepare|verify``: does a platform change keep live state?

*prepare* (on the current configuration) opens a canary notebook, runs a cell
in its kernel that loads the jupyter_suspend kernel helper (whose live-state
canary is 32 random bytes that exist only in that process's memory), registers
a small object as an application checkpoint and writes a small file next to
the notebook; then it suspends the environment through the server's API and
writes a record: the canary's SHA-256 and the kernel's identity (what the
live-state check records), the file's SHA-256, what the backend promises and
the times.

*verify* (on the new configuration) resumes the environment when it is still
suspended (or finds it resumed from outside), waits until it is ready, runs a
cell in the notebook's kernel and compares the kernel's canary with the record
using the server's own comparison (:func:`jupyter_suspend.server.live_state.compare`),
next to the server's ``POST verify`` verdict: ``LIVE`` only when the same process
came back, memory included. The file proves nothing about memory: a new
process with the same notebook open sees the same file. Exit 1 when the change
would lose live state without telling users (see :func:`judge`).
"""

from __future__ import annotations

import hashlib
import json
import os
import posixpath
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from traitlets import Bool, Float, Unicode

from jupyter_suspend.server.live_state import compare, record_from_flush

from ..common.times import rfc3339_epoch
from .base import BASE_FLAGS, EXIT_FAILED, EXIT_OK, CommandApp, GroupApp, UsageError
from .jupyter_client import (
    JupyterServerClient,
    KernelExecutionError,
    ServerError,
    ServerUnreachable,
    _quote_path,
    normalize_url,
)
from .kube import KUBE_ALIASES, KubeCommandApp

RECORD_KIND = "jupyter-suspend-release-check"
RECORD_VERSION = 1
DEFAULT_NOTEBOOK = "release-check/canary.ipynb"
DATA_FILE = "canary-data.txt"
#: The application checkpoint the canary kernel registers.
PAYLOAD_NAME = "release_check_payload"
NOTEBOOK_MARK = "jupyter_suspend_release_check"

#: The prepare cell: kept in the notebook too, so that the test notebook is reproducible.
PREPARE_CELL = f"""\
%load_ext jupyter_suspend
# jupyter suspend release-check: loading the extension gives this kernel its live-state canary,
# a random value that exists only in this process's memory (only its SHA-256 leaves it).
import secrets as _secrets
import jupyter_suspend
{PAYLOAD_NAME} = {{"purpose": "release-check", "values": [_secrets.randbelow(10**9) for _ in range(64)]}}
jupyter_suspend.register("{PAYLOAD_NAME}")  # an application checkpoint, written by the suspend's flush
with open("{DATA_FILE}", "w") as _fh:  # a small file the process used
    _fh.write(_secrets.token_hex(512) + "\\n")
"""

#: What the kernel says about itself: the helper's canary identity, the file it wrote, its environment.
#: Variable values never leave the kernel: only a short SHA-256 of each, to tell which one changed.
_IDENTITY = "__import__('json').dumps(__import__('jupyter_suspend.kernel.canary', fromlist=['x']).identity())"
_ENVIRONMENT = (
    "__import__('json').dumps({'python': __import__('platform').python_version(), "
    "'executable': __import__('sys').executable, "
    "'variables': {k: __import__('hashlib').sha256(v.encode()).hexdigest()[:16] "
    "for k, v in __import__('os').environ.items()}})"
)
_DATA_HASH = f"__import__('hashlib').sha256(open('{DATA_FILE}', 'rb').read()).hexdigest()"
PREPARE_EXPRESSIONS = {"identity": _IDENTITY, "environment": _ENVIRONMENT, "data_sha256": _DATA_HASH}
VERIFY_CELL = "# jupyter suspend release-check: a runnable cell\n1 + 1"
#: Run in the canary kernel at the end of verify: its application checkpoints go (the folder is the canary
#: notebook's own, derived from its path by the kernel helper; nothing of a user's is in it).
CLEANUP_CELL = """\
import shutil as _shutil
from jupyter_suspend.kernel.helper import current as _current
_release_check_folder = str(_current().folder()) if _current() is not None else ""
if _release_check_folder:
    _shutil.rmtree(_release_check_folder, ignore_errors=True)
"""
CLEANUP_EXPRESSIONS = {
    "folder": "_release_check_folder",
    "gone": "not __import__('os').path.exists(_release_check_folder)",
}
VERIFY_EXPRESSIONS = {"identity": _IDENTITY, "environment": _ENVIRONMENT}

#: Set per process or per kernel start, not by a configuration: never reported as a change.
VOLATILE_VARIABLES = frozenset({"JPY_PARENT_PID", "JPY_SESSION_NAME", "KERNEL_ID", "PWD", "OLDPWD", "SHLVL", "_"})

MEASURED_BY = {"server timeline": "; measured by the server", "upper bound": "; at most (this command's cell)"}

IN_FLIGHT = {"flushing", "snapshotting", "waiting_for_capacity", "restoring"}


def now_iso(stamp: float | None = None) -> str:
    moment = datetime.fromtimestamp(time.time() if stamp is None else stamp, tz=timezone.utc)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def check_notebook_path(path: str) -> str:
    """A notebook path inside the server's root: relative, no ``..``, ending in ``.ipynb``."""
    clean = path.strip().strip("/")
    parts = clean.split("/")
    if not clean.endswith(".ipynb") or any(p in {"", ".", ".."} for p in parts) or "\\" in clean or "\0" in clean:
        raise UsageError(f"--notebook must be a relative path ending in .ipynb without '..': {path!r}")
    return clean


def data_file_path(notebook: str) -> str:
    return posixpath.join(posixpath.dirname(notebook), DATA_FILE)


def load_json_answer(value: Any, what: str) -> dict[str, Any]:
    """A user expression that returned a JSON string (``json.dumps`` in the kernel)."""
    if isinstance(value, dict) and "error" in value:
        raise KernelExecutionError(f"the kernel could not report its {what}: {value['error']}")
    try:
        parsed = json.loads(value)
    except (TypeError, ValueError) as exc:
        raise KernelExecutionError(f"the kernel's {what} is not JSON: {str(value)[:200]}") from exc
    if not isinstance(parsed, dict):
        raise KernelExecutionError(f"the kernel's {what} is not an object")
    return parsed


def environment_changes(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    """Which kernel environment facts differ (variables by name only)."""
    old = {k: v for k, v in (before.get("variables") or {}).items() if k not in VOLATILE_VARIABLES}
    new = {k: v for k, v in (after.get("variables") or {}).items() if k not in VOLATILE_VARIABLES}
    return {
        "changed": sorted(k for k in old.keys() & new.keys() if old[k] != new[k]),
        "added": sorted(new.keys() - old.keys()),
        "removed": sorted(old.keys() - new.keys()),
        "python": {"before": before.get("python"), "after": after.get("python")},
        "executable": {"before": before.get("executable"), "after": after.get("executable")},
    }


def write_record_atomically(path: Path, record: dict[str, Any]) -> None:
    """Never a half-written record: a temporary file in the same folder, fsynced, renamed into place."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as fh:
            json.dump(record, fh, indent=2, sort_keys=True)
            fh.write("\n")
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def load_record(path: Path) -> dict[str, Any]:
    """The record prepare wrote; a :class:`UsageError` for anything else."""
    from jsonschema import Draft202012Validator

    try:
        text = path.read_text()
    except OSError as exc:
        raise UsageError(f"cannot read the record {str(path)!r}: {exc.strerror or exc}") from exc
    try:
        record = json.loads(text)
    except ValueError as exc:
        raise UsageError(f"the record {str(path)!r} is not JSON: {exc}") from exc
    if not isinstance(record, dict) or record.get("kind") != RECORD_KIND:
        raise UsageError(f"{str(path)!r} is not a release-check record (written by 'release-check prepare')")
    schema = cli_schema()
    validator = Draft202012Validator({"$defs": schema["$defs"], "$ref": "#/$defs/record"})
    errors = sorted(validator.iter_errors(record), key=lambda e: list(e.absolute_path))
    if errors:
        where = "/".join(str(p) for p in errors[0].absolute_path) or "(top)"
        raise UsageError(f"the record {str(path)!r} is not valid at {where}: {errors[0].message[:200]}")
    return record


def cli_schema() -> dict[str, Any]:
    from importlib.resources import files

    schema: dict[str, Any] = json.loads(
        files("jupyter_suspend.common.schemas").joinpath("cli-release-check.json").read_text()
    )
    return schema


def judge(
    verdict: str,
    promises_live: bool,
    server_restore: str | None,
    resume_failed: str | None,
    files_lost: list[str],
) -> tuple[bool, str]:
    """Would users lose something without being told? ``(passes, why)``."""
    if resume_failed:
        return False, f"the resume failed: {resume_failed}"
    if verdict == "MISMATCH":
        return False, "MISMATCH: what the kernel says does not add up with what was recorded or what the server says"
    if files_lost:
        return False, f"files the process used are lost or changed: {', '.join(files_lost)}"
    if verdict == "COLD" and promises_live and server_restore != "cold":
        return False, "the backend promises live memory, the kernel came back cold, and the server does not say so"
    if verdict == "COLD" and promises_live:
        return True, "live memory was lost, and the server tells users so (restore: cold); checkpoints are the fallback"
    if verdict == "COLD":
        return True, "this backend keeps files only: a cold restore is what it promises, and the server says cold"
    return True, "the same kernel process came back, memory included"


class ReleaseCheckCommand(CommandApp):
    """What both leaves share: the server, its token, the record, the deadlines."""

    schema_name = "release-check"

    url = Unicode("", help="The Jupyter server's URL, with its base URL (http://host:8888/user/alice/).").tag(
        config=True
    )
    token = Unicode("", help="The server's token (default: $JUPYTER_TOKEN).").tag(config=True)
    record = Unicode("release-check.json", help="The record prepare writes and verify reads.").tag(config=True)
    timeout = Float(
        300.0, help="Seconds to wait for the suspend (prepare) or the environment to be ready (verify)."
    ).tag(config=True)
    cell_timeout = Float(120.0, help="Seconds a cell in the canary kernel may take.").tag(config=True)
    poll_interval = Float(0.5, help="Seconds between two status requests while waiting.").tag(config=True)
    request_timeout = Float(
        10.0, help="Seconds one request may take; a server silent for longer is unreachable (or frozen)."
    ).tag(config=True)

    flags = BASE_FLAGS
    aliases: dict[Any, Any] = {
        "url": "ReleaseCheckCommand.url",
        "token": "ReleaseCheckCommand.token",
        "record": "ReleaseCheckCommand.record",
        "timeout": "ReleaseCheckCommand.timeout",
        "cell-timeout": "ReleaseCheckCommand.cell_timeout",
        "poll-interval": "ReleaseCheckCommand.poll_interval",
        "request-timeout": "ReleaseCheckCommand.request_timeout",
    }

    def client(self) -> JupyterServerClient:
        if not self.url:
            raise UsageError("--url is needed (the Jupyter server's URL, with its base URL)")
        try:
            normalize_url(self.url)
        except ValueError as exc:
            raise UsageError(str(exc)) from exc
        if min(self.timeout, self.cell_timeout, self.poll_interval, self.request_timeout) <= 0:
            raise UsageError("--timeout and the other durations must be positive")
        token = self.token or os.environ.get("JUPYTER_TOKEN", "")
        return JupyterServerClient(self.url, token, timeout=self.request_timeout)

    def progress(self, message: str) -> None:
        self.log.info("%s", message)

    def failed(self, result: dict[str, Any], message: str) -> int:
        result.update(ok=False, message=message)
        self.emit(result, f"release-check {result['command']}: FAILED: {message}")
        return EXIT_FAILED

    def wait_for(
        self, client: JupyterServerClient, done: Any, deadline: float, frozen_ok: bool = False
    ) -> tuple[dict[str, Any] | None, str]:
        """Poll the status until ``done(status)`` or the deadline; ``(status, "")`` or ``(last status, why not)``.

        With ``frozen_ok``, a server that stops answering after the suspend reached ``snapshotting`` is frozen
        inside its pod's snapshot (a GKE-like backend): that is the end of the suspend as seen from outside.
        """
        last: dict[str, Any] | None = None
        while True:
            try:  # one request never outlasts the deadline
                last = client.status(timeout=max(0.1, min(self.request_timeout, deadline - time.monotonic())))
            except ServerUnreachable as exc:
                if frozen_ok and last is not None and last.get("state") == "snapshotting":
                    return last, "frozen"
                if time.monotonic() >= deadline:
                    return last, f"the server did not answer: {exc}"
            except ServerError as exc:
                return last, str(exc)
            else:
                if done(last):
                    return last, ""
            if time.monotonic() >= deadline:
                state = last.get("state") if last else "unknown"
                return last, f"not done within {self.timeout:.0f} s (state {state})"
            time.sleep(min(self.poll_interval, max(0.0, deadline - time.monotonic())))


class ReleaseCheckPrepareApp(ReleaseCheckCommand):
    name = "suspend release-check prepare"
    description = "On the current configuration: start a canary notebook, record its live state, suspend."

    notebook = Unicode(DEFAULT_NOTEBOOK, help="The canary notebook (a path under the server's root).").tag(config=True)
    kernel_name = Unicode("python3", help="The kernel spec of the canary notebook.").tag(config=True)

    aliases = {
        **ReleaseCheckCommand.aliases,
        "notebook": "ReleaseCheckPrepareApp.notebook",
        "kernel": "ReleaseCheckPrepareApp.kernel_name",
    }

    def run(self) -> int:
        client = self.client()
        notebook = check_notebook_path(self.notebook)
        record_path = Path(self.record)
        if not record_path.parent.is_dir():
            raise UsageError(f"the record's folder does not exist: {str(record_path.parent)!r}")
        result: dict[str, Any] = {"command": "prepare", "ok": False, "record": str(record_path), "notebook": notebook}
        try:
            return self._prepare(client, notebook, record_path, result)
        except (ServerUnreachable, ServerError, KernelExecutionError) as exc:
            return self.failed(result, str(exc))

    def _prepare(self, client: JupyterServerClient, notebook: str, record_path: Path, result: dict[str, Any]) -> int:
        times: dict[str, str] = {"started": now_iso()}
        status = client.status()
        backend = status["backend"]
        if not status.get("can_suspend"):
            return self.failed(result, f"the environment cannot be suspended now (state {status.get('state')})")
        if client.session_for(notebook) is not None:
            raise UsageError(f"{notebook} already has a running kernel: pass another --notebook")
        if not is_canary_or_absent(client, notebook):
            raise UsageError(f"{notebook} exists and is not a release-check canary notebook: pass another --notebook")

        # The notebook first, so that the kernel is the notebook's (a session at its path).
        client.ensure_directory(posixpath.dirname(notebook))
        client.save_notebook(notebook, canary_notebook(self.kernel_name))
        session = client.start_session(notebook, self.kernel_name)
        kernel_id = session["kernel"]["id"]
        self.progress(f"kernel {kernel_id} started for {notebook}")
        data_path = data_file_path(notebook)
        try:
            ran = client.execute(kernel_id, PREPARE_CELL, PREPARE_EXPRESSIONS, timeout=self.cell_timeout)
            if ran.status != "ok":
                raise KernelExecutionError(
                    f"the canary cell failed in kernel {kernel_id}: {ran.error} "
                    "(the kernel needs jupyter_suspend: pip install 'jupyter_suspend[kernel]' in its environment)"
                )
            identity = load_json_answer(ran.expressions.get("identity"), "live-state canary")
            environment = load_json_answer(ran.expressions.get("environment"), "environment")
            seen = client.read_file(data_path)
            if seen is None or sha256(seen) != ran.expressions.get("data_sha256"):
                # The kernel's working folder is not the notebook's: verify would look for another file.
                raise KernelExecutionError(f"the file the kernel wrote is not {data_path} as the server sees it")
        except (KernelExecutionError, ServerError, ServerUnreachable) as exc:
            # Nothing suspended: leave no canary kernel behind (a retry would find the notebook busy).
            client.request("DELETE", f"api/sessions/{session['id']}")
            return self.failed(result, f"{exc}; its kernel was shut down, nothing was suspended")
        times["cell_ran"] = now_iso(ran.replied_at)

        promises_live = bool(backend["capabilities"].get("keeps_live_memory"))
        self.progress(f"suspending through the API (backend {backend['name']})")
        times["suspend_requested"] = now_iso()
        started = client.api("POST", "suspend", {"reason": "jupyter suspend release-check"}, expect=(202,))
        operation_id = started["operation"]["id"]
        deadline = time.monotonic() + self.timeout

        def suspended(s: dict[str, Any]) -> bool:
            op = s.get("operation") or {}
            return op.get("id") == operation_id and not op.get("in_progress")

        final, problem = self.wait_for(client, suspended, deadline, frozen_ok=True)
        times["suspend_finished"] = now_iso()
        state = final.get("state") if final else None
        outcome = "frozen" if problem == "frozen" else state
        if problem and problem != "frozen":
            return self.failed(result, f"the suspend did not finish: {problem}")
        if outcome not in {"suspended", "ready", "frozen"}:
            op = (final or {}).get("operation") or {}
            return self.failed(result, f"the suspend ended in state {state}: {op.get('message') or ''}".rstrip(": "))

        record = {
            "kind": RECORD_KIND,
            "version": RECORD_VERSION,
            "server_url": client.url,
            "notebook": notebook,
            "kernel_id": kernel_id,
            "kernel_name": self.kernel_name,
            "session_id": session["id"],
            "canary": {k: identity.get(k) for k in ("hash", "pid", "process_start", "hostname", "boot_id", "created")},
            "files": [{"path": data_path, "sha256": sha256(seen), "bytes": len(seen)}],
            "checkpoints": [PAYLOAD_NAME],
            "kernel_environment": environment,
            "backend": {"name": backend["name"], "capabilities": backend["capabilities"]},
            "promises_live_memory": promises_live,
            "suspend": {
                "operation_id": operation_id,
                "outcome": outcome,
                "restore": (final or {}).get("restore"),
                "message": (final or {}).get("message"),
            },
            "times": times,
        }
        write_record_atomically(record_path, record)
        result.update(
            ok=True,
            message=f"suspended ({outcome}); record written to {record_path}",
            kernel_id=kernel_id,
            backend=record["backend"],
            promises_live_memory=promises_live,
            suspend=record["suspend"],
            times=times,
        )
        text = (
            f"release-check prepare: {notebook} (kernel {kernel_id}) on backend {backend['name']} "
            f"({'promises live memory' if promises_live else 'files and application checkpoints only'})\n"
            f"  canary recorded (SHA-256 {identity.get('hash', '')[:12]}…, pid {identity.get('pid')}), "
            f"file {data_path}, checkpoint {PAYLOAD_NAME}\n"
            f"  suspend {operation_id}: {outcome}\n"
            f"  record: {record_path}  (next, on the new configuration: jupyter suspend release-check verify "
            f"--url URL --record {record_path})"
        )
        self.emit(result, text)
        return EXIT_OK


def is_canary_or_absent(client: JupyterServerClient, notebook: str) -> bool:
    """Prepare overwrites only its own canary notebook, never a user's."""
    try:
        content = client.read_notebook(notebook)
    except ServerError:  # a folder, a file that is no notebook, ...
        return False
    return content is None or NOTEBOOK_MARK in (content.get("metadata") or {})


def canary_notebook(kernel_name: str) -> dict[str, Any]:
    return {
        "nbformat": 4,
        "nbformat_minor": 5,
        "metadata": {
            "kernelspec": {"name": kernel_name, "display_name": kernel_name, "language": "python"},
            NOTEBOOK_MARK: {"version": RECORD_VERSION},
        },
        "cells": [
            {
                "id": "release-check-canary",
                "cell_type": "code",
                "metadata": {},
                "execution_count": None,
                "outputs": [],
                "source": PREPARE_CELL,
            }
        ],
    }


class ReleaseCheckVerifyApp(ReleaseCheckCommand, KubeCommandApp):
    name = "suspend release-check verify"
    description = (
        "On the new configuration: resume the canary environment (if still suspended) and report whether its "
        "live state came back: LIVE / COLD / MISMATCH, files, checkpoints, resume to runnable cell."
    )

    resume_workload = Unicode(
        "",
        help="First resume this Kubernetes environment from outside (as jupyter suspend resume NAME --wait; "
        "with --kind, --namespace, --kubeconfig, --context), then check the server.",
    ).tag(config=True)
    kind = Unicode("statefulset", help="What --resume names: statefulset, notebook (Kubeflow v1) or workspace.").tag(
        config=True
    )

    aliases = {
        **ReleaseCheckCommand.aliases,
        **KUBE_ALIASES,
        "resume": "ReleaseCheckVerifyApp.resume_workload",
        "kind": "ReleaseCheckVerifyApp.kind",
    }
    keep = Bool(False, help="Keep the canary (kernel, notebook, files, checkpoints) for inspection.").tag(config=True)
    flags = {
        **BASE_FLAGS,
        "keep": ({"ReleaseCheckVerifyApp": {"keep": True}}, "Keep the canary for inspection (default: removed)."),
    }
    _client: JupyterServerClient | None = None

    def run(self) -> int:
        client = self._client = self.client()
        record = load_record(Path(self.record))
        outside = self._outside_request()
        result: dict[str, Any] = {
            "command": "verify",
            "ok": False,
            "record": self.record,
            "notebook": record["notebook"],
        }
        try:
            requested_at = None
            if outside is not None:  # first: on Kubernetes the server answers only once its pod is back
                requested_at = now_iso()
                failure = self._resume_from_outside(outside, result)
                if failure:
                    result["resume"] = {"by": "this command", "requested_at": requested_at, "ready_at": None}
                    return self._report(record, result, failure=failure)
            self._check_same_environment(client, record)
            return self._verify(client, record, result, requested_at)
        except (ServerUnreachable, ServerError, KernelExecutionError) as exc:
            return self.failed(result, str(exc))

    def _outside_request(self) -> Any:
        """The resume from outside asked with --resume (checked before anything is done), or None."""
        if not self.resume_workload:
            return None
        from .resume import Request, check_request

        request = Request(
            kind=self.kind, name=self.resume_workload, wait=True, timeout=self.timeout, poll_interval=self.poll_interval
        )
        check_request(request)
        return request

    def _resume_from_outside(self, request: Any, result: dict[str, Any]) -> str | None:
        """``jupyter suspend resume NAME --wait`` (its core, under its Lease) up to a Ready pod; why it failed."""
        from .resume import connect_kube, resume_environment

        # Without the server's URL the resume follows the pod to Ready; the server's own state is waited for
        # next, by verify, which also resumes a server that is still suspended (the local stand-in).
        kube = connect_kube(self.api_client(), self.target_namespace(), timeout=min(10.0, self.request_timeout))
        self.progress(f"resuming {request.kind}/{request.name} from outside")
        answer, code = resume_environment(kube, request)
        result["outside_resume"] = {
            "workload": f"{request.kind}/{request.name}",
            "namespace": str(answer.get("namespace") or ""),
            "state": str(answer.get("state") or ""),
            "action": str(answer.get("action") or ""),
            "message": str(answer.get("message") or ""),
        }
        return None if code == EXIT_OK else f"{request.kind}/{request.name}: {answer.get('message')}"

    def _check_same_environment(self, client: JupyterServerClient, record: dict[str, Any]) -> None:
        """A record of another server (no such suspend in its journal) is a usage error: nothing is done."""
        try:
            timeline = client.api("GET", "timeline")
        except ServerError as exc:
            raise UsageError(f"{client.url} does not answer as a jupyter-suspend server: {exc}") from exc
        operation_id = record["suspend"]["operation_id"]
        if not any(c.get("id") == operation_id for c in timeline.get("cycles", [])):
            raise UsageError(
                f"the record's suspend {operation_id} is not in the journal of {client.url}: "
                "the record is from another server or environment"
            )

    def _verify(
        self, client: JupyterServerClient, record: dict[str, Any], result: dict[str, Any], requested_at: str | None
    ) -> int:
        deadline = time.monotonic() + self.timeout
        status = client.status()
        resume: dict[str, Any] = {"by": "outside", "requested_at": None, "ready_at": None}
        if requested_at is not None:  # this command resumed the workload (--resume)
            resume.update(by="this command", requested_at=requested_at)
        failure: str | None = None
        if status["state"] == "suspended":
            if not status.get("can_resume"):
                return self.failed(
                    result,
                    "the environment is suspended and this server cannot resume it "
                    f"(backend {status['backend']['name']}): resume it from outside first "
                    "(jupyter suspend resume NAME)",
                )
            resume.update(by="this command", requested_at=resume["requested_at"] or now_iso())
            self.progress("resuming through the API")
            client.api("POST", "resume", {"reason": "jupyter suspend release-check verify"}, expect=(202,))

        def settled(s: dict[str, Any]) -> bool:
            op = s.get("operation") or {}
            return s.get("state") not in IN_FLIGHT | {"suspended"} and not op.get("in_progress")

        final, problem = self.wait_for(client, settled, deadline)
        status = final or status
        if problem:
            failure = f"not ready: {problem}"
        elif status["state"] == "failed":
            fail = status.get("failure") or {}
            failure = f"{fail.get('message') or status.get('message')}"
        resume["ready_at"] = now_iso()
        if resume["by"] == "outside":
            resume["requested_at"] = self._outside_resume_time(client, record)
        result["server"] = {"state": status["state"], "restore": status.get("restore"), "message": status["message"]}
        result["resume"] = resume
        if failure:
            return self._report(record, result, failure=failure)

        session = client.session_for(record["notebook"])
        if session is None:
            return self._report(record, result, failure=f"no kernel runs for {record['notebook']} after the resume")
        kernel_id = session["kernel"]["id"]
        ran = client.execute(kernel_id, VERIFY_CELL, VERIFY_EXPRESSIONS, timeout=self.cell_timeout)
        if ran.status != "ok":
            return self._report(record, result, failure=f"the canary kernel could not run a cell: {ran.error}")
        resume["runnable_at"] = now_iso(ran.replied_at)
        self._time_to_runnable(client, record, resume, ran.replied_at)
        identity = load_json_answer(ran.expressions.get("identity"), "live-state canary")
        environment = load_json_answer(ran.expressions.get("environment"), "environment")

        result["kernel_id"] = kernel_id
        result["files"] = self._files(client, record)
        result["kernel_environment"] = environment_changes(record["kernel_environment"], environment)
        result["server_verification"] = self._server_verdict(client, kernel_id)
        restored = result["server_verification"]["checkpoints_restored"]
        result["canary"] = self._canary_verdict(record, kernel_id, identity, restored)
        return self._report(record, result)

    def _cycle(self, client: JupyterServerClient, record: dict[str, Any]) -> dict[str, Any]:
        timeline = client.api("GET", "timeline")
        cycle = next((c for c in timeline["cycles"] if c["id"] == record["suspend"]["operation_id"]), None)
        return cycle or {}

    def _outside_resume_time(self, client: JupyterServerClient, record: dict[str, Any]) -> str | None:
        requested: str | None = self._cycle(client, record).get("times", {}).get("resume_requested")
        return requested

    def _time_to_runnable(
        self, client: JupyterServerClient, record: dict[str, Any], resume: dict[str, Any], cell_ran: float
    ) -> None:
        """Resume request -> runnable cell: measured here when this command resumed; after a resume from
        outside, the server's own measurement (its timeline), else this cell's time, an upper bound."""
        requested = rfc3339_epoch(resume["requested_at"])
        if resume["by"] == "this command" and requested is not None:
            resume.update(seconds_to_runnable_cell=round(cell_ran - requested, 3), measured_by="this command")
            return
        server_seconds = self._cycle(client, record).get("durations", {}).get("resume_to_runnable")
        if isinstance(server_seconds, (int, float)):
            resume.update(seconds_to_runnable_cell=round(float(server_seconds), 3), measured_by="server timeline")
        elif requested is not None:
            resume.update(seconds_to_runnable_cell=round(cell_ran - requested, 3), measured_by="upper bound")
        else:
            resume.update(seconds_to_runnable_cell=None, measured_by="not measured")

    def _files(self, client: JupyterServerClient, record: dict[str, Any]) -> list[dict[str, Any]]:
        out = []
        for recorded in record["files"]:
            data = client.read_file(recorded["path"])
            present = data is not None
            out.append(
                {
                    "path": recorded["path"],
                    "present": present,
                    "same_content": present and sha256(data or b"") == recorded["sha256"],
                }
            )
        notebook = client.read_file(record["notebook"])
        out.append({"path": record["notebook"], "present": notebook is not None, "same_content": None})
        return out

    def _server_verdict(self, client: JupyterServerClient, kernel_id: str) -> dict[str, Any]:
        """The server's own ``POST verify`` against its journal (the checkpoints it restored, per name)."""
        code, answer = client.request(
            "POST", "jupyter-suspend/api/verify", {"kernel_id": kernel_id, "names": [PAYLOAD_NAME]}
        )
        if code != 200 or not isinstance(answer, dict):
            message = answer.get("message") if isinstance(answer, dict) else None
            return {"verdict": None, "message": f"HTTP {code}: {message}", "checkpoints_restored": []}
        return {
            "verdict": answer["verdict"],
            "message": answer["message"],
            "checkpoints_restored": answer.get("checkpoints_restored", []),
            "names": answer.get("details", {}).get("names", {}),
        }

    def _canary_verdict(
        self, record: dict[str, Any], kernel_id: str, identity: dict[str, Any], restored: list[str]
    ) -> dict[str, Any]:
        """The kernel's canary against the one recorded at prepare, by the server's comparison."""
        recorded = record_from_flush(
            {"kernel_id": record["kernel_id"], "path": record["notebook"], "canary": record["canary"]},
            "release-check prepare",
            record["suspend"]["operation_id"],
            record["times"].get("suspend_requested"),
        )
        observed = {
            "canary_hash": identity.get("hash"),
            "pid": identity.get("pid"),
            "process_start": identity.get("process_start"),
            "restored": restored,  # what the server put back into the kernel, for the message
        }
        verdict = compare(kernel_id, observed, recorded)
        return {
            "verdict": verdict["verdict"],
            "message": verdict["message"],
            "recorded_hash": record["canary"].get("hash"),
            "observed_hash": identity.get("hash"),
            "same_kernel_id": kernel_id == record["kernel_id"],
        }

    def _report(self, record: dict[str, Any], result: dict[str, Any], failure: str | None = None) -> int:
        server = result.get("server") or {}
        canary = result.get("canary") or {}
        server_check = result.get("server_verification") or {}
        verdict = canary.get("verdict")
        notes: list[str] = []
        if verdict == "COLD" and server.get("restore") == "live":
            verdict = "MISMATCH"
            notes.append("the server says the restore was live, but the kernel's canary is not the recorded one")
        if verdict in {"LIVE", "COLD"} and server_check.get("verdict") not in {None, verdict}:
            notes.append(f"the server's own check says {server_check['verdict']}: {server_check.get('message')}")
            verdict = "MISMATCH"
        files_lost = [f["path"] for f in result.get("files", []) if not f["present"] or f["same_content"] is False]
        passes, why = judge(
            verdict or "UNKNOWN", bool(record["promises_live_memory"]), server.get("restore"), failure, files_lost
        )
        result.update(
            ok=passes,
            restore=verdict,
            reason=why,
            notes=notes,
            backend={"name": record["backend"]["name"], "promises_live_memory": record["promises_live_memory"]},
            checkpoints_restored=server_check.get("checkpoints_restored", []),
            message=why,
        )
        result.setdefault("resume", None)
        result.setdefault("server", None)
        if not self.keep and self._client is not None:
            if failure is None and (result.get("server") or {}).get("state") in ("ready", "running"):
                result["cleanup"] = self._cleanup(self._client, record, result.get("kernel_id"))
            else:  # no verdict yet: the canary stays for the next verify
                result["cleanup"] = {
                    "removed": [],
                    "not_removed": [
                        f"the canary ({record['notebook']}, its kernel and files): kept because the check did not "
                        "finish; run verify again (it removes them), or delete them by hand"
                    ],
                }
        result["table"] = self._table(record, result)
        self.emit(result, self._text(result))
        return EXIT_OK if passes else EXIT_FAILED

    def _cleanup(self, client: JupyterServerClient, record: dict[str, Any], kernel_id: Any) -> dict[str, list[str]]:
        """Leave nothing of the check in the user's environment: the canary's checkpoints (through its kernel),
        the kernel (its session), the file it wrote, the notebook, and the folder when it is left empty.
        Each step is tried on its own; what could not be removed is said, with why."""
        removed: list[str] = []
        not_removed: list[str] = []
        notebook = record["notebook"]
        try:
            session = client.session_for(notebook)
        except (ServerError, ServerUnreachable) as exc:
            session = None
            not_removed.append(f"the canary kernel, if any: the sessions could not be listed ({exc})")
        if session is not None:
            kid = session["kernel"]["id"]
            try:
                ran = client.execute(kid, CLEANUP_CELL, CLEANUP_EXPRESSIONS, timeout=self.cell_timeout)
                folder = ran.expressions.get("folder")
                if ran.status == "ok" and folder and ran.expressions.get("gone") is True:
                    removed.append(f"checkpoints {folder}")
                elif ran.status == "ok" and not folder:
                    pass  # the helper is not loaded in it: it wrote no checkpoints
                else:
                    not_removed.append(f"checkpoints {folder or '(unknown folder)'}: {ran.error or 'still there'}")
            except (KernelExecutionError, ServerError, ServerUnreachable) as exc:
                not_removed.append(f"the canary's checkpoints: its kernel could not run the cleanup ({exc})")
            code, answer = client.request("DELETE", f"api/sessions/{session['id']}")
            if code == 204:
                removed.append(f"kernel {kid} (session of {notebook})")
            else:
                not_removed.append(f"kernel {kid}: HTTP {code} {(answer or {}).get('message', '')}".rstrip())
        elif kernel_id is None and not not_removed:
            not_removed.append("the canary's checkpoints: no canary kernel runs to remove them")
        for path in [f["path"] for f in record.get("files", [])] + [notebook]:
            code, answer = client.request("DELETE", f"api/contents/{_quote_path(path)}")
            if code == 204:
                removed.append(f"file {path}")
            elif code != 404:
                not_removed.append(f"file {path}: HTTP {code} {(answer or {}).get('message', '')}".rstrip())
        folder = posixpath.dirname(notebook)
        if folder:
            code, listing = client.request("GET", f"api/contents/{_quote_path(folder)}?content=1")
            left = listing.get("content") if code == 200 and isinstance(listing, dict) else None
            if left == []:
                code, answer = client.request("DELETE", f"api/contents/{_quote_path(folder)}")
                if code == 204:
                    removed.append(f"folder {folder}")
                else:
                    not_removed.append(f"folder {folder}: HTTP {code} {(answer or {}).get('message', '')}".rstrip())
            elif left:
                not_removed.append(f"folder {folder}: it holds other files ({', '.join(e['name'] for e in left)})")
        return {"removed": removed, "not_removed": not_removed}

    @staticmethod
    def _table(record: dict[str, Any], result: dict[str, Any]) -> list[list[str]]:
        rows: list[list[str]] = []
        canary = result.get("canary") or {}
        restore = result.get("restore") or "—"
        detail = canary.get("message") or result["reason"]
        if canary.get("verdict") and canary["verdict"] != restore:  # overruled by a cross-check (see the notes)
            detail = f"the canary alone says {detail}"
        rows.append(["restore", restore, detail])
        for note in result.get("notes", []):
            rows.append(["", "", note])
        server = result.get("server") or {}
        if server:
            said = server["state"] + (f" / {server['restore']}" if server.get("restore") else "")
            rows.append(["server says", said, server.get("message") or ""])
        promise = "live memory" if record["promises_live_memory"] else "files and application checkpoints only"
        rows.append(["backend", record["backend"]["name"], f"promised at prepare: {promise}"])
        for entry in result.get("files", []):
            if not entry["present"]:
                rows.append(["file", "MISSING", entry["path"]])
            elif entry["same_content"] is None:
                rows.append(["file", "present", entry["path"]])
            else:
                rows.append(["file", "same" if entry["same_content"] else "CHANGED", f"{entry['path']} (SHA-256)"])
        if "server_verification" in result:
            restored = result["checkpoints_restored"]
            rows.append(
                [
                    "checkpoints restored",
                    ", ".join(restored) if restored else "none",
                    f"recorded at prepare: {', '.join(record['checkpoints'])}",
                ]
            )
        env = result.get("kernel_environment")
        if env:
            changed = [f"{k} changed" for k in env["changed"]] + [f"{k} added" for k in env["added"]]
            changed += [f"{k} removed" for k in env["removed"]]
            for fact in ("python", "executable"):
                if env[fact]["before"] != env[fact]["after"]:
                    changed.append(f"{fact} {env[fact]['before']} -> {env[fact]['after']}")
            rows.append(["kernel environment", "changed" if changed else "same", "; ".join(changed) or "—"])
        outside = result.get("outside_resume")
        if outside:
            rows.append([f"resume {outside['workload']}", outside["state"], outside["message"]])
        resume = result.get("resume") or {}
        if resume:
            seconds = resume.get("seconds_to_runnable_cell")
            rows.append(
                [
                    "resume -> runnable cell",
                    f"{seconds:.2f} s" if isinstance(seconds, (int, float)) else "not measured",
                    ("resumed by this command" if resume["by"] == "this command" else "resumed from outside")
                    + MEASURED_BY.get(resume.get("measured_by", ""), ""),
                ]
            )
        rows.append(["verdict", "PASS" if result["ok"] else "FAIL", result["reason"]])
        cleanup = result.get("cleanup")
        if cleanup is not None:
            rows.append(["removed", str(len(cleanup["removed"])), "; ".join(cleanup["removed"]) or "nothing"])
            for left in cleanup["not_removed"]:
                rows.append(["NOT removed", "", left])
        return rows

    @staticmethod
    def _text(result: dict[str, Any]) -> str:
        rows = [["check", "result", "detail"], *result["table"]]
        widths = [max(len(r[i]) for r in rows) for i in range(2)]
        lines = [f"release-check verify: {result['notebook']}"]
        for i, row in enumerate(rows):
            lines.append(f"  {row[0]:<{widths[0]}}  {row[1]:<{widths[1]}}  {row[2]}".rstrip())
            if i == 0:
                lines.append(f"  {'-' * widths[0]}  {'-' * widths[1]}  ------")
        return "\n".join(lines)


class ReleaseCheckApp(GroupApp):
    name = "suspend release-check"
    description = "Check that a platform change keeps live state: prepare on the old configuration, verify on the new."
    subcommands = {
        "prepare": (ReleaseCheckPrepareApp, ReleaseCheckPrepareApp.description),
        "verify": (ReleaseCheckVerifyApp, ReleaseCheckVerifyApp.description),
    }
