"""The kernel helper without a server: registration after failed saves, names,
configuration, and the kernel package's import graph (issues 8 and 12)."""

from __future__ import annotations

import ast
import threading
from pathlib import Path
from typing import Any

import pytest
from traitlets.config import Config

from jupyter_suspend.kernel.registry import Registry
from jupyter_suspend.kernel.store import SaveError

KERNEL_PACKAGE = Path(__file__).parent.parent / "jupyter_suspend" / "kernel"


def helper(tmp_path: Path, namespace: dict[str, Any], **kwargs: Any) -> Any:
    from jupyter_suspend.kernel.helper import KernelHelper

    registry = Registry()
    registry.namespace = namespace
    return KernelHelper(registry=registry, checkpoint_dir=str(tmp_path), **kwargs)


def test_a_failed_first_save_leaves_the_name_unregistered(tmp_path: Path) -> None:
    ks = helper(tmp_path, {"lock": threading.Lock(), "ok": [1, 2]})
    with pytest.raises(SaveError) as failure:
        ks.save(["ok", "lock"], tmp_path / "nb")
    # Neither name was registered before: a failed save registers nothing,
    # so the next suspend does not abort on it.
    assert ks.registry.names() == []
    assert failure.value.unregistered == ["lock", "ok"]  # type: ignore[attr-defined]
    assert not [p for p in (tmp_path / "nb").iterdir() if not p.name.startswith(".")]


def test_a_failed_save_keeps_names_registered_before(tmp_path: Path) -> None:
    ks = helper(tmp_path, {"lock": threading.Lock()})
    ks.registry.register("lock")
    with pytest.raises(SaveError):
        ks.save(["lock"], tmp_path / "nb")
    assert ks.registry.names() == ["lock"]


def test_an_undefined_name_in_a_save_unregisters_the_new_names_before_it(tmp_path: Path) -> None:
    ks = helper(tmp_path, {"a": 1})
    with pytest.raises(NameError):
        ks.save(["a", "missing"], tmp_path / "nb")
    assert ks.registry.names() == []


def test_checkpoint_magic_says_the_name_was_not_registered(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from IPython.core.interactiveshell import InteractiveShell

    shell = InteractiveShell.instance()
    extensions = shell.extension_manager
    assert extensions is not None
    extensions.load_extension("jupyter_suspend")
    try:
        shell.user_ns["handle"] = open(tmp_path / "data.txt", "w")  # noqa: SIM115 - the point of the test
        shell.run_line_magic("checkpoint", f"save handle --dir {tmp_path / 'nb'}")
        err = capsys.readouterr().err
        assert "cannot save 'handle'" in err
        assert "Open files" in err
        assert "'handle' is not registered (its first save failed)" in err
        from jupyter_suspend.kernel.registry import REGISTRY

        assert "handle" not in REGISTRY.names()
    finally:
        shell.user_ns["handle"].close()
        extensions.unload_extension("jupyter_suspend")


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("kernel-1234-abcd.json", "1234-abcd"),
        ("kernel-a.json\n", None),
        ("kernel-.json", None),
        ("other.json", None),
    ],
)
def test_kernel_id_from_the_connection_file_name(name: str, expected: str | None) -> None:
    from jupyter_suspend.kernel.helper import kernel_id_from_connection_file

    assert kernel_id_from_connection_file(f"/run/{name}") == expected


def test_old_config_section_still_configures_the_helper(tmp_path: Path) -> None:
    from jupyter_suspend.kernel.helper import KernelHelper

    old = KernelHelper(config=Config({"SuspendKernel": {"keep": 7, "server_timeout": 3.0}}))
    assert (old.keep, old.server_timeout) == (7, 3.0)
    both = KernelHelper(config=Config({"SuspendKernel": {"keep": 7}, "KernelHelper": {"keep": 2}}))
    assert both.keep == 2  # the new section wins
    from jupyter_suspend.kernel.extension import SuspendKernel  # the old name still imports

    assert isinstance(both, SuspendKernel)


def _imports(path: Path) -> set[str]:
    """Sibling kernel modules a module imports, anywhere in it (functions included)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level == 1:
            if node.module:
                found.add(node.module.split(".")[0])
            else:
                found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("jupyter_suspend.kernel."):
            found.add(str(node.module).split(".")[2])
    return found


def test_the_kernel_package_has_no_import_cycle() -> None:
    graph = {p.stem: _imports(p) for p in KERNEL_PACKAGE.glob("*.py")}
    cycles = []

    def visit(module: str, path: list[str]) -> None:
        for target in sorted(graph.get(module, ())):
            if target in path:
                cycles.append(" -> ".join([*path[path.index(target) :], target]))
            elif target in graph:
                visit(target, [*path, target])

    for module in sorted(graph):
        visit(module, [module])
    assert cycles == []
