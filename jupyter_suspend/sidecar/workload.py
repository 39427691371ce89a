"""The Kubeflow Notebook or Workspace that owns the sidecar's own pod (``--workload notebook|workspace``).

The owner is named by the own pod's label (``notebook-name`` /
``notebooks.kubeflow.org/workspace-name``), read from the API, never taken
from a request. The calls (what ``deploy/overlays/kubeflow-*/`` grant, and
only that):

=====================  ============  ======================================
API group              resource      verbs
=====================  ============  ======================================
(core)                 pods          get (own pod only)
kubeflow.org           notebooks     get, patch (``--workload notebook``)
kubeflow.org           workspaces    get, patch (``--workload workspace``)
=====================  ============  ======================================

Stopping is one merge patch: the annotation ``kubeflow-resource-stopped``
(notebook) or ``spec.paused: true`` (workspace). The controller scales the
StatefulSet to 0 and the pod -- this sidecar with it -- goes away.
"""

from __future__ import annotations

import datetime
import logging
from collections.abc import Mapping
from typing import Any

from ..common import sidecar_protocol as proto
from ..common import workloads as names
from ..common.times import epoch_by_magnitude
from .errors import Fault, NotFound
from .kube import PodSnapshots, _json

log = logging.getLogger("jupyter_suspend.sidecar")

MERGE_PATCH = "application/merge-patch+json"

#: (group, version, plural) per ``--workload``.
RESOURCES = {
    proto.WORKLOAD_NOTEBOOK: (names.NOTEBOOK_GROUP, names.NOTEBOOK_VERSION, names.NOTEBOOK_PLURAL),
    proto.WORKLOAD_WORKSPACE: (names.WORKSPACE_GROUP, names.WORKSPACE_VERSION, names.WORKSPACE_PLURAL),
}


