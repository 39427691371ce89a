"""The IPython extension: ``%load_ext jupyter_suspend``.

Loading creates one :class:`~jupyter_suspend.kernel.helper.KernelHelper` for the
shell, registers the ``probe``/``checkpoint``/``restore``/``verify`` protocol
handlers the server's flush and resume call, and adds the magics
(:mod:`jupyter_suspend.kernel.magics`).

Kernel-side settings are IPython configuration, e.g. in
``ipython_kernel_config.py``::

    c.InteractiveShellApp.extensions = ["jupyter_suspend"]
    c.KernelHelper.keep = 5
    c.KernelHelper.checkpoint_dir = "/home/jovyan/.checkpoints"

(``c.SuspendKernel.*``, the section's old name, still works.)

Imports: this module imports :mod:`.helper` and, when the extension loads,
:mod:`.magics`; the magics import :mod:`.helper` only, never this module.
"""

from __future__ import annotations

from typing import Any

from . import helper, protocol
from .helper import ENV_CHECKPOINT_DIR, KernelHelper, SuspendKernel, current, default_root
from .registry import NotRegistered

MAGICS = ("suspend", "suspend_status", "checkpoint", "verify_live_state")


def load(shell: Any) -> None:
    from .magics import SuspendMagics

    kernel_helper = KernelHelper(shell=shell)
    helper.set_current(kernel_helper)
    kernel_helper.register_handlers()
    shell.register_magics(SuspendMagics(shell=shell, kernel_helper=kernel_helper))


def unload(shell: Any) -> None:
    protocol.unregister_all()
    helper.set_current(None)
    magics = shell.magics_manager.magics
    for kind in ("line", "cell"):
        for name in MAGICS:
            magics[kind].pop(name, None)


__all__ = [
    "ENV_CHECKPOINT_DIR",
    "KernelHelper",
    "NotRegistered",
    "SuspendKernel",
    "current",
    "default_root",
    "load",
    "unload",
]
