"""What ``kip848 serve`` reports to: its observers, given by whoever starts the server (the
CLI wires ``coordinator.observability`` in, as it gives the runtime its observer). The server
layer says here what it needs observed and imports nothing of observability (an import-linter
contract); observability implements these shapes without importing the server either.

Without observers (``None``: a server embedded in a test) nothing is observed: no request
metrics, spans or audit lines, no metrics endpoint.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Protocol

from .rpc import RpcObserver

AuthenticationFailed = Callable[[str, str, str, str], None]
"""Called with (listener, mechanism, peer, reason) for each client refused before it
authenticated (the gRPC servicers, TLS handshakes, the Kafka listener)."""

ConnectionRefused = Callable[[str, str, str], None]
"""Called with (listener, the limit's setting, the client's IP address) for each connection
closed as it was accepted because it was over a connection limit (``conn_limits.py``)."""

ForwardTimer = Callable[[int], Callable[[bool, bool], None]]
"""The Kafka listener's ``on_forward``: called with the API key of a request forwarded to the
upstream; what it returns is called with (answered, timed out): (True, False) once the answer
is back, (False, False) if the connection closed first, (False, True) if the upstream did not
answer in time."""


class MetricsEndpoint(Protocol):
    """The metrics endpoint, once serving."""

    port: int

    def close(self) -> None: ...


class ServeObservers(Protocol):
    """The server's observers (``coordinator.observability.serving.ServeObservability``)."""

    def rpcs(self) -> RpcObserver:
        """Observes every RPC of the service layer: metrics, spans, audit lines
        (``catalog.observe_rpcs``)."""
        ...

    def authentication_failed(self) -> AuthenticationFailed:
        """What the transports call with each client refused before it authenticated."""
        ...

    def connection_refused(self) -> ConnectionRefused:
        """What the listeners call with each connection refused by a connection limit."""
        ...

    def authorization_refused(self) -> Callable[[Any], None]:
        """What the authorizer calls with each refusal (``Authorizer.on_refused``)."""
        ...

    def forwarded(self, api_name: Callable[[int], str]) -> ForwardTimer | None:
        """The Kafka listener's hook for forwarded requests (``api_name``: Kafka's name of an
        API key); None: they are not observed."""
        ...

    def start_metrics_endpoint(
        self,
        runtime: Any,
        host: str,
        port: int,
        *,
        frontends: Callable[[], Mapping[int, int]] | None = None,
        tls: Any = None,
        cluster: Callable[[], dict[str, int] | None] | None = None,
    ) -> MetricsEndpoint:
        """Serve the runtime's metrics on ``host:port`` (``frontends``: calls in flight per
        front-end process; ``tls``: the endpoint's ``ServerTls``; ``cluster``: a node among
        several, its health and counters). OSError if it cannot bind."""
        ...

    def close(self) -> None:
        """Serving is over: flush what is still queued (spans for the exporter)."""
        ...