def rfc3339(epoch: float) -> str:
    return datetime.datetime.fromtimestamp(epoch, datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _map(value: Any) -> Mapping[str, Any]:
    """A field that should be an object; anything else (a hand-edited or half-written object) reads as empty."""
    return value if isinstance(value, Mapping) else {}


#: GKE Workspaces' snapshot add-on (gke-labs/workspaces providers/gke/internal/snapshot/snapshot.go): the Workspace
#: annotations it writes and the readiness gate its Pod webhook adds.
ADDON_CHECKPOINT_STATE = "podsnapshot.gke.kubeflow.org/checkpoint-state"
ADDON_LAST_CHECKPOINT = "podsnapshot.gke.kubeflow.org/last-checkpoint-name"
ADDON_READINESS_GATE = "podsnapshot.gke.kubeflow.org/active"


def snapshot_addon_view(workspace: Mapping[str, Any], pod: Mapping[str, Any] | None) -> proto.SnapshotAddonView:
    annotations = _map(_map(workspace.get("metadata")).get("annotations"))
    pod_spec = _map((pod or {}).get("spec"))
    gates = pod_spec.get("readinessGates")
    state, last = annotations.get(ADDON_CHECKPOINT_STATE), annotations.get(ADDON_LAST_CHECKPOINT)
    runtime = pod_spec.get("runtimeClassName")
    return {
        "checkpoint_state": state if isinstance(state, str) else None,
        "last_checkpoint": last if isinstance(last, str) else None,
        "pod_readiness_gate": isinstance(gates, list)
        and any(_map(g).get("conditionType") == ADDON_READINESS_GATE for g in gates),
        "pod_runtime_class": runtime if isinstance(runtime, str) else None,
    }


def workload_view(
    kind: str, obj: Mapping[str, Any], pod: str, pod_obj: Mapping[str, Any] | None = None
) -> proto.WorkloadView:
    """The Notebook or Workspace as the API serves it, normalised (``pod_obj``: the own pod, as read once)."""
    meta, spec, status = (_map(obj.get(key)) for key in ("metadata", "spec", "status"))
    if kind == proto.WORKLOAD_NOTEBOOK:
        stopped_at = _map(meta.get("annotations")).get(names.NOTEBOOK_STOPPED_ANNOTATION)
        return {
            "kind": kind,
            "name": str(meta.get("name", "")),
            "namespace": str(meta.get("namespace", "")),
            "pod": pod,
            "stopped": stopped_at is not None,
            "stopped_at": str(stopped_at) if stopped_at is not None else None,
            "state": None,
            "state_message": None,
            "pause_time": None,
            "ready_replicas": _int(status.get("readyReplicas")),
            "snapshot_addon": None,
        }
    # Epoch milliseconds on current Kubeflow, seconds on the old alpha branch: read by magnitude, and a value that
    # is neither (a string, a negative, 0 = never paused) is "no pause time", never a crash.
    paused_at = epoch_by_magnitude(status.get("pauseTime"))
    pause_time = int(paused_at) if paused_at is not None and paused_at >= 1 else None
    state = status.get("state")
    message = status.get("stateMessage")
    return {
        "kind": kind,
        "name": str(meta.get("name", "")),
        "namespace": str(meta.get("namespace", "")),
        "pod": pod,
        "stopped": spec.get("paused") is True,
        "stopped_at": rfc3339(pause_time) if pause_time else None,
        "state": str(state) if isinstance(state, str) else None,
        "state_message": str(message) if isinstance(message, str) else None,
        "pause_time": pause_time,
        "ready_replicas": None,
        "snapshot_addon": snapshot_addon_view(obj, pod_obj),
    }


class OwnerWorkload:
    """The own pod's Kubeflow owner; the API calls go through :class:`PodSnapshots`' plumbing."""

    def __init__(self, kube: PodSnapshots) -> None:
        self.kube = kube
        self.kind = kube.config.workload
        self.label = proto.OWNER_LABELS.get(self.kind, "")
        #: A pod's labels that name its owner do not change while it lives (nor does this process outlive it):
        #: read once, so the owner can still be followed while the pod terminates.
        self._owner: str | None = None
        #: The own pod as read then (its spec -- readiness gates, runtime class -- does not change either).
        self._pod: dict[str, Any] | None = None

    def enabled(self) -> bool:
        return self.kind in RESOURCES

    async def owner_name(self) -> str:
        """The owner's name from the own pod's label; 409 ``owner_unknown`` (and no further call) without it."""
        if self._owner is not None:
            return self._owner
        pod = await self.kube.read_pod()
        value = ((pod.get("metadata") or {}).get("labels") or {}).get(self.label)
        if not isinstance(value, str) or not value:
            what = "Notebook" if self.kind == proto.WORKLOAD_NOTEBOOK else "Workspace"
            raise Fault(
                409,
                proto.E_OWNER_UNKNOWN,
                f"pod {self.kube.namespace}/{self.kube.pod} has no label {self.label}: it is not a Kubeflow "
                f"{what}'s pod, so there is nothing this sidecar may stop",
                next_step=f"run the sidecar with --workload matching the pod's owner (a {what} labels its pods "
                f"{self.label}=<name>), or use the gke/local backend",
            )
        if not proto.is_dns1123_subdomain(value):  # a label value may hold what no object name can
            raise Fault(
                409,
                proto.E_OWNER_UNKNOWN,
                f"pod {self.kube.namespace}/{self.kube.pod}'s label {self.label} is not a valid object name",
                next_step="check the pod's labels: the workload controller sets this one to its object's name",
            )
        self._owner = value
        self._pod = dict(pod)
        return value

    async def _read(self, name: str) -> dict[str, Any]:
        group, version, plural = RESOURCES[self.kind]
        try:
            resp = await self.kube._call(
                "get",
                f"{group}/{plural}",
                self.kube.custom.get_namespaced_custom_object,
                group,
                version,
                self.kube.namespace,
                plural,
                name,
                _preload_content=False,
            )
        except NotFound:
            raise Fault(
                404,
                proto.E_NOT_FOUND,
                f"the pod's label names {self.kind} {name}, which does not exist in namespace {self.kube.namespace}",
                next_step="the workload was deleted; nothing to stop",
            ) from None
        return _json(resp)

    async def view(self) -> proto.WorkloadView:
        name = await self.owner_name()
        return workload_view(self.kind, await self._read(name), self.kube.pod, self._pod)

    async def stop(self, expected_name: str | None) -> proto.WorkloadStopped:
        name = await self.owner_name()
        if expected_name is not None and expected_name != name:
            raise Fault(
                403,
                proto.E_FORBIDDEN_TARGET,
                f"this sidecar acts on {self.kind} {name} (the owner of pod {self.kube.pod}) only, not {expected_name}",
            )
        current = workload_view(self.kind, await self._read(name), self.kube.pod, self._pod)
        if current["stopped"]:
            return {"workload": current, "requested_at": None, "already_stopped": True}
        now = rfc3339(datetime.datetime.now(datetime.timezone.utc).timestamp())
        patch: dict[str, Any]
        if self.kind == proto.WORKLOAD_NOTEBOOK:
            patch = {"metadata": {"annotations": {names.NOTEBOOK_STOPPED_ANNOTATION: now}}}
        else:
            patch = {"spec": {"paused": True}}
        group, version, plural = RESOURCES[self.kind]
        try:
            resp = await self.kube._call(
                "patch",
                f"{group}/{plural}",
                self.kube.custom.patch_namespaced_custom_object,
                group,
                version,
                self.kube.namespace,
                plural,
                name,
                patch,
                _content_type=MERGE_PATCH,
                _preload_content=False,
            )
        except NotFound:
            raise Fault(404, proto.E_NOT_FOUND, f"{self.kind} {name} was deleted meanwhile") from None
        log.info("asked %s %s/%s to stop (%s)", self.kind, self.kube.namespace, name, patch)
        return {
            "workload": workload_view(self.kind, _json(resp), self.kube.pod, self._pod),
            "requested_at": now,
            "already_stopped": False,
        }
