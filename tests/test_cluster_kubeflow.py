"""The Kubeflow backends on the real control plane: the real sidecar process (``--workload notebook|workspace``) with
a TokenRequest token of the ServiceAccount that the deploy/ overlay binds its Role to, judged by the real RBAC
authorizer; Notebooks and Workspaces as the upstream CRDs define them; the simulated Kubeflow controllers of
tests/cluster/kubeflow.py (the real ones cannot be built here) writing StatefulSets that the real StatefulSet
controller, scheduler and kwok turn into pods; and a real ``jupyter server`` on the kubeflow-notebook /
kubeflow-workspace backend.

What calls the sidecar made is read from the API server's own counters (``apiserver_request_total``): the
simulated controllers read from their watches, and the test reads with LIST, so every GET or PATCH of a Notebook
or Workspace counted here is the sidecar's.
"""

from __future__ import annotations

import asyncio
import json
import re
import signal
import time
import uuid
from collections.abc import Iterator
from datetime import datetime
from importlib.resources import files
from pathlib import Path
from typing import Any

import jsonschema
import nbformat
import pytest
from kubernetes import client

from jupyter_suspend.common import sidecar_protocol as proto
from jupyter_suspend.server.backends.base import ReleaseContext
from jupyter_suspend.server.backends.gke_workspaces import WHEN_RESTORED, GKEWorkspacesBackend
from jupyter_suspend.server.backends.kubeflow import KubeflowNotebookBackend
from jupyter_suspend.server.states import FlushFailed
from tests.cluster.control_plane import Cluster
from tests.cluster.faults import FaultProxy
from tests.cluster.fixtures import service_account_token
from tests.cluster.kubeflow import (
    GROUP,
    STOPPED_ANNOTATION,
    TOLERATIONS,
    GKEWorkspacesAddOn,
    NotebookController,
    WorkspaceController,
    workspace_kind_object,
    workspace_object,
)
from tests.cluster.notebook import REPO, RealSidecar, bound_token, create, render, wait_for
from tests.conftest import checkpoint_handler_code
from tests.servers import ServerProcess
from tests.test_gke_backend import SETUP, run_cell, verdict

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

NOTEBOOK = "notebook"  # its pod is notebook-0, the name the overlay's Role pins
POD = "notebook-0"
WORKSPACE = "research"  # its ServiceAccount ws-research is the overlay's RoleBinding subject
WORKLOAD_VIEW_SCHEMA = json.loads(files("jupyter_suspend.common.schemas").joinpath("sidecar-workload.json").read_text())


# -- the API server's own counters -------------------------------------------------------------------------------

_SAMPLE = re.compile(r"^apiserver_request_total\{(?P<labels>[^}]*)\} (?P<value>\S+)$")


def requests_made(cluster: Cluster, resource: str, verb: str) -> int:
    """How many ``verb`` requests on ``resource`` (no subresource) the API server has answered since it started."""
    total = 0
    for line in cluster.kubectl("get", "--raw", "/metrics").splitlines():
        match = _SAMPLE.match(line)
        if not match:
            continue
        labels = dict(re.findall(r'(\w+)="([^"]*)"', match["labels"]))
        if labels.get("resource") == resource and labels.get("verb") == verb and not labels.get("subresource"):
            total += int(float(match["value"]))
    return total


class Counter:
    """The sidecar's GETs and PATCHes of the owner object since the last ``reset``."""

    def __init__(self, cluster: Cluster, resource: str) -> None:
        self.cluster, self.resource = cluster, resource
        self.reset()

    def read(self) -> tuple[int, int]:
        return (
            requests_made(self.cluster, self.resource, "GET"),
            requests_made(self.cluster, self.resource, "PATCH"),
        )

    def reset(self) -> None:
        self.base = self.read()

    def since(self) -> dict[str, int]:
        now = self.read()
        return {"get": now[0] - self.base[0], "patch": now[1] - self.base[1]}


def read(admin_api: Any, version: str, plural: str, namespace: str, name: str) -> dict[str, Any] | None:
    """One object by LIST with a field selector (never a GET: the counters above are the sidecar's alone)."""
    if plural in ("pods", "statefulsets"):
        api = client.CoreV1Api(admin_api) if plural == "pods" else client.AppsV1Api(admin_api)
        call = api.list_namespaced_pod if plural == "pods" else api.list_namespaced_stateful_set
        listed = admin_api.sanitize_for_serialization(call(namespace, field_selector=f"metadata.name={name}"))
    else:
        listed = client.CustomObjectsApi(admin_api).list_namespaced_custom_object(
            GROUP, version, namespace, plural, field_selector=f"metadata.name={name}"
        )
    items = listed.get("items") or []
    return items[0] if items else None


def notebook(admin_api: Any, namespace: str) -> dict[str, Any]:
    found = read(admin_api, "v1", "notebooks", namespace, NOTEBOOK)
    assert found is not None
    return found


def workspace(admin_api: Any, namespace: str) -> dict[str, Any]:
    found = read(admin_api, "v1beta1", "workspaces", namespace, WORKSPACE)
    assert found is not None
    return found


def running(admin_api: Any, namespace: str, name: str, not_uid: str | None = None) -> dict[str, Any] | None:
    pod = read(admin_api, "v1", "pods", namespace, name)
    if pod is None or pod["metadata"].get("deletionTimestamp") or pod["metadata"]["uid"] == not_uid:
        return None
    ready = any(c["type"] == "Ready" and c["status"] == "True" for c in pod["status"].get("conditions") or [])
    return pod if pod["status"].get("phase") == "Running" and ready else None


