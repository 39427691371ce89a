"""One package per process: what each may import (read from the source, no import side effects)."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "jupyter_suspend"

#: package -> sibling packages it must never import.
FORBIDDEN = {
    "kernel": {"server", "sidecar", "cli"},
    "sidecar": {"server", "kernel", "cli"},
    "common": {"server", "kernel", "sidecar", "cli"},
    "server": {"kernel", "sidecar", "cli"},
    # The command line reads journals with the server's own pure readers (journal, replay); it never runs
    # inside the sidecar or a kernel.
    "cli": {"sidecar", "kernel"},
    # The admission webhook is its own process (deploy/injector): the standard library and common only.
    "injector": {"server", "kernel", "sidecar", "cli"},
}


def imported_modules(path: Path, source: str | None = None) -> set[str]:
    """Absolute names of the modules a file of the package imports (relative imports resolved)."""
    tree = ast.parse(path.read_text() if source is None else source, filename=str(path))
    here = ["jupyter_suspend", *path.relative_to(PACKAGE).with_suffix("").parts[:-1]]
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = here[: len(here) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
                names.add(module)
                names.update(f"{module}.{alias.name}" for alias in node.names)
            elif node.module:
                names.add(node.module)
    return names


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_a_process_package_imports_no_other_process_package(package: str) -> None:
    folder = PACKAGE / package
    if not folder.is_dir():
        pytest.skip(f"jupyter_suspend/{package} does not exist yet")
    offenders = []
    for path in sorted(folder.rglob("*.py")):
        for name in imported_modules(path):
            parts = name.split(".")
            if parts[0] == "jupyter_suspend" and len(parts) > 1 and parts[1] in FORBIDDEN[package]:
                offenders.append(f"{path.relative_to(PACKAGE)} imports {name}")
    assert offenders == []


def test_common_uses_the_standard_library_only() -> None:
    allowed = set(sys.stdlib_module_names) | {"jupyter_suspend", "__future__"}
    offenders = []
    for path in sorted((PACKAGE / "common").rglob("*.py")):
        for name in imported_modules(path):
            if name.split(".")[0] not in allowed:
                offenders.append(f"{path.relative_to(PACKAGE)} imports {name}")
    assert offenders == []


def test_the_boundary_check_resolves_relative_imports() -> None:
    """The checker itself: a relative import of the server from inside the kernel package is named."""
    path = PACKAGE / "kernel" / "magics.py"
    names = imported_modules(path, "from ..server.lifecycle import Lifecycle\nfrom . import canary\n")
    assert "jupyter_suspend.server.lifecycle" in names
    assert "jupyter_suspend.kernel.canary" in names


def test_the_api_prefix_is_the_same_in_the_plugin() -> None:
    from jupyter_suspend.common.api import API_PREFIX

    request_ts = (PACKAGE.parent / "src" / "request.ts").read_text()
    assert f"'{API_PREFIX}'" in request_ts or f'"{API_PREFIX}"' in request_ts
