"""The sidecar's own parts that need no Kubernetes API: its configuration, its import boundary, names by
Kubernetes' rules, the client without a sidecar, and the classification of transport errors. The sidecar against
an API server -- its sessions, failures, refusals, Role, hostile input -- is tests/test_cluster_sidecar.py, on the
real control plane."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from jupyter_suspend.common import sidecar_protocol as proto
from jupyter_suspend.server.sidecar_client import SidecarClient, SidecarUnavailable
from jupyter_suspend.sidecar.config import ConfigError, parse_config

ROOT = Path(__file__).resolve().parent.parent
NAMESPACE = "team-a"
POD = "notebook-0"
POD_LABELS = {"app": "notebook", "statefulset.kubernetes.io/pod-name": POD}
STORAGE = "suspend-store"
run = asyncio.run

CREATE_ARGS = [
    "--policy-mode",
    "create",
    "--policy-selector",
    "app=notebook,statefulset.kubernetes.io/pod-name=notebook-0",
    "--storage-config",
    STORAGE,
]
REQUIRE_ARGS = ["--policy-mode", "require", "--policy-name", "notebook-snapshots"]


def test_sidecar_never_imports_the_server_extension() -> None:
    code = (
        "import json, sys\n"
        "from jupyter_suspend.sidecar import app\n"
        "app._skip_manifest_validation()  # as main() does; the import takes seconds otherwise\n"
        "import jupyter_suspend.sidecar.app, jupyter_suspend.sidecar.kube, jupyter_suspend.sidecar.__main__\n"
        "bad = ('jupyter_server', 'jupyter_suspend.server', 'jupyter_suspend.kernel', 'ipykernel', 'IPython',"
        " 'jupyter_client', 'traitlets')\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in bad or m.startswith(bad))))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=60, check=True)
    assert json.loads(out.stdout) == []


def test_configuration_is_checked_before_anything_starts(tmp_path: Path) -> None:
    env = {"POD_NAME": POD, "POD_NAMESPACE": NAMESPACE}
    config = parse_config(REQUIRE_ARGS, env)
    assert (config.pod_name, config.namespace, config.policy_name) == (POD, NAMESPACE, "notebook-snapshots")
    assert (config.socket_path, config.secret_path) == (proto.DEFAULT_SOCKET_PATH, proto.DEFAULT_SECRET_PATH)
    assert config.token_file == "/var/run/secrets/kubernetes.io/serviceaccount/token"
    create = parse_config([*CREATE_ARGS, "--retention", "none"], env)
    assert (create.policy_selector, create.retention, create.post_checkpoint) == (POD_LABELS, None, "stop")
    assert parse_config([*REQUIRE_ARGS, "--listen", "127.0.0.1:8765"], env).listen == ("127.0.0.1", 8765)
    (tmp_path / "namespace").write_text("from-file\n")
    assert (
        parse_config([*REQUIRE_ARGS, "--namespace-file", str(tmp_path / "namespace")], {"POD_NAME": POD}).namespace
        == "from-file"
    )

    refused = [
        ([*REQUIRE_ARGS, "--listen", "0.0.0.0:8765"], env, "loopback"),
        ([*REQUIRE_ARGS, "--listen", "10.1.2.3:8765"], env, "loopback"),
        ([*REQUIRE_ARGS, "--listen", "localhost:8765"], env, "127.0.0.1:PORT"),
        (["--policy-mode", "require"], env, "--policy-name"),
        (["--policy-mode", "create", "--storage-config", STORAGE], env, "--policy-selector"),
        (["--policy-mode", "create", "--policy-selector", "app=notebook"], env, "--storage-config"),
        ([*CREATE_ARGS, "--policy-selector", "app"], env, "key=value"),
        ([*CREATE_ARGS, "--retention", "a week"], env, "duration"),
        (REQUIRE_ARGS, {"POD_NAMESPACE": NAMESPACE}, "pod name"),
        ([*REQUIRE_ARGS, "--namespace-file", str(tmp_path / "none")], {"POD_NAME": POD}, "namespace"),
    ]
    for argv, environ, words in refused:
        with pytest.raises(ConfigError, match=words):
            parse_config(argv, environ)

    # The command line says so and exits 2, without importing the kubernetes client.
    out = subprocess.run(
        [sys.executable, "-m", "jupyter_suspend.sidecar", "--listen", "0.0.0.0:1"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, **env, "POLICY_MODE": "require", "POLICY_NAME": "p"},
        timeout=30,
    )
    assert out.returncode == 2, out.stderr
    assert "only a loopback address is allowed" in out.stderr
    help_text = subprocess.run(
        [sys.executable, "-m", "jupyter_suspend.sidecar", "--help"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=30,
    ).stdout
    help_text = " ".join(help_text.split())
    for variable in ("POD_NAME", "POD_NAMESPACE", "POD_UID", "POLICY_MODE", "POLICY_SELECTOR", "STORAGE_CONFIG"):
        assert f"env {variable}" in help_text


def test_client_without_a_sidecar(tmp_path: Path) -> None:
    client = SidecarClient(str(tmp_path / "sidecar.sock"), str(tmp_path / "sidecar.secret"), timeout=2)
    assert run(client.healthy()) is False
    with pytest.raises(SidecarUnavailable, match="is the sidecar container running"):
        run(client.pod())
    (tmp_path / "sidecar.secret").write_text("s")
    with pytest.raises(SidecarUnavailable, match="is the sidecar container running"):
        run(client.request_snapshot())


@pytest.mark.parametrize(
    ("check", "good", "bad"),
    [
        (
            proto.is_dns1123_subdomain,
            ["a", "a.b", "a-b.c-d", "0", "a" * 253, ".".join(["a" * 63] * 4)[:253].rstrip(".")],
            ["", "a\n", "a..b", "a.-b", "a-.b", "-a", "a-", ".a", "a.", "A", "a_b", "a b", "a" * 254, "a/b", "é"],
        ),
        (proto.is_dns1123_label, ["a", "a-b", "a" * 63], ["a.b", "a\n", "a" * 64, "-a", "A", ""]),
        (proto.is_label_value, ["", "a", "A_b.c-d", "a" * 63], ["a\n", "-a", "a" * 64, "a b", "a/b"]),
        (proto.is_trigger_name, ["notebook-0-20260101-000000-abcdef", "a" * 63], ["a" * 64, "a\n", "a..b", "A"]),
        (
            proto.is_label_key,
            ["app", "statefulset.kubernetes.io/pod-name", "a_b"],
            ["a\n", "/a", "a..b/c", "a/", "a" * 64, "x/y/z"],
        ),
    ],
)
def test_item6_names_by_kubernetes_rules(check: Any, good: list[str], bad: list[str]) -> None:
    for name in good:
        assert check(name), name
    for name in bad:
        assert not check(name), name


@pytest.mark.parametrize(
    "args",
    [
        ["--pod-name", "notebook-0\n"],
        ["--pod-name", "a..b"],
        ["--pod-namespace", "team.a"],
        ["--policy-name", "p\n"],
        ["--api-version", "v1/../../api"],
        ["--api-version", "v1\n"],
    ],
)
def test_item6_configured_names_are_checked_at_start(args: list[str]) -> None:
    base = ["--pod-name", POD, "--pod-namespace", NAMESPACE, *REQUIRE_ARGS]
    with pytest.raises(ConfigError):
        parse_config([*base, *args], env={})
    with pytest.raises(ConfigError, match="storage-config"):
        parse_config(["--pod-name", POD, "--pod-namespace", NAMESPACE, *CREATE_ARGS[:-1], "store\n"], env={})
    assert parse_config(base, env={}).pod_name == POD


def test_item8_new_connection_error_is_not_taken_for_a_timeout() -> None:
    """The trap of item 8, pinned: urllib3's NewConnectionError (and NameResolutionError) subclass
    ConnectTimeoutError, so the classification tests them first."""
    import socket

    import urllib3

    from jupyter_suspend.sidecar.config import parse_config
    from jupyter_suspend.sidecar.errors import Fault
    from jupyter_suspend.sidecar.kube import PodSnapshots

    errors = urllib3.exceptions
    assert issubclass(errors.NewConnectionError, errors.ConnectTimeoutError)
    assert issubclass(errors.NameResolutionError, errors.NewConnectionError)
    config = parse_config([*REQUIRE_ARGS, "--pod-name", POD, "--pod-namespace", NAMESPACE], env={})
    from kubernetes import client

    kube = PodSnapshots(config, client.ApiClient(client.Configuration()))
    conn = urllib3.connection.HTTPSConnection("api.example", 443)
    cases = [
        (errors.NewConnectionError(conn, "Failed to establish a new connection: [Errno 111] Connection refused"), 502,
         proto.E_KUBE_REFUSED),
        (errors.NameResolutionError("api.example", conn, socket.gaierror(-2, "Name or service not known")), 502,
         proto.E_KUBE_DNS),
        (errors.ConnectTimeoutError(conn, "timed out"), 504, proto.E_KUBE_TIMEOUT),
        (errors.ReadTimeoutError(None, "/", "read timed out"), 504, proto.E_KUBE_TIMEOUT),  # type: ignore[arg-type]
        (errors.SSLError("certificate verify failed"), 502, proto.E_KUBE_TLS),
        (errors.ProtocolError("Connection aborted."), 502, proto.E_KUBE_UNAVAILABLE),
    ]  # fmt: skip
    for exc, status, code in cases:
        with pytest.raises(Fault) as fault:
            kube._transport_fault(exc, "get", "pods")
        assert (fault.value.status, fault.value.code) == (status, code), exc
        assert fault.value.next_step, exc
