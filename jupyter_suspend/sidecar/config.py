"""Command-line flags of the sidecar; each has an environment-variable default."""

from __future__ import annotations

import argparse
import ipaddress
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from ..common.sidecar_protocol import (
    DEFAULT_SECRET_PATH,
    DEFAULT_SOCKET_PATH,
    WORKLOAD_MODES,
    is_dns1123_label,
    is_dns1123_subdomain,
    is_label_key,
    is_label_value,
)

SA_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
DEFAULT_TOKEN_FILE = f"{SA_DIR}/token"
DEFAULT_CA_FILE = f"{SA_DIR}/ca.crt"
DEFAULT_NAMESPACE_FILE = f"{SA_DIR}/namespace"

POLICY_MODES = ("create", "require")
#: The policy mode of a sidecar started with ``--workload notebook|workspace``: no snapshots at all.
POLICY_OFF = "off"
POST_CHECKPOINT = ("stop", "resume")

_DURATION = re.compile(r"\d+[smhd]")
_API_VERSION = re.compile(r"v[1-9][0-9]*(?:(?:alpha|beta)[1-9][0-9]*)?")


class ConfigError(ValueError):
    """A flag or environment value that cannot work; the message says which."""


def is_object_name(value: str) -> bool:
    """A pod or custom-resource name (DNS-1123 subdomain; see :mod:`~jupyter_suspend.common.sidecar_protocol`)."""
    return is_dns1123_subdomain(value)


@dataclass(frozen=True)
class Config:
    pod_name: str
    namespace: str
    pod_uid: str | None
    socket_path: str | None
    listen: tuple[str, int] | None
    secret_path: str
    token_file: str
    ca_file: str
    policy_mode: str
    policy_name: str
    storage_config: str | None
    post_checkpoint: str
    retention: str | None
    policy_selector: dict[str, str] = field(default_factory=dict)
    #: Client-side timeout of each Kubernetes API call, seconds.
    kube_timeout: float = 15.0
    #: Version of the podsnapshot.gke.io API (older clusters: v1alpha1).
    api_version: str = "v1"
    log_level: str = "INFO"
    #: ``none`` (GKE Pod Snapshots), ``notebook`` or ``workspace`` (stop the own pod's Kubeflow owner).
    workload: str = "none"
    #: Seconds for a request's headers to arrive (and an idle connection to be kept), and again for its body.
    request_timeout: float = 10.0
    #: Open connections at most; further ones are closed at once.
    max_connections: int = 1024


def parse_selector(text: str) -> dict[str, str]:
    """``a=b,c=d`` -> ``{"a": "b", "c": "d"}`` (label keys and values validated)."""
    selector: dict[str, str] = {}
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        key, sep, value = part.partition("=")
        key, value = key.strip(), value.strip()
        if not sep or not is_label_key(key) or not is_label_value(value):
            raise ConfigError(f"--policy-selector: {part!r} is not a label key=value pair")
        selector[key] = value
    return selector


def parse_listen(text: str) -> tuple[str, int]:
    """``127.0.0.1:PORT`` or ``[::1]:PORT``; anything but loopback is refused."""
    host, sep, port_text = text.rpartition(":")
    host = host.strip("[]")
    try:
        address = ipaddress.ip_address(host)
        port = int(port_text)
    except ValueError:
        raise ConfigError(f"--listen {text!r}: expected 127.0.0.1:PORT") from None
    if not sep or not address.is_loopback:
        raise ConfigError(f"--listen {text!r}: only a loopback address is allowed (the API acts on this pod)")
    if not 0 < port < 65536:
        raise ConfigError(f"--listen {text!r}: port out of range")
    return str(address), port


