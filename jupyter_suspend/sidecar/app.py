"""Entry point of the sidecar container: ``jupyter-suspend-sidecar`` / ``python -m jupyter_suspend.sidecar``.

Writes a fresh bearer secret, then serves the API on the Unix socket (or a
loopback port) until SIGTERM/SIGINT. Imports neither the server extension nor
jupyter_server: this container holds the Kubernetes token and nothing else.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import secrets
import signal
import stat
import sys
import tempfile
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from tornado.httpserver import HTTPServer
from tornado.iostream import IOStream, StreamClosedError
from tornado.netutil import bind_sockets, bind_unix_socket

from ..common.sidecar_protocol import E_TOO_BUSY
from .api import DRAIN_LIMIT, Context, make_app
from .config import Config, ConfigError, parse_config
from .redact import REDACTOR, install

log = logging.getLogger("jupyter_suspend.sidecar")

#: Worker threads for the API calls of ordinary requests (a pod read, a trigger create).
KUBE_THREADS = 8
#: Worker threads for long-poll watches alone (see kube.WATCH_SLOTS): abandoned long-polls
#: cannot take the threads ordinary requests need.
WATCH_THREADS = 8
#: Open connections are capped (``--max-connections``, default 1024: above 200 busy + 300 idle
#: ones); a request's headers, and then its body, must arrive within ``--request-timeout``: a
#: drip-fed request holds a connection no longer.
MAX_HEADER_BYTES = 16 * 1024


class BoundedHTTPServer(HTTPServer):
    """tornado's HTTPServer with a cap on open connections."""

    def initialize(self, *args: Any, max_connections: int = 1024, **kwargs: Any) -> None:
        super().initialize(*args, **kwargs)
        self.max_connections = max_connections
        self._last_refusal_log = 0.0
        self._refusing: set[asyncio.Future[None]] = set()

    def handle_stream(self, stream: IOStream, address: Any) -> None:
        if len(self._connections) >= self.max_connections:
            now = time.monotonic()
            if now - self._last_refusal_log > 10:
                self._last_refusal_log = now
                log.warning("%d connections open: refusing further ones", len(self._connections))
            task = asyncio.ensure_future(_refuse(stream))
            self._refusing.add(task)  # referenced until done (the loop keeps only weak references)
            task.add_done_callback(self._refusing.discard)
            return
        super().handle_stream(stream, address)


_BUSY_BODY = json.dumps(
    {
        "error": E_TOO_BUSY,
        "message": "the sidecar holds its maximum of open connections",
        "retryable": True,
        "next_step": "try again in a moment; close connections you no longer use",
    }
).encode()
_BUSY = (
    b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nConnection: close\r\n"
    + f"Content-Length: {len(_BUSY_BODY)}\r\n\r\n".encode()
    + _BUSY_BODY
)


async def _refuse(stream: IOStream) -> None:
    """Answer 503 ``too_busy`` without reading the request, then close."""
    try:
        await asyncio.wait_for(stream.write(_BUSY), 1.0)
    except (StreamClosedError, asyncio.TimeoutError):
        pass
    finally:
        stream.close()


def write_secret(path: str) -> bytes:
    """A fresh random secret, written atomically with mode 0600 (temp file + rename)."""
    secret = secrets.token_urlsafe(32)
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, mode=0o770, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".sidecar-secret-", dir=directory)  # mkstemp creates with 0600
    try:
        os.fchmod(fd, 0o600)
        with os.fdopen(fd, "w", encoding="ascii") as f:
            f.write(secret)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return secret.encode("ascii")


def _remove(path: str | None) -> None:
    if path:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)


