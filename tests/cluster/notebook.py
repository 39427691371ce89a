"""A notebook of deploy/ on the real control plane, and its real sidecar.

``deploy_base`` renders deploy/base with kubectl's kustomize, moves it into the
test's namespace and creates it as a platform team would (strict field
validation); the real StatefulSet controller makes the pod, the real
scheduler binds it to a fake GPU node, kwok runs it. ``RealSidecar`` starts
``python -m jupyter_suspend.sidecar`` as its container would: a token bound
to its pod from the TokenRequest API (what the kubelet projects), the
cluster's CA, the namespace file and the downward-API environment.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from jupyter_suspend.server.sidecar_client import SidecarClient

from .control_plane import Cluster
from .fixtures import kustomize

REPO = Path(__file__).resolve().parents[2]


def render(cluster: Cluster, folder: Path, namespace: str) -> list[dict[str, Any]]:
    """deploy/<folder> as kustomize renders it into ``namespace`` (an overlay of ours that
    sets ``namespace:``, so RoleBinding subjects move too), without the Namespace object."""
    with tempfile.TemporaryDirectory() as overlay:
        kustomization = {
            "apiVersion": "kustomize.config.k8s.io/v1beta1",
            "kind": "Kustomization",
            "namespace": namespace,
            "resources": [os.path.relpath(folder, overlay)],
        }
        (Path(overlay) / "kustomization.yaml").write_text(json.dumps(kustomization))
        return [doc for doc in kustomize(cluster, Path(overlay)) if doc["kind"] != "Namespace"]


def create(cluster: Cluster, documents: list[dict[str, Any]]) -> None:
    payload = {"apiVersion": "v1", "kind": "List", "items": documents}
    cluster.kubectl("create", "--validate=strict", "-f", "-", input=json.dumps(payload))


def get(cluster: Cluster, namespace: str, *what: str) -> dict[str, Any] | None:
    out = cluster.kubectl("get", *what, "-n", namespace, "-o", "json", "--ignore-not-found")
    return json.loads(out) if out.strip() else None


def wait_for(predicate: Any, timeout: float, what: str, interval: float = 0.2) -> Any:
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = predicate()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"{what}: not within {timeout} s (last: {last!r})")


def running_pod(cluster: Cluster, namespace: str, name: str, not_uid: str | None = None) -> dict[str, Any] | None:
    pod = get(cluster, namespace, "pod", name)
    if pod is None or pod["metadata"].get("deletionTimestamp"):
        return None
    if not_uid is not None and pod["metadata"]["uid"] == not_uid:
        return None
    return pod if pod["status"].get("phase") == "Running" else None


def deploy_base(cluster: Cluster, namespace: str) -> dict[str, Any]:
    """deploy/base in ``namespace``; returns the running pod ``notebook-0``."""
    create(cluster, render(cluster, REPO / "deploy" / "base", namespace))
    return wait_for(lambda: running_pod(cluster, namespace, "notebook-0"), 90, "notebook-0 Running")


def bound_token(cluster: Cluster, namespace: str, account: str, pod: dict[str, Any], seconds: int = 3600) -> str:
    """A token bound to ``pod`` (invalid once that pod is gone), as the kubelet projects it."""
    return cluster.kubectl(
        "create",
        "token",
        account,
        "-n",
        namespace,
        "--bound-object-kind=Pod",
        f"--bound-object-name={pod['metadata']['name']}",
        f"--bound-object-uid={pod['metadata']['uid']}",
        f"--duration={seconds}s",
    ).strip()


def sidecar_args(cluster: Cluster, namespace: str) -> list[str]:
    """The sidecar container's args, as deploy/base's StatefulSet gives them."""
    statefulset = get(cluster, namespace, "statefulset", "notebook")
    assert statefulset is not None
    spec = statefulset["spec"]["template"]["spec"]
    containers = spec.get("initContainers", []) + spec["containers"]
    sidecar = next(c for c in containers if "jupyter-suspend-sidecar" in (c.get("command") or []))
    return list(sidecar.get("args") or [])


class RealSidecar:
    def __init__(
        self,
        cluster: Cluster,
        namespace: str,
        pod: dict[str, Any],
        directory: Path,
        args: list[str],
        api_port: int | None = None,
        extra_env: dict[str, str] | None = None,
    ):
        self.cluster = cluster
        self.api_port = api_port  # another address for the API server (tests/cluster/faults.py's proxy)
        self.extra_env = dict(extra_env or {})  # set last (e.g. another KUBERNETES_SERVICE_HOST)
        self.namespace = namespace
        self.pod = pod
        self.dir = directory
        self.sa = directory / "serviceaccount"
        self.run_dir = directory / "run"
        self.sa.mkdir(parents=True, exist_ok=True)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.socket_path = str(self.run_dir / "sidecar.sock")
        self.secret_path = str(self.run_dir / "sidecar.secret")
        self.log_path = directory / "sidecar.log"
        self.args = args
        self.proc: subprocess.Popen[bytes] | None = None
        self.client = SidecarClient(self.socket_path, self.secret_path, timeout=30.0)

    def write_token(self, token: str) -> None:
        path = self.sa / "token"
        partial = self.sa / "token.partial"
        partial.write_text(token)
        partial.replace(path)  # atomically, as the kubelet swaps projected files

    def start(self, token: str, timeout: float = 30.0) -> RealSidecar:
        import asyncio

        self.write_token(token)
        (self.sa / "ca.crt").write_bytes(self.cluster.ca_file.read_bytes())
        (self.sa / "namespace").write_text(self.namespace)
        env = {k: v for k, v in os.environ.items() if not k.startswith(("POD_", "KUBERNETES_", "KUBECONFIG"))}
        env.update(
            KUBERNETES_SERVICE_HOST="127.0.0.1",
            KUBERNETES_SERVICE_PORT=str(self.api_port or self.cluster.ports["apiserver"]),
            POD_NAME=self.pod["metadata"]["name"],
            POD_NAMESPACE=self.namespace,
            POD_UID=self.pod["metadata"]["uid"],
            PYTHONPATH=str(REPO),
        )
        env.update(self.extra_env)
        command = [
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
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT, cwd=REPO)
        deadline = time.monotonic() + timeout
        while not asyncio.run(self.client.healthy()):
            if self.proc.poll() is not None:
                raise AssertionError(f"the sidecar exited with {self.proc.returncode}:\n{self.log()}")
            if time.monotonic() > deadline:
                raise AssertionError(f"the sidecar did not answer within {timeout} s:\n{self.log()}")
            time.sleep(0.05)
        return self

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def raw_get(self, path: str) -> tuple[int, dict[str, Any]]:
        """One GET over the socket with the pod's secret: (status, JSON body)."""
        import socket

        secret = Path(self.secret_path).read_text().strip()
        request = f"GET {path} HTTP/1.1\r\nHost: sidecar\r\nAuthorization: Bearer {secret}\r\nConnection: close\r\n\r\n"
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            conn.settimeout(60)
            conn.connect(self.socket_path)
            conn.sendall(request.encode())
            chunks = []
            while data := conn.recv(65536):
                chunks.append(data)
        head, _, body = b"".join(chunks).partition(b"\r\n\r\n")
        status = int(head.split()[1])
        return status, json.loads(body) if body.strip() else {}


