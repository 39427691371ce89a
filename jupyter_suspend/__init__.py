"""jupyter-suspend: suspend a notebook environment safely, resume it honestly.

Inside a kernel, ``%load_ext jupyter_suspend`` loads the IPython side; this
module stays cheap to import there (nothing from jupyter_server is imported
until the server asks for its extension points, and the kernel side is only
imported when the extension loads or an application-checkpoint function is
called).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

#: Kept equal to pyproject.toml and package.json (a test checks it).
__version__ = "0.1.0"

_UNSET: Any = object()


def _jupyter_labextension_paths() -> list[dict[str, str]]:
    return [{"src": "labextension", "dest": "jupyter-suspend"}]


def _jupyter_server_extension_points() -> list[dict[str, Any]]:
    from .server.app import SuspendApp

    return [{"module": "jupyter_suspend", "app": SuspendApp}]


def load_ipython_extension(ipython: Any) -> None:
    """``%load_ext jupyter_suspend``: magics, checkpoint hooks, live-state canary."""
    from .kernel.extension import load

    load(ipython)


def unload_ipython_extension(ipython: Any) -> None:
    from .kernel.extension import unload

    unload(ipython)


def register(
    name: str,
    obj: Any = _UNSET,
    *,
    save: Callable[[Path], Any] | None = None,
    restore: Callable[[Path], Any] | None = None,
) -> None:
    """Register what matters for application checkpoints.

    ``register("model")`` follows the variable ``model``; ``register("weights",
    model.state_dict())`` saves that object; ``register("db", save=fn,
    restore=fn)`` lets ``save(folder)`` write files that ``restore(folder)``
    turns back into the object. Restored objects land in the namespace under
    ``name``.
    """
    from .kernel.registry import _UNSET as UNSET
    from .kernel.registry import REGISTRY

    REGISTRY.register(name, UNSET if obj is _UNSET else obj, save=save, restore=restore)


def unregister(name: str) -> None:
    """Stop checkpointing ``name`` (its checkpoints on disk stay)."""
    from .kernel.registry import REGISTRY

    REGISTRY.unregister(name)


def registered() -> list[str]:
    from .kernel.registry import REGISTRY

    return REGISTRY.names()
