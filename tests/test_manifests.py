"""The Kubernetes manifests in deploy/, checked offline.

Each kustomization is rendered by a small kustomize of our own (`kustomize()`
below: resources, configMapGenerator without name hashes, strategic-merge
patches, namespace, images; anything else in a kustomization makes it fail
loudly). Where `kubectl kustomize` is installed, a test checks that the real
kustomize renders the same documents.

Built-in kinds are validated with the Kubernetes JSON schemas shipped inside
`kubernetes-validate` (strict: unknown fields fail); `podsnapshot.gke.io`
documents against the schemas in tests/manifest_schemas/, written from
docs/platform-facts.md section 1. The rest are structural checks of the
contract between the notebook, the sidecar and GKE.
"""

from __future__ import annotations

import asyncio
import copy
import json
import os
import re
import selectors
import shutil
import subprocess
import sys
import tempfile
import textwrap
import uuid
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml
from traitlets.config import Config

from tests import crd_schemas

Doc = dict[str, Any]

REPO = Path(__file__).resolve().parent.parent
DEPLOY = REPO / "deploy"
SCHEMAS = Path(__file__).resolve().parent / "manifest_schemas"
JUPYTER_CONFIG = DEPLOY / "jupyter" / "jupyter_server_config.py"
GKE_DOC = REPO / "docs" / "gke.md"

# The oldest Kubernetes minor GKE Pod Snapshots run on (GKE documents
# 1.34.1-gke.3084001 as the first version); fields newer than that must fail.
K8S_VERSION = "1.34"
NAMESPACE = "jupyter-suspend-example"
IMAGE = "ghcr.io/example/jupyter-suspend"
SOCKET_DIR = "/var/run/jupyter-suspend"
SOCKET = f"{SOCKET_DIR}/sidecar.sock"
TOKEN_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
SIDECAR_SA = "jupyter-suspend-sidecar"
POLICY_NAME = "notebook-snapshots"
NOTEBOOK_LABELS = {"app.kubernetes.io/name": "jupyter-suspend-notebook"}
DOWNWARD_ENV = {"POD_NAME": "metadata.name", "POD_NAMESPACE": "metadata.namespace", "POD_UID": "metadata.uid"}
SNAPSHOT_GROUP = "podsnapshot.gke.io"
SNAPSHOT_SCHEMAS = {
    "PodSnapshotStorageConfig": "podsnapshotstorageconfig.json",
    "PodSnapshotPolicy": "podsnapshotpolicy.json",
    "PodSnapshotManualTrigger": "podsnapshotmanualtrigger.json",
}
KUSTOMIZATIONS = {"base": DEPLOY / "base", "cpu": DEPLOY / "overlays" / "cpu", "admin": DEPLOY / "admin"}
# The sidecar's RBAC for Kubeflow (the pod comes from the Notebook / WorkspaceKind): tests/test_kubeflow_backends.py
# checks that each Role equals the calls the sidecar makes.
KUSTOMIZATIONS |= {f"kubeflow-{k}": DEPLOY / "overlays" / f"kubeflow-{k}" for k in ("notebook", "workspace")}
# The releaser (`jupyter suspend release --watch`): tests/test_cli_release.py checks its Role against its calls.
KUSTOMIZATIONS["releaser"] = DEPLOY / "releaser"
RELEASER = "jupyter-suspend-releaser"

# ---------------------------------------------------------------------------
# A small kustomize: just what deploy/ uses, the rest refused.
# ---------------------------------------------------------------------------

SUPPORTED_FIELDS = {
    "apiVersion",
    "kind",
    "resources",
    "configMapGenerator",
    "generatorOptions",
    "patches",
    "namespace",
    "images",
}
# Built-in cluster-scoped kinds kustomize knows (it treats unknown kinds as namespaced).
CLUSTER_SCOPED = {
    "Namespace",
    "ClusterRole",
    "ClusterRoleBinding",
    "CustomResourceDefinition",
    "PersistentVolume",
    "StorageClass",
    "RuntimeClass",
    "PriorityClass",
}
# Strategic merge: lists merged by key (Kubernetes' patchMergeKey); other lists are replaced.
MERGE_KEYS = {
    "containers": "name",
    "initContainers": "name",
    "volumes": "name",
    "env": "name",
    "volumeMounts": "mountPath",
}


def kustomize(directory: Path) -> list[Doc]:
    """The documents `kubectl kustomize DIRECTORY` prints, for what deploy/ uses."""
    kustomization = yaml.safe_load((directory / "kustomization.yaml").read_text())
    unsupported = set(kustomization) - SUPPORTED_FIELDS
    if unsupported:
        raise NotImplementedError(f"{directory}: kustomization fields {sorted(unsupported)}")
    docs: list[Doc] = []
    for entry in kustomization.get("resources", []):
        path = directory / entry
        if path.is_dir():
            docs.extend(kustomize(path))
        else:
            docs.extend(doc for doc in yaml.safe_load_all(path.read_text()) if doc)
    docs.extend(_generate_configmaps(directory, kustomization))
    for patch in kustomization.get("patches", []):
        _apply_patch(docs, directory, patch)
    if "namespace" in kustomization:
        _set_namespace(docs, kustomization["namespace"])
    for image in kustomization.get("images", []):
        _set_image(docs, image)
    return docs


