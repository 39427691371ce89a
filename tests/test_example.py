"""The sample notebook of the demo does what its first cell promises."""

from __future__ import annotations

import shutil
from pathlib import Path

import nbformat
import pytest

from .conftest import SuspendClient
from .test_kernel_api import VERDICT_MIME

EXAMPLE = Path(__file__).parent.parent / "examples" / "suspend-demo.ipynb"


@pytest.mark.slow
async def test_sample_notebook_survives_a_cold_cycle(
    suspend_api: SuspendClient,
    kernel_server_env: Path,
) -> None:
    shutil.copy(EXAMPLE, suspend_api.root_dir / EXAMPLE.name)
    nb = nbformat.read(EXAMPLE, as_version=4)
    cells = [c.source for c in nb.cells if c.cell_type == "code"]
    verify_cell = next(c for c in cells if c.startswith("%verify_live_state"))

    session = await suspend_api.open_notebook_path(EXAMPLE.name)
    kernel_id = session["kernel"]["id"]
    for source in cells[:3]:  # load, register and save, the next cell
        reply = await suspend_api.run(kernel_id, source)
        assert reply["status"] == "ok", (source, reply["stdout"])

    assert (await suspend_api.suspend())["state"] == "suspended"
    status = await suspend_api.resume()
    assert status["state"] == "ready"
    assert status["restore"] == "cold"

    reply = await suspend_api.run(kernel_id, verify_cell)
    bundle = reply["displays"][0]
    assert bundle[VERDICT_MIME]["verdict"] == "COLD"
    assert sorted(bundle[VERDICT_MIME]["checkpoints_restored"]) == ["step", "weights"]
    assert bundle[VERDICT_MIME]["details"]["names"]["weights"]["status"] == "match"
    reply = await suspend_api.run(kernel_id, "print(step, weights.shape, 'scratch' in globals())")
    assert reply["stdout"].split() == ["2", "(2048,", "2048)", "False"]
    reply = await suspend_api.run(kernel_id, cells[-1])  # %suspend_status
    assert "state: ready (cold restore)" in reply["stdout"]
