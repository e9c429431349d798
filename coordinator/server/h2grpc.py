"""gRPC over HTTP/2 on libnghttp2: the coordinator's own gRPC listener (``--grpc-transport h2``).

Why: grpc.aio spends about 120 µs of event-loop CPU on each unary call, most of a steady
heartbeat's cost, and it takes calls from grpc-core strictly one at a time in arrival order:
a burst of 5,000 joins holds every other group's heartbeat back for over half a second
(docs/benchmarks.md, "Join storms"). Here HTTP/2 (framing, HPACK, flow control, protocol
checks) is libnghttp2's, through ``ngh2``'s sans-I/O ``Connection``; what is left in Python
is the gRPC layer, about 10 µs a call, and calls are taken up connection by connection as
their bytes arrive, like the Kafka listener's, and started fairly between connections, a
bounded number per loop iteration (``admission.py``), so a burst on some connections does not
hold back a call on another.

The server stands in for ``grpc.aio.Server`` where the coordinator uses one: handlers come
through ``add_generic_rpc_handlers`` (the same ``grpc.RpcMethodHandler`` objects: our raw
handlers, health, reflection), ``add_insecure_port`` binds (``tls``: TLS on every
connection), ``start``/``stop(grace)``. The servicers get a context with what they use of
``grpc.aio.ServicerContext``: ``invocation_metadata()``, ``peer()``, ``abort()``, ``write()``
(server streaming), ``time_remaining()``. It takes grpc-core's options by their names
(``grpc_options.py``), the same that configure grpc.aio.

What a gRPC client sees is what grpc-core's server answers (the gRPC over HTTP/2 spec; checked
against grpc.aio frame by frame in tests/e2e/test_grpc_conformance.py, the differences left in
docs/operations.md):

* a unary or server-streaming call runs once its one request message is whole, whether or not
  the client has ended its stream (a second message is INTERNAL);
* status and message in trailers (``grpc-status``, percent-encoded ``grpc-message``), or a
  Trailers-Only answer when no message was sent; an unknown method is UNIMPLEMENTED; a request
  that is not a POST or lacks ``te: trailers`` is reset (INTERNAL_ERROR) unanswered;
* ``grpc-timeout`` is a deadline: when it passes the call is answered DEADLINE_EXCEEDED at once
  and its handler cancelled (whether or not it had started), so its slot is free again; read
  as grpc-core reads it (values up to 10^9, past the spec's 8 digits; larger: no deadline);
* a request message larger than ``max_message_bytes`` is refused with RESOURCE_EXHAUSTED as
  soon as its length prefix arrives (never buffered), a larger answer likewise;
* ``gzip`` and ``deflate`` requests are decompressed (at most ``max_message_bytes`` out of each
  message), answers are not compressed; the ordinary response headers offer
  ``grpc-accept-encoding: identity, deflate, gzip``; an encoding grpc-core does not know is
  INTERNAL, one it knows but was disabled UNIMPLEMENTED, as grpc-core answers them;
* request metadata over the header-list size announced in SETTINGS_MAX_HEADER_LIST_SIZE
  (``absolute_max_metadata_size``) gets that call RESOURCE_EXHAUSTED with grpc-core's message
  (between ``max_metadata_size`` and it, a share rising to all, grpc-core's soft limit); the
  connection and its other calls go on; a non-gRPC request (a ``content-type`` other than
  ``application/grpc``, alone or followed by ``+`` or ``;``: ``h2wire.is_grpc``) gets HTTP 415;
* past ``max_concurrent_calls`` calls at once a new call is refused with RESOURCE_EXHAUSTED
  "Concurrent RPC limit exceeded!", before any work (grpc.aio's ``maximum_concurrent_rpcs``);
  a call counts once its handler starts (its request whole, its turn come), so neither streams
  that send nothing nor one client's calls waiting their turn can take every slot;
* with ``grpc.max_concurrent_streams``, a stream opened while that many are open is reset
  REFUSED_STREAM, that stream alone (ENHANCE_YOUR_CALM past that many in all before the client
  acknowledged the SETTINGS announcing it), as grpc-core's parser refuses it (``h2flow.py``);
* a client's RST_STREAM, or its connection closing, cancels the call's handler; however many
  streams a client resets, its connection goes on (grpc-core has no limit on them either);
* keepalive, the ping policy, idle and age limits as grpc-core's (``h2lifetime.py``);
* Kafka's connection limits, which grpc-core does not have (``limits``: per client IP address,
  with overrides, and in all; ``conn_limits.py``): a connection over one is closed as it is
  accepted, before its TLS handshake or anything is read;
* ``stop(grace)``: no new connections, grpc-core's graceful GOAWAY ("Server shutdown") on every
  connection (streams the client opens after the second are refused, so it retries them
  elsewhere), in-flight calls get ``grace`` seconds, then are cancelled and answered
  UNAVAILABLE "Cancelling all calls".

Memory a client can make a connection hold is bounded: a stream's window (announced as
``grpc.http2.lookahead_bytes``) is given back only as its handler consumes what came
(``h2flow.py``); a message larger than half a window that its handler waits for is
let past, one message limit per connection at a time; a connection holding more than a message
limit and 256 windows of requests no handler has read (a call not started yet counting its
header list and 1 KiB) refuses the call whose request is still arriving
(RESOURCE_EXHAUSTED). A client that does not read its answers is not read either
(``pause_writing``), and one whose windows hold back more than a message limit of them (or
those of over 1,024 calls) has its next calls wait, unstarted, until they go; a server-streaming writer's ``write`` (or
``yield``) is done once its message has gone through the client's flow-control windows and
while the socket's write buffer is under its high-water mark, as grpc-core's is: a client that does not read holds one message
of each stream beyond its windows (10,000 such streams of 1 KiB answers: 10 MB queued; they
were 1 MiB each before, 10 GB), and a latest-state stream (the push) skips the states that came
meanwhile.

This module is the server (binding, starting, stopping, finding a call's handler); a
connection and its calls are ``h2conn.py``, the request's and answer's headers ``h2wire.py``,
inbound windows ``h2flow.py``, keepalive and the connection's lifetime ``h2lifetime.py``.
"""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

