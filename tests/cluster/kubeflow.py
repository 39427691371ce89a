"""Kubeflow's notebook controllers, simulated in Python against the real API server.

Why simulated: the real controllers are Go programs, and the Go module proxy of this machine does not serve them:
``go list -m -versions github.com/kubeflow/kubeflow/components/notebook-controller@latest`` and the same for
``github.com/kubeflow/notebooks/workspaces/controller`` answer "reading https://proxy.golang.org/.../@v/list: 403
Forbidden: This module version is not available" (tried 2026-12-04). Everything else is real: the CRDs
(tests/cluster/crds/), the StatefulSet controller, the garbage collector, the scheduler and kwok make and remove the
pods; these controllers only do what the upstream reconcilers do, reading the objects from their own watches (as
controller-runtime's cached client does) and writing through the API server.

Each behaviour is from the public source (``fetch`` of github:kubeflow/notebooks, branches ``notebooks-v1`` and
``notebooks-v2``; github:kubeflow/kubeflow's snapshot no longer holds ``components/``, the notebook controller lives
on in kubeflow/notebooks ``notebooks-v1``):

Notebooks v1, ``notebooks-v1:components/notebook-controller/controllers/notebook_controller.go``:
- ``generateStatefulSet``: a StatefulSet named like the Notebook, controller-owned by it, ``replicas`` 0 while the
  annotation ``kubeflow-resource-stopped`` is present and 1 otherwise; selector ``statefulset=<name>``; the pod
  template is the Notebook's ``spec.template.spec`` with labels ``statefulset`` and ``notebook-name`` plus the
  Notebook's labels, the Notebook's annotations except keys containing ``kubectl`` or ``notebook``;
  ``containers[0]`` gets ``workingDir: /home/jovyan`` and the port ``notebook-port`` 8888 when it has none, and the
  pod ``securityContext.fsGroup: 100`` when it has no securityContext (``ADD_FSGROUP`` unset).
- ``generateService``: a ClusterIP Service named like the Notebook, selector ``statefulset=<name>``, port 80 named
  ``http-<name>`` to the first container port (8888).
- ``createNotebookStatus``: ``readyReplicas`` from the StatefulSet's status; ``containerState`` from the pod
  ``<name>-0``'s container *named like the Notebook* (no such container: left empty); ``conditions`` the pod's
  conditions in the pod's order (``PodCondToNotebookCond``). Written with ``Status().Update``.
- Not simulated: the Istio VirtualService (``USE_ISTIO``), the culling controller, Events re-queueing, and a quirk
  of ``createNotebookStatus``: a container state equal to the one already recorded is skipped (``continue``), so
  upstream writes an empty ``containerState`` on such a reconcile; here it stays (jupyter_suspend never reads it).

Workspaces, ``notebooks-v2:workspaces/controller/internal/controller/workspace_controller.go``:
- An unknown WorkspaceKind (``spec.kind``) -> state Error, "Workspace references unknown WorkspaceKind: <kind>";
  an imageConfig/podConfig id not in the kind -> Error "Workspace has invalid imageConfig|podConfig: <id>".
- ``generateServiceAccountName``: the per-workspace ServiceAccount ``ws-<name>`` (owned by the Workspace).
- ``generateStatefulSet``: ``metadata.generateName: ws-<name>-`` (``generateNamePrefix``; the API server adds a
  random suffix), label ``notebooks.kubeflow.org/workspace-name``, selector that label and ``statefulset=<name>``;
  ``replicas`` 0 while ``spec.paused``; one container ``main`` with the imageConfig's image and ports, the podConfig's
  resources, nodeSelector, tolerations and affinity, the kind's ``podMetadata`` labels/annotations merged under the
  Workspace's, ``serviceAccountName: ws-<name>``. The pod is ``<statefulset>-0``.
- ``generateWorkspaceStatus``: ``pauseTime`` = ``metav1.Now().UnixMilli()`` (epoch MILLISECONDS) when first seen
  paused, 0 when not paused; ``podTemplatePod`` {name, nodeName, containers, initContainers} of the pod (empty
  name/nodeName without a pod) with ``serviceAccountName``; ``lastRunningTime`` (ms) and ``activity`` reset on a
  transition into Running (``recordRunningTransition``).
- ``generateWorkspaceState``: no pod and paused -> Paused "Workspace is paused"; a pod with a deletionTimestamp ->
  Terminating "Workspace is terminating"; PodScheduled False with reason Unschedulable -> Error "Workspace Pod is
  unschedulable: <message>"; phase Running and Ready -> Running "Workspace is running"; phase Pending -> Pending
  "Workspace is pending"; otherwise Unknown "Workspace is in an unknown state".
- Not simulated: the Warning-Event states (StatefulSet/Pod warning events), CrashLoopBackOff/ImagePullBackOff (kwok
  never reports them), the Service, VirtualService, RoleBindings of ``podTemplate.serviceAccount``, redirects and
  ``pendingRestart``, the activity probe and culling (workspace_activity.go).
"""

