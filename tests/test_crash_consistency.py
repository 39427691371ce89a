"""Crash consistency (issue 8, "Hostile input, kept"): a real server SIGKILLed at
each step of a suspend and a resume, and a disk that fails (full, read-only) at
journal and checkpoint writes. After a restart:

* the state reported is true: ``GET status`` agrees with the journal on disk
  and with the kernels really running;
* nothing is lost: the notebook file is intact, the checkpoint folder holds
  only complete generations, the newest of them the previous one or the new
  one whole, never a torn one;
* a retry succeeds: suspend or resume again reaches suspended / ready and the
  checkpointed value comes back into a kernel.

The steps are reached deterministically: a test backend
(``tests.crash_points.PausingLocalBackend``) stops at a named step of release
or restore; kernel code stops or fails a checkpoint file's write; server config
code fails the journal from the entry of a given kind on.
"""

from __future__ import annotations

import json
import signal
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import nbformat
import psutil
import pytest

from jupyter_suspend.common.checkpoints import folder_name
from jupyter_suspend.kernel.store import CheckpointStore

from .crash_points import JOURNAL_FAULT, KERNEL_WRITE_FAULT
from .servers import ServerProcess

pytestmark = pytest.mark.slow

NOTEBOOK = "work.ipynb"
#: Every server of this suite: the pausing local backend and the journal fault, both idle
#: until the test writes their control file.
CONFIG = (
    # Only this extension: each of the ~30 server starts is a second shorter.
    "c.ServerApp.jpserver_extensions = {{'jupyter_suspend': True, 'jupyterlab': False, 'jupyter_lsp': False,"
    " 'notebook_shim': False, 'jupyter_server_terminals': False}}\n"
    "c.SuspendApp.backend = 'tests.crash_points:PausingLocalBackend'\n"
    "c.PausingLocalBackend.control = {pause!r}\n" + JOURNAL_FAULT
)
STATE_KINDS = {"transition": "to", "recovered": "to", "server_started": "state"}


def settled(status: dict[str, Any]) -> bool:
    return not (status["operation"] or {}).get("in_progress")


@dataclass
class Scenario:
    """One environment: a notebook whose kernel registered ``x``; the newest
    checkpoint generation holds ``x == old`` and the kernel now holds ``x == new``.

    The cases share it, in order (each server start costs seconds on busy
    cores): a case that passes leaves it armed again (:func:`rearm`); after a
    case that fails, the next one starts from a new environment."""

    base: Path
    server: ServerProcess
    kernel_id: str = ""
    notebook: bytes = b""
    old: dict[str, int] = field(default_factory=dict)
    new: dict[str, int] = field(default_factory=dict)
    armed: bool = False

    @property
    def state_dir(self) -> Path:
        return self.server.state_dir

    @property
    def control(self) -> Path:
        return self.base / "fault"

    @property
    def pause(self) -> Path:
        return self.base / "pause"

    @property
    def config(self) -> str:
        return CONFIG.format(pause=str(self.pause), control=str(self.base / "journal-fault"))

    @property
    def folder(self) -> Path:
        return self.state_dir / "checkpoints" / folder_name(NOTEBOOK)

    def heal(self) -> None:
        """The disk works again; nothing pauses any more."""
        for control in (self.control, self.pause, self.base / "journal-fault"):
            for path in (control, Path(f"{control}.tripped"), Path(f"{control}.reached")):
                path.unlink(missing_ok=True)

    def restart(self, journal_fault: str = "") -> ServerProcess:
        """SIGKILL the server (its kernels die with it, as in a lost pod) and start another
        (on a healed disk, or with ``journal_fault`` failing the journal from the start)."""
        self.server.stop(signal.SIGKILL)
        self.heal()
        if journal_fault:
            (self.base / "journal-fault").write_text(journal_fault)
        self.server = ServerProcess(self.base, self.state_dir, self.config).start()
        return self.server


def run(server: ServerProcess, kernel_id: str, code: str) -> str:
    # A kernel_info round trip first (ServerProcess.kernel_client retries until its deadline): an
    # execute sent the moment a new kernel's channels open could have its IOPub output published
    # before this client's subscription joined, and execute_interactive then waits for nothing.
    client = server.kernel_client(kernel_id)
    out: list[str] = []

    def hook(msg: dict[str, Any]) -> None:
        if msg["msg_type"] == "stream":
            out.append(msg["content"]["text"])

    try:
        reply = client.execute_interactive(code, timeout=60, output_hook=hook)
    finally:
        client.stop_channels()
    assert reply["content"]["status"] == "ok", (reply["content"], "".join(out))
    return "".join(out)