def _listen(server: HTTPServer, config: Config) -> str:
    if config.listen is not None:
        host, port = config.listen
        for sock in bind_sockets(port, address=host, backlog=config.max_connections):
            server.add_socket(sock)
        return f"http://{host}:{port}"
    assert config.socket_path
    directory = os.path.dirname(os.path.abspath(config.socket_path))
    os.makedirs(directory, mode=0o770, exist_ok=True)
    with contextlib.suppress(FileNotFoundError):
        if not stat.S_ISSOCK(os.lstat(config.socket_path).st_mode):
            raise ConfigError(f"{config.socket_path} exists and is not a socket; refusing to replace it")
    # bind_unix_socket replaces a stale socket file and sets the mode. A Unix socket refuses
    # connects (EAGAIN) while its backlog is full: room for a burst up to the connection cap.
    server.add_socket(bind_unix_socket(config.socket_path, mode=0o660, backlog=config.max_connections))
    return f"unix:{config.socket_path}"


def _skip_manifest_validation() -> None:
    """``import kubernetes`` loads its dynamic client, which imports kubernetes_validate
    when that happens to be installed (jsonschema with all its format checkers: 2.5 s
    of start time, 6-9 s on a loaded node). The sidecar never validates manifests, and
    the notebook container waits for its socket: this process goes without."""
    sys.modules.setdefault("kubernetes_validate", None)  # type: ignore[arg-type]


async def serve(config: Config) -> None:
    # Imported here: the kubernetes client takes a second to import, and
    # ``--help`` or a configuration error should answer at once.
    from .kube import PodSnapshots, api_client_from_files
    from .workload import OwnerWorkload

    executor = ThreadPoolExecutor(max_workers=KUBE_THREADS, thread_name_prefix="kube")
    watch_executor = ThreadPoolExecutor(max_workers=WATCH_THREADS, thread_name_prefix="watch")
    api_client = api_client_from_files(config)
    kube = PodSnapshots(config, api_client, executor, watch_executor)
    owner = OwnerWorkload(kube)
    secret = write_secret(config.secret_path)
    REDACTOR.add(secret)
    ctx = Context(config, kube, secret, owner if owner.enabled() else None)
    server = BoundedHTTPServer(
        make_app(ctx),
        max_body_size=DRAIN_LIMIT,
        idle_connection_timeout=config.request_timeout,  # tornado's header timeout, also for keep-alive
        body_timeout=config.request_timeout,
        max_header_size=MAX_HEADER_BYTES,
        max_connections=config.max_connections,
    )
    try:
        where = _listen(server, config)
    except BaseException:
        _remove(config.secret_path)
        raise
    log.info(
        "listening on %s for pod %s/%s (uid %s), workload %s, policy mode %s (policy %s), podsnapshot.gke.io/%s",
        where,
        config.namespace,
        config.pod_name,
        config.pod_uid or "unknown",
        config.workload,
        config.policy_mode,
        config.policy_name,
        config.api_version,
    )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        await stop.wait()
    finally:
        log.info("stopping")
        server.stop()
        _remove(config.socket_path)
        _remove(config.secret_path)
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(server.close_all_connections(), 2.0)
        executor.shutdown(wait=False, cancel_futures=True)
        watch_executor.shutdown(wait=False, cancel_futures=True)
        api_client.close()


def main(argv: Sequence[str] | None = None) -> None:
    try:
        config = parse_config(argv)
    except ConfigError as exc:
        print(f"jupyter-suspend-sidecar: {exc}", file=sys.stderr)
        sys.exit(2)
    logging.basicConfig(
        level=getattr(logging, config.log_level.upper(), logging.INFO),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    install()
    _skip_manifest_validation()
    from kubernetes.config.config_exception import ConfigException

    try:
        asyncio.run(serve(config))
    except ConfigError as exc:
        log.error("%s", exc)
        sys.exit(2)
    except (ConfigException, OSError) as exc:
        # no KUBERNETES_SERVICE_HOST, no token or CA file, socket path not writable
        log.error("cannot start: %s: %s", type(exc).__name__, exc)
        sys.exit(1)
    # A long-poll may still hold a worker thread inside a watch (up to 30 s):
    # do not wait for it at interpreter exit.
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
