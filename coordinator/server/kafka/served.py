"""The Kafka listener's served requests, apart from its connections (``listener.py``), as
Kafka's ``KafkaApis`` is apart from its ``SocketServer``: what is served here and in which
versions (ApiVersions, advertised ranges), and each served request turned into the service's
call and its answer's frame — the group APIs (``apis.SERVED``), Metadata and the topic
administration (``registry_admin``) in coordinator-only mode, the transaction APIs around the
upstream's coordinator, the requests split between us and the broker (``configs``,
``acl_split``) and, in front of a broker that the listener authorizes for, Metadata and
DescribeTopicPartitions filtered (``topic_guard``, ``describe_partitions``).

Steady ConsumerGroupHeartbeat answers (no assignment, no error) are the same bytes every time
for a member until its epoch or interval changes: their bodies are encoded once and kept in a
bounded cache (``STEADY_CACHE``).

:class:`KafkaApis` sees the listener through :class:`ServingListener` (the service, the
upstream, the transaction bridge, the forwarding metrics hook) and a connection as the guards
do (``topic_guard.GuardedConnection``): it imports nothing of ``listener.py``.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable
from functools import partial
from typing import Any, Protocol

from coordinator.core.errors import ErrorCode, InvalidTopicError
from coordinator.core.topics import check_topic_name
from coordinator.runtime.collector import free_gradually, no_collections

from ..api import EVERY_TOPIC, Caller, Node
from ..authorization import DESCRIBE, GROUP, TOPIC, operations_of
from ..codec import AUTHORIZED_OPERATIONS_OMITTED
from ..service import CoordinatorService
from . import (
    acl_split,
    admin_guard,
    apis,
    configs,
    convert,
    describe_partitions,
    registry_admin,
    topic_guard,
    txn_guard,
    wire,
)
from . import sasl as sasl_api
from .topic_guard import GuardedConnection
from .upstream.interfaces import Forwarder, UpstreamTimedOut

CLUSTER_ID = "kip848-coordinator"
STEADY_CACHE = 65_536
"""Encoded steady ConsumerGroupHeartbeat responses kept (one per member)."""
_SOFTWARE = re.compile(r"^[a-zA-Z0-9](?:[a-zA-Z0-9\-.]*[a-zA-Z0-9])?$")
ENCODE_INLINE = 1000
"""A Metadata answer listing more topics than this is built and encoded off the loop
(:meth:`KafkaApis.metadata_frame`)..."""
OPERATIONS_INLINE = 100
"""... or more than this with each topic's authorized operations (8 checks a topic)."""
GUARDED_SERVED = frozenset({apis.METADATA, describe_partitions.KEY})
"""Forwarded APIs served in order while guarded: their answers are the broker's, filtered."""


class TransactionServer(Protocol):
    """What serves the transaction APIs (``apis.TRANSACTION_KEYS``) with an upstream:
    ``transactions.TransactionBridge``, given by the server (app.py)."""

    def versions(self) -> dict[int, tuple[int, int]]: ...

    async def serve(
        self,
        conn: Any,
        key: int,
        version: int,
        frame: bytes,
        entity: Any,
        caller: Caller,
        service: Any,
    ) -> bytes | Any: ...

    def found(
        self, version: int, request: Any, caller: Caller, service: Any
    ) -> Callable[[bytes], bytes] | None: ...


class ServingListener(Protocol):
    """The Kafka listener, as its served requests see it (``listener.KafkaListener``)."""

    service: CoordinatorService
    upstream: Forwarder | None
    """The upstream broker(s); None: coordinator-only mode (Metadata from the registry)."""
    txn: TransactionServer | None
    """Transactions around the upstream's transaction coordinator (``transactions.py``)."""
    on_forward: Callable[[int], Callable[[bool, bool], None]] | None
    """Metrics: called with the API key of a request forwarded to the upstream; what it
    returns is called with True once the answer is back, False if it failed."""