def _generate_configmaps(directory: Path, kustomization: Doc) -> list[Doc]:
    options = kustomization.get("generatorOptions", {})
    generated = []
    for generator in kustomization.get("configMapGenerator", []):
        if not options.get("disableNameSuffixHash"):
            raise NotImplementedError("configMapGenerator with a name hash")
        if set(generator) - {"name", "files", "literals"}:
            raise NotImplementedError(f"configMapGenerator fields {sorted(generator)}")
        data: dict[str, str] = {}
        for entry in generator.get("files", []):
            key, _, source = entry.rpartition("=") if "=" in entry else ("", "", entry)
            data[key or Path(source).name] = (directory / source).read_text()
        for literal in generator.get("literals", []):
            key, _, value = literal.partition("=")
            data[key] = value
        metadata: Doc = {"name": generator["name"]}
        if options.get("labels"):
            metadata["labels"] = dict(options["labels"])
        generated.append({"apiVersion": "v1", "kind": "ConfigMap", "metadata": metadata, "data": data})
    return generated


def strategic_merge(base: Any, patch: Any) -> Any:
    """Kubernetes strategic merge for our own patches: maps merge, `null` deletes a
    key, lists in MERGE_KEYS merge by key, other lists are replaced."""
    if not (isinstance(base, dict) and isinstance(patch, dict)):
        return copy.deepcopy(patch)
    merged = copy.deepcopy(base)
    for key, value in patch.items():
        if key.startswith("$"):
            raise NotImplementedError(f"patch directive {key}")
        if value is None:
            merged.pop(key, None)
        elif key in MERGE_KEYS and isinstance(value, list) and isinstance(merged.get(key), list):
            merge_key = MERGE_KEYS[key]
            items = merged[key]
            for item in value:
                match = [i for i, old in enumerate(items) if old.get(merge_key) == item[merge_key]]
                if match:
                    items[match[0]] = strategic_merge(items[match[0]], item)
                else:
                    items.append(strategic_merge({}, item))
        elif isinstance(value, dict):
            merged[key] = strategic_merge(merged.get(key, {}), value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged


def _apply_patch(docs: list[Doc], directory: Path, patch: Doc) -> None:
    if set(patch) == {"target", "patch"}:
        _apply_json_patch(docs, patch["target"], yaml.safe_load(patch["patch"]))
        return
    if set(patch) != {"path"}:
        raise NotImplementedError(f"patch {patch}: a strategic merge patch file, or an inline JSON patch with a target")
    bodies = [b for b in yaml.safe_load_all((directory / patch["path"]).read_text()) if b]
    for body in bodies:
        _apply_patch_document(docs, patch["path"], body)


def _apply_patch_document(docs: list[Doc], path: str, body: Doc) -> None:
    targets = [
        i
        for i, doc in enumerate(docs)
        if (doc["apiVersion"], doc["kind"], doc["metadata"]["name"])
        == (body["apiVersion"], body["kind"], body["metadata"]["name"])
    ]
    if len(targets) != 1:
        raise ValueError(f"patch {path} matches {len(targets)} documents")
    if body.get("$patch") == "delete":  # kustomize: the document goes
        del docs[targets[0]]
        return
    docs[targets[0]] = strategic_merge(docs[targets[0]], body)


def _apply_json_patch(docs: list[Doc], target: Doc, operations: list[Doc]) -> None:
    """RFC 6902 `test`, `add`, `replace`, `remove` on the one document the target names."""
    if set(target) - {"group", "version", "kind", "name"}:
        raise NotImplementedError(f"patch target {target}")
    api_version = f"{target['group']}/{target['version']}" if target.get("group") else target.get("version")
    matches = [
        d
        for d in docs
        if d["kind"] == target["kind"]
        and d["metadata"]["name"] == target["name"]
        and (api_version is None or d["apiVersion"] == api_version)
    ]
    if len(matches) != 1:
        raise ValueError(f"patch target {target} matches {len(matches)} documents")
    doc = matches[0]
    for operation in operations:
        *parents, last = [p.replace("~1", "/").replace("~0", "~") for p in operation["path"].split("/")[1:]]
        node: Any = doc
        for part in parents:
            node = node[int(part)] if isinstance(node, list) else node[part]
        key: Any = int(last) if isinstance(node, list) and last != "-" else last
        op = operation["op"]
        if op == "test":
            if node[key] != operation["value"]:
                raise ValueError(f"JSON patch test failed at {operation['path']}: {node[key]!r}")
        elif op == "add" and isinstance(node, list):
            node.insert(len(node) if key == "-" else key, copy.deepcopy(operation["value"]))
        elif op in ("add", "replace"):
            if op == "replace" and key not in (range(len(node)) if isinstance(node, list) else node):
                raise ValueError(f"JSON patch replace of a missing member {operation['path']}")
            node[key] = copy.deepcopy(operation["value"])
        elif op == "remove":
            del node[key]
        else:
            raise NotImplementedError(f"JSON patch op {op}")


def _set_namespace(docs: list[Doc], namespace: str) -> None:
    # ServiceAccount subjects of role bindings follow their ServiceAccount (kustomize's rule).
    accounts = {(d["metadata"]["name"], d["metadata"].get("namespace")) for d in docs if d["kind"] == "ServiceAccount"}
    for doc in docs:
        if doc["kind"] == "Namespace":
            doc["metadata"]["name"] = namespace
        elif doc["kind"] not in CLUSTER_SCOPED:
            doc["metadata"]["namespace"] = namespace
        if doc["kind"] in ("RoleBinding", "ClusterRoleBinding"):
            for subject in doc.get("subjects", []):
                if subject.get("kind") == "ServiceAccount" and (subject["name"], subject.get("namespace")) in accounts:
                    subject["namespace"] = namespace


def _split_image(image: str) -> tuple[str, str]:
    """`name`, and what follows it (`:tag`, `@digest` or both)."""
    name, at, digest = image.partition("@")
    slash = name.rfind("/")
    colon = name.rfind(":")
    if colon > slash:
        return name[:colon], name[colon:] + at + digest
    return name, at + digest


def _set_image(docs: list[Doc], rule: Doc) -> None:
    for container in (c for doc in docs for c in _pod_containers(doc)):
        name, suffix = _split_image(container["image"])
        if name != rule["name"]:
            continue
        if "digest" in rule:
            suffix = "@" + rule["digest"]
        elif "newTag" in rule:
            suffix = ":" + str(rule["newTag"])
        container["image"] = rule.get("newName", name) + suffix


def _pod_containers(doc: Doc) -> list[Doc]:
    spec = doc.get("spec", {}).get("template", {}).get("spec", {})
    return [*spec.get("initContainers", []), *spec.get("containers", [])]


# ---------------------------------------------------------------------------
# Fixtures and helpers
# ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def rendered() -> dict[str, list[Doc]]:
    return {name: kustomize(path) for name, path in KUSTOMIZATIONS.items()}


def only(docs: list[Doc], kind: str, name: str | None = None) -> Doc:
    found = [d for d in docs if d["kind"] == kind and (name is None or d["metadata"]["name"] == name)]
    assert len(found) == 1, f"expected one {kind} {name or ''}, found {len(found)}"
    return found[0]


def pod_spec(docs: list[Doc]) -> Doc:
    spec: Doc = only(docs, "StatefulSet", "notebook")["spec"]["template"]["spec"]
    return spec


def sidecar(docs: list[Doc]) -> Doc:
    (found,) = [c for c in pod_spec(docs).get("initContainers", []) if c["name"] == "sidecar"]
    return found


def notebook(docs: list[Doc]) -> Doc:
    (found,) = [c for c in pod_spec(docs)["containers"] if c["name"] == "notebook"]
    return found


def mounts(container: Doc) -> dict[str, Doc]:
    return {m["mountPath"]: m for m in container.get("volumeMounts", [])}


def volumes(docs: list[Doc]) -> dict[str, Doc]:
    return {v["name"]: v for v in pod_spec(docs).get("volumes", [])}


def env(container: Doc) -> dict[str, Doc]:
    return {e["name"]: e for e in container.get("env", [])}


def snapshot_schema(kind: str) -> Doc:
    assert kind in SNAPSHOT_SCHEMAS, f"no schema for {SNAPSHOT_GROUP} kind {kind}"
    schema: Doc = json.loads((SCHEMAS / SNAPSHOT_SCHEMAS[kind]).read_text())
    return schema


def validate_snapshot_doc(doc: Doc) -> None:
    schema = snapshot_schema(doc["kind"])
    jsonschema.Draft202012Validator.check_schema(schema)
    jsonschema.Draft202012Validator(schema).validate(doc)


def validate_builtin(doc: Doc, version: str = K8S_VERSION) -> None:
    try:
        kubernetes_validate.validate(doc, version, strict=True)
    except kubernetes_validate.ValidationError as e:
        where = "/".join(str(p) for p in e.absolute_path)
        raise AssertionError(f"{doc['kind']}/{doc['metadata'].get('name')} at /{where}: {e.message}") from None


# ---------------------------------------------------------------------------
# Rendering
# ---------------------------------------------------------------------------


def test_base_lists_the_role_file_and_it_exists() -> None:
    resources = yaml.safe_load((DEPLOY / "base" / "kustomization.yaml").read_text())["resources"]
    assert "role.yaml" in resources
    assert (DEPLOY / "base" / "role.yaml").is_file()


def test_base_renders_the_expected_objects_in_one_namespace(rendered: dict[str, list[Doc]]) -> None:
    docs = rendered["base"]
    kinds = sorted((d["kind"], d["metadata"]["name"]) for d in docs)
    assert kinds == sorted(
        [
            ("ConfigMap", "jupyter-suspend-jupyter-config"),
            ("Namespace", NAMESPACE),
            ("PodSnapshotPolicy", POLICY_NAME),
            ("Role", SIDECAR_SA),
            ("RoleBinding", SIDECAR_SA),
            ("Service", "notebook"),
            ("ServiceAccount", SIDECAR_SA),
            ("StatefulSet", "notebook"),
        ]
    )
    for doc in docs:
        if doc["kind"] != "Namespace":
            assert doc["metadata"]["namespace"] == NAMESPACE, doc["kind"]
    # The admin kustomization is cluster-scoped only.
    assert [(d["kind"], d["metadata"].get("namespace")) for d in rendered["admin"]] == [
        ("PodSnapshotStorageConfig", None)
    ]


def _kubectl_kustomize(path: Path) -> list[Doc] | None:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        return None
    result = subprocess.run([kubectl, "kustomize", str(path)], capture_output=True, text=True, timeout=60, check=False)
    if result.returncode != 0 and "unknown command" in result.stderr:
        return None
    assert result.returncode == 0, result.stderr
    return [d for d in yaml.safe_load_all(result.stdout) if d]


@pytest.mark.parametrize("name", sorted(KUSTOMIZATIONS))
def test_our_renderer_agrees_with_kubectl_kustomize(name: str, rendered: dict[str, list[Doc]]) -> None:
    real = _kubectl_kustomize(KUSTOMIZATIONS[name])
    if real is None:
        pytest.skip("kubectl with kustomize is not installed")

    def key(doc: Doc) -> str:
        return json.dumps([doc["kind"], doc["metadata"].get("namespace"), doc["metadata"]["name"]])

    assert {key(d): d for d in real} == {key(d): d for d in rendered[name]}


def test_an_images_entry_reaches_the_notebook_and_the_sidecar(tmp_path: Path) -> None:
    (tmp_path / "kustomization.yaml").write_text(
        textwrap.dedent(f"""\
            resources: [{DEPLOY / "base"}]
            images:
              - name: {IMAGE}
                newName: registry.example.org/team/jupyter-suspend
                digest: sha256:{"0" * 64}
            """)
    )
    docs = kustomize(tmp_path)
    expected = f"registry.example.org/team/jupyter-suspend@sha256:{'0' * 64}"
    assert sidecar(docs)["image"] == notebook(docs)["image"] == expected


# ---------------------------------------------------------------------------
# Schemas
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(KUSTOMIZATIONS))
def test_every_document_is_valid(name: str, rendered: dict[str, list[Doc]]) -> None:
    for doc in rendered[name]:
        if doc["apiVersion"].split("/")[0] == SNAPSHOT_GROUP:
            validate_snapshot_doc(doc)
        elif crd_schemas.has_schema(doc):  # Kubeflow's PodDefault, Notebook: their upstream CRD schemas
            crd_schemas.validate(doc)
        else:
            validate_builtin(doc)


