"""A resume's read ahead (issue 17, "Resume at the speed of the disk"): the
restarted kernel begins reading and verifying its checkpoints at its start
(jupyter_suspend.kernel.preload); the server's restore request only adopts
that read. The store and ticket parts on a real file system, then the whole
path through a real jupyter_server and real ipykernel kernels."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import numpy as np
import psutil
import pytest

from jupyter_suspend.common.kernel_protocol import PRELOAD_ENV, PRELOAD_EXTENSION
from jupyter_suspend.kernel import preload
from jupyter_suspend.kernel.store import CheckpointStore, SaveItem

from .conftest import SuspendClient


def flip_last_byte(path: Path) -> None:
    with open(path, "r+b") as fh:
        fh.seek(-1, 2)
        byte = fh.read(1)
        fh.seek(-1, 2)
        fh.write(bytes([byte[0] ^ 0xFF]))


def saved(folder: Path) -> dict[str, Any]:
    values = {"weights": np.arange(4096, dtype=np.float32), "vocab": {"a": 1}}
    CheckpointStore(folder).save([SaveItem(n, v) for n, v in values.items()])
    return values


def write_ticket(path: Path, where: Path, wanted: list[str], **changes: Any) -> str:
    ticket = {
        "version": 1,
        "kernel_id": "k1",
        "folder": str(where),
        "names": wanted,
        "deadline": time.time() + 60,
        **changes,
    }
    path.write_text(json.dumps(ticket))
    return str(path)


@pytest.fixture(autouse=True)
def no_pending_read() -> Any:
    yield
    pending = preload.pending()
    if pending is not None:
        pending.drop("test over")
    preload._pending = None


# -- the store: a read ahead gives what a load from disk gives ----------------------
def test_resume_read_ahead_then_load_equals_a_load_from_disk(tmp_path: Path) -> None:
    values = saved(tmp_path / "nb")
    store = CheckpointStore(tmp_path / "nb")
    ahead = store.read_ahead(["weights", "vocab", "nope"])
    assert sorted(ahead) == ["vocab", "weights"]  # missing names are left to the load
    early = ahead["weights"].read
    assert early is not None
    array = next(iter(early.tensors.values()))
    result = store.load(["weights", "vocab", "nope"], ahead=ahead)
    assert ahead == {}  # consumed
    assert result.failed == {}
    assert result.missing == ["nope"]
    assert np.array_equal(result.objects["weights"], values["weights"])
    assert result.objects["weights"] is array  # adopted, not read again: one copy in memory
    assert result.objects["vocab"] == {"a": 1}


def test_resume_read_ahead_of_a_corrupt_checkpoint_fails_with_the_same_message(tmp_path: Path) -> None:
    saved(tmp_path / "nb")
    saved(tmp_path / "nb")  # an older copy exists: the message names it
    newest = max((tmp_path / "nb").iterdir())
    flip_last_byte(newest / "weights.safetensors")
    store = CheckpointStore(tmp_path / "nb")
    from_disk = store.load(["weights", "vocab"])
    ahead = store.read_ahead(["weights", "vocab"])
    assert ahead["weights"].read is None
    assert ahead["weights"].error is not None
    adopted = store.load(["weights", "vocab"], ahead=ahead)
    assert adopted.failed == from_disk.failed
    assert "fails its XXH3-128 check; not loaded; an older copy exists" in adopted.failed["weights"]
    assert sorted(adopted.objects) == ["vocab"]


def test_resume_read_ahead_of_an_older_generation_is_dropped_and_read_again(tmp_path: Path) -> None:
    saved(tmp_path / "nb")
    store = CheckpointStore(tmp_path / "nb")
    ahead = store.read_ahead(["weights"])
    newer = np.full(16, 7.0, dtype=np.float32)
    store.save([SaveItem("weights", newer)])
    result = store.load(["weights"], ahead=ahead)
    assert np.array_equal(result.objects["weights"], newer)
    assert result.sources["weights"] == store.generations()[0].id


# -- the ticket: once, for this kernel, before its deadline ---------------------------
def test_resume_read_ahead_a_ticket_is_claimed_once(tmp_path: Path) -> None:
    path = write_ticket(tmp_path / "k1.json", tmp_path / "nb", ["weights"])
    assert preload.claim_ticket(path, "k1") is not None
    assert not os.path.exists(path)
    # A restart of the same kernel (same environment, same command line) finds nothing.
    assert preload.claim_ticket(path, "k1") is None


@pytest.mark.parametrize(
    ("changes", "kernel_id"),
    [
        ({"deadline": 1.0}, "k1"),  # expired: the server that wrote it gave up long ago
        ({}, "another-kernel"),
        ({"version": 99}, "k1"),
        ({"names": "weights"}, "k1"),
        ({"folder": 3}, "k1"),
    ],
)
def test_resume_read_ahead_a_ticket_that_is_not_for_this_start_is_ignored(
    tmp_path: Path, changes: dict[str, Any], kernel_id: str
) -> None:
    path = write_ticket(tmp_path / "k1.json", tmp_path / "nb", ["weights"], **changes)
    assert preload.claim_ticket(path, kernel_id) is None
    assert not os.listdir(tmp_path)  # consumed, even when refused: no later process reads it


def test_resume_read_ahead_malformed_ticket_is_ignored(tmp_path: Path) -> None:
    (tmp_path / "k1.json").write_text("{not json")
    assert preload.claim_ticket(str(tmp_path / "k1.json"), "k1") is None


def test_resume_read_ahead_no_environment_no_read(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(PRELOAD_ENV, raising=False)
    assert preload.start_from_environment("k1") is None
    assert preload.pending() is None


# -- the read in the kernel process: taken once, or dropped -------------------------
def test_resume_read_ahead_the_read_is_taken_once_and_holds_nothing_after(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    saved(tmp_path / "nb")
    monkeypatch.setenv(PRELOAD_ENV, write_ticket(tmp_path / "k1.json", tmp_path / "nb", ["weights", "vocab"]))
    started = preload.start_from_environment("k1")
    assert started is not None
    assert preload.pending() is started
    ahead, found = preload.take(tmp_path / "nb", ["weights", "vocab"])
    assert found is started
    assert ahead is not None
    assert sorted(ahead) == ["vocab", "weights"]
    assert started.started_at is not None
    assert started.finished_at is not None
    assert started.started_at <= started.finished_at <= (started.taken_at or 0)
    assert preload.pending() is None
    assert started.take() is None
    assert started._ahead is None


def test_resume_read_ahead_for_other_names_is_dropped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    saved(tmp_path / "nb")
    monkeypatch.setenv(PRELOAD_ENV, write_ticket(tmp_path / "k1.json", tmp_path / "nb", ["vocab"]))
    started = preload.start_from_environment("k1")
    assert started is not None
    ahead, found = preload.take(tmp_path / "nb", ["weights", "vocab"])
    assert ahead is None
    assert found is started
    assert started.dropped is not None
    assert "other names" in started.dropped
    assert started._ahead is None


def test_resume_read_ahead_a_read_nobody_takes_is_dropped_at_its_deadline(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    saved(tmp_path / "nb")
    ticket = write_ticket(tmp_path / "k1.json", tmp_path / "nb", ["weights"], deadline=time.time() + 1.0)
    monkeypatch.setenv(PRELOAD_ENV, ticket)
    started = preload.start_from_environment("k1")
    assert started is not None
    deadline = time.monotonic() + 30
    while started.dropped is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert started.dropped == "not taken by its deadline"
    assert started._ahead is None
    ahead, _ = preload.take(tmp_path / "nb", ["weights"])
    assert ahead is None  # the restore reads from disk


def test_resume_read_ahead_of_a_missing_folder_is_empty(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(PRELOAD_ENV, write_ticket(tmp_path / "k1.json", tmp_path / "gone", ["weights"]))
    started = preload.start_from_environment("k1")
    assert started is not None
    ahead, _ = preload.take(tmp_path / "gone", ["weights"])
    assert ahead == {}
    result = CheckpointStore(tmp_path / "gone").load(["weights"], ahead=ahead)
    assert result.missing == ["weights"]


# -- through a real server and real kernels -----------------------------------------
SETUP = """
%load_ext jupyter_suspend
import jupyter_suspend
import numpy as np
weights = np.random.default_rng(1).standard_normal((512, 256)).astype(np.float32)
vocab = {"a": 1, "b": 2}
jupyter_suspend.register("weights")
jupyter_suspend.register("vocab")
"""

READ_AHEAD = """
import json
from jupyter_suspend.kernel import preload as _p
print(json.dumps(None if _p.last is None else _p.last.report()))
"""


def journal_entries(state_dir: Path, kind: str) -> list[dict[str, Any]]:
    lines = (state_dir / "journal.jsonl").read_text().splitlines()
    return [e for e in (json.loads(line) for line in lines if line) if e["kind"] == kind]


async def suspended_with_checkpoints(api: SuspendClient, notebook: str) -> tuple[str, Path]:
    """A notebook whose kernel ran SETUP, suspended: its kernel id and the folder its checkpoints were written to."""
    session = await api.open_notebook(notebook)
    kernel_id = str(session["kernel"]["id"])
    reply = await api.run(kernel_id, SETUP)
    assert reply["status"] == "ok", reply["stdout"]
    status = await api.suspend()
    flushed = next(s for s in status["operation"]["steps"] if s["name"] == "flush.kernels")
    return kernel_id, Path(flushed["detail"]["kernels"][0]["checkpoint_dir"])


async def read_ahead_report(api: SuspendClient, kernel_id: str) -> dict[str, Any] | None:
    reply = await api.run(kernel_id, READ_AHEAD)
    assert reply["status"] == "ok", reply["stdout"]
    answer: dict[str, Any] | None = json.loads(reply["stdout"].strip().splitlines()[-1])
    return answer


@pytest.fixture
def user_ipython(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The user's own kernel configuration and startup file (IPYTHONDIR)."""
    profile = tmp_path / "ipython" / "profile_default"
    (profile / "startup").mkdir(parents=True)
    (profile / "ipython_kernel_config.py").write_text(
        "c.InteractiveShellApp.extensions = ['autoreload']\n"
        "c.InteractiveShellApp.exec_lines = ['user_line_ran = True']\n"
    )
    (profile / "startup" / "00-user.py").write_text("user_startup_ran = True\n")
    monkeypatch.setenv("IPYTHONDIR", str(tmp_path / "ipython"))
    return profile


