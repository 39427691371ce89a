"""How a ``jupyter suspend`` command reaches the Kubernetes API: the caller's own credentials.

A kubeconfig (``--kubeconfig``, ``$KUBECONFIG``, ``~/.kube/config``; ``--context``)
or, inside a pod (a platform job), the in-cluster service account. The
``kubernetes`` package is the ``cli`` extra: a command that needs it says how
to install it instead of failing with an ImportError.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from traitlets import Unicode

from .base import BASE_FLAGS, CommandApp, NoCredentials, UsageError

if TYPE_CHECKING:
    from kubernetes import client

SA_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"

KUBE_ALIASES: dict[Any, Any] = {
    "namespace": "KubeCommandApp.namespace",
    "n": "KubeCommandApp.namespace",
    "kubeconfig": "KubeCommandApp.kubeconfig",
    "context": "KubeCommandApp.context",
}


class KubeCommandApp(CommandApp):
    """A command that talks to the Kubernetes API."""

    namespace = Unicode(
        "", help="The namespace (default: the kubeconfig context's, or the service account's in a pod)."
    ).tag(config=True)
    kubeconfig = Unicode("", help="The kubeconfig file (default: $KUBECONFIG, then ~/.kube/config).").tag(config=True)
    context = Unicode("", help="The kubeconfig context (default: the current one).").tag(config=True)
    token_file = Unicode(f"{SA_DIR}/token", help="In a pod without a kubeconfig: the service-account token.").tag(
        config=True
    )
    ca_file = Unicode(f"{SA_DIR}/ca.crt", help="In a pod without a kubeconfig: the cluster CA.").tag(config=True)
    namespace_file = Unicode(f"{SA_DIR}/namespace", help="In a pod without a kubeconfig: its namespace.").tag(
        config=True
    )

    flags = BASE_FLAGS
    aliases = KUBE_ALIASES

    _api: client.ApiClient | None = None
    _resolved_namespace = ""

    def url_retries(self) -> Any:
        """urllib3's retry policy for the API client; ``None`` keeps the kubernetes client's default (urllib3's
        ``Retry.DEFAULT``, which also retries 413/429/503 answers carrying ``Retry-After`` by itself, unseen)."""
        return None

    def api_client(self) -> client.ApiClient:
        """The API client (made once); a ``UsageError`` when no credentials can be found."""
        if self._api is None:
            self._api, self._resolved_namespace = connect(
                kubeconfig=self.kubeconfig,
                context=self.context,
                token_file=self.token_file,
                ca_file=self.ca_file,
                namespace_file=self.namespace_file,
                retries=self.url_retries(),
            )
        return self._api

    def server_only(self, url: str) -> bool:
        """Ask the notebook server at ``url`` alone: a URL was given and no Kubernetes credentials exist."""
        return bool(url) and not credentials_available(self.kubeconfig, self.token_file)

    def target_namespace(self) -> str:
        if self.namespace:
            return self.namespace
        self.api_client()
        return self._resolved_namespace or "default"


def connect(
    *,
    kubeconfig: str = "",
    context: str = "",
    token_file: str,
    ca_file: str,
    namespace_file: str,
    retries: Any = None,
) -> tuple[client.ApiClient, str]:
    """An API client and the default namespace of the credentials found; ``retries``: urllib3's retry policy
    (kubernetes.client.Configuration.retries; ``None``: the client's default)."""
    try:
        from kubernetes import client, config
        from kubernetes.config.incluster_config import InClusterConfigLoader
    except ImportError:
        raise UsageError("this command needs the Kubernetes client: pip install 'jupyter_suspend[cli]'") from None

    path = kubeconfig or os.environ.get("KUBECONFIG", "").split(os.pathsep)[0] or str(Path.home() / ".kube" / "config")
    if Path(path).is_file():
        configuration = client.Configuration()
        try:
            config.load_kube_config(
                config_file=path, context=context or None, client_configuration=configuration, persist_config=False
            )
            _, active = config.list_kube_config_contexts(config_file=path)
            if context:
                contexts, _ = config.list_kube_config_contexts(config_file=path)
                active = next((c for c in contexts if c.get("name") == context), active)
        except config.ConfigException as exc:
            raise UsageError(f"kubeconfig {path}: {exc}") from None
        namespace = str((active or {}).get("context", {}).get("namespace") or "default")
        if retries is not None:
            configuration.retries = retries
        return client.ApiClient(configuration), namespace
    if kubeconfig:
        raise UsageError(f"kubeconfig {kubeconfig} does not exist")
    if Path(token_file).is_file() and os.environ.get("KUBERNETES_SERVICE_HOST"):
        configuration = client.Configuration()
        InClusterConfigLoader(token_filename=token_file, cert_filename=ca_file, environ=os.environ).load_and_set(
            configuration
        )
        try:
            namespace = Path(namespace_file).read_text().strip() or "default"
        except OSError:
            namespace = "default"
        if retries is not None:
            configuration.retries = retries
        return client.ApiClient(configuration), namespace
    raise NoCredentials(NO_CREDENTIALS)


NO_CREDENTIALS = (
    "no Kubernetes credentials: give --kubeconfig, set $KUBECONFIG, or run in a pod with a service account "
    "(status, resume and snapshots list can ask the notebook server alone: --url)"
)


def credentials_available(kubeconfig: str, token_file: str) -> bool:
    """Whether :func:`connect` would find credentials (a kubeconfig named explicitly counts, even a missing one:
    that is the caller's error to hear about)."""
    if kubeconfig:
        return True
    path = os.environ.get("KUBECONFIG", "").split(os.pathsep)[0] or str(Path.home() / ".kube" / "config")
    return Path(path).is_file() or (Path(token_file).is_file() and bool(os.environ.get("KUBERNETES_SERVICE_HOST")))


def api_failure(exc: BaseException) -> str | None:
    """One line for an error of the Kubernetes API — an answer with an error status (with the server's own message,
    e.g. RBAC's "cannot get resource ...") or no answer at all; ``None`` for any other error (a bug: let it show)."""
    import json

    from kubernetes.client.exceptions import ApiException
    from urllib3.exceptions import HTTPError

    if isinstance(exc, ApiException):
        said = ""
        try:
            said = str(json.loads(exc.body or "{}").get("message") or "")
        except (ValueError, AttributeError):
            said = ""
        line = f"{exc.status} {exc.reason or ''}".strip()
        return f"ApiException: {line}: {said}" if said else f"ApiException: {line}"
    if isinstance(exc, (HTTPError, OSError)):
        text = str(exc).splitlines()[0][:300] if str(exc) else ""
        return f"{exc.__class__.__name__}: {text}" if text else exc.__class__.__name__
    return None
