"""A simulated StatefulSet controller (and a scheduler with a test-controlled capacity) for the test API server.

`spec.replicas` n keeps pods `<name>-0` .. `<name>-(n-1)` (from `spec.template`, owner reference to the set); extra
pods are deleted when it shrinks, a deleted pod comes back while the set still wants it, and so does a pod that
turned Succeeded or Failed (e.g. stopped by a snapshot with `postCheckpoint: stop`): it is deleted and recreated.
A new pod is Pending (condition PodScheduled False, reason Unschedulable) until the scheduler admits it: at most
`capacity` running pods (None = unlimited; completed pods do not count); `set_capacity(n)` admits waiting pods,
oldest first. Admitted pods become Running and Ready after `start_seconds`. The set's status (replicas,
readyReplicas, availableReplicas, observedGeneration) follows.

With `scheduling_events=True` a pod left waiting gets the scheduler's `FailedScheduling` Event, and with
`scale_up="triggered"` / `"not_triggered"` the cluster autoscaler's `TriggeredScaleUp` / `NotTriggerScaleUp` too
(once per pod, as the newest event explaining it).

With `replace_after=s` a pod that turned Succeeded or Failed stays there (Completed) for `s` seconds before the
controller deletes and recreates it (default 0: at once), so a test can look at the stopped pod.
"""

from __future__ import annotations

from collections.abc import Callable

from tests.kubeapi.server import JSON, KubeAPI, now_rfc3339

UNSCHEDULABLE = "0/1 nodes are available: 1 Insufficient nvidia.com/gpu."