import grpc
from ngh2 import Setting

from .admission import Admission, ReadTurns
from .conn_limits import ConnectionLimits, ConnectionQuotas
from .grpc_options import INFINITE_MS, GrpcOptions
from .h2conn import READ_BUDGET, H2Connection, _Call, run_call
from .h2flow import ARRIVING_WINDOWS
from .h2lifetime import HANDSHAKE_TIMEOUT_S
from .h2wire import CANCELLED_AT_STOP, TRAILERS_ONLY, accept_encoding
from .h2wire import format_peer as format_peer
from .h2wire import parse_timeout as parse_timeout
from .tls import ServerTls

LISTEN_BACKLOG = 4096


@dataclass(frozen=True, slots=True)
class _CallDetails:
    """What a generic handler is asked with (``grpc.HandlerCallDetails``)."""

    method: str
    invocation_metadata: Sequence[tuple[str, Any]]


class H2GrpcServer:
    """A gRPC server for unary, server-streaming and bidirectional calls (see the module's
    docstring); the methods the coordinator calls on a ``grpc.aio.Server``."""

    def __init__(
        self,
        max_message_bytes: int,
        *,
        reuseport: bool = False,
        max_concurrent_calls: int = 0,
        options: GrpcOptions | None = None,
        tls: ServerTls | None = None,
        limits: ConnectionLimits | None = None,
    ) -> None:
        options = options or GrpcOptions()
        self.options = options
        self.max_message_bytes = max_message_bytes
        self.tls = tls
        """TLS on every connection (``tls.py``; ALPN ``h2``); None: plaintext (h2c)."""
        # grpc-core's handshake timeout (grpc.aio is given TLS's on a TLS listener, as here)
        self.handshake_timeout_s = HANDSHAKE_TIMEOUT_S if tls is None else tls.handshake_timeout_s
        self.max_concurrent_calls = max_concurrent_calls
        self.reuseport = reuseport
        # grpc-core's soft and hard limits (the hard one is announced)
        self.absolute_max_metadata_size = options.absolute_max_metadata_size
        self.max_metadata_size = min(options.max_metadata_size, self.absolute_max_metadata_size)
        self.compression_enabled = options.compression_enabled_algorithms_bitset | 1  # identity
        self.response_headers: tuple[tuple[bytes, bytes], ...] = (
            *TRAILERS_ONLY,
            (b"grpc-accept-encoding", accept_encoding(self.compression_enabled)),
        )
        # what a connection may hold of requests no handler has read before a call whose request
        # is still arriving is refused: one message limit and the windows of 256 requests
        self.max_connection_unread_bytes = (
            max_message_bytes + ARRIVING_WINDOWS * options.http2_lookahead_bytes
        )
        self.settings = {
            Setting.INITIAL_WINDOW_SIZE: options.http2_lookahead_bytes,
            Setting.MAX_HEADER_LIST_SIZE: self.absolute_max_metadata_size,
        }
        # announced by each connection, not libnghttp2 (h2flow.StreamLimit; 0: none, grpc-core's
        # default)
        self.max_concurrent_streams = (
            0 if options.max_concurrent_streams == INFINITE_MS else options.max_concurrent_streams
        )
        self.connections: set[H2Connection] = set()
        # connections counted against Kafka's connection limits, as the Kafka listener's
        # (--max-connections-per-ip, its overrides, --max-connections: ``conn_limits.py``)
        self.quotas = ConnectionQuotas(limits, "grpc")
        # calls start fairly between groups (group_of: the group a call's request names,
        # fairness.GroupKeys.key), those naming none between connections
        self.group_of: Callable[[str, bytes], Hashable | None] | None = None
        self.admission: Admission[Hashable, _Call] = Admission(
            run_call, alive=lambda call: not call.finished
        )
        self.reads = ReadTurns(READ_BUDGET)  # what connections read, per loop iteration
        self.active = 0
        self.stopping = False
        self._generic: list[grpc.GenericRpcHandler] = []
        self._by_path: dict[str, grpc.RpcMethodHandler] = {}  # the paths we serve
        self._sockets: list[socket.socket] = []
        self._servers: list[Any] = []  # asyncio.AbstractServer, or tls.TlsServer
        self._idle: asyncio.Event | None = None

    def add_generic_rpc_handlers(self, handlers: Sequence[grpc.GenericRpcHandler]) -> None:
        self._generic.extend(handlers)
        self._by_path.clear()

    def add_registered_method_handlers(self, service: str, handlers: dict[str, Any]) -> None:
        """Nothing: generated ``add_*_to_server`` functions pass the same handlers to
        ``add_generic_rpc_handlers`` as well."""

    def handler(
        self, path: str, metadata: Sequence[tuple[str, Any]]
    ) -> grpc.RpcMethodHandler | None:
        try:
            return self._by_path[path]
        except KeyError:
            pass
        details = _CallDetails(path, tuple(metadata))
        for generic in self._generic:
            found = generic.service(details)  # type: ignore[arg-type]
            if found is not None:
                self._by_path[path] = found  # every handler we serve is chosen by its path
                return found
        return None  # not kept: a client naming ever new paths would grow the server

    def add_insecure_port(self, address: str) -> int:
        """Bind ``HOST:PORT`` (every address the host resolves to; port 0: one free port for
        all of them) and return the port. ``OSError`` if it cannot.

        Sockets are bound as grpc-core binds them: IPv6 with IPv4 mapped (``::ffff:A``,
        ``0.0.0.0`` as the dual-stack ``::``), so that with ``SO_REUSEPORT`` they share the
        port with the front ends' grpc-core sockets (the kernel prefers a plain IPv4 listener
        and would send every IPv4 connection to it)."""
        host, _, port_text = address.rpartition(":")
        port = int(port_text)
        infos = socket.getaddrinfo(
            host.strip("[]") or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )
        targets: list[tuple[int, str]] = []
        for resolved, _kind, _proto, _name, sockaddr in infos:
            target = (int(resolved), str(sockaddr[0]))
            if target[0] == socket.AF_INET and socket.has_ipv6:
                mapped = "::" if target[1] == "0.0.0.0" else f"::ffff:{target[1]}"
                target = (int(socket.AF_INET6), mapped)
            if target not in targets:
                targets.append(target)
        bound: list[socket.socket] = []
        try:
            for family, host_address in targets:
                sock = socket.socket(family, socket.SOCK_STREAM)
                bound.append(sock)
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                if self.reuseport:
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
                if family == socket.AF_INET6:
                    sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
                sock.bind((host_address, port))
                port = sock.getsockname()[1]  # port 0: the rest take the same one
                sock.listen(LISTEN_BACKLOG)  # the port is ours from now on
                sock.setblocking(False)
        except OSError:
            for sock in bound:
                sock.close()
            raise
        self._sockets.extend(bound)
        return port

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        for sock in self._sockets:
            server: Any
            if self.tls is not None:
                server = self.tls.serve([sock], partial(H2Connection, self), self.quotas)
            else:
                server = await loop.create_server(
                    lambda: H2Connection(self), sock=sock, backlog=LISTEN_BACKLOG
                )
            self._servers.append(server)

    def call_done(self) -> None:
        if self._idle is not None and self.active <= 0:
            self._idle.set()

    async def stop(self, grace: float | None) -> None:
        """Stop accepting, GOAWAY everywhere, ``grace`` seconds for the calls in flight
        (None: none), then cancel what is left (UNAVAILABLE) and close every connection."""
        self.stopping = True
        for server in self._servers:
            server.close()
        for conn in list(self.connections):
            if conn.lifetime is not None:
                conn.lifetime.goodbye(b"Server shutdown")
        if grace and self.active > 0:
            self._idle = asyncio.Event()
            deadline = time.monotonic() + grace
            while self.active > 0 and time.monotonic() < deadline:
                self._idle.clear()
                try:
                    await asyncio.wait_for(self._idle.wait(), deadline - time.monotonic())
                except TimeoutError:
                    break
        self.admission.clear()  # nothing starts any more
        tasks = [
            call.task
            for conn in self.connections
            for call in conn.calls.values()
            if call.task is not None and not call.task.done()
        ]
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
        for conn in list(self.connections):
            # A call never started (waiting for its turn), or whose task was cancelled before
            # its first step, was not answered by its handler: answered here.
            for call in list(conn.calls.values()):
                conn.finish(call, grpc.StatusCode.UNAVAILABLE, CANCELLED_AT_STOP)
            conn.close()
        for server in self._servers:
            await server.wait_closed()
