"""``jupyter-suspend-injector`` called by the real API server through a real MutatingWebhookConfiguration over
TLS (the CA bundle of a CA made for the test): a pod that opts in by label gets the sidecar, its token volume and
the socket volume; a pod that does not is left alone; a pod that already has it is not changed again; with the
injector down, ``failurePolicy: Ignore`` lets the pod through without it (and the notebook's status says so)."""

from __future__ import annotations

import base64
import json
import os
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.cluster.control_plane import Cluster, free_port
from tests.cluster.pki import CertificateAuthority

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

REPO = Path(__file__).resolve().parent.parent
OPT_IN = {"jupyter-suspend.io/inject": "true"}
SIDECAR = "jupyter-suspend-sidecar"


def _webhook_from_deploy(url: str, ca_bundle: bytes, name: str) -> dict[str, Any]:
    """deploy/injector's MutatingWebhookConfiguration as shipped, with the test's URL and CA bundle in place of
    the Service reference that cert-manager's CA injection would complete (the API server would dial a Service
    IP, which nothing serves here)."""
    shipped = yaml.safe_load((REPO / "deploy" / "injector" / "mutatingwebhookconfiguration.yaml").read_text())
    shipped["metadata"] = {"name": name}
    for hook in shipped["webhooks"]:
        hook["clientConfig"] = {"url": url, "caBundle": base64.b64encode(ca_bundle).decode()}
    return shipped


@pytest.fixture
def injector(cluster: Cluster, kube_ns: str, tmp_path: Path) -> Iterator[dict[str, Any]]:
    ca = CertificateAuthority(tmp_path / "pki")
    cert, key = ca.issue("injector", "jupyter-suspend-injector", server_ips=("127.0.0.1",))
    port = free_port()
    log = (tmp_path / "injector.log").open("wb")
    process = subprocess.Popen(
        [sys.executable, "-m", "jupyter_suspend.injector", "--cert", str(cert), "--key", str(key),
         "--host", "127.0.0.1", "--port", str(port), "--image", "ghcr.io/example/jupyter-suspend:0.1.0"],
        stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "PYTHONPATH": str(REPO)},
    )  # fmt: skip
    context = ssl.create_default_context(cafile=str(ca.cert_file))
    deadline = time.monotonic() + 30
    while True:
        try:
            with urllib.request.urlopen(f"https://127.0.0.1:{port}/healthz", context=context, timeout=2):
                break
        except (urllib.error.URLError, OSError):
            if process.poll() is not None or time.monotonic() > deadline:
                raise AssertionError((tmp_path / "injector.log").read_text()) from None
            time.sleep(0.1)
    name = f"injector-{kube_ns}"
    webhook = _webhook_from_deploy(f"https://127.0.0.1:{port}/mutate", ca.cert_file.read_bytes(), name)
    # Only this test's namespace: other tests' pods stay out of it.
    for hook in webhook["webhooks"]:
        hook["namespaceSelector"] = {"matchLabels": {"kubernetes.io/metadata.name": kube_ns}}
    cluster.kubectl("create", "--validate=strict", "-f", "-", input=json.dumps(webhook))
    try:
        yield {"process": process, "name": name, "log": tmp_path / "injector.log"}
    finally:
        cluster.kubectl("delete", "mutatingwebhookconfiguration", name, "--wait=false", check=False)
        process.terminate()
        process.wait(10)
        log.close()


def _pod(namespace: str, name: str, labels: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": {
            "tolerations": [{"operator": "Exists", "effect": "NoSchedule"}],
            "containers": [{"name": "main", "image": "jupyter:1", "command": ["jupyter", "lab"]}],
        },
    }


def _create_pod(cluster: Cluster, pod: dict[str, Any]) -> dict[str, Any]:
    # Strict validation: every field the injector adds must be a real PodSpec field.
    out = cluster.kubectl("create", "--validate=strict", "-f", "-", "-o", "json", input=json.dumps(pod))
    return json.loads(out)


def _names(pod: dict[str, Any]) -> list[str]:
    spec = pod["spec"]
    return [c["name"] for c in spec.get("initContainers", []) + spec["containers"]]


def test_the_real_api_server_calls_the_injector_for_opted_in_pods(
    cluster: Cluster, kube_ns: str, injector: dict[str, Any]
) -> None:
    stored = _create_pod(cluster, _pod(kube_ns, "opted-in", dict(OPT_IN)))
    assert SIDECAR in _names(stored), _names(stored)
    volumes = {v["name"]: v for v in stored["spec"].get("volumes", [])}
    projected = [v for v in volumes.values() if "projected" in v]
    assert any("serviceAccountToken" in source for v in projected for source in v["projected"]["sources"]), (
        volumes
    )  # the sidecar's own token
    sidecar = next(
        c for c in stored["spec"]["containers"] + stored["spec"].get("initContainers", []) if c["name"] == SIDECAR
    )
    main = next(c for c in stored["spec"]["containers"] if c["name"] == "main")
    token_mounts = {m["name"] for m in sidecar.get("volumeMounts", [])} & {v["name"] for v in projected}
    assert token_mounts, "the sidecar mounts its token"
    assert not token_mounts & {m["name"] for m in main.get("volumeMounts", [])}, "the notebook has no token"
    assert stored["spec"].get("automountServiceAccountToken") is False
    # The ServiceAccount admission plugin runs before MutatingAdmissionWebhook (k8s.io/kubernetes v1.37.2,
    # pkg/kubeapiserver/options/plugins.go, AllOrderedPlugins), so the pod the injector sees already mounts the
    # default token (kube-api-access-*); the injector removes it: the notebook container has none.
    assert not [name for name in volumes if name.startswith("kube-api-access-")], volumes
    secret_dir = "/var/run/secrets/kubernetes.io/serviceaccount"
    assert not [m for m in main.get("volumeMounts", []) if m["mountPath"].startswith(secret_dir)], main

    plain = _create_pod(cluster, _pod(kube_ns, "not-opted-in", {"app": "other"}))
    assert _names(plain) == ["main"]


def test_a_pod_that_has_the_sidecar_is_left_alone(cluster: Cluster, kube_ns: str, injector: dict[str, Any]) -> None:
    pod = _pod(kube_ns, "already", dict(OPT_IN))
    pod["spec"]["containers"].append({"name": SIDECAR, "image": "mine:1", "command": ["jupyter-suspend-sidecar"]})
    stored = _create_pod(cluster, pod)
    assert _names(stored).count(SIDECAR) == 1
    assert next(c for c in stored["spec"]["containers"] if c["name"] == SIDECAR)["image"] == "mine:1"


def test_with_the_injector_down_failure_policy_ignore_lets_the_pod_through(
    cluster: Cluster, kube_ns: str, injector: dict[str, Any]
) -> None:
    injector["process"].terminate()
    injector["process"].wait(10)
    stored = _create_pod(cluster, _pod(kube_ns, "unlucky", dict(OPT_IN)))
    assert SIDECAR not in _names(stored)