def epoch(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


class Sidecar(RealSidecar):
    """The real sidecar of a Kubeflow pod; ``raw`` sends one request exactly as given."""

    def raw(self, method: str, path: str, body: bytes = b"", auth: str | None = None) -> tuple[int, dict[str, Any]]:
        import socket

        secret = Path(self.secret_path).read_text().strip()
        head = f"{method} {path} HTTP/1.1\r\nHost: sidecar\r\nConnection: close\r\n"
        head += f"{proto.AUTH_HEADER}: {auth or 'Bearer ' + secret}\r\n"
        if body:
            head += f"Content-Length: {len(body)}\r\n"
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            conn.settimeout(60)
            conn.connect(self.socket_path)
            conn.sendall((head + "\r\n").encode("latin-1") + body)
            chunks = []
            while data := conn.recv(65536):
                chunks.append(data)
        head_bytes, _, answer = b"".join(chunks).partition(b"\r\n\r\n")
        return int(head_bytes.split()[1]), json.loads(answer) if answer.strip() else {}


def run(coro: Any) -> Any:
    return asyncio.run(coro)


# -- fixtures: the overlay, the controllers ---------------------------------------------------------------------


def deploy_overlay(cluster: Cluster, overlay: str, namespace: str) -> list[dict[str, Any]]:
    """deploy/overlays/<overlay> rendered into ``namespace`` and created as it is (strict field validation); the
    example Notebook of the notebook overlay is left out (the test makes its own)."""
    documents = [
        d for d in render(cluster, REPO / "deploy" / "overlays" / overlay, namespace) if d["kind"] != "Notebook"
    ]
    create(cluster, documents)
    return documents


@pytest.fixture
def notebooks(cluster: Cluster, kube_ns: str) -> Iterator[NotebookController]:
    deploy_overlay(cluster, "kubeflow-notebook", kube_ns)
    with NotebookController(cluster, kube_ns) as controller:
        yield controller
    assert not controller.errors, controller.errors


@pytest.fixture
def workspaces(
    cluster: Cluster, kube_ns: str, admin_api: Any, request: pytest.FixtureRequest
) -> Iterator[WorkspaceController]:
    """The overlay, a WorkspaceKind of this test's own (cluster-scoped), the workspace controller
    (``request.param``: its keyword arguments)."""
    deploy_overlay(cluster, "kubeflow-workspace", kube_ns)
    kind = f"jupyterlab-{kube_ns}"[-63:].strip("-")
    custom = client.CustomObjectsApi(admin_api)
    custom.create_cluster_custom_object(GROUP, "v1beta1", "workspacekinds", workspace_kind_object(kind))
    try:
        with WorkspaceController(cluster, kube_ns, **getattr(request, "param", {})) as controller:
            controller.kind_name = kind  # type: ignore[attr-defined]
            yield controller
        assert not controller.errors, controller.errors
    finally:
        custom.delete_cluster_custom_object(GROUP, "v1beta1", "workspacekinds", kind)


def example_notebook(namespace: str) -> dict[str, Any]:
    """deploy/overlays/kubeflow-notebook/notebook-example.yaml (its own account, no token in the notebook
    container), with an emptyDir for its home (no storage here) and the fake GPU nodes' tolerations."""
    import yaml

    nb = yaml.safe_load((REPO / "deploy" / "overlays" / "kubeflow-notebook" / "notebook-example.yaml").read_text())
    nb["metadata"]["namespace"] = namespace
    spec = nb["spec"]["template"]["spec"]
    spec["volumes"] = [{"name": "home", "emptyDir": {}}]
    spec["tolerations"] = TOLERATIONS
    assert nb["metadata"]["name"] == NOTEBOOK == spec["containers"][0]["name"]
    return dict(nb)


def start_notebook(cluster: Cluster, admin_api: Any, namespace: str) -> dict[str, Any]:
    create(cluster, [example_notebook(namespace)])
    return wait_for(lambda: running(admin_api, namespace, POD), 90, f"{POD} Running and Ready")


def start_workspace(cluster: Cluster, admin_api: Any, namespace: str, kind: str) -> dict[str, Any]:
    """The Workspace Running; its pod (named by the controller: status.podTemplatePod.name)."""
    create(cluster, [workspace_object(WORKSPACE, namespace, kind)])
    status = wait_for(
        lambda: (s := workspace(admin_api, namespace).get("status") or {}).get("state") == "Running" and s,
        90,
        "the Workspace Running",
    )
    name = status["podTemplatePod"]["name"]
    pod = running(admin_api, namespace, name)
    assert pod is not None, name
    return pod


def token(cluster: Cluster, namespace: str, account: str, pod: dict[str, Any], outlives_pod: bool) -> str:
    """A TokenRequest token of ``account``: bound to ``pod`` as the kubelet projects it, or (``outlives_pod``) not
    bound, for a test whose sidecar process goes on observing after its pod is gone (a real sidecar dies with its
    pod; the API server refuses a bound token once the pod is deleted, after its authentication cache's TTL)."""
    assert pod["spec"]["serviceAccountName"] == account
    if outlives_pod:
        return service_account_token(cluster, namespace, account)
    return bound_token(cluster, namespace, account, pod)


def lone_pod(cluster: Cluster, admin_api: Any, namespace: str) -> dict[str, Any]:
    """A pod of the notebook's name, run as the sidecar's account, that no Notebook owns (no notebook-name label)."""
    cluster.kubectl(
        "run",
        POD,
        "-n",
        namespace,
        "--image=x:1",
        "--restart=Never",
        "--labels=app=notebook",
        "--overrides=" + json.dumps({"spec": {"serviceAccountName": "jupyter-suspend-sidecar"}}),
    )
    return dict(wait_for(lambda: read(admin_api, "v1", "pods", namespace, POD), 30, "the lone pod"))


def notebook_sidecar(
    cluster: Cluster, namespace: str, pod: dict[str, Any], directory: Path, outlives_pod: bool = False
) -> Sidecar:
    # notebook-example.yaml runs the pod as the overlay's account jupyter-suspend-sidecar.
    secret = token(cluster, namespace, "jupyter-suspend-sidecar", pod, outlives_pod)
    return Sidecar(cluster, namespace, pod, directory, ["--workload", "notebook"]).start(secret)


def workspace_sidecar(
    cluster: Cluster, namespace: str, pod: dict[str, Any], directory: Path, outlives_pod: bool = False
) -> Sidecar:
    # The pod runs as the controller's per-workspace ServiceAccount; the overlay binds the sidecar's Role to it.
    secret = token(cluster, namespace, f"ws-{WORKSPACE}", pod, outlives_pod)
    return Sidecar(cluster, namespace, pod, directory, ["--workload", "workspace"]).start(secret)


# -- the simulated controllers themselves ------------------------------------------------------------------------


def test_the_notebook_controller_owns_a_statefulset_and_service_and_mirrors_the_pod(
    cluster: Cluster, kube_ns: str, admin_api: Any, notebooks: NotebookController
) -> None:
    pod = start_notebook(cluster, admin_api, kube_ns)
    assert pod["metadata"]["labels"]["notebook-name"] == NOTEBOOK
    assert pod["spec"]["containers"][0]["workingDir"] == "/home/jovyan"
    assert pod["spec"]["securityContext"]["fsGroup"] == 100
    owner = notebook(admin_api, kube_ns)
    sts = read(admin_api, "v1", "statefulsets", kube_ns, NOTEBOOK)
    assert sts is not None
    assert sts["metadata"]["ownerReferences"][0]["uid"] == owner["metadata"]["uid"]
    service = admin_api.sanitize_for_serialization(
        client.CoreV1Api(admin_api).read_namespaced_service(NOTEBOOK, kube_ns)
    )
    assert service["spec"]["ports"][0]["name"] == f"http-{NOTEBOOK}"
    status = wait_for(
        lambda: (s := notebook(admin_api, kube_ns).get("status") or {}).get("readyReplicas") == 1 and s,
        30,
        "readyReplicas 1",
    )
    assert "running" in status["containerState"], status  # the container named like the Notebook
    assert [c["type"] for c in status["conditions"]] == [c["type"] for c in pod["status"]["conditions"]]


# -- the sidecar alone ------------------------------------------------------------------------------------------


def test_sidecar_stops_its_own_notebook_and_refuses_everything_else(
    cluster: Cluster, kube_ns: str, admin_api: Any, notebooks: NotebookController, tmp_path: Path
) -> None:
    counter = Counter(cluster, "notebooks")
    # First a pod of the right name that no Notebook owns (no notebook-name label).
    lone = lone_pod(cluster, admin_api, kube_ns)
    sidecar = notebook_sidecar(cluster, kube_ns, lone, tmp_path / "lone")
    try:
        counter.reset()
        for method, path, raw in (("GET", proto.PATH_WORKLOAD, b""), ("POST", proto.PATH_WORKLOAD_STOP, b"{}")):
            code, body = sidecar.raw(method, path, raw)
            assert (code, body["error"]) == (409, proto.E_OWNER_UNKNOWN), body
            assert "no label notebook-name" in body["message"]
            assert body["next_step"]
        assert counter.since() == {"get": 0, "patch": 0}  # the pod's label was read; no Notebook was
    finally:
        sidecar.stop()
    cluster.kubectl("delete", "pod", POD, "-n", kube_ns, "--wait=true")

    pod = start_notebook(cluster, admin_api, kube_ns)
    sidecar = notebook_sidecar(cluster, kube_ns, pod, tmp_path / "sidecar", outlives_pod=True)
    try:
        # What the sidecar could write (the controller mirrors the pod into the status whenever it changes).
        version = (lambda nb: (nb["metadata"].get("annotations"), nb["spec"]))(notebook(admin_api, kube_ns))
        counter.reset()
        refused = [
            (b"{", 400, proto.E_MALFORMED),
            (b"[]", 400, proto.E_NOT_AN_OBJECT),
            (b'{"paused": true}', 400, proto.E_UNKNOWN_FIELD),
            (b'{"name": 7}', 400, proto.E_WRONG_TYPE),
            (b'{"name": "../x"}', 400, proto.E_INVALID_VALUE),
            (b'{"pod": "other-0"}', 403, proto.E_FORBIDDEN_TARGET),
            (b'{"namespace": "team-b"}', 403, proto.E_FORBIDDEN_TARGET),
            (b'{"kind": "workspace"}', 403, proto.E_FORBIDDEN_TARGET),
            (b'{"name": "' + b"x" * (proto.MAX_BODY_BYTES + 1) + b'"}', 413, proto.E_BODY_TOO_LARGE),
        ]
        for raw, status, error in refused:
            code, body = sidecar.raw("POST", proto.PATH_WORKLOAD_STOP, raw)
            assert (code, body["error"]) == (status, error), (raw[:40], body)
        code, body = sidecar.raw("POST", proto.PATH_WORKLOAD_STOP, b"{}", auth="Bearer wrong")
        assert code == 401
        for method, path in (("POST", proto.PATH_SNAPSHOT_REQUESTS), ("GET", proto.PATH_SNAPSHOTS)):
            code, body = sidecar.raw(method, path, b"{}" if method == "POST" else b"")
            assert (code, body["error"]) == (409, proto.E_NOT_ENABLED), body
        # Another Notebook's name: the pod's label is read, the Notebook is neither read nor written.
        code, body = sidecar.raw("POST", proto.PATH_WORKLOAD_STOP, b'{"name": "someone-else"}')
        assert (code, body["error"]) == (403, proto.E_FORBIDDEN_TARGET), body
        assert counter.since() == {"get": 0, "patch": 0}
        after = notebook(admin_api, kube_ns)
        assert (after["metadata"].get("annotations"), after["spec"]) == version

        view = run(sidecar.client.workload())
        jsonschema.validate(view, WORKLOAD_VIEW_SCHEMA)
        assert (view["kind"], view["name"], view["namespace"], view["pod"]) == ("notebook", NOTEBOOK, kube_ns, POD)
        assert (view["stopped"], view["ready_replicas"]) == (False, 1)

        before = time.time()
        counter.reset()
        stopped = run(sidecar.client.stop_workload({"kind": "notebook", "name": NOTEBOOK}))
        assert stopped["already_stopped"] is False
        assert stopped["workload"]["stopped"] is True
        annotation = notebook(admin_api, kube_ns)["metadata"]["annotations"][STOPPED_ANNOTATION]
        assert annotation == stopped["requested_at"]
        assert before - 1 <= epoch(annotation) <= time.time() + 1
        wait_for(
            lambda: read(admin_api, "v1", "statefulsets", kube_ns, NOTEBOOK)["spec"]["replicas"] == 0, 30, "0 replicas"
        )
        wait_for(lambda: read(admin_api, "v1", "pods", kube_ns, POD) is None, 60, f"{POD} gone")
        again = run(sidecar.client.stop_workload())
        assert again["already_stopped"] is True
        assert again["requested_at"] is None
        jsonschema.validate(again["workload"], WORKLOAD_VIEW_SCHEMA)
        assert counter.since()["patch"] == 1  # the second stop wrote nothing
        assert notebook(admin_api, kube_ns)["metadata"]["annotations"][STOPPED_ANNOTATION] == annotation
    finally:
        sidecar.stop()


def test_sidecar_pauses_its_own_workspace(
    cluster: Cluster, kube_ns: str, admin_api: Any, workspaces: WorkspaceController, tmp_path: Path
) -> None:
    """The overlay's Role (pinned to the Workspace ``research``) bound to ``ws-research``, the account the controller
    made for the pod; the StatefulSet's name has the API server's generated suffix and the pod is read from
    ``status.podTemplatePod.name``."""
    pod = start_workspace(cluster, admin_api, kube_ns, workspaces.kind_name)  # type: ignore[attr-defined]
    ((owner, sts),) = workspaces.statefulsets_created
    assert owner == WORKSPACE
    assert re.fullmatch(rf"ws-{WORKSPACE}-[a-z0-9]{{5}}", sts), sts
    assert pod["metadata"]["name"] == f"{sts}-0"
    counter = Counter(cluster, "workspaces")
    sidecar = workspace_sidecar(cluster, kube_ns, pod, tmp_path / "sidecar", outlives_pod=True)
    try:
        counter.reset()
        code, body = sidecar.raw("POST", proto.PATH_WORKLOAD_STOP, b'{"kind": "notebook"}')
        assert (code, body["error"]) == (403, proto.E_FORBIDDEN_TARGET)
        assert counter.since() == {"get": 0, "patch": 0}
        view = run(sidecar.client.workload())
        jsonschema.validate(view, WORKLOAD_VIEW_SCHEMA)
        assert (view["kind"], view["name"], view["state"], view["stopped"], view["pod"]) == (
            "workspace",
            WORKSPACE,
            "Running",
            False,
            pod["metadata"]["name"],
        )
        before = time.time()
        counter.reset()
        stopped = run(sidecar.client.stop_workload({"name": WORKSPACE}))
        assert stopped["workload"]["stopped"] is True
        assert workspace(admin_api, kube_ns)["spec"]["paused"] is True
        # Terminating lasts as long as kwok takes to remove the pod (no grace period here): seen or not, never after.
        states = [run(sidecar.client.workload())["state"]]
        wait_for(lambda: read(admin_api, "v1", "pods", kube_ns, pod["metadata"]["name"]) is None, 60, "the pod gone")
        status = wait_for(
            lambda: (s := workspace(admin_api, kube_ns)["status"])["state"] == "Paused" and s, 30, "Paused"
        )
        states.append(run(sidecar.client.workload())["state"])
        assert states in (["Terminating", "Paused"], ["Running", "Paused"], ["Paused", "Paused"]), states
        # pauseTime is epoch MILLISECONDS (notebooks-v2 UnixMilli); the sidecar reads it as seconds.
        assert before * 1000 - 1000 <= status["pauseTime"] <= time.time() * 1000 + 1000
        view = run(sidecar.client.workload())  # the pod is gone; the sidecar process still answers
        jsonschema.validate(view, WORKLOAD_VIEW_SCHEMA)
        assert view["pause_time"] == status["pauseTime"] // 1000
        assert abs(epoch(view["stopped_at"]) - view["pause_time"]) < 1
        assert status["podTemplatePod"]["name"] == ""  # no pod while paused
        assert counter.since()["patch"] == 1
    finally:
        sidecar.stop()


def test_the_overlays_sidecar_role_denies_the_neighbour_workspace_and_a_scale(
    cluster: Cluster, kube_ns: str, admin_api: Any, workspaces: WorkspaceController, tmp_path: Path
) -> None:
    """The sidecar's token (``ws-research``) by the real authorizer: its own Workspace yes; a neighbour's Workspace,
    the StatefulSet's scale and secrets no."""
    from kubernetes import config

    from tests.cluster.fixtures import token_kubeconfig

    pod = start_workspace(cluster, admin_api, kube_ns, workspaces.kind_name)  # type: ignore[attr-defined]
    create(cluster, [workspace_object("neighbour", kube_ns, workspaces.kind_name, paused=True)])  # type: ignore[attr-defined]
    token = bound_token(cluster, kube_ns, f"ws-{WORKSPACE}", pod)
    api = config.new_client_from_config(str(token_kubeconfig(cluster, tmp_path / "kc", token, kube_ns)))
    custom, apps = client.CustomObjectsApi(api), client.AppsV1Api(api)

    def status_of(call: Any) -> int:
        try:
            call()
        except client.ApiException as exc:
            return int(exc.status)
        return 200

    try:
        assert (
            status_of(lambda: custom.get_namespaced_custom_object(GROUP, "v1beta1", kube_ns, "workspaces", WORKSPACE))
            == 200
        )
        assert (
            status_of(lambda: custom.get_namespaced_custom_object(GROUP, "v1beta1", kube_ns, "workspaces", "neighbour"))
            == 403
        )
        pause = {"spec": {"paused": True}}
        assert (
            status_of(
                lambda: custom.patch_namespaced_custom_object(
                    GROUP, "v1beta1", kube_ns, "workspaces", "neighbour", pause
                )
            )
            == 403
        )
        sts = pod["metadata"]["name"].removesuffix("-0")
        assert (WORKSPACE, sts) in workspaces.statefulsets_created
        assert (
            status_of(lambda: apps.patch_namespaced_stateful_set_scale(sts, kube_ns, {"spec": {"replicas": 0}})) == 403
        )
        assert status_of(lambda: client.CoreV1Api(api).list_namespaced_secret(kube_ns)) == 403
    finally:
        api.close()


# -- the backends in a real jupyter server ------------------------------------------------------------------------


class KubeflowServer(ServerProcess):
    def __init__(self, base: Path, state_dir: Path, sidecar: Sidecar, backend: str):
        config = (
            f"c.SuspendApp.backend = {backend!r}\n"
            f"c.KubeflowBackend.sidecar_socket = {sidecar.socket_path!r}\n"
            f"c.KubeflowBackend.sidecar_secret = {sidecar.secret_path!r}\n"
            "c.KubeflowBackend.observe_seconds = 60.0\n"
            "c.KubeflowBackend.observe_interval = 0.1\n"
        )
        super().__init__(base, state_dir, config)

    def env(self) -> dict[str, str]:
        return {k: v for k, v in super().env().items() if not k.startswith(("KUBERNETES_", "POD_"))}

    def journal(self) -> list[dict[str, Any]]:
        path = self.state_dir / "journal.jsonl"
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def kernels_view(server: KubeflowServer) -> list[tuple[str, str, str]]:
    """What Kubeflow's culler reads: ``GET /api/kernels`` execution_state and last_activity."""
    code, kernels = server.request("GET", "api/kernels")
    assert code == 200
    return sorted((k["id"], k["execution_state"], k["last_activity"]) for k in kernels)


def probe_view(server: KubeflowServer) -> str:
    """What the Jupyter activity probe of Kubeflow Workspaces reads: ``GET /api/status`` last_activity (a request
    to /api/kernels, the culler's own, counts as activity there: read this one without it in between)."""
    code, status = server.request("GET", "api/status")
    assert code == 200
    return str(status["last_activity"])


def settled_kernels_view(server: KubeflowServer) -> list[tuple[str, str, str]]:
    """The culler's view once every kernel is idle and the view holds still for a moment."""
    deadline = time.monotonic() + 30
    previous = None
    while True:
        view = kernels_view(server)
        if view == previous and all(state == "idle" for _, state, _ in view):
            return view
        assert time.monotonic() < deadline, view
        previous = view
        time.sleep(0.3)


def assert_polling_is_not_activity(server: KubeflowServer, rounds: int = 3) -> dict[str, Any]:
    """Status, timeline, openapi and dry runs leave both activity views as they were; the last dry run."""
    kernels = settled_kernels_view(server)
    probe = probe_view(server)
    preflight: dict[str, Any] = {}
    for _ in range(rounds):
        server.api("GET", "status")
        server.api("GET", "timeline")
        server.api("GET", "openapi.json")
        preflight = server.api("POST", "suspend", {"dry_run": True})
    assert probe_view(server) == probe
    assert kernels_view(server) == kernels
    return preflight


def open_session(server: KubeflowServer, name: str = "model.ipynb") -> tuple[str, str]:
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("x = 1")]), server.root_dir / name)
    code, session = server.request(
        "POST", "api/sessions", {"path": name, "name": name, "type": "notebook", "kernel": {"name": "python3"}}
    )
    assert code == 201, session
    return str(session["kernel"]["id"]), str(session["id"])


