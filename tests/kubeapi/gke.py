"""A simulated GKE Pod Snapshots controller for the test API server (platform-facts.md section 1).

A created PodSnapshotManualTrigger -> (checkpoint_seconds) a PodSnapshot, Checkpoint True, Ready False
AwaitingCheckpoint, the trigger Triggered True Complete -> (upload_seconds) the snapshot Ready True
AllSnapshotsAvailable. Behaviours (attribute `behaviour`, read when a trigger is handled and again before the upload
finishes): "succeed", "trigger_fails" (Triggered False Failed), "trigger_error" (Triggered False Error),
"checkpoint_fails" (a PodSnapshot with Checkpoint False Failed and Ready False CheckpointFailed; the trigger still
says Complete, it did trigger), "never_ready" (Ready stays False AwaitingCheckpoint).

Simulation choices (not from GKE's documentation):
- the snapshot's size is in the annotation `simulated.podsnapshot.gke.io/size-bytes` (`size_bytes`);
- a PodSnapshot being deleted whose policy is gone still loses its finalizer (so the object goes away, as an operator
  removing it by hand would do) but its GCS path is appended to `orphaned_storage` instead of `deleted_storage`;
- with `postCheckpoint: stop` the pod turns Succeeded (Completed) when the checkpoint is taken;
- a policy's `storageConfigName` naming no PodSnapshotStorageConfig fails the trigger; without one the bucket is
  `default_bucket`.
"""

from __future__ import annotations

import logging
import secrets
from typing import Any

from tests.kubeapi.server import JSON, KubeAPI, condition, match_label_selector_object, now_rfc3339, set_condition

log = logging.getLogger(__name__)

GROUP = "podsnapshot.gke.io"
API_VERSION = f"{GROUP}/v1"
FINALIZER = "podsnapshot.gke.io/storage"
TRIGGERED_BY = "gke-pod-snapshot-triggered-by"
ORIGIN_POD = "podsnapshot.gke.io/origin-pod"
PINNED_SNAPSHOT = "podsnapshot.gke.io/ps-name"
SIZE_ANNOTATION = "simulated.podsnapshot.gke.io/size-bytes"
BEHAVIOURS = ("succeed", "trigger_fails", "trigger_error", "checkpoint_fails", "never_ready")


