"""What the injector does to one pod: an AdmissionReview ``v1`` request in, its response (a JSONPatch) out.

Only a pod that opts in by label (:data:`OPT_IN_LABEL`; the MutatingWebhookConfiguration's ``objectSelector`` says
the same, this is the second line) on CREATE is changed. A pod that already has the sidecar is left alone, so
a second call (``reinvocationPolicy: IfNeeded``, another webhook, a retry) changes nothing. What is added:

* the sidecar container (an ordinary container: GKE restores a pod's containers from the snapshot; whether a
  native sidecar -- a restartable init container -- is restored the same way no public source says);
* the sidecar's token as a projected volume mounted in the sidecar alone, and ``automountServiceAccountToken:
  false`` with the automatically added ``kube-api-access-*`` volume taken out again (Kubernetes' ServiceAccount
  admission plugin adds it before any webhook runs), so user code in the notebook holds no token;
* the socket directory (an in-memory emptyDir, inside the snapshot), shared by both containers;
* into the notebook container: the socket path, the pod identity (downward API env and ``/etc/podinfo/uid``)
  and the server's configuration by ``JUPYTER_CONFIG_PATH`` (a ConfigMap). Configuration and not arguments: the
  Workspace controller starts the image's own command, and arguments would replace it.

Anything the injector cannot do cleanly (no notebook container, a volume name already taken by something else)
leaves the pod as it is but for the annotation :data:`SKIPPED_ANNOTATION` saying why, and a warning the API
server returns to the creator: the pod starts (``failurePolicy: Ignore`` has the same effect when the injector
is down), and the notebook's status and dry run say that the sidecar is missing.
"""

from __future__ import annotations

import base64
import copy
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

JSON = dict[str, Any]

OPT_IN_LABEL = "jupyter-suspend.io/inject"
OPT_IN_VALUE = "true"
INJECTED_ANNOTATION = "jupyter-suspend.io/injected"
SKIPPED_ANNOTATION = "jupyter-suspend.io/injection-skipped"
SIDECAR_NAME = "jupyter-suspend-sidecar"

SOCKET_DIR = "/var/run/jupyter-suspend"
TOKEN_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
CONFIG_DIR = "/etc/jupyter-suspend"
PLATFORM_CONFIG_DIR = "/etc/jupyter-suspend-platform"
PODINFO_DIR = "/etc/podinfo"
RUNTIME_DIR = "/var/run/jupyter-runtime"

#: The volumes the injector owns, by name.
VOLUME_SOCKET = "jupyter-suspend-run"
VOLUME_TOKEN = "jupyter-suspend-token"
VOLUME_CONFIG = "jupyter-suspend-config"
VOLUME_PLATFORM = "jupyter-suspend-platform"
VOLUME_PODINFO = "jupyter-suspend-podinfo"
VOLUME_RUNTIME = "jupyter-suspend-runtime"

DOWNWARD = {"POD_NAME": "metadata.name", "POD_NAMESPACE": "metadata.namespace", "POD_UID": "metadata.uid"}


@dataclass(frozen=True)
class InjectorConfig:
    """What to inject; every field is a command-line flag of :mod:`.server`."""

    image: str
    #: The sidecar's arguments (e.g. ``--workload workspace``).
    sidecar_args: tuple[str, ...] = ("--workload", "workspace")
    #: The notebook container by name; empty: the pod's first container (Kubeflow Workspaces: ``main``).
    container: str = ""
    #: ConfigMap with the Jupyter settings snapshots need (ipc kernels, poll selector; deploy/jupyter).
    jupyter_config_map: str = "jupyter-suspend-jupyter-config"
    #: ConfigMap with the platform's server configuration (the backend); empty: none.
    platform_config_map: str = "jupyter-suspend-platform"
    #: Replace the pod's ServiceAccount (empty: keep the one the platform chose, e.g. ``ws-<name>``).
    service_account: str = ""
    token_seconds: int = 3600
    sidecar_resources: JSON = field(
        default_factory=lambda: {
            "requests": {"cpu": "50m", "memory": "96Mi"},
            "limits": {"cpu": "250m", "memory": "192Mi"},
        }
    )


class BadReview(ValueError):
    """The request is not an AdmissionReview v1 this webhook can answer (HTTP 400)."""


def _map(value: Any) -> JSON:
    return value if isinstance(value, dict) else {}


def read_review(body: Any) -> JSON:
    """The ``request`` of an AdmissionReview v1, checked; :class:`BadReview` otherwise."""
    if not isinstance(body, dict):
        raise BadReview("the body must be a JSON object (an AdmissionReview)")
    if body.get("apiVersion") != "admission.k8s.io/v1" or body.get("kind") != "AdmissionReview":
        raise BadReview("only admission.k8s.io/v1 AdmissionReview is accepted (admissionReviewVersions: [v1])")
    request = body.get("request")
    if not isinstance(request, dict):
        raise BadReview("the AdmissionReview has no request")
    uid = request.get("uid")
    if not isinstance(uid, str) or not uid or len(uid) > 128:
        raise BadReview("request.uid must be a non-empty string")
    return request


