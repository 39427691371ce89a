"""``jupyter-suspend-injector`` (issue 18 items 1 and 5): the real process over real HTTPS, as the API server calls it.

The process is started exactly as deploy/injector/deployment.yaml starts it (``python -m jupyter_suspend.injector
--cert --key --port``), with a certificate from a CA of the test's own (the API server checks the webhook's
certificate against the configuration's ``caBundle`` the same way). Requests are AdmissionReview v1 bodies of the
shape the API server sends; the returned JSONPatch is applied (RFC 6902, below) and the patched pod validated as a
``v1`` Pod with strict field validation. The pods are the ones the platforms make: a Kubeflow Workspace pod as
kubeflow/notebooks ``notebooks-v2`` workspace_controller.go builds it (one container ``main``, ServiceAccount
``ws-<name>``, labels from the WorkspaceKind's ``podMetadata``), after Kubernetes' ServiceAccount admission plugin
added its ``kube-api-access-*`` volume. A test with a real kube-apiserver calling the injector through a
MutatingWebhookConfiguration is the lead's (the control-plane issue); this one needs none of it.
"""

from __future__ import annotations

import base64
import copy
import http.client
import json
import re
import ssl
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import trustme

from jupyter_suspend.injector import mutation
from tests.test_manifests import K8S_VERSION, REPO, kustomize

JSON = dict[str, Any]
IMAGE = "ghcr.io/example/jupyter-suspend:0.1.0"


class Injector:
    """The injector process on a free port, and an HTTPS client that trusts its CA only."""

    def __init__(self, directory: Path, *extra: str) -> None:
        ca = trustme.CA()
        cert = ca.issue_cert("127.0.0.1", "jupyter-suspend-injector.jupyter-suspend.svc")
        directory.mkdir(parents=True, exist_ok=True)
        self.cert, self.key, self.ca = directory / "tls.crt", directory / "tls.key", directory / "ca.crt"
        cert.cert_chain_pems[0].write_to_path(str(self.cert))
        cert.private_key_pem.write_to_path(str(self.key))
        ca.cert_pem.write_to_path(str(self.ca))
        argv = [sys.executable, "-m", "jupyter_suspend.injector", "--cert", str(self.cert), "--key", str(self.key)]
        argv += ["--port", "0", "--host", "127.0.0.1", "--image", IMAGE, *extra]
        self.process = subprocess.Popen(argv, stderr=subprocess.PIPE, text=True, cwd=REPO)
        assert self.process.stderr is not None
        deadline = time.monotonic() + 30
        self.port = 0
        while not self.port:
            line = self.process.stderr.readline()
            assert line or self.process.poll() is None, "the injector exited"
            if found := re.search(r"listening on https://127\.0\.0\.1:(\d+)/mutate", line):
                self.port = int(found.group(1))
            assert time.monotonic() < deadline, "the injector did not start"
        self.context = ssl.create_default_context(cafile=str(self.ca))

    def request(
        self, method: str, path: str, body: bytes = b"", content_type: str = "application/json"
    ) -> tuple[int, Any]:
        conn = http.client.HTTPSConnection("127.0.0.1", self.port, context=self.context, timeout=10)
        try:
            conn.request(method, path, body=body, headers={"Content-Type": content_type} if body else {})
            response = conn.getresponse()
            return response.status, json.loads(response.read() or b"null")
        finally:
            conn.close()

    def review(self, pod: JSON, operation: str = "CREATE") -> JSON:
        body: JSON = {
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "request": {
                "uid": "705ab4f5-6393-11e8-b7cc-42010a800002",
                "kind": {"group": "", "version": "v1", "kind": "Pod"},
                "resource": {"group": "", "version": "v1", "resource": "pods"},
                "namespace": "team-a",
                "operation": operation,
                "object": pod,
                "dryRun": False,
            },
        }
        code, answer = self.request("POST", "/mutate", json.dumps(body).encode())
        assert code == 200, answer
        assert (answer["apiVersion"], answer["kind"]) == ("admission.k8s.io/v1", "AdmissionReview")
        response: JSON = answer["response"]
        assert response["uid"] == body["request"]["uid"]
        assert response["allowed"] is True  # this webhook never blocks a pod
        return response

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=10)
        if self.process.stderr:
            self.process.stderr.close()