def test_strict_validation_catches_a_typo_and_a_too_old_kubernetes(rendered: dict[str, list[Doc]]) -> None:
    statefulset = copy.deepcopy(only(rendered["base"], "StatefulSet"))
    validate_builtin(statefulset)
    # Native sidecars (an init container with restartPolicy) do not exist in 1.27's schema.
    with pytest.raises(AssertionError, match="restartPolicy"):
        validate_builtin(statefulset, "1.27")
    statefulset["spec"]["template"]["spec"]["automountServiceAccountTokens"] = False
    with pytest.raises(AssertionError, match="automountServiceAccountTokens"):
        validate_builtin(statefulset)


POLICY_MUTATIONS = {
    "unknown trigger type": ("spec", "triggerConfig", "type", "schedule"),
    "unknown postCheckpoint": ("spec", "triggerConfig", "postCheckpoint", "pause"),
    "retention in words": ("spec", "retentionConfig", "lastAccessTimeout", "7 days"),
    "misspelt field": ("spec", "triggerConfig", "postCheckPoint", "stop"),
    "unknown scope": ("spec", "snapshotScope", None, "memory-only"),
    "empty selector": ("spec", "selector", None, {}),
    "old apiVersion": ("apiVersion", None, None, "podsnapshot.gke.io/v1alpha1"),
}


