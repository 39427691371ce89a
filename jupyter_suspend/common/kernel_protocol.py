"""The server -> kernel request protocol: what both ends must agree on.

The server sends a *silent* ``execute_request`` whose only content is one ``user_expression`` built by
:func:`build_expression`; the kernel side (:mod:`jupyter_suspend.kernel.protocol`) evaluates it and
answers inside ``execute_reply``. Standard library only: this module is imported inside user kernels.
"""

from __future__ import annotations

import json
from typing import Any

PROTOCOL_VERSION = 1
USER_EXPRESSION_KEY = "jupyter_suspend"
ACTIONS = ("probe", "checkpoint", "restore", "verify")
#: The module the expression imports inside the kernel (it holds ``handle``).
KERNEL_HANDLER_MODULE = "jupyter_suspend.kernel.protocol"


def build_expression(request: dict[str, Any]) -> str:
    """The user expression the server sends (``repr`` makes a safe literal)."""
    payload = json.dumps(request, separators=(",", ":"))
    return f"__import__({KERNEL_HANDLER_MODULE!r}, fromlist=['handle']).handle({payload!r})"


# -- a resume's read ahead (jupyter_suspend.kernel.preload) ------------------------
#: Environment variable naming the ticket file the server wrote for one restarted kernel.
PRELOAD_ENV = "JUPYTER_SUSPEND_PRELOAD"
#: The IPython extension the server adds to that kernel's command line.
PRELOAD_EXTENSION = "jupyter_suspend.kernel.preload"
PRELOAD_TICKET_VERSION = 1