@pytest.fixture(scope="module")
def injector(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Injector]:
    started = Injector(tmp_path_factory.mktemp("injector"), "--sidecar-arg=--workload", "--sidecar-arg=workspace")
    try:
        yield started
    finally:
        started.stop()


def apply_patch(doc: JSON, patch: list[JSON]) -> JSON:
    """RFC 6902 ``add`` / ``remove`` on object members and ``-`` (what the injector emits; anything else fails)."""
    out = copy.deepcopy(doc)
    for op in patch:
        *parents, last = [p.replace("~1", "/").replace("~0", "~") for p in op["path"].split("/")[1:]]
        target: Any = out
        for part in parents:
            target = target[int(part)] if isinstance(target, list) else target[part]
        if op["op"] == "add":
            if isinstance(target, list):
                target.append(op["value"]) if last == "-" else target.insert(int(last), op["value"])
            else:
                target[last] = op["value"]
        elif op["op"] == "remove":
            del target[int(last) if isinstance(target, list) else last]
        else:
            raise AssertionError(f"unexpected op {op}")
    return out


def patched(pod: JSON, response: JSON) -> JSON:
    if "patch" not in response:
        return pod
    assert response["patchType"] == "JSONPatch"
    return apply_patch(pod, json.loads(base64.b64decode(response["patch"])))


def workspace_pod(name: str = "research", opt_in: bool = True) -> JSON:
    """A Workspace's pod as notebooks-v2 builds it, after the ServiceAccount admission plugin ran."""
    labels = {"notebooks.kubeflow.org/workspace-name": name, "notebooks.kubeflow.org/workspace-selector": name}
    if opt_in:
        labels[mutation.OPT_IN_LABEL] = "true"  # from the WorkspaceKind's podTemplate.podMetadata.labels
    token = "kube-api-access-x7k2p"
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"ws-{name}-abcde-0", "namespace": "team-a", "labels": labels},
        "spec": {
            "serviceAccountName": f"ws-{name}",
            "containers": [
                {
                    "name": "main",
                    "image": "ghcr.io/kubeflow/notebooks/workspaces-jupyterlab:latest",
                    "ports": [{"name": "jupyterlab", "containerPort": 8888}],
                    "env": [{"name": "NB_PREFIX", "value": f"/workspace/team-a/{name}/jupyterlab"}],
                    "volumeMounts": [
                        {"name": "home", "mountPath": "/home/jovyan"},
                        {"name": token, "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount", "readOnly": True},
                    ],
                }
            ],
            "volumes": [
                {"name": "home", "persistentVolumeClaim": {"claimName": f"ws-{name}-home"}},
                {
                    "name": token,
                    "projected": {
                        "sources": [
                            {"serviceAccountToken": {"path": "token", "expirationSeconds": 3607}},
                            {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
                        ]
                    },
                },
            ],
        },
    }


def validate_pod(pod: JSON) -> None:
    try:
        kubernetes_validate.validate(pod, K8S_VERSION, strict=True)
    except kubernetes_validate.ValidationError as e:
        raise AssertionError(f"at /{'/'.join(map(str, e.absolute_path))}: {e.message}") from None