def suspend(server: KubeflowServer) -> dict[str, Any]:
    server.api("POST", "suspend", {"reason": "overnight"}, expect=202)
    return server.wait(lambda s: s["operation"] and not s["operation"]["in_progress"], timeout=120)


def backend_marks(server: KubeflowServer, after: int = 0) -> list[str]:
    return [e["mark"] for e in server.journal() if e["seq"] > after and e.get("mark")]


def cold_start(base: Path, sidecar: Sidecar, backend: str) -> tuple[KubeflowServer, dict[str, Any]]:
    """A new server in the pod that came back, with the old journal: it resumes by itself."""
    server = KubeflowServer(base, base / "state", sidecar, backend).start()
    status = server.wait(lambda s: s["state"] == "ready" and not (s["operation"] or {}).get("in_progress"), 90)
    return server, status


def test_notebook_suspend_stops_it_and_the_new_pod_restores_the_sessions_cold(
    cluster: Cluster, kube_ns: str, admin_api: Any, notebooks: NotebookController, tmp_path: Path
) -> None:
    pod = start_notebook(cluster, admin_api, kube_ns)
    first_uid = pod["metadata"]["uid"]
    sidecar = notebook_sidecar(cluster, kube_ns, pod, tmp_path / "sidecar", outlives_pod=True)
    server = KubeflowServer(tmp_path, tmp_path / "state", sidecar, "kubeflow-notebook").start()
    second: KubeflowServer | None = None
    counter = Counter(cluster, "notebooks")
    try:
        kernel_id, session_id = open_session(server)
        run_cell(server, kernel_id, SETUP)

        # The culler must not see our requests: polling and a dry run move nothing it reads.
        preflight = assert_polling_is_not_activity(server, rounds=2)
        assert preflight["would_abort"] == []
        notes = " ".join(preflight["notes"])
        assert f"Kubeflow Notebook 'notebook' in namespace {kube_ns}" in notes
        assert "No snapshot is taken: kernel memory is lost" in notes
        text = server.api("GET", "status")["backend"]["text"]
        assert "variables in kernel memory" not in text["keeps"]
        assert text["keeps"] == ["notebooks and other files", "application checkpoints"]

        # A flush that fails aborts before anything reaches the Kubernetes API.
        run_cell(
            server,
            kernel_id,
            "from jupyter_suspend.kernel import protocol as _p\n_saved = _p._handlers['checkpoint']\n"
            + checkpoint_handler_code(fail="disk full"),
        )
        counter.reset()
        aborted = suspend(server)
        assert (aborted["state"], aborted["operation"]["outcome"]) == ("running", "aborted"), aborted
        assert "disk full" in aborted["message"]
        assert counter.since() == {"get": 0, "patch": 0}
        run_cell(server, kernel_id, "_p.register_handler('checkpoint', _saved)")

        seq = max(e["seq"] for e in server.journal())
        counter.reset()
        status = suspend(server)
        assert status["state"] == "suspended", status
        stopped_at = notebook(admin_api, kube_ns)["metadata"]["annotations"][STOPPED_ANNOTATION]
        assert read(admin_api, "v1", "statefulsets", kube_ns, NOTEBOOK)["spec"]["replicas"] == 0
        assert read(admin_api, "v1", "pods", kube_ns, POD) is None
        assert backend_marks(server, seq) == ["notebook_stop_requested", "notebook_scaled_down"]
        (requested,) = [e for e in server.journal() if e["seq"] > seq and e["kind"] == "kubeflow_stop_requested"]
        assert requested["annotation_or_patch_at"] == stopped_at
        assert requested["workload"]["name"] == NOTEBOOK
        assert status["backend"]["workload"]["ready_replicas"] == 0
        jsonschema.validate(status["backend"]["workload"], WORKLOAD_VIEW_SCHEMA)
        assert "Kubeflow notebook is stopped" in status["backend"]["text"]["while_suspended"]
        assert counter.since()["patch"] == 1  # one annotation, through the overlay's Role

        # The pod is gone with its processes (the sidecar too); `jupyter suspend resume --kind notebook` removes
        # the annotation; the real StatefulSet controller makes a new pod with a new sidecar.
        server.stop(signal.SIGKILL)
        sidecar.stop()
        client.CustomObjectsApi(admin_api).patch_namespaced_custom_object(
            GROUP, "v1", kube_ns, "notebooks", NOTEBOOK, {"metadata": {"annotations": {STOPPED_ANNOTATION: None}}}
        )
        new_pod = wait_for(lambda: running(admin_api, kube_ns, POD, not_uid=first_uid), 90, "a new notebook-0")
        sidecar = notebook_sidecar(cluster, kube_ns, new_pod, tmp_path / "sidecar")
        second, ready = cold_start(tmp_path, sidecar, "kubeflow-notebook")
        assert ready["restore"] == "cold", ready
        assert "This is a new pod: notebook notebook was asked to stop at" in ready["cold_start"]["message"]
        _, sessions = second.request("GET", "api/sessions")
        assert [(s["id"], s["kernel"]["id"], s["path"]) for s in sessions] == [(session_id, kernel_id, "model.ipynb")]
        restored = ready["last_restore"]["checkpoints_restored"][kernel_id]
        assert sorted(restored["restored"]) == ["vocab", "weights"]
        assert verdict(second, kernel_id) == "COLD"
        out, _ = run_cell(second, kernel_id, "print(vocab, 'only_in_memory' in dir())")
        assert out.strip() == "{'a': 1, 'b': 2} False"
        cycle = second.api("GET", "timeline")["cycles"][-1]
        assert (cycle["outcome"], cycle["restore"]) == ("resumed", "cold")
        names = [e["name"] for e in cycle["events"]]
        assert names == ["notebook_stop_requested", "notebook_scaled_down", "pod_started_cold"], json.dumps(
            cycle["events"]
        )
    finally:
        for process in (second, server):
            if process is not None:
                process.stop()
        sidecar.stop()


