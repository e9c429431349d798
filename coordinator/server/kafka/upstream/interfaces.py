"""What the Kafka listener and its upstream side know of each other: three small protocols, so
that the upstream package imports nothing of the listener and the listener (with its helpers)
sees the upstream only as a :class:`Forwarder`.

* :class:`Forwarder` — what the listener asks of the upstream: the versions it forwards, a
  client's request forwarded (its answer filling the request's place in the connection's
  answer order, or a future), an answer naming brokers rewritten to name ours.
  ``broker.Upstream`` is the one there is.
* :class:`ClientConnection` — what forwarding needs of a client connection
  (``listener.KafkaConnection``): its node and security, a place in its answer order, its
  upstream connection and that connection's flow control.
* :class:`NodePorts` — what the upstream needs of the Kafka listener: a port of its own for
  each upstream broker (``listener.KafkaListener``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, Protocol

from ...api import Node
from ..security import ListenerSecurity


class UpstreamTimedOut(TimeoutError):
    """What a forwarded request's future (``Forwarder.forward_future``) gets when the upstream
    did not answer within ``kafka.upstream.request.timeout.ms`` plus the request's own wait:
    its connection and the client's are closed, the reason logged once."""


class ClientConnection(Protocol):
    """One client connection, as forwarding sees it."""

    @property
    def node(self) -> Node | None:
        """The upstream broker the client reached us for (the port it came through)."""

    @property
    def security(self) -> ListenerSecurity | None:
        """Its listener's security (None: PLAINTEXT): the ports an answer names are its own."""

    @property
    def max_unsent_bytes(self) -> int:
        """``kafka.connection.max.unsent.bytes``: its upstream connection's write limit too."""

    upstream_conn: Any
    """Its connection to the upstream (``broker.UpstreamConnection``), made at its first
    forwarded request; None until then."""

    upstream_paused: bool
    """Whether its reading is held because the upstream is not taking its requests."""

    def expect(self) -> object:
        """The next place in its answer order, for a forwarded request."""

    def complete(self, slot: Any, data: bytes | None) -> None:
        """Fill a place :meth:`expect` gave (None: a request without a response)."""

    def fail(self, why: str) -> None:
        """Close it, logging why."""

    def timed_out(self, slot: Any) -> None:
        """A place :meth:`expect` gave whose forwarded request had no answer in time (its
        connection is closed next): for the metrics."""

    def on_upstream_flow(self, paused: bool) -> None:
        """Its upstream connection's write buffer passed (True) or fell below (False) its
        limit."""


class NodePorts(Protocol):
    """The Kafka listener, as the upstream binds its brokers' ports on it."""

    def listen_now(self, host: str, security: ListenerSecurity | None = None) -> int:
        """Bind a free port on ``host`` now (served from the next loop turn); the port."""

    def set_node(self, port: int, node: Node) -> None:
        """The broker node a bound port stands for."""


class Forwarder(Protocol):
    """The upstream broker(s), as the listener and its helpers use them."""

    @property
    def versions(self) -> dict[int, tuple[int, int]]:
        """api key -> (min, max) the upstream offers (read at start)."""

    def forwarded_versions(self) -> dict[int, tuple[int, int]]:
        """api key -> (min, max) forwarded (what is not served here)."""

    def offers(self, key: int, version: int) -> bool:
        """Whether the upstream offers ``key`` at ``version`` (served here or not)."""

    def forwards(self, key: int, version: int) -> bool:
        """Whether ``key`` at ``version`` is forwarded."""

    def forward(
        self,
        conn: ClientConnection,
        key: int,
        version: int,
        frame: bytes,
        *,
        rewrite: bool | None = None,
        then: Callable[[bytes], bytes] | None = None,
    ) -> None:
        """Send a client's request frame (without its size) on its upstream connection; the
        answer fills the request's place in ``conn``'s answer order (rewritten if it names
        brokers, or as ``rewrite`` says; then passed through ``then``)."""

    def forward_future(
        self, conn: ClientConnection, key: int, version: int, frame: bytes
    ) -> asyncio.Future[bytes]:
        """Send a request frame (without its size) on ``conn``'s upstream connection; the
        future gets the response frame (without its size, not rewritten)."""

    def rewrite(
        self,
        key: int,
        version: int,
        frame: bytes,
        security: ListenerSecurity | None = None,
        named: list[tuple[str, str]] | None = None,
    ) -> bytes:
        """A response frame (without its size) naming brokers, rewritten to name the ports of
        the listener with ``security``; the response frame with its size."""

    def metadata_brokers(
        self, brokers: list[dict[str, Any]], security: ListenerSecurity | None
    ) -> list[dict[str, Any]]:
        """A Metadata answer's brokers as the listener with ``security`` names them, the
        coordinator nodes after them (``rewrite``'s, for ``metadata_answers``)."""
