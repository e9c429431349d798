"""The Kafka listener's connections: asyncio protocol, framing, ordering, limits, the SASL
gate's hookup, and each request routed — answered by the served requests (``served.py``, which
decides what is served here and in which versions), forwarded, or refused.

A connection reads size-prefixed frames. Each request gets a *slot* in the connection's
response order; responses are written strictly in request order (clients match them by
position as much as by correlation id). Served requests (``apis.SERVED``, ApiVersions,
Metadata without an upstream) run one at a time per connection, in order, so a parked classic
JoinGroup holds back the requests behind it, as Kafka's one-request-at-a-time channels do.
Forwarded requests (``upstream/broker.py``) go to the upstream at once; their answers fill
their slots.

Bad input, Kafka's way: an ApiVersions of an unknown version is answered in v0 format with
UNSUPPORTED_VERSION and ApiVersions' own range (Kafka's KIP-511 answer); any other unknown API
key or unsupported version, a frame whose header or body does not decode, a size below 0 or
above ``max_request_bytes`` (``socket.request.max.bytes``) closes that connection (logged, never
a crash) once the requests read before it are answered, as Kafka answers them; a connection with nothing in flight and nothing received for ``idle_ms``
(``connections.max.idle.ms``) is closed. Other connections are not affected. A connection
past Kafka's connection limits (``max.connections.per.ip``, its overrides, ``max.connections``:
``conn_limits.py``) is closed as it is accepted, before anything is read.

Flow control (``KafkaFlow``), so that no client can take the loop or the memory of all: a
connection reads frames while it has fewer than ``queued.max.requests`` requests unanswered,
fewer than ``queued.max.request.bytes`` of requests waiting for their turn, and its client (and
the upstream, for forwarded requests) takes what is written to it (the transport's write
buffer under ``kafka.connection.max.unsent.bytes``: asyncio's ``pause_writing`` /
``resume_writing``). Otherwise, and whenever complete frames wait in its buffer, the transport's
reading is paused (``pause_reading``), so the kernel holds the rest and a client that keeps
sending waits, as TCP makes it wait in front of Kafka; reading resumes when answers go out. And
a connection works at most one turn (``FRAMES_PER_TURN`` requests or ``TURN_S``) per loop
iteration, reading or serving its queue, before the others get theirs.

Fair between groups (``admission.py``, as our gRPC server's calls): the first request of a
connection with nothing else to serve starts at once while the loop iteration's budget lasts;
past it, it waits its group's turn (the group id its body starts with, ``wire.group_of``; the
connection for requests that name none), one per group in turn. Kafka's consumers keep a
connection each, so a join storm of 10,000 members is 10,000 connections with a request each:
a heartbeat of another group read in the same loop iteration starts in the next one, not after
the storm's 10,000 first steps.
"""

from __future__ import annotations

import asyncio
import collections
import contextvars
import logging
import socket
import time
from collections.abc import Callable, Hashable
from typing import Any

from coordinator.security.principal import ANONYMOUS, KafkaPrincipal

from ..admission import Admission
from ..api import Caller, Node
from ..conn_limits import ConnectionQuotas, admit
from ..conn_limits import Slot as Counted
from ..eager import Resume
from ..service import CoordinatorService
from ..tls import keep_alive, listening_sockets, peer_subject
from . import admin_guard, apis, fetch_guard, sasl_gate, topic_guard, txn_guard, wire
from . import sasl as sasl_api
from .options import DEFAULT_IDLE_MS as DEFAULT_IDLE_MS
from .options import DEFAULT_MAX_REQUEST_BYTES as DEFAULT_MAX_REQUEST_BYTES
from .options import KafkaFlow as KafkaFlow
from .options import KafkaOptions
from .security import ListenerSecurity
from .served import KafkaApis, TransactionServer
from .upstream.interfaces import Forwarder, UpstreamTimedOut

log = logging.getLogger("kip848.kafka")

FRAMES_PER_TURN = 64
TURN_S = 0.002
ACL_WAIT_S = 0.01
"""While the ACLs load at start-up, how often a held connection looks again (``_awaiting_acls``)."""
"""One connection's share of a loop iteration: at most this many requests read, or this long
(the runtime's turn), before the others get theirs."""
GUARD_RULES = {**admin_guard.RULES, **txn_guard.RULES}
"""In front of a broker the listener authorizes for: each forwarded API's rule, except the
data APIs' (``topic_guard.GUARDED``)."""