@pytest.mark.slow
@pytest.mark.parametrize("suspend_config", [{"flush_kernel_timeout": 60.0}])
async def test_resume_read_ahead_resume_reads_checkpoints_while_the_kernel_starts(
    suspend_api: SuspendClient, kernel_server_env: Path, state_dir: Path, user_ipython: Path
) -> None:
    session = await suspend_api.open_notebook("ahead.ipynb")
    kernel_id = str(session["kernel"]["id"])
    reply = await suspend_api.run(kernel_id, SETUP + "\nw_sum = float(weights.sum())\nprint(w_sum)")
    assert reply["status"] == "ok", reply["stdout"]
    w_sum = reply["stdout"].strip()
    # A kernel the user started: no read ahead, nothing on its command line.
    assert await read_ahead_report(suspend_api, kernel_id) is None
    kernel = psutil.Process(suspend_api.kernel_pid(kernel_id))
    assert not any(PRELOAD_EXTENSION in a for a in kernel.cmdline())
    assert PRELOAD_ENV not in kernel.environ()

    assert (await suspend_api.suspend())["state"] == "suspended"
    status = await suspend_api.resume()
    assert status["state"] == "ready", status
    report = status["last_restore"]["checkpoints_restored"][kernel_id]
    assert sorted(report["restored"]) == ["vocab", "weights"]
    assert report["failed"] == []
    assert "read and checked from the kernel's start" in report["message"]

    # The overlap, from the kernel's own clock: the read began before the kernel
    # answered kernel_info (when the server saw it runnable), the restore took it.
    ahead = await read_ahead_report(suspend_api, kernel_id)
    assert ahead is not None, "the restarted kernel did not read ahead"
    runnable_at = journal_entries(state_dir, "restored")[-1]["kernels"][0]["runnable_at"]
    assert ahead["started_at"] < runnable_at
    assert ahead["taken_at"] is not None
    assert ahead["taken_at"] >= ahead["finished_at"]
    assert ahead["dropped"] is None
    assert ahead["error"] is None

    # Bound when the restore ran, as before; the user's own config and startup file ran too.
    reply = await suspend_api.run(
        kernel_id,
        "print(float(weights.sum()), vocab, user_line_ran, user_startup_ran, "
        "sorted(get_ipython().extension_manager.loaded - {'IPython.extensions.storemagic'}))",
    )
    loaded = ["IPython.extensions.autoreload", "jupyter_suspend", PRELOAD_EXTENSION]
    assert reply["stdout"].strip() == f"{w_sum} {{'a': 1, 'b': 2}} True True {loaded}"
    # The restarted kernel got the extension on its command line and a ticket, whose
    # folder is gone once the kernels answered.
    kernel = psutil.Process(suspend_api.kernel_pid(kernel_id))
    assert kernel.cmdline()[-1] == f"--InteractiveShellApp.extra_extensions={PRELOAD_EXTENSION}"
    ticket = Path(kernel.environ()[PRELOAD_ENV])
    assert ticket.name == f"{kernel_id}.json"
    assert not ticket.parent.exists()

    # The user restarts this kernel: same command line and environment, no ticket: no read.
    await suspend_api.fetch("api", "kernels", kernel_id, "restart", method="POST", body="{}")
    await suspend_api.kernel_ready(kernel_id)  # answering kernel_info, so a new client's first cell is not lost
    assert await read_ahead_report(suspend_api, kernel_id) is None