def test_workspace_suspend_pauses_it_with_state_and_pause_time_on_the_timeline(
    cluster: Cluster, kube_ns: str, admin_api: Any, workspaces: WorkspaceController, tmp_path: Path
) -> None:
    pod = start_workspace(cluster, admin_api, kube_ns, workspaces.kind_name)  # type: ignore[attr-defined]
    sidecar = workspace_sidecar(cluster, kube_ns, pod, tmp_path / "sidecar", outlives_pod=True)
    server = KubeflowServer(tmp_path, tmp_path / "state", sidecar, "kubeflow-workspace").start()
    second: KubeflowServer | None = None
    try:
        kernel_id, _ = open_session(server)
        run_cell(server, kernel_id, "x = 41")  # checkpoints are the notebook test's; this one is about the workspace
        # The Jupyter activity probe reads /api/status: our polling does not move it.
        preflight = assert_polling_is_not_activity(server, rounds=2)
        assert f"Kubeflow Workspace 'research' in namespace {kube_ns} (state Running" in " ".join(preflight["notes"])

        seq = max(e["seq"] for e in server.journal())
        status = suspend(server)
        assert status["state"] == "suspended", status
        ws = workspace(admin_api, kube_ns)
        assert ws["spec"]["paused"] is True
        assert ws["status"]["state"] == "Paused"
        assert read(admin_api, "v1", "pods", kube_ns, pod["metadata"]["name"]) is None
        # Terminating is seen if the pod still terminates once the kernels are stopped (timing): never else.
        marks = backend_marks(server, seq)
        assert marks in (
            ["workspace_stop_requested", "workspace_paused"],
            ["workspace_stop_requested", "workspace_terminating", "workspace_paused"],
        ), marks
        (paused,) = [e for e in server.journal() if e.get("mark") == "workspace_paused"]
        # pauseTime is epoch milliseconds (notebooks-v2); the journal has it in whole seconds.
        assert ws["status"]["pauseTime"] > 10**11
        assert paused["pause_time"] == ws["status"]["pauseTime"] // 1000
        before_paused = [e for e in server.journal() if e.get("mark") in marks[:-1]]
        assert paused["mark_at"] == max(float(paused["pause_time"]), before_paused[-1]["mark_at"])
        assert (paused["workload_state"], paused["workload_state_message"]) == ("Paused", "Workspace is paused")
        assert status["backend"]["workload"]["state"] == "Paused"
        jsonschema.validate(status["backend"]["workload"], WORKLOAD_VIEW_SCHEMA)
        cycle = server.api("GET", "timeline")["cycles"][-1]
        assert [e["name"] for e in cycle["events"]] == marks

        server.stop(signal.SIGKILL)
        sidecar.stop()
        client.CustomObjectsApi(admin_api).patch_namespaced_custom_object(
            GROUP, "v1beta1", kube_ns, "workspaces", WORKSPACE, {"spec": {"paused": False}}
        )
        name = pod["metadata"]["name"]  # the same StatefulSet: the same pod name, a new pod
        new_pod = wait_for(lambda: running(admin_api, kube_ns, name, not_uid=pod["metadata"]["uid"]), 90, "new pod")
        sidecar = workspace_sidecar(cluster, kube_ns, new_pod, tmp_path / "sidecar")
        second, ready = cold_start(tmp_path, sidecar, "kubeflow-workspace")
        assert ready["restore"] == "cold"
        assert ready["backend"]["workload"]["state"] == "Running"
        (cold,) = [e for e in second.journal() if e["kind"] == "kubeflow_cold_start"]
        assert (cold["workload_state"], cold["kernels_restarted"]) == ("Running", 1)
    finally:
        for process in (second, server):
            if process is not None:
                process.stop()
        sidecar.stop()


