"""``jupyter suspend release-check prepare|verify`` end to end against real ``jupyter server``
processes with real kernels; the command runs as the installed executable (a subprocess) where that
is what is shown, in this process elsewhere (the same application, faster).

* local backend: prepare, a resume from outside, verify -> COLD, told honestly, exit 0; prepare
  again, the server restarted with a changed kernel spec (a new configuration), verify --resume of a
  StatefulSet (on the real API server of tests/cluster/: its real StatefulSet controller makes the pod,
  the real scheduler places it on a fake GPU node, kwok runs it) then of the server -> COLD and the table
  names the changed variable, exit 0; wrong states, foreign notebooks and records, a failed outside
  resume -> nothing done;
* a snapshot-like platform (``tests.backends:SnapshotLikeBackend``, which keeps the kernel
  processes): a kernel without jupyter_suspend -> exit 1; verify -> LIVE; the kernel restarted by
  hand afterwards while the server still says live -> MISMATCH, exit 1;
* a server frozen in its pod's snapshot (SIGSTOP) -> prepare ends ``frozen``; verify's deadline holds;
* bad arguments and records -> exit 2, nothing done.
"""

from __future__ import annotations

import copy
import json
import os
import signal
import subprocess
import sys
import time
from importlib.resources import files
from pathlib import Path
from typing import Any

import nbformat
import pytest
from jsonschema import Draft202012Validator

from .cli_helpers import statefulset
from .cluster.control_plane import Cluster
from .cluster.notebook import get, running_pod
from .servers import ServerProcess

pytestmark = pytest.mark.slow

KERNEL = "release-python"
FAST = ("--poll-interval=0.1",)
SCHEMA = json.loads(files("jupyter_suspend.common.schemas").joinpath("cli-release-check.json").read_text())
OUTPUT = Draft202012Validator(SCHEMA, format_checker=Draft202012Validator.FORMAT_CHECKER)
RECORD = Draft202012Validator({"$defs": SCHEMA["$defs"], "$ref": "#/$defs/record"})


def release_check(*args: str, token: str = "", timeout: float = 120) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "JUPYTER_TOKEN"}
    if token:
        env["JUPYTER_TOKEN"] = token
    return subprocess.run(
        [sys.executable, "-m", "jupyter_suspend.cli.app", "release-check", *args, *FAST],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
    )


