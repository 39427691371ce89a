"""The notebook container's processes as a test plays them for the gke backend, with no Kubernetes API of their own
(the sidecar, wherever it runs, is the only one with a token): a real ``jupyter server`` process
(tests/servers.ServerProcess) on the gke backend, with the downward-API environment (``POD_UID``...), a
downward-API uid file and a ``spec_environ`` file the test writes to play the new pod, and a clock seam:
:class:`ClockSeamGKEBackend` adds the seconds written in a file to the wall clock (a frozen-and-restored process
sees exactly that: wall time moved on, monotonic time did not). Used on the real control plane (tests/cluster/).
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any, Protocol

from traitlets import Unicode

from jupyter_suspend.server.backends.gke import GKEBackend
from jupyter_suspend.server.pod_return import PodSignals
from tests.servers import ServerProcess

#: The pod the server plays by default (a test on the real control plane sets its own namespace).
POD = "notebook-0"
NAMESPACE = "team-a"


class SidecarAddress(Protocol):
    """Where the server reaches its sidecar (tests/cluster/notebook.RealSidecar)."""

    socket_path: str
    secret_path: str


class ClockSeamGKEBackend(GKEBackend):
    """The gke backend whose wall clock runs ahead by the seconds in ``clock_offset_file`` (if any)."""

    clock_offset_file = Unicode("", config=True, help="A file holding seconds to add to the wall clock.")

    def _wall(self) -> float:
        try:
            offset = float(Path(self.clock_offset_file).read_text())
        except (OSError, ValueError):
            offset = 0.0
        return time.time() + offset

    def signals(self) -> PodSignals:
        signals = super().signals()
        signals.wall = self._wall
        return signals


class PodFiles:
    """What the downward API and gVisor show inside the pod; the test plays a new pod by rewriting them."""

    def __init__(self, directory: Path):
        directory.mkdir(parents=True, exist_ok=True)
        self.uid_file = directory / "uid"
        self.spec_environ = directory / "spec_environ"
        self.clock_offset = directory / "clock_offset"

    def new_pod(self, uid: str, *, uid_file: bool = True, spec_environ: bool = False) -> None:
        if uid_file:
            self.uid_file.write_text(uid)
        if spec_environ:
            self.spec_environ.write_bytes(f"POD_NAME={POD}\0POD_NAMESPACE={NAMESPACE}\0POD_UID={uid}\0".encode())

    def jump_clock(self, seconds: float) -> None:
        """The wall clock moves ``seconds`` ahead of the monotonic clock (on top of earlier jumps)."""
        current = float(self.clock_offset.read_text()) if self.clock_offset.exists() else 0.0
        self.clock_offset.write_text(str(current + seconds))

    def reset(self, uid: str) -> None:
        self.uid_file.write_text(uid)
        for path in (self.spec_environ, self.clock_offset):
            path.unlink(missing_ok=True)


class GKEServer(ServerProcess):
    """``jupyter server`` as the notebook container runs it: gke backend, POD_* from the downward API, no token."""

    def __init__(
        self, base: Path, state_dir: Path, sidecar: SidecarAddress, files: PodFiles, pod_uid: str, backend: str = ""
    ) -> None:
        backend = backend or "tests.gke_server:ClockSeamGKEBackend"
        config = (
            f"c.SuspendApp.backend = {backend!r}\n"
            f"c.GKEBackend.sidecar_socket = {sidecar.socket_path!r}\n"
            f"c.GKEBackend.sidecar_secret = {sidecar.secret_path!r}\n"
            "c.GKEBackend.settle_seconds = 0.05\n"
            "c.GKEBackend.snapshot_timeout = 4.0\n"
            "c.GKEBackend.follow_interval = 1.0\n"
            "c.GKEBackend.return_check_interval = 0.1\n"
            "c.GKEBackend.pod_restored_poll = 0.2\n"
            f"c.GKEBackend.pod_uid_file = {str(files.uid_file)!r}\n"
            f"c.GKEBackend.spec_environ_path = {str(files.spec_environ)!r}\n"
            f"c.ClockSeamGKEBackend.clock_offset_file = {str(files.clock_offset)!r}\n"
        )
        super().__init__(base, state_dir, config)
        self.pod_uid = pod_uid

    def env(self) -> dict[str, str]:
        env = {k: v for k, v in super().env().items() if not k.startswith(("KUBERNETES_", "POD_"))}
        env.update(POD_NAME=POD, POD_NAMESPACE=NAMESPACE, POD_UID=self.pod_uid)
        return env

    def journal(self) -> list[dict[str, Any]]:
        path = self.state_dir / "journal.jsonl"
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]

    def wait_journal(self, kind: str, timeout: float = 20.0, after: int = 0) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            found = [e for e in self.journal() if e.get("kind") == kind and e.get("seq", 0) > after]
            if found:
                return found[-1]
            assert time.monotonic() < deadline, f"no journal entry {kind} after seq {after}"
            time.sleep(0.1)

    def last_seq(self) -> int:
        entries = self.journal()
        return int(entries[-1]["seq"]) if entries else 0

    def environ(self) -> dict[str, str]:
        """The server process's environment as the OS sees it."""
        assert self.process is not None
        raw = Path(f"/proc/{self.process.pid}/environ").read_bytes()
        return dict(item.split("=", 1) for item in raw.decode(errors="replace").split("\0") if "=" in item)


def no_kube_credentials(environ: dict[str, str]) -> list[str]:
    """What in a process environment would let it reach the Kubernetes API (empty: nothing)."""
    found = [k for k in environ if k.startswith("KUBERNETES_")]
    token = "/var/run/secrets/kubernetes.io/serviceaccount/token"
    if os.path.exists(token):
        found.append(token)
    return found