def test_a_suspend_the_sidecar_cannot_serve_aborts_before_anything_is_released(
    cluster: Cluster, kube_ns: str, admin_api: Any, tmp_path: Path
) -> None:
    deploy_overlay(cluster, "kubeflow-notebook", kube_ns)
    lone = lone_pod(cluster, admin_api, kube_ns)
    recorded: list[str] = []
    ctx = ReleaseContext("op-1", None, [], "test", lambda kind, **_: recorded.append(kind))  # type: ignore[arg-type]
    sidecar = notebook_sidecar(cluster, kube_ns, lone, tmp_path / "sidecar")
    counter = Counter(cluster, "notebooks")
    try:
        backend = KubeflowNotebookBackend(sidecar_socket=sidecar.socket_path, sidecar_secret=sidecar.secret_path)
        (blocker,) = asyncio.run(backend.preflight_blockers(None))
        assert "has no label notebook-name" in blocker
        with pytest.raises(FlushFailed) as failed:
            asyncio.run(backend.release(ctx))
        assert "could not be stopped" in failed.value.reason
        assert "run the sidecar with --workload matching the pod's owner" in failed.value.reason
        assert failed.value.reason.endswith("Nothing was released; the session keeps running.")
        assert counter.since() == {"get": 0, "patch": 0}
        assert recorded == []
    finally:
        sidecar.stop()