def in_process(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    """The same command in this process: ``(exit code, stdout, stderr)``."""
    from jupyter_suspend.cli import release_check as rc
    from jupyter_suspend.cli.app import SuspendCommandApp

    code: Any = 0
    try:
        SuspendCommandApp.launch_instance(["release-check", *args])
    except SystemExit as exc:
        code = exc.code
    finally:
        for app in (SuspendCommandApp, rc.ReleaseCheckApp, rc.ReleaseCheckPrepareApp, rc.ReleaseCheckVerifyApp):
            app.clear_instance()
    out, err = capsys.readouterr()
    return int(code or 0), out, err


def run_here(capsys: pytest.CaptureFixture[str], *args: str, token: str) -> subprocess.CompletedProcess[str]:
    """:func:`in_process` shaped like :func:`release_check` (which proves the installed command; this is faster)."""
    code, out, err = in_process(capsys, *args, f"--token={token}", *FAST)
    return subprocess.CompletedProcess(["release-check", *args], code, out, err)


def as_json(done: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    result: dict[str, Any] = json.loads(done.stdout)
    OUTPUT.validate(result)
    return result


def row(result: dict[str, Any], check: str) -> list[str]:
    return next(r for r in result["table"] if r[0] == check)


def kernel_spec(server: ServerProcess, channel: str, name: str = KERNEL, hide_helper: bool = False) -> None:
    """A kernel spec with one variable: changing it stands in for a new configuration. (Its own name:
    inside a virtualenv jupyter prefers the environment's ``python3`` spec to the user's.)"""
    folder = server.base / "data" / "kernels" / name
    folder.mkdir(parents=True, exist_ok=True)
    spec = {
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"]
        # A kernel environment without jupyter_suspend: importing it fails as if it were not installed.
        + (
            ["--InteractiveShellApp.exec_lines=import sys; sys.modules['jupyter_suspend'] = None"]
            if hide_helper
            else []
        ),
        "display_name": "Python 3 (release channel)",
        "language": "python",
        "env": {"RELEASE_CHANNEL": channel},
    }
    (folder / "kernel.json").write_text(json.dumps(spec))


@pytest.mark.cluster
def test_local_backend_prepare_and_verify_after_a_resume_and_after_a_new_configuration(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], cluster: Cluster, kube_ns: str
) -> None:
    state = tmp_path / "state"
    server = ServerProcess(tmp_path, state)
    kernel_spec(server, "stable")
    server.start()
    first_record, second_record = tmp_path / "first.json", tmp_path / "second.json"
    try:
        done = release_check(
            "prepare",
            "--json",
            f"--url={server.url}",
            f"--record={first_record}",
            f"--kernel={KERNEL}",
            token=server.token,
        )
        assert done.returncode == 0, done.stderr
        prepared = as_json(done)
        assert prepared["ok"] is True
        assert prepared["promises_live_memory"] is False
        assert prepared["suspend"]["outcome"] == "suspended"
        assert server.api("GET", "status")["state"] == "suspended"
        record = json.loads(first_record.read_text())
        RECORD.validate(record)
        # Only the canary's hash left the kernel; the secret itself is nowhere on disk.
        assert len(record["canary"]["hash"]) == 64
        assert record["kernel_name"] == KERNEL
        saved = json.loads((server.root_dir / "release-check" / "canary.ipynb").read_text())
        assert saved["metadata"]["kernelspec"]["name"] == KERNEL  # the notebook reopens on the same kernel spec
        assert "%load_ext jupyter_suspend" in "".join(saved["cells"][0]["source"])
        assert "RELEASE_CHANNEL" in record["kernel_environment"]["variables"]  # its value's hash only
        assert record["notebook"] == "release-check/canary.ipynb"
        data = (server.root_dir / "release-check" / "canary-data.txt").read_bytes()
        assert record["files"][0]["bytes"] == len(data)
        # Calls in the wrong state change nothing: a suspended environment cannot be prepared again.
        other = tmp_path / "other.json"
        code, out, _ = in_process(
            capsys, "prepare", f"--url={server.url}", f"--token={server.token}", f"--record={other}"
        )
        assert code == 1
        assert "cannot be suspended now (state suspended)" in out
        assert not other.exists()
        assert server.api("GET", "status")["state"] == "suspended"

        # (a) resumed from outside (as a returning user would), then verified: local keeps no memory.
        server.api("POST", "resume", {}, expect=202)
        server.wait(lambda s: s["state"] == "ready")
        done = run_here(  # --keep: the canary stays, for the checks below that prepare refuses its notebook
            capsys, "verify", "--json", "--keep", f"--url={server.url}", f"--record={first_record}", token=server.token
        )
        assert done.returncode == 0, done.stdout + done.stderr
        verified = as_json(done)
        assert "cleanup" not in verified
        assert verified["restore"] == "COLD"
        assert verified["canary"]["recorded_hash"] == record["canary"]["hash"]
        assert verified["canary"]["observed_hash"] != record["canary"]["hash"]
        assert verified["server"]["restore"] == "cold"
        assert verified["server_verification"]["verdict"] == "COLD"
        assert verified["checkpoints_restored"] == ["release_check_payload"]
        assert verified["files"][0] == {"path": "release-check/canary-data.txt", "present": True, "same_content": True}
        assert verified["kernel_environment"]["changed"] == []
        assert verified["resume"]["by"] == "outside"
        assert verified["resume"]["measured_by"] in {"server timeline", "upper bound"}
        assert verified["resume"]["seconds_to_runnable_cell"] > 0
        assert row(verified, "verdict")[1] == "PASS"
        assert "keeps files only" in verified["reason"]

        # Prepare never takes over a notebook that has a kernel or is not its own canary.
        nbformat.write(
            nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("x = 1")]), server.root_dir / "mine.ipynb"
        )
        mine = (server.root_dir / "mine.ipynb").read_bytes()
        for notebook, said in [
            ("release-check/canary.ipynb", "already has a running kernel"),
            ("mine.ipynb", "is not a release-check canary notebook"),
        ]:
            url, token = f"--url={server.url}", f"--token={server.token}"
            code, _, err = in_process(capsys, "prepare", url, token, f"--notebook={notebook}", f"--record={other}")
            assert code == 2, err
            assert said in err
        assert (server.root_dir / "mine.ipynb").read_bytes() == mine
        assert not other.exists()
        assert server.api("GET", "status")["state"] == "ready"

        # A second canary for the next check; the first one's kernel is shut down (one kernel to resume, not two).
        code, sessions = server.request("GET", "api/sessions")
        for session in sessions:
            assert server.request("DELETE", f"api/sessions/{session['id']}")[0] == 204
        done = run_here(
            capsys,
            "prepare",
            f"--url={server.url}",
            f"--record={second_record}",
            "--notebook=release-check/second.ipynb",
            f"--kernel={KERNEL}",
            token=server.token,
        )
        assert done.returncode == 0, done.stderr
        assert "suspended" in done.stdout
    finally:
        server.stop()

    # (b) the new configuration: a new server process, the kernel spec changed.
    server = ServerProcess(tmp_path, state)
    kernel_spec(server, "candidate")
    server.start()
    try:
        assert server.api("GET", "status")["state"] == "suspended"
        # A record naming a suspend this server never journaled: another environment's; nothing is done.
        foreign = json.loads(second_record.read_text())
        foreign["suspend"]["operation_id"] = "0123456789ab"
        (tmp_path / "foreign.json").write_text(json.dumps(foreign))
        done = run_here(
            capsys, "verify", f"--url={server.url}", f"--record={tmp_path / 'foreign.json'}", token=server.token
        )
        assert done.returncode == 2, done.stdout + done.stderr
        assert "not in the journal" in done.stderr
        assert server.api("GET", "status")["state"] == "suspended"

        # With --resume the platform's workload is resumed from outside first (jupyter suspend resume's core, on
        # the real API server, as the platform user whose kubeconfig it is: here the cluster's admin); one that does
        # not exist is a failed resume: exit 1, the server untouched.
        workload = statefulset("nb", namespace=kube_ns)
        # The fake GPU nodes carry GKE Sandbox's and the GPU pool's taints (tests/cluster/control_plane.py).
        workload["spec"]["template"]["spec"]["tolerations"] = [{"operator": "Exists", "effect": "NoSchedule"}]
        cluster.kubectl("create", "--validate=strict", "-f", "-", input=json.dumps(workload))
        kubeconfig = f"--kubeconfig={cluster.admin_kubeconfig}"
        namespace = f"--namespace={kube_ns}"
        done = run_here(
            capsys, "verify", "--json", f"--url={server.url}", f"--record={second_record}", kubeconfig, namespace,
            "--resume=missing", token=server.token,
        )  # fmt: skip
        assert done.returncode == 1, done.stdout + done.stderr
        missing = as_json(done)
        assert missing["outside_resume"]["state"] == "failed"
        assert "resume failed" in missing["reason"]
        assert server.api("GET", "status")["state"] == "suspended"

        done = release_check(
            "verify", f"--url={server.url}", f"--record={second_record}", kubeconfig, namespace, "--resume=nb",
            "--kind=statefulset", token=server.token,
        )  # fmt: skip
        assert done.returncode == 0, done.stdout + done.stderr
        resumed = get(cluster, kube_ns, "statefulset", "nb")
        assert resumed is not None
        assert resumed["spec"]["replicas"] == 1
        assert running_pod(cluster, kube_ns, "nb-0") is not None  # made by the real controller, run by kwok
        lines = done.stdout.splitlines()
        assert lines[0] == "release-check verify: release-check/second.ipynb"
        table = {line.split()[0]: line for line in lines[3:]}  # one table: check, result, detail
        assert table["restore"].split()[1] == "COLD"
        assert "RELEASE_CHANNEL changed" in next(
            line for line in lines if line.lstrip().startswith("kernel environment")
        )
        assert "resumed by this command" in next(line for line in lines if "runnable cell" in line)
        assert next(line for line in lines if "statefulset/nb" in line).split()[:3] == [
            "resume",
            "statefulset/nb",
            "ready",
        ]
        assert table["verdict"].split()[1] == "PASS"
        assert server.api("GET", "status")["state"] == "ready"
        # Item 6: verify cleaned up after itself and said what it removed; the first canary (kept) is untouched.
        removed = next(line for line in lines if line.lstrip().startswith("removed"))
        for said in (
            "checkpoints ",
            "kernel ",
            "file release-check/canary-data.txt",
            "file release-check/second.ipynb",
        ):
            assert said in removed, (said, removed)
        assert "NOT removed" in done.stdout
        assert "folder release-check: it holds other files (canary.ipynb" in done.stdout
        assert not (server.root_dir / "release-check" / "second.ipynb").exists()
        assert (server.root_dir / "release-check" / "canary.ipynb").exists()
        code, sessions = server.request("GET", "api/sessions")
        assert [s["path"] for s in sessions] == []
        checkpoints = state / "checkpoints"
        assert not any("second" in p.name for p in checkpoints.iterdir()), list(checkpoints.iterdir())
    finally:
        server.stop()