@pytest.mark.slow
@pytest.mark.parametrize("suspend_config", [{"flush_kernel_timeout": 60.0}])
async def test_resume_read_ahead_corrupt_checkpoint_read_ahead_is_reported_as_before(
    suspend_api: SuspendClient, kernel_server_env: Path
) -> None:
    kernel_id, folder = await suspended_with_checkpoints(suspend_api, "ahead-corrupt.ipynb")
    flip_last_byte(next(folder.glob("*/weights.safetensors")))
    status = await suspend_api.resume()
    assert status["state"] == "ready"
    report = status["last_restore"]["checkpoints_restored"][kernel_id]
    assert report["restored"] == ["vocab"]
    assert report["failed"][0]["name"] == "weights"
    assert "fails its XXH3-128 check; not loaded" in report["failed"][0]["message"]
    ahead = await read_ahead_report(suspend_api, kernel_id)
    assert ahead is not None
    assert ahead["taken_at"] is not None
    reply = await suspend_api.run(kernel_id, "print('weights' in globals(), vocab)")
    assert reply["stdout"].strip() == "False {'a': 1, 'b': 2}"


@pytest.mark.slow
@pytest.mark.parametrize("suspend_config", [{"flush_kernel_timeout": 60.0}])
async def test_resume_read_ahead_missing_checkpoint_folder_read_ahead_is_reported_as_before(
    suspend_api: SuspendClient, kernel_server_env: Path
) -> None:
    kernel_id, folder = await suspended_with_checkpoints(suspend_api, "ahead-missing.ipynb")
    for generation in folder.iterdir():
        (generation / "manifest.json").unlink()  # incomplete generations: nothing to restore
    status = await suspend_api.resume()
    assert status["state"] == "ready"
    report = status["last_restore"]["checkpoints_restored"][kernel_id]
    assert report["restored"] == []
    assert sorted(report["missing"]) == ["vocab", "weights"]
    reply = await suspend_api.run(kernel_id, "print('weights' in globals())")
    assert reply["stdout"].strip() == "False"


async def test_resume_read_ahead_only_for_kernel_specs_that_run_ipykernel(
    suspend_api: SuspendClient, jp_data_dir: Path
) -> None:
    """Another kernel would not know the option: it starts as it is."""
    from jupyter_suspend.server.jupyter_environment import JupyterServerEnvironment

    other = jp_data_dir / "kernels" / "other"
    other.mkdir(parents=True)
    spec = {"argv": ["/usr/bin/env", "other-kernel", "{connection_file}"], "display_name": "Other", "language": "R"}
    (other / "kernel.json").write_text(json.dumps(spec))
    assert "other" in suspend_api.serverapp.kernel_spec_manager.find_kernel_specs()
    environment = JupyterServerEnvironment(suspend_api.serverapp)
    assert await environment.preload_arguments("python3") == [
        f"--InteractiveShellApp.extra_extensions={PRELOAD_EXTENSION}"
    ]
    assert await environment.preload_arguments("") == await environment.preload_arguments("python3")
    assert await environment.preload_arguments("other") == []
    assert await environment.preload_arguments("no-such-kernel") == []