class Slot:
    """One request's place in its connection's response order."""

    __slots__ = ("data", "done", "observed")

    def __init__(self) -> None:
        self.data: bytes | None = None
        self.done = False
        self.observed: Callable[[bool, bool], None] | None = None
        """A forwarded request's metrics hook (``on_forward``): called when it is answered."""


class KafkaListener:
    """Serves the Kafka protocol on one or more ports, over one :class:`CoordinatorService`.

    ``upstream`` (``upstream.Upstream``, seen as a ``Forwarder``) forwards everything that is
    not served here; without it the listener runs in coordinator-only mode (Metadata from the
    topic registry, no data APIs). ``node_of_port`` maps a bound port to the broker node it
    stands for."""

    def __init__(
        self,
        service: CoordinatorService,
        options: KafkaOptions | None = None,
        upstream: Forwarder | None = None,
        txn: TransactionServer | None = None,
    ) -> None:
        self.service = service
        self.options = options or KafkaOptions()
        self.upstream = upstream
        self.txn = txn
        """Transactions around the upstream's transaction coordinator (``transactions.py``)."""
        self.servers: list[Any] = []  # asyncio.AbstractServer, or tls.TlsServer
        self.nodes: dict[int, Node] = {}  # bound port -> the node it is
        self.security: dict[int, ListenerSecurity] = {}  # bound port -> its security
        self.connections: set[KafkaConnection] = set()
        self.quotas = ConnectionQuotas(self.options.limits, "kafka")
        """Connections counted against ``max.connections.per.ip`` and ``max.connections``, on
        every port (``conn_limits.py``); its ``on_refused`` is the metrics'."""
        self.served = KafkaApis(self)
        """The requests served here (``served.py``)."""
        self._idle_task: asyncio.Task[None] | None = None
        self._pending: set[asyncio.Task[None]] = set()
        self.admission: Admission[Hashable, tuple[KafkaConnection, Work]] = Admission(_admitted)
        """Connections' first requests, started fairly between groups (the module doc)."""
        self.closing = False
        self.on_auth_failed: Callable[[str, str, str, str], None] | None = None
        """Called with (listener, mechanism, peer, reason) for each client refused before it
        authenticated (metrics, audit: ``requests.authentication_observer``)."""
        self.authenticates = False
        """True when connections authenticate (SASL, client certificates): the start-up log
        stops calling the listener open to anonymous clients."""
        self.on_forward: Callable[[int], Callable[[bool, bool], None]] | None = None
        """Metrics (``coordinator.observability.requests.forwarded_timer``): called with the API
        key of each request forwarded to the upstream; what it returns is called with (True,
        False) once the answer is back, (False, False) if the connection closed first, (False,
        True) if the upstream did not answer in time (``kafka.upstream.request.timeout.ms``)."""

    # ------------------------------------------------------------ lifecycle

    async def listen(self, host: str, port: int, security: ListenerSecurity | None = None) -> int:
        """Bind one port; returns the bound port (port 0 picks a free one). Its accept queue
        is as long as the system allows (``SOMAXCONN``; asyncio's default is 100): thousands
        of consumers reconnecting at once, one connection each, wait there while the loop is
        busy instead of having their connection attempts dropped and retried a second later.
        ``security``: the listener's TLS and authentication (None: PLAINTEXT)."""
        loop = asyncio.get_running_loop()
        server: Any
        if security is not None and security.tls is not None:
            sockets = listening_sockets(host, port, socket.SOMAXCONN)
            server = security.tls.serve(sockets, self._connection, self.quotas)
        else:
            server = await loop.create_server(
                lambda: KafkaConnection(self),
                host.strip("[]") or None,
                port,
                reuse_address=True,
                backlog=socket.SOMAXCONN,
            )
        self.servers.append(server)
        bound = int(server.sockets[0].getsockname()[1])
        if security is not None:
            self.security[bound] = security
        if self._idle_task is None:
            self._idle_task = loop.create_task(self._expire_idle())
        return bound

    def listen_now(self, host: str, security: ListenerSecurity | None = None) -> int:
        """Bind a free port on ``host`` now and serve it from the next loop turn (connections
        made meanwhile wait in the backlog); returns the port."""
        loop = asyncio.get_running_loop()
        host = host.strip("[]")
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((host or ("::" if family == socket.AF_INET6 else "0.0.0.0"), 0))
            sock.listen(socket.SOMAXCONN)
            sock.setblocking(False)
        except OSError:
            sock.close()
            raise
        port = int(sock.getsockname()[1])
        if security is not None:
            self.security[port] = security
        task = loop.create_task(self._serve_socket(sock, security))
        self._pending.add(task)
        task.add_done_callback(self._pending.discard)
        return port

    async def _serve_socket(
        self, sock: socket.socket, security: ListenerSecurity | None = None
    ) -> None:
        if self.closing:
            sock.close()
            return
        server: Any
        if security is not None and security.tls is not None:
            server = security.tls.serve([sock], self._connection, self.quotas)
        else:
            server = await asyncio.get_running_loop().create_server(
                lambda: KafkaConnection(self), sock=sock, backlog=socket.SOMAXCONN
            )
        self.servers.append(server)

    def _connection(self, slot: Counted | None) -> KafkaConnection:
        return KafkaConnection(self, slot)

    def set_node(self, port: int, node: Node) -> None:
        self.nodes[port] = node

    async def close(self) -> None:
        """Stop accepting, then close every connection once its in-flight answers are out
        (bounded by the runtime's own shutdown, which answers parked requests)."""
        self.closing = True
        for task in list(self._pending):
            await task
        for server in self.servers:
            server.close()
        if self._idle_task is not None:
            self._idle_task.cancel()
        for conn in list(self.connections):
            conn.close_when_drained()
        for server in self.servers:
            await server.wait_closed()

    async def _expire_idle(self) -> None:
        idle_s = self.options.idle_ms / 1000
        while True:
            await asyncio.sleep(max(0.01, min(idle_s / 4, 30.0)))
            now = time.monotonic()
            for conn in list(self.connections):
                if not conn.slots and now - conn.last_active > idle_s:
                    log.info("Closing idle Kafka connection from %s.", conn.peer)
                    conn.close()


