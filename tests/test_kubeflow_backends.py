"""The Kubeflow backends end to end: the real sidecar process (``--workload notebook|workspace``, a token of its
own) against the loopback Kubernetes API with the simulated Kubeflow controllers (tests/kubeapi/kubeflow.py), and a
real ``jupyter server`` process on the kubeflow-notebook / kubeflow-workspace backend.

The sidecar: what it refuses (bad bodies, another pod / namespace / kind / name, a pod without the owner label,
snapshot endpoints) makes no write call, and a stop makes exactly the calls the overlay's Role grants. The backends:
a suspend stops the workload (the simulated controller scales the StatefulSet to 0 and the pod goes), a failed
flush aborts before any API call, and a new server in the pod that comes back restarts the recorded sessions with
their checkpoints (COLD). Our polling of status, timeline, openapi and a preflight dry run leaves what Kubeflow's
culler reads (``/api/kernels``) and the Jupyter activity probe reads (``/api/status``) unchanged.
"""

from __future__ import annotations

import json
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from jupyter_suspend.common import sidecar_protocol as proto
from tests.gke_helpers import SIDECAR_USER, OwnTokenSidecar
from tests.kubeapi import KubeAPI, wait_until
from tests.kubeapi.kubeflow import (
    NOTEBOOK_API,
    STOPPED_ANNOTATION,
    WORKSPACE_API,
    KubeflowNotebookController,
    KubeflowWorkspaceController,
    notebook_object,
    workspace_object,
)
from tests.servers import ServerProcess
from tests.sidecar_helpers import NAMESPACE, POD, make_pod, run
from tests.test_manifests import DEPLOY, kustomize

pytestmark = pytest.mark.slow

NOTEBOOK = "notebook"  # its pod is notebook-0 (POD), the name the deploy/ Role allows
WORKSPACE = "research"
WORKSPACE_POD = "ws-research-0"
OVERLAYS = {
    "notebook": DEPLOY / "overlays" / "kubeflow-notebook",
    "workspace": DEPLOY / "overlays" / "kubeflow-workspace",
}

WORKLOAD_VIEW_SCHEMA = {
    "type": "object",
    "required": list(proto.WorkloadView.__annotations__),
    "properties": {name: {} for name in proto.WorkloadView.__annotations__},
    "additionalProperties": False,
}


class WorkloadSidecar(OwnTokenSidecar):
    """The sidecar of a Kubeflow pod: ``--workload KIND``, POD_NAME the pod the controller made."""

    def __init__(self, kube: KubeAPI, directory: Path, kind: str, pod: str):
        super().__init__(kube, directory, ["--workload", kind], pod_uid="uid-at-start")
        self.pod_name = pod

    def env(self) -> dict[str, str]:
        return {**super().env(), "POD_NAME": self.pod_name}


class KubeflowServer(ServerProcess):
    def __init__(self, base: Path, state_dir: Path, sidecar: WorkloadSidecar, backend: str):
        config = (
            f"c.SuspendApp.backend = {backend!r}\n"
            f"c.KubeflowBackend.sidecar_socket = {sidecar.socket_path!r}\n"
            f"c.KubeflowBackend.sidecar_secret = {sidecar.secret_path!r}\n"
            "c.KubeflowBackend.observe_seconds = 5.0\n"
            "c.KubeflowBackend.observe_interval = 0.05\n"
        )
        super().__init__(base, state_dir, config)

    def env(self) -> dict[str, str]:
        return {k: v for k, v in super().env().items() if not k.startswith(("KUBERNETES_", "POD_"))}

    def journal(self) -> list[dict[str, Any]]:
        path = self.state_dir / "journal.jsonl"
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def writes(kube: KubeAPI) -> list[tuple[str, str, str | None]]:
    return [(c.verb, c.resource, c.name) for c in kube.calls if c.verb not in ("get", "list", "watch")]


