"""Forwarding to the upstream broker (``--kafka-upstream``): everything the listener does not
serve itself.

* At start the listener asks the upstream (at its *configured* address) for its ApiVersions
  and its brokers (Metadata). Each upstream broker (node id) gets a listener port of its own:
  the ``--kafka-listen`` port stands for the broker at the configured address (the only one,
  for a single broker), the others get a free port on the same host. A request arriving on a
  node's port goes to that node, over one upstream connection per client connection, so the
  upstream answers in order and the client's correlation ids pass through untouched.
* The configured address is used for its broker, never the address that broker advertises;
  other brokers of a multi-broker upstream are reached at their advertised address (the only
  address the upstream tells), unless that is the configured one.
* Frames are copied as they are. Responses that name brokers are decoded and rewritten so that
  clients always come back through us: Metadata (brokers, controller), DescribeCluster, and the
  ``node_endpoints`` of Produce v10+ / Fetch v16+ (re-encoded only when not empty).
  FindCoordinator for non-GROUP keys (transactions) is forwarded and its answer rewritten.
* ApiVersions: the upstream's ranges for what is forwarded, ours for what we serve; the APIs
  in ``apis.NOT_ADVERTISED`` and the group APIs the upstream may offer are never forwarded.
  APIs whose responses we rewrite are capped at the versions kio knows.
* Produce with ``acks=0`` has no response: its slot is filled with nothing at once.
* Every forwarded request is answered within ``kafka.upstream.request.timeout.ms`` (Kafka's
  ``request.timeout.ms``) plus the time the request itself asks the broker to wait (Fetch's
  ``max_wait_ms``, Produce's, ListOffsets' and the admin requests' ``timeout_ms``), or its upstream
  connection is closed and the client connection that owns it too (logged, counted as
  REQUEST_TIMED_OUT), as Kafka's NetworkClient drops a connection whose request timed out: the
  client's own retries reconnect, and no connection waits for ever on a broker that accepts and
  never answers.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import ssl
import struct
import time
from collections.abc import Awaitable, Callable, Sequence
from functools import partial
from typing import TYPE_CHECKING, Any

from ...api import Node
from ...security_config import UpstreamSecurity
from ...tls import client_context, keep_alive
from .. import apis, wire
from ..convert import topic_id_of
from . import metadata_answers, sasl_client
from .interfaces import ClientConnection, NodePorts, UpstreamTimedOut

if TYPE_CHECKING:
    from ..security import ListenerSecurity

log = logging.getLogger("kip848.kafka")

REWRITTEN = {apis.METADATA, apis.DESCRIBE_CLUSTER, apis.PRODUCE, apis.FETCH}
CONNECT_TIMEOUT_S = 10.0
REQUEST_TIMEOUT_S = 30.0  # Kafka's request.timeout.ms
DEFAULT_REQUEST_TIMEOUT_MS = 30_000
"""``kafka.upstream.request.timeout.ms``: Kafka's ``request.timeout.ms`` default."""
WAITS_WITH_TIMEOUT = frozenset({2, 19, 20, 21, 37, 43, 45, 46})
"""ListOffsets (v10+), CreateTopics, DeleteTopics, DeleteRecords, CreatePartitions,
ElectLeaders, Alter/ListPartitionReassignments: requests whose ``timeout_ms`` the broker may
wait."""
MAX_WAIT_MS = 2**31 - 1
CLIENT_ID = b"kip848-coordinator"
TOPIC_CHANGING = frozenset({19, 20, 37})
"""CreateTopics, DeleteTopics, CreatePartitions: forwarded, then the topic feed refreshes."""
METADATA_VERSION_CAP = 12
"""Metadata v10+ carries topic ids; v13 only adds a top-level error."""


class UpstreamError(RuntimeError):
    pass


