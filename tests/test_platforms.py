"""Issue 18 ("Works on the real platforms"): what each platform's own API accepts, checked against the upstream
schemas and code (docs/platforms.md has the table and the sources).

Item 2, Kubeflow Notebooks v1: the sidecar arrives through Kubeflow's PodDefault, never as a native sidecar in the
Notebook (its CRD prunes or rejects ``initContainers[].restartPolicy``). The PodDefault is validated against the
upstream PodDefault CRD, and applied to a notebook pod the way Kubeflow's admission webhook applies it
(kubeflow/kubeflow components/admission-webhook/main.go ``applyPodDefaultsOnPod``: volumes to the pod, env and
volumeMounts into the containers already there, ``sidecars`` appended to ``containers``); the result is validated as
a Pod with strict field validation.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests import crd_schemas
from tests.test_manifests import DEPLOY, TOKEN_DIR, kustomize, validate_builtin

NOTEBOOK_OVERLAY = DEPLOY / "overlays" / "kubeflow-notebook"


def load(path: Path) -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load(path.read_text())
    return doc


def only(docs: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    (found,) = [d for d in docs if d["kind"] == kind]
    return found


def apply_poddefault(pod: dict[str, Any], poddefault: dict[str, Any]) -> dict[str, Any]:
    """What Kubeflow's webhook does with one matching PodDefault (the fields we use), on a copy."""
    pod, spec = copy.deepcopy(pod), poddefault["spec"]
    pod_spec = pod["spec"]
    pod_spec["volumes"] = [*pod_spec.get("volumes", []), *spec.get("volumes", [])]
    for field in ("serviceAccountName", "automountServiceAccountToken"):
        if field in spec:
            pod_spec[field] = spec[field]
    for container in pod_spec["containers"]:  # only those there before the sidecars
        container["env"] = [*container.get("env", []), *spec.get("env", [])]
        container["volumeMounts"] = [*container.get("volumeMounts", []), *spec.get("volumeMounts", [])]
    pod_spec["containers"] = [*pod_spec["containers"], *copy.deepcopy(spec.get("sidecars", []))]
    if spec.get("initContainers"):
        pod_spec["initContainers"] = [*pod_spec.get("initContainers", []), *spec["initContainers"]]
    return pod


def notebook_pod(notebook: dict[str, Any]) -> dict[str, Any]:
    """The pod the notebook controller makes from a Notebook: its spec.template.spec, the Notebook's own labels
    ("copy all of the Notebook labels to the pod including poddefault related labels", notebook_controller.go)."""
    template = notebook["spec"]["template"]
    labels = {**notebook["metadata"].get("labels", {}), "notebook-name": notebook["metadata"]["name"]}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"{notebook['metadata']['name']}-0", "labels": labels},
        "spec": copy.deepcopy(template["spec"]),
    }