def role_rules(kind: str) -> set[tuple[str, str, str]]:
    """(apiGroup, resource, verb) the overlay's sidecar Role grants."""
    (role,) = [d for d in kustomize(OVERLAYS[kind]) if d["kind"] == "Role"]
    return {
        (group, resource, verb)
        for rule in role["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }


def called(kube: KubeAPI) -> set[tuple[str, str, str]]:
    return {(c.group, c.resource, c.verb) for c in kube.calls}


def epoch(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


# -- the sidecar alone ------------------------------------------------------------------------------------------


def test_sidecar_stops_its_own_notebook_and_refuses_everything_else(tmp_path: Path) -> None:
    with KubeAPI() as kube:
        KubeflowNotebookController(kube).attach()
        # First a pod of the right name that no Notebook owns (no notebook-name label).
        make_pod(kube, POD, NAMESPACE, labels={"app": "notebook"})
        sidecar = WorkloadSidecar(kube, tmp_path / "sidecar", "notebook", POD).start()
        try:
            kube.reset_calls()
            for method, path, raw in (("GET", proto.PATH_WORKLOAD, b""), ("POST", proto.PATH_WORKLOAD_STOP, b"{}")):
                code, body = sidecar.raw(method, path, raw)
                assert (code, body["error"]) == (409, proto.E_OWNER_UNKNOWN), body
                assert "no label notebook-name" in body["message"]
                assert body["next_step"]
            assert [(c.verb, c.resource, c.name) for c in kube.calls] == [("get", "pods", POD)] * 2
            kube.delete("v1", "pods", NAMESPACE, POD)

            kube.create({**notebook_object(NOTEBOOK, NAMESPACE)})
            wait_until(
                lambda: (kube.get("v1", "pods", NAMESPACE, POD) or {}).get("status", {}).get("phase") == "Running"
            )
            kube.reset_calls()
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
            assert kube.calls == []  # every refusal above came before any API call
            # Another Notebook's name: the pod's label is read, nothing is written.
            code, body = sidecar.raw("POST", proto.PATH_WORKLOAD_STOP, b'{"name": "someone-else"}')
            assert (code, body["error"]) == (403, proto.E_FORBIDDEN_TARGET), body
            assert writes(kube) == []
            assert "kubeflow-resource-stopped" not in (
                kube.get(NOTEBOOK_API, "notebooks", NAMESPACE, NOTEBOOK)["metadata"].get("annotations") or {}
            )

            view = run(sidecar.client.workload())
            jsonschema.validate(view, WORKLOAD_VIEW_SCHEMA)
            assert (view["kind"], view["name"], view["namespace"], view["pod"]) == (
                "notebook",
                NOTEBOOK,
                NAMESPACE,
                POD,
            )
            assert (view["stopped"], view["ready_replicas"]) == (False, 1)

            before = time.time()
            stopped = run(sidecar.client.stop_workload({"kind": "notebook", "name": NOTEBOOK}))
            assert stopped["already_stopped"] is False
            assert stopped["workload"]["stopped"] is True
            annotation = kube.get(NOTEBOOK_API, "notebooks", NAMESPACE, NOTEBOOK)["metadata"]["annotations"][
                STOPPED_ANNOTATION
            ]
            assert annotation == stopped["requested_at"]
            assert before - 1 <= epoch(annotation) <= time.time() + 1
            wait_until(lambda: kube.get("apps/v1", "statefulsets", NAMESPACE, NOTEBOOK)["spec"]["replicas"] == 0)
            wait_until(lambda: kube.get("v1", "pods", NAMESPACE, POD) is None)
            assert writes(kube) == [("patch", "notebooks", NOTEBOOK)]
            assert {c.user for c in kube.calls} == {SIDECAR_USER}
            assert {c.name for c in kube.calls if c.resource == "pods"} == {POD}
            assert called(kube) == role_rules("notebook")
        finally:
            sidecar.stop()


def test_sidecar_pauses_its_own_workspace(tmp_path: Path) -> None:
    with KubeAPI() as kube:
        KubeflowWorkspaceController(kube, terminate_seconds=0.3).attach()
        kube.create(workspace_object(WORKSPACE, NAMESPACE))
        wait_until(
            lambda: (
                (kube.get(WORKSPACE_API, "workspaces", NAMESPACE, WORKSPACE).get("status") or {}).get("state")
                == "Running"
            )
        )
        sidecar = WorkloadSidecar(kube, tmp_path / "sidecar", "workspace", WORKSPACE_POD).start()
        try:
            kube.reset_calls()
            code, body = sidecar.raw("POST", proto.PATH_WORKLOAD_STOP, b'{"kind": "notebook"}')
            assert (code, body["error"]) == (403, proto.E_FORBIDDEN_TARGET)
            assert kube.calls == []
            view = run(sidecar.client.workload())
            jsonschema.validate(view, WORKLOAD_VIEW_SCHEMA)
            assert (view["kind"], view["name"], view["state"], view["stopped"]) == (
                "workspace",
                WORKSPACE,
                "Running",
                False,
            )
            stopped = run(sidecar.client.stop_workload({"name": WORKSPACE}))
            assert stopped["workload"]["stopped"] is True
            assert kube.get(WORKSPACE_API, "workspaces", NAMESPACE, WORKSPACE)["spec"]["paused"] is True
            terminating = run(sidecar.client.workload())
            assert terminating["state"] == "Terminating", terminating
            wait_until(lambda: kube.get("v1", "pods", NAMESPACE, WORKSPACE_POD) is None)
            status = kube.get(WORKSPACE_API, "workspaces", NAMESPACE, WORKSPACE)["status"]
            assert status["state"] == "Paused"
            assert status["pauseTime"] > 0
            assert writes(kube) == [("patch", "workspaces", WORKSPACE)]
            assert called(kube) == role_rules("workspace")
        finally:
            sidecar.stop()