from __future__ import annotations

import contextlib
import copy
import json
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from kubernetes import client, config, watch
from kubernetes.client.rest import ApiException

from .control_plane import Cluster

log = logging.getLogger(__name__)

JSON = dict[str, Any]
GROUP = "kubeflow.org"
NOTEBOOK_VERSION, WORKSPACE_VERSION = "v1", "v1beta1"
NOTEBOOK_API, WORKSPACE_API = f"{GROUP}/{NOTEBOOK_VERSION}", f"{GROUP}/{WORKSPACE_VERSION}"
STOPPED_ANNOTATION = "kubeflow-resource-stopped"
NOTEBOOK_NAME_LABEL = "notebook-name"
WORKSPACE_NAME_LABEL = "notebooks.kubeflow.org/workspace-name"
#: What deploy/base's nodes are tainted with (tests/cluster/control_plane.py): a pod that is to run tolerates them.
TOLERATIONS = [
    {"key": "sandbox.gke.io/runtime", "operator": "Exists", "effect": "NoSchedule"},
    {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
]


def now_millis() -> int:
    return int(time.time() * 1000)


def _owner(obj: JSON, kind: str) -> str | None:
    for ref in obj.get("metadata", {}).get("ownerReferences") or []:
        if ref.get("kind") == kind and ref.get("controller"):
            return str(ref.get("name"))
    return None


def _owner_ref(obj: JSON) -> JSON:
    meta = obj["metadata"]
    return {
        "apiVersion": obj["apiVersion"],
        "kind": obj["kind"],
        "name": meta["name"],
        "uid": meta["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }


def _condition(pod: JSON, kind: str) -> JSON:
    for entry in (pod.get("status") or {}).get("conditions") or []:
        if entry.get("type") == kind:
            return dict(entry)
    return {}


class _Informer:
    """List, then watch from the list's resourceVersion, relist on 410; keeps a cache and calls ``on_change``."""

    def __init__(self, name: str, list_call: Callable[..., Any], namespace: str, on_change: Callable[[JSON], None]):
        self.name = name
        self.list_call = list_call
        self.namespace = namespace
        self.on_change = on_change
        self.cache: dict[str, JSON] = {}
        self.lock = threading.Lock()
        self.synced = threading.Event()

    def get(self, name: str) -> JSON | None:
        with self.lock:
            obj = self.cache.get(name)
            return copy.deepcopy(obj) if obj is not None else None

    def items(self) -> list[JSON]:
        with self.lock:
            return [copy.deepcopy(o) for o in self.cache.values()]

    def run(self, api: client.ApiClient, stop: threading.Event, errors: list[str]) -> None:
        while not stop.is_set():
            try:
                listed = self.list_call(self.namespace, _preload_content=False)
                body = json.loads(listed.data)
                with self.lock:
                    self.cache = {o["metadata"]["name"]: o for o in body.get("items") or []}
                self.synced.set()
                for obj in body.get("items") or []:
                    self.on_change(obj)
                stream = watch.Watch()
                version = body["metadata"]["resourceVersion"]
                for event in stream.stream(self.list_call, self.namespace, resource_version=version, timeout_seconds=5):
                    if stop.is_set():
                        stream.stop()
                        return
                    obj = event["object"]
                    if not isinstance(obj, dict):
                        obj = api.sanitize_for_serialization(obj)
                    if event["type"] == "ERROR":
                        break
                    with self.lock:
                        if event["type"] == "DELETED":
                            self.cache.pop(obj["metadata"]["name"], None)
                        else:
                            self.cache[obj["metadata"]["name"]] = obj
                    self.on_change(obj)
            except ApiException as exc:
                if exc.status != 410 and not stop.is_set():
                    errors.append(f"watch {self.name}: {exc.status} {exc.reason}")
                time.sleep(0.2)
            except Exception as exc:  # noqa: BLE001 - a dropped connection or a decode error: relist
                if not stop.is_set():
                    log.debug("watch %s: %s", self.name, exc)
                    time.sleep(0.2)


class _Controller:
    """Informers on one namespace and a work queue of owner names (one worker, as controller-runtime's default)."""

    informers: dict[str, _Informer]

    def __init__(self, cluster: Cluster, namespace: str) -> None:
        self.namespace = namespace
        self.api = config.new_client_from_config(str(cluster.admin_kubeconfig))
        self.core = client.CoreV1Api(self.api)
        self.apps = client.AppsV1Api(self.api)
        self.custom = client.CustomObjectsApi(self.api)
        self.errors: list[str] = []
        self.reconciles = 0
        self._queue: set[str] = set()
        self._wake = threading.Condition()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []

    def _custom_list(self, version: str, plural: str) -> Callable[..., Any]:
        def call(namespace: str, **kwargs: Any) -> Any:
            return self.custom.list_namespaced_custom_object(GROUP, version, namespace, plural, **kwargs)

        return call

    def _owned_informers(self, plural: str, version: str, kind: str, name_label: str) -> dict[str, _Informer]:
        """What both controllers watch: their own objects, the StatefulSets they own and the pods whose
        ``name_label`` names one of their objects; each event queues that object's name."""
        namespace = self.namespace
        return {
            plural: _Informer(
                plural,
                self._custom_list(version, plural),
                namespace,
                lambda o: self.enqueue(o["metadata"]["name"]),
            ),
            "statefulsets": _Informer(
                "statefulsets",
                self.apps.list_namespaced_stateful_set,
                namespace,
                lambda o: self.enqueue(_owner(o, kind)),
            ),
            "pods": _Informer(
                "pods",
                self.core.list_namespaced_pod,
                namespace,
                lambda o: self.enqueue((o["metadata"].get("labels") or {}).get(name_label)),
            ),
        }

    def enqueue(self, name: str | None) -> None:
        if name:
            with self._wake:
                self._queue.add(name)
                self._wake.notify_all()

    def start(self) -> Any:
        for informer in self.informers.values():
            self._threads.append(
                threading.Thread(target=informer.run, args=(self.api, self._stop, self.errors), daemon=True)
            )
        self._threads.append(threading.Thread(target=self._worker, daemon=True))
        for thread in self._threads:
            thread.start()
        for informer in self.informers.values():
            informer.synced.wait(30)
        return self

    def stop(self) -> None:
        self._stop.set()
        with self._wake:
            self._wake.notify_all()
        self._threads[-1].join(timeout=10)  # the worker: no reconcile runs after stop()
        # The watches end by themselves within their 5 s timeout (daemon threads that only read and see the stop
        # flag); closing the client's connections ends them sooner.
        with contextlib.suppress(Exception):
            self.api.close()

    def __enter__(self) -> Any:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _worker(self) -> None:
        while not self._stop.is_set():
            with self._wake:
                if not self._queue:
                    self._wake.wait(0.5)
                    continue
                name = self._queue.pop()
            time.sleep(0.02)  # let a burst of events land in the cache first
            try:
                self.reconciles += 1
                self.reconcile(name)
            except ApiException as exc:
                if exc.status == 409:  # a stale cache: reconcile again, as controller-runtime requeues
                    self.enqueue(name)
                elif exc.status != 404:
                    self.errors.append(f"reconcile {name}: {exc.status} {exc.reason} {exc.body}")
            except Exception as exc:
                log.exception("simulated Kubeflow controller")
                self.errors.append(f"reconcile {name}: {exc!r}")

    def reconcile(self, name: str) -> None:
        raise NotImplementedError


class NotebookController(_Controller):
    """kubeflow/notebooks notebooks-v1 components/notebook-controller (see the module's docstring)."""

    def __init__(self, cluster: Cluster, namespace: str) -> None:
        super().__init__(cluster, namespace)
        self.informers = {
            # predNBPodIsLabeled: pods with the notebook-name label map to that Notebook
            **self._owned_informers("notebooks", NOTEBOOK_VERSION, "Notebook", NOTEBOOK_NAME_LABEL),
            "services": _Informer("services", self.core.list_namespaced_service, namespace, lambda o: None),
        }

    @staticmethod
    def statefulset(notebook: JSON) -> JSON:
        meta = notebook["metadata"]
        name = meta["name"]
        spec = copy.deepcopy(((notebook.get("spec") or {}).get("template") or {}).get("spec") or {})
        labels = {"statefulset": name, NOTEBOOK_NAME_LABEL: name, **(meta.get("labels") or {})}
        annotations = {
            k: v for k, v in (meta.get("annotations") or {}).items() if "kubectl" not in k and "notebook" not in k
        }
        container = spec["containers"][0]
        container.setdefault("workingDir", "/home/jovyan")
        container.setdefault("ports", [{"containerPort": 8888, "name": "notebook-port", "protocol": "TCP"}])
        spec.setdefault("securityContext", {"fsGroup": 100})
        stopped = STOPPED_ANNOTATION in (meta.get("annotations") or {})
        return {
            "apiVersion": "apps/v1",
            "kind": "StatefulSet",
            "metadata": {"name": name, "namespace": meta["namespace"], "ownerReferences": [_owner_ref(notebook)]},
            "spec": {
                "replicas": 0 if stopped else 1,
                "selector": {"matchLabels": {"statefulset": name}},
                "serviceName": "",
                "template": {"metadata": {"labels": labels, "annotations": annotations}, "spec": spec},
            },
        }

    def reconcile(self, name: str) -> None:
        notebook = self.informers["notebooks"].get(name)
        if notebook is None or notebook["metadata"].get("deletionTimestamp"):
            return  # the garbage collector removes what it owned
        wanted = self.statefulset(notebook)
        found = self.informers["statefulsets"].get(name)
        if found is None:
            found = self.api.sanitize_for_serialization(
                self.apps.create_namespaced_stateful_set(self.namespace, wanted)
            )
        elif (
            found["spec"].get("replicas") != wanted["spec"]["replicas"]
            or found["spec"]["template"]["metadata"].get("labels") != wanted["spec"]["template"]["metadata"]["labels"]
        ):
            # CopyStatefulSetFields: replicas, labels/annotations and the template's spec are brought in line.
            patch = {"spec": {"replicas": wanted["spec"]["replicas"], "template": wanted["spec"]["template"]}}
            found = self.api.sanitize_for_serialization(
                self.apps.patch_namespaced_stateful_set(name, self.namespace, patch)
            )
        if self.informers["services"].get(name) is None:
            port = notebook["spec"]["template"]["spec"]["containers"][0].get("ports") or [{"containerPort": 8888}]
            service = {
                "metadata": {"name": name, "namespace": self.namespace, "ownerReferences": [_owner_ref(notebook)]},
                "spec": {
                    "type": "ClusterIP",
                    "selector": {"statefulset": name},
                    "ports": [
                        {"name": f"http-{name}", "port": 80, "targetPort": port[0]["containerPort"], "protocol": "TCP"}
                    ],
                },
            }
            with contextlib.suppress(ApiException):  # 409: it exists and the cache has not seen it yet
                self.core.create_namespaced_service(self.namespace, service)
        pod = self.informers["pods"].get(f"{name}-0")
        status: JSON = {
            "readyReplicas": (found.get("status") or {}).get("readyReplicas") or 0,
            "containerState": {},
            "conditions": [],
        }
        if pod is not None and pod.get("status"):
            for entry in pod["status"].get("containerStatuses") or []:
                if entry.get("name") == name:
                    status["containerState"] = entry.get("state") or {}
                    break
            now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
            status["conditions"] = [
                {
                    **{k: c[k] for k in ("type", "status", "reason", "message") if c.get(k)},
                    "lastProbeTime": c.get("lastProbeTime") or now,
                    "lastTransitionTime": c.get("lastTransitionTime") or now,
                }
                for c in pod["status"].get("conditions") or []
            ]
        old = notebook.get("status") or {}
        if {k: old.get(k) for k in status} != status:
            self.custom.patch_namespaced_custom_object_status(
                GROUP, NOTEBOOK_VERSION, self.namespace, "notebooks", name, {"status": status}
            )


class WorkspaceController(_Controller):
    """kubeflow/notebooks notebooks-v2 workspaces/controller (see the module's docstring)."""

    def __init__(
        self,
        cluster: Cluster,
        namespace: str,
        seconds_clock: bool = False,
        pod_mutation: Callable[[JSON], None] | None = None,
    ) -> None:
        """``seconds_clock``: ``pauseTime`` in epoch seconds as ``v2.0-alpha-branch`` wrote it
        (``metav1.Now().Unix()``, same file on that branch). ``pod_mutation``: applied to each generated pod template,
        standing in for a mutating admission webhook on the pods (GKE Workspaces' snapshot add-on adds
        ``runtimeClassName: gvisor`` and a readiness gate that way; simulated here on the template, unverified
        against the add-on's exact patch)."""
        super().__init__(cluster, namespace)
        self.seconds_clock = seconds_clock
        self.pod_mutation = pod_mutation
        self.statefulsets_created: list[tuple[str, str]] = []  # (workspace, statefulset)
        self.informers = self._owned_informers("workspaces", WORKSPACE_VERSION, "Workspace", WORKSPACE_NAME_LABEL)

    def _kind(self, name: str) -> JSON | None:
        # WorkspaceKinds are cluster-scoped and few: read (not watched; the Workspace events re-queue).
        try:
            return dict(self.custom.get_cluster_custom_object(GROUP, WORKSPACE_VERSION, "workspacekinds", name))
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def _set_status(self, workspace: JSON, **changes: Any) -> None:
        old = workspace.get("status") or {}
        status = {**old, **changes}
        if status != old:
            self.custom.patch_namespaced_custom_object_status(
                GROUP,
                WORKSPACE_VERSION,
                self.namespace,
                "workspaces",
                workspace["metadata"]["name"],
                {"status": status},
            )

    def reconcile(self, name: str) -> None:
        workspace = self.informers["workspaces"].get(name)
        if workspace is None or workspace["metadata"].get("deletionTimestamp"):
            return
        spec = workspace.get("spec") or {}
        kind = self._kind(str(spec.get("kind")))
        if kind is None:
            self._set_status(
                workspace, state="Error", stateMessage=f"Workspace references unknown WorkspaceKind: {spec.get('kind')}"
            )
            return
        template = kind["spec"]["podTemplate"]
        chosen = (spec.get("podTemplate") or {}).get("options") or {}
        values: dict[str, JSON] = {}
        for option in ("imageConfig", "podConfig"):
            wanted = chosen.get(option)
            value = next((v for v in template["options"][option]["values"] if v["id"] == wanted), None)
            if value is None:
                self._set_status(workspace, state="Error", stateMessage=f"Workspace has invalid {option}: {wanted}")
                return
            values[option] = value["spec"]
        account = f"ws-{name}"  # generateServiceAccountName (names longer than 63 get a hash: not needed here)
        try:
            self.core.create_namespaced_service_account(
                self.namespace,
                {
                    "metadata": {
                        "name": account,
                        "labels": {WORKSPACE_NAME_LABEL: name},
                        "ownerReferences": [_owner_ref(workspace)],
                    }
                },
            )
        except ApiException as exc:
            if exc.status != 409:
                raise
        owned = [s for s in self.informers["statefulsets"].items() if _owner(s, "Workspace") == name]
        if len(owned) > 1:
            names = ", ".join(s["metadata"]["name"] for s in owned)
            self._set_status(workspace, state="Error", stateMessage=f"Workspace owns multiple StatefulSets: {names}")
            return
        replicas = 0 if spec.get("paused") else 1
        if not owned:
            wanted = self.statefulset(workspace, kind, values)
            if self.pod_mutation is not None:
                self.pod_mutation(wanted["spec"]["template"])
            sts = self.api.sanitize_for_serialization(self.apps.create_namespaced_stateful_set(self.namespace, wanted))
            self.statefulsets_created.append((name, sts["metadata"]["name"]))
        else:
            sts = owned[0]
            if sts["spec"].get("replicas") != replicas:
                sts = self.api.sanitize_for_serialization(
                    self.apps.patch_namespaced_stateful_set(
                        sts["metadata"]["name"], self.namespace, {"spec": {"replicas": replicas}}
                    )
                )
        pod = self.informers["pods"].get(f"{sts['metadata']['name']}-0")
        self._status(workspace, pod, account, chosen)

    @staticmethod
    def statefulset(workspace: JSON, kind: JSON, values: dict[str, JSON]) -> JSON:
        name = workspace["metadata"]["name"]
        template = kind["spec"]["podTemplate"]
        pod_metadata = template.get("podMetadata") or {}
        ws_metadata = ((workspace.get("spec") or {}).get("podTemplate") or {}).get("podMetadata") or {}
        selector = {WORKSPACE_NAME_LABEL: name, "statefulset": name}
        image, pod_config = values["imageConfig"], values["podConfig"]
        container: JSON = {
            "name": "main",
            "image": image["image"],
            "ports": [{"name": f"http-{p['id']}"[:15], "containerPort": p["port"]} for p in image.get("ports") or []],
        }
        if pod_config.get("resources"):
            container["resources"] = pod_config["resources"]
        pod_spec: JSON = {"containers": [container], "serviceAccountName": f"ws-{name}"}
        for field in ("affinity", "nodeSelector", "tolerations"):
            if pod_config.get(field):
                pod_spec[field] = pod_config[field]
        return {
            "apiVersion": "apps/v1",
            "kind": "StatefulSet",
            "metadata": {
                "generateName": f"ws-{name}-",
                "labels": {WORKSPACE_NAME_LABEL: name},
                "ownerReferences": [_owner_ref(workspace)],
            },
            "spec": {
                "replicas": 0 if (workspace.get("spec") or {}).get("paused") else 1,
                "serviceName": "",
                "selector": {"matchLabels": selector},
                "template": {
                    "metadata": {
                        "labels": {
                            **(pod_metadata.get("labels") or {}),
                            **(ws_metadata.get("labels") or {}),
                            **selector,
                        },
                        "annotations": {
                            **(pod_metadata.get("annotations") or {}),
                            **(ws_metadata.get("annotations") or {}),
                        },
                    },
                    "spec": pod_spec,
                },
            },
        }

    def _status(self, workspace: JSON, pod: JSON | None, account: str, chosen: JSON) -> None:
        old = workspace.get("status") or {}
        paused = bool((workspace.get("spec") or {}).get("paused"))
        now = int(time.time()) if self.seconds_clock else now_millis()
        pause_time = (old.get("pauseTime") or now) if paused else 0
        pod_status: JSON = {"name": "", "nodeName": "", "serviceAccountName": account}
        if pod is not None:
            pod_status |= {
                "name": pod["metadata"]["name"],
                "nodeName": (pod.get("spec") or {}).get("nodeName") or "",
                "containers": [{"name": c["name"]} for c in pod["spec"].get("containers") or []],
                "initContainers": [{"name": c["name"]} for c in pod["spec"].get("initContainers") or []],
            }
        state, message = self.state(paused, pod)
        changes: JSON = {
            "state": state,
            "stateMessage": message,
            "pauseTime": pause_time,
            "podTemplatePod": pod_status,
            "podTemplateOptions": {
                "imageConfig": {"desired": chosen.get("imageConfig")},
                "podConfig": {"desired": chosen.get("podConfig")},
            },
            "pendingRestart": bool(old.get("pendingRestart", False)),
            "activity": old.get("activity") or {"lastActivity": 0, "lastUpdate": 0},
            "lastRunningTime": old.get("lastRunningTime") or 0,
        }
        if state == "Running" and (old.get("state") != "Running" or not old.get("lastRunningTime")):
            changes |= {"lastRunningTime": now_millis(), "activity": {"lastActivity": 0, "lastUpdate": 0}}
        self._set_status(workspace, **changes)

    @staticmethod
    def state(paused: bool, pod: JSON | None) -> tuple[str, str]:
        if pod is None:
            return ("Paused", "Workspace is paused") if paused else ("Unknown", "Workspace is in an unknown state")
        if pod["metadata"].get("deletionTimestamp"):
            return "Terminating", "Workspace is terminating"
        status = pod.get("status") or {}
        scheduled = _condition(pod, "PodScheduled")
        if scheduled.get("status") != "True" and scheduled.get("reason") == "Unschedulable":
            return "Error", f"Workspace Pod is unschedulable: {scheduled.get('message', '')}"
        if status.get("phase") == "Running" and _condition(pod, "Ready").get("status") == "True":
            return "Running", "Workspace is running"
        if status.get("phase") == "Pending":
            return "Pending", "Workspace is pending"
        return "Unknown", "Workspace is in an unknown state"


def workspace_kind_object(name: str) -> JSON:
    """A WorkspaceKind shaped like deploy/overlays/kubeflow-workspace/workspacekind-example.yaml (with the fake
    nodes' tolerations in its podConfig)."""
    return {
        "apiVersion": WORKSPACE_API,
        "kind": "WorkspaceKind",
        "metadata": {"name": name},
        "spec": {
            "spawner": {
                "displayName": "JupyterLab (test)",
                "description": "a test kind",
                "icon": {"url": "https://jupyter.org/favicon.ico"},
                "logo": {"url": "https://jupyter.org/favicon.ico"},
            },
            "podTemplate": {
                "podMetadata": {"labels": {"jupyter-suspend.io/inject": "true"}},
                "volumeMounts": {"home": "/home/jovyan"},
                "ports": [{"id": "jupyterlab", "defaultDisplayName": "JupyterLab", "protocol": "HTTP"}],
                "options": {
                    "imageConfig": {
                        "spawner": {"default": "jupyter-suspend"},
                        "values": [
                            {
                                "id": "jupyter-suspend",
                                "spawner": {"displayName": "jupyter-suspend"},
                                "spec": {
                                    "image": "ghcr.io/example/jupyter-suspend:0.1.0",
                                    "ports": [{"id": "jupyterlab", "port": 8888}],
                                },
                            }
                        ],
                    },
                    "podConfig": {
                        "spawner": {"default": "small-gpu"},
                        "values": [
                            {
                                "id": "small-gpu",
                                "spawner": {"displayName": "Small GPU"},
                                "spec": {
                                    "resources": {"requests": {"cpu": "1", "memory": "2Gi"}},
                                    "tolerations": TOLERATIONS,
                                },
                            }
                        ],
                    },
                },
            },
        },
    }


def workspace_object(name: str, namespace: str, kind: str, paused: bool = False) -> JSON:
    return {
        "apiVersion": WORKSPACE_API,
        "kind": "Workspace",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "kind": kind,
            "paused": paused,
            "podTemplate": {
                "volumes": {},
                "options": {"imageConfig": "jupyter-suspend", "podConfig": "small-gpu"},
            },
        },
    }


class GKEWorkspacesAddOn:
    """GKE Workspaces' snapshot add-on, as far as a pause goes, as a real admission webhook of the real API server
    (HTTPS on loopback, a CA of the test's own in the MutatingWebhookConfiguration's caBundle).

    From the public code (gke-labs/workspaces ``providers/gke/internal/snapshot/webhook.go`` ``mutateWorkspace``, and
    ``providers/gke/pod_snapshot_webhook_design.md``; platform-facts.md §2/§3): a pause request (``spec.paused``
    false -> true) on a Workspace is held (``paused`` kept false) and the Workspace annotated
    ``podsnapshot.gke.kubeflow.org/checkpoint-state: Checkpointing``; its Pod webhook gives the workspace's pods
    ``runtimeClassName: gvisor`` and the readiness gate ``podsnapshot.gke.kubeflow.org/active``. Not simulated: the
    snapshot itself and the later ``paused: true`` (unverified without the platform)."""

    CHECKPOINT_STATE = "podsnapshot.gke.kubeflow.org/checkpoint-state"
    READINESS_GATE = "podsnapshot.gke.kubeflow.org/active"

    def __init__(self, cluster: Cluster, namespace: str, directory: Any, mutate_pods: bool = True) -> None:
        from .pki import CertificateAuthority

        self.cluster, self.namespace, self.mutate_pods = cluster, namespace, mutate_pods
        self.intercepted = 0
        self.pods_mutated = 0
        self.ca = CertificateAuthority(directory)
        self.cert, self.key = self.ca.issue("addon", "gke-workspaces-addon", server_ips=("127.0.0.1",))
        self.name = f"gke-workspaces-addon-{namespace}"
        self._server: Any = None

    def review(self, request: JSON) -> JSON:
        """One AdmissionReview request -> its response (a JSONPatch or nothing)."""
        obj, old = request.get("object") or {}, request.get("oldObject") or {}
        patch: list[JSON] = []
        if obj.get("kind") == "Workspace":
            annotations = (obj.get("metadata") or {}).get("annotations") or {}
            requested = (obj.get("spec") or {}).get("paused") and not (old.get("spec") or {}).get("paused")
            if requested and annotations.get(self.CHECKPOINT_STATE) not in ("Checkpointing", "Ready"):
                self.intercepted += 1
                patch = [
                    {"op": "replace", "path": "/spec/paused", "value": False},
                    {
                        "op": "add",
                        "path": "/metadata/annotations",
                        "value": {**annotations, self.CHECKPOINT_STATE: "Checkpointing"},
                    },
                ]
        elif obj.get("kind") == "Pod" and self.mutate_pods:
            self.pods_mutated += 1
            gates = [*((obj.get("spec") or {}).get("readinessGates") or []), {"conditionType": self.READINESS_GATE}]
            patch = [
                {"op": "add", "path": "/spec/runtimeClassName", "value": "gvisor"},
                {"op": "add", "path": "/spec/readinessGates", "value": gates},
            ]
        response: JSON = {"uid": request["uid"], "allowed": True}
        if patch:
            import base64

            response |= {"patchType": "JSONPatch", "patch": base64.b64encode(json.dumps(patch).encode()).decode()}
        return response

    def start(self) -> GKEWorkspacesAddOn:
        import base64
        import http.server
        import ssl

        addon = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                review = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                body = json.dumps(
                    {
                        "apiVersion": "admission.k8s.io/v1",
                        "kind": "AdmissionReview",
                        "response": addon.review(review["request"]),
                    }
                ).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(str(self.cert), str(self.key))
        self._server.socket = context.wrap_socket(self._server.socket, server_side=True)
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        url = f"https://127.0.0.1:{self._server.server_address[1]}"
        bundle = base64.b64encode(self.ca.cert_file.read_bytes()).decode()

        def hook(name: str, path: str, rule: JSON) -> JSON:
            return {
                "name": f"{name}.gke-workspaces.test",
                "clientConfig": {"url": f"{url}/{path}", "caBundle": bundle},
                "rules": [rule],
                "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": self.namespace}},
                "sideEffects": "None",
                "admissionReviewVersions": ["v1"],
                "failurePolicy": "Fail",
                "timeoutSeconds": 10,
            }

        configuration = {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "MutatingWebhookConfiguration",
            "metadata": {"name": self.name},
            "webhooks": [
                hook("workspaces", "workspaces", {
                    "apiGroups": [GROUP], "apiVersions": [WORKSPACE_VERSION], "operations": ["UPDATE"],
                    "resources": ["workspaces"], "scope": "Namespaced",
                }),
                hook("pods", "pods", {
                    "apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["pods"],
                    "scope": "Namespaced",
                }) | {"objectSelector": {"matchExpressions": [{"key": WORKSPACE_NAME_LABEL, "operator": "Exists"}]}},
            ],
        }  # fmt: skip
        self.cluster.kubectl("create", "--validate=strict", "-f", "-", input=json.dumps(configuration))
        return self

    def stop(self) -> None:
        self.cluster.kubectl("delete", "mutatingwebhookconfiguration", self.name, "--wait=false", check=False)
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
