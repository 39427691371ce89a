"""Documentation that is generated from the code stays equal to it."""

from __future__ import annotations

import runpy
from pathlib import Path

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "configuration-docs.py"


def test_the_configuration_page_lists_every_trait_as_the_code_declares_it() -> None:
    generator = runpy.run_path(str(SCRIPT))
    page = generator["DOC"].read_text()
    assert page == generator["render"](), "docs/configuration.md is out of date: python scripts/configuration-docs.py"
    # The generator itself sees our traits (a page of headers alone would also be "equal").
    for trait in ("SuspendApp.state_dir", "LocalBackend.kernel_ready_timeout", "GKEBackend.settle_seconds"):
        assert f"`{trait}`" in page