def _response(uid: str, patch: list[JSON] | None = None, warnings: list[str] | None = None) -> JSON:
    response: JSON = {"uid": uid, "allowed": True}
    if patch:
        response["patchType"] = "JSONPatch"
        response["patch"] = base64.b64encode(json.dumps(patch).encode()).decode()
    if warnings:
        response["warnings"] = warnings
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response}


def _is_pod_create(request: Mapping[str, Any]) -> bool:
    kind = _map(request.get("kind"))
    return (
        request.get("operation") == "CREATE"
        and kind.get("group", "") == ""
        and kind.get("kind") == "Pod"
        and isinstance(request.get("object"), dict)
    )


def has_sidecar(pod: Mapping[str, Any]) -> bool:
    spec = _map(pod.get("spec"))
    containers = [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]
    return any(_map(c).get("name") == SIDECAR_NAME for c in containers)


def opted_in(pod: Mapping[str, Any]) -> bool:
    labels = _map(_map(pod.get("metadata")).get("labels"))
    return labels.get(OPT_IN_LABEL) == OPT_IN_VALUE


def review(body: Any, config: InjectorConfig) -> JSON:
    """The whole answer to one AdmissionReview: allowed always (this webhook never blocks a pod); a patch when the
    pod opted in and has no sidecar yet."""
    request = read_review(body)
    uid = str(request["uid"])
    if not _is_pod_create(request):
        return _response(uid)
    pod: JSON = request["object"]
    if not opted_in(pod) or has_sidecar(pod):
        return _response(uid)
    try:
        mutated = inject(pod, config)
    except (TypeError, AttributeError, KeyError, ValueError) as exc:  # a pod no API server would send
        return _response(uid, warnings=[f"jupyter-suspend-injector did not add the sidecar: malformed pod ({exc})"])
    except CannotInject as exc:
        note = f"jupyter-suspend-injector did not add the sidecar: {exc}"
        annotations = {**_map(_map(pod.get("metadata")).get("annotations")), SKIPPED_ANNOTATION: str(exc)}
        return _response(uid, [{"op": "add", "path": "/metadata/annotations", "value": annotations}], [note])
    return _response(uid, field_patch(pod, mutated))


class CannotInject(Exception):
    """The pod cannot take the sidecar as it is; the message is the reason (annotated on the pod)."""


def _sidecar(config: InjectorConfig) -> JSON:
    return {
        "name": SIDECAR_NAME,
        "image": config.image,
        "command": ["jupyter-suspend-sidecar"],
        "args": list(config.sidecar_args),
        "env": [{"name": k, "valueFrom": {"fieldRef": {"fieldPath": v}}} for k, v in DOWNWARD.items()],
        "resources": copy.deepcopy(config.sidecar_resources),
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "runAsNonRoot": True,
            "capabilities": {"drop": ["ALL"]},
        },
        "volumeMounts": [
            {"name": VOLUME_SOCKET, "mountPath": SOCKET_DIR},
            {"name": VOLUME_TOKEN, "mountPath": TOKEN_DIR, "readOnly": True},
        ],
    }


