"""What the platforms' own CRDs do to our objects on a real API server (the findings of issue 16 that a
home-made server let pass): the Kubeflow v1 Notebook's pod template is Kubernetes 1.23's PodSpec, so a native
sidecar's ``restartPolicy`` is refused (strict) or pruned (default); a WorkspaceKind's pod template has no place
for containers; Workspace times are int64 (milliseconds on current Kubeflow)."""

from __future__ import annotations

import json
import subprocess
from typing import Any

import pytest

from tests.cluster.control_plane import Cluster

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

SIDECAR = {
    "name": "sidecar",
    "image": "ghcr.io/example/jupyter-suspend:0.1.0",
    "restartPolicy": "Always",
    "command": ["jupyter-suspend-sidecar"],
}


def _create(cluster: Cluster, obj: dict[str, Any], *flags: str) -> subprocess.CompletedProcess[str]:
    command = [cluster.binary("kubectl"), f"--kubeconfig={cluster.admin_kubeconfig}", "create", "-f", "-", *flags]
    return subprocess.run(command, input=json.dumps(obj), capture_output=True, text=True, timeout=60)


def notebook(namespace: str, name: str) -> dict[str, Any]:
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "Notebook",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "template": {
                "spec": {
                    "initContainers": [dict(SIDECAR)],
                    "containers": [{"name": name, "image": "kubeflownotebookswg/jupyter-scipy:v1.9.0"}],
                }
            }
        },
    }


def test_notebook_v1_refuses_a_native_sidecar_strictly(cluster: Cluster, kube_ns: str) -> None:
    result = _create(cluster, notebook(kube_ns, "strict"), "--validate=strict")
    assert result.returncode != 0
    assert 'unknown field "spec.template.spec.initContainers[0].restartPolicy"' in result.stderr, result.stderr


def test_notebook_v1_prunes_a_native_sidecar_by_default(cluster: Cluster, kube_ns: str) -> None:
    """Without strict validation the object is stored without restartPolicy: the sidecar becomes an ordinary
    init container that never exits (the pod would stay Init:0/1)."""
    result = _create(cluster, notebook(kube_ns, "pruned"), "--validate=false")
    assert result.returncode == 0, result.stderr
    stored = json.loads(cluster.kubectl("get", "notebook.kubeflow.org", "pruned", "-n", kube_ns, "-o", "json"))
    init = stored["spec"]["template"]["spec"]["initContainers"][0]
    assert init["name"] == "sidecar"
    assert "restartPolicy" not in init


def test_workspacekind_pod_template_has_no_place_for_a_container(cluster: Cluster) -> None:
    kind = {
        "apiVersion": "kubeflow.org/v1beta1",
        "kind": "WorkspaceKind",
        "metadata": {"name": "jupyterlab-with-sidecar"},
        "spec": {"podTemplate": {"containers": [dict(SIDECAR)], "serviceAccountName": "jupyter-suspend-sidecar"}},
    }
    result = _create(cluster, kind, "--validate=strict", "--dry-run=server")
    assert result.returncode != 0
    assert 'unknown field "spec.podTemplate.containers"' in result.stderr, result.stderr
    assert 'unknown field "spec.podTemplate.serviceAccountName"' in result.stderr, result.stderr


def test_workspace_times_are_int64_milliseconds_fit(cluster: Cluster) -> None:
    schema = json.loads(cluster.kubectl("get", "crd", "workspaces.kubeflow.org", "-o", "json"))
    version = next(v for v in schema["spec"]["versions"] if v["name"] == "v1beta1")
    status = version["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"]
    assert status["pauseTime"]["format"] == "int64"
    activity = status["activity"]["properties"]
    assert activity["lastActivity"]["format"] == activity["lastUpdate"]["format"] == "int64"
