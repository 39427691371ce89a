"""Simulated Kubeflow controllers for the test API server (platform-facts.md section 3), on top of the simulated
StatefulSet controller (workloads.py, attached if it is not yet).

Notebooks v1 (`kubeflow.org/v1` Notebook) -> StatefulSet `<name>` (owner reference to the Notebook) whose pod
template is the Notebook's `spec.template` labelled `notebook-name=<name>` and `statefulset=<name>`; `replicas` is 0
while the annotation `kubeflow-resource-stopped` is set, 1 otherwise. The Notebook's status follows its pod:
`readyReplicas`, `containerState` (of the first container) and `conditions` (the pod's, newest first).

Workspaces (`kubeflow.org/v1beta1` Workspace) -> StatefulSet `ws-<name>` whose pods are labelled
`notebooks.kubeflow.org/workspace-name=<name>`; `spec.paused: true` -> replicas 0. `status.state` / `stateMessage`:
Running (pod Ready), Pending (pod not Ready yet, with the scheduler's message), Terminating (paused, pod still there),
Paused (paused, no pod; `pauseTime` = epoch **milliseconds** when the pause was first observed, cleared on
unpause: kubeflow/notebooks `notebooks-v2` workspace_controller.go writes `metav1.Now().UnixMilli()`;
`seconds_clock=True` writes seconds as the older `v2.0-alpha-branch` did).

Simulation choices (not from Kubeflow's code): the workspace pod's spec is the controller's `workspace_pod_spec`
(or the Workspace's annotation `simulated.kubeflow.org/pod-spec`, JSON); a paused workspace keeps its pod for
`terminate_seconds` (so Terminating is observable) before the StatefulSet goes to 0; the notebook's pod goes at once.
"""

from __future__ import annotations

import copy
import json
import time
from typing import Any

from tests.kubeapi.server import JSON, KubeAPI, now_rfc3339
from tests.kubeapi.workloads import StatefulSetController

KUBEFLOW_GROUP = "kubeflow.org"
NOTEBOOK_API = f"{KUBEFLOW_GROUP}/v1"
WORKSPACE_API = f"{KUBEFLOW_GROUP}/v1beta1"
STOPPED_ANNOTATION = "kubeflow-resource-stopped"
NOTEBOOK_NAME_LABEL = "notebook-name"
WORKSPACE_NAME_LABEL = "notebooks.kubeflow.org/workspace-name"
POD_SPEC_ANNOTATION = "simulated.kubeflow.org/pod-spec"
DEFAULT_POD_SPEC: JSON = {"containers": [{"name": "main", "image": "jupyter/minimal-notebook:latest"}]}


def _ready(pod: JSON) -> bool:
    return any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in (pod.get("status") or {}).get("conditions") or []
    )


def _owner(obj: JSON, kind: str) -> str | None:
    for ref in obj["metadata"].get("ownerReferences") or []:
        if ref.get("kind") == kind:
            return str(ref.get("name"))
    return None


def _ensure_workloads(kube: KubeAPI) -> StatefulSetController:
    if kube.workloads is None:
        StatefulSetController(kube).attach()
    workloads: StatefulSetController = kube.workloads
    return workloads


def _pods_of(kube: KubeAPI, namespace: str, statefulset: str) -> list[JSON]:
    return [
        pod
        for pod in kube.list("v1", "pods", namespace)
        if _owner(pod, "StatefulSet") == statefulset and not pod["metadata"].get("deletionTimestamp")
    ]


def _apply_statefulset(
    kube: KubeAPI, owner: JSON, name: str, labels: dict[str, str], spec: JSON, replicas: int
) -> None:
    """Create the StatefulSet or bring `replicas` / the template in line (a no-op patch changes nothing)."""
    meta = owner["metadata"]
    namespace = meta["namespace"]
    template = {"metadata": {"labels": labels}, "spec": spec}
    current = kube.get("apps/v1", "statefulsets", namespace, name)
    if current is None:
        kube.create(
            {
                "apiVersion": "apps/v1",
                "kind": "StatefulSet",
                "metadata": {
                    "name": name,
                    "namespace": namespace,
                    "labels": dict(labels),
                    "ownerReferences": [
                        {
                            "apiVersion": owner["apiVersion"],
                            "kind": owner["kind"],
                            "name": meta["name"],
                            "uid": meta["uid"],
                            "controller": True,
                            "blockOwnerDeletion": True,
                        }
                    ],
                },
                "spec": {
                    "replicas": replicas,
                    "serviceName": name,
                    "selector": {"matchLabels": {"statefulset": name}},
                    "template": template,
                },
            }
        )
    else:
        kube.patch("apps/v1", "statefulsets", namespace, name, {"spec": {"replicas": replicas, "template": template}})


