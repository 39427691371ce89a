"""A real Kubernetes control plane on loopback, for the tests and by hand.

etcd, kube-apiserver, kube-controller-manager and kube-scheduler (built from
Go modules by ``build.py``) are started the way a cluster runs them, only
bound to 127.0.0.1: TLS with a CA made at start, client certificates for the
components, service-account token signing (so the TokenRequest API works),
``--authorization-mode=Node,RBAC`` and the default admission plugins. kwok
plays the kubelets of fake nodes (node leases renewed, pods moved through
their phases). Every process is started in its own process group and stopped
with it.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import build as cluster_build
from .pki import CertificateAuthority, service_account_key

HERE = Path(__file__).resolve().parent

#: The issuer and audience of service-account tokens; the in-cluster name a
#: real cluster uses (tokens are only checked by this API server).
SA_ISSUER = "https://kubernetes.default.svc.cluster.local"

#: Addresses the API server only stores, never dials: Service cluster IPs and
#: kwok's pod IPs. Nothing in the tests sends traffic to them.
SERVICE_CIDR = "10.96.0.0/24"
POD_CIDR = "10.244.0.1/16"

#: Nodes kwok manages carry this annotation (kwok's own convention).
KWOK_ANNOTATION = "kwok.x-k8s.io/node"

#: A running pod with this annotation is moved to Succeeded by kwok (our stage,
#: stages/pod-stopped.yaml): how the simulated GKE controller stops a pod after
#: a checkpoint with postCheckpoint: stop, as the real kubelet would report it.
STOPPED_ANNOTATION = "test.jupyter-suspend.io/stopped-after-checkpoint"


class ClusterError(RuntimeError):
    """The control plane did not start; the message names the component and its log."""


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@dataclass
class Component:
    name: str
    command: list[str]
    log: Path
    process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        with open(self.log, "ab") as out:
            self.process = subprocess.Popen(
                self.command, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True
            )

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def stop(self, timeout: float = 10.0) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGTERM)
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(5)

    def tail(self, lines: int = 15) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""


@dataclass
class Cluster:
    """One control plane. ``start()`` returns when the API server is ready,
    the controllers and scheduler are running and kwok's nodes are Ready."""

    workdir: Path
    nodes: int = 10
    gpus_per_node: int = 1
    bin_dir: Path | None = None
    components: dict[str, Component] = field(default_factory=dict)
    ports: dict[str, int] = field(default_factory=dict)
    ready_seconds: float = 0.0
    #: The CA made at start; tests/cluster/faults.py issues its proxy's serving certificate from it.
    ca: CertificateAuthority | None = None

    # -- paths ---------------------------------------------------------------
    @property
    def pki(self) -> Path:
        return self.workdir / "pki"

    @property
    def ca_file(self) -> Path:
        return self.pki / "ca.crt"

    @property
    def server(self) -> str:
        return f"https://127.0.0.1:{self.ports['apiserver']}"

    @property
    def admin_kubeconfig(self) -> Path:
        return self.workdir / "admin.kubeconfig"

    def binary(self, name: str) -> str:
        assert self.bin_dir is not None
        return str(self.bin_dir / name)

    # -- start/stop ------------------------------------------------------------
    def start(self, timeout: float = 90.0) -> Cluster:
        started = time.monotonic()
        self.bin_dir = self.bin_dir or cluster_build.build()
        shutil.rmtree(self.workdir, ignore_errors=True)
        (self.workdir / "logs").mkdir(parents=True)
        self.ports = {"etcd": free_port(), "etcd-peer": free_port(), "apiserver": free_port()}
        self._make_pki()
        try:
            self._start_etcd()
            self._start_apiserver(deadline=started + timeout)
            self._start_controllers()
            self._add_nodes()
            self._wait_nodes_ready(deadline=started + timeout)
        except BaseException:
            self.stop()
            raise
        self.ready_seconds = time.monotonic() - started
        (self.workdir / "ready-seconds").write_text(f"{self.ready_seconds:.1f}\n")
        return self

    def stop(self) -> None:
        for name in ("kwok", "kube-scheduler", "kube-controller-manager", "kube-apiserver", "etcd"):
            component = self.components.get(name)
            if component is not None:
                component.stop()

    def restart_apiserver(self, timeout: float = 60.0) -> None:
        """Stop and start kube-apiserver alone (etcd keeps the data), as a
        control-plane upgrade or crash would."""
        self.components["kube-apiserver"].stop()
        self.components["kube-apiserver"].start()
        self._wait_apiserver(time.monotonic() + timeout)

    def __enter__(self) -> Cluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def rss_bytes(self) -> dict[str, int]:
        """Resident memory of each running component (from /proc)."""
        sizes: dict[str, int] = {}
        for name, component in self.components.items():
            if not component.alive():
                continue
            assert component.process is not None
            try:
                status = Path(f"/proc/{component.process.pid}/status").read_text()
            except OSError:
                continue
            for line in status.splitlines():
                if line.startswith("VmRSS:"):
                    sizes[name] = int(line.split()[1]) * 1024
        return sizes

    # -- the parts -------------------------------------------------------------
    def _make_pki(self) -> None:
        ca = self.ca = CertificateAuthority(self.pki)
        ca.issue(
            "apiserver",
            "kube-apiserver",
            server_names=("localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc"),
            server_ips=("127.0.0.1",),
        )
        identities = {
            "admin": ("jupyter-suspend-test-admin", ("system:masters",)),
            "controller-manager": ("system:kube-controller-manager", ()),
            "scheduler": ("system:kube-scheduler", ()),
            # kwok plays many kubelets; the Node authorizer would confine a
            # real kubelet to its own node, which one identity cannot be.
            "kwok": ("kwok-controller", ("system:masters",)),
            "apiserver-kubelet-client": ("kube-apiserver-kubelet-client", ("system:masters",)),
            # The simulated GKE snapshot controller (tests/cluster/gke.py): the
            # only identity the PodSnapshot admission policy lets write them.
            "gke-controller": ("system:gke-pod-snapshot-controller", ("system:masters",)),
        }
        for name, (user, groups) in identities.items():
            cert, key = ca.issue(name, user, groups)
            self._write_kubeconfig(self.workdir / f"{name}.kubeconfig", user, cert, key)
        service_account_key(self.pki)

    def _write_kubeconfig(self, path: Path, user: str, cert: Path, key: Path) -> None:
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {"name": "test", "cluster": {"server": self.server, "certificate-authority": str(self.ca_file)}}
            ],
            "users": [{"name": user, "user": {"client-certificate": str(cert), "client-key": str(key)}}],
            "contexts": [{"name": "test", "context": {"cluster": "test", "user": user}}],
            "current-context": "test",
        }
        path.write_text(json.dumps(config, indent=1))

    def _component(self, name: str, command: list[str]) -> Component:
        component = Component(name, command, self.workdir / "logs" / f"{name}.log")
        self.components[name] = component
        component.start()
        return component

    def _start_etcd(self) -> None:
        client = f"http://127.0.0.1:{self.ports['etcd']}"
        peer = f"http://127.0.0.1:{self.ports['etcd-peer']}"
        self._component(
            "etcd",
            [
                self.binary("etcd"),
                "--name=test",
                f"--data-dir={self.workdir / 'etcd'}",
                f"--listen-client-urls={client}",
                f"--advertise-client-urls={client}",
                f"--listen-peer-urls={peer}",
                f"--initial-advertise-peer-urls={peer}",
                f"--initial-cluster=test={peer}",
                "--listen-metrics-urls=",
                # A test cluster's data is thrown away: fsync only slows it.
                "--unsafe-no-fsync=true",
                "--log-level=warn",
            ],
        )

    def _start_apiserver(self, deadline: float) -> None:
        pki = self.pki
        self._component(
            "kube-apiserver",
            [
                self.binary("kube-apiserver"),
                f"--etcd-servers=http://127.0.0.1:{self.ports['etcd']}",
                "--bind-address=127.0.0.1",
                "--advertise-address=127.0.0.1",
                # The `kubernetes` Service's endpoints may not be a loopback
                # address; nothing here dials the Service, so it keeps none.
                "--endpoint-reconciler-type=none",
                f"--secure-port={self.ports['apiserver']}",
                f"--cert-dir={self.workdir / 'apiserver-certs'}",
                f"--tls-cert-file={pki / 'apiserver.crt'}",
                f"--tls-private-key-file={pki / 'apiserver.key'}",
                f"--client-ca-file={self.ca_file}",
                f"--kubelet-client-certificate={pki / 'apiserver-kubelet-client.crt'}",
                f"--kubelet-client-key={pki / 'apiserver-kubelet-client.key'}",
                f"--service-account-issuer={SA_ISSUER}",
                f"--service-account-key-file={pki / 'sa.key'}",
                f"--service-account-signing-key-file={pki / 'sa.key'}",
                f"--api-audiences={SA_ISSUER}",
                "--authorization-mode=Node,RBAC",
                # The default plugins (ServiceAccount, LimitRanger, ResourceQuota,
                # PodSecurity, the webhooks, ...) stay on; NodeRestriction is
                # added as every real cluster does.
                "--enable-admission-plugins=NodeRestriction",
                f"--service-cluster-ip-range={SERVICE_CIDR}",
                "--allow-privileged=true",
                "--profiling=false",
                "--v=1",
            ],
        )
        self._wait_apiserver(deadline)

    def _wait_apiserver(self, deadline: float) -> None:
        context = ssl.create_default_context(cafile=str(self.ca_file))
        context.load_cert_chain(str(self.pki / "admin.crt"), str(self.pki / "admin.key"))
        last = ""
        while time.monotonic() < deadline:
            if not self.components["kube-apiserver"].alive() or not self.components["etcd"].alive():
                break
            try:
                with urllib.request.urlopen(f"{self.server}/readyz", context=context, timeout=5) as answer:
                    if answer.status == 200:
                        return
            except (urllib.error.URLError, OSError) as exc:
                last = str(exc)
            time.sleep(0.2)
        self._fail("kube-apiserver", f"not ready ({last})")

    def _fail(self, name: str, what: str) -> None:
        component = self.components.get(name)
        tail = component.tail() if component else ""
        raise ClusterError(
            f"test control plane: {name} {what}; its log: {self.workdir / 'logs' / (name + '.log')}; "
            f"to start it by hand: scripts/cluster.sh up\n{tail}"
        )

    def _start_controllers(self) -> None:
        self._component(
            "kube-controller-manager",
            [
                self.binary("kube-controller-manager"),
                f"--kubeconfig={self.workdir / 'controller-manager.kubeconfig'}",
                "--secure-port=0",
                "--leader-elect=false",
                # Each controller acts with its own ServiceAccount, as in kubeadm clusters.
                "--use-service-account-credentials=true",
                f"--service-account-private-key-file={self.pki / 'sa.key'}",
                f"--root-ca-file={self.ca_file}",
                # The default set: StatefulSet, ReplicaSet, Deployment,
                # ResourceQuota, namespace, service-account, garbage collector,
                # node lifecycle, ... (bootstrap-signer and token-cleaner stay off).
                "--controllers=*",
                "--v=1",
            ],
        )
        self._component(
            "kube-scheduler",
            [
                self.binary("kube-scheduler"),
                f"--kubeconfig={self.workdir / 'scheduler.kubeconfig'}",
                f"--authentication-kubeconfig={self.workdir / 'scheduler.kubeconfig'}",
                f"--authorization-kubeconfig={self.workdir / 'scheduler.kubeconfig'}",
                "--secure-port=0",
                "--leader-elect=false",
                "--v=1",
            ],
        )
        stages = self._kwok_stages()
        self._component(
            "kwok",
            [
                self.binary("kwok"),
                f"--kubeconfig={self.workdir / 'kwok.kubeconfig'}",
                f"--config={stages}",
                "--manage-all-nodes=false",
                f"--manage-nodes-with-annotation-selector={KWOK_ANNOTATION}=fake",
                f"--cidr={POD_CIDR}",
                "--node-ip=127.0.0.1",
                "--node-lease-duration-seconds=40",
            ],
        )

    def _kwok_stages(self) -> Path:
        """kwok's own published stages (node initialise and lease heartbeat,
        pods to Running and deleted) from its module, plus ours: a pod that the
        simulated GKE controller marks as stopped after a checkpoint turns
        Succeeded, as a real kubelet reports a container that exited 0."""
        assert self.bin_dir is not None
        upstream = self.bin_dir.parent / "kwok-stages"
        parts = [(upstream / name).read_text() for name in sorted(os.listdir(upstream))]
        parts.append((HERE / "stages" / "pod-stopped.yaml").read_text())
        config = self.workdir / "kwok.yaml"
        config.write_text("\n---\n".join(parts))
        return config

    def _add_nodes(self) -> None:
        for index in range(self.nodes):
            node = {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {
                    "name": f"gpu-node-{index}",
                    "annotations": {KWOK_ANNOTATION: "fake"},
                    # What a GKE Sandbox GPU node pool's nodes carry (labels and
                    # taints), so deploy/base's selectors and tolerations are exercised.
                    "labels": {
                        "kubernetes.io/hostname": f"gpu-node-{index}",
                        "type": "kwok",
                        "sandbox.gke.io/runtime": "gvisor",
                        "cloud.google.com/gke-accelerator": "nvidia-tesla-t4",
                    },
                },
                "spec": {
                    "taints": [
                        {"key": "sandbox.gke.io/runtime", "value": "gvisor", "effect": "NoSchedule"},
                        {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"},
                    ]
                },
                "status": {
                    "capacity": self._node_resources(),
                    "allocatable": self._node_resources(),
                },
            }
            self.kubectl("create", "-f", "-", input=json.dumps(node))

    def _node_resources(self) -> dict[str, str]:
        return {"cpu": "16", "memory": "64Gi", "pods": "110", "nvidia.com/gpu": str(self.gpus_per_node)}

    def _wait_nodes_ready(self, deadline: float) -> None:
        while time.monotonic() < deadline:
            for name in ("kube-controller-manager", "kube-scheduler", "kwok"):
                if not self.components[name].alive():
                    self._fail(name, "exited")
            answer = json.loads(self.kubectl("get", "nodes", "-o", "json"))
            ready = [
                n
                for n in answer["items"]
                if any(c["type"] == "Ready" and c["status"] == "True" for c in n["status"].get("conditions", []))
            ]
            if len(ready) == self.nodes:
                return
            time.sleep(0.3)
        self._fail("kwok", "did not make the fake nodes Ready")

    # -- helpers -----------------------------------------------------------------
    def kubectl(self, *args: str, input: str | None = None, kubeconfig: Path | None = None, check: bool = True) -> str:
        command = [self.binary("kubectl"), f"--kubeconfig={kubeconfig or self.admin_kubeconfig}", *args]
        result = subprocess.run(command, input=input, capture_output=True, text=True, timeout=120)
        if check and result.returncode != 0:
            raise subprocess.CalledProcessError(result.returncode, command, result.stdout, result.stderr)
        return result.stdout

    def env(self) -> dict[str, str]:
        return {"KUBECONFIG": str(self.admin_kubeconfig)}

    def describe(self) -> dict[str, Any]:
        return {
            "server": self.server,
            "kubeconfig": str(self.admin_kubeconfig),
            "ca": str(self.ca_file),
            "bin": str(self.bin_dir),
            "ready_seconds": round(self.ready_seconds, 1),
            "pids": {n: c.process.pid for n, c in self.components.items() if c.process},
        }