class KafkaApis:
    """The requests served here (the module doc), for one listener."""

    def __init__(self, listener: ServingListener) -> None:
        self.listener = listener
        self._heartbeat_out = {v: convert.HeartbeatOut(v) for v in (0, 1)}
        self._steady: dict[tuple[int, str, int, int], bytes] = {}
        self._versions_source: object = None
        self._versions_bodies: dict[tuple[int, int, bool], bytes] = {}

    def element_budget(self) -> int:
        """The array elements (strings and structures, at every depth) a request decoded here
        may hold in all: twice what the request limits let one name
        (``group.coordinator.request.max.groups`` + ``.max.partitions``), plus one per known
        topic (a Metadata of every topic by name, a member's owned partitions of each). Past
        it, the request is refused before it is decoded (``bounds.TooManyElements``): its cost
        on the loop — decoding, the service's refusal of each element, the answer — grew with
        the count, a 90 MB OffsetCommit of 5 million partitions held the loop 68 s."""
        service = self.listener.service
        limits = service.limits
        topics = len(service.runtime.registry.image().by_name)
        return 2 * (limits.max_groups + limits.max_partitions) + topics

    def served_versions(self, conn: GuardedConnection, key: int) -> tuple[int, int] | None:
        """(min, max) versions of ``key`` when a request of it on ``conn`` is served here, in
        order (``serve``); None when it is not (forwarded, or not served at all)."""
        listener = self.listener
        if listener.txn is not None and key in apis.TRANSACTION_KEYS:
            txn_range = listener.txn.versions().get(key)
            if txn_range is not None:
                return txn_range  # around the upstream's transaction coordinator
        row = apis.SERVED.get(key)
        if row is not None:
            return row.min_version, row.max_version
        if key == apis.METADATA and listener.upstream is None:
            return apis.METADATA_RANGE
        if key in registry_admin.KEYS and listener.upstream is None:
            return registry_admin.KEYS[key]  # the topic registry's administration
        if key in GUARDED_SERVED and listener.upstream is not None and topic_guard.guards(conn):
            # Forwarded and its answer filtered (topic_guard, describe_partitions), in order.
            return listener.upstream.forwarded_versions().get(key, (0, -1))
        return None

    def advertised(self, sasl: bool = False) -> dict[int, tuple[int, int]]:
        """api key -> (min, max): ours for served APIs, the upstream's for forwarded ones;
        ``sasl``: a SASL listener's (SaslHandshake and SaslAuthenticate are ours)."""
        table: dict[int, tuple[int, int]] = {}
        if self.listener.upstream is not None:
            table.update(self.listener.upstream.forwarded_versions())
        else:
            table[apis.METADATA] = apis.METADATA_RANGE
            table.update(registry_admin.KEYS)
        for key, row in apis.SERVED.items():
            table[key] = (row.min_version, row.max_version)
        if self.listener.txn is not None:
            table.update(self.listener.txn.versions())
        table[apis.API_VERSIONS] = apis.API_VERSIONS_RANGE
        if sasl or self.listener.upstream is None:
            table.update(sasl_api.SASL_APIS)
        return dict(sorted(table.items()))

    def api_versions(
        self, version: int, correlation_id: int, frame: bytes, pos: int, sasl: bool = False
    ) -> bytes:
        lo, hi = apis.API_VERSIONS_RANGE
        if not lo <= version <= hi:
            # Kafka: an unknown ApiVersions version is answered in v0 with UNSUPPORTED_VERSION,
            # so the client can pick a version it shares with us.
            return self._api_versions_frame(0, ErrorCode.UNSUPPORTED_VERSION, correlation_id, sasl)
        req = wire.decode(18, version, frame, wire.body_offset(frame, 18, version, pos))
        code = ErrorCode.NONE
        if version >= 3 and not (
            _SOFTWARE.match(req.client_software_name or "")
            and _SOFTWARE.match(req.client_software_version or "")
        ):
            code = ErrorCode.INVALID_REQUEST
        return self._api_versions_frame(version, code, correlation_id, sasl)

    def _api_versions_frame(
        self, version: int, code: int, correlation_id: int, sasl: bool = False
    ) -> bytes:
        """An ApiVersions response (header v0 in every version; an error's lists only what
        Kafka's does). Its body is encoded once per
        version, code and kind of listener: the ranges only change when the upstream's are read
        again."""
        source = (
            self.listener.upstream.forwarded_versions()
            if self.listener.upstream is not None
            else None
        )
        if source is not self._versions_source:
            self._versions_source = source
            self._versions_bodies.clear()
        body = self._versions_bodies.get((version, code, sasl))
        if body is None:
            # Kafka's ApiVersionsRequest.getErrorResponse: an error answer lists ApiVersions'
            # own range after UNSUPPORTED_VERSION (KIP-511: what to retry with), nothing else.
            table = (
                self.advertised(sasl)
                if code == ErrorCode.NONE
                else {apis.API_VERSIONS: apis.API_VERSIONS_RANGE}
                if code == ErrorCode.UNSUPPORTED_VERSION
                else {}
            )
            keys = [
                {"api_key": k, "min_version": lo, "max_version": hi}
                for k, (lo, hi) in table.items()
            ]
            entity = wire.build(
                wire.response_class(18, version), error_code=code, api_keys=keys, throttle_time=0
            )
            body = self._versions_bodies[version, code, sasl] = wire.encode_body(entity)
        return wire.frame_raw(correlation_id, False, body)

    async def serve(
        self,
        conn: GuardedConnection,
        key: int,
        version: int,
        correlation_id: int,
        client_id: str | None,
        frame: bytes,
        pos: int,
    ) -> bytes:
        offset = wire.body_offset(frame, key, version, pos)
        entity = wire.decode(key, version, frame, offset, self.element_budget())
        caller = conn.caller(client_id, version)
        if key in apis.TRANSACTION_KEYS and self.listener.txn is not None:
            if key in txn_guard.RULES and topic_guard.guards(conn):
                # Kafka checks the transactional id before the transaction coordinator acts.
                rule = txn_guard.RULES[key]
                decided = rule(admin_guard.guard(conn, key, version, client_id), entity)
                if decided.answer is not None:
                    return admin_guard.answer_frame(key, version, correlation_id, decided.answer)
            answer = await self.listener.txn.serve(
                conn, key, version, frame, entity, caller, self.listener.service
            )
            if isinstance(answer, bytes):
                return answer
            body = wire.build(
                wire.response_class(key, version), convert.txn_offset_commit_out(answer, version)
            )
            return wire.frame(key, version, correlation_id, body)
        if key == apis.METADATA and self.listener.upstream is not None:  # guarded (topic_guard)
            return await topic_guard.metadata(
                conn, version, correlation_id, client_id, entity, frame
            )
        if key == describe_partitions.KEY:  # guarded
            return await describe_partitions.serve(
                conn, version, correlation_id, client_id, entity, frame
            )
        if key in registry_admin.KEYS:  # coordinator-only mode (served_versions)
            values = await registry_admin.serve(self.listener.service, key, version, entity, caller)
            return wire.frame(
                key, version, correlation_id, wire.build(wire.response_class(key, version), values)
            )
        if key == apis.METADATA:
            return await self.metadata_frame(entity, version, correlation_id, caller)
        row = apis.SERVED[key]
        split = configs if key in configs.SPLIT else acl_split if key in acl_split.SPLIT else None
        if split is not None and self.listener.upstream is not None:
            # One request, two owners: ours (GROUP resources) and the broker's.
            ours, theirs = (
                configs.owners(entity) if split is configs else acl_split.owners(key, entity)
            )
            refused: dict[int, Any] = {}
            if theirs and topic_guard.guards(conn):  # the broker's part checked here first
                if split is acl_split:
                    theirs = acl_split.permitted(key, caller, self.listener.service.authz)
                else:
                    guard = admin_guard.guard(conn, key, version, client_id)
                    refused = configs.refusals(guard, key, entity)
            if theirs:
                if not ours and not refused and self.listener.upstream.offers(key, version):
                    done = (
                        None if self.listener.on_forward is None else self.listener.on_forward(key)
                    )
                    try:
                        answer_frame = await self.listener.upstream.forward_future(
                            conn, key, version, frame
                        )
                    except BaseException as exc:
                        if done is not None:
                            done(False, isinstance(exc, UpstreamTimedOut))
                        raise
                    if done is not None:
                        done(True, False)
                    return wire.I32.pack(len(answer_frame)) + answer_frame
                serve_ours = partial(self._serve_values, row, version=version)
                args = (
                    self.listener.upstream,
                    conn,
                    key,
                    version,
                    correlation_id,
                    client_id,
                    entity,
                )
                if split is configs:
                    return await configs.serve_split(*args, caller, serve_ours, refused)
                return await acl_split.serve_split(*args, caller, serve_ours)
        answer = await getattr(self.listener.service, row.method)(
            row.decode(entity, caller), caller
        )
        if key == apis.CONSUMER_GROUP_HEARTBEAT:
            return self._heartbeat_frame(version, correlation_id, answer)
        if row.with_names:
            values = convert.consumer_group_describe_out(answer, self.listener.service.topic_name)
        else:
            values = row.encode(answer, version)
        if key == apis.OFFSET_FETCH and version < 2:  # no group error field
            convert.offset_fetch_v1_errors(values, entity)
        elif key == apis.DESCRIBE_USER_SCRAM_CREDENTIALS:
            convert.describe_users_errors(values, entity)
        if getattr(entity, "include_authorized_operations", False):
            self._group_operations(values, caller)
        body = wire.build(wire.response_class(key, version), values)
        return wire.frame(key, version, correlation_id, body)

    def _group_operations(self, values: dict[str, Any], caller: Caller) -> None:
        """DescribeGroups (v3+) and ConsumerGroupDescribe asked for the caller's authorized
        operations: each group described (no error) gets its bit field, as Kafka's
        ``authorizedOperations`` (refused ones keep "omitted")."""
        authz = self.listener.service.authz
        for g in values["groups"]:
            if g["error_code"] == 0:
                g["authorized_operations"] = authz.authorized_operations(
                    caller, GROUP, g["group_id"]
                )

    def _heartbeat_frame(self, version: int, correlation_id: int, answer: Any) -> bytes:
        """A ConsumerGroupHeartbeat response. A steady one (no assignment, no error) is the
        same bytes every time for a member until its epoch or interval changes: its body is
        encoded once (by kio) and kept in a bounded cache."""
        resp = answer.value
        if resp is None or resp.assignment is not None:
            return wire.frame(68, version, correlation_id, self._heartbeat_out[version](answer))
        cache_key = (version, resp.member_id, resp.member_epoch, resp.heartbeat_interval_ms)
        body = self._steady.get(cache_key)
        if body is None:
            if len(self._steady) >= STEADY_CACHE:
                self._steady.clear()
            body = self._steady[cache_key] = wire.encode_body(self._heartbeat_out[version](answer))
        return wire.I32.pack(len(body) + 5) + wire.I32.pack(correlation_id) + b"\0" + body

    async def _serve_values(
        self, row: apis.Served, entity: Any, caller: Caller, version: int
    ) -> dict[str, Any]:
        answer = await getattr(self.listener.service, row.method)(
            row.decode(entity, caller), caller
        )
        return row.encode(answer, version)

    async def metadata_frame(
        self, req: Any, version: int, correlation_id: int, caller: Caller
    ) -> bytes:
        """A Metadata answer's frame (:meth:`metadata`). One of every topic is built from the
        topics as ListTopics answered them (immutable), those the caller may not describe
        left out and, asked for, each topic's authorized operations found over the ACLs as
        they were then (``RequestAuthorizer.pinned``): on a thread beyond
        :data:`ENCODE_INLINE` topics (:data:`OPERATIONS_INLINE` with their operations). At
        100,000 topics that took the loop 2-3 s of its CPU in one step, 0.3-0.5 s at 10,000
        (with ACLs, their check and operations too). The thread frees what it built a slice
        at a time (``collector.free_gradually``)."""
        listing: list[Any] = []
        values = await self.metadata(req, version, caller, listing)
        node_id = values["controller_id"]
        with_ops = bool(getattr(req, "include_topic_authorized_operations", False))
        may = self.listener.service.authz.pinned(caller) if listing else None

        def encode() -> bytes:
            # What is built here is freed here (a thread's: never by the loop), a slice at a
            # time: in one go, the loop waited 45-55 ms for the interpreter's lock at 100,000.
            assert may is not None
            omitted = AUTHORIZED_OPERATIONS_OMITTED
            entries = [
                _listed(t, node_id, operations_of(may, TOPIC, t.name) if with_ops else omitted)
                for t in listing
                if may(DESCRIBE, TOPIC, t.name)
            ]
            body = wire.build(wire.response_class(apis.METADATA, version), values, topics=entries)
            framed = wire.frame(apis.METADATA, version, correlation_id, body)
            entities = list(body.topics)
            del body
            free_gradually(entries, entities)
            return framed

        if not listing:
            body = wire.build(wire.response_class(apis.METADATA, version), values)
            return wire.frame(apis.METADATA, version, correlation_id, body)
        if len(listing) <= (OPERATIONS_INLINE if with_ops else ENCODE_INLINE):
            return encode()

        def off_the_loop() -> bytes:
            with no_collections():  # freed on this thread, never scanned
                return encode()

        return await asyncio.get_running_loop().run_in_executor(None, off_the_loop)

    async def metadata(
        self, req: Any, version: int, caller: Caller, listing: list[Any] | None = None
    ) -> dict[str, Any]:
        """Coordinator-only mode: one broker (this listener; among several coordinator nodes,
        every live node's listener: ``server/cluster.py``), topics from the registry.

        Before the cluster log is loaded, or once the coordinator stopped serving, the registry
        cannot be read (ListTopics answers its error, kept as v13's top-level error): each named
        topic is answered LEADER_NOT_AVAILABLE, which clients retry (never
        UNKNOWN_TOPIC_OR_PARTITION: "no such topic" makes them give up), and a request for all
        topics lists no broker and no topic — the answer of a Kafka broker still starting,
        which the Java client, librdkafka and kafka-python ignore and ask again."""
        node = caller.node or Node(node_id=0, host="", port=0)
        routing = self.listener.service.routing
        brokers = [node] if routing is None else routing.kafka_nodes(node)
        wanted = req.topics
        every = wanted is None or (version == 0 and not wanted)
        # Every topic for metadata_frame, which leaves out those the caller may not describe.
        asked = EVERY_TOPIC if every and listing is not None else None
        reply = await self.listener.service.list_topics(asked, caller)
        registry = reply.value or []
        readable = not reply.error_code
        with_ops = bool(getattr(req, "include_topic_authorized_operations", False))
        chosen: list[tuple[Any, str, Any]] = []
        if every:
            if not readable:
                brokers = []
            if listing is not None:
                listing += registry  # each topic's entry built by the caller (_listed)
            else:
                chosen = [(t, t.name, None) for t in registry]
        elif version < 12 and any(t.name is None or getattr(t, "topic_id", None) for t in wanted):
            # Kafka's handleTopicMetadataRequest: no topic ids, no null names before v12;
            # MetadataRequest.getErrorResponse answers each topic asked INVALID_REQUEST.
            return _metadata_refused(wanted)
        else:
            # Kafka: each topic once; asked by id, the names are not looked at.
            ids = dict.fromkeys(t.topic_id for t in wanted if getattr(t, "topic_id", None))
            if ids:
                by_id = {t.topic_id: t for t in registry}
                chosen = [(by_id.get(convert.topic_id_of(i)), "", i) for i in ids]
            else:
                by_name = {t.name: t for t in registry}
                chosen = [(by_name.get(n), n, None) for n in dict.fromkeys(t.name for t in wanted)]
        topics = []
        authz = self.listener.service.authz
        for found, name, topic_id in chosen:
            if found is None:
                # A named topic the caller may not describe is refused whether it exists or
                # not (Kafka: nothing about it is told); the listing above left it out. One
                # asked by id that exists is refused with its id (Kafka: ids are no secret).
                hidden = name or (
                    self.listener.service.topic_name(convert.topic_id_of(topic_id))
                    if topic_id is not None
                    else ""
                )
                refused = (
                    readable
                    and bool(hidden)
                    and not authz.allowed(caller, "Metadata", DESCRIBE, TOPIC, hidden)
                )
                topics.append(
                    {
                        "error_code": ErrorCode.LEADER_NOT_AVAILABLE
                        if not readable
                        else ErrorCode.TOPIC_AUTHORIZATION_FAILED
                        if refused
                        else ErrorCode.UNKNOWN_TOPIC_ID
                        if topic_id is not None
                        else _missing_topic(name),
                        "name": None if topic_id is not None else name,
                        "topic_id": topic_id,
                        "partitions": [],
                    }
                )
                continue
            topics.append(
                _listed(
                    found,
                    node.node_id,
                    authz.authorized_operations(caller, TOPIC, found.name)
                    if with_ops
                    else AUTHORIZED_OPERATIONS_OMITTED,
                )
            )
        return {
            "brokers": [{"node_id": b.node_id, "host": b.host, "port": b.port} for b in brokers],
            "cluster_id": CLUSTER_ID,
            "controller_id": node.node_id,
            "topics": topics,
            "cluster_authorized_operations": authz.cluster_operations(caller)
            if getattr(req, "include_cluster_authorized_operations", False)
            else AUTHORIZED_OPERATIONS_OMITTED,
            "error_code": reply.error_code,
        }


