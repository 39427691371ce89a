"""Validation against the platforms' own CRD schemas, as upstream generates them (tests/manifest_schemas/upstream/).

Each file is one version's ``openAPIV3Schema`` from the upstream CRD, only its description texts dropped (its
``source`` names the repository, commit and path). A structural schema is turned into a JSON Schema that behaves like
an API server with strict field validation: an object that declares ``properties`` (and neither
``additionalProperties`` nor ``x-kubernetes-preserve-unknown-fields``) rejects any other field, where a lenient server
would prune it. That is the difference between "the API server accepts this" and "the API server silently drops the
part that mattered" (issue 18: ``initContainers[].restartPolicy`` in a Notebook). ``metadata`` is checked by the API
server itself, not by the CRD schema: it is left open here, as there.
"""

from __future__ import annotations

import copy
import json
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema

UPSTREAM = Path(__file__).resolve().parent / "manifest_schemas" / "upstream"
#: (apiVersion, kind) -> file.
FILES = {
    ("kubeflow.org/v1alpha1", "PodDefault"): "poddefault-v1alpha1.json",
    ("kubeflow.org/v1", "Notebook"): "notebook-v1.json",
    ("kubeflow.org/v1beta1", "WorkspaceKind"): "workspacekind-v1beta1.json",
    ("kubeflow.org/v1beta1", "Workspace"): "workspace-v1beta1.json",
}


def _strict(node: Any, top: bool = False) -> Any:
    if isinstance(node, list):
        return [_strict(item) for item in node]
    if not isinstance(node, dict):
        return node
    out = {key: _strict(value) for key, value in node.items()}
    if top and "properties" in out:
        out["properties"] = {**out["properties"], "metadata": {"type": "object"}}
    if (
        "properties" in node
        and "additionalProperties" not in node
        and not node.get("x-kubernetes-preserve-unknown-fields")
    ):
        out["additionalProperties"] = False
    return out


@cache
def _validator(api_version: str, kind: str) -> jsonschema.Draft7Validator:
    data = json.loads((UPSTREAM / FILES[(api_version, kind)]).read_text())
    schema = _strict(copy.deepcopy(data["openAPIV3Schema"]), top=True)
    jsonschema.Draft7Validator.check_schema(schema)
    return jsonschema.Draft7Validator(schema)


def has_schema(doc: dict[str, Any]) -> bool:
    return (doc.get("apiVersion"), doc.get("kind")) in FILES


def errors(doc: dict[str, Any]) -> list[str]:
    """Every way ``doc`` breaks its upstream CRD schema (strict), as ``/path: message``."""
    validator = _validator(str(doc["apiVersion"]), str(doc["kind"]))
    return [
        "/" + "/".join(str(p) for p in error.absolute_path) + f": {error.message}"
        for error in sorted(validator.iter_errors(doc), key=lambda e: list(map(str, e.absolute_path)))
    ]


def validate(doc: dict[str, Any]) -> None:
    found = errors(doc)
    assert not found, f"{doc['kind']}/{(doc.get('metadata') or {}).get('name')}: " + "; ".join(found)
