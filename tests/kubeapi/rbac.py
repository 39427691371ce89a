"""Least privilege, checked: what a Role grants and what a test's API calls used, both as
(apiGroup, resource[/subresource], verb) triples, so a test can assert they are equal."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from .server import KubeAPI

Triple = tuple[str, str, str]


def called(kube: KubeAPI) -> set[Triple]:
    """Every (group, resource[/subresource], verb) the loopback server received."""
    return {
        (c.group, c.resource if c.subresource is None else f"{c.resource}/{c.subresource}", c.verb) for c in kube.calls
    }


def bound_role(documents: Iterable[dict[str, Any] | None], name: str) -> dict[str, Any]:
    """The one Role ``name`` of ``documents``, after checking that the one RoleBinding of that name binds it to the
    ServiceAccount of that name (and nothing else)."""
    documents = [d for d in documents if d]
    roles = [d for d in documents if d["kind"] == "Role"]
    bindings = [d for d in documents if d["kind"] == "RoleBinding"]
    assert [r["metadata"]["name"] for r in roles] == [name]
    assert [b["metadata"]["name"] for b in bindings] == [name]
    assert bindings[0]["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name}
    assert bindings[0]["subjects"] == [{"kind": "ServiceAccount", "name": name}]
    return roles[0]


def granted(role: dict[str, Any], resource_names_for: Iterable[str] = ()) -> set[Triple]:
    """What ``role`` grants; no wildcard anywhere, and ``resourceNames`` only on the rules of ``resource_names_for``."""
    named = set(resource_names_for)
    triples: set[Triple] = set()
    for rule in role["rules"]:
        assert not rule.get("resourceNames") or set(rule["resources"]) <= named, rule
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                for verb in rule["verbs"]:
                    assert "*" not in (group, resource, verb), rule
                    triples.add((group, resource, verb))
    return triples