def _volumes(config: InjectorConfig) -> list[JSON]:
    volumes: list[JSON] = [
        {"name": VOLUME_SOCKET, "emptyDir": {"medium": "Memory", "sizeLimit": "1Mi"}},
        {"name": VOLUME_RUNTIME, "emptyDir": {"medium": "Memory", "sizeLimit": "16Mi"}},
        {
            "name": VOLUME_TOKEN,
            "projected": {
                "sources": [
                    {"serviceAccountToken": {"path": "token", "expirationSeconds": config.token_seconds}},
                    {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
                    {
                        "downwardAPI": {
                            "items": [{"path": "namespace", "fieldRef": {"fieldPath": "metadata.namespace"}}]
                        }
                    },
                ]
            },
        },
        {
            "name": VOLUME_PODINFO,
            "downwardAPI": {"items": [{"path": "uid", "fieldRef": {"fieldPath": "metadata.uid"}}]},
        },
        {"name": VOLUME_CONFIG, "configMap": {"name": config.jupyter_config_map}},
    ]
    if config.platform_config_map:
        volumes.append({"name": VOLUME_PLATFORM, "configMap": {"name": config.platform_config_map}})
    return volumes


def _is_automounted_token(volume: Mapping[str, Any]) -> bool:
    """The volume Kubernetes' ServiceAccount admission plugin adds (``kube-api-access-<random>``)."""
    sources = _map(volume.get("projected")).get("sources") or []
    return str(volume.get("name", "")).startswith("kube-api-access-") and any(
        isinstance(s, dict) and "serviceAccountToken" in s for s in sources
    )


def inject(pod: JSON, config: InjectorConfig) -> JSON:
    """A copy of ``pod`` with the sidecar; :class:`CannotInject` when it cannot take it cleanly."""
    out = copy.deepcopy(pod)
    spec = out.setdefault("spec", {})
    containers = spec.get("containers")
    if not isinstance(containers, list) or not containers or not all(isinstance(c, dict) for c in containers):
        raise CannotInject("the pod has no containers")
    if config.container:
        notebook = next((c for c in containers if c.get("name") == config.container), None)
        if notebook is None:
            raise CannotInject(f"the pod has no container named {config.container!r}")
    else:
        notebook = containers[0]

    dropped = {v.get("name") for v in spec.get("volumes") or [] if isinstance(v, dict) and _is_automounted_token(v)}
    volumes = [v for v in spec.get("volumes") or [] if not (isinstance(v, dict) and v.get("name") in dropped)]
    taken = {str(v.get("name")) for v in volumes if isinstance(v, dict)}
    ours = _volumes(config)
    clash = sorted(taken & {str(v["name"]) for v in ours})
    if clash:
        raise CannotInject(f"the pod already has volumes named {', '.join(clash)}")
    spec["volumes"] = [*volumes, *ours]
    for container in [*(spec.get("initContainers") or []), *containers]:
        if isinstance(container, dict) and container.get("volumeMounts"):
            container["volumeMounts"] = [m for m in container["volumeMounts"] if _map(m).get("name") not in dropped]
            if not container["volumeMounts"]:
                del container["volumeMounts"]

    mounts = notebook.setdefault("volumeMounts", [])
    paths = {_map(m).get("mountPath") for m in mounts}
    wanted: list[JSON] = [
        {"name": VOLUME_SOCKET, "mountPath": SOCKET_DIR},
        {"name": VOLUME_RUNTIME, "mountPath": RUNTIME_DIR},
        {"name": VOLUME_PODINFO, "mountPath": PODINFO_DIR, "readOnly": True},
        {"name": VOLUME_CONFIG, "mountPath": CONFIG_DIR, "readOnly": True},
    ]
    if config.platform_config_map:
        wanted.append({"name": VOLUME_PLATFORM, "mountPath": PLATFORM_CONFIG_DIR, "readOnly": True})
    busy = sorted(str(m["mountPath"]) for m in wanted if m["mountPath"] in paths)
    if busy:
        raise CannotInject(f"the notebook container already mounts {', '.join(busy)}")
    mounts.extend(wanted)

    env = notebook.setdefault("env", [])
    named = {_map(e).get("name"): e for e in env}
    config_path = f"{PLATFORM_CONFIG_DIR}:{CONFIG_DIR}" if config.platform_config_map else CONFIG_DIR
    if "JUPYTER_CONFIG_PATH" in named:
        existing = _map(named["JUPYTER_CONFIG_PATH"])
        if "value" not in existing:
            raise CannotInject("the notebook container sets JUPYTER_CONFIG_PATH from a reference")
        existing["value"] = f"{config_path}:{existing['value']}" if existing["value"] else config_path
    else:
        env.append({"name": "JUPYTER_CONFIG_PATH", "value": config_path})
    for name, value in (
        ("JUPYTER_SUSPEND_SIDECAR_SOCKET", f"{SOCKET_DIR}/sidecar.sock"),
        ("JUPYTER_RUNTIME_DIR", RUNTIME_DIR),
    ):
        if name not in named:
            env.append({"name": name, "value": value})
    for name, path in DOWNWARD.items():
        if name not in named:
            env.append({"name": name, "valueFrom": {"fieldRef": {"fieldPath": path}}})

    containers.append(_sidecar(config))
    spec["automountServiceAccountToken"] = False
    if config.service_account:
        spec["serviceAccountName"] = config.service_account
        spec.pop("serviceAccount", None)  # the deprecated alias must not disagree
    meta = out.setdefault("metadata", {})
    meta["annotations"] = {**_map(meta.get("annotations")), INJECTED_ANNOTATION: SIDECAR_NAME}
    return out


#: The fields :func:`inject` may change, as JSON pointers (each replaced whole: simple, and exact for the
#: object the API server sent).
PATCHED = (
    ("metadata", "annotations"),
    ("spec", "volumes"),
    ("spec", "containers"),
    ("spec", "initContainers"),
    ("spec", "automountServiceAccountToken"),
    ("spec", "serviceAccountName"),
    ("spec", "serviceAccount"),
)


def field_patch(before: JSON, after: JSON) -> list[JSON]:
    """A JSONPatch (RFC 6902) turning ``before`` into ``after`` on the :data:`PATCHED` fields."""
    ops: list[JSON] = []
    created: set[str] = set()
    for parent, name in PATCHED:
        old, new = _map(before.get(parent)), _map(after.get(parent))
        path = f"/{parent}/{name}"
        if name in new and (name not in old or old[name] != new[name]):
            if parent not in before and parent not in created:
                ops.append({"op": "add", "path": f"/{parent}", "value": {}})
                created.add(parent)
            ops.append({"op": "add", "path": path, "value": new[name]})  # add replaces an existing member
        elif name in old and name not in new:
            ops.append({"op": "remove", "path": path})
    return ops
