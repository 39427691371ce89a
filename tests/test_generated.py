"""Issue 17 item 9: generated files are checked for drift before anything regenerates them, and the demo
leaves a fresh clone clean (its outputs are ignored)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def test_item9_test_sh_takes_the_generated_files_hash_before_the_build_regenerates_it() -> None:
    script = (ROOT / "scripts" / "test.sh").read_text()
    before = script.index('generated_before=$(sha256sum "$generated"')
    setup = script.index("\nscripts/setup.sh\n")
    compare = script.index('!= "$generated_before"')
    assert before < setup < compare
    # and every other build comes after it (jlpm build runs inside setup.sh)
    commands = [line for line in script[:setup].splitlines() if not line.lstrip().startswith("#")]
    assert not any("jlpm build" in line or "schema-types" in line for line in commands)


@pytest.mark.skipif(
    shutil.which("node") is None or not (ROOT / "node_modules" / "json-schema-to-typescript").exists(),
    reason="needs node and node_modules (jlpm install) to run the generator",
)
def test_item9_the_committed_generated_types_match_the_schemas() -> None:
    done = subprocess.run(
        ["node", "scripts/schema-types.mjs", "--check"], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr


def test_item9_what_the_demo_and_the_build_write_is_ignored() -> None:
    ignored = subprocess.run(
        ["git", "check-ignore", "--no-index", ".demo/work/x.ipynb", "lib/index.js", "jupyter_suspend/labextension/x",
         "tsconfig.tsbuildinfo", ".yarn/install-state.gz"],
        cwd=ROOT, capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    assert len(ignored.stdout.split()) == 5, ignored.stdout + ignored.stderr
