"""Least privilege, checked: what a Role grants and what a test's API calls used, both as
(apiGroup, resource[/subresource], verb) triples, so a test can assert they are equal."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from .server import Call, KubeAPI

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


#: The resources whose one object the code knows by name (own pod, own policy, owning Notebook/Workspace):
#: the only ones whose rules may carry ``resourceNames``.
PINNED_RESOURCES = frozenset({"pods", "podsnapshotpolicies", "notebooks", "workspaces"})


def granted(role: dict[str, Any], resource_names_for: Iterable[str] = ()) -> set[Triple]:
    """What ``role`` grants, names aside; no wildcard anywhere, and ``resourceNames`` only on the rules of
    :data:`PINNED_RESOURCES` and ``resource_names_for``."""
    named = set(resource_names_for) | PINNED_RESOURCES
    triples: set[Triple] = set()
    for rule in role["rules"]:
        assert not rule.get("resourceNames") or set(rule["resources"]) <= named, rule
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                for verb in rule["verbs"]:
                    assert "*" not in (group, resource, verb), rule
                    triples.add((group, resource, verb))
    return triples


def allows(role: dict[str, Any], call: Call, field_name: str | None = None) -> bool:
    """Whether ``role`` authorizes ``call`` as Kubernetes' RBAC authorizer does (``RuleAllows`` in
    kubernetes/kubernetes plugin/pkg/auth/authorizer/rbac/rbac.go: verb, API group, resource[/subresource] and,
    when a rule lists resourceNames, the request's name). A ``list``/``watch`` has a name only through its field
    selector ``metadata.name=`` (``field_name``; RequestInfo takes it from there since Kubernetes 1.11,
    kubernetes/kubernetes#63469); a ``create`` never has one, so a rule with resourceNames never allows it.
    No wildcards (:func:`granted` refuses them in our Roles). The loopback server does not enforce RBAC: tests
    ask this function about its recorded calls."""
    resource = call.resource if call.subresource is None else f"{call.resource}/{call.subresource}"
    name = call.name if call.verb not in ("list", "watch") else field_name
    if call.verb == "create":
        name = None
    for rule in role["rules"]:
        if call.verb not in rule.get("verbs", []) or call.group not in rule.get("apiGroups", []):
            continue
        if resource not in rule.get("resources", []):
            continue
        names = rule.get("resourceNames") or []
        if names and name not in names:
            continue
        return True
    return False