@pytest.mark.parametrize("mutation", sorted(POLICY_MUTATIONS))
def test_the_policy_schema_rejects(mutation: str, rendered: dict[str, list[Doc]]) -> None:
    policy = copy.deepcopy(only(rendered["base"], "PodSnapshotPolicy"))
    *path, value = POLICY_MUTATIONS[mutation]
    keys = [k for k in path if k is not None]
    target = policy
    for k in keys[:-1]:
        target = target[k]
    target[keys[-1]] = value
    with pytest.raises(jsonschema.ValidationError):
        validate_snapshot_doc(policy)


def test_the_storage_config_schema_rejects_a_missing_bucket_and_a_namespace(rendered: dict[str, list[Doc]]) -> None:
    config = only(rendered["admin"], "PodSnapshotStorageConfig")
    no_bucket = copy.deepcopy(config)
    del no_bucket["spec"]["snapshotStorageConfig"]["gcs"]["bucket"]
    namespaced = copy.deepcopy(config)
    namespaced["metadata"]["namespace"] = NAMESPACE
    s3 = copy.deepcopy(config)
    s3["spec"]["snapshotStorageConfig"]["s3"] = {"bucket": "x"}
    for bad in (no_bucket, namespaced, s3):
        with pytest.raises(jsonschema.ValidationError):
            validate_snapshot_doc(bad)


def test_the_snapshot_examples_in_the_guide_are_valid() -> None:
    blocks = re.findall(r"```yaml\n(.*?)```", GKE_DOC.read_text(), flags=re.DOTALL)
    examples = [
        doc
        for block in blocks
        for doc in yaml.safe_load_all(block)
        if isinstance(doc, dict) and str(doc.get("apiVersion", "")).startswith(SNAPSHOT_GROUP)
    ]
    assert {d["kind"] for d in examples} >= {"PodSnapshotManualTrigger"}
    for doc in examples:
        validate_snapshot_doc(doc)


# ---------------------------------------------------------------------------
# The contract: who holds a token, what is shared, what GKE needs
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["base", "cpu"])
def test_only_the_sidecar_holds_a_token(name: str, rendered: dict[str, list[Doc]]) -> None:
    docs = rendered[name]
    spec = pod_spec(docs)
    assert spec["automountServiceAccountToken"] is False
    assert only(docs, "ServiceAccount", SIDECAR_SA).get("automountServiceAccountToken") is False

    token_volumes = [
        v["name"]
        for v in spec["volumes"]
        if "secret" in v or any("serviceAccountToken" in s for s in v.get("projected", {}).get("sources", []))
    ]
    assert token_volumes == ["sidecar-token"]
    sources = volumes(docs)["sidecar-token"]["projected"]["sources"]
    assert sources == [
        {"serviceAccountToken": {"path": "token", "expirationSeconds": 3600}},
        {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
        {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {"fieldPath": "metadata.namespace"}}]}},
    ]
    assert mounts(sidecar(docs))[TOKEN_DIR] == {"name": "sidecar-token", "mountPath": TOKEN_DIR, "readOnly": True}
    for container in [*spec.get("initContainers", []), *spec["containers"]]:
        if container["name"] == "sidecar":
            continue
        assert all(m["name"] != "sidecar-token" for m in container.get("volumeMounts", [])), container["name"]
        assert all(not p.startswith("/var/run/secrets") for p in mounts(container)), container["name"]
        assert "envFrom" not in container
        assert all("secretKeyRef" not in e.get("valueFrom", {}) for e in container.get("env", []))