class StatefulSetController:
    def __init__(
        self,
        kube: KubeAPI,
        capacity: int | None = None,
        start_seconds: float = 0.05,
        scheduling_events: bool = False,
        scale_up: str | None = None,
        replace_after: float = 0.0,
    ) -> None:
        self.kube = kube
        self.capacity = capacity
        self.start_seconds = start_seconds
        self.scheduling_events = scheduling_events
        self.scale_up = scale_up  # None, "triggered" or "not_triggered"
        self.replace_after = replace_after  # seconds a finished pod stays before it is recreated
        self._explained: set[str] = set()  # uids of pods that got their scheduling events
        self._ip = 10

    def attach(self) -> StatefulSetController:
        self.kube.add_controller(self.on_event)
        self.kube.workloads = self
        return self

    def set_capacity(self, capacity: int | None) -> None:
        """Thread-safe: takes effect on the server loop."""
        self.capacity = capacity
        self.kube.call_soon(self._schedule)

    def on_event(self, event_type: str, obj: JSON, kube: KubeAPI) -> None:
        kind, meta = obj.get("kind"), obj["metadata"]
        if kind == "StatefulSet" and event_type != "DELETED":
            self._reconcile(meta["namespace"], meta["name"])
        elif kind == "StatefulSet":
            for pod in self._owned_pods(meta["namespace"], meta["name"]):
                kube.delete("v1", "pods", meta["namespace"], pod["metadata"]["name"])
        elif kind == "Pod":
            owner = self._owner(obj)
            if owner is not None:
                phase = (obj.get("status") or {}).get("phase")
                if event_type == "DELETED":
                    self._reconcile(meta["namespace"], owner)
                    self._schedule()
                elif phase in ("Succeeded", "Failed") and not meta.get("deletionTimestamp"):
                    if self.replace_after > 0:
                        kube.call_soon(self._replacer(meta["namespace"], meta["name"], meta["uid"]), self.replace_after)
                    else:
                        kube.delete("v1", "pods", meta["namespace"], meta["name"])  # recreated, as a controller does
                else:
                    self._update_status(meta["namespace"], owner)

    @staticmethod
    def _owner(pod: JSON) -> str | None:
        for ref in pod["metadata"].get("ownerReferences") or []:
            if ref.get("kind") == "StatefulSet":
                return str(ref.get("name"))
        return None

    def _owned_pods(self, namespace: str, name: str) -> list[JSON]:
        return [pod for pod in self.kube.list("v1", "pods", namespace) if self._owner(pod) == name]

    def _reconcile(self, namespace: str, name: str) -> None:
        sts = self.kube.get("apps/v1", "statefulsets", namespace, name)
        if sts is None:
            return
        spec = sts.get("spec") or {}
        replicas = spec.get("replicas", 1)
        existing = {pod["metadata"]["name"]: pod for pod in self._owned_pods(namespace, name)}
        wanted = [f"{name}-{ordinal}" for ordinal in range(replicas)]
        for pod_name, pod in existing.items():
            if pod_name not in wanted and not pod["metadata"].get("deletionTimestamp"):
                self.kube.delete("v1", "pods", namespace, pod_name)
        template = spec.get("template") or {}
        for pod_name in wanted:
            if pod_name in existing:
                continue
            tmeta = template.get("metadata") or {}
            self.kube.create(
                {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "metadata": {
                        "name": pod_name,
                        "namespace": namespace,
                        "labels": {**(tmeta.get("labels") or {}), "statefulset.kubernetes.io/pod-name": pod_name},
                        "annotations": dict(tmeta.get("annotations") or {}),
                        "ownerReferences": [
                            {
                                "apiVersion": "apps/v1",
                                "kind": "StatefulSet",
                                "name": name,
                                "uid": sts["metadata"]["uid"],
                                "controller": True,
                                "blockOwnerDeletion": True,
                            }
                        ],
                    },
                    "spec": dict(template.get("spec") or {}),
                    "status": {
                        "phase": "Pending",
                        "conditions": [
                            {
                                "type": "PodScheduled",
                                "status": "False",
                                "reason": "Unschedulable",
                                "message": UNSCHEDULABLE,
                                "lastTransitionTime": now_rfc3339(),
                            }
                        ],
                    },
                }
            )
        self._schedule()
        self._update_status(namespace, name)

    def _schedule(self) -> None:
        pods = [pod for pod in self.kube.objects("pods") if self._owner(pod) is not None]
        placed = [
            pod
            for pod in pods
            if (pod.get("spec") or {}).get("nodeName")
            and (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed")
        ]
        waiting = sorted(
            (pod for pod in pods if not (pod.get("spec") or {}).get("nodeName")),
            key=lambda pod: int(pod["metadata"]["resourceVersion"]),
        )
        free = len(waiting) if self.capacity is None else max(0, self.capacity - len(placed))
        for pod in waiting[:free]:
            meta = pod["metadata"]
            now = now_rfc3339()
            self.kube.patch(
                "v1",
                "pods",
                meta["namespace"],
                meta["name"],
                {
                    "spec": {"nodeName": "gpu-node-1"},
                    "status": {
                        "conditions": [
                            {"type": "PodScheduled", "status": "True", "lastTransitionTime": now},
                        ]
                    },
                },
            )
            self.kube.call_soon(self._runner(meta["namespace"], meta["name"]), self.start_seconds)
        if self.scheduling_events:
            for pod in waiting[free:]:
                self._explain(pod)

    def _explain(self, pod: JSON) -> None:
        """The events a real scheduler (and cluster autoscaler) leave on a pod that does not fit."""
        meta = pod["metadata"]
        if meta["uid"] in self._explained or meta.get("deletionTimestamp"):
            return
        self._explained.add(meta["uid"])
        events = [("FailedScheduling", "default-scheduler", UNSCHEDULABLE)]
        if self.scale_up == "triggered":
            events.append(
                ("TriggeredScaleUp", "cluster-autoscaler", "pod triggered scale-up: [{gpu-pool 0->1 (max: 10)}]")
            )
        elif self.scale_up == "not_triggered":
            events.append(
                (
                    "NotTriggerScaleUp",
                    "cluster-autoscaler",
                    "pod didn't trigger scale-up: 1 max node group size reached",
                )
            )
        for offset, (reason, component, message) in enumerate(events):
            now = now_rfc3339()
            self.kube.create(
                {
                    "apiVersion": "v1",
                    "kind": "Event",
                    "metadata": {"name": f"{meta['name']}.{meta['uid'][:8]}{offset}", "namespace": meta["namespace"]},
                    "involvedObject": {
                        "apiVersion": "v1",
                        "kind": "Pod",
                        "name": meta["name"],
                        "namespace": meta["namespace"],
                        "uid": meta["uid"],
                    },
                    "reason": reason,
                    "message": message,
                    "type": "Warning" if reason != "TriggeredScaleUp" else "Normal",
                    "source": {"component": component},
                    "reportingComponent": component,
                    "firstTimestamp": now,
                    "lastTimestamp": now,
                    "count": 1,
                }
            )

    def _replacer(self, namespace: str, name: str, uid: str) -> Callable[[], None]:
        def replace() -> None:
            pod = self.kube.get("v1", "pods", namespace, name)
            if pod is not None and pod["metadata"]["uid"] == uid and not pod["metadata"].get("deletionTimestamp"):
                self.kube.delete("v1", "pods", namespace, name)

        return replace

    def _runner(self, namespace: str, name: str) -> Callable[[], None]:
        return lambda: self._run(namespace, name)

    def _run(self, namespace: str, name: str) -> None:
        pod = self.kube.get("v1", "pods", namespace, name)
        if pod is None or pod["metadata"].get("deletionTimestamp"):
            return
        now = now_rfc3339()
        self._ip += 1
        conditions = [
            {"type": kind, "status": "True", "lastTransitionTime": now}
            for kind in ("PodScheduled", "Initialized", "ContainersReady", "Ready")
        ]
        statuses = [
            {
                "name": container.get("name", ""),
                "image": container.get("image", ""),
                "imageID": f"docker.io/{container.get('image', '')}@sha256:{'0' * 64}",
                "containerID": f"containerd://{container.get('name', '')}",
                "ready": True,
                "started": True,
                "restartCount": 0,
                "state": {"running": {"startedAt": now}},
            }
            for container in (pod.get("spec") or {}).get("containers") or []
        ]
        self.kube.patch_status(
            "v1",
            "pods",
            namespace,
            name,
            {
                "phase": "Running",
                "conditions": conditions,
                "containerStatuses": statuses,
                "podIP": f"10.8.0.{self._ip % 250}",
                "hostIP": "10.128.0.2",
                "startTime": now,
            },
        )

    def _update_status(self, namespace: str, name: str) -> None:
        sts = self.kube.get("apps/v1", "statefulsets", namespace, name)
        if sts is None:
            return
        pods = [pod for pod in self._owned_pods(namespace, name) if not pod["metadata"].get("deletionTimestamp")]
        ready = [
            pod
            for pod in pods
            if any(
                c.get("type") == "Ready" and c.get("status") == "True"
                for c in (pod.get("status") or {}).get("conditions") or []
            )
        ]
        status = {
            "replicas": len(pods),
            "readyReplicas": len(ready),
            "availableReplicas": len(ready),
            "currentReplicas": len(pods),
            "observedGeneration": sts["metadata"].get("generation", 1),
        }
        if any((sts.get("status") or {}).get(key) != value for key, value in status.items()):
            self.kube.patch_status("apps/v1", "statefulsets", namespace, name, status)
