"""The workloads a notebook pod can belong to, as the CLI reads and resumes them, and the API calls it makes.

Every call returns plain JSON (``_preload_content=False``: no model classes, no slow deserialisation) and carries a
request timeout, so that a caller's deadline holds even when the API server stops answering.
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, ClassVar

from jupyter_suspend.common.sidecar_protocol import is_dns1123_subdomain
from jupyter_suspend.common.workloads import (
    NOTEBOOK_GROUP,
    NOTEBOOK_NAME_LABEL,
    NOTEBOOK_PLURAL,
    NOTEBOOK_STOPPED_ANNOTATION,
    NOTEBOOK_VERSION,
    PIN_SNAPSHOT_ANNOTATION,
    PODSNAPSHOT_GROUP,
    PODSNAPSHOT_VERSION,
    WORKSPACE_GROUP,
    WORKSPACE_PLURAL,
    WORKSPACE_VERSION,
    WorkloadKind,
)

if TYPE_CHECKING:
    from kubernetes import client

JSON = dict[str, Any]
MERGE_PATCH = "application/merge-patch+json"
#: On a StatefulSet (not its template) by a resume waiting for a pod the quota refused: see resume.CreateRetry.
RETRY_CREATE_ANNOTATION = "jupyter-suspend/retry-create-at"
#: The label Kubeflow Workspaces put on a workspace's pods.
WORKSPACE_NAME_LABEL = "notebooks.kubeflow.org/workspace-name"


def valid_name(name: str) -> bool:
    """An object name the API accepts: Kubernetes' DNS-1123 subdomain rule (no ``a..b``, no trailing newline)."""
    return is_dns1123_subdomain(name)


class Kube:
    """The calls the CLI makes, in one namespace, each bounded by ``timeout()`` seconds."""

    def __init__(self, api: client.ApiClient, namespace: str, default_timeout: float = 10.0) -> None:
        from kubernetes import client

        self.namespace = namespace
        self.core = client.CoreV1Api(api)
        self.apps = client.AppsV1Api(api)
        self.custom = client.CustomObjectsApi(api)
        # Typed as Any: the stubs want model objects, we send and read plain JSON.
        self.coordination: Any = client.CoordinationV1Api(api)
        self.default_timeout = default_timeout
        #: Seconds the next call may take; the follower lowers it as its deadline nears.
        self.timeout = default_timeout

    def _opts(self) -> JSON:
        return {"_preload_content": False, "_request_timeout": max(0.5, min(self.timeout, self.default_timeout))}

    @staticmethod
    def _json(response: Any) -> JSON:
        data = json.loads(response.data or b"{}")
        return data if isinstance(data, dict) else {}

    # --- reads (None / [] when absent) ---------------------------------------------------------------------------

    def get_statefulset(self, name: str) -> JSON | None:
        return self._or_none(lambda: self.apps.read_namespaced_stateful_set(name, self.namespace, **self._opts()))

    def get_custom(self, group: str, version: str, plural: str, name: str) -> JSON | None:
        return self._or_none(
            lambda: self.custom.get_namespaced_custom_object(
                group, version, self.namespace, plural, name, **self._opts()
            )
        )

    def list_pods(self, selector: str) -> list[JSON]:
        answer = self._json(self.core.list_namespaced_pod(self.namespace, label_selector=selector, **self._opts()))
        return list(answer.get("items") or [])

    def list_pod_events(self, pod: str) -> list[JSON]:
        selector = f"involvedObject.kind=Pod,involvedObject.name={pod}"
        answer = self._json(self.core.list_namespaced_event(self.namespace, field_selector=selector, **self._opts()))
        return list(answer.get("items") or [])

    def list_object_events(self, kind: str, name: str) -> list[JSON]:
        selector = f"involvedObject.kind={kind},involvedObject.name={name}"
        answer = self._json(self.core.list_namespaced_event(self.namespace, field_selector=selector, **self._opts()))
        return list(answer.get("items") or [])

    def get_snapshot(self, name: str) -> JSON | None:
        return self.get_custom(PODSNAPSHOT_GROUP, PODSNAPSHOT_VERSION, "podsnapshots", name)

    def list_snapshots(self) -> list[JSON]:
        """The namespace's PodSnapshots; none where the cluster has no Pod Snapshots (404 on the resource)."""
        from kubernetes.client.exceptions import ApiException

        try:
            answer = self._json(
                self.custom.list_namespaced_custom_object(
                    PODSNAPSHOT_GROUP, PODSNAPSHOT_VERSION, self.namespace, "podsnapshots", **self._opts()
                )
            )
        except ApiException as exc:
            if exc.status == 404:
                return []
            raise
        return list(answer.get("items") or [])

    # --- writes --------------------------------------------------------------------------------------------------

    def patch_statefulset(self, name: str, patch: JSON) -> JSON:
        return self._json(
            self.apps.patch_namespaced_stateful_set(
                name, self.namespace, patch, _content_type=MERGE_PATCH, **self._opts()
            )
        )

    def scale_statefulset(self, name: str, replicas: int) -> JSON:
        return self._json(
            self.apps.patch_namespaced_stateful_set_scale(
                name, self.namespace, {"spec": {"replicas": replicas}}, _content_type=MERGE_PATCH, **self._opts()
            )
        )

    def patch_custom(self, group: str, version: str, plural: str, name: str, patch: JSON) -> JSON:
        return self._json(
            self.custom.patch_namespaced_custom_object(
                group, version, self.namespace, plural, name, patch, _content_type=MERGE_PATCH, **self._opts()
            )
        )

    # --- leases --------------------------------------------------------------------------------------------------

    def get_lease(self, name: str) -> JSON | None:
        return self._or_none(lambda: self.coordination.read_namespaced_lease(name, self.namespace, **self._opts()))

    def create_lease(self, body: JSON) -> JSON:
        return self._json(self.coordination.create_namespaced_lease(self.namespace, body, **self._opts()))

    def replace_lease(self, name: str, body: JSON) -> JSON:
        """An update: ``body.metadata.resourceVersion`` is the precondition (409 Conflict when it moved)."""
        return self._json(self.coordination.replace_namespaced_lease(name, self.namespace, body, **self._opts()))

    def delete_lease(self, name: str, resource_version: str) -> None:
        self.coordination.delete_namespaced_lease(
            name, self.namespace, body={"preconditions": {"resourceVersion": resource_version}}, **self._opts()
        )

    def _or_none(self, call: Any) -> JSON | None:
        from kubernetes.client.exceptions import ApiException

        try:
            return self._json(call())
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise


class Workload(ABC):
    """One environment's owning object: how to read it, find its pods, tell whether it wants to run, resume it."""

    kind: ClassVar[WorkloadKind]
    #: The Kubernetes kind, for messages.
    title: ClassVar[str]
    #: ``--snapshot`` can be pinned on this kind.
    can_pin: ClassVar[bool] = True

    def __init__(self, kube: Kube, name: str) -> None:
        self.kube = kube
        self.name = name

    @abstractmethod
    def read(self) -> JSON | None: ...

    @abstractmethod
    def wanted(self, obj: JSON) -> bool:
        """The object asks for a running pod."""

    @abstractmethod
    def pod_selector(self, obj: JSON) -> str: ...

    @abstractmethod
    def resume(self, obj: JSON, remove_pin: bool = False) -> None:
        """Ask for the pod again. Never pins a snapshot: a ``podsnapshot.gke.io/ps-name`` on a pod *template*
        stays there for every later pod, and removing it later changes the template revision, which rolls the
        restored pod (GKE Workspaces learnt this and pins on the Pod at creation instead: gke-labs/workspaces
        providers/gke/pod_snapshot_webhook_design.md). ``remove_pin``: take away a pin an older version left on
        the template, in the same write (the workload is stopped: no pod exists to be rolled)."""

    def pinned(self, obj: JSON) -> str | None:
        """A snapshot pin on the workload's pod template (left by an older version), if any."""
        return None

    def pod_names(self, obj: JSON) -> list[str]:
        """The names its pod has had (snapshots record their origin pod by name)."""
        return [f"{self.name}-0"]

    def message(self, obj: JSON) -> str:
        return ""

    def pod_controller(self, obj: JSON) -> str | None:
        """The StatefulSet that creates the pod, when its name is known (its events say why no pod exists)."""
        return None

    def retry_create(self) -> None:  # noqa: B027 - most kinds have nothing to nudge
        """Ask the pod's controller to try creating the pod again now (see resume.CreateRetry)."""


class StatefulSetWorkload(Workload):
    kind = "statefulset"
    title = "StatefulSet"

    def read(self) -> JSON | None:
        return self.kube.get_statefulset(self.name)

    def wanted(self, obj: JSON) -> bool:
        return int((obj.get("spec") or {}).get("replicas", 1) or 0) > 0

    def pod_controller(self, obj: JSON) -> str | None:
        return self.name

    def retry_create(self) -> None:
        # Any update of the StatefulSet object queues it for its controller; metadata only, not the template.
        stamp = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        self.kube.patch_statefulset(self.name, {"metadata": {"annotations": {RETRY_CREATE_ANNOTATION: stamp}}})

    def pod_selector(self, obj: JSON) -> str:
        labels = ((obj.get("spec") or {}).get("selector") or {}).get("matchLabels") or {}
        return ",".join(f"{key}={value}" for key, value in sorted(labels.items()))

    def pinned(self, obj: JSON) -> str | None:
        template = ((obj.get("spec") or {}).get("template") or {}).get("metadata") or {}
        return (template.get("annotations") or {}).get(PIN_SNAPSHOT_ANNOTATION)

    def resume(self, obj: JSON, remove_pin: bool = False) -> None:
        if remove_pin:  # before the scale-up, while no pod exists: null removes the annotation
            patch = {"spec": {"template": {"metadata": {"annotations": {PIN_SNAPSHOT_ANNOTATION: None}}}}}
            self.kube.patch_statefulset(self.name, patch)
        self.kube.scale_statefulset(self.name, 1)