class KubeflowNotebookController:
    """Kubeflow Notebooks v1's notebook controller (the StatefulSet side; no Service or VirtualService)."""

    def __init__(self, kube: KubeAPI) -> None:
        self.kube = kube
        self.stops_seen: list[tuple[str, str, str]] = []  # (namespace, notebook, annotation value) when first seen

    def attach(self) -> KubeflowNotebookController:
        _ensure_workloads(self.kube)
        self.kube.add_controller(self.on_event)
        return self

    def on_event(self, event_type: str, obj: JSON, kube: KubeAPI) -> None:
        kind, meta = obj.get("kind"), obj["metadata"]
        if kind == "Notebook" and obj.get("apiVersion") == NOTEBOOK_API:
            if event_type == "DELETED":
                kube.delete("apps/v1", "statefulsets", meta["namespace"], meta["name"])
            else:
                self._reconcile(obj)
        elif kind == "StatefulSet" and _owner(obj, "Notebook") is not None:
            self._update_status(meta["namespace"], str(_owner(obj, "Notebook")))
        elif kind == "Pod" and NOTEBOOK_NAME_LABEL in (meta.get("labels") or {}):
            self._update_status(meta["namespace"], meta["labels"][NOTEBOOK_NAME_LABEL])

    def _reconcile(self, notebook: JSON) -> None:
        meta = notebook["metadata"]
        name, namespace = meta["name"], meta["namespace"]
        stopped = (meta.get("annotations") or {}).get(STOPPED_ANNOTATION)
        if stopped is not None and not any(s[:2] == (namespace, name) and s[2] == stopped for s in self.stops_seen):
            self.stops_seen.append((namespace, name, stopped))
        template = (notebook.get("spec") or {}).get("template") or {}
        labels = {**((template.get("metadata") or {}).get("labels") or {}), "statefulset": name}
        labels[NOTEBOOK_NAME_LABEL] = name
        spec = copy.deepcopy(template.get("spec") or DEFAULT_POD_SPEC)
        _apply_statefulset(self.kube, notebook, name, labels, spec, 0 if stopped is not None else 1)
        self._update_status(namespace, name)

    def _update_status(self, namespace: str, name: str) -> None:
        notebook = self.kube.get(NOTEBOOK_API, "notebooks", namespace, name)
        if notebook is None:
            return
        pods = _pods_of(self.kube, namespace, name)
        pod = pods[0] if pods else None
        container_state: JSON = {}
        conditions: list[JSON] = []
        if pod is not None:
            statuses = (pod.get("status") or {}).get("containerStatuses") or []
            container_state = copy.deepcopy(statuses[0].get("state") or {}) if statuses else {}
            conditions = [
                {k: c[k] for k in ("type", "status", "reason", "message", "lastTransitionTime") if k in c}
                for c in reversed((pod.get("status") or {}).get("conditions") or [])
            ]
        status = {
            "readyReplicas": sum(1 for p in pods if _ready(p)),
            "containerState": container_state,
            "conditions": conditions,
        }
        if notebook.get("status") != status:
            self.kube.update({**notebook, "status": status})