def test_the_pod_service_account_is_the_one_the_role_binding_binds(rendered: dict[str, list[Doc]]) -> None:
    docs = rendered["base"]
    account = pod_spec(docs)["serviceAccountName"]
    assert account == SIDECAR_SA
    binding = only(docs, "RoleBinding", SIDECAR_SA)
    assert {"kind": "ServiceAccount", "name": account, "namespace": NAMESPACE} in binding["subjects"]
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": SIDECAR_SA}
    only(docs, "Role", SIDECAR_SA)


def test_the_role_fits_require_mode(rendered: dict[str, list[Doc]]) -> None:
    """The sidecar runs `--policy-mode require`: it reads the installed policy and
    triggers snapshots; it never needs to create a policy, and nothing is a wildcard."""
    rules = only(rendered["base"], "Role", SIDECAR_SA)["rules"]

    def verbs(group: str, resource: str) -> set[str]:
        return {
            verb
            for rule in rules
            if group in rule.get("apiGroups", []) and resource in rule.get("resources", [])
            for verb in rule.get("verbs", [])
        }

    for rule in rules:
        assert "*" not in rule.get("verbs", []) + rule.get("resources", []) + rule.get("apiGroups", []), rule
    assert "get" in verbs(SNAPSHOT_GROUP, "podsnapshotpolicies")
    assert not verbs(SNAPSHOT_GROUP, "podsnapshotpolicies") & {"create", "update", "patch", "delete"}
    assert {"create", "get"} <= verbs(SNAPSHOT_GROUP, "podsnapshotmanualtriggers")
    assert "get" in verbs(SNAPSHOT_GROUP, "podsnapshots")
    # PodSnapshots are written by GKE alone (an admission policy rejects anyone else).
    assert not verbs(SNAPSHOT_GROUP, "podsnapshots") & {"create", "update", "patch"}
    # Pods: read its own pod only (the StatefulSet's one pod).
    (pods,) = [rule for rule in rules if "pods" in rule.get("resources", [])]
    assert pods["verbs"] == ["get"]
    assert pods["resourceNames"] == [f"{only(rendered['base'], 'StatefulSet')['metadata']['name']}-0"]


@pytest.mark.parametrize("name", ["base", "cpu"])
def test_the_sidecar_is_a_native_sidecar_using_the_installed_policy(name: str, rendered: dict[str, list[Doc]]) -> None:
    docs = rendered[name]
    container = sidecar(docs)
    assert container["restartPolicy"] == "Always"
    assert container["command"] == ["jupyter-suspend-sidecar"]
    args = container["args"]
    assert args[args.index("--policy-mode") + 1] == "require"
    policy_name = args[args.index("--policy-name") + 1]
    assert policy_name == only(docs, "PodSnapshotPolicy")["metadata"]["name"] == POLICY_NAME
    assert container["image"] == notebook(docs)["image"] == f"{IMAGE}:0.1.0"
    # Ready before the notebook starts: the probe looks for the socket the notebook uses.
    assert container["startupProbe"]["exec"]["command"] == ["test", "-S", SOCKET]
    assert "livenessProbe" not in container
    assert "readinessProbe" not in container


@pytest.mark.parametrize("name", ["base", "cpu"])
def test_both_containers_share_the_socket_directory_in_memory(name: str, rendered: dict[str, list[Doc]]) -> None:
    docs = rendered[name]
    shared = {mounts(c)[SOCKET_DIR]["name"] for c in (sidecar(docs), notebook(docs))}
    assert len(shared) == 1
    assert volumes(docs)[shared.pop()]["emptyDir"]["medium"] == "Memory"
    assert env(notebook(docs))["JUPYTER_SUSPEND_SIDECAR_SOCKET"]["value"] == SOCKET


@pytest.mark.parametrize("name", ["base", "cpu"])
def test_both_containers_get_the_pod_identity_from_the_downward_api(name: str, rendered: dict[str, list[Doc]]) -> None:
    for container in (sidecar(rendered[name]), notebook(rendered[name])):
        variables = env(container)
        for variable, field in DOWNWARD_ENV.items():
            assert variables[variable]["valueFrom"]["fieldRef"]["fieldPath"] == field, (container["name"], variable)


@pytest.mark.parametrize("name", ["base", "cpu"])
def test_the_notebook_reads_the_new_pods_uid_where_the_gke_backend_looks(
    name: str, rendered: dict[str, list[Doc]]
) -> None:
    """After a restore the env still holds the old uid; a downward-API file names the new pod."""
    from jupyter_suspend.server.backends.gke import GKEBackend

    uid_file = Path(GKEBackend.pod_uid_file.default_value)
    mount = mounts(notebook(rendered[name]))[str(uid_file.parent)]
    assert mount.get("readOnly") is True
    items = volumes(rendered[name])[mount["name"]]["downwardAPI"]["items"]
    assert {"path": uid_file.name, "fieldRef": {"fieldPath": "metadata.uid"}} in items