def open_session(server: ServerProcess) -> str:
    code, session = server.request(
        "POST", "api/sessions", {"path": NOTEBOOK, "type": "notebook", "kernel": {"name": "python3"}}
    )
    assert code == 201, session
    return str(session["kernel"]["id"])


def arm(scenario: Scenario) -> None:
    """The kernel (fault hook installed, ``x`` registered) holds ``x`` one past the newest checkpoint."""
    n = scenario.old["gen"] + 1
    code = KERNEL_WRITE_FAULT.format(control=str(scenario.control))
    code += f"import jupyter_suspend\njupyter_suspend.register('x')\nx = {{'gen': {n}}}\n"
    run(scenario.server, scenario.kernel_id, "%load_ext jupyter_suspend\n" + code)
    scenario.new = {"gen": n}
    scenario.armed = True


def rearm(scenario: Scenario, kept: dict[str, int]) -> None:
    """After a case that passed: back to ready, and armed for the next case."""
    if scenario.server.api("GET", "status")["state"] == "suspended":
        scenario.server.api("POST", "resume", {}, expect=202)
        assert scenario.server.wait(settled)["state"] == "ready"
        assert value_of_x(scenario.server, scenario.kernel_id) == kept
    scenario.old = kept
    arm(scenario)


def build(base: Path) -> Scenario:
    current = Scenario(base, ServerProcess(base, base / "state"))
    current.server = ServerProcess(base, base / "state", current.config).start()
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("x = {'gen': 1}")])
    nbformat.write(nb, current.server.root_dir / NOTEBOOK)
    current.notebook = (current.server.root_dir / NOTEBOOK).read_bytes()
    current.kernel_id = open_session(current.server)
    run(current.server, current.kernel_id, "%load_ext jupyter_suspend\nimport jupyter_suspend\nx = {'gen': 1}")
    run(current.server, current.kernel_id, "jupyter_suspend.register('x')")
    current.server.api("POST", "checkpoint", {}, expect=202)
    assert current.server.wait(settled)["operation"]["outcome"] == "succeeded"
    current.old = {"gen": 1}
    assert newest_x(current) == current.old
    arm(current)
    return current


@pytest.fixture(scope="module")
def shared() -> Iterator[list[Scenario]]:
    holder: list[Scenario] = []
    yield holder
    for current in holder:
        current.server.stop(signal.SIGKILL)


@pytest.fixture
def scenario(shared: list[Scenario], tmp_path: Path) -> Scenario:
    if not shared or not shared[-1].armed:
        if shared:
            shared[-1].server.stop(signal.SIGKILL)
        shared.append(build(tmp_path))
    shared[-1].armed = False  # until this case passes and rearms it
    return shared[-1]


# -- what is true, what is kept -------------------------------------------------------


def journal_state(state_dir: Path) -> str:
    """The state the journal on disk ends in (its last transition, recovery or start)."""
    state = "running"
    for line in (state_dir / "journal.jsonl").read_bytes().splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if entry.get("kind") in STATE_KINDS:
            state = entry[STATE_KINDS[entry["kind"]]]
    return state


def kernel_pids(server: ServerProcess) -> set[int]:
    assert server.process is not None
    children = psutil.Process(server.process.pid).children(recursive=True)
    return {p.pid for p in children if "ipykernel" in " ".join(p.cmdline())}


def assert_state_is_true(scenario: Scenario, status: dict[str, Any]) -> None:
    """GET status agrees with the journal on disk and with what really runs."""
    server = scenario.server
    assert settled(status), status
    assert journal_state(scenario.state_dir) == status["state"], status
    code, kernels = server.request("GET", "api/kernels")
    assert code == 200
    running = {k["id"] for k in kernels}
    if status["state"] == "suspended":
        assert running == set(), kernels
        assert kernel_pids(server) == set(), kernels
        assert status["can_resume"] is True, status
    elif status["state"] == "failed":
        assert status["can_resume"] is True or status["can_suspend"] is True, status
    elif status["state"] == "ready":
        assert scenario.kernel_id in running, kernels
    else:
        assert status["state"] == "running", status
        assert status["can_suspend"] is True, status
    problems = [p for p in status["journal"]["problems"] if p["kind"] != "truncated_tail"]
    assert problems == [], problems


