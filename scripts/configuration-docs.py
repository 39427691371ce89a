#!/usr/bin/env python
"""Write docs/configuration.md from the configurable traits themselves (a test keeps it equal).

python scripts/configuration-docs.py          # rewrite docs/configuration.md
python scripts/configuration-docs.py --check  # exit 1 if it differs
"""

from __future__ import annotations

import argparse
import importlib
import sys
from pathlib import Path

from traitlets import HasTraits, TraitType

DOC = Path(__file__).resolve().parent.parent / "docs" / "configuration.md"

#: (import path, what it configures)
CLASSES = [
    ("jupyter_suspend.server.app:SuspendApp", "the server extension (`jupyter_server_config.py` or `--SuspendApp.…`)"),
    ("jupyter_suspend.server.backends.local:LocalBackend", "the `local` backend"),
    ("jupyter_suspend.server.backends.gke:GKEBackend", "the `gke` backend (GKE Pod Snapshots through the sidecar)"),
    (
        "jupyter_suspend.server.backends.kubeflow:KubeflowBackend",
        "the `kubeflow-notebook` and `kubeflow-workspace` backends (docs/kubeflow.md)",
    ),
    (
        "jupyter_suspend.server.backends.gke_workspaces:GKEWorkspacesBackend",
        "the `gke-workspaces` backend: GKE Workspaces' snapshot add-on (docs/platforms.md)",
    ),
    (
        "jupyter_suspend.server.idle_policy:IdlePolicy",
        "the idle policy: automatic suspend per workload class (docs/idle.md)",
    ),
    ("jupyter_suspend.kernel.helper:KernelHelper", "the kernel side (`ipython_kernel_config.py`)"),
]

HEADER = """# Configuration

Every option is a [traitlets](https://traitlets.readthedocs.io) trait: set it in `jupyter_server_config.py`
(`c.SuspendApp.state_dir = "/home/jovyan/.jupyter-suspend"`), on the command line
(`--SuspendApp.state_dir=…`), or for the kernel side in `ipython_kernel_config.py`. The sidecar is configured
by its own flags and environment variables: `jupyter-suspend-sidecar --help`.

This page is generated from the code by `python scripts/configuration-docs.py`; `tests/test_docs.py` fails when
it is out of date.

## A wrong setting

Every setting below (of `SuspendApp`, `IdlePolicy` and the configured backend) is checked when the server starts:
a value of the wrong type, a negative number (seconds, bytes, factors), 0 for a timer interval or a size limit, a
percentage above 100, an unknown or malformed `IdlePolicy.workload_classes` entry, a `default_workload_class` that
is not a class, or a backend that cannot be loaded. With any problem **the server keeps running without
jupyter-suspend doing anything but saying so** (the extension is *misconfigured*; jupyter_server itself and your
notebooks are untouched):

- each problem is logged at ERROR (`jupyter-suspend: misconfigured: IdlePolicy.workload_classes: … allowed: …`),
  then one line saying that suspend, resume and the idle policy are off;
- every call under `{base_url}jupyter-suspend/api/` (after authentication) answers **HTTP 503** with
  `{"reason": "Misconfigured", "message": "<one sentence>", "problems": [{"setting": "IdlePolicy.workload_classes",
  "message": "… allowed: …"}]}` (the OpenAPI document lists this 503 on every operation); the JupyterLab status
  bar shows it;
- `{base_url}jupyter-suspend/metrics` has `jupyter_suspend_misconfigured{setting="…"} 1` per wrong setting
  (`setting=""` is 0 when all are right): alert on `jupyter_suspend_misconfigured > 0`;
- nothing acts on a wrong value: no suspend or resume, no idle policy (the GPU is not released automatically), no
  journal write, no session guard.

Fix the configuration and restart the server. The server stops on SIGTERM as usual in this state.
"""


def _default(trait: TraitType) -> str:
    return repr(trait.default()).replace("|", "\\|")


def render() -> str:
    parts = [HEADER]
    for path, what in CLASSES:
        module_name, _, class_name = path.partition(":")
        cls: type[HasTraits] = getattr(importlib.import_module(module_name), class_name)
        traits = cls.class_traits(config=True)
        own = {name: trait for name, trait in sorted(traits.items()) if name not in _inherited(cls)}
        parts.append(f"\n## `{class_name}` — {what}\n\n| trait | default | meaning |\n|---|---|---|\n")
        for name, trait in own.items():
            help_text = " ".join((trait.help or "").split()).replace("|", "\\|")
            parts.append(f"| `{class_name}.{name}` | `{_default(trait)}` | {help_text} |\n")
    return "".join(parts)


def _inherited(cls: type[HasTraits]) -> set[str]:
    """Traits that come from Jupyter's own base classes (log level, config file, …), not from us."""
    names: set[str] = set()
    for base in cls.__mro__[1:]:
        if isinstance(base, type) and issubclass(base, HasTraits) and not base.__module__.startswith("jupyter_suspend"):
            names.update(base.class_traits(config=True))
    return names


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if docs/configuration.md is out of date")
    args = parser.parse_args()
    text = render()
    if args.check:
        if DOC.read_text() != text:
            print(f"{DOC} is out of date: run python scripts/configuration-docs.py", file=sys.stderr)
            return 1
        return 0
    DOC.write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