@pytest.mark.parametrize("name", ["base", "cpu"])
def test_security_contexts_and_resources(name: str, rendered: dict[str, list[Doc]]) -> None:
    spec = pod_spec(rendered[name])
    assert spec["securityContext"]["runAsNonRoot"] is True
    assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert "hostNetwork" not in spec
    assert "hostPID" not in spec
    assert "hostIPC" not in spec
    for container in (sidecar(rendered[name]), notebook(rendered[name])):
        context = container["securityContext"]
        assert context["runAsNonRoot"] is True, container["name"]
        assert context["runAsUser"] == 1000, container["name"]
        assert context["allowPrivilegeEscalation"] is False, container["name"]
        assert context["capabilities"] == {"drop": ["ALL"]}, container["name"]
        assert context["seccompProfile"] == {"type": "RuntimeDefault"}, container["name"]
        assert not context.get("privileged", False)
        for section in ("requests", "limits"):
            assert {"cpu", "memory"} <= set(container["resources"][section]), (container["name"], section)
    assert sidecar(rendered[name])["securityContext"]["readOnlyRootFilesystem"] is True


@pytest.mark.parametrize("name", ["base", "cpu"])
def test_the_notebook_runs_the_gke_backend_in_gvisor_with_its_state_on_the_volume(
    name: str, rendered: dict[str, list[Doc]]
) -> None:
    docs = rendered[name]
    statefulset = only(docs, "StatefulSet", "notebook")
    spec = pod_spec(docs)
    container = notebook(docs)
    assert spec["runtimeClassName"] == "gvisor"
    assert statefulset["spec"]["replicas"] == 1
    assert statefulset["spec"]["serviceName"] == only(docs, "Service", "notebook")["metadata"]["name"]
    assert only(docs, "Service", "notebook")["spec"]["clusterIP"] == "None"
    assert statefulset["spec"]["persistentVolumeClaimRetentionPolicy"] == {
        "whenScaled": "Retain",
        "whenDeleted": "Retain",
    }
    assert container["command"][:2] == ["jupyter", "lab"]
    assert "--SuspendApp.backend=gke" in container["args"]
    (state_dir,) = [a.partition("=")[2] for a in container["args"] if a.startswith("--SuspendApp.state_dir=")]
    # The state directory is on the claim of the volumeClaimTemplates.
    (claim,) = statefulset["spec"]["volumeClaimTemplates"]
    home = [path for path, m in mounts(container).items() if m["name"] == claim["metadata"]["name"]]
    assert home == ["/home/jovyan"]
    assert state_dir.startswith("/home/jovyan/")
    # A frozen pod fails its probes for minutes: a liveness probe would kill the checkpoint.
    assert "livenessProbe" not in container
    # Readiness is the gke backend's endpoint (503 while suspending): it fails within one period, well inside the
    # settle the backend waits before the snapshot (issue 18 item 8).
    probe = container["readinessProbe"]
    assert probe["httpGet"] == {"path": "/ready", "port": "readiness"}
    (port,) = [p["containerPort"] for p in container["ports"] if p["name"] == "readiness"]
    assert f"--GKEBackend.readiness_port={port}" in container["args"]
    from jupyter_suspend.server.backends.gke import GKEBackend

    assert probe["periodSeconds"] * probe["failureThreshold"] < GKEBackend().settle_seconds
    # The labels GKE's selector and the Service select on.
    labels = statefulset["spec"]["template"]["metadata"]["labels"]
    assert NOTEBOOK_LABELS.items() <= labels.items()
    assert statefulset["spec"]["selector"]["matchLabels"] == NOTEBOOK_LABELS


def test_the_policy_selects_the_notebook_pods_and_names_the_storage_config(rendered: dict[str, list[Doc]]) -> None:
    docs = rendered["base"]
    policy = only(docs, "PodSnapshotPolicy", POLICY_NAME)
    template = only(docs, "StatefulSet", "notebook")["spec"]["template"]
    assert policy["metadata"]["namespace"] == NAMESPACE
    assert set(policy["spec"]["selector"]) == {"matchLabels"}
    assert policy["spec"]["selector"]["matchLabels"].items() <= template["metadata"]["labels"].items()
    assert policy["spec"]["triggerConfig"] == {"type": "manual", "postCheckpoint": "stop"}
    assert policy["spec"]["retentionConfig"] == {"lastAccessTimeout": "7d"}
    storage = only(rendered["admin"], "PodSnapshotStorageConfig")
    assert policy["spec"]["storageConfigName"] == storage["metadata"]["name"]


def test_the_gpu_is_in_the_base_and_nowhere_in_the_cpu_overlay(rendered: dict[str, list[Doc]]) -> None:
    base = only(rendered["base"], "StatefulSet")
    cpu = only(rendered["cpu"], "StatefulSet")
    base_spec = base["spec"]["template"]["spec"]
    assert notebook(rendered["base"])["resources"]["limits"]["nvidia.com/gpu"] == 1
    assert base_spec["nodeSelector"]["cloud.google.com/gke-accelerator"]
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in base_spec["tolerations"]

    cpu_spec = cpu["spec"]["template"]["spec"]
    assert "nvidia" not in json.dumps(cpu)
    assert "gke-accelerator" not in json.dumps(cpu)
    assert cpu_spec["runtimeClassName"] == "gvisor"
    assert cpu_spec["nodeSelector"] == {"sandbox.gke.io/runtime": "gvisor"}
    assert cpu_spec["tolerations"] == [
        {"key": "sandbox.gke.io/runtime", "operator": "Equal", "value": "gvisor", "effect": "NoSchedule"}
    ]
    # Nothing else differs from the base.
    stripped = copy.deepcopy(base)
    stripped_spec = stripped["spec"]["template"]["spec"]
    del stripped_spec["nodeSelector"]["cloud.google.com/gke-accelerator"]
    stripped_spec["tolerations"] = [t for t in stripped_spec["tolerations"] if t["key"] != "nvidia.com/gpu"]
    del notebook([stripped])["resources"]["limits"]["nvidia.com/gpu"]
    assert stripped == cpu
    others = {json.dumps(d, sort_keys=True) for d in rendered["base"] if d["kind"] != "StatefulSet"}
    assert others == {json.dumps(d, sort_keys=True) for d in rendered["cpu"] if d["kind"] != "StatefulSet"}