def _read_text(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8") as f:
            return f.read().strip() or None
    except OSError:
        return None


def build_parser(env: Mapping[str, str]) -> argparse.ArgumentParser:
    def default(name: str, fallback: str | None = None) -> str | None:
        return env.get(name) or fallback

    p = argparse.ArgumentParser(
        prog="jupyter-suspend-sidecar",
        description=(
            "Requests GKE Pod Snapshots of the pod it runs in, on behalf of the jupyter-suspend server "
            "extension in the notebook container. The only holder of the pod's Kubernetes token; "
            "acts on its own pod only. Every flag defaults to the environment variable named in its help."
        ),
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    ident = p.add_argument_group("own pod (downward API)")
    ident.add_argument("--pod-name", default=default("POD_NAME"), help="this pod's name [env POD_NAME]")
    ident.add_argument(
        "--pod-namespace",
        default=default("POD_NAMESPACE"),
        help="this pod's namespace [env POD_NAMESPACE; else the service-account namespace file]",
    )
    ident.add_argument("--pod-uid", default=default("POD_UID"), help="this pod's uid [env POD_UID]")

    srv = p.add_argument_group("listening")
    srv.add_argument(
        "--socket",
        default=default("SIDECAR_SOCKET", DEFAULT_SOCKET_PATH),
        help="Unix socket to listen on, in a volume shared with the notebook container [env SIDECAR_SOCKET]",
    )
    srv.add_argument(
        "--listen",
        default=default("SIDECAR_LISTEN"),
        help="listen on loopback TCP 127.0.0.1:PORT instead of the socket (platforms without a shared "
        "volume; other addresses are refused) [env SIDECAR_LISTEN]",
    )
    srv.add_argument(
        "--secret",
        default=default("SIDECAR_SECRET", DEFAULT_SECRET_PATH),
        help="file the per-start bearer secret is written to (mode 0600) [env SIDECAR_SECRET]",
    )

    srv.add_argument(
        "--request-timeout",
        type=float,
        default=float(default("SIDECAR_REQUEST_TIMEOUT", "10") or 10),
        help="seconds for a request's headers to arrive, and again for its body; an idle connection is "
        "closed after it [env SIDECAR_REQUEST_TIMEOUT]",
    )
    srv.add_argument(
        "--max-connections",
        type=int,
        default=int(default("SIDECAR_MAX_CONNECTIONS", "1024") or 1024),
        help="open connections at most; further ones are closed at once [env SIDECAR_MAX_CONNECTIONS]",
    )

    sa = p.add_argument_group("Kubernetes service account")
    sa.add_argument("--token-file", default=default("SA_TOKEN_FILE", DEFAULT_TOKEN_FILE), help="[env SA_TOKEN_FILE]")
    sa.add_argument("--ca-file", default=default("SA_CA_FILE", DEFAULT_CA_FILE), help="[env SA_CA_FILE]")
    sa.add_argument(
        "--namespace-file",
        default=default("SA_NAMESPACE_FILE", DEFAULT_NAMESPACE_FILE),
        help="read when no namespace is given [env SA_NAMESPACE_FILE]",
    )
    sa.add_argument(
        "--kube-timeout",
        type=float,
        default=float(default("KUBE_TIMEOUT", "15") or 15),
        help="client-side timeout of each API call, seconds [env KUBE_TIMEOUT]",
    )

    wl = p.add_argument_group("Kubeflow workload")
    wl.add_argument(
        "--workload",
        choices=WORKLOAD_MODES,
        default=default("WORKLOAD", "none"),
        help="notebook / workspace: instead of snapshots, stop the Kubeflow Notebook (annotation "
        "kubeflow-resource-stopped) or Workspace (spec.paused) that owns this pod, named by the pod's own label; "
        "the snapshot-policy flags are then not used [env WORKLOAD]",
    )

    pol = p.add_argument_group("snapshot policy")
    pol.add_argument(
        "--policy-mode",
        choices=POLICY_MODES,
        default=default("POLICY_MODE", "create"),
        help="create: the sidecar creates a per-pod PodSnapshotPolicy if it is missing; "
        "require: it only reads the policy the platform team installed [env POLICY_MODE]",
    )
    pol.add_argument(
        "--policy-name",
        default=default("POLICY_NAME"),
        help="PodSnapshotPolicy name (required with require; default jupyter-suspend-<pod> with create) "
        "[env POLICY_NAME]",
    )
    pol.add_argument(
        "--policy-selector",
        default=default("POLICY_SELECTOR"),
        help="create mode: label selector of the policy, key=value[,key=value...]; it must match this pod "
        "and the pod that replaces it, and no other pod [env POLICY_SELECTOR]",
    )
    pol.add_argument(
        "--storage-config",
        default=default("STORAGE_CONFIG"),
        help="create mode: PodSnapshotStorageConfig name (required) [env STORAGE_CONFIG]",
    )
    pol.add_argument(
        "--post-checkpoint",
        choices=POST_CHECKPOINT,
        default=default("POST_CHECKPOINT", "stop"),
        help="create mode: what the pod does after the checkpoint (stop releases the node) [env POST_CHECKPOINT]",
    )
    pol.add_argument(
        "--retention",
        default=default("SNAPSHOT_RETENTION", "7d"),
        help="create mode: lastAccessTimeout of the policy, e.g. 7d; 'none' keeps snapshots until deleted "
        "[env SNAPSHOT_RETENTION]",
    )
    pol.add_argument(
        "--api-version",
        default=default("PODSNAPSHOT_API_VERSION", "v1"),
        help="version of the podsnapshot.gke.io API [env PODSNAPSHOT_API_VERSION]",
    )
    p.add_argument("--log-level", default=default("LOG_LEVEL", "INFO"), help="[env LOG_LEVEL]")
    return p


def parse_config(argv: Sequence[str] | None = None, env: Mapping[str, str] | None = None) -> Config:
    env = os.environ if env is None else env
    args = build_parser(env).parse_args(argv)

    if not args.pod_name or not is_object_name(args.pod_name):
        raise ConfigError("the pod name is missing or invalid: set --pod-name or POD_NAME (downward API)")
    namespace = args.pod_namespace or _read_text(args.namespace_file)
    if not namespace or not is_dns1123_label(namespace):
        raise ConfigError(
            f"the namespace is unknown: set --pod-namespace or POD_NAMESPACE, or mount {args.namespace_file}"
        )
    listen = parse_listen(args.listen) if args.listen else None

    selector: dict[str, str] = {}
    storage_config = args.storage_config or None
    retention = None if (args.retention or "").lower() in ("", "none") else args.retention
    policy_mode = args.policy_mode
    if args.workload not in WORKLOAD_MODES:  # from the environment: argparse checks only the flag
        raise ConfigError(f"--workload {args.workload!r}: expected one of {', '.join(WORKLOAD_MODES)}")
    if args.workload != "none":
        # No snapshots: the policy flags (and their requirements) do not apply.
        policy_mode, policy_name, storage_config, retention = POLICY_OFF, "", None, None
    elif args.policy_mode == "require":
        if not args.policy_name:
            raise ConfigError("--policy-mode require needs --policy-name (the policy the platform team installed)")
        policy_name = args.policy_name
    else:
        policy_name = args.policy_name or f"jupyter-suspend-{args.pod_name}"[:253]
        selector = parse_selector(args.policy_selector or "")
        if not selector:
            raise ConfigError(
                "--policy-mode create needs --policy-selector (labels that select this pod and its replacement, "
                "e.g. statefulset.kubernetes.io/pod-name=<pod>)"
            )
        if not storage_config:
            raise ConfigError("--policy-mode create needs --storage-config (a PodSnapshotStorageConfig name)")
        if not is_object_name(storage_config):
            raise ConfigError(f"--storage-config {storage_config!r} is not a valid object name")
        if retention is not None and not _DURATION.fullmatch(retention):
            raise ConfigError(f"--retention {retention!r}: expected a duration such as 7d, 12h or 'none'")
    if policy_mode != POLICY_OFF and not is_object_name(policy_name):
        raise ConfigError(f"--policy-name {policy_name!r} is not a valid object name")
    if not _API_VERSION.fullmatch(args.api_version or ""):  # it becomes part of every request's path
        raise ConfigError(f"--api-version {args.api_version!r}: expected a Kubernetes API version such as v1")
    if args.kube_timeout <= 0:
        raise ConfigError("--kube-timeout must be positive")
    if not 0 < args.request_timeout <= 3600:
        raise ConfigError("--request-timeout must be between 0 and 3600 seconds")
    if args.max_connections < 8:
        raise ConfigError("--max-connections must be at least 8")
    return Config(
        pod_name=args.pod_name,
        namespace=namespace,
        pod_uid=args.pod_uid or None,
        socket_path=None if listen else args.socket,
        listen=listen,
        secret_path=args.secret,
        token_file=args.token_file,
        ca_file=args.ca_file,
        policy_mode=policy_mode,
        policy_name=policy_name,
        storage_config=storage_config,
        post_checkpoint=args.post_checkpoint,
        retention=retention,
        policy_selector=selector,
        kube_timeout=args.kube_timeout,
        log_level=args.log_level,
        api_version=args.api_version,
        workload=args.workload,
        request_timeout=args.request_timeout,
        max_connections=args.max_connections,
    )