def newest_x(scenario: Scenario) -> Any:
    """The value of ``x`` in the newest complete checkpoint generation (read as a kernel would)."""
    store = CheckpointStore(scenario.folder)
    generations = store.generations()
    assert store.problems == [], store.problems
    loaded = store.load(["x"])
    assert loaded.failed == {}, loaded
    assert loaded.missing == [], loaded
    assert loaded.sources["x"] == generations[0].id
    return loaded.objects["x"]


def assert_nothing_lost(scenario: Scenario, expected: dict[str, int]) -> None:
    assert (scenario.server.root_dir / NOTEBOOK).read_bytes() == scenario.notebook
    nbformat.validate(nbformat.reads(scenario.notebook.decode(), as_version=4))
    assert newest_x(scenario) == expected


def value_of_x(server: ServerProcess, kernel_id: str) -> Any:
    return json.loads(run(server, kernel_id, "import json; print(json.dumps(x))"))


def retry(scenario: Scenario, expected: dict[str, int]) -> None:
    """Resume until ready and find ``x`` back as checkpointed; with nothing to resume
    (running), a new kernel restores ``x`` by hand and a suspend succeeds."""
    server = scenario.server
    status = server.api("GET", "status")
    if status["state"] == "running":
        scenario.kernel_id = open_session(server)
        code = "%load_ext jupyter_suspend\n%checkpoint restore x\nimport jupyter_suspend, json\n"
        out = run(server, scenario.kernel_id, code + "jupyter_suspend.register('x')\nprint(json.dumps(x))")
        assert json.loads(out.splitlines()[-1]) == expected, out
        server.api("POST", "suspend", {}, expect=202)
        status = server.wait(settled)
        assert status["state"] == "suspended", status
        assert status["operation"]["outcome"] == "succeeded", status
        assert_state_is_true(scenario, status)
        assert_nothing_lost(scenario, expected)
        return
    assert status["can_resume"] is True, status
    server.api("POST", "resume", {}, expect=202)
    status = server.wait(settled)
    assert status["state"] == "ready", status
    assert status["operation"]["outcome"] == "succeeded", status
    assert_state_is_true(scenario, status)
    restored = status["last_restore"]["checkpoints_restored"][scenario.kernel_id]
    assert restored["restored"] == ["x"], restored
    assert value_of_x(server, scenario.kernel_id) == expected
    assert_nothing_lost(scenario, expected)


def wait_for(path: Path, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.05)


# -- SIGKILL at each step ---------------------------------------------------------------


@pytest.mark.parametrize(
    "block",
    [
        "block x.pkl",  # during the flush: the kernel writes its checkpoint
        "block manifest.json",  # the generation's data written, not committed
    ],
    ids=["flush", "checkpoint-write"],
)
def test_sigkill_during_the_flush(scenario: Scenario, block: str) -> None:
    kept = scenario.old  # the torn generation is never the newest
    scenario.control.write_text(block)
    scenario.server.api("POST", "suspend", {}, expect=202)
    wait_for(Path(f"{scenario.control}.reached"))
    assert scenario.server.api("GET", "status")["state"] == "flushing"

    status = scenario.restart().api("GET", "status")
    assert status["state"] == "running"
    assert status["cold_start"]["previous_state"] == "flushing"
    assert_state_is_true(scenario, status)
    assert_nothing_lost(scenario, kept)
    retry(scenario, kept)
    rearm(scenario, kept)


@pytest.mark.parametrize(
    ("step", "previous"),
    [
        ("release.before", "snapshotting"),  # the plan durable, the kernels still up
        ("release.after", "snapshotting"),  # the kernels stopped, `released` not written
        ("restore.before", "restoring"),  # resuming, no kernel started yet
        ("restore.after", "restoring"),  # kernels started, checkpoints not reloaded
    ],
)
def test_sigkill_during_release_and_restore(scenario: Scenario, step: str, previous: str) -> None:
    server, kept = scenario.server, scenario.new  # the flush committed the new generation
    if step.startswith("restore"):
        server.api("POST", "suspend", {}, expect=202)
        assert server.wait(settled)["state"] == "suspended"
    scenario.pause.write_text(step)
    server.api("POST", "resume" if step.startswith("restore") else "suspend", {}, expect=202)
    wait_for(Path(f"{scenario.pause}.reached"))
    assert server.api("GET", "status")["state"] == previous

    status = scenario.restart().api("GET", "status")
    assert status["state"] == "suspended", status
    assert status["cold_start"]["previous_state"] == previous
    assert_state_is_true(scenario, status)
    assert_nothing_lost(scenario, kept)
    retry(scenario, kept)
    rearm(scenario, kept)