# ---------------------------------------------------------------------------
# The Jupyter server configuration
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["base", "cpu"])
def test_the_jupyter_config_is_mounted_where_jupyter_looks(name: str, rendered: dict[str, list[Doc]]) -> None:
    docs = rendered[name]
    container = notebook(docs)
    variables = env(container)
    config_dir = variables["JUPYTER_CONFIG_PATH"]["value"]
    mount = mounts(container)[config_dir]
    configmap = volumes(docs)[mount["name"]]["configMap"]["name"]
    assert only(docs, "ConfigMap", configmap)["data"] == {"jupyter_server_config.py": JUPYTER_CONFIG.read_text()}
    # Kernel sockets in memory (inside the snapshot) and short enough for a Unix socket path.
    runtime_dir = variables["JUPYTER_RUNTIME_DIR"]["value"]
    assert volumes(docs)[mounts(container)[runtime_dir]["name"]]["emptyDir"]["medium"] == "Memory"
    assert len(f"{runtime_dir}/kernel-{uuid.uuid4()}-ipc-65535".encode()) < 108


def test_the_jupyter_config_sets_ipc_kernels_and_a_poll_selector() -> None:
    config = Config()
    namespace = {"get_config": lambda: config, "__file__": str(JUPYTER_CONFIG)}
    policy = asyncio.get_event_loop_policy()
    try:
        exec(compile(JUPYTER_CONFIG.read_text(), str(JUPYTER_CONFIG), "exec"), namespace)
        assert config.KernelManager.transport == "ipc"
        loop = asyncio.get_event_loop_policy().new_event_loop()
        try:
            assert isinstance(loop, asyncio.SelectorEventLoop)
            assert isinstance(loop._selector, selectors.PollSelector)  # type: ignore[attr-defined]
        finally:
            loop.close()
    finally:
        asyncio.get_event_loop_policy().get_event_loop().close()
        asyncio.set_event_loop_policy(policy)


SERVER_CHECK = """
import json
from jupyter_server.serverapp import ServerApp

app = ServerApp()
app.initialize(argv=["--ServerApp.port=0"], find_extensions=False, new_httpserver=False)
loop = app.io_loop.asyncio_loop
out = {"config_files": app.loaded_config_files, "selector": type(loop._selector).__name__}

async def run_a_cell():
    kernel_id = await app.kernel_manager.start_kernel()
    manager = app.kernel_manager.get_kernel(kernel_id)
    out["transport"] = manager.transport
    client = manager.client()
    client.start_channels()
    try:
        await client.wait_for_ready(timeout=60)
        reply = await client._async_execute_interactive("print(6 * 7)", timeout=60)
        out["status"] = reply["content"]["status"]
    finally:
        client.stop_channels()
        await app.kernel_manager.shutdown_kernel(kernel_id, now=True)

loop.run_until_complete(run_a_cell())
print("RESULT " + json.dumps(out))
"""


@pytest.mark.slow
def test_a_real_server_loads_the_configmap_and_runs_a_kernel_over_ipc(
    rendered: dict[str, list[Doc]], tmp_path: Path
) -> None:
    """The ConfigMap's file, found the way the pod finds it (JUPYTER_CONFIG_PATH),
    gives a real jupyter_server a poll-based loop and a kernel on ipc that runs a cell."""
    data = only(rendered["base"], "ConfigMap", "jupyter-suspend-jupyter-config")["data"]
    config_dir = tmp_path / "etc-jupyter-suspend"
    config_dir.mkdir()
    for key, value in data.items():
        (config_dir / key).write_text(value)
    # As short as the pod's /var/run/jupyter-runtime: a Unix socket path has at most 107 bytes.
    runtime_dir = Path(tempfile.mkdtemp(prefix="jsr-", dir="/tmp"))
    environment = {
        **os.environ,
        "JUPYTER_CONFIG_PATH": str(config_dir),
        "JUPYTER_CONFIG_DIR": str(tmp_path / "user-config"),
        "JUPYTER_DATA_DIR": str(tmp_path / "data"),
        "JUPYTER_RUNTIME_DIR": str(runtime_dir),
    }
    try:
        result = subprocess.run(
            [sys.executable, "-c", SERVER_CHECK],
            capture_output=True,
            text=True,
            env=environment,
            cwd=tmp_path,
            timeout=120,
            check=False,
        )
    finally:
        shutil.rmtree(runtime_dir, ignore_errors=True)
    lines = [line for line in result.stdout.splitlines() if line.startswith("RESULT ")]
    assert lines, result.stdout + result.stderr
    out = json.loads(lines[-1].removeprefix("RESULT "))
    assert out == {
        "config_files": [str(config_dir / "jupyter_server_config.py")],
        "selector": "PollSelector",
        "transport": "ipc",
        "status": "ok",
    }


# ---------------------------------------------------------------------------
# The releaser (deploy/releaser)
# ---------------------------------------------------------------------------