def test_item2_the_poddefault_is_valid_for_kubeflows_crd_and_selects_the_example_notebook() -> None:
    docs = kustomize(NOTEBOOK_OVERLAY)
    poddefault = only(docs, "PodDefault")
    crd_schemas.validate(poddefault)
    notebook = load(NOTEBOOK_OVERLAY / "notebook-example.yaml")
    crd_schemas.validate(notebook)
    labels = notebook_pod(notebook)["metadata"]["labels"]
    assert poddefault["spec"]["selector"]["matchLabels"].items() <= labels.items()
    # The Notebook runs as the identity the overlay's RoleBinding binds, without an automounted token; the
    # PodDefault does not switch accounts (the token is mounted before any webhook runs: see poddefault.yaml).
    binding = only(docs, "RoleBinding")
    pod_spec = notebook["spec"]["template"]["spec"]
    assert {"kind": "ServiceAccount", "name": pod_spec["serviceAccountName"]}.items() <= binding["subjects"][0].items()
    assert pod_spec["automountServiceAccountToken"] is False
    assert "serviceAccountName" not in poddefault["spec"]
    assert "automountServiceAccountToken" not in poddefault["spec"]
    # The platform config the notebook reads is rendered, in the same namespace.
    (config,) = [d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"] == "jupyter-suspend-platform"]
    assert 'c.SuspendApp.backend = "kubeflow-notebook"' in config["data"]["jupyter_server_config.py"]
    assert config["metadata"]["namespace"] == poddefault["metadata"]["namespace"]


def test_item2_the_notebook_crd_rejects_a_native_sidecar_and_nothing_of_ours_has_one() -> None:
    """The finding itself: Kubeflow's Notebook pod template has no initContainers[].restartPolicy."""
    notebook = load(NOTEBOOK_OVERLAY / "notebook-example.yaml")
    native = copy.deepcopy(notebook)
    native["spec"]["template"]["spec"]["initContainers"] = [
        {"name": "sidecar", "image": "x", "restartPolicy": "Always"}
    ]
    assert any("restartPolicy" in e for e in crd_schemas.errors(native)), crd_schemas.errors(native)
    for path in sorted(NOTEBOOK_OVERLAY.glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            for container in (doc or {}).get("spec", {}).get("initContainers", []) or []:
                assert "restartPolicy" not in container, path


def test_item2_the_pod_kubeflow_makes_has_an_ordinary_sidecar_and_the_token_only_there() -> None:
    poddefault = only(kustomize(NOTEBOOK_OVERLAY), "PodDefault")
    pod = apply_poddefault(notebook_pod(load(NOTEBOOK_OVERLAY / "notebook-example.yaml")), poddefault)
    validate_builtin(pod)  # a real Pod, strict field validation
    spec = pod["spec"]
    assert "initContainers" not in spec
    notebook, sidecar = spec["containers"]
    assert (notebook["name"], sidecar["name"]) == ("notebook", "jupyter-suspend-sidecar")
    assert sidecar["args"] == ["--workload", "notebook"]
    assert spec["automountServiceAccountToken"] is False
    token = {m["mountPath"]: m["name"] for m in sidecar["volumeMounts"]}
    assert token[TOKEN_DIR] == "sidecar-token"
    assert all(m["name"] != "sidecar-token" for m in notebook["volumeMounts"])
    # Both ends of the socket see the same in-memory directory; the notebook finds the socket and its config.
    shared = {m["name"] for m in notebook["volumeMounts"]} & {m["name"] for m in sidecar["volumeMounts"]}
    assert shared == {"suspend-run"}
    env = {e["name"]: e.get("value") for e in notebook["env"]}
    assert env["JUPYTER_SUSPEND_SIDECAR_SOCKET"] == "/var/run/jupyter-suspend/sidecar.sock"
    assert env["JUPYTER_CONFIG_PATH"] == "/etc/jupyter-suspend-platform"
    # The image's own command and args stay (Kubeflow's images start Jupyter themselves).
    assert "command" not in notebook
    assert "args" not in notebook


@pytest.mark.parametrize("clash", ["env", "volumeMounts"])
def test_item2_the_poddefault_fields_go_only_where_the_webhook_puts_them(clash: str) -> None:
    """env / volumeMounts are the pod's existing containers'; the sidecar carries its own (else a conflict)."""
    poddefault = only(kustomize(NOTEBOOK_OVERLAY), "PodDefault")
    names = {item["name"] for item in poddefault["spec"][clash]}
    sidecar = poddefault["spec"]["sidecars"][0]
    own = {item["name"] for item in sidecar.get(clash, [])}
    if clash == "env":
        assert not names & own  # no variable is set twice in the sidecar
    else:
        assert names & own == {"suspend-run"}  # same name, same path: the webhook finds no conflict
        assert {m["mountPath"] for m in sidecar[clash] if m["name"] == "suspend-run"} == {
            m["mountPath"] for m in poddefault["spec"][clash] if m["name"] == "suspend-run"
        }


# -- item 1: Kubeflow Workspaces (v2) ------------------------------------------------------------------------------

WORKSPACE_OVERLAY = DEPLOY / "overlays" / "kubeflow-workspace"


def test_item1_a_workspacekind_opts_its_pods_in_through_pod_metadata_only() -> None:
    from jupyter_suspend.injector.mutation import OPT_IN_LABEL

    kind = load(WORKSPACE_OVERLAY / "workspacekind-example.yaml")
    crd_schemas.validate(kind)  # kubeflow/notebooks notebooks-v2's WorkspaceKind CRD, strict
    template = kind["spec"]["podTemplate"]
    assert template["podMetadata"]["labels"] == {OPT_IN_LABEL: "true"}
    # The finding itself: a WorkspaceKind has no place for a container (nor args, nor a ServiceAccount name).
    for field in ("containers", "initContainers", "args", "serviceAccountName"):
        broken = copy.deepcopy(kind)
        broken["spec"]["podTemplate"][field] = [] if field != "serviceAccountName" else "x"
        assert any(field in e for e in crd_schemas.errors(broken)), field
    # The injector's webhook selects exactly that label.
    (webhook_config,) = [d for d in kustomize(DEPLOY / "injector") if d["kind"] == "MutatingWebhookConfiguration"]
    assert webhook_config["webhooks"][0]["objectSelector"] == {"matchLabels": {OPT_IN_LABEL: "true"}}


def test_item1_the_workspace_overlay_binds_the_workspaces_own_account_and_renders_what_the_injector_mounts() -> None:
    from jupyter_suspend.injector.mutation import InjectorConfig

    docs = kustomize(WORKSPACE_OVERLAY)
    assert {d["kind"] for d in docs} == {"Role", "RoleBinding", "ConfigMap"}
    binding = only(docs, "RoleBinding")
    # kubeflow/notebooks notebooks-v2 workspace_controller.go: the pod runs as "ws-<workspace>".
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "ws-research"}]
    defaults = InjectorConfig(image="x")
    config_maps = {d["metadata"]["name"]: d for d in docs if d["kind"] == "ConfigMap"}
    assert set(config_maps) == {defaults.jupyter_config_map, defaults.platform_config_map}
    platform = config_maps[defaults.platform_config_map]["data"]["jupyter_server_config.py"]
    assert 'c.SuspendApp.backend = "kubeflow-workspace"' in platform
    for doc in docs:
        validate_builtin(doc)
