"""The HTTPS endpoint of ``jupyter-suspend-injector``: ``POST /mutate`` with an AdmissionReview v1.

``python -m jupyter_suspend.injector --cert tls.crt --key tls.key --port 8443 --image IMAGE``. The API server
calls webhooks over TLS only and checks the certificate against the MutatingWebhookConfiguration's ``caBundle``
(deploy/injector/README.md). ``GET /healthz`` answers 200 for the Deployment's probes. Anything else -- another
path or method, a body that is not JSON, too large, or not an AdmissionReview v1 -- is a 4xx and changes nothing.
"""

from __future__ import annotations

import argparse
import json
import logging
import ssl
import sys
import threading
from collections.abc import Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from .mutation import BadReview, InjectorConfig, review

log = logging.getLogger("jupyter_suspend.injector")

#: The API server sends at most the object (etcd's limit is 1.5 MiB by default) plus the review around it.
MAX_BODY = 4 * 1024 * 1024
#: Seconds a connection may stay silent (the API server's own webhook timeout is at most 30 s).
REQUEST_TIMEOUT = 15.0


class Handler(BaseHTTPRequestHandler):
    server: InjectorServer
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("%s %s", self.address_string(), format % args)

    def _send(self, code: int, body: Any) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        if self.path == "/healthz":
            self._send(200, {"ok": True})
        else:
            self._send(404, {"error": "not found"})

    def do_POST(self) -> None:
        if self.path.split("?", 1)[0] != "/mutate":
            self._send(404, {"error": "not found"})
            return
        if self.headers.get("Content-Type", "").split(";")[0].strip() != "application/json":
            self._send(415, {"error": "Content-Type must be application/json"})
            return
        try:
            length = int(self.headers.get("Content-Length", ""))
        except ValueError:
            self._send(411, {"error": "Content-Length required"})
            return
        if length < 0 or length > MAX_BODY:
            self.close_connection = True
            self._send(413, {"error": f"body larger than {MAX_BODY} bytes"})
            return
        raw = self.rfile.read(length)
        try:
            answer = review(json.loads(raw), self.server.config)
        except (ValueError, BadReview) as exc:  # json.JSONDecodeError is a ValueError
            self._send(400, {"error": str(exc) if isinstance(exc, BadReview) else "the body is not JSON"})
            return
        response = answer["response"]
        # The uid names the request in the API server's audit log.
        log.info("review %s: %s", response["uid"], "patched" if "patch" in response else "unchanged")
        self._send(200, answer)


class InjectorServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address: tuple[str, int], config: InjectorConfig, tls: ssl.SSLContext) -> None:
        super().__init__(address, Handler)
        self.config = config
        self.tls = tls

    def finish_request(self, request: Any, client_address: Any) -> None:
        """TLS per connection, in the connection's own thread: a slow or broken handshake holds up no one else."""
        request.settimeout(REQUEST_TIMEOUT)
        try:
            wrapped = self.tls.wrap_socket(request, server_side=True)
        except (ssl.SSLError, OSError) as exc:
            log.info("TLS handshake with %s failed: %s", client_address, exc)
            return
        try:
            super().finish_request(wrapped, client_address)
        finally:
            wrapped.close()


def tls_context(cert: str, key: str) -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(cert, key)
    return context


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="jupyter-suspend-injector",
        description="Mutating admission webhook: adds the jupyter-suspend sidecar to pods labelled "
        "jupyter-suspend.io/inject=true at creation.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument("--cert", required=True, help="TLS certificate (PEM), e.g. from the Secret cert-manager writes")
    p.add_argument("--key", required=True, help="TLS private key (PEM)")
    p.add_argument("--port", type=int, default=8443)
    p.add_argument("--host", default="0.0.0.0")
    p.add_argument("--image", required=True, help="the sidecar's image (the notebook image has the sidecar too)")
    p.add_argument(
        "--sidecar-arg",
        action="append",
        default=None,
        help="one argument of the sidecar (repeat); default: --workload workspace",
    )
    p.add_argument("--container", default="", help="the notebook container's name; default: the first container")
    p.add_argument("--jupyter-config-map", default="jupyter-suspend-jupyter-config")
    p.add_argument("--platform-config-map", default="jupyter-suspend-platform", help="'' for none")
    p.add_argument("--service-account", default="", help="run the pod as this ServiceAccount (default: keep)")
    p.add_argument("--token-seconds", type=int, default=3600)
    p.add_argument("--log-level", default="INFO")
    return p


def config_from(args: argparse.Namespace) -> InjectorConfig:
    return InjectorConfig(
        image=args.image,
        sidecar_args=tuple(args.sidecar_arg) if args.sidecar_arg else ("--workload", "workspace"),
        container=args.container,
        jupyter_config_map=args.jupyter_config_map,
        platform_config_map=args.platform_config_map,
        service_account=args.service_account,
        token_seconds=args.token_seconds,
    )


def serve(argv: Sequence[str] | None = None, ready: threading.Event | None = None) -> None:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s %(message)s")
    server = InjectorServer((args.host, args.port), config_from(args), tls_context(args.cert, args.key))
    log.info("jupyter-suspend-injector listening on https://%s:%d/mutate", args.host, server.server_address[1])
    if ready is not None:
        ready.set()
    try:
        server.serve_forever()
    finally:
        server.server_close()


def main() -> None:
    try:
        serve()
    except KeyboardInterrupt:
        sys.exit(0)