def test_the_releaser_renders_its_objects_in_the_notebooks_namespace(rendered: dict[str, list[Doc]]) -> None:
    docs = rendered["releaser"]
    assert sorted((d["kind"], d["metadata"]["name"]) for d in docs) == sorted(
        [("Deployment", RELEASER), ("Role", RELEASER), ("RoleBinding", RELEASER), ("ServiceAccount", RELEASER)]
    )
    assert {d["metadata"]["namespace"] for d in docs} == {only(rendered["base"], "Namespace")["metadata"]["name"]}
    binding = only(docs, "RoleBinding", RELEASER)
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": RELEASER, "namespace": NAMESPACE}]
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": RELEASER}


def test_the_releaser_watches_the_label_the_base_statefulset_carries(rendered: dict[str, list[Doc]]) -> None:
    from jupyter_suspend.cli.release import DEFAULT_SELECTOR

    deployment = only(rendered["releaser"], "Deployment", RELEASER)
    spec = deployment["spec"]["template"]["spec"]
    assert deployment["spec"]["replicas"] == 1
    assert spec["serviceAccountName"] == RELEASER
    (container,) = spec["containers"]
    assert container["command"] == ["jupyter", "suspend", "release", "--watch"]
    assert "--namespace=$(POD_NAMESPACE)" in container["args"]
    assert env(container)["POD_NAMESPACE"]["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.namespace"}}
    assert not any(a.startswith(("--selector", "-l")) for a in container["args"])  # the default selector
    key, _, value = DEFAULT_SELECTOR.partition("=")
    assert only(rendered["base"], "StatefulSet", "notebook")["metadata"]["labels"][key] == value
    # The sidecar's image (deploy/base), the same tag.
    assert container["image"] == sidecar(rendered["base"])["image"]
    context = container["securityContext"]
    assert context["runAsNonRoot"] is True
    assert context["allowPrivilegeEscalation"] is False
    assert context["readOnlyRootFilesystem"] is True
    assert context["capabilities"] == {"drop": ["ALL"]}
    for section in ("requests", "limits"):
        assert {"cpu", "memory"} <= set(container["resources"][section])


def test_the_releaser_role_writes_only_the_scale_and_its_annotation(rendered: dict[str, list[Doc]]) -> None:
    rules = only(rendered["releaser"], "Role", RELEASER)["rules"]
    granted = {
        (group, resource, verb)
        for rule in rules
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }
    assert not any("*" in triple for triple in granted)
    writes = {t for t in granted if t[2] not in ("get", "list", "watch")}
    assert writes == {
        ("apps", "statefulsets/scale", "patch"),
        ("apps", "statefulsets", "patch"),
        # a snapshot a restore used up, and the trigger that made it (release.consumed_snapshot)
        (SNAPSHOT_GROUP, "podsnapshots", "delete"),
        (SNAPSHOT_GROUP, "podsnapshotmanualtriggers", "delete"),
    }
    # PodSnapshots are GKE's: the releaser never creates or changes one, and never deletes a pod itself.
    assert {t for t in granted if t[1] in ("podsnapshots", "pods")} == {
        (SNAPSHOT_GROUP, "podsnapshots", "list"),
        (SNAPSHOT_GROUP, "podsnapshots", "delete"),
        ("", "pods", "list"),
    }


# --- issue 19, item 1: every Role pinned to the objects the code knows by name -------------------------------------

#: (overlay, resource) rules that cannot be pinned, each with its reason beside it in the manifest.
UNPINNABLE = {
    ("base", "podsnapshotmanualtriggers"),  # names generated per request; create cannot be pinned
    ("base", "podsnapshots"),  # GKE names each snapshot
    ("kubeflow-workspace", "pods"),  # the workspace controller generates the pod's name
}


def _option(args: list[str], flag: str) -> str:
    return args[args.index(flag) + 1]


@pytest.mark.parametrize("name", ["base", "cpu", "kubeflow-notebook", "kubeflow-workspace"])
def test_item1_sidecar_roles_pin_every_known_name(name: str, rendered: dict[str, list[Doc]]) -> None:
    rules = only(rendered[name], "Role", SIDECAR_SA)["rules"]
    kind = "base" if name == "cpu" else name
    for rule in rules:
        for resource in rule["resources"]:
            if (kind, resource) in UNPINNABLE or (resource == "podsnapshotpolicies" and rule["verbs"] == ["create"]):
                assert not set(rule["verbs"]) & {"update", "patch", "deletecollection", "*"}, rule
                continue
            assert rule.get("resourceNames"), (name, rule)
    if kind == "base":
        args = sidecar(rendered[name])["args"]
        pods = [r for r in rules if "pods" in r["resources"]]
        policies = [r for r in rules if "podsnapshotpolicies" in r["resources"]]
        assert [r["resourceNames"] for r in pods] == [[f"{only(rendered[name], 'StatefulSet')['metadata']['name']}-0"]]
        # require mode: the one installed policy, read only (no create rule left).
        assert _option(args, "--policy-mode") == "require"
        assert [(r["resourceNames"], r["verbs"]) for r in policies] == [([_option(args, "--policy-name")], ["get"])]


def test_item1_every_unpinned_rule_says_why() -> None:
    """In the Role files, each rule without resourceNames has a comment above it saying why it cannot be pinned."""
    import itertools

    text = (DEPLOY / "base" / "role.yaml").read_text()
    rules = text.split("\nrules:\n", 1)[1].split("\n---", 1)[0]
    blocks = rules.split("  - apiGroups:")
    for comment, rule in itertools.pairwise(blocks):
        if "resourceNames" not in rule.split("\n  #", 1)[0]:
            assert "pinn" in comment.lower(), rule
    workspace = (DEPLOY / "overlays" / "kubeflow-workspace" / "kustomization.yaml").read_text()
    assert "NOT PINNED" in workspace