class GKESnapshotController:
    def __init__(
        self,
        kube: KubeAPI,
        behaviour: str = "succeed",
        checkpoint_seconds: float = 0.2,
        upload_seconds: float = 0.2,
        size_bytes: int = 1_234_567_890,
        default_bucket: str = "simulated-pod-snapshots",
    ) -> None:
        if behaviour not in BEHAVIOURS:
            raise ValueError(f"unknown behaviour {behaviour!r}; one of {BEHAVIOURS}")
        self.kube = kube
        self.behaviour = behaviour
        self.checkpoint_seconds = checkpoint_seconds
        self.upload_seconds = upload_seconds
        self.size_bytes = size_bytes
        self.default_bucket = default_bucket
        self.stopped_pods: list[str] = []  # names of pods stopped by postCheckpoint: stop
        self.deleted_storage: list[str] = []  # GCS paths deleted through the finalizer
        self.orphaned_storage: list[str] = []  # GCS paths left behind (policy deleted before the snapshot)
        self.snapshots_created: list[str] = []
        self.restored: list[tuple[str, str]] = []  # (pod, snapshot)

    def attach(self) -> GKESnapshotController:
        self.kube.add_controller(self.on_event)
        self.kube.add_admission(self.admit)
        self.kube.gke = self
        return self

    # --- admission: only GKE writes PodSnapshots ----------------------------------------------------------------

    @staticmethod
    def admit(verb: str, obj: JSON, user: str) -> str | None:
        if obj.get("kind") == "PodSnapshot" and verb in ("create", "update", "patch"):
            return f"PodSnapshot objects are managed by GKE; {user} may not {verb} them"
        return None

    # --- events ---------------------------------------------------------------------------------------------------

    def on_event(self, event_type: str, obj: JSON, kube: KubeAPI) -> None:
        if not obj.get("apiVersion", "").startswith(GROUP + "/"):
            return
        kind, meta = obj.get("kind"), obj["metadata"]
        if kind == "PodSnapshotManualTrigger" and event_type == "ADDED" and condition(obj, "Triggered") is None:
            kube.call_soon(lambda: self._trigger(meta["namespace"], meta["name"]), self.checkpoint_seconds)
        elif (
            kind == "PodSnapshot"
            and event_type != "DELETED"
            and meta.get("deletionTimestamp")
            and FINALIZER in (meta.get("finalizers") or [])
        ):
            kube.call_soon(lambda: self._delete_storage(meta["namespace"], meta["name"]))

    def _set_triggered(
        self, namespace: str, trigger: str, status: str, reason: str, message: str, **extra: Any
    ) -> None:
        current = self.kube.get(API_VERSION, "podsnapshotmanualtriggers", namespace, trigger)
        if current is None:
            return
        conditions = set_condition(
            (current.get("status") or {}).get("conditions"),
            {"type": "Triggered", "status": status, "reason": reason, "message": message},
        )
        self.kube.patch_status(
            API_VERSION, "podsnapshotmanualtriggers", namespace, trigger, {"conditions": conditions, **extra}
        )

    def _trigger(self, namespace: str, name: str) -> None:
        trigger = self.kube.get(API_VERSION, "podsnapshotmanualtriggers", namespace, name)
        if trigger is None:
            return
        behaviour = self.behaviour
        if behaviour == "trigger_fails":
            self._set_triggered(namespace, name, "False", "Failed", "simulated: the checkpoint could not be triggered")
            return
        if behaviour == "trigger_error":
            self._set_triggered(namespace, name, "False", "Error", "simulated: internal error while triggering")
            return
        pod_name = str((trigger.get("spec") or {}).get("targetPod") or "")
        pod = self.kube.get("v1", "pods", namespace, pod_name) if pod_name else None
        if pod is None:
            self._set_triggered(namespace, name, "False", "Failed", f'target pod "{pod_name}" not found')
            return
        labels = pod["metadata"].get("labels") or {}
        policies = [
            policy
            for policy in self.kube.list(API_VERSION, "podsnapshotpolicies", namespace)
            if match_label_selector_object((policy.get("spec") or {}).get("selector"), labels)
            and not policy["metadata"].get("deletionTimestamp")
        ]
        if not policies:
            self._set_triggered(namespace, name, "False", "Failed", f"no PodSnapshotPolicy matches pod {pod_name}")
            return
        policy = policies[0]
        gcs_base = self._gcs_base(policy)
        if gcs_base is None:
            storage = policy["spec"].get("storageConfigName")
            self._set_triggered(namespace, name, "False", "Failed", f"PodSnapshotStorageConfig {storage} not found")
            return
        snapshot_name = f"{pod_name}-{secrets.token_hex(4)}"
        now = now_rfc3339()
        checkpoint_ok = behaviour != "checkpoint_fails"
        if checkpoint_ok:
            conditions = [
                {"type": "Checkpoint", "status": "True", "reason": "Succeeded", "message": "checkpoint taken"},
                {"type": "Ready", "status": "False", "reason": "AwaitingCheckpoint", "message": "uploading"},
            ]
        else:
            conditions = [
                {
                    "type": "Checkpoint",
                    "status": "False",
                    "reason": "Failed",
                    "message": "simulated: checkpoint failed",
                },
                {"type": "Ready", "status": "False", "reason": "CheckpointFailed", "message": "checkpoint failed"},
            ]
        for entry in conditions:
            entry["lastTransitionTime"] = now
        self.kube.create(
            {
                "apiVersion": API_VERSION,
                "kind": "PodSnapshot",
                "metadata": {
                    "name": snapshot_name,
                    "namespace": namespace,
                    "labels": {TRIGGERED_BY: name},
                    "annotations": {ORIGIN_POD: pod_name},
                    "finalizers": [FINALIZER],
                },
                "spec": {"policyName": policy["metadata"]["name"]},
                "status": {"conditions": conditions},
            }
        )
        self.snapshots_created.append(snapshot_name)
        self._set_triggered(
            namespace,
            name,
            "True",
            "Complete",
            f"PodSnapshot {snapshot_name} created",
            snapshotCreated={"name": snapshot_name},
        )
        if not checkpoint_ok:
            return
        if ((policy.get("spec") or {}).get("triggerConfig") or {}).get("postCheckpoint") == "stop":
            self._stop_pod(namespace, pod_name)
        path = f"{gcs_base}/{namespace}/{pod_name}/{snapshot_name}"
        self.kube.call_soon(lambda: self._uploaded(namespace, snapshot_name, path), self.upload_seconds)

    def _gcs_base(self, policy: JSON) -> str | None:
        storage = (policy.get("spec") or {}).get("storageConfigName")
        if not storage:
            return f"gs://{self.default_bucket}"
        config = self.kube.get(API_VERSION, "podsnapshotstorageconfigs", None, storage)
        if config is None:
            return None
        gcs = ((config.get("spec") or {}).get("snapshotStorageConfig") or {}).get("gcs") or {}
        return "/".join(part.strip("/") for part in (f"gs://{gcs.get('bucket', '')}", gcs.get("path") or "") if part)

    def _uploaded(self, namespace: str, snapshot: str, path: str) -> None:
        current = self.kube.get(API_VERSION, "podsnapshots", namespace, snapshot)
        if current is None or self.behaviour == "never_ready":
            return
        conditions = set_condition(
            (current.get("status") or {}).get("conditions"),
            {"type": "Ready", "status": "True", "reason": "AllSnapshotsAvailable", "message": "snapshot uploaded"},
        )
        self.kube.patch(
            API_VERSION,
            "podsnapshots",
            namespace,
            snapshot,
            {
                "metadata": {"annotations": {SIZE_ANNOTATION: str(self.size_bytes)}},
                "status": {
                    "conditions": conditions,
                    "lastAccessTime": now_rfc3339(),
                    "storageStatus": {"gcs": {"observedGCSPath": path}},
                },
            },
        )

    def _stop_pod(self, namespace: str, pod_name: str) -> None:
        pod = self.kube.get("v1", "pods", namespace, pod_name)
        if pod is None:
            return
        now = now_rfc3339()
        containers = (pod.get("spec") or {}).get("containers") or []
        statuses = [
            {
                "name": container.get("name", ""),
                "image": container.get("image", ""),
                "imageID": f"docker.io/{container.get('image', '')}@sha256:{'0' * 64}",
                "containerID": f"containerd://{container.get('name', '')}",
                "ready": False,
                "started": False,
                "restartCount": 0,
                "state": {"terminated": {"exitCode": 0, "reason": "Completed", "finishedAt": now}},
            }
            for container in containers
        ]
        conditions = (pod.get("status") or {}).get("conditions")
        for kind in ("Ready", "ContainersReady"):
            conditions = set_condition(conditions, {"type": kind, "status": "False", "reason": "PodCompleted"})
        self.kube.patch_status(
            "v1",
            "pods",
            namespace,
            pod_name,
            {"phase": "Succeeded", "conditions": conditions, "containerStatuses": statuses},
        )
        self.stopped_pods.append(pod_name)

    def _delete_storage(self, namespace: str, name: str) -> None:
        snapshot = self.kube.get(API_VERSION, "podsnapshots", namespace, name)
        if snapshot is None or FINALIZER not in (snapshot["metadata"].get("finalizers") or []):
            return
        gcs = ((snapshot.get("status") or {}).get("storageStatus") or {}).get("gcs") or {}
        path = gcs.get("observedGCSPath") or f"gs://{self.default_bucket}/{namespace}/unknown/{name}"
        policy_name = (snapshot.get("spec") or {}).get("policyName")
        policy = self.kube.get(API_VERSION, "podsnapshotpolicies", namespace, policy_name) if policy_name else None
        if policy is None:
            log.warning("PodSnapshot %s/%s: policy %s is gone, storage %s orphaned", namespace, name, policy_name, path)
            self.orphaned_storage.append(path)
        else:
            self.deleted_storage.append(path)
        self.kube.remove_finalizer(API_VERSION, "podsnapshots", namespace, name, FINALIZER)

    # --- restore (for later tests) --------------------------------------------------------------------------------

    def restore_pod(self, pod_name: str, snapshot: str | None = None, namespace: str | None = None) -> str:
        """Play GKE restoring `pod_name` from a snapshot: the pinned one (argument, or the pod's
        `podsnapshot.gke.io/ps-name` annotation) or the newest Ready one in the pod's namespace. Marks the snapshot
        accessed (`status.lastAccessTime`), sets condition PodRestored True on the pod and records the Event.
        Returns the snapshot's name; raises LookupError when there is no pod or no Ready snapshot."""
        pods = [p for p in self.kube.objects("pods") if p["metadata"]["name"] == pod_name]
        if namespace is not None:
            pods = [p for p in pods if p["metadata"]["namespace"] == namespace]
        if len(pods) != 1:
            raise LookupError(f"pod {pod_name!r}: {len(pods)} found")
        pod = pods[0]
        namespace = pod["metadata"]["namespace"]
        snapshot = snapshot or (pod["metadata"].get("annotations") or {}).get(PINNED_SNAPSHOT)
        if snapshot is None:
            ready = [
                s
                for s in self.kube.list(API_VERSION, "podsnapshots", namespace)
                if (condition(s, "Ready") or {}).get("status") == "True" and not s["metadata"].get("deletionTimestamp")
            ]
            if not ready:
                raise LookupError(f"no Ready PodSnapshot in namespace {namespace!r}")
            snapshot = max(ready, key=lambda s: int(s["metadata"]["resourceVersion"]))["metadata"]["name"]
        if self.kube.get(API_VERSION, "podsnapshots", namespace, snapshot) is None:
            raise LookupError(f"PodSnapshot {namespace}/{snapshot} not found")
        message = f"Successfully restored the pod from PodSnapshot {snapshot}"
        self.kube.patch_status(API_VERSION, "podsnapshots", namespace, snapshot, {"lastAccessTime": now_rfc3339()})
        conditions = set_condition(
            (pod.get("status") or {}).get("conditions"),
            {"type": "PodRestored", "status": "True", "reason": "Restored", "message": message},
        )
        self.kube.patch_status("v1", "pods", namespace, pod_name, {"conditions": conditions})
        now = now_rfc3339()
        self.kube.create(
            {
                "apiVersion": "v1",
                "kind": "Event",
                "metadata": {"name": f"{pod_name}.{secrets.token_hex(8)}", "namespace": namespace},
                "involvedObject": {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "name": pod_name,
                    "namespace": namespace,
                    "uid": pod["metadata"]["uid"],
                },
                "reason": "PodRestored",
                "message": message,
                "type": "Normal",
                "source": {"component": "gke-pod-snapshot"},
                "reportingComponent": "gke-pod-snapshot",
                "firstTimestamp": now,
                "lastTimestamp": now,
                "count": 1,
            }
        )
        self.restored.append((pod_name, snapshot))
        return snapshot