def test_a_stop_the_api_fails_is_read_again_and_aborts_when_nothing_stopped(
    cluster: Cluster, kube_ns: str, admin_api: Any, notebooks: NotebookController, tmp_path: Path
) -> None:
    """The sidecar's PATCH of its Notebook answered 503 (by the fault proxy in front of the real API server: a real
    one cannot be made to fail exactly one write with a 5xx; an admission policy gives only 4xx): the stop is read
    again before it is reported, and the suspend aborts with nothing released — the Notebook not stopped, the pod
    the real StatefulSet controller made still running."""
    pod = start_notebook(cluster, admin_api, kube_ns)
    recorded: list[str] = []
    ctx = ReleaseContext("op-1", None, [], "test", lambda kind, **_: recorded.append(kind))  # type: ignore[arg-type]
    with FaultProxy(cluster) as proxy:
        secret = token(cluster, kube_ns, "jupyter-suspend-sidecar", pod, outlives_pod=False)
        sidecar = Sidecar(
            cluster, kube_ns, pod, tmp_path / "sidecar", ["--workload", "notebook"], api_port=proxy.port
        ).start(secret)
        try:
            backend = KubeflowNotebookBackend(sidecar_socket=sidecar.socket_path, sidecar_secret=sidecar.secret_path)
            rule = proxy.fail("PATCH", rf"/namespaces/{kube_ns}/notebooks/{NOTEBOOK}$", 503)
            with pytest.raises(FlushFailed, match="Nothing was released") as failed:
                run(backend.release(ctx))
            assert "503" in failed.value.reason
            assert rule.matched == 1, rule
            # Read (the backend), read and patch (the stop), and after the failed patch read again before saying so;
            # the reads reached the real API server.
            calls = [c for c in proxy.calls if c.resource == "notebooks"]
            assert [c.verb for c in calls] == ["get", "get", "patch", "get"], calls
            assert [c.status for c in calls if c.verb == "get"] == [200, 200, 200], calls
            assert not proxy.rejected(), proxy.rejected()
        finally:
            sidecar.stop()
    stored = notebook(admin_api, kube_ns)
    assert STOPPED_ANNOTATION not in (stored["metadata"].get("annotations") or {})
    still = read(admin_api, "v1", "pods", kube_ns, POD)
    assert still is not None
    assert still["metadata"]["uid"] == pod["metadata"]["uid"]
    assert recorded == []