def test_item6_verify_removes_its_canary_and_says_what_it_removed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state = tmp_path / "state"
    server = ServerProcess(tmp_path, state).start()
    record = tmp_path / "record.json"
    try:
        done = run_here(capsys, "prepare", f"--url={server.url}", f"--record={record}", token=server.token)
        assert done.returncode == 0, done.stdout + done.stderr
        assert any((state / "checkpoints").iterdir())  # the flush wrote the canary's application checkpoint
        done = run_here(capsys, "verify", "--json", f"--url={server.url}", f"--record={record}", token=server.token)
        assert done.returncode == 0, done.stdout + done.stderr
        cleanup = as_json(done)["cleanup"]
        assert cleanup["not_removed"] == []
        kinds = sorted(item.split()[0] for item in cleanup["removed"])
        assert kinds == ["checkpoints", "file", "file", "folder", "kernel"], cleanup
        assert row(as_json(done), "removed")[1] == "5"
        # Nothing of the check is left: no kernel, no folder, no checkpoints.
        assert server.request("GET", "api/sessions")[1] == []
        assert not (server.root_dir / "release-check").exists()
        assert list((state / "checkpoints").iterdir()) == []
        assert server.api("GET", "status")["state"] == "ready"
    finally:
        server.stop()


SNAPSHOT_LIKE = "c.SuspendApp.backend = 'tests.backends:SnapshotLikeBackend'\n"