def test_item1_an_opted_in_workspace_pod_gets_the_sidecar_token_socket_and_server_config(injector: Injector) -> None:
    pod = workspace_pod()
    response = injector.review(pod)
    after = patched(pod, response)
    validate_pod(after)
    spec = after["spec"]
    main, sidecar = spec["containers"]
    assert main["name"] == "main"
    assert (sidecar["name"], sidecar["image"], sidecar["args"]) == (
        "jupyter-suspend-sidecar",
        IMAGE,
        ["--workload", "workspace"],
    )
    assert "initContainers" not in spec  # an ordinary container: what a GKE restore is known to bring back
    # The token: only in the sidecar; the automounted one is gone from the pod and from main.
    assert spec["automountServiceAccountToken"] is False
    assert spec["serviceAccountName"] == "ws-research"  # kept: the platform's per-workspace identity
    token_volumes = [
        v["name"]
        for v in spec["volumes"]
        if any("serviceAccountToken" in s for s in v.get("projected", {}).get("sources", []))
    ]
    assert token_volumes == [mutation.VOLUME_TOKEN]
    assert {m["name"] for m in sidecar["volumeMounts"]} == {mutation.VOLUME_SOCKET, mutation.VOLUME_TOKEN}
    assert not any(m["mountPath"].startswith("/var/run/secrets") for m in main["volumeMounts"])
    # The socket directory is shared, in memory; the server finds it, its identity and its configuration.
    shared = {m["name"] for m in main["volumeMounts"]} & {m["name"] for m in sidecar["volumeMounts"]}
    assert shared == {mutation.VOLUME_SOCKET}
    (socket_volume,) = [v for v in spec["volumes"] if v["name"] == mutation.VOLUME_SOCKET]
    assert socket_volume["emptyDir"]["medium"] == "Memory"
    env = {e["name"]: e for e in main["env"]}
    assert env["NB_PREFIX"]["value"] == "/workspace/team-a/research/jupyterlab"  # untouched
    assert env["JUPYTER_CONFIG_PATH"]["value"] == "/etc/jupyter-suspend-platform:/etc/jupyter-suspend"
    assert env["JUPYTER_SUSPEND_SIDECAR_SOCKET"]["value"] == "/var/run/jupyter-suspend/sidecar.sock"
    assert env["POD_UID"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.uid"
    # The image's own start command stays.
    assert "command" not in main
    assert "args" not in main
    assert after["metadata"]["annotations"][mutation.INJECTED_ANNOTATION] == "jupyter-suspend-sidecar"
    # Labels and everything else the platform set are as they were.
    assert after["metadata"]["labels"] == pod["metadata"]["labels"]


def test_item1_injection_is_idempotent(injector: Injector) -> None:
    once = patched(workspace_pod(), injector.review(workspace_pod()))
    again = injector.review(once)
    assert "patch" not in again
    assert patched(once, again) == once


@pytest.mark.parametrize(
    "case",
    ["no opt-in label", "opt-in label false", "an UPDATE", "not a pod"],
)
def test_item1_only_new_pods_that_opt_in_are_touched(injector: Injector, case: str) -> None:
    pod = workspace_pod(opt_in=case != "no opt-in label")
    if case == "opt-in label false":
        pod["metadata"]["labels"][mutation.OPT_IN_LABEL] = "false"
    if case == "not a pod":
        body = {
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "request": {
                "uid": "u1",
                "kind": {"group": "apps", "version": "v1", "kind": "StatefulSet"},
                "operation": "CREATE",
                "object": pod,
            },
        }
        code, answer = injector.request("POST", "/mutate", json.dumps(body).encode())
        assert (code, answer["response"]) == (200, {"uid": "u1", "allowed": True})
        return
    response = injector.review(pod, operation="UPDATE" if case == "an UPDATE" else "CREATE")
    assert "patch" not in response


def test_item1_a_pod_that_cannot_take_the_sidecar_starts_and_says_why(injector: Injector) -> None:
    pod = workspace_pod()
    pod["spec"]["volumes"].append({"name": mutation.VOLUME_SOCKET, "emptyDir": {}})
    response = injector.review(pod)
    after = patched(pod, response)
    assert after["spec"] == pod["spec"]  # nothing half-injected
    reason = after["metadata"]["annotations"][mutation.SKIPPED_ANNOTATION]
    assert mutation.VOLUME_SOCKET in reason
    assert response["warnings"] == [f"jupyter-suspend-injector did not add the sidecar: {reason}"]
    validate_pod(after)


@pytest.mark.parametrize(
    ("method", "path", "body", "content_type", "code"),
    [
        ("POST", "/mutate", b"{not json", "application/json", 400),
        ("POST", "/mutate", b"[]", "application/json", 400),
        (
            "POST",
            "/mutate",
            json.dumps(
                {"apiVersion": "admission.k8s.io/v1beta1", "kind": "AdmissionReview", "request": {"uid": "u"}}
            ).encode(),
            "application/json",
            400,
        ),
        (
            "POST",
            "/mutate",
            json.dumps(
                {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {"uid": 7}}
            ).encode(),
            "application/json",
            400,
        ),
        ("POST", "/mutate", b"{}", "text/plain", 415),
        ("POST", "/elsewhere", b"{}", "application/json", 404),
        ("GET", "/mutate", b"", "application/json", 404),
    ],
)
def test_item1_bad_requests_get_a_4xx(
    injector: Injector, method: str, path: str, body: bytes, content_type: str, code: int
) -> None:
    got, answer = injector.request(method, path, body, content_type)
    assert got == code, answer
    assert "error" in answer
    assert injector.request("GET", "/healthz") == (200, {"ok": True})


def test_item1_an_oversized_body_is_refused_unread(injector: Injector) -> None:
    conn = http.client.HTTPSConnection("127.0.0.1", injector.port, context=injector.context, timeout=10)
    try:
        conn.putrequest("POST", "/mutate")
        conn.putheader("Content-Type", "application/json")
        conn.putheader("Content-Length", str(64 * 1024 * 1024))
        conn.endheaders()
        response = conn.getresponse()
        assert response.status == 413
    finally:
        conn.close()


def test_item1_plain_http_and_an_untrusted_client_ca_get_nothing(injector: Injector) -> None:
    """TLS only: the API server calls webhooks over HTTPS and checks the certificate against the caBundle."""
    plain = http.client.HTTPConnection("127.0.0.1", injector.port, timeout=5)

    def plain_request() -> None:
        plain.request("GET", "/healthz")
        plain.getresponse()

    with pytest.raises((http.client.HTTPException, ConnectionError, OSError)):
        plain_request()
    plain.close()
    stranger = ssl.create_default_context(cafile=None)
    stranger.load_verify_locations(cadata=trustme.CA().cert_pem.bytes().decode())
    conn = http.client.HTTPSConnection("127.0.0.1", injector.port, context=stranger, timeout=5)
    with pytest.raises(ssl.SSLCertVerificationError):
        conn.request("GET", "/healthz")
    conn.close()
    assert injector.request("GET", "/healthz") == (200, {"ok": True})


def test_item1_a_chosen_service_account_replaces_the_pods(tmp_path: Path) -> None:
    started = Injector(tmp_path, "--service-account", "jupyter-suspend-sidecar", "--platform-config-map", "")
    try:
        pod = workspace_pod()
        pod["spec"]["serviceAccount"] = "ws-research"  # the deprecated alias some clients still set
        after = patched(pod, started.review(pod))
        validate_pod(after)
        assert after["spec"]["serviceAccountName"] == "jupyter-suspend-sidecar"
        assert "serviceAccount" not in after["spec"]
        env = {e["name"]: e for e in after["spec"]["containers"][0]["env"]}
        assert env["JUPYTER_CONFIG_PATH"]["value"] == "/etc/jupyter-suspend"
    finally:
        started.stop()


def test_item1_the_manifests_start_the_injector_as_the_test_does() -> None:
    """deploy/injector: the Deployment runs the same module and flags; the webhook opts in by label, fails open."""
    docs = kustomize(REPO / "deploy" / "injector")
    (deployment,) = [d for d in docs if d["kind"] == "Deployment"]
    (webhook_config,) = [d for d in docs if d["kind"] == "MutatingWebhookConfiguration"]
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert container["command"][:3] == ["python", "-m", "jupyter_suspend.injector"]
    # The injector's own parser reads the Deployment's arguments; the cert and key are where the Secret is mounted.
    from jupyter_suspend.injector.server import build_parser, config_from

    args = build_parser().parse_args(container["args"])
    (tls,) = container["volumeMounts"]
    assert {Path(args.cert).parent, Path(args.key).parent} == {Path(tls["mountPath"])}
    assert args.port == container["ports"][0]["containerPort"]
    assert config_from(args).sidecar_args == ("--workload", "workspace")
    assert args.image == container["image"]
    (webhook,) = webhook_config["webhooks"]
    assert webhook["objectSelector"] == {"matchLabels": {mutation.OPT_IN_LABEL: "true"}}
    assert webhook["failurePolicy"] == "Ignore"
    assert webhook["sideEffects"] == "None"
    assert webhook["admissionReviewVersions"] == ["v1"]
    assert webhook["rules"] == [
        {
            "apiGroups": [""],
            "apiVersions": ["v1"],
            "operations": ["CREATE"],
            "resources": ["pods"],
            "scope": "Namespaced",
        }
    ]
    assert webhook["clientConfig"]["service"]["path"] == "/mutate"
    for doc in docs:
        kubernetes_validate.validate(doc, K8S_VERSION, strict=True)