Work = tuple[Slot, int, int, int, "str | None", bytes, int]


class KafkaConnection(asyncio.Protocol):
    """One client connection (see the module doc)."""

    def __init__(self, listener: KafkaListener, slot: Counted | None = None) -> None:
        self.listener = listener
        self.counted = slot  # its count against the connection limits (conn_limits.py)
        self.transport: asyncio.Transport | None = None
        self.buffer = bytearray()
        self.slots: collections.deque[Slot] = collections.deque()
        self.work: collections.deque[Work] = collections.deque()
        self.worker: asyncio.Task[None] | None = None
        self.peer = "?"
        self.client_host = ""
        self.node: Node | None = None
        self.security: ListenerSecurity | None = None  # None: PLAINTEXT
        self.sasl: sasl_api.SaslSession | None = None  # SASL listeners: the exchange's state
        self._tls_out: list[bytes] | None = None  # TLS: answers coalesced per loop turn
        self.last_active = time.monotonic()
        self.closed = False
        self._drain_then_close = False
        self.upstream_conn: Any = None
        self.fetch_session: Any = None
        """The fetch session (KIP-227) the topic guard follows on this connection
        (``fetch_guard.FetchSession``), if any."""
        self._callers: dict[tuple[str | None, int], Caller] = {}
        self.principal: KafkaPrincipal = ANONYMOUS
        """Who is on this connection (:meth:`set_principal`); ANONYMOUS until authenticated."""
        self._forwarding: Callable[[bool, bool], None] | None = None  # for the next expect()
        # Flow control (the module doc): whether the transport reads, why it may not.
        self.reading = True
        self.queued_bytes = 0  # the frames in self.work
        self.writing_paused = False  # the client is not taking its answers
        self.upstream_paused = False  # the upstream is not taking our requests
        self._next_turn: asyncio.Handle | None = None
        self._writable: asyncio.Future[None] | None = None
        self.admitting = False  # a request waits for its group's turn (the module doc)

    # ------------------------------------------------------------ asyncio.Protocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self.counted = admit(self.counted, self.listener.quotas, transport)
        if self.counted is None:  # over a connection limit: closed, nothing read
            self.closed = True
            return
        keep_alive(transport)
        peer = transport.get_extra_info("peername")
        sock = transport.get_extra_info("sockname")
        if peer:
            self.peer = f"{peer[0]}:{peer[1]}"
            host = str(peer[0])  # an IPv4 client of an IPv6 socket is its IPv4 address (Java)
            self.client_host = "/" + (host[7:] if host.startswith("::ffff:") else host)
        if sock:
            self.node = self.listener.nodes.get(sock[1])
            self.security = self.listener.security.get(sock[1])
        unsent = self.max_unsent_bytes
        transport.set_write_buffer_limits(high=unsent, low=unsent // 4)  # type: ignore[attr-defined]
        self.listener.connections.add(self)
        security = self.security
        if security is not None and security.tls is not None:
            self._tls_out = []
        if security is not None and security.sasl:
            self.sasl = sasl_api.SaslSession(security.authenticator)
        if security is not None and security.tls is not None and not security.sasl:
            # SSL: the principal is the client certificate's subject, mapped (no certificate:
            # ANONYMOUS); with SASL_SSL the SASL exchange decides.
            subject = peer_subject(transport)
            if subject is not None:
                principal = security.certificate_principal(subject)
                if principal is None:
                    self.fail(f"no ssl.principal.mapping.rules rule applies to {subject!r}")
                    return
                self.set_principal(principal)
        if self.listener.closing:
            self.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self.counted is not None:
            self.counted.release()
        self.listener.connections.discard(self)
        for slot in self.slots:
            observed = slot.observed
            if observed is not None and not slot.done:
                slot.observed = None
                observed(False, False)  # a forwarded request never answered
        if self.worker is not None and not self.worker.done():
            self.worker.cancel()
        if self._next_turn is not None:
            self._next_turn.cancel()
        self._wake_writer()
        if self.upstream_conn is not None:
            self.upstream_conn.close()

    def data_received(self, data: bytes) -> None:
        self.last_active = time.monotonic()
        self.buffer += data
        if self._next_turn is None:
            self._read_frames()

    def pause_writing(self) -> None:
        """The client's unsent answers passed ``kafka.connection.max.unsent.bytes``: nothing more
        is read from it, nor from its upstream connection (answers to requests it forwarded)."""
        self.writing_paused = True
        if self.upstream_conn is not None:
            self.upstream_conn.pause_reading()
        self._flow()

    def resume_writing(self) -> None:
        self.writing_paused = False
        if self.upstream_conn is not None:
            self.upstream_conn.resume_reading()
        self._wake_writer()
        self._again()

    # ------------------------------------------------------------ flow control

    @property
    def max_unsent_bytes(self) -> int:
        """``kafka.connection.max.unsent.bytes``: the client's answers not yet taken (and the
        requests its upstream connection has not taken) beyond which reading pauses."""
        return self.listener.options.flow.max_unsent_bytes

    def _held(self) -> bool:
        """Whether this connection may read no more requests for now: too many unanswered,
        too many bytes waiting their turn, answers (or forwarded requests) not taken, the
        ACLs not loaded yet (:meth:`_awaiting_acls`), or a SASL/PLAIN password being checked
        (``sasl_checks``: then :meth:`read_on`)."""
        flow = self.listener.options.flow
        return (
            len(self.slots) >= flow.queued_max_requests
            or (self.queued_bytes >= flow.queued_max_request_bytes and bool(self.work))
            or self.writing_paused
            or self.upstream_paused
            or self._drain_then_close
            or self._awaiting_acls()
            or (self.sasl is not None and self.sasl.checking)
        )

    def _awaiting_acls(self) -> bool:
        """In front of a broker (whose data requests the listener authorizes, or forwards
        unread when no ACL exists) and on a SASL listener (credentials), the connection's
        requests are decided on the cluster log's ACLs and credentials: until they are loaded
        at start-up, nothing is read — as a Kafka broker serves its clients once its metadata
        is loaded — and the connection looks again every ``ACL_WAIT_S``. Coordinator-only
        PLAINTEXT and SSL listeners read on: the service layer answers their requests
        COORDINATOR_LOAD_IN_PROGRESS meanwhile (``Authorizer.ready``)."""
        listener = self.listener
        if (listener.upstream is None and self.sasl is None) or listener.service.authorizer.ready:
            return False
        if self._next_turn is None and not self.closed:
            self._next_turn = asyncio.get_running_loop().call_later(ACL_WAIT_S, self._read_frames)
        return True

    def _read_frames(self) -> None:
        """Serve the complete frames in the buffer while the limits allow, for at most one
        turn (``FRAMES_PER_TURN`` frames or ``TURN_S``): then the rest waits for the next loop
        iteration, behind every other connection's."""
        self._next_turn = None
        buf = self.buffer
        pos, end = 0, len(buf)
        started = time.monotonic()
        served = 0
        while end - pos >= 4 and not self.closed and not self._held():
            if served >= FRAMES_PER_TURN or (served and time.monotonic() - started > TURN_S):
                self._again()
                break
            limit = self.listener.options.max_request_bytes
            if self.sasl is not None and self.sasl.state != sasl_api.AUTHENTICATED:
                # Kafka's sasl.server.max.receive.size, during any exchange: before the first
                # authentication and during a re-authentication (KIP-368) alike.
                limit = sasl_api.MAX_RECEIVE_BYTES
            size = int.from_bytes(buf[pos : pos + 4], "big", signed=True)
            if size < 0 or size > limit:
                self.refuse(f"request of {size} bytes (socket.request.max.bytes is {limit})")
                break
            if end - pos - 4 < size:
                break
            with memoryview(buf) as view:  # one copy of the frame, not two
                frame = bytes(view[pos + 4 : pos + 4 + size])
            pos += 4 + size
            served += 1
            self.on_frame(frame)
        if pos:
            del buf[:pos]
        self._flow()

    def read_on(self) -> None:
        """Read on once what held the connection is over (a SASL check)."""
        self._again()

    def _again(self) -> None:
        """Read on from the buffer at the next loop iteration (once)."""
        if self._next_turn is None and not self.closed:
            self._next_turn = asyncio.get_running_loop().call_soon(self._read_frames)

    def _flow(self) -> None:
        """Pause the transport's reading while frames wait in the buffer or a limit holds this
        connection; resume it otherwise. A client that keeps sending then fills the kernel's
        buffers and waits (TCP's flow control), as it would in front of a Kafka broker."""
        transport = self.transport
        if transport is None or self.closed:
            return
        hold = self._next_turn is not None or self._held()
        if hold and self.reading:
            transport.pause_reading()
            self.reading = False
        elif not hold and not self.reading:
            transport.resume_reading()
            self.reading = True

    def on_upstream_flow(self, paused: bool) -> None:
        """The upstream connection's own write buffer passed (or fell below) its limit."""
        self.upstream_paused = paused
        if paused:
            self._flow()
        else:
            self._again()

    def _wake_writer(self) -> None:
        waiter, self._writable = self._writable, None
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def _until_writable(self) -> None:
        """Wait while the client is not taking its answers (or the connection closes)."""
        while self.writing_paused and not self.closed:
            self._writable = asyncio.get_running_loop().create_future()
            await self._writable

    # ------------------------------------------------------------ requests

    def on_frame(self, frame: bytes) -> None:
        try:
            key, version, correlation_id, client_id, pos = wire.parse_header(frame)
        except wire.WireError as exc:
            self.refuse(f"unreadable request header: {exc}")
            return
        listener = self.listener
        if self.sasl is not None and sasl_gate.intercept(
            self, key, version, correlation_id, frame, pos
        ):
            return
        if key == apis.API_VERSIONS:
            slot = self._slot()
            try:
                data = listener.served.api_versions(
                    version, correlation_id, frame, pos, self.sasl is not None
                )
            except wire.WireError as exc:
                self.slots.pop()  # its own: never answered
                self.refuse(str(exc))
                return
            if self.sasl is not None and not self.sasl.authenticated:
                # Kafka's authenticator moves on only after an answer without error (its error
                # code opens the v0-headed body): an UNSUPPORTED_VERSION or INVALID_REQUEST one
                # may be retried.
                self.sasl.versions_answered = data[8:10] == b"\0\0"
            self.complete(slot, data)
            return
        if self.sasl is None and listener.upstream is None and key in sasl_api.SASL_APIS:
            self._sasl_without_sasl(key, version, correlation_id, frame, pos)
            return
        if key == apis.FIND_COORDINATOR and listener.upstream is not None:
            entity = self._decoded(key, version, frame, pos, listener.served.element_budget())
            if entity is None:
                return
            if getattr(entity, "key_type", 0) != 0 and key in listener.upstream.versions:
                # Transaction (and other) coordinators stay upstream; the answer names ours —
                # among several nodes, the node serving a transactional id (txn_routing.py).
                routed = None
                if listener.txn is not None and entity.key_type == txn_guard.TRANSACTION:
                    routed = listener.txn.found(
                        version, entity, self.caller(client_id, version), listener.service
                    )
                if topic_guard.guards(self):
                    rule = txn_guard.RULES[key]
                    admin_guard.forward(
                        self,
                        rule,
                        key,
                        version,
                        correlation_id,
                        client_id,
                        entity,
                        frame,
                        rewrite=True,
                        after=routed,
                    )
                    return
                self.forward(key, version, frame, rewrite=True, then=routed)
                return
        served = listener.served.served_versions(self, key)
        if served is not None:
            lo, hi = served
            if not lo <= version <= hi:
                self.refuse(f"{wire.api_name(key)} v{version} is not supported (v{lo}-v{hi})")
                return
            item = (self._slot(), key, version, correlation_id, client_id, frame, pos)
            if self.worker is None and not self.work and not self.admitting:
                self.admitting = True
                group = wire.group_of(key, version, frame, pos)
                listener.admission.start(self if group is None else group, (self, item))
            else:
                self.work.append(item)
                self.queued_bytes += len(frame)
            return
        if listener.upstream is not None and listener.upstream.forwards(key, version):
            if topic_guard.guards(self):
                self._forward_guarded(key, version, correlation_id, client_id, frame, pos)
                return
            self.fetch_session = None  # unguarded: no session is followed (fetch_guard)
            self.forward(key, version, frame)
            return
        mode = (
            "" if listener.upstream is not None else " (coordinator-only mode: no --kafka-upstream)"
        )
        self.refuse(f"API key {key} ({wire.api_name(key)}) v{version} is not served{mode}")

    def _sasl_without_sasl(
        self, key: int, version: int, correlation_id: int, frame: bytes, pos: int
    ) -> None:
        """SaslHandshake or SaslAuthenticate on a coordinator-only listener without SASL (a
        client set up for SASL against a PLAINTEXT or SSL port): answered ILLEGAL_SASL_STATE,
        as Kafka's KafkaApis answers them there, so the client says what is wrong rather than
        seeing its connection closed. (With an upstream they go to the broker, as before.)"""
        lo, hi = sasl_api.SASL_APIS[key]
        if not lo <= version <= hi:
            self.refuse(f"{wire.api_name(key)} v{version} is not supported (v{lo}-v{hi})")
            return
        if self._decoded(key, version, frame, pos) is None:
            return
        self.complete(self._slot(), sasl_gate.illegal_sasl_state(key, version, correlation_id))

    def _forward_guarded(
        self,
        key: int,
        version: int,
        correlation_id: int,
        client_id: str | None,
        frame: bytes,
        pos: int,
    ) -> None:
        """A request to forward in front of a broker the listener authorizes for: judged by
        the topic guard (data APIs), the fetch guard, or the API's rule (``admin_guard``,
        ``txn_guard``). An API without a rule (one this coordinator does not know) cannot be
        checked, so it is not forwarded: the connection is closed."""
        rule = GUARD_RULES.get(key)
        if key not in topic_guard.GUARDED and rule is None:
            self.refuse(
                f"{wire.api_name(key)} v{version} cannot be authorized here and is not "
                "forwarded while ACLs are in force"
            )
            return
        entity = self._decoded(key, version, frame, pos)
        if entity is None:
            return
        if rule is not None:
            admin_guard.forward(self, rule, key, version, correlation_id, client_id, entity, frame)
            return
        guard = fetch_guard if key == apis.FETCH else topic_guard
        guard.forward(self, key, version, correlation_id, client_id, entity, frame)

    def forward(
        self,
        key: int,
        version: int,
        frame: bytes,
        then: Callable[[bytes], bytes] | None = None,
        rewrite: bool | None = None,
    ) -> None:
        """Forward a request frame (without its size) to the upstream; its answer fills the
        next slot (``rewrite`` and ``then``: as ``Upstream.forward`` takes them)."""
        upstream = self.listener.upstream
        assert upstream is not None  # only what the upstream forwards comes here
        self._observe_forward(key)
        try:
            upstream.forward(self, key, version, frame, rewrite=rewrite, then=then)
        except wire.WireError as exc:  # a Produce whose acks cannot be read
            self._forwarding = None
            self.refuse(str(exc))

    def answer(self, data: bytes | None) -> None:
        """Answer the request just read, here and now (None: a request without a response)."""
        self.complete(self._slot(), data)

    def _decoded(
        self, key: int, version: int, frame: bytes, pos: int, max_elements: int | None = None
    ) -> Any:
        """A request's body, or None after closing the connection when it does not decode
        (``max_elements``: ``wire.decode``'s)."""
        try:
            offset = wire.body_offset(frame, key, version, pos)
            return wire.decode(key, version, frame, offset, max_elements)
        except wire.WireError as exc:
            self.refuse(str(exc))
            return None

    def _slot(self) -> Slot:
        slot = Slot()
        self.slots.append(slot)
        return slot

    def expect(self) -> Slot:
        """A slot for a forwarded request (``upstream/broker.py``)."""
        slot = self._slot()
        slot.observed, self._forwarding = self._forwarding, None
        return slot

    def _observe_forward(self, key: int) -> None:
        """The request about to be forwarded is measured (metrics on): its slot gets the hook."""
        on_forward = self.listener.on_forward
        if on_forward is not None:
            self._forwarding = on_forward(key)

    def set_principal(self, principal: KafkaPrincipal) -> None:
        """The connection authenticated as ``principal`` (SASL, a client certificate, a
        re-authentication): the requests read after this call carry it."""
        self.principal = principal
        self._callers.clear()

    def caller(self, client_id: str | None, version: int) -> Caller:
        """Who sends a request on this connection (one per client id and version, reused;
        with the connection's principal)."""
        cache_key = (client_id, version)
        caller = self._callers.get(cache_key)
        if caller is None:
            if len(self._callers) >= 64:
                self._callers.clear()
            caller = self._callers[cache_key] = Caller(
                client_id=client_id or "",
                client_host=self.client_host,
                api_version=version,
                node=self.node,
                principal=self.principal,
            )
        return caller

    def admitted(self, item: Work) -> None:
        """The request's turn came (``KafkaListener.admission``): serve it, then what this
        connection read meanwhile."""
        self.admitting = False
        if self.closed:
            return
        self._serve_now(item)
        if self.worker is None and self.work:
            self.worker = asyncio.get_running_loop().create_task(self._drain_then_idle())

    async def _drain_then_idle(self) -> None:
        try:
            await self._drain()
        finally:
            self.worker = None

    def _serve_now(self, item: Work) -> None:
        """Serve a request with nothing ahead of it on this connection, eagerly: most requests
        (a steady heartbeat) finish without waiting for anything, so they run to completion
        here, with no task. One that must wait (for a durable write, a join barrier) is
        handed to a task that finishes it, and later requests queue behind it."""
        coro = self._serve_one(item)
        context = contextvars.copy_context()  # the request's own, as a task would have
        try:
            waiting = context.run(coro.send, None)
        except StopIteration:
            return
        self.worker = asyncio.get_running_loop().create_task(
            self._finish(coro, waiting), context=context
        )

    async def _finish(self, coro: Any, waiting: Any) -> None:
        try:
            if await Resume(coro, waiting):
                await self._drain()
        finally:
            self.worker = None

    async def _drain(self) -> None:
        """Serve the queued requests in order, one loop turn at a time, and only while the
        client takes its answers."""
        started, served = time.monotonic(), 0
        while self.work and not self.closed:
            if served >= FRAMES_PER_TURN or time.monotonic() - started > TURN_S:
                await asyncio.sleep(0)
                started, served = time.monotonic(), 0
            if self.writing_paused:
                await self._until_writable()
                continue
            item = self.work.popleft()
            self.queued_bytes -= len(item[5])
            served += 1
            if not await self._serve_one(item):
                return
            if not self.reading:
                self._again()  # waiting bytes may be read now

    async def _serve_one(self, item: Work) -> bool:
        """Serve one request and fill its slot; False if the connection was closed."""
        slot, key, version, correlation_id, client_id, frame, pos = item
        try:
            data = await self.listener.served.serve(
                self, key, version, correlation_id, client_id, frame, pos
            )
        except wire.WireError as exc:
            self._forget_from(slot)
            self.refuse(str(exc))
            return False
        except UpstreamTimedOut:  # the upstream closed this connection, saying why
            self.close()
            return False
        except Exception:
            log.exception(
                "Unexpected error serving %s v%d from %s; closing the connection.",
                wire.api_name(key),
                version,
                self.peer,
            )
            self.close()
            return False
        self.complete(slot, data)
        return True

    def complete(self, slot: Slot, data: bytes | None) -> None:
        """Fill a slot (None: a request without a response, Produce with acks=0) and write
        every answer that is now at the head of the order."""
        slot.data = data
        slot.done = True
        observed = slot.observed
        if observed is not None:
            slot.observed = None
            observed(True, False)
        slots = self.slots
        if not slots or slots[0] is not slot:
            return  # not (or no longer: _forget_from) in the order
        out = []
        while slots and slots[0].done:
            head = slots.popleft()
            if head.data is not None:
                out.append(head.data)
        self.last_active = time.monotonic()
        transport = self.transport
        if out and transport is not None and not transport.is_closing():
            if self._tls_out is None:
                transport.write(out[0] if len(out) == 1 else b"".join(out))
            else:
                # TLS: every write is a record of its own (encrypted, framed, sent), so the
                # answers of one loop turn go out in one write.
                if not self._tls_out:
                    asyncio.get_running_loop().call_soon(self._flush_tls)
                self._tls_out.extend(out)
        if self._drain_then_close and not slots:
            self.close()
        elif not self.reading and not self._held():
            self._again()

    def _flush_tls(self) -> None:
        out = self._tls_out
        transport = self.transport
        if out and transport is not None and not transport.is_closing():
            transport.write(out[0] if len(out) == 1 else b"".join(out))
        if out:
            out.clear()

    def fail(self, why: str) -> None:
        log.warning("Closing Kafka connection from %s: %s.", self.peer, why)
        self.close()

    def _forget_from(self, slot: Slot) -> None:
        """``slot``'s request does not decode: it and every request read after it are
        forgotten (Kafka would not have read them), their answers never written; those read
        before it keep their place (a forwarded one still on its way is answered first)."""
        self.work.clear()
        self.queued_bytes = 0
        while self.slots:
            later = self.slots.pop()
            observed, later.observed = later.observed, None
            if observed is not None and not later.done:
                observed(False, False)  # a forwarded request never answered
            if later is slot:
                break

    def refuse(self, why: str) -> None:
        """A request just read that Kafka would close the connection on (unreadable, an API
        or version not served, too large): logged, nothing after it is read, and the
        connection is closed once the requests read before it are answered — Kafka reads a
        connection's next request only after it answered the one before, so those are."""
        log.warning("Closing Kafka connection from %s: %s.", self.peer, why)
        self.close_when_drained()

    def timed_out(self, slot: Slot) -> None:
        """A forwarded request of this connection had no answer in time (the connection is
        closed next): measured as such."""
        observed = slot.observed
        if observed is not None and not slot.done:
            slot.observed = None
            observed(False, True)

    def close(self) -> None:
        if self._tls_out:
            self._flush_tls()  # answers of this turn first (a refusal's answer, then close)
        if self.transport is not None and not self.transport.is_closing():
            self.transport.close()
        self.closed = True

    def close_when_drained(self) -> None:
        if not self.slots:
            self.close()
        else:
            self._drain_then_close = True


NodeOf = Callable[[int], Node]


def _admitted(_group: Hashable, waiting: tuple[KafkaConnection, Work]) -> None:
    conn, item = waiting
    conn.admitted(item)