def test_live_platform_is_live_then_a_kernel_restarted_by_hand_is_a_mismatch(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    server = ServerProcess(tmp_path, tmp_path / "state", SNAPSHOT_LIKE)
    kernel_spec(server, "stable", name="no-helper", hide_helper=True)
    server.start()
    record_path = tmp_path / "record.json"
    try:
        # A kernel without the helper cannot hold the canary: exit 1, its kernel shut down, nothing suspended.
        done = run_here(capsys, "prepare", f"--url={server.url}", f"--record={record_path}", "--kernel=no-helper",
                        token=server.token)  # fmt: skip
        assert done.returncode == 1, done.stdout + done.stderr
        assert "ModuleNotFoundError: import of jupyter_suspend halted" in done.stdout
        assert "the kernel needs jupyter_suspend" in done.stdout
        assert server.request("GET", "api/sessions")[1] == []
        assert server.api("GET", "status")["state"] == "running"
        assert not record_path.exists()

        done = run_here(
            capsys, "prepare", "--json", f"--url={server.url}", f"--record={record_path}", token=server.token
        )
        assert done.returncode == 0, done.stderr
        prepared = as_json(done)
        assert prepared["promises_live_memory"] is True
        # The platform brought the pod back before prepare saw it suspended.
        assert prepared["suspend"]["outcome"] == "ready"
        assert prepared["suspend"]["restore"] == "live"

        done = run_here(  # --keep: verified again below, after a restart by hand
            capsys, "verify", "--json", "--keep", f"--url={server.url}", f"--record={record_path}", token=server.token
        )
        assert done.returncode == 0, done.stdout + done.stderr
        live = as_json(done)
        assert live["restore"] == "LIVE"
        assert live["canary"]["observed_hash"] == live["canary"]["recorded_hash"]
        assert live["server_verification"]["verdict"] == "LIVE"

        # Someone restarts the kernel by hand: memory gone, while the server still tells users "live".
        kernel_id = json.loads(record_path.read_text())["kernel_id"]
        server.request("POST", f"api/kernels/{kernel_id}/restart", {})
        assert server.api("GET", "status")["restore"] == "live"
        done = run_here(
            capsys, "verify", "--json", f"--url={server.url}", f"--record={record_path}", token=server.token
        )
        assert done.returncode == 1, done.stdout + done.stderr
        forged = as_json(done)
        assert forged["ok"] is False
        assert forged["restore"] == "MISMATCH"
        assert forged["canary"]["verdict"] == "COLD"  # the canary says: a new process
        assert any("server says the restore was live" in n for n in forged["notes"])
        assert row(forged, "restore")[2].startswith("the canary alone says COLD: new kernel process")
        assert row(forged, "verdict")[1] == "FAIL"
    finally:
        server.stop()


def test_a_server_frozen_in_its_pods_snapshot_ends_prepare_as_frozen(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """On GKE the server is inside the snapshot: from outside it stops answering once it is snapshotting."""
    config = SNAPSHOT_LIKE + "c.SnapshotLikeBackend.never_returns = True\n"
    server = ServerProcess(tmp_path, tmp_path / "state", config).start()
    assert server.process is not None
    record_path = tmp_path / "record.json"
    args = ["--json", f"--url={server.url}", f"--record={record_path}", "--poll-interval=0.1", "--request-timeout=2"]
    prepare = subprocess.Popen(
        [sys.executable, "-m", "jupyter_suspend.cli.app", "release-check", "prepare", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "JUPYTER_TOKEN": server.token},
    )
    try:
        server.wait(lambda s: s["state"] == "snapshotting", timeout=60)
        time.sleep(1.0)  # prepare, polling every 0.1 s, has seen it too
        os.kill(server.process.pid, signal.SIGSTOP)  # the snapshot freezes the pod, the server with it
        try:
            out, err = prepare.communicate(timeout=60)
        finally:
            os.kill(server.process.pid, signal.SIGCONT)
        assert prepare.returncode == 0, out + err
        prepared = as_json(subprocess.CompletedProcess(prepare.args, 0, out, err))
        assert prepared["suspend"]["outcome"] == "frozen"
        assert prepared["promises_live_memory"] is True
        RECORD.validate(json.loads(record_path.read_text()))

        # The pod never comes back: verify's deadline holds, and a resume that never ends is a failure.
        started = time.monotonic()
        done = run_here(capsys, "verify", "--json", f"--url={server.url}", f"--record={record_path}", "--timeout=2",
                        token=server.token)  # fmt: skip
        assert time.monotonic() - started < 6
        assert done.returncode == 1, done.stdout + done.stderr
        stuck = as_json(done)
        assert "not done within 2 s (state snapshotting)" in stuck["reason"]
        assert stuck["restore"] is None
        assert stuck["cleanup"]["removed"] == []
        assert "kept because the check did not finish" in stuck["cleanup"]["not_removed"][0]
    finally:
        if prepare.poll() is None:
            prepare.kill()
            prepare.communicate()
        server.stop(signal.SIGKILL)


def test_bad_arguments_and_records_exit_2_before_anything_is_done(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("JUPYTER_TOKEN", raising=False)
    good: dict[str, Any] = {
        "kind": "jupyter-suspend-release-check",
        "version": 1,
        "server_url": "http://127.0.0.1:1/",
        "notebook": "release-check/canary.ipynb",
        "kernel_id": "k",
        "kernel_name": "python3",
        "session_id": "s",
        "canary": {"hash": "a" * 64, "pid": 1, "process_start": 1.0, "hostname": "h", "boot_id": None, "created": 1.0},
        "files": [{"path": "release-check/canary-data.txt", "sha256": "b" * 64, "bytes": 3}],
        "checkpoints": ["release_check_payload"],
        "kernel_environment": {"python": "3", "executable": "python", "variables": {}},
        "backend": {"name": "local", "capabilities": {"keeps_live_memory": False}},
        "promises_live_memory": False,
        "suspend": {"operation_id": "op", "outcome": "suspended", "restore": None, "message": None},
        "times": {},
    }
    RECORD.validate(good)
    good_path = tmp_path / "good.json"
    good_path.write_text(json.dumps(good))
    wrong_type = copy.deepcopy(good)
    wrong_type["canary"]["hash"] = "not a hash"
    unknown_field = {**good, "extra": 1}
    cases = {
        "not-json.json": ("{ not json", "is not JSON"),
        "other-kind.json": (json.dumps({"kind": "something else"}), "is not a release-check record"),
        "wrong-type.json": (json.dumps(wrong_type), "is not valid at canary/hash"),
        "unknown-field.json": (json.dumps(unknown_field), "is not valid"),
    }
    # A port nothing listens on: exit 2 proves the record was refused before any request.
    url = "--url=http://127.0.0.1:9/"
    for name, (content, said) in cases.items():
        (tmp_path / name).write_text(content)
        code, out, err = in_process(capsys, "verify", url, f"--record={tmp_path / name}")
        assert code == 2, (name, err)
        assert said in err, (name, err)
        assert out == ""
    for args, said in [
        (("verify", url, f"--record={good_path}", "--resume=Not_A_Name"), "not a Kubernetes object"),
        (("verify", url, f"--record={good_path}", "--resume=nb", "--kind=pod"), "--kind 'pod'"),
        (("verify", f"--record={tmp_path / 'missing.json'}"), "--url is needed"),
        (("verify", url, f"--record={tmp_path / 'missing.json'}"), "cannot read the record"),
        (("verify", "--url=ftp://host/", f"--record={tmp_path / 'x.json'}"), "not an http(s) URL"),
        (("prepare", url, "--notebook=../outside.ipynb"), "without '..'"),
        (("prepare", url, "--notebook=notes.txt"), "ending in .ipynb"),
        (("prepare", url, f"--record={tmp_path / 'no' / 'such' / 'r.json'}"), "folder does not exist"),
        (("prepare", url, "--timeout=-1"), "must be positive"),
        (("prepare", "--bogus"), "--bogus"),
        ((), "a command is needed"),
    ]:
        code, out, err = in_process(capsys, *args)
        assert code == 2, (args, err)
        assert said in err, (args, err)
    # A server that does not answer is a failure of the check, not of the arguments.
    code, out, err = in_process(capsys, "prepare", "--json", url, f"--record={tmp_path / 'r.json'}")
    assert code == 1
    failed = json.loads(out)
    OUTPUT.validate(failed)
    assert failed["ok"] is False
    assert "127.0.0.1:9" in failed["message"]
    assert not (tmp_path / "r.json").exists()


@pytest.mark.parametrize(
    ("verdict", "promises_live", "server_restore", "resume_failed", "files_lost", "passes", "why"),
    [
        ("LIVE", True, "live", None, [], True, "same kernel process came back"),
        ("COLD", False, "cold", None, [], True, "keeps files only"),
        ("COLD", True, "cold", None, [], True, "the server tells users so"),
        ("COLD", True, None, None, [], False, "does not say so"),  # e.g. 'running', no restore kind
        ("COLD", True, "live", None, [], False, "does not say so"),
        ("MISMATCH", False, "cold", None, [], False, "MISMATCH"),
        ("LIVE", True, "live", None, ["a.txt"], False, "lost or changed: a.txt"),
        ("UNKNOWN", True, None, "not ready: state failed", [], False, "the resume failed: not ready"),
    ],
)
def test_when_the_check_fails(
    verdict: str,
    promises_live: bool,
    server_restore: str | None,
    resume_failed: str | None,
    files_lost: list[str],
    passes: bool,
    why: str,
) -> None:
    from jupyter_suspend.cli.release_check import judge

    result = judge(verdict, promises_live, server_restore, resume_failed, files_lost)
    assert result[0] is passes
    assert why in result[1]