def _listed(
    found: Any, node_id: int, operations: int = AUTHORIZED_OPERATIONS_OMITTED
) -> dict[str, Any]:
    """A topic's entry of a Metadata answer: every partition led by node ``node_id``, its
    only replica."""
    return {
        "error_code": 0,
        "name": found.name,
        "topic_id": convert.uuid_of(found.topic_id),
        "is_internal": False,
        "topic_authorized_operations": operations,
        "partitions": [
            {
                "error_code": 0,
                "partition_index": p,
                "leader_id": node_id,
                "leader_epoch": 0,
                "replica_nodes": [node_id],
                "isr_nodes": [node_id],
                "offline_replicas": [],
            }
            for p in range(found.num_partitions)
        ],
    }


def _missing_topic(name: str) -> ErrorCode:
    """Kafka's getTopicMetadata for a topic it does not have: INVALID_TOPIC_EXCEPTION when the
    name is not a legal topic name (``Topic.validate``), else UNKNOWN_TOPIC_OR_PARTITION."""
    try:
        check_topic_name(name)
    except InvalidTopicError:
        return ErrorCode.INVALID_TOPIC_EXCEPTION
    return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def _metadata_refused(wanted: Any) -> dict[str, Any]:
    """A Metadata request Kafka refuses whole (``MetadataRequest.getErrorResponse``): each topic
    asked answered INVALID_REQUEST (a null name as ""), no brokers."""
    return {
        "brokers": [],
        "cluster_id": None,
        "controller_id": -1,
        "topics": [
            {
                "error_code": ErrorCode.INVALID_REQUEST,
                "name": t.name or "",
                "topic_id": getattr(t, "topic_id", None),
                "is_internal": False,
                "partitions": [],
            }
            for t in wanted
        ],
        "cluster_authorized_operations": AUTHORIZED_OPERATIONS_OMITTED,
    }
