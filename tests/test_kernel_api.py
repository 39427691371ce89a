"""The kernel side in real ipykernel kernels under a real jupyter_server:
magics, application checkpoints through the server's flush and resume,
live-state verification over REST."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import pytest

from .conftest import SuspendClient

VERDICT_MIME = "application/vnd.jupyter-suspend.verdict+json"


async def open_with_extension(api: SuspendClient, name: str, setup: str = "") -> str:
    session = await api.open_notebook(name)
    kernel_id = str(session["kernel"]["id"])
    reply = await api.run(kernel_id, "%load_ext jupyter_suspend\nimport jupyter_suspend\n" + setup)
    assert reply["status"] == "ok", reply["stdout"]
    return kernel_id


async def verdict(api: SuspendClient, kernel_id: str, names: str = "") -> tuple[str, dict[str, Any]]:
    reply = await api.run(kernel_id, f"%verify_live_state {names}")
    assert reply["status"] == "ok", reply["stdout"]
    assert reply["result"] == []  # no Out[]
    assert len(reply["displays"]) == 1, reply
    bundle = reply["displays"][0]
    return bundle["text/plain"], bundle[VERDICT_MIME]


def journal(state_dir: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (state_dir / "journal.jsonl").read_text().splitlines() if line]


SETUP = """
import numpy as np
weights = np.random.default_rng(1).standard_normal((256, 128)).astype(np.float32)
vocab = {"a": 1, "b": 2}
jupyter_suspend.register("weights")
jupyter_suspend.register("vocab")
"""


@pytest.mark.slow
async def test_checkpoint_magics_save_list_restore(suspend_api: SuspendClient, kernel_server_env: Path) -> None:
    kernel_id = await open_with_extension(suspend_api, "magics.ipynb", SETUP)
    reply = await suspend_api.run(kernel_id, "extra = list(range(5))\n%checkpoint save")
    assert "saved 2 name(s)" in reply["stdout"]
    assert "weights: 128.2 KiB (numpy.ndarray)" in reply["stdout"]
    reply = await suspend_api.run(kernel_id, "%checkpoint save extra")
    assert "saved 1 name(s)" in reply["stdout"]
    reply = await suspend_api.run(kernel_id, "%checkpoint list --verify")
    out = reply["stdout"]
    assert "weights: variable (ndarray)" in out
    assert "extra: variable (list)" in out  # saving by name registered it
    assert out.count("intact") == 3
    assert str(kernel_server_env) in out

    reply = await suspend_api.run(
        kernel_id,
        "w0 = weights.copy()\ndel weights, vocab, extra\n%checkpoint restore\n"
        "print(np.array_equal(weights, w0), vocab, extra)",
    )
    assert "restored 3 name(s)" in reply["stdout"]
    assert "True {'a': 1, 'b': 2} [0, 1, 2, 3, 4]" in reply["stdout"]

    reply = await suspend_api.run(kernel_id, "%checkpoint save nothing_here\n%checkpoint frobnicate")
    assert "'nothing_here' is neither registered nor defined" in reply["stdout"]
    assert "invalid choice: 'frobnicate'" in reply["stdout"]
    assert "Traceback" not in reply["stdout"]


@pytest.mark.slow
async def test_flush_records_hashes_and_verify_says_live_then_mismatch(
    suspend_api: SuspendClient, kernel_server_env: Path, state_dir: Path
) -> None:
    kernel_id = await open_with_extension(suspend_api, "live.ipynb", SETUP)
    # Nothing recorded yet: nothing to compare with.
    reply = await suspend_api.run(kernel_id, "%verify_live_state")
    assert reply["stdout"].startswith("NO RECORD: no suspend or checkpoint recorded for kernel")
    await suspend_api.json("POST", "checkpoint", {"reason": "before verify"}, expect=202)
    status = await suspend_api.wait_done()
    assert status["operation"]["outcome"] == "succeeded"
    entry = next(e for e in journal(state_dir) if e["kind"] == "checkpointed")
    kernel = entry["kernels"][0]
    assert kernel["status"] == "checkpointed"
    assert {c["name"] for c in kernel["checkpoints"]} == {"weights", "vocab"}
    assert all(c["content_hash"].startswith("sha256:") for c in kernel["checkpoints"])
    assert kernel["canary"]["pid"] == suspend_api.kernel_pid(kernel_id)
    assert len(kernel["canary"]["hash"]) == 64
    folder = Path(kernel["checkpoint_dir"])
    assert folder.parent == kernel_server_env
    assert len([p for p in folder.iterdir() if (p / "manifest.json").exists()]) == 1

    text, data = await verdict(suspend_api, kernel_id, "weights vocab")
    assert text.startswith("LIVE: same kernel process")
    assert data["verdict"] == "LIVE"
    assert data["kernel_id"] == kernel_id
    assert data["details"]["names"]["weights"]["status"] == "match"
    assert data["details"]["recorded"]["source"] == "checkpoint"

    # The server can also ask an idle kernel itself.
    by_server = await suspend_api.json("POST", "verify", {"kernel_id": kernel_id, "names": ["weights"]})
    assert by_server["verdict"] == "LIVE"
    assert by_server["details"]["names"]["weights"]["status"] == "match"

    await suspend_api.run(kernel_id, "weights[0, 0] += 1")
    text, data = await verdict(suspend_api, kernel_id, "weights vocab")
    assert text.startswith("MISMATCH: weights differs from what was saved")
    assert data["details"]["names"]["vocab"]["status"] == "match"
    assert data["details"]["process"] == "same"
    assert [e["verdict"] for e in journal(state_dir) if e["kind"] == "verified"] == ["LIVE", "LIVE", "MISMATCH"]


@pytest.mark.slow  # seconds: the fast loop (README, Development) leaves it to the full suite
async def test_cold_resume_restores_names_and_verify_says_cold(
    suspend_api: SuspendClient, kernel_server_env: Path
) -> None:
    kernel_id = await open_with_extension(suspend_api, "cold.ipynb", SETUP + "\nw_sum = float(weights.sum())")
    old_pid = suspend_api.kernel_pid(kernel_id)
    await suspend_api.json("POST", "suspend", {"reason": "end of day"}, expect=202)
    status = await suspend_api.wait_done()
    assert status["state"] == "suspended", status
    flushed = next(s for s in status["operation"]["steps"] if s["name"] == "flush.kernels")
    kernel = flushed["detail"]["kernels"][0]
    assert kernel["status"] == "checkpointed"
    assert sorted(c["name"] for c in kernel["checkpoints"]) == ["vocab", "weights"]

    await suspend_api.json("POST", "resume", {}, expect=202)
    status = await suspend_api.wait_done()
    assert status["state"] == "ready", status
    assert status["restore"] == "cold"
    report = status["last_restore"]["checkpoints_restored"][kernel_id]
    assert sorted(report["restored"]) == ["vocab", "weights"]
    assert report["failed"] == []

    # The names are back without user action, in a new process.
    assert suspend_api.kernel_pid(kernel_id) != old_pid
    reply = await suspend_api.run(kernel_id, "print(type(weights).__name__, weights.shape, vocab)")
    assert reply["stdout"].strip() == "ndarray (256, 128) {'a': 1, 'b': 2}"
    text, data = await verdict(suspend_api, kernel_id, "weights vocab")
    assert text.startswith("COLD: new kernel process")
    assert "checkpoints restored: vocab, weights" in text
    assert data["checkpoints_restored"] == ["vocab", "weights"]
    assert data["details"]["names"]["weights"]["status"] == "match"
    assert data["details"]["recorded"]["source"] == "suspend"

    reply = await suspend_api.run(kernel_id, "%suspend_status")
    out = reply["stdout"]
    assert "state: ready (cold restore)" in out
    assert "cold.ipynb (this kernel): checkpoints restored: vocab, weights" in out
    assert "last cycle:" in out
    assert "resumed, cold restore" in out
    assert "resume to runnable" in out

    # Restored names stay registered: the next suspend saves them again.
    reply = await suspend_api.run(kernel_id, "import jupyter_suspend\nprint(jupyter_suspend.registered())")
    assert reply["stdout"].strip() == "['vocab', 'weights']"


@pytest.mark.slow
async def test_kernel_without_helper_at_suspend_still_reads_cold(
    suspend_api: SuspendClient, kernel_server_env: Path
) -> None:
    """The server restarted that kernel itself: pid and start time prove a new
    process even though no canary was recorded (the helper was not loaded)."""
    session = await suspend_api.open_notebook("plain.ipynb")
    kernel_id = session["kernel"]["id"]
    old_pid = suspend_api.kernel_pid(kernel_id)
    assert (await suspend_api.suspend())["state"] == "suspended"
    assert (await suspend_api.resume())["state"] == "ready"

    # From outside (the helper is still not loaded in the new kernel).
    result = await suspend_api.json("POST", "verify", {"kernel_id": kernel_id})
    assert result["verdict"] == "COLD"
    assert result["details"]["recorded"]["pid"] == old_pid
    assert result["details"]["observed"]["pid"] == suspend_api.kernel_pid(kernel_id) != old_pid
    assert any("no canary was recorded" in note for note in result["details"]["notes"])

    # From inside, once the helper is loaded: the same verdict.
    await suspend_api.run(kernel_id, "%load_ext jupyter_suspend")
    text, data = await verdict(suspend_api, kernel_id)
    assert text.startswith("COLD: new kernel process")
    assert data["verdict"] == "COLD"


@pytest.mark.slow
async def test_corrupt_checkpoint_is_reported_by_name_on_resume(
    suspend_api: SuspendClient, kernel_server_env: Path
) -> None:
    kernel_id = await open_with_extension(suspend_api, "corrupt.ipynb", SETUP)
    status = await suspend_api.suspend()
    assert status["state"] == "suspended"
    flushed = next(s for s in status["operation"]["steps"] if s["name"] == "flush.kernels")
    folder = Path(flushed["detail"]["kernels"][0]["checkpoint_dir"])
    data_file = next(folder.glob("*/weights.safetensors"))
    with open(data_file, "r+b") as fh:
        fh.seek(-10, 2)
        fh.write(b"\x00" * 10)
    status = await suspend_api.resume()
    assert status["state"] == "ready"
    report = status["last_restore"]["checkpoints_restored"][kernel_id]
    assert report["restored"] == ["vocab"]
    assert report["failed"][0]["name"] == "weights"
    assert "fails its XXH3-128 check; not loaded" in report["failed"][0]["message"]
    reply = await suspend_api.run(kernel_id, "print('weights' in globals(), vocab)")
    assert reply["stdout"].strip() == "False {'a': 1, 'b': 2}"
    text, data = await verdict(suspend_api, kernel_id, "weights")
    assert text.startswith("MISMATCH: weights is not in the kernel")
    assert data["details"]["process"] == "new"


@pytest.mark.slow
async def test_suspend_magic_returns_at_once_and_kernel_checkpoints_after_the_cell(
    suspend_api: SuspendClient, kernel_server_env: Path, state_dir: Path
) -> None:
    kernel_id = await open_with_extension(suspend_api, "magic.ipynb", SETUP)
    reply = await suspend_api.run(kernel_id, "%suspend --dry-run")
    out = reply["stdout"]
    assert "jupyter-suspend preflight: backend local, state running" in out
    assert "magic.ipynb [this kernel, helper loaded]" in out
    assert "application checkpoints: vocab, weights" in out
    assert "would abort" not in out
    assert (await suspend_api.status())["state"] == "running"

    started = time.monotonic()
    reply = await suspend_api.run(kernel_id, "%suspend --reason 'going home'")
    elapsed = time.monotonic() - started
    assert "Suspend requested: operation" in reply["stdout"], reply["stdout"]
    assert "writes its checkpoints (vocab, weights) as soon as this cell ends" in reply["stdout"]
    assert elapsed < 4.0  # never waits for the outcome
    status = await suspend_api.wait_done()
    assert status["state"] == "suspended", status
    flushed = next(e for e in journal(state_dir) if e["kind"] == "flushed")
    assert flushed["kernels"][0]["status"] == "checkpointed"
    assert sorted(c["name"] for c in flushed["kernels"][0]["checkpoints"]) == ["vocab", "weights"]
    timeline = await suspend_api.json("GET", "timeline")
    assert timeline["cycles"][-1]["reason"] == "going home"

    # A second %suspend while suspended: the kernel is gone; on resume it works again.
    status = await suspend_api.resume()
    assert status["state"] == "ready"
    reply = await suspend_api.run(kernel_id, "%suspend --dry-run\nprint(vocab)")
    assert "state ready" in reply["stdout"]
    assert "{'a': 1, 'b': 2}" in reply["stdout"]


@pytest.mark.slow
async def test_no_server_reachable_is_said_clearly(suspend_api: SuspendClient, kernel_server_env: Path) -> None:
    kernel_id = await open_with_extension(suspend_api, "alone.ipynb")
    reply = await suspend_api.run(
        kernel_id,
        "import os\nos.environ['JUPYTER_SUSPEND_SERVER_URL'] = 'http://127.0.0.1:9/'\n"
        "%suspend\n%suspend_status\n%verify_live_state",
    )
    out = reply["stdout"]
    assert reply["status"] == "ok"
    assert out.count("jupyter-suspend: the Jupyter server at http://127.0.0.1:9/") == 3, out
    assert "is not reachable" in out
    assert "Traceback" not in out

    # Without the override the kernel finds its server through the runtime
    # file jpserver-<pid>.json of its parent process...
    reply = await suspend_api.run(kernel_id, "del os.environ['JUPYTER_SUSPEND_SERVER_URL']\n%suspend --dry-run")
    assert "alone.ipynb [this kernel, helper loaded]" in reply["stdout"], reply["stdout"]
    # ...and says so when there is none.
    reply = await suspend_api.run(
        kernel_id, "import tempfile\nos.environ['JUPYTER_RUNTIME_DIR'] = tempfile.mkdtemp()\n%suspend --dry-run"
    )
    out = reply["stdout"]
    assert "jupyter-suspend: no Jupyter server found for this kernel" in out
    assert "JUPYTER_SUSPEND_SERVER_URL" in out
    assert "Traceback" not in out


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (b"{}", "'kernel_id' is a required property"),
        (b'{"kernel_id": "../../etc"}', "does not match"),
        (b'{"kernel_id": "k", "names": ["a b"]}', "does not match"),
        (b'{"kernel_id": "k", "names": "weights"}', "is not of type 'array'"),
        (b'{"kernel_id": "k", "observed": {"pid": 1}}', "'canary_hash' is a required property"),
        (b'{"kernel_id": "k", "observed": {"canary_hash": "zz", "pid": 1}}', "does not match"),
        (b'{"kernel_id": "k", "extra": 1}', "Additional properties are not allowed"),
        (b"[1]", "is not of type 'object'"),
        (b"{oops", "not valid JSON"),
    ],
)
async def test_verify_bad_input_gets_400(suspend_api: SuspendClient, state_dir: Path, raw: bytes, message: str) -> None:
    before = journal(state_dir)
    response = await suspend_api.call("POST", "verify", raw=raw)
    assert response.code == 400
    assert message in json.loads(response.body)["message"]
    assert journal(state_dir) == before


@pytest.mark.slow
async def test_verify_unknown_kernel_and_busy_kernel(suspend_api: SuspendClient, kernel_server_env: Path) -> None:
    missing = await suspend_api.json("POST", "verify", {"kernel_id": "no-such-kernel"}, expect=404)
    assert "no suspend or checkpoint recorded for kernel no-such-kernel" in missing["message"]
    assert missing["kernel_id"] == "no-such-kernel"

    kernel_id = await open_with_extension(suspend_api, "busy.ipynb", SETUP)
    await suspend_api.json("POST", "checkpoint", {}, expect=202)
    await suspend_api.wait_done()
    async with suspend_api.busy(kernel_id, 5):
        busy = await suspend_api.json("POST", "verify", {"kernel_id": kernel_id}, expect=409)
        assert "is busy: run %verify_live_state in it" in busy["message"]


@pytest.mark.slow
@pytest.mark.parametrize("suspend_config", [{"flush_kernel_timeout": 1.0}])
async def test_checkpoint_request_arriving_after_its_deadline_is_a_noop(
    suspend_api: SuspendClient, kernel_server_env: Path
) -> None:
    kernel_id = await open_with_extension(suspend_api, "late.ipynb", SETUP)
    pid = suspend_api.kernel_pid(kernel_id)
    async with suspend_api.busy(kernel_id, 2.5):
        status = await suspend_api.suspend()
        assert status["state"] == "running"
        assert "kernel busy: checkpoint skipped" in status["operation"]["message"]
        # Let the cell end: the queued checkpoint request runs now, past its deadline.
        await asyncio.sleep(2.5)
        reply = await suspend_api.run(kernel_id, "print('idle again')")
        assert "idle again" in reply["stdout"]
    folders = list(kernel_server_env.glob("*")) if kernel_server_env.exists() else []
    generations = [g for f in folders for g in f.iterdir() if (g / "manifest.json").exists()]
    assert generations == []  # the late request wrote nothing
    assert suspend_api.kernel_pid(kernel_id) == pid


TORCH_SETUP = """
import torch
torch.manual_seed(0)
class TinyNet(torch.nn.Module):  # defined in the notebook: restored by value
    def __init__(self):
        super().__init__()
        self.body = torch.nn.Sequential(torch.nn.Linear(16, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2))
    def forward(self, x):
        return self.body(x)
