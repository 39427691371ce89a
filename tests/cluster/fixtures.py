"""pytest fixtures for the real control plane (a plugin of tests/conftest.py).

``cluster`` starts it once per test session (building it first if this pin was
never built on this machine) and stops every process at the end; a control
plane that cannot be built or started makes each test that needs it an
*error* with one line saying what failed and the command to run by hand —
never a skip. ``kube_ns`` gives each test its own namespace.
"""

from __future__ import annotations

import json
import os
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from .build import BuildError, bin_dir, is_built
from .control_plane import Cluster, ClusterError
from .resources import install_crds, install_platform_defaults

REPO = Path(__file__).resolve().parents[2]

_failure: str | None = None


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    global _failure
    if _failure is not None:
        pytest.fail(_failure, pytrace=False)
    workdir = Path(os.environ.get("JUPYTER_SUSPEND_CLUSTER_WORKDIR") or tmp_path_factory.mktemp("cluster"))
    nodes = int(os.environ.get("JUPYTER_SUSPEND_CLUSTER_NODES", "10"))
    plane = Cluster(workdir / "plane", nodes=nodes)
    try:
        if not is_built():
            # A first build takes many minutes, more than one test may (pytest-timeout): scripts/test.sh builds
            # before pytest; a developer runs the same command once.
            raise BuildError(f"the test control plane is not built for this pin yet ({bin_dir()})")
        plane.start()
        install_crds(plane)
        install_platform_defaults(plane)
    except (BuildError, ClusterError, subprocess.CalledProcessError, FileNotFoundError) as exc:
        plane.stop()
        detail = exc.stderr if isinstance(exc, subprocess.CalledProcessError) else ""
        _failure = f"the test control plane could not start: {exc} {detail}".strip() + (
            "\n(build it by hand: python -m tests.cluster build; start it: scripts/cluster.sh up)"
        )
        pytest.fail(_failure, pytrace=False)
    try:
        yield plane
    finally:
        plane.stop()


@pytest.fixture
def kube_ns(cluster: Cluster, request: pytest.FixtureRequest) -> Iterator[str]:
    """A namespace of this test's own, deleted (without waiting) afterwards."""
    base = "".join(ch if ch.isalnum() else "-" for ch in request.node.name.lower())[:40].strip("-")
    name = f"{base}-{uuid.uuid4().hex[:6]}"
    cluster.kubectl("create", "namespace", name)
    try:
        yield name
    finally:
        cluster.kubectl("delete", "namespace", name, "--wait=false", check=False)


@pytest.fixture
def admin_api(cluster: Cluster) -> Iterator[Any]:
    from kubernetes import config

    api = config.new_client_from_config(str(cluster.admin_kubeconfig))
    try:
        yield api
    finally:
        api.close()


def service_account_token(cluster: Cluster, namespace: str, account: str, seconds: int = 3600) -> str:
    """A bound token of ``account`` from the TokenRequest API (what kubelet projects into a pod)."""
    out = cluster.kubectl("create", "token", account, "-n", namespace, f"--duration={seconds}s")
    return out.strip()


def token_kubeconfig(cluster: Cluster, path: Path, token: str, namespace: str) -> Path:
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {"name": "test", "cluster": {"server": cluster.server, "certificate-authority": str(cluster.ca_file)}}
        ],
        "users": [{"name": "sa", "user": {"token": token}}],
        "contexts": [{"name": "test", "context": {"cluster": "test", "user": "sa", "namespace": namespace}}],
        "current-context": "test",
    }
    path.write_text(json.dumps(config))
    return path


def kustomize(cluster: Cluster, folder: Path) -> list[dict[str, Any]]:
    """``kubectl kustomize FOLDER`` with the kustomize built into this kubectl."""
    rendered = cluster.kubectl("kustomize", str(folder))
    return [doc for doc in yaml.safe_load_all(rendered) if doc]


@pytest.hookimpl(tryfirst=True)  # before pytest's -m deselection reads the markers
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The tests on the control plane run last, together: it starts once, and the Jupyter tests before them do
    not share two cores with an idle API server, controllers and kwok. Each is also ``slow`` (starting the
    control plane takes seconds), so the fast loop (-m "not slow") never starts it."""
    for item in items:
        if item.get_closest_marker("cluster") is not None and item.get_closest_marker("slow") is None:
            item.add_marker(pytest.mark.slow)
    items.sort(key=lambda item: item.get_closest_marker("cluster") is not None)
