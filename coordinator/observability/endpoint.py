"""The metrics endpoint: ``http://HOST:PORT/metrics`` (``kip848 serve --metrics-listen``),
prometheus_client's own server in a daemon thread, or HTTPS with the listener's TLS."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

from prometheus_client import CollectorRegistry, start_http_server


@dataclass(slots=True)
class MetricsServer:
    """The HTTP endpoint (prometheus_client's own server, in a daemon thread)."""

    host: str
    port: int
    _server: Any
    _thread: threading.Thread

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5.0)


def serve_metrics(
    registry: CollectorRegistry, host: str, port: int, tls: Any = None
) -> MetricsServer:
    """Serve ``registry`` in the Prometheus text format (and OpenMetrics when asked) on
    ``http://host:port/metrics`` (any path answers). Port 0 picks a free port.

    ``tls`` (``coordinator.server.tls.ServerTls``): HTTPS. Each connection's handshake runs in
    its own request thread under the listener's handshake timeout, with the context current
    then (reloaded on SIGHUP): a client that is not speaking TLS, or says nothing, costs that
    thread its timeout and nothing else."""
    if tls is None:
        server, thread = start_http_server(port, addr=host.strip("[]"), registry=registry)
        return MetricsServer(host, server.server_port, server, thread)
    import socket
    from wsgiref.simple_server import WSGIRequestHandler, make_server

    from prometheus_client import make_wsgi_app
    from prometheus_client.exposition import ThreadingWSGIServer

    class Quiet(WSGIRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass

    class TlsWsgiServer(ThreadingWSGIServer):
        daemon_threads = True

        def process_request_thread(self, request: Any, client_address: Any) -> None:
            peer = f"{client_address[0]}:{client_address[1]}"
            try:
                request.settimeout(tls.handshake_timeout_s)
                request = tls.context.wrap_socket(request, server_side=True)
                request.settimeout(METRICS_REQUEST_TIMEOUT_S)
            except OSError as exc:  # ssl.SSLError, a timeout, a reset
                tls.handshake_failed(peer, exc)
                request.close()
                return
            super().process_request_thread(request, client_address)

    bind = host.strip("[]") or "0.0.0.0"
    family = socket.getaddrinfo(bind, port, type=socket.SOCK_STREAM)[0][0]
    TlsWsgiServer.address_family = family
    server = make_server(bind, port, make_wsgi_app(registry), TlsWsgiServer, handler_class=Quiet)
    thread = threading.Thread(target=server.serve_forever, name="kip848-metrics", daemon=True)
    thread.start()
    return MetricsServer(host, server.server_port, server, thread)


METRICS_REQUEST_TIMEOUT_S = 30.0
"""How long an HTTPS scrape may take once its handshake is done."""