@pytest.mark.parametrize(
    "workspaces", [{"seconds_clock": False}, {"seconds_clock": True}], ids=["milliseconds", "seconds"], indirect=True
)
def test_item3_the_sidecar_reads_a_paused_workspaces_pause_time_in_either_unit(
    cluster: Cluster, kube_ns: str, admin_api: Any, workspaces: WorkspaceController, tmp_path: Path
) -> None:
    """notebooks-v2 writes UnixMilli(), v2.0-alpha-branch wrote Unix(): the CRD's int64 holds either."""
    pod = start_workspace(cluster, admin_api, kube_ns, workspaces.kind_name)  # type: ignore[attr-defined]
    sidecar = workspace_sidecar(cluster, kube_ns, pod, tmp_path / "sidecar", outlives_pod=True)
    try:
        before = time.time()
        run(sidecar.client.stop_workload({"name": WORKSPACE}))
        status = wait_for(
            lambda: (s := workspace(admin_api, kube_ns)["status"])["state"] == "Paused" and s, 60, "Paused"
        )
        assert (status["pauseTime"] < 10**11) is workspaces.seconds_clock
        view = run(sidecar.client.workload())
        jsonschema.validate(view, WORKLOAD_VIEW_SCHEMA)
        assert before - 1 <= view["pause_time"] <= time.time() + 1
        assert abs(epoch(view["stopped_at"]) - view["pause_time"]) < 1
    finally:
        sidecar.stop()


# -- the gke-workspaces backend: GKE Workspaces' snapshot add-on as a real admission webhook ----------------------


class GKEWorkspacesServer(ServerProcess):
    def __init__(self, base: Path, sidecar: Sidecar, uid_file: Path, uid: str, backend: str):
        config = (
            f"c.SuspendApp.backend = {backend!r}\n"
            f"c.KubeflowBackend.sidecar_socket = {sidecar.socket_path!r}\n"
            f"c.KubeflowBackend.sidecar_secret = {sidecar.secret_path!r}\n"
            f"c.GKEWorkspacesBackend.pod_uid_file = {str(uid_file)!r}\n"
            "c.GKEWorkspacesBackend.spec_environ_path = ''\n"
            "c.GKEWorkspacesBackend.return_check_interval = 0.1\n"
            "c.GKEWorkspacesBackend.addon_poll_interval = 0.2\n"
        )
        super().__init__(base, base / "state", config)
        self.uid = uid

    def env(self) -> dict[str, str]:
        env = {k: v for k, v in super().env().items() if not k.startswith(("KUBERNETES_", "POD_"))}
        return {**env, "POD_UID": self.uid}

    def journal(self) -> list[dict[str, Any]]:
        path = self.state_dir / "journal.jsonl"
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


class Driver535Backend(GKEWorkspacesBackend):
    """The gke-workspaces backend on a node with the default 535 driver (NVML's answer is the seam)."""

    driver_version_reader = staticmethod(lambda: "535.183.01")


@pytest.fixture
def gke_world(
    cluster: Cluster,
    kube_ns: str,
    admin_api: Any,
    workspaces: WorkspaceController,
    tmp_path: Path,
    request: pytest.FixtureRequest,
) -> Iterator[tuple[GKEWorkspacesAddOn, GKEWorkspacesServer, Path, str]]:
    """The add-on's webhooks (``mutate_pods``: its Pod webhook too), a running Workspace, its sidecar and a server
    on ``backend``; a kernel with the live-state canary set up."""
    mutate_pods, backend = getattr(request, "param", (True, "gke-workspaces"))
    addon = GKEWorkspacesAddOn(cluster, kube_ns, tmp_path / "addon-pki", mutate_pods=mutate_pods).start()
    try:
        pod = start_workspace(cluster, admin_api, kube_ns, workspaces.kind_name)  # type: ignore[attr-defined]
        assert (pod["spec"].get("runtimeClassName") == "gvisor") is mutate_pods
        uid = pod["metadata"]["uid"]
        uid_file = tmp_path / "podinfo" / "uid"
        uid_file.parent.mkdir()
        uid_file.write_text(uid)
        sidecar = workspace_sidecar(cluster, kube_ns, pod, tmp_path / "sidecar")
        server = GKEWorkspacesServer(tmp_path, sidecar, uid_file, uid, backend).start()
        try:
            kernel_id, _ = open_session(server)
            run_cell(server, kernel_id, SETUP)
            yield addon, server, uid_file, kernel_id
        finally:
            server.stop()
            sidecar.stop()
    finally:
        addon.stop()


