"""What every backend that acts through the pod's sidecar shares: where the sidecar is, and the client.

The sidecar is the only holder of a Kubernetes token (docs/architecture.md); these backends never call
the Kubernetes API themselves.
"""

from __future__ import annotations

import os

from traitlets import Float, Unicode, default

from ...common import sidecar_protocol as proto
from ..sidecar_client import SidecarClient
from .base import Backend


class SidecarBackend(Backend):
    """A backend that asks the sidecar beside this server (``c.SidecarBackend.*`` configures them all)."""

    sidecar_socket = Unicode(
        config=True,
        help="The sidecar's Unix socket, in the emptyDir shared with the sidecar container "
        f"(default: $JUPYTER_SUSPEND_SIDECAR_SOCKET, else {proto.DEFAULT_SOCKET_PATH}).",
    )
    sidecar_secret = Unicode(
        config=True,
        help="The file with the sidecar's bearer secret, written by the sidecar at start "
        f"(default: $JUPYTER_SUSPEND_SIDECAR_SECRET, else {proto.DEFAULT_SECRET_PATH}).",
    )
    sidecar_timeout = Float(30.0, config=True, help="Seconds for one call to the sidecar (a long-poll's wait on top).")

    @default("sidecar_socket")
    def _default_socket(self) -> str:
        return os.environ.get("JUPYTER_SUSPEND_SIDECAR_SOCKET") or proto.DEFAULT_SOCKET_PATH

    @default("sidecar_secret")
    def _default_secret(self) -> str:
        return os.environ.get("JUPYTER_SUSPEND_SIDECAR_SECRET") or proto.DEFAULT_SECRET_PATH

    def client(self, timeout: float | None = None) -> SidecarClient:
        return SidecarClient(self.sidecar_socket, self.sidecar_secret, timeout=timeout or self.sidecar_timeout)
