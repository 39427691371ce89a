"""The real sidecar as a subprocess against the loopback Kubernetes API (tests/kubeapi), and raw HTTP to it."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Coroutine, Sequence
from pathlib import Path
from typing import Any, TypeVar

from jupyter_suspend.common import sidecar_protocol as proto
from jupyter_suspend.server.sidecar_client import SidecarClient, _parse_response
from tests.kubeapi import KubeAPI

T = TypeVar("T")

NAMESPACE = "team-a"
POD = "notebook-0"
POD_LABELS = {"app": "notebook", "statefulset.kubernetes.io/pod-name": POD}
STORAGE = "suspend-store"
GKE = "podsnapshot.gke.io/v1"
ROOT = Path(__file__).resolve().parent.parent


def run(coro: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(coro)


def make_pod(kube: KubeAPI, name: str = POD, namespace: str = NAMESPACE, labels: dict[str, str] | None = None) -> str:
    """Create a running pod; returns its uid."""
    pod = kube.create(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace, "labels": labels or dict(POD_LABELS)},
            "spec": {"nodeName": "gpu-node-1", "containers": [{"name": "notebook", "image": "jupyter-suspend:0.1.0"}]},
        }
    )
    kube.patch_status("v1", "pods", namespace, name, {"phase": "Running"})
    return str(pod["metadata"]["uid"])


def make_storage_config(kube: KubeAPI) -> None:
    kube.create(
        {
            "apiVersion": GKE,
            "kind": "PodSnapshotStorageConfig",
            "metadata": {"name": STORAGE},
            "spec": {"snapshotStorageConfig": {"gcs": {"bucket": "suspend-bucket", "path": "snapshots"}}},
        }
    )


def installed_policy(name: str = "notebook-snapshots") -> dict[str, Any]:
    """What the platform team installs for --policy-mode require."""
    return {
        "apiVersion": GKE,
        "kind": "PodSnapshotPolicy",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {
            "storageConfigName": STORAGE,
            "selector": {"matchLabels": {"app": "notebook"}},
            "triggerConfig": {"type": "manual", "postCheckpoint": "stop"},
        },
    }


class Sidecar:
    """``python -m jupyter_suspend.sidecar`` with its service-account files from ``kube.incluster_files``."""

    def __init__(
        self,
        kube: KubeAPI,
        directory: Path,
        args: Sequence[str] = (),
        pod_uid: str = "uid-at-start",
        tcp: tuple[str, int] | None = None,
        extra_env: dict[str, str] | None = None,
    ):
        self.kube = kube
        #: Environment set after the service-account files' (e.g. another KUBERNETES_SERVICE_PORT).
        self.extra_env = dict(extra_env or {})
        self.dir = directory
        self.dir.mkdir(parents=True, exist_ok=True)
        self.sa = self.dir / "serviceaccount"
        self.run_dir = self.dir / "run"  # the emptyDir shared with the notebook container
        self.socket_path = str(self.run_dir / "sidecar.sock")
        self.secret_path = str(self.run_dir / "sidecar.secret")
        self.log_path = self.dir / "sidecar.log"
        self.args = list(args)
        self.pod_uid = pod_uid
        self.proc: subprocess.Popen[bytes] | None = None
        self.tcp = tcp
        if tcp is not None:
            self.args += ["--listen", f"{tcp[0]}:{tcp[1]}"]
        self.client = SidecarClient(self.socket_path, self.secret_path, timeout=20.0, tcp=tcp)

    def command(self) -> list[str]:
        return [
            sys.executable,
            "-m",
            "jupyter_suspend.sidecar",
            "--socket",
            self.socket_path,
            "--secret",
            self.secret_path,
            "--token-file",
            str(self.sa / "token"),
            "--ca-file",
            str(self.sa / "ca.crt"),
            "--namespace-file",
            str(self.sa / "namespace"),
            "--log-level",
            "DEBUG",
            *self.args,
        ]

    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("POD_", "KUBERNETES_", "POLICY_", "SIDECAR_"))}
        env.update(self.kube.incluster_files(self.sa, NAMESPACE))
        # POD_NAMESPACE is left out on purpose: the namespace comes from the service-account file.
        env.update(POD_NAME=POD, POD_UID=self.pod_uid, PYTHONPATH=str(ROOT))
        env.update(self.extra_env)
        return env

    def connect(self) -> socket.socket:
        """An open connection to the sidecar, nothing sent."""
        s = socket.socket(socket.AF_INET if self.tcp else socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(20)
        s.connect(self.tcp or self.socket_path)
        return s

    def start(self, timeout: float = 30.0) -> Sidecar:
        log = self.log_path.open("ab")
        self.proc = subprocess.Popen(self.command(), env=self.env(), stdout=log, stderr=subprocess.STDOUT, cwd=ROOT)
        log.close()
        deadline = time.monotonic() + timeout
        while not run(self.client.healthy()):
            if self.proc.poll() is not None:
                raise AssertionError(f"the sidecar exited with {self.proc.returncode}:\n{self.log()}")
            if time.monotonic() > deadline:
                raise AssertionError(f"the sidecar did not answer within {timeout} s:\n{self.log()}")
            time.sleep(0.05)
        return self

    def stop(self) -> int:
        if self.proc is None:
            return 0
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        code = self.proc.returncode
        self.proc = None
        return code

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def secret(self) -> str:
        return Path(self.secret_path).read_text().strip()

    def raw(
        self,
        method: str,
        path: str,
        body: bytes = b"",
        headers: dict[str, str] | None = None,
        auth: str | None = "secret",
        content_length: bool = True,
    ) -> tuple[int, dict[str, Any]]:
        """One request exactly as given; ``auth="secret"`` sends the right secret, None none at all."""
        head = {"Host": "sidecar", "Connection": "close"}
        if auth == "secret":
            head[proto.AUTH_HEADER] = f"Bearer {self.secret()}"
        elif auth is not None:
            head[proto.AUTH_HEADER] = auth
        if body and content_length:
            head["Content-Length"] = str(len(body))
        head.update(headers or {})
        request = f"{method} {path} HTTP/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in head.items()) + "\r\n"
        family = socket.AF_INET if self.tcp else socket.AF_UNIX
        with socket.socket(family, socket.SOCK_STREAM) as s:
            s.settimeout(20)
            s.connect(self.tcp or self.socket_path)
            s.sendall(request.encode("latin-1") + body)
            chunks = []
            while data := s.recv(65536):
                chunks.append(data)
        status, raw = _parse_response(b"".join(chunks), f"{method} {path}")
        return status, json.loads(raw) if raw else {}


def chunked(body: bytes, size: int = 4096) -> bytes:
    out = b""
    for i in range(0, len(body), size):
        part = body[i : i + size]
        out += f"{len(part):x}\r\n".encode() + part + b"\r\n"
    return out + b"0\r\n\r\n"


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