class NotebookWorkload(Workload):
    """Kubeflow Notebooks v1: ``kubeflow-resource-stopped`` set = the controller scales its StatefulSet to 0."""

    kind = "notebook"
    title = "Notebook"
    # The notebook controller copies the Notebook's annotations onto its StatefulSet's pod template
    # (kubeflow/notebooks notebooks-v1, notebook_controller.go generateStatefulSet): no pin was ever written here.
    can_pin = False

    def read(self) -> JSON | None:
        return self.kube.get_custom(NOTEBOOK_GROUP, NOTEBOOK_VERSION, NOTEBOOK_PLURAL, self.name)

    def wanted(self, obj: JSON) -> bool:
        return NOTEBOOK_STOPPED_ANNOTATION not in ((obj.get("metadata") or {}).get("annotations") or {})

    def pod_controller(self, obj: JSON) -> str | None:
        # Kubeflow's notebook controller names the StatefulSet after the Notebook (pod <name>-0).
        return self.name

    def pod_selector(self, obj: JSON) -> str:
        return f"{NOTEBOOK_NAME_LABEL}={self.name}"

    def resume(self, obj: JSON, remove_pin: bool = False) -> None:
        patch = {"metadata": {"annotations": {NOTEBOOK_STOPPED_ANNOTATION: None}}}  # null removes it
        self.kube.patch_custom(NOTEBOOK_GROUP, NOTEBOOK_VERSION, NOTEBOOK_PLURAL, self.name, patch)

    def message(self, obj: JSON) -> str:
        conditions = (obj.get("status") or {}).get("conditions") or []
        return str((conditions[0] or {}).get("message") or "") if conditions else ""


class WorkspaceWorkload(Workload):
    """Kubeflow Workspaces (Notebooks 2.0): ``spec.paused``; pod metadata in ``spec.podTemplate.podMetadata``."""

    kind = "workspace"
    title = "Workspace"

    def read(self) -> JSON | None:
        return self.kube.get_custom(WORKSPACE_GROUP, WORKSPACE_VERSION, WORKSPACE_PLURAL, self.name)

    def wanted(self, obj: JSON) -> bool:
        return not bool((obj.get("spec") or {}).get("paused", False))

    def pod_selector(self, obj: JSON) -> str:
        return f"{WORKSPACE_NAME_LABEL}={self.name}"

    def pod_names(self, obj: JSON) -> list[str]:
        """The workspace controller names its StatefulSet with a generated suffix (pod ``ws-<name>-<suffix>-0``), so
        the pod's name cannot be derived from the Workspace's; its status says it (``status.podTemplatePod.name``,
        upstream's WorkspacePodStatus, kubeflow/notebooks notebooks-v2 api/v1beta1). Whether it stays set while the
        workspace is paused is unverified; the pods found by label are added by the caller."""
        name = ((obj.get("status") or {}).get("podTemplatePod") or {}).get("name")
        return [str(name)] if isinstance(name, str) and name else []

    def pinned(self, obj: JSON) -> str | None:
        metadata = (((obj.get("spec") or {}).get("podTemplate") or {}).get("podMetadata")) or {}
        return (metadata.get("annotations") or {}).get(PIN_SNAPSHOT_ANNOTATION)

    def resume(self, obj: JSON, remove_pin: bool = False) -> None:
        spec: JSON = {"paused": False}
        if remove_pin:  # the controller copies podMetadata into its StatefulSet's template: a pin there stays
            spec["podTemplate"] = {"podMetadata": {"annotations": {PIN_SNAPSHOT_ANNOTATION: None}}}
        self.kube.patch_custom(WORKSPACE_GROUP, WORKSPACE_VERSION, WORKSPACE_PLURAL, self.name, {"spec": spec})

    def message(self, obj: JSON) -> str:
        status = obj.get("status") or {}
        state, said = status.get("state"), status.get("stateMessage")
        return f"Workspace {state}: {said}" if state and said else str(state or "")


WORKLOADS: dict[str, type[Workload]] = {
    "statefulset": StatefulSetWorkload,
    "notebook": NotebookWorkload,
    "workspace": WorkspaceWorkload,
}


def workload(kind: str, kube: Kube, name: str) -> Workload:
    return WORKLOADS[kind](kube, name)