class KubeflowWorkspaceController:
    """Kubeflow Workspaces' workspace controller (StatefulSet and status; no Service, no WorkspaceKind logic)."""

    def __init__(
        self,
        kube: KubeAPI,
        terminate_seconds: float = 0.1,
        workspace_pod_spec: JSON | None = None,
        seconds_clock: bool = False,
    ) -> None:
        self.kube = kube
        self.terminate_seconds = terminate_seconds
        self.seconds_clock = seconds_clock
        self.workspace_pod_spec = workspace_pod_spec or DEFAULT_POD_SPEC
        self._stopping: set[tuple[str, str]] = set()  # paused, pod kept for terminate_seconds

    def _now_epoch(self) -> int:
        """``UnixMilli()`` as notebooks-v2 writes it, or ``Unix()`` as the v2.0 alpha branch did."""
        return int(time.time()) if self.seconds_clock else int(time.time() * 1000)

    def attach(self) -> KubeflowWorkspaceController:
        _ensure_workloads(self.kube)
        self.kube.add_controller(self.on_event)
        return self

    @staticmethod
    def statefulset_name(workspace: str) -> str:
        return f"ws-{workspace}"

    def on_event(self, event_type: str, obj: JSON, kube: KubeAPI) -> None:
        kind, meta = obj.get("kind"), obj["metadata"]
        if kind == "Workspace" and obj.get("apiVersion") == WORKSPACE_API:
            if event_type == "DELETED":
                kube.delete("apps/v1", "statefulsets", meta["namespace"], self.statefulset_name(meta["name"]))
            else:
                self._reconcile(obj)
        elif kind == "StatefulSet" and _owner(obj, "Workspace") is not None:
            self._update_status(meta["namespace"], str(_owner(obj, "Workspace")))
        elif kind == "Pod" and WORKSPACE_NAME_LABEL in (meta.get("labels") or {}):
            self._update_status(meta["namespace"], meta["labels"][WORKSPACE_NAME_LABEL])

    def _pod_spec(self, workspace: JSON) -> JSON:
        raw = (workspace["metadata"].get("annotations") or {}).get(POD_SPEC_ANNOTATION)
        spec: JSON = json.loads(raw) if raw else copy.deepcopy(self.workspace_pod_spec)
        return spec

    def _reconcile(self, workspace: JSON) -> None:
        meta = workspace["metadata"]
        name, namespace = meta["name"], meta["namespace"]
        sts = self.statefulset_name(name)
        paused = bool((workspace.get("spec") or {}).get("paused"))
        labels = {"statefulset": sts, WORKSPACE_NAME_LABEL: name}
        current = self.kube.get("apps/v1", "statefulsets", namespace, sts)
        running = current is not None and (current.get("spec") or {}).get("replicas", 1) > 0
        key = (namespace, name)
        if paused and running and self.terminate_seconds > 0:
            if key not in self._stopping:  # the pod is terminating: keep it a moment, then scale to 0
                self._stopping.add(key)
                self.kube.call_soon(lambda: self._finish_stop(namespace, name), self.terminate_seconds)
        else:
            self._stopping.discard(key)
            _apply_statefulset(self.kube, workspace, sts, labels, self._pod_spec(workspace), 0 if paused else 1)
        self._update_status(namespace, name)

    def _finish_stop(self, namespace: str, name: str) -> None:
        self._stopping.discard((namespace, name))
        workspace = self.kube.get(WORKSPACE_API, "workspaces", namespace, name)
        if workspace is not None and (workspace.get("spec") or {}).get("paused"):
            sts = self.statefulset_name(name)
            if self.kube.get("apps/v1", "statefulsets", namespace, sts) is not None:
                self.kube.patch("apps/v1", "statefulsets", namespace, sts, {"spec": {"replicas": 0}})
        elif workspace is not None:
            self._reconcile(workspace)

    def _update_status(self, namespace: str, name: str) -> None:
        workspace = self.kube.get(WORKSPACE_API, "workspaces", namespace, name)
        if workspace is None:
            return
        old: JSON = workspace.get("status") or {}
        paused = bool((workspace.get("spec") or {}).get("paused"))
        pods = _pods_of(self.kube, namespace, self.statefulset_name(name))
        pause_time: Any = 0
        if paused and pods:
            state, message = "Terminating", "Workspace is pausing: its pod is terminating"
            pause_time = old.get("pauseTime") or self._now_epoch()
        elif paused:
            state, message = "Paused", "Workspace is paused"
            pause_time = old.get("pauseTime") or self._now_epoch()
        elif pods and _ready(pods[0]):
            state, message = "Running", "Workspace is running"
        elif pods:
            scheduled: JSON = next(
                (c for c in (pods[0].get("status") or {}).get("conditions") or [] if c.get("type") == "PodScheduled"),
                {},
            )
            if scheduled.get("status") == "False":
                message = f"Pod is unschedulable: {scheduled.get('message', '')}".strip()
            else:
                message = "Pod is starting"
            state = "Pending"
        else:
            state, message = "Pending", "Workspace is starting: no pod yet"
        status = {
            **old,
            "state": state,
            "stateMessage": message,
            "pauseTime": pause_time,
            "activity": old.get("activity") or {"lastActivity": 0, "lastUpdate": 0},
        }
        if status != old:
            self.kube.update({**workspace, "status": status})


def notebook_object(name: str, namespace: str = "default", pod_spec: JSON | None = None) -> JSON:
    """A minimal Notebook as a test creates it."""
    return {
        "apiVersion": NOTEBOOK_API,
        "kind": "Notebook",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"template": {"spec": copy.deepcopy(pod_spec or DEFAULT_POD_SPEC)}},
    }


def workspace_object(name: str, namespace: str = "default", kind: str = "jupyterlab", paused: bool = False) -> JSON:
    """A minimal Workspace as a test creates it."""
    return {
        "apiVersion": WORKSPACE_API,
        "kind": "Workspace",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "kind": kind,
            "paused": paused,
            "podTemplate": {"options": {"imageConfig": "jupyterlab_scipy", "podConfig": "small-cpu"}},
        },
    }


__all__ = [
    "KubeflowNotebookController",
    "KubeflowWorkspaceController",
    "notebook_object",
    "now_rfc3339",
    "workspace_object",
]
