"""GKE's Pod Snapshot controller, simulated against the real API server.

It is the one part of the platform that is proprietary, so it is ours; every
behaviour below is from platform-facts.md §1 (public GKE documentation and the
public gke-labs/workspaces code), and what no source says is marked simulated.

- A ``PodSnapshotManualTrigger`` is watched; after ``checkpoint_seconds`` a
  ``PodSnapshot`` named by a UUID is created (spec.policyName, label
  ``gke-pod-snapshot-triggered-by=<trigger>``, annotation
  ``podsnapshot.gke.io/origin-pod``, the storage finalizer) with conditions
  ``Checkpoint`` True/Succeeded and ``Ready`` False/AwaitingCheckpoint; the
  trigger gets ``Triggered`` True/Complete and ``status.snapshotCreated.name``.
  After ``upload_seconds`` ``StorageReplicated`` and ``Ready`` turn True
  (``AllSnapshotsAvailable``).
- With the matching policy's ``postCheckpoint: stop`` the pod is stopped: it is
  annotated so kwok (the fake kubelet) reports it Succeeded, as a real kubelet
  reports a sandbox that exited after its checkpoint; the real StatefulSet
  controller then does what it does with a terminal pod.
- A new pod whose containers match a Ready snapshot's origin pod on image,
  command and args (not env: environment variables are not in GKE's hash) is
  "restored": after ``restore_seconds`` it gets condition ``PodRestored``
  (message names the snapshot) and an Event with reason
  ``GKEPodSnapshotting``. The pod's ``podsnapshot.gke.io/ps-name`` annotation
  pins one snapshot. No compatible snapshot: a silent cold start (nothing).
- Deleting a PodSnapshot removes its storage through the finalizer, which
  needs the policy: with the policy gone the storage is recorded as orphaned.
- Only this controller may write PodSnapshots: a real ValidatingAdmissionPolicy
  (resources.py) denies everyone else.

Failure modes (``behaviour``): succeed, trigger_fails, trigger_error,
checkpoint_fails, never_ready.
"""

from __future__ import annotations

import contextlib
import hashlib
import heapq
import json
import logging
import threading
import time
import uuid
from collections.abc import Callable
from datetime import datetime, timezone
from typing import Any

from kubernetes import client, config, watch
from kubernetes.client.rest import ApiException

from .control_plane import STOPPED_ANNOTATION, Cluster

log = logging.getLogger(__name__)

GROUP, VERSION = "podsnapshot.gke.io", "v1"
FINALIZER = "podsnapshot.gke.io/storage"
TRIGGERED_BY = "gke-pod-snapshot-triggered-by"
ORIGIN_POD = "podsnapshot.gke.io/origin-pod"
PINNED_SNAPSHOT = "podsnapshot.gke.io/ps-name"
#: Simulated: where this controller keeps the origin pod's restore hash and the snapshot's size.
POD_HASH = "simulated.podsnapshot.gke.io/pod-hash"
SIZE_ANNOTATION = "simulated.podsnapshot.gke.io/size-bytes"
BEHAVIOURS = ("succeed", "trigger_fails", "trigger_error", "checkpoint_fails", "never_ready")

JSON = dict[str, Any]


def now_rfc3339() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def restore_hash(pod: JSON) -> str:
    """What GKE matches a snapshot on, of what the API shows: each container's
    image, command and args (environment variables are not part of it)."""
    spec = pod.get("spec") or {}
    shape = [
        (c.get("name"), c.get("image"), c.get("command") or [], c.get("args") or [])
        for c in (spec.get("initContainers") or []) + (spec.get("containers") or [])
    ]
    return hashlib.sha256(json.dumps(shape, sort_keys=True).encode()).hexdigest()[:32]


def _match_selector(selector: JSON | None, labels: dict[str, str]) -> bool:
    if not selector:
        return False
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for expr in selector.get("matchExpressions") or []:
        key, op, values = expr["key"], expr["operator"], expr.get("values") or []
        if op == "In" and labels.get(key) not in values:
            return False
        if op == "NotIn" and labels.get(key) in values:
            return False
        if op == "Exists" and key not in labels:
            return False
        if op == "DoesNotExist" and key in labels:
            return False
    return True