#: What the fake GPU nodes' taints (control_plane.py: GKE Sandbox's and the GPU's) ask a notebook pod to tolerate.
GPU_TOLERATIONS = [
    {"key": "sandbox.gke.io/runtime", "operator": "Exists", "effect": "NoSchedule"},
    {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
]


def notebook_statefulset(
    name: str,
    namespace: str,
    replicas: int = 0,
    gpus: int = 1,
    labels: dict[str, str] | None = None,
    node_selector: dict[str, str] | None = None,
) -> dict[str, Any]:
    """A one-pod notebook StatefulSet for GKE Sandbox GPU nodes (``replicas=0``: suspended); its pods carry
    ``app=notebook`` and ``environment=<name>``; ``labels`` go on the StatefulSet itself."""
    pod_labels = {"app": "notebook", "environment": name}
    container: dict[str, Any] = {"name": "notebook", "image": "jupyter/gpu:1", "command": ["jupyter", "lab"]}
    if gpus:
        container["resources"] = {"limits": {"nvidia.com/gpu": str(gpus)}}
    spec: dict[str, Any] = {"runtimeClassName": "gvisor", "tolerations": GPU_TOLERATIONS, "containers": [container]}
    if node_selector:
        spec["nodeSelector"] = node_selector
    return {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {"name": name, "namespace": namespace, "labels": dict(labels or {})},
        "spec": {
            "replicas": replicas,
            "serviceName": name,
            "selector": {"matchLabels": pod_labels},
            "template": {"metadata": {"labels": dict(pod_labels)}, "spec": spec},
        },
    }