def test_item5_a_pause_on_gke_workspaces_returns_live_judged_by_the_canary(
    kube_ns: str, admin_api: Any, gke_world: Any
) -> None:
    addon, server, uid_file, kernel_id = gke_world
    preflight = server.api("POST", "suspend", {"dry_run": True})
    assert preflight["would_abort"] == [], preflight
    notes = " ".join(preflight["notes"])
    assert "snapshot add-on is active for this pod" in notes
    assert f"kept {WHEN_RESTORED}" in notes
    status = server.api("GET", "status")
    assert status["backend"]["mode"]["snapshot_addon"] == "active"
    assert f"variables in kernel memory ({WHEN_RESTORED})" in status["backend"]["text"]["keeps"]

    server.api("POST", "suspend", {"reason": "lunch"}, expect=202)
    # The add-on held the pause (in admission: paused never reached storage) and is snapshotting; the kernels were
    # not stopped (they are in the snapshot).
    wait_for(lambda: any(e.get("mark") == "addon_checkpointing" for e in server.journal()), 60, "addon_checkpointing")
    assert addon.intercepted == 1
    ws = workspace(admin_api, kube_ns)
    assert ws["spec"]["paused"] is False
    assert ws["metadata"]["annotations"][GKEWorkspacesAddOn.CHECKPOINT_STATE] == "Checkpointing"
    assert server.api("GET", "status")["state"] == "snapshotting"

    # GKE restores the pod from the snapshot: the downward-API file names the new pod.
    uid_file.write_text(str(uuid.uuid4()))
    status = server.wait(lambda s: s["state"] == "ready", timeout=60)
    assert status["restore"] == "live", status
    assert status["last_restore"]["verification"][0]["verdict"] == "LIVE"
    assert verdict(server, kernel_id) == "LIVE"
    out, _ = run_cell(server, kernel_id, "print(only_in_memory + 1)")
    assert out.strip() == "42"
    marks = [e["mark"] for e in server.journal() if e.get("mark")]
    assert marks.index("workspace_pause_requested") < marks.index("addon_checkpointing") < marks.index("pod_returned")


@pytest.mark.parametrize("gke_world", [(False, "gke-workspaces")], indirect=True)
def test_item5_without_the_addon_the_dry_run_says_so_and_a_suspend_is_refused(
    kube_ns: str, admin_api: Any, gke_world: Any
) -> None:
    addon, server, _, kernel_id = gke_world
    preflight = server.api("POST", "suspend", {"dry_run": True})
    assert len(preflight["would_abort"]) == 1, preflight
    assert "snapshot add-on is not active" in preflight["would_abort"][0]
    assert "kubeflow-workspace backend" in " ".join(preflight["notes"])
    assert server.api("GET", "status")["backend"]["mode"]["snapshot_addon"] == "not detected"
    server.api("POST", "suspend", {"reason": "lunch"}, expect=202)
    status = server.wait(lambda s: s["operation"] and not s["operation"]["in_progress"], timeout=60)
    assert status["state"] == "running", status
    assert "nothing was released" in status["message"].lower()
    assert workspace(admin_api, kube_ns)["spec"]["paused"] is False
    assert addon.intercepted == 0
    out, _ = run_cell(server, kernel_id, "print(only_in_memory)")
    assert out.strip() == "41"


@pytest.mark.parametrize("gke_world", [(True, "tests.test_cluster_kubeflow:Driver535Backend")], indirect=True)
def test_item8_a_driver_below_570_is_reported_in_the_dry_run(gke_world: Any) -> None:
    _, server, _, _ = gke_world
    preflight = server.api("POST", "suspend", {"dry_run": True})
    notes = preflight["notes"]
    assert any(n.startswith("GPU memory will not be kept: the NVIDIA driver is 535.183.01") for n in notes), notes


def test_a_forbidden_call_says_which_account_a_workspace_pod_runs_as(
    cluster: Cluster, kube_ns: str, admin_api: Any, workspaces: WorkspaceController, tmp_path: Path
) -> None:
    """A Workspace the overlay does not bind (its pod runs as ws-other, the controller's account): the real
    authorizer refuses the sidecar, and its advice says which account a Workspace pod runs as (it used to name only
    jupyter-suspend-sidecar and deploy/base/role.yaml, which are not the identity or the Role on Kubeflow
    Workspaces)."""
    other = "other"
    create(cluster, [workspace_object(other, kube_ns, workspaces.kind_name)])  # type: ignore[attr-defined]
    status = wait_for(
        lambda: (
            (s := (read(admin_api, "v1beta1", "workspaces", kube_ns, other) or {}).get("status") or {}).get("state")
            == "Running"
            and s
        ),
        90,
        "the other Workspace Running",
    )
    pod = running(admin_api, kube_ns, status["podTemplatePod"]["name"])
    assert pod is not None
    secret = token(cluster, kube_ns, f"ws-{other}", pod, outlives_pod=False)
    sidecar = Sidecar(cluster, kube_ns, pod, tmp_path / "sidecar", ["--workload", "workspace"]).start(secret)
    try:
        code, body = sidecar.raw("GET", proto.PATH_WORKLOAD)
        assert (code, body["error"]) == (502, proto.E_KUBE_FORBIDDEN), body
        assert "the sidecar's Role does not allow 'get' on pods" in body["message"]
        assert "on Kubeflow Workspaces the workspace's own ws-<workspace>" in body["next_step"]
        assert "deploy/overlays/kubeflow-workspace" in body["next_step"]
        # The identity itself stays in the sidecar's log (test_sidecar.py test_item4_api_errors_are_said_in_our_words).
        assert f"system:serviceaccount:{kube_ns}" not in json.dumps(body)
    finally:
        sidecar.stop()