def split(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    return host.strip("[]"), int(port)


class UpstreamClient:
    """The coordinator's own requests to one upstream broker (ApiVersions and Metadata at
    start, the topic feed, topic administration): one connection, opened when needed, one
    request at a time. Any failure drops the connection (the next call opens a new one) and
    raises :class:`UpstreamError`."""

    def __init__(
        self,
        host: str,
        port: int,
        timeout_s: float = REQUEST_TIMEOUT_S,
        security: UpstreamTransport | None = None,
    ) -> None:
        self.host, self.port = host, port
        self.timeout_s = timeout_s
        self.security = security or UpstreamTransport()
        self._lock = asyncio.Lock()
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._correlation_id = 0
        self._session_ends: float | None = None  # KIP-368: sign in again before (monotonic)

    async def call(self, entity: Any, *, decode: bool = True) -> Any:
        """Send one request entity; its decoded response (``decode`` false: the response's
        frame and the position of its body, for :func:`wire.decode_response` — the caller
        decodes a large one off the loop). Waited for ``timeout_s`` plus what the request
        asks the broker to wait (its ``timeout_ms`` or ``max_wait_ms``)."""
        async with self._lock:
            try:
                return await asyncio.wait_for(
                    self._call(entity, decode), self.timeout_s + _entity_wait_s(entity)
                )
            except (OSError, TimeoutError, asyncio.IncompleteReadError, wire.WireError) as exc:
                self.close()
                name = wire.api_name(int(type(entity).__api_key__))
                what = "".join(w.capitalize() for w in name.split("_"))
                raise UpstreamError(
                    f"{what} to the upstream broker at {self.host}:{self.port} failed: "
                    f"{str(exc) or type(exc).__name__}"
                ) from exc
            except BaseException:
                self.close()
                raise

    async def _call(self, entity: Any, decode: bool = True) -> Any:
        if self._session_ends is not None and time.monotonic() >= self._session_ends:
            self.close()  # the broker would close it at the next request: a new session
        if self._writer is None:
            self._reader, self._writer = await self.security.open(self.host, self.port)
            self._session_ends = None
            lifetime_ms = await self.security.sign_in(self._request)
            if lifetime_ms > 0:
                self._session_ends = time.monotonic() + lifetime_ms * 0.85 / 1000
        return await self._request(entity, decode)

    async def _request(self, entity: Any, decode: bool = True) -> Any:
        reader, writer = self._reader, self._writer
        assert reader is not None and writer is not None
        cls = type(entity)
        key, version = int(cls.__api_key__), int(cls.__version__)
        self._correlation_id = correlation_id = (self._correlation_id + 1) & 0x7FFFFFFF
        header = struct.pack(">hhih", key, version, correlation_id, len(CLIENT_ID)) + CLIENT_ID
        if cls.__flexible__:
            header += b"\0"
        payload = header + wire.encode_body(entity)
        writer.write(struct.pack(">i", len(payload)) + payload)
        size = struct.unpack(">i", await reader.readexactly(4))[0]
        frame = await reader.readexactly(size)
        got = struct.unpack_from(">i", frame)[0]
        if got != correlation_id:
            raise wire.WireError(f"correlation id {got} in answer to {correlation_id}")
        pos = 4 + (1 if wire.response_header_flexible(key, version) else 0)
        return wire.decode_response(key, version, frame, pos) if decode else (frame, pos)

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
        self._reader = self._writer = None


def _entity_wait_s(entity: Any) -> float:
    """How long a request entity asks the broker to wait (``timeout`` or ``max_wait``), in s."""
    for name in ("timeout", "max_wait"):
        value = getattr(entity, name, None)
        if value is not None and hasattr(value, "total_seconds"):
            return max(0.0, float(value.total_seconds()))
    return 0.0


class UpstreamTransport:
    """How connections to the upstream are made (``kafka.upstream.*``): TLS with the client
    context, and for the coordinator's own connections its SASL sign-in (PLAIN or SCRAM with
    ``kafka.upstream.sasl.jaas.config``'s credentials). Client connections are never signed in
    as the coordinator: in pass-through mode each client's own exchange authenticates its own."""

    def __init__(self, security: UpstreamSecurity | None = None) -> None:
        self.settings = security
        self.ssl: ssl.SSLContext | None = None
        if security is not None and security.tls is not None:
            self.ssl = client_context(security.tls)

    async def open(self, host: str, port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        """One of the coordinator's own connections (its sign-in is :meth:`sign_in`)."""
        if self.ssl is None:
            reader, writer = await asyncio.open_connection(host, port)
        else:
            reader, writer = await asyncio.open_connection(
                host,
                port,
                ssl=self.ssl,
                server_hostname=host,
                ssl_handshake_timeout=CONNECT_TIMEOUT_S,
            )
        keep_alive(writer.transport)
        return reader, writer

    async def sign_in(self, request: Callable[[Any], Awaitable[Any]]) -> int:
        """The coordinator's SASL exchange on a new connection of its own; the session's
        lifetime in ms (0: none). :class:`UpstreamError` if the broker refuses it."""
        settings = self.settings
        if settings is None or not settings.sasl:
            return 0
        assert settings.mechanism and settings.username is not None
        assert settings.password is not None
        try:
            return await sasl_client.sign_in(
                request, settings.mechanism, settings.username, settings.password
            )
        except sasl_client.SignInRefused as exc:
            raise UpstreamError(
                f"the upstream broker refused the coordinator's sign-in: {exc}"
            ) from None

    def connect(
        self, loop: asyncio.AbstractEventLoop, protocol: asyncio.Protocol, host: str, port: int
    ) -> Awaitable[Any]:
        """A client connection's upstream connection (TLS as configured, no sign-in)."""
        if self.ssl is None:
            return loop.create_connection(lambda: protocol, host, port)
        return loop.create_connection(
            lambda: protocol,
            host,
            port,
            ssl=self.ssl,
            server_hostname=host,
            ssl_handshake_timeout=CONNECT_TIMEOUT_S,
        )


class Upstream:
    """The upstream broker(s): what they offer, where each is, and the forwarding of client
    connections' requests to them (the listener's :class:`~.interfaces.Forwarder`)."""

    def __init__(
        self,
        address: str,
        security: UpstreamSecurity | None = None,
        request_timeout_ms: int = DEFAULT_REQUEST_TIMEOUT_MS,
    ) -> None:
        self.request_timeout_ms = request_timeout_ms
        """``kafka.upstream.request.timeout.ms``: how long an answer of the upstream is waited
        for (the coordinator's own requests; forwarded ones, plus their own wait)."""
        self.transport = UpstreamTransport(security)
        self.address = split(address)
        self.versions: dict[int, tuple[int, int]] = {}
        self.brokers: dict[int, tuple[str, int]] = {}  # node id -> where we connect
        self.advertised: dict[int, tuple[str, int]] = {}  # node id -> what the upstream says
        self.controller_id = -1
        self.cluster_id: str | None = None
        self.bootstrap_node = -1
        self.client = self.new_client(self.address)
        self._bound: list[_Bound] = []  # each Kafka listener: its ports for the upstream nodes
        self._listener: NodePorts | None = None
        self._forwarded: dict[int, tuple[int, int]] | None = None
        self.on_topics_named: (
            Callable[[Sequence[tuple[str, str]], Callable[[], None]], None] | None
        ) = None
        """Called with the topics a forwarded Metadata answer lists without error ((name, topic
        id) pairs) and the answer's delivery: the topic feed delivers it once the registry has
        looked up the ones it lacks (bounded), so a commit right after a producer's Metadata
        auto-created a topic finds it here, as on Kafka."""
        self.coordinator_brokers: Callable[[Node], list[Node]] | None = None
        """Among several coordinator nodes: the coordinator nodes a Metadata answer lists after
        the upstream's brokers, given this node on the client's listener
        (``ClusterRouting.coordinator_brokers``)."""
        self.on_topics_changed: Callable[[Callable[[], None]], None] | None = None
        """Called with the delivery of a forwarded answer that changes topics: the topic feed
        refreshes and delivers it once the registry has the change (bounded), so a client that
        creates a topic and at once resets offsets for it, or subscribes to it, finds it."""

    def new_client(self, address: tuple[str, int]) -> UpstreamClient:
        """A connection of the coordinator's own to the broker at ``address`` (TLS, sign-in)."""
        return UpstreamClient(
            *address, timeout_s=self.request_timeout_ms / 1000, security=self.transport
        )

    def version_for(self, key: int, cap: int | None = None) -> int | None:
        """The highest version of ``key`` both the upstream and the codec know (at most
        ``cap``); None if there is none."""
        theirs = self.versions.get(key)
        ours = wire.kio_versions(key)
        if theirs is None or ours is None:
            return None
        hi = min(theirs[1], ours[1], cap if cap is not None else ours[1])
        return hi if hi >= max(theirs[0], ours[0]) else None

    async def connect(self) -> None:
        host, port = self.address
        client = self.client
        versions = await client.call(wire.build(wire.request_class(18, 0)))
        self.versions = {
            int(k.api_key): (int(k.min_version), int(k.max_version)) for k in versions.api_keys
        }
        self._forwarded = None
        version = self.version_for(apis.METADATA, METADATA_VERSION_CAP)
        if version is None or version < 1:
            raise UpstreamError("the upstream offers no usable Metadata version")
        meta = await client.call(
            wire.build(wire.request_class(3, version), topics=[], allow_auto_topic_creation=False)
        )
        self.advertised = {int(b.node_id): (b.host, int(b.port)) for b in meta.brokers}
        if not self.advertised:
            raise UpstreamError("the upstream broker lists no brokers")
        self.controller_id = int(getattr(meta, "controller_id", -1))
        self.cluster_id = getattr(meta, "cluster_id", None)
        matching = [n for n, a in self.advertised.items() if a == self.address]
        self.bootstrap_node = (
            next(iter(self.advertised))
            if len(self.advertised) == 1
            else (matching[0] if matching else min(self.advertised))
        )
        self.brokers = dict(self.advertised)
        self.brokers[self.bootstrap_node] = self.address
        log.info(
            "Upstream %s:%d: brokers %s (node %d at the configured address).",
            host,
            port,
            sorted(self.advertised),
            self.bootstrap_node,
        )

    @property
    def ours(self) -> dict[int, Node]:
        """Upstream node id -> our node for it, on the first Kafka listener."""
        return self._bound[0].ours if self._bound else {}

    def bind_nodes(
        self,
        listener: NodePorts,
        host: str,
        bound: int,
        adv_host: str,
        adv_port: int,
        security: ListenerSecurity | None = None,
    ) -> None:
        """The listener's port (``bound``) stands for the bootstrap node; every other upstream
        broker gets a port of its own on the same host, with the same security. Called once
        per Kafka listener: each has its own ports, and a client is only ever told the ports
        of the listener it came through."""
        self._listener = listener
        entry = _Bound(security, host, adv_host)
        self._bound.append(entry)
        for node_id in sorted(self.brokers):
            if node_id == self.bootstrap_node:
                node = Node(node_id=node_id, host=adv_host, port=adv_port)
                listener.set_node(bound, node)
                entry.ours[node_id] = node
            else:
                self._bind(entry, node_id)

    def _bind(self, entry: _Bound, node_id: int) -> Node:
        """A listener port for an upstream node (bound at once, served from the next loop
        turn: a client that connects meanwhile waits in the backlog)."""
        listener = self._listener
        assert listener is not None
        port = listener.listen_now(entry.listen_host, entry.security)
        node = Node(node_id=node_id, host=entry.adv_host, port=port)
        listener.set_node(port, node)
        entry.ours[node_id] = node
        return node

    def learn_broker(self, node_id: int, host: str, port: int) -> Node:
        """A broker named by the upstream (the topic feed's Metadata, or a forwarded response):
        a broker not seen before gets a listener port of its own (on every Kafka listener); a
        moved broker is reached at its new address by connections opened from now on. Brokers
        that left keep their port (clients that still use it get the broker's connection
        error, as from Kafka). Returns its node on the first listener."""
        address = (host, port)
        if self.advertised.get(node_id) != address:
            self.advertised[node_id] = address
            if node_id != self.bootstrap_node:
                self.brokers[node_id] = address
        for entry in self._bound:
            if node_id not in entry.ours:
                node = self._bind(entry, node_id)
                log.info(
                    "Upstream broker %d (%s:%d) joined: listener port %d.",
                    node_id,
                    host,
                    port,
                    node.port,
                )
        return self.ours[node_id]

    def update_brokers(self, meta: Any) -> None:
        """The brokers of the topic feed's Metadata response (see :meth:`learn_broker`)."""
        if self._listener is None:
            return
        for b in meta.brokers:
            self.learn_broker(int(b.node_id), b.host, int(b.port))

    # ------------------------------------------------------------ versions

    def forwarded_versions(self) -> dict[int, tuple[int, int]]:
        """What is forwarded, at which versions (worked out once: the upstream's versions are
        read at start)."""
        if self._forwarded is None:
            self._forwarded = self._forwarded_versions()
        return self._forwarded

    def _forwarded_versions(self) -> dict[int, tuple[int, int]]:
        out = {}
        for key, (lo, hi) in self.versions.items():
            if key in apis.SERVED or key in apis.NOT_ADVERTISED or key == apis.API_VERSIONS:
                continue
            if key in REWRITTEN or key == apis.FIND_COORDINATOR:
                known = wire.kio_versions(key)
                if known is None:
                    continue
                lo, hi = max(lo, known[0]), min(hi, known[1])
                if lo > hi:
                    continue
            out[key] = (lo, hi)
        return out

    def offers(self, key: int, version: int) -> bool:
        """Whether the upstream itself offers ``key`` at ``version`` (served or not here)."""
        r = self.versions.get(key)
        return r is not None and r[0] <= version <= r[1]

    def forwards(self, key: int, version: int) -> bool:
        r = self.forwarded_versions().get(key)
        return r is not None and r[0] <= version <= r[1]

    # ------------------------------------------------------------ forwarding

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
        answer fills the request's slot, rewritten if it names brokers, then passed through
        ``then`` (the topic guard's merge: the response frame with its size, in and out)."""
        wait_ms = _own_wait_ms(key, version, frame)
        slot = conn.expect()
        upstream = self._connection(conn)
        needs = _names_brokers(key, version) if rewrite is None else rewrite
        if wait_ms is None:  # Produce with acks=0: no answer
            upstream.send(frame, None)
            conn.complete(slot, None)
            return
        upstream.send(frame, (slot, key, version, needs, then), wait_ms)

    def forward_future(
        self, conn: ClientConnection, key: int, version: int, frame: bytes
    ) -> asyncio.Future[bytes]:
        """Send a request frame (without its size) on the client connection's upstream
        connection; the future gets the response frame (without its size, not rewritten)."""
        future: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()
        wait_ms = _own_wait_ms(key, version, frame) or 0
        self._connection(conn).send(frame, (future, key, version, False, None), wait_ms)
        return future

    def _connection(self, conn: ClientConnection) -> UpstreamConnection:
        upstream = conn.upstream_conn
        if upstream is None:
            node = conn.node.node_id if conn.node is not None else self.bootstrap_node
            upstream = conn.upstream_conn = UpstreamConnection(
                self, conn, self.brokers.get(node, self.address)
            )
        return upstream

    # ------------------------------------------------------------ rewriting

    def rewrite(
        self,
        key: int,
        version: int,
        frame: bytes,
        security: ListenerSecurity | None = None,
        named: list[tuple[str, str]] | None = None,
    ) -> bytes:
        """A response frame (without its size) naming brokers, rewritten to name ours: the
        ports of the listener the client came through (``security``). The topics a Metadata
        answer lists without error are added to ``named`` ((name, topic id) pairs)."""
        flexible = wire.response_header_flexible(key, version)
        pos = 4 + (1 if flexible else 0)
        if key in NODE_ENDPOINTS_SINCE and not wire.has_tagged_field(
            wire.response_class(key, version), frame, pos, 0
        ):
            return struct.pack(">i", len(frame)) + frame  # nothing to rewrite: as it came
        resp = wire.decode_response(key, version, frame, pos)
        values = wire.as_values(resp)
        ours = self._ours_for(security)
        changed = False
        if key == apis.METADATA:
            values["brokers"] = self.metadata_brokers(values["brokers"], security)
            changed = True
            if named is not None:
                named += [
                    (t["name"] or "", topic_id_of(t.get("topic_id")))
                    for t in values["topics"]
                    if not t["error_code"]
                ]
        elif key == apis.DESCRIBE_CLUSTER:
            values["brokers"] = [self._broker(b, "broker_id", ours) for b in values["brokers"]]
            changed = True
        elif key == apis.FIND_COORDINATOR:
            if "coordinators" in values:
                values["coordinators"] = [
                    self._broker(c, "node_id", ours) for c in values["coordinators"]
                ]
            elif values.get("node_id", -1) >= 0:
                values = self._broker(values, "node_id", ours)
            changed = True
        elif values.get("node_endpoints"):
            values["node_endpoints"] = [
                self._broker(b, "node_id", ours) for b in values["node_endpoints"]
            ]
            changed = True
        if not changed:
            return struct.pack(">i", len(frame)) + frame
        body = wire.build(type(resp), values)
        return wire.frame(key, version, struct.unpack_from(">i", frame)[0], body)

    def metadata_brokers(
        self, brokers: list[dict[str, Any]], security: ListenerSecurity | None
    ) -> list[dict[str, Any]]:
        """A Metadata answer's brokers as the listener with ``security`` names them (its ports
        for them), and the coordinator nodes after them."""
        ours = self._ours_for(security)
        out = [self._broker(b, "node_id", ours) for b in brokers]
        here = ours.get(self.bootstrap_node)
        if self.coordinator_brokers is not None and here is not None:
            out += [
                {"node_id": n.node_id, "host": n.host, "port": n.port, "rack": None}
                for n in self.coordinator_brokers(here)
            ]
        return out

    def _ours_for(self, security: ListenerSecurity | None) -> dict[int, Node]:
        for entry in self._bound:
            if entry.security is security:
                return entry.ours
        return self.ours

    def _broker(self, b: dict[str, Any], id_field: str, ours: dict[int, Node]) -> dict[str, Any]:
        node_id = int(b[id_field])
        node = ours.get(node_id)
        if node is None:
            if self._listener is None or node_id < 0 or not b.get("host"):
                return b
            self.learn_broker(node_id, b["host"], int(b["port"]))
            node = ours[node_id]
        return {**b, "host": node.host, "port": node.port}


class _Bound:
    """One Kafka listener as the upstream's brokers are bound on it."""

    __slots__ = ("security", "listen_host", "adv_host", "ours")

    def __init__(self, security: ListenerSecurity | None, listen_host: str, adv_host: str) -> None:
        self.security = security
        self.listen_host = listen_host
        self.adv_host = adv_host
        self.ours: dict[int, Node] = {}  # upstream node id -> our port for it


NODE_ENDPOINTS_SINCE = {apis.PRODUCE: 10, apis.FETCH: 16}
"""The versions whose responses may carry ``node_endpoints`` (tag 0)."""


def _names_brokers(key: int, version: int) -> bool:
    """Whether a response of ``key`` v``version`` may name brokers (and must be looked at)."""
    since = NODE_ENDPOINTS_SINCE.get(key)
    if since is not None:
        return version >= since
    return key in REWRITTEN


def _own_wait_ms(key: int, version: int, frame: bytes) -> int | None:
    """How long the request asks the broker to wait before answering (Fetch's ``max_wait_ms``,
    Produce's and the admin requests' ``timeout_ms``; 0 for the others, or one that cannot be
    read: the broker closes the connection on it anyway); None for a Produce with ``acks=0``,
    which has no answer. WireError: a Produce too short to hold its ``acks``."""
    if key == apis.PRODUCE:
        acks, timeout_ms = _produce_acks(frame, version)
        return None if acks == 0 else min(max(0, timeout_ms), MAX_WAIT_MS)
    try:
        if key == apis.FETCH:
            _k, _v, _c, _client, pos = wire.parse_header(frame)
            pos = wire.body_offset(frame, key, version, pos)
            wait = struct.unpack_from(">i", frame, pos + (4 if version < 15 else 0))[0]
        elif key in WAITS_WITH_TIMEOUT:
            _k, _v, _c, _client, pos = wire.parse_header(frame)
            entity = wire.decode(key, version, frame, wire.body_offset(frame, key, version, pos))
            wait = wire.to_ms(getattr(entity, "timeout", None))
        else:
            return 0
    except (struct.error, wire.WireError):
        return 0
    return min(max(0, int(wait)), MAX_WAIT_MS)


def _produce_acks(frame: bytes, version: int) -> tuple[int, int]:
    """Produce's ``acks`` and ``timeout_ms`` (after the header and the nullable transactional
    id); WireError if the frame is too short to hold them (the broker would close the
    connection)."""
    try:
        key, _v, _c, _client, pos = wire.parse_header(frame)
        pos = wire.body_offset(frame, key, version, pos)
        if wire.request_flexible(key, version):
            length, pos = wire.read_uvarint(frame, pos)
            pos += max(0, length - 1)
        else:
            (length,) = struct.unpack_from(">h", frame, pos)
            pos += 2 + max(0, length)
        acks, timeout_ms = struct.unpack_from(">hi", frame, pos)
        return int(acks), int(timeout_ms)
    except (struct.error, wire.WireError) as exc:
        raise wire.WireError(f"produce v{version}: cannot read acks: {exc}") from None


Pending = tuple["object | asyncio.Future[bytes]", int, int, bool, "Callable[[bytes], bytes] | None"]
"""Where the answer goes (a client's place in its answer order, or a future for a request
made by the listener itself), api key, version, whether the answer must be rewritten, and what
then becomes of it (``Upstream.forward``'s ``then``)."""


class UpstreamConnection(asyncio.Protocol):
    """One connection to an upstream broker, owned by one client connection."""

    def __init__(
        self, upstream: Upstream, client: ClientConnection, address: tuple[str, int]
    ) -> None:
        self.upstream = upstream
        self.client = client
        self.transport: asyncio.Transport | None = None
        self.queue: list[bytes] = []
        self.queued_bytes = 0  # in self.queue, before the connection is made
        self.writing_paused = False
        self.pending: collections.deque[Pending] = collections.deque()
        self.due: collections.deque[float] = collections.deque()
        """Each pending request's deadline (loop time), in the order of ``pending``."""
        self.address = address
        self.buffer = bytearray()
        self.closed = False
        self.reading_paused = False  # the client is not taking its answers
        self.rewriting: set[asyncio.Task[None]] = set()  # large Metadata answers, off the loop
        self._timer: asyncio.TimerHandle | None = None  # at the earliest deadline, or later
        self._timer_at = 0.0
        self.loop = loop = asyncio.get_running_loop()
        self.task = loop.create_task(self._connect(loop, address))

    async def _connect(self, loop: asyncio.AbstractEventLoop, address: tuple[str, int]) -> None:
        try:
            await asyncio.wait_for(
                self.upstream.transport.connect(loop, self, *address), CONNECT_TIMEOUT_S
            )
        except (OSError, TimeoutError) as exc:
            self.client.fail(
                f"cannot reach the upstream broker at {address[0]}:{address[1]}: {exc}"
            )

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        keep_alive(transport)
        if self.closed:
            # The client went before the connection was made: what it sent goes all the same
            # (a broker processes the requests it has read from a client that left).
            if self.queue:
                transport.write(b"".join(self.queue))  # type: ignore[attr-defined]
            transport.close()
            return
        unsent = self.client.max_unsent_bytes
        transport.set_write_buffer_limits(high=unsent, low=unsent // 4)  # type: ignore[attr-defined]
        if self.reading_paused:
            transport.pause_reading()  # type: ignore[attr-defined]
        if self.queue:
            transport.write(b"".join(self.queue))  # type: ignore[attr-defined]
            self.queue.clear()
            self.queued_bytes = 0
            if self.client.upstream_paused and not self.writing_paused:
                self.client.on_upstream_flow(False)  # the queue went out at once

    def send(self, frame: bytes, pending: Pending | None, wait_ms: int = 0) -> None:
        """Send a request frame; ``pending``: where its answer goes (None: it has none), due
        within the request timeout plus ``wait_ms``, the time the request asks the broker to
        wait."""
        size = wire.I32.pack(len(frame))
        if pending is not None:
            self.pending.append(pending)
            due = self.loop.time() + (self.upstream.request_timeout_ms + wait_ms) / 1000
            self.due.append(due)
            if self._timer is None or due < self._timer_at:
                self._arm(due)
        if self.transport is None:
            self.queue += (size, frame)
            self.queued_bytes += 4 + len(frame)
            if self.queued_bytes > self.client.max_unsent_bytes:
                self.client.on_upstream_flow(True)  # until the connection is made
        else:
            self.transport.writelines((size, frame))

    def _arm(self, when: float) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._timer_at = when
        self._timer = self.loop.call_at(when, self._check_due)

    def _check_due(self) -> None:
        """The timer: close if a pending request is past its deadline, else wait for the
        earliest one (answers come in order, so the timer rarely finds anything due)."""
        self._timer = None
        if self.closed or not self.due:
            return
        earliest = min(self.due)
        now = self.loop.time()
        if earliest > now:
            self._arm(earliest)
            return
        late = [p for p, due in zip(self.pending, self.due, strict=True) if due <= now]
        _sink, key, version, _rewrite, _then = late[0]
        host, port = self.address
        why = (
            f"{wire.api_name(key)} v{version} forwarded to the upstream broker at {host}:{port} "
            f"had no answer within kafka.upstream.request.timeout.ms "
            f"({self.upstream.request_timeout_ms} ms) plus its own wait; its upstream connection "
            "is closed too"
        )
        for sink, *_rest in late:
            if not isinstance(sink, asyncio.Future):
                self.client.timed_out(sink)
            elif not sink.done():  # served here around it (a split request): measured there
                sink.set_exception(UpstreamTimedOut(why))
        self.queue.clear()  # never sent: not sent later either
        self.close()
        if self.transport is None:
            self.task.cancel()
        self.client.fail(why)

    def pause_writing(self) -> None:
        """The upstream is not taking our requests: the client's are not read meanwhile."""
        self.writing_paused = True
        self.client.on_upstream_flow(True)

    def resume_writing(self) -> None:
        self.writing_paused = False
        self.client.on_upstream_flow(False)

    def pause_reading(self) -> None:
        """The client is not taking its answers (its write buffer passed
        ``kafka.connection.max.unsent.bytes``): the broker's answers wait in the kernel and in
        the broker, not in this process — as Kafka, which answers one request of a connection
        at a time, never holds more than one answer for a client that does not read."""
        self.reading_paused = True
        if self.transport is not None and not self.closed:
            self.transport.pause_reading()

    def resume_reading(self) -> None:
        self.reading_paused = False
        if self.transport is not None and not self.closed:
            self.transport.resume_reading()

    def data_received(self, data: bytes) -> None:
        buf = self.buffer
        buf += data
        pos, end = 0, len(buf)
        while end - pos >= 4:
            size = int.from_bytes(buf[pos : pos + 4], "big", signed=True)
            if end - pos - 4 < size:
                break
            if not self.pending:
                self.client.fail("the upstream sent a response nobody asked for")
                return
            sink, key, version, rewrite, then = self.pending.popleft()
            self.due.popleft()
            with memoryview(buf) as view:  # one copy of the frame, not two
                if rewrite:
                    frame = bytes(view[pos + 4 : pos + 4 + size])
                elif isinstance(sink, asyncio.Future):
                    out = bytes(view[pos + 4 : pos + 4 + size])
                else:
                    out = bytes(view[pos : pos + 4 + size])
            named: list[tuple[str, str]] = []
            if rewrite and key == apis.METADATA and size > metadata_answers.INLINE_BYTES:
                pos += 4 + size
                self._rewrite_off_loop(sink, version, frame, then)
                continue
            try:
                if rewrite:
                    out = self.upstream.rewrite(key, version, frame, self.client.security, named)
                if then is not None:
                    out = then(out)
            except wire.WireError as exc:
                self.client.fail(f"unreadable upstream response: {exc}")
                return
            pos += 4 + size
            self._answered(sink, key, out, named)
        if pos:
            del buf[:pos]

    def _answered(self, sink: object, key: int, out: bytes, named: list[tuple[str, str]]) -> None:
        changed = self.upstream.on_topics_changed if key in TOPIC_CHANGING else None
        listed = self.upstream.on_topics_named if named else None
        if changed is not None:
            changed(partial(self._deliver, sink, out))
        elif listed is not None:
            listed(named, partial(self._deliver, sink, out))
        else:
            self._deliver(sink, out)

    def _rewrite_off_loop(
        self, sink: object, version: int, frame: bytes, then: Callable[[bytes], bytes] | None
    ) -> None:
        """A large Metadata answer rewritten on threads (``metadata_answers``), then answered
        as :meth:`data_received` answers the others (the client's answers stay in its order:
        its slots)."""
        security = self.client.security

        async def rewrite() -> None:
            named: list[tuple[str, str]] = []
            try:
                brokers_of = partial(self.upstream.metadata_brokers, security=security)
                out = await metadata_answers.rewritten(brokers_of, version, frame, named)
                if then is not None:
                    out = then(out)
            except wire.WireError as exc:
                self.client.fail(f"unreadable upstream response: {exc}")
                return
            self._answered(sink, apis.METADATA, out, named)

        task = asyncio.get_running_loop().create_task(rewrite())
        self.rewriting.add(task)
        task.add_done_callback(self.rewriting.discard)

    def _deliver(self, sink: object, out: bytes) -> None:
        if isinstance(sink, asyncio.Future):
            if not sink.done():
                sink.set_result(out)
        else:
            self.client.complete(sink, out)

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.closed:
            self.client.fail("the upstream broker closed the connection")
        self.close()

    def close(self) -> None:
        self.closed = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self.transport is not None:
            self.transport.close()