def _condition(obj: JSON, kind: str) -> JSON | None:
    for entry in (obj.get("status") or {}).get("conditions") or []:
        if entry.get("type") == kind:
            return dict(entry)
    return None


def _set_condition(conditions: list[JSON] | None, new: JSON) -> list[JSON]:
    new = {"lastTransitionTime": now_rfc3339(), "message": "", **new}
    kept = [c for c in conditions or [] if c.get("type") != new["type"]]
    return [*kept, new]


class GKESnapshotController:
    def __init__(
        self,
        cluster: Cluster,
        namespace: str,
        behaviour: str = "succeed",
        checkpoint_seconds: float = 0.2,
        upload_seconds: float = 0.3,
        restore_seconds: float = 0.3,
        size_bytes: int = 1_234_567_890,
        finalizer_seconds: float = 0.0,
    ) -> None:
        if behaviour not in BEHAVIOURS:
            raise ValueError(f"unknown behaviour {behaviour!r}; one of {BEHAVIOURS}")
        self.namespace = namespace
        self.behaviour = behaviour
        self.checkpoint_seconds = checkpoint_seconds
        self.upload_seconds = upload_seconds
        self.restore_seconds = restore_seconds
        self.size_bytes = size_bytes
        #: How long GKE's storage finalizer takes to free a deleted snapshot's image (its delay is not
        #: documented: simulated). A few seconds make "the caller waited until the snapshot was gone" decidable.
        self.finalizer_seconds = finalizer_seconds
        #: While True, restores wait: PodRestored comes only after the lazy memory restore, which can be
        #: many seconds after the pod runs (platform-facts §1); a test holds it to see the time in between.
        self.restores_held = False
        #: With postCheckpoint: stop, whether the pod is stopped at the checkpoint (False) or only once the upload
        #: is done (True). GKE freezes the pod during the upload (platform-facts §1); when the API first shows it
        #: Completed is not documented (unverified): a frozen pod that never finishes uploading still "runs".
        self.stop_after_upload = False
        self.api = config.new_client_from_config(str(cluster.workdir / "gke-controller.kubeconfig"))
        self.core = client.CoreV1Api(self.api)
        self.custom = client.CustomObjectsApi(self.api)
        self.stopped_pods: list[str] = []
        self.snapshots_created: list[str] = []
        self.deleted_storage: list[str] = []
        self.orphaned_storage: list[str] = []
        self.restored: list[tuple[str, str]] = []  # (pod, snapshot)
        self.errors: list[str] = []
        self.pods_seen: list[tuple[str, str]] = []  # (name, uid) of every pod that appeared
        self._seen_pods: set[str] = set()
        self._handled: set[str] = set()
        self._timers: list[tuple[float, int, Callable[[], None]]] = []
        self._counter = 0
        self._wake = threading.Condition()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._streams: dict[str, watch.Watch] = {}  # the open watch of each loop

    # -- lifecycle -------------------------------------------------------------
    def start(self) -> GKESnapshotController:
        self._threads = [
            threading.Thread(target=self._worker, name="gke-worker", daemon=True),
            threading.Thread(target=self._watch_loop, args=("triggers",), name="gke-triggers", daemon=True),
            threading.Thread(target=self._watch_loop, args=("snapshots",), name="gke-snapshots", daemon=True),
            threading.Thread(target=self._watch_loop, args=("pods",), name="gke-pods", daemon=True),
        ]
        for thread in self._threads:
            thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        with self._wake:
            self._wake.notify_all()
        for stream in list(self._streams.values()):
            # End the open watches now rather than at their next event or timeout (up to 30 s each): the
            # client's Watch keeps its urllib3 response as _resp, and HTTPResponse.shutdown() (urllib3 >= 2.3)
            # unblocks a read in another thread.
            response = getattr(stream, "_resp", None)
            if response is not None:
                with contextlib.suppress(Exception):
                    response.shutdown()
        # The worker ends at once; a watch thread whose read the shutdown did not reach ends on its own at its
        # next event or timeout (a daemon), so it is given only a moment.
        for index, thread in enumerate(self._threads):
            thread.join(timeout=5 if index == 0 else 0.5)
        with contextlib.suppress(Exception):
            self.api.close()

    def __enter__(self) -> GKESnapshotController:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- a small informer: list, then watch from its resourceVersion; relist on 410 --
    def _list_call(self, what: str) -> Callable[..., Any]:
        if what == "pods":
            return self.core.list_namespaced_pod
        plural = "podsnapshotmanualtriggers" if what == "triggers" else "podsnapshots"

        def call(namespace: str, **kwargs: Any) -> Any:
            return self.custom.list_namespaced_custom_object(GROUP, VERSION, namespace, plural, **kwargs)

        return call

    def _watch_loop(self, what: str) -> None:
        call = self._list_call(what)
        while not self._stop.is_set():
            try:
                if what == "pods":
                    listed = self.api.sanitize_for_serialization(call(self.namespace))
                else:
                    listed = call(self.namespace)
                version = listed["metadata"]["resourceVersion"]
                for item in listed.get("items") or []:
                    self._on_event(what, "ADDED", item)
                stream = watch.Watch()
                self._streams[what] = stream
                for event in stream.stream(call, self.namespace, resource_version=version, timeout_seconds=30):
                    if self._stop.is_set():
                        stream.stop()
                        return
                    obj = event["object"]
                    if not isinstance(obj, dict):
                        obj = self.api.sanitize_for_serialization(obj)
                    self._on_event(what, event["type"], obj)
            except ApiException as exc:
                if exc.status != 410:
                    self.errors.append(f"watch {what}: {exc.status} {exc.reason}")
                time.sleep(0.2)
            except Exception as exc:  # noqa: BLE001 - a dropped connection or a decode error: relist
                if not self._stop.is_set():
                    log.debug("watch %s: %s", what, exc)
                    time.sleep(0.2)

    def _on_event(self, what: str, kind: str, obj: JSON) -> None:
        meta = obj.get("metadata") or {}
        name = meta.get("name", "")
        if what == "triggers" and kind == "ADDED" and _condition(obj, "Triggered") is None:
            key = f"trigger/{meta.get('uid')}"
            if key not in self._handled:
                self._handled.add(key)
                self._later(self.checkpoint_seconds, lambda: self._guard(self._trigger, name))
        elif what == "snapshots" and kind != "DELETED" and meta.get("deletionTimestamp"):
            if FINALIZER in (meta.get("finalizers") or []):
                self._later(self.finalizer_seconds, lambda: self._guard(self._delete_storage, name))
        elif what == "pods" and kind == "ADDED":
            uid = meta.get("uid", "")
            if uid not in self._seen_pods:
                self._seen_pods.add(uid)
                self.pods_seen.append((name, uid))
                self._later(self.restore_seconds, lambda: self._guard(self._maybe_restore, name, uid))

    # -- a single worker with timers (the controller's work queue) --------------
    def _later(self, delay: float, work: Callable[[], None]) -> None:
        with self._wake:
            self._counter += 1
            heapq.heappush(self._timers, (time.monotonic() + delay, self._counter, work))
            self._wake.notify_all()

    def _worker(self) -> None:
        while not self._stop.is_set():
            with self._wake:
                if not self._timers:
                    self._wake.wait(0.5)
                    continue
                due, _, work = self._timers[0]
                wait = due - time.monotonic()
                if wait > 0:
                    self._wake.wait(wait)
                    continue
                heapq.heappop(self._timers)
            work()

    def _guard(self, fn: Callable[..., None], *args: Any) -> None:
        try:
            fn(*args)
        except Exception as exc:
            log.exception("simulated GKE controller")
            self.errors.append(f"{fn.__name__}{args}: {exc}")

    def idle(self) -> bool:
        with self._wake:
            return not self._timers

    # -- triggers -----------------------------------------------------------------
    def _get(self, plural: str, name: str) -> JSON | None:
        try:
            return dict(self.custom.get_namespaced_custom_object(GROUP, VERSION, self.namespace, plural, name))
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def _patch_status(self, plural: str, name: str, status: JSON) -> None:
        self.custom.patch_namespaced_custom_object_status(
            GROUP, VERSION, self.namespace, plural, name, {"status": status}
        )

    def _set_triggered(self, trigger: str, status: str, reason: str, message: str, **extra: Any) -> None:
        current = self._get("podsnapshotmanualtriggers", trigger)
        if current is None:
            return
        conditions = _set_condition(
            (current.get("status") or {}).get("conditions"),
            {"type": "Triggered", "status": status, "reason": reason, "message": message},
        )
        self._patch_status("podsnapshotmanualtriggers", trigger, {"conditions": conditions, **extra})

    def _trigger(self, name: str) -> None:
        trigger = self._get("podsnapshotmanualtriggers", name)
        if trigger is None:
            return
        if self.behaviour == "trigger_fails":
            self._set_triggered(name, "False", "Failed", "simulated: the checkpoint could not be triggered")
            return
        if self.behaviour == "trigger_error":
            self._set_triggered(name, "False", "Error", "simulated: internal error while triggering")
            return
        pod_name = str((trigger.get("spec") or {}).get("targetPod") or "")
        try:
            pod = self.api.sanitize_for_serialization(self.core.read_namespaced_pod(pod_name, self.namespace))
        except ApiException:
            self._set_triggered(name, "False", "Failed", f'target pod "{pod_name}" not found')
            return
        labels = pod["metadata"].get("labels") or {}
        policies = [
            p
            for p in self.custom.list_namespaced_custom_object(GROUP, VERSION, self.namespace, "podsnapshotpolicies")[
                "items"
            ]
            if _match_selector((p.get("spec") or {}).get("selector"), labels)
            and not p["metadata"].get("deletionTimestamp")
        ]
        if not policies:
            self._set_triggered(name, "False", "Failed", f"no PodSnapshotPolicy matches pod {pod_name}")
            return
        policy = policies[0]
        snapshot_name = str(uuid.uuid4())
        body = {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "PodSnapshot",
            "metadata": {
                "name": snapshot_name,
                "namespace": self.namespace,
                "labels": {TRIGGERED_BY: name},
                "annotations": {ORIGIN_POD: pod_name, POD_HASH: restore_hash(pod)},
                "finalizers": [FINALIZER],
            },
            "spec": {"policyName": policy["metadata"]["name"]},
        }
        try:
            self.custom.create_namespaced_custom_object(GROUP, VERSION, self.namespace, "podsnapshots", body)
        except ApiException as exc:
            # e.g. a trigger name that is not a valid label value (> 63 characters)
            self._set_triggered(
                name, "False", "Error", f"simulated: the PodSnapshot could not be created: {exc.reason}"
            )
            return
        self.snapshots_created.append(snapshot_name)
        checkpoint_ok = self.behaviour != "checkpoint_fails"
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
        stamped = [{"lastTransitionTime": now_rfc3339(), **c} for c in conditions]
        self._patch_status("podsnapshots", snapshot_name, {"conditions": stamped})
        self._set_triggered(
            name, "True", "Complete", f"PodSnapshot {snapshot_name} created", snapshotCreated={"name": snapshot_name}
        )
        if not checkpoint_ok:
            return
        stop = ((policy.get("spec") or {}).get("triggerConfig") or {}).get("postCheckpoint") == "stop"
        stop_later = stop and self.stop_after_upload
        if stop and not stop_later:
            self._stop_pod(pod_name)
        self._later(self.upload_seconds, lambda: self._guard(self._uploaded, snapshot_name, pod_name, stop_later))

    def _stop_pod(self, pod_name: str) -> None:
        self.core.patch_namespaced_pod(
            pod_name, self.namespace, {"metadata": {"annotations": {STOPPED_ANNOTATION: "true"}}}
        )
        self.stopped_pods.append(pod_name)

    def _uploaded(self, snapshot: str, pod_name: str, stop: bool = False) -> None:
        current = self._get("podsnapshots", snapshot)
        if current is None or self.behaviour == "never_ready":
            return
        conditions = (current.get("status") or {}).get("conditions")
        conditions = _set_condition(conditions, {"type": "StorageReplicated", "status": "True", "reason": "Succeeded"})
        conditions = _set_condition(
            conditions,
            {"type": "Ready", "status": "True", "reason": "AllSnapshotsAvailable", "message": "snapshot uploaded"},
        )
        self.custom.patch_namespaced_custom_object(
            GROUP,
            VERSION,
            self.namespace,
            "podsnapshots",
            snapshot,
            {"metadata": {"annotations": {SIZE_ANNOTATION: str(self.size_bytes)}}},
        )
        self._patch_status(
            "podsnapshots",
            snapshot,
            {
                "conditions": conditions,
                "lastAccessTime": now_rfc3339(),
                "storageStatus": {"gcs": {"observedGCSPath": f"gs://simulated/{self.namespace}/{pod_name}/{snapshot}"}},
            },
        )
        if stop:
            self._stop_pod(pod_name)

    def seed_snapshot(self, origin_pod: str, pod: JSON, policy: str = "notebook-snapshots", ready: bool = True) -> str:
        """A Ready PodSnapshot of ``origin_pod`` as an earlier suspend left it (``pod``: the pod's spec as
        its StatefulSet template makes it, for the restore hash); ``ready=False``: one still uploading."""
        name = str(uuid.uuid4())
        body = {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "PodSnapshot",
            "metadata": {
                "name": name,
                "namespace": self.namespace,
                "labels": {TRIGGERED_BY: f"earlier-{origin_pod}"[:63]},
                "annotations": {ORIGIN_POD: origin_pod, POD_HASH: restore_hash(pod), SIZE_ANNOTATION: "1000"},
                "finalizers": [FINALIZER],
            },
            "spec": {"policyName": policy},
        }
        self.custom.create_namespaced_custom_object(GROUP, VERSION, self.namespace, "podsnapshots", body)
        conditions = [
            {"type": "Checkpoint", "status": "True", "reason": "Succeeded"},
            {"type": "StorageReplicated", "status": "True", "reason": "Succeeded"},
            {"type": "Ready", "status": "True", "reason": "AllSnapshotsAvailable"},
        ]
        if not ready:
            conditions = [conditions[0], {"type": "Ready", "status": "False", "reason": "AwaitingCheckpoint"}]
        self._patch_status(
            "podsnapshots",
            name,
            {"conditions": [{"lastTransitionTime": now_rfc3339(), "message": "", **c} for c in conditions]},
        )
        return name

    def touch(self, snapshot: str, last_access: str) -> None:
        """Set a snapshot's ``status.lastAccessTime`` (GKE's field; only GKE may write it), as if it were last
        used then: how a test ages a snapshot without waiting days."""
        self._patch_status("podsnapshots", snapshot, {"lastAccessTime": last_access})

    # -- restore -----------------------------------------------------------------
    def _maybe_restore(self, pod_name: str, uid: str) -> None:
        try:
            pod = self.api.sanitize_for_serialization(self.core.read_namespaced_pod(pod_name, self.namespace))
        except ApiException:
            return
        if pod["metadata"].get("uid") != uid or pod["metadata"].get("deletionTimestamp"):
            return
        if (pod.get("status") or {}).get("phase") != "Running":
            # GKE restores when the sandbox starts on a node; come back later.
            if (pod.get("status") or {}).get("phase") == "Pending":
                self._later(self.restore_seconds, lambda: self._guard(self._maybe_restore, pod_name, uid))
            return
        if _condition(pod, "PodRestored") is not None:
            return
        if self.restores_held:
            self._later(self.restore_seconds, lambda: self._guard(self._maybe_restore, pod_name, uid))
            return
        wanted = restore_hash(pod)
        pinned = (pod["metadata"].get("annotations") or {}).get(PINNED_SNAPSHOT)
        snapshots = self.custom.list_namespaced_custom_object(GROUP, VERSION, self.namespace, "podsnapshots")["items"]
        usable = [
            s
            for s in snapshots
            if (_condition(s, "Ready") or {}).get("status") == "True"
            and not s["metadata"].get("deletionTimestamp")
            and (s["metadata"].get("annotations") or {}).get(POD_HASH) == wanted
            and (pinned is None or s["metadata"]["name"] == pinned)
        ]
        if not usable:
            return  # a silent cold start, as on GKE
        chosen = max(usable, key=lambda s: s["metadata"]["creationTimestamp"])
        snapshot = chosen["metadata"]["name"]
        self._patch_status("podsnapshots", snapshot, {"lastAccessTime": now_rfc3339()})
        message = f"Pod restored from PodSnapshot {self.namespace}/{snapshot}"
        conditions = _set_condition(
            (pod.get("status") or {}).get("conditions"),
            {"type": "PodRestored", "status": "True", "reason": "Restored", "message": message},
        )
        self.core.patch_namespaced_pod_status(pod_name, self.namespace, {"status": {"conditions": conditions}})
        now = now_rfc3339()
        self.core.create_namespaced_event(
            self.namespace,
            {
                "metadata": {"name": f"{pod_name}.{uuid.uuid4().hex[:10]}", "namespace": self.namespace},
                "involvedObject": {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "name": pod_name,
                    "namespace": self.namespace,
                    "uid": uid,
                },
                "reason": "GKEPodSnapshotting",
                "message": f"Successfully restored the pod from PodSnapshot {self.namespace}/{snapshot}",
                "type": "Normal",
                "source": {"component": "gke-pod-snapshot"},
                "firstTimestamp": now,
                "lastTimestamp": now,
                "count": 1,
            },
        )
        self.restored.append((pod_name, snapshot))
        for delay in (1.0, 3.0):
            self._later(delay, lambda: self._guard(self._keep_condition, pod_name, uid, conditions[-1]))

    def _keep_condition(self, pod_name: str, uid: str, restored: JSON) -> None:
        """A kubelet keeps the conditions it does not own when it writes a pod's status (PodRestored is GKE's);
        kwok's stage templates write the conditions list whole and may drop it when they run late. Put it back."""
        try:
            pod = self.api.sanitize_for_serialization(self.core.read_namespaced_pod(pod_name, self.namespace))
        except ApiException:
            return
        if pod["metadata"].get("uid") != uid or _condition(pod, "PodRestored") is not None:
            return
        conditions = [*((pod.get("status") or {}).get("conditions") or []), restored]
        self.core.patch_namespaced_pod_status(pod_name, self.namespace, {"status": {"conditions": conditions}})

    # -- deletion ------------------------------------------------------------------
    def _delete_storage(self, name: str) -> None:
        snapshot = self._get("podsnapshots", name)
        if snapshot is None or FINALIZER not in (snapshot["metadata"].get("finalizers") or []):
            return
        path = (((snapshot.get("status") or {}).get("storageStatus") or {}).get("gcs") or {}).get(
            "observedGCSPath"
        ) or f"gs://simulated/{self.namespace}/unknown/{name}"
        policy_name = (snapshot.get("spec") or {}).get("policyName")
        policy = self._get("podsnapshotpolicies", policy_name) if policy_name else None
        (self.deleted_storage if policy is not None else self.orphaned_storage).append(path)
        finalizers = [f for f in snapshot["metadata"]["finalizers"] if f != FINALIZER]
        self.custom.patch_namespaced_custom_object(
            GROUP,
            VERSION,
            self.namespace,
            "podsnapshots",
            name,
            # the resourceVersion test makes a concurrent change a 409 instead of a lost finalizer
            [
                {"op": "test", "path": "/metadata/resourceVersion", "value": snapshot["metadata"]["resourceVersion"]},
                {"op": "replace", "path": "/metadata/finalizers", "value": finalizers},
            ],
            _content_type="application/json-patch+json",
        )
