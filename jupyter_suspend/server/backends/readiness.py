"""A readiness endpoint that fails while the pod is being suspended, so Kubernetes drops the pod from its Service
before the freeze (GKE Workspaces does the same with a readiness gate, then waits about 3 s for sockets to settle:
gke-labs/workspaces providers/gke/internal/snapshot/snapshot.go ``SocketSettleGracePeriod``).

``GET /ready`` (any path) answers 200 while serving and 503 while suspending. It listens on a port of its own, in
a thread of its own (plain ``http.server``: the kubelet's HTTP probe starts no process in the container, unlike an
exec probe, and nothing here depends on the server's event loop). The pod's readinessProbe points at it
(deploy/base/statefulset.yaml).
"""

from __future__ import annotations

import logging
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

log = logging.getLogger("jupyter_suspend.readiness")


class _Handler(BaseHTTPRequestHandler):
    server: ReadinessServer

    def log_message(self, format: str, *args: Any) -> None:
        return

    def do_GET(self) -> None:
        serving = self.server.serving.is_set()
        body = b"ready\n" if serving else b"suspending: out of the Service until the suspend ends\n"
        self.send_response(200 if serving else 503)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


class ReadinessServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, host: str, port: int) -> None:
        super().__init__((host, port), _Handler)
        self.serving = threading.Event()
        self.serving.set()
        self._thread = threading.Thread(target=self.serve_forever, name="jupyter-suspend-readiness", daemon=True)

    @property
    def port(self) -> int:
        return int(self.server_address[1])

    def start(self) -> ReadinessServer:
        self._thread.start()
        log.info("jupyter-suspend: readiness endpoint on port %d", self.port)
        return self

    def suspending(self) -> None:
        self.serving.clear()

    def ready(self) -> None:
        self.serving.set()

    def close(self) -> None:
        self.shutdown()
        self.server_close()
