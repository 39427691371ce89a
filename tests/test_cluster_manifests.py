"""Every object in deploy/ is created by the real API server with strict field
validation (unknown or misplaced fields are errors, not warnings), each
kustomization rendered by the kustomize built into kubectl, against the CRDs
of tests/cluster/crds/."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.cluster.control_plane import Cluster
from tests.cluster.fixtures import kustomize

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

REPO = Path(__file__).resolve().parent.parent
KUSTOMIZATIONS = sorted(
    path.parent
    for path in (REPO / "deploy").rglob("kustomization.yaml")
    if (yaml.safe_load(path.read_text()) or {}).get("kind", "Kustomization") == "Kustomization"
)


def _scoped(cluster: Cluster) -> dict[str, bool]:
    """kind (group/kind) -> namespaced, as this API server says."""
    found: dict[str, bool] = {}
    listing = cluster.kubectl("api-resources", "-o", "wide", "--no-headers")
    for line in listing.splitlines():
        parts = line.split()
        # NAME [SHORTNAMES] APIVERSION NAMESPACED KIND VERBS...
        for index, part in enumerate(parts):
            if part in ("true", "false") and index >= 2:
                version, kind = parts[index - 1], parts[index + 1]
                group = version.split("/")[0] if "/" in version else ""
                found[f"{group}/{kind}"] = part == "true"
                break
    return found


def _create(cluster: Cluster, documents: list[dict[str, Any]], dry_run: bool) -> subprocess.CompletedProcess[str]:
    command = [
        cluster.binary("kubectl"),
        f"--kubeconfig={cluster.admin_kubeconfig}",
        "create",
        "--validate=strict",
        "-f",
        "-",
        "-o",
        "name",
    ]
    if dry_run:
        command.append("--dry-run=server")
    payload = {"apiVersion": "v1", "kind": "List", "items": documents}
    return subprocess.run(command, input=json.dumps(payload), capture_output=True, text=True, timeout=120)


def _place(documents: list[dict[str, Any]], namespace: str, scopes: dict[str, bool]) -> tuple[list, list]:
    """(namespaced objects moved into the test's namespace, cluster-scoped ones)."""
    namespaced, cluster_scoped = [], []
    for doc in documents:
        group = doc["apiVersion"].split("/")[0] if "/" in doc["apiVersion"] else ""
        key = f"{group}/{doc['kind']}"
        assert key in scopes, f"{key} is not served by the API server (a CRD missing from tests/cluster/crds?)"
        if doc["kind"] == "Namespace":
            cluster_scoped.append(doc)
        elif scopes[key]:
            doc = {**doc, "metadata": {**doc["metadata"], "namespace": namespace}}
            namespaced.append(doc)
        else:
            cluster_scoped.append(doc)
    return namespaced, cluster_scoped


@pytest.mark.parametrize("folder", KUSTOMIZATIONS, ids=lambda p: str(p.relative_to(REPO)))
def test_every_deploy_object_is_accepted_strictly(cluster: Cluster, kube_ns: str, folder: Path) -> None:
    documents = kustomize(cluster, folder)
    assert documents, f"{folder} renders nothing"
    namespaced, cluster_scoped = _place(documents, kube_ns, _scoped(cluster))
    if cluster_scoped:
        # Cluster-wide objects are checked by a server-side dry run: admission
        # and validation run in full, nothing is left for the next test.
        result = _create(cluster, cluster_scoped, dry_run=True)
        assert result.returncode == 0, result.stderr
    if namespaced:
        result = _create(cluster, namespaced, dry_run=False)
        assert result.returncode == 0, result.stderr
        assert len(result.stdout.split()) == len(namespaced)
    assert not [line for line in result.stderr.splitlines() if "Warning" in line], result.stderr


def test_strict_validation_refuses_an_unknown_field(cluster: Cluster, kube_ns: str) -> None:
    """The check above can fail: a misplaced field is an error, not a warning."""
    config_map = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "x", "namespace": kube_ns},
        "data": {"a": "b"},
        "spec": {"misplaced": True},
    }
    result = _create(cluster, [config_map], dry_run=False)
    assert result.returncode != 0
    assert 'unknown field "spec"' in result.stderr