model = TinyNet()
probe = torch.randn(4, 16)
expected = model(probe).detach()
jupyter_suspend.register("model")
jupyter_suspend.register("probe")
jupyter_suspend.register("expected")
"""


# The restarted kernel imports torch while loading the checkpoint: on 2 busy cores that alone can take
# longer than the suite's 5 s flush/reload timeout.
@pytest.mark.parametrize("suspend_config", [{"flush_kernel_timeout": 60.0}])
async def test_torch_model_survives_a_cold_resume(suspend_api: SuspendClient, kernel_server_env: Path) -> None:
    pytest.importorskip("torch")
    pytest.importorskip("cloudpickle")
    kernel_id = await open_with_extension(suspend_api, "torch.ipynb", TORCH_SETUP)
    status = await suspend_api.suspend()
    assert status["state"] == "suspended", status
    status = await suspend_api.resume()
    assert status["state"] == "ready", status
    assert sorted(status["last_restore"]["checkpoints_restored"][kernel_id]["restored"]) == [
        "expected",
        "model",
        "probe",
    ]
    reply = await suspend_api.run(
        kernel_id,
        "import torch\nprint(type(model).__name__, torch.equal(model(probe).detach(), expected), "
        "isinstance(model.body[0].weight, torch.nn.Parameter), model.body[0].weight.device)",
    )
    assert reply["stdout"].strip() == "TinyNet True True cpu", reply["stdout"]
    text, data = await verdict(suspend_api, kernel_id, "model probe")
    assert text.startswith("COLD"), text
    assert data["details"]["names"]["model"]["status"] == "match", data


@pytest.mark.slow
@pytest.mark.parametrize(
    ("suspend_config", "restore"),
    [
        ({"backend": "tests.backends:SnapshotLikeBackend", "flush_kernel_timeout": 10.0}, "live"),
        (
            {
                "backend": "tests.backends:SnapshotLikeBackend",
                "flush_kernel_timeout": 10.0,
                "SnapshotLikeBackend": {"restart_kernels": True},
            },
            "cold",
        ),
    ],
)
async def test_return_from_a_snapshot_is_verified_with_the_canary(
    suspend_api: SuspendClient, kernel_server_env: Path, restore: str
) -> None:
    kernel_id = await open_with_extension(suspend_api, "snap.ipynb", SETUP)
    plain = await suspend_api.open_notebook("no_helper.ipynb")  # no canary recorded: not judged
    status = await suspend_api.suspend(reason="snapshot")
    assert status["state"] == "ready", status
    assert status["restore"] == restore
    verification = status["last_restore"]["verification"]
    assert [v["kernel_id"] for v in verification] == [kernel_id]
    assert plain["kernel"]["id"] not in [v["kernel_id"] for v in verification]
    assert verification[0]["verdict"] == restore.upper()
    if restore == "live":
        assert verification[0]["message"].startswith("LIVE: same kernel process")
        text, _ = await verdict(suspend_api, kernel_id, "weights")
        assert text.startswith("LIVE")
    else:
        assert "new kernel process" in verification[0]["message"]


async def test_unload_unregisters_handlers_and_reload_keeps_the_canary(
    suspend_api: SuspendClient, kernel_server_env: Path
) -> None:
    kernel_id = await open_with_extension(suspend_api, "unload.ipynb", SETUP)
    await suspend_api.wait_until_idle(kernel_id)
    loaded = await suspend_api.json("POST", "suspend", {"dry_run": True})
    assert loaded["kernels"][0]["helper"] == "loaded"
    before = await suspend_api.run(kernel_id, "from jupyter_suspend.kernel import canary\nprint(canary.canary_hash())")
    reply = await suspend_api.run(kernel_id, "%unload_ext jupyter_suspend\n%checkpoint list")
    assert "UsageError: Line magic function `%checkpoint` not found" in reply["stdout"]
    await suspend_api.wait_until_idle(kernel_id)
    unloaded = await suspend_api.json("POST", "suspend", {"dry_run": True})
    assert unloaded["kernels"][0]["helper"] == "absent"
    after = await suspend_api.run(kernel_id, "%load_ext jupyter_suspend\nprint(canary.canary_hash())")
    assert after["stdout"] == before["stdout"]  # one canary per process
    await suspend_api.wait_until_idle(kernel_id)
    reloaded = await suspend_api.json("POST", "suspend", {"dry_run": True})
    assert reloaded["kernels"][0]["registered"] == ["vocab", "weights"]


@pytest.mark.slow
async def test_a_checkpoint_saved_in_the_kernel_leaves_the_live_state_record(
    suspend_api: SuspendClient, kernel_server_env: Path, state_dir: Path
) -> None:
    """Issue 12: `%checkpoint save x` then `%verify_live_state` answers LIVE, not NO RECORD."""
    kernel_id = await open_with_extension(suspend_api, "own.ipynb", SETUP)
    reply = await suspend_api.run(kernel_id, "%checkpoint save weights")
    assert "saved 1 name(s)" in reply["stdout"]
    assert "recorded for %verify_live_state" in reply["stdout"]
    assert "not recorded" not in reply["stdout"]
    entry = [e for e in journal(state_dir) if e["kind"] == "checkpointed"][-1]
    assert entry["kernels"][0]["kernel_id"] == kernel_id
    assert entry["kernels"][0]["canary"]["pid"] == suspend_api.kernel_pid(kernel_id)

    text, data = await verdict(suspend_api, kernel_id, "weights")
    assert text.startswith("LIVE: same kernel process"), text
    assert data["details"]["names"]["weights"]["status"] == "match"
    assert data["details"]["recorded"]["source"] == "checkpoint"

    # A record is only accepted for the kernel's own process.
    forged = {"kernel_id": kernel_id, "checkpoint": {"checkpoints": [], "canary": {"hash": "0" * 64, "pid": 1}}}
    answer = await suspend_api.call("POST", "checkpoint-record", forged)
    assert answer.code == 409
    assert b"not this kernel's process" in answer.body


@pytest.mark.slow
async def test_a_checkpoint_saved_without_a_server_says_what_is_missing(
    suspend_api: SuspendClient, kernel_server_env: Path
) -> None:
    kernel_id = await open_with_extension(suspend_api, "offline.ipynb", SETUP)
    reply = await suspend_api.run(
        kernel_id,
        "import os\nos.environ['JUPYTER_SUSPEND_SERVER_URL'] = 'http://127.0.0.1:9/'\n%checkpoint save weights",
    )
    out = reply["stdout"]
    assert "saved 1 name(s)" in out
    assert "not recorded for %verify_live_state" in out
    assert "is not reachable" in out
    assert "Traceback" not in out
    reply = await suspend_api.run(kernel_id, "del os.environ['JUPYTER_SUSPEND_SERVER_URL']\n%verify_live_state")
    assert reply["stdout"].startswith("NO RECORD:"), reply["stdout"]
    assert "the %checkpoint save at" in reply["stdout"]
    assert "was not recorded" in reply["stdout"]
