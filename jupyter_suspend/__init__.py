"""jupyter-suspend: suspend a notebook environment safely, resume it honestly.

Inside a kernel, ``%load_ext jupyter_suspend`` loads the IPython side; this
module stays cheap to import there (nothing from jupyter_server is imported
until the server asks for its extension points).
"""

from __future__ import annotations

from typing import Any

#: Kept equal to pyproject.toml and package.json (a test checks it).
__version__ = "0.1.0"


def _jupyter_labextension_paths() -> list[dict[str, str]]:
    return [{"src": "labextension", "dest": "jupyter-suspend"}]


def _jupyter_server_extension_points() -> list[dict[str, Any]]:
    from .app import SuspendApp

    return [{"module": "jupyter_suspend", "app": SuspendApp}]