# -- a failing disk at journal and checkpoint writes --------------------------------------


@pytest.mark.parametrize(
    ("kind", "error", "written"),
    [  # written: whether the flush committed the new generation before the fault
        ("suspend_requested", "ENOSPC", False),
        ("flushed", "EROFS", True),
        ("release_started", "ENOSPC", True),
        ("released", "EROFS", True),
        ("resume_requested", "ENOSPC", True),
        ("restored", "EROFS", True),
    ],
)
def test_journal_write_fails(scenario: Scenario, kind: str, error: str, written: bool) -> None:
    """From the entry of ``kind`` on, every journal write fails (the disk stays full or
    read-only); the operation ends, and a server restarted on the healed disk tells the truth."""
    server, kept = scenario.server, scenario.new if written else scenario.old
    resuming = kind in ("resume_requested", "restored")
    if resuming:
        server.api("POST", "suspend", {}, expect=202)
        assert server.wait(settled)["state"] == "suspended"
    (scenario.base / "journal-fault").write_text(f"{kind} {error}")
    server.api("POST", "resume" if resuming else "suspend", {}, expect=202)
    status = server.wait(settled)
    assert status["operation"]["outcome"] in ("aborted", "failed"), status
    reason = {"ENOSPC": "No space left on device", "EROFS": "Read-only file system"}[error]
    assert reason in json.dumps(status["failure"]), status
    # What the server says now is true of the kernels, though the journal could not follow.
    running = {k["id"] for k in server.request("GET", "api/kernels")[1]}
    if status["state"] == "running":
        assert running == {scenario.kernel_id}
    else:
        assert status["state"] in ("failed", "suspended"), status
        assert status["can_resume"] is True, status

    status = scenario.restart().api("GET", "status")
    assert_state_is_true(scenario, status)
    assert_nothing_lost(scenario, kept)
    retry(scenario, kept)
    rearm(scenario, kept)


def test_disk_full_when_the_server_starts_again(scenario: Scenario) -> None:
    """Killed after the kernels stopped, restarted on a full disk: the extension loads,
    reads the journal (suspended, resumable), refuses a resume it could not record,
    and resumes once the disk has room."""
    kept = scenario.new
    scenario.pause.write_text("release.after")
    scenario.server.api("POST", "suspend", {}, expect=202)
    wait_for(Path(f"{scenario.pause}.reached"))

    server = scenario.restart(journal_fault="recovered ENOSPC")
    status = server.api("GET", "status")
    assert status["state"] == "suspended", status
    assert status["can_resume"] is True, status
    assert journal_state(scenario.state_dir) == "snapshotting"  # the recovery could not be recorded
    assert server.request("GET", "api/kernels")[1] == []
    answer = server.api("POST", "resume", {}, expect=409)
    assert "No space left on device" in json.dumps(answer), answer
    status = server.api("GET", "status")
    assert status["state"] == "suspended", status
    assert status["can_resume"] is True, status
    assert_nothing_lost(scenario, kept)

    scenario.heal()
    retry(scenario, kept)
    rearm(scenario, kept)


@pytest.mark.parametrize(
    ("fault", "error"),
    [("ENOSPC x.pkl", "No space left on device"), ("EROFS manifest.json", "Read-only file system")],
    ids=["full-at-data", "read-only-at-manifest"],
)
def test_checkpoint_write_fails(scenario: Scenario, fault: str, error: str) -> None:
    """A checkpoint that cannot be written aborts the suspend with nothing released and
    the previous generation intact; the retry on a healed disk suspends and resumes."""
    server = scenario.server
    scenario.control.write_text(fault)
    server.api("POST", "suspend", {}, expect=202)
    status = server.wait(settled)
    assert status["state"] == "running", status
    assert status["operation"]["outcome"] == "aborted", status
    assert error in status["message"], status
    assert_state_is_true(scenario, status)
    assert {k["id"] for k in server.request("GET", "api/kernels")[1]} == {scenario.kernel_id}
    assert_nothing_lost(scenario, scenario.old)
    assert [p.name for p in scenario.folder.iterdir() if p.name.startswith(".tmp-")] == []

    scenario.heal()  # the same server, the same kernel: the suspend works again
    server.api("POST", "suspend", {}, expect=202)
    status = server.wait(settled)
    assert status["state"] == "suspended", status
    assert_state_is_true(scenario, status)
    status = scenario.restart().api("GET", "status")
    assert status["state"] == "suspended", status
    assert_state_is_true(scenario, status)
    retry(scenario, scenario.new)
    rearm(scenario, scenario.new)
