"""A Kubeflow Workspace's pod is named by its controller (``ws-<name>-<suffix>-0``): the CLI takes the name from
the Workspace's status (``status.podTemplatePod.name``), never from the Workspace's own name."""

from __future__ import annotations

from typing import Any

from jupyter_suspend.cli.workloads import WorkspaceWorkload


def workspace(status: dict[str, Any] | None) -> dict[str, Any]:
    return {"metadata": {"name": "research"}, "spec": {"paused": True}, **({"status": status} if status else {})}


def test_the_pod_name_comes_from_the_status() -> None:
    target = WorkspaceWorkload(kube=None, name="research")  # type: ignore[arg-type]
    status = {"podTemplatePod": {"name": "ws-research-x7k2p-0", "nodeName": "gpu-node-1"}}
    assert target.pod_names(workspace(status)) == ["ws-research-x7k2p-0"]


def test_no_status_no_guessed_name() -> None:
    target = WorkspaceWorkload(kube=None, name="research")  # type: ignore[arg-type]
    assert target.pod_names(workspace(None)) == []
    assert target.pod_names(workspace({"podTemplatePod": {"name": "", "nodeName": ""}})) == []
    assert "research-0" not in target.pod_names(workspace({"podTemplatePod": {"name": 7}}))
