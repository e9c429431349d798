"""A small fake Kafka cluster for routing tests: several broker nodes, each on a loopback port of
its own, answering a handful of APIs with kio (through the coordinator's own ``wire`` module).

Every answer says which node produced it (ListOffsets offsets are ``node_id * 1000 +
partition``), and every node logs ``(node id, api key, version)`` per request, so a test can
see which broker a request reached. Produce and Fetch answer NOT_LEADER_OR_FOLLOWER with a
``node_endpoints`` entry for the leader (as Kafka does), to check that it is rewritten.

``FakeCluster(transactions=True)`` adds a transaction coordinator (the controller node):
InitProducerId, AddOffsetsToTxn, EndTxn and DescribeTransactions over a table of transactional
ids (:class:`FakeTxn`), with what a test needs to make a transaction end behind the listener's
back (``expire``, ``commit_directly``) or to hold EndTxn's answer (``hold_end``).

``cluster.silent = True`` makes every node a broker that accepts connections and never answers
clients (the coordinator's own requests still are): a connection with a request left unanswered
answers nothing any more, even once ``silent`` is False again.

``FakeCluster(data=True, topics=...)`` is one broker that keeps data instead (Tansu, the real
broker of the other tests, has no fetch sessions): Produce appends record batches to in-memory
logs (:class:`FakeLog`), Fetch reads them with KIP-227 fetch sessions (full and incremental
fetches, epochs checked, incremental answers holding only the partitions that changed), and
ListOffsets, DeleteRecords, OffsetForLeaderEpoch and DescribeProducers answer from the logs.
Every request's decoded body is kept (:meth:`FakeCluster.asked`): what the broker was asked.
"""

from __future__ import annotations

import datetime
import socket
import socketserver
import struct
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from coordinator.server.kafka import wire

TOPIC = "mb"
TOPIC_ID = uuid.UUID("5bd1a4ef-1c2a-4e5b-9d3f-0a1b2c3d4e5f")
PARTITIONS = 4
NOT_LEADER_OR_FOLLOWER = 6
CAPS = {0: 10, 1: 16, 2: 7, 3: 12, 10: 4, 18: 3, 29: 3, 30: 3, 31: 3, 32: 4, 44: 1, 60: 1}
"""The APIs each node offers, with their highest version (the lowest is kio's)."""
TXN_CAPS = {22: 6, 25: 3, 26: 3, 65: 0}
"""What a cluster with ``transactions=True`` offers besides."""
DATA_CAPS = {0: 13, 1: 17, 21: 2, 23: 4, 61: 0}
"""What a cluster with ``data=True`` offers besides (and Produce, Fetch up to v13, v17)."""
# What a cluster with ``data=True`` offers besides, at every version kio knows (-1): the admin
# and transaction APIs the listener checks (CreateTopics, DeleteTopics, CreatePartitions and
# DescribeTopicPartitions over the cluster's topics; AddPartitionsToTxn and ListTransactions over
# its transactions; the others answered with zero values, ``api_default``: only what reached the
# broker matters), and two APIs between brokers (Vote, InitializeShareGroupState) that must never
# be forwarded.
ADMIN_APIS = (17, 19, 20, 24, 27, 33, 34, 35, 36, 37, 38, 39, 40, 41, 43, 45, 46, 48, 49, 52)
ADMIN_CAPS = dict.fromkeys(ADMIN_APIS + (55, 57, 64, 66, 74, 75, 76, 77, 80, 81, 83, 88, 89), -1)
ADMIN_CAPS |= dict.fromkeys((90, 91, 92), -1)
TOPIC_ALREADY_EXISTS = 36
CONFIGS = [
    {
        "name": "cleanup.policy",
        "value": "delete",
        "read_only": False,
        "config_source": 5,
        "is_sensitive": False,
    }
]
"""The configs a created topic is answered with (CreateTopics v5+)."""
UNKNOWN_TOPIC_OR_PARTITION, UNKNOWN_TOPIC_ID = 3, 100
FETCH_SESSION_ID_NOT_FOUND, INVALID_FETCH_SESSION_EPOCH = 70, 71
DATA_APIS = frozenset({0, 1, 2, 3, 21, 23, 61})
"""What a cluster with ``data=True`` answers from its logs (``FakeNode.data_*``)."""
LONG_POLL_S = 0.1
"""How long an empty fetch waits at most (bounded, whatever its max_wait)."""
INVALID_PRODUCER_EPOCH, INVALID_TXN_STATE, TRANSACTIONAL_ID_NOT_FOUND = 47, 48, 105
HOLD_S = 30.0


@dataclass
class FakeLog:
    """One partition's records: the record batches (v2) appended, each as (base offset, last
    offset, bytes), from ``start`` (the log start offset) to ``end`` (the next offset)."""

    start: int = 0
    end: int = 0
    batches: list[tuple[int, int, bytes]] = field(default_factory=list)

    def append(self, records: bytes | None) -> int:
        """Append a Produce's record batches (their base offsets set as a broker sets them);
        the first one's offset."""
        first, pos, data = self.end, 0, bytes(records or b"")
        while pos + 61 <= len(data):
            size = 12 + struct.unpack_from(">i", data, pos + 8)[0]
            batch = bytearray(data[pos : pos + size])
            count = struct.unpack_from(">i", batch, 23)[0] + 1  # last offset delta + 1
            struct.pack_into(">q", batch, 0, self.end)  # not in the CRC
            self.batches.append((self.end, self.end + count - 1, bytes(batch)))
            self.end += count
            pos += size
        return first

    def read(self, offset: int, max_bytes: int) -> bytes:
        """The batches from ``offset`` on, at most ``max_bytes`` of them (at least one)."""
        out = b""
        for _base, last, batch in self.batches:
            if last >= max(offset, self.start) and (not out or len(out) + len(batch) <= max_bytes):
                out += batch
        return out


@dataclass
class FakeSession:
    """A fetch session (KIP-227): its partitions (key -> fetch offset, max bytes), the next
    epoch it expects, and the high watermark last sent per partition."""

    partitions: dict[tuple[Any, int], tuple[int, int]]
    epoch: int = 1
    sent: dict[tuple[Any, int], int] = field(default_factory=dict)


@dataclass
class FakeTxn:
    """A transactional id at the fake transaction coordinator (Kafka's state names)."""

    producer_id: int
    producer_epoch: int = 0
    state: str = "Empty"
    groups: set[str] = field(default_factory=set)
    partitions: set[tuple[str, int]] = field(default_factory=set)


class _Server(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True


class FakeNode:
    def __init__(self, cluster: FakeCluster, node_id: int, advertised_host: str | None) -> None:
        self.cluster = cluster
        self.node_id = node_id
        self.open: set[socket.socket] = set()
        node = self

        class Handler(socketserver.BaseRequestHandler):
            def handle(self) -> None:
                node.serve(self.request)

        self.rack: str | None = None
        self.server = _Server(("127.0.0.1", 0), Handler)
        self.port = int(self.server.server_address[1])
        self.address = f"127.0.0.1:{self.port}"
        self.advertised = (advertised_host or "127.0.0.1", self.port)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def serve(self, sock: socket.socket) -> None:
        sock.settimeout(30)
        stuck = False
        with self.cluster.lock:
            self.open.add(sock)
        try:
            while True:
                head = _exact(sock, 4)
                if head is None:
                    return
                frame = _exact(sock, struct.unpack(">i", head)[0])
                if frame is None:
                    return
                if stuck or (
                    self.cluster.silent and wire.parse_header(frame)[3] != "kip848-coordinator"
                ):
                    if not stuck:
                        with self.cluster.lock:
                            self.cluster.stuck += 1
                    stuck = True  # this connection answers nothing any more, as a wedged broker
                    continue
                out = self.answer(frame)
                if out is not None:
                    sock.sendall(out)
        except OSError:
            return
        finally:
            with self.cluster.lock:
                self.open.discard(sock)

    def answer(self, frame: bytes) -> bytes | None:
        key, version, correlation_id, _client, pos = wire.parse_header(frame)
        req = wire.decode(key, version, frame, wire.body_offset(frame, key, version, pos))
        with self.cluster.lock:
            self.cluster.log.append((self.node_id, key, version))
            self.cluster.bodies.append((key, req))
        data = self.cluster.data and key in DATA_APIS
        handler = getattr(self, f"data_{key}" if data else f"api_{key}", self.api_default)
        values = handler(req, version)
        if key == 0 and req.acks == 0:
            return None
        return wire.frame(
            key, version, correlation_id, wire.build(wire.response_class(key, version), values)
        )

    # ------------------------------------------------------------ APIs

    def api_18(self, _req: Any, _version: int) -> dict[str, Any]:
        keys = []
        caps = {**CAPS, **TXN_CAPS} if self.cluster.transactions else CAPS
        if not self.cluster.describe_transactions:
            caps = {k: v for k, v in caps.items() if k != 65}
        if self.cluster.data:
            caps = {**caps, **DATA_CAPS, **ADMIN_CAPS}
        for key, hi in sorted(caps.items()):
            known = wire.kio_versions(key)
            assert known is not None
            hi = known[1] if hi < 0 else hi
            keys.append({"api_key": key, "min_version": known[0], "max_version": hi})
        return {"error_code": 0, "api_keys": keys}

    def api_3(self, req: Any, _version: int) -> dict[str, Any]:
        cluster = self.cluster
        wanted = None if req.topics is None else {t.name for t in req.topics}
        topics = []
        ids = cluster.node_ids()
        for name, (topic_id, count) in cluster.topics.items():
            if wanted is not None and name not in wanted:
                continue
            topics.append(
                {
                    "error_code": 0,
                    "name": name,
                    "topic_id": topic_id,
                    "is_internal": False,
                    "partitions": [
                        {
                            "error_code": 0,
                            "partition_index": p,
                            "leader_id": cluster.leader(p),
                            "leader_epoch": 1,
                            "replica_nodes": cluster.replicas.get(p, ids),
                            "isr_nodes": cluster.replicas.get(p, ids),
                            "offline_replicas": [],
                        }
                        for p in range(count)
                    ],
                    "topic_authorized_operations": -(2**31),
                }
            )
        return {
            "brokers": cluster.brokers("node_id"),
            "cluster_id": "fake-cluster",
            "controller_id": cluster.controller(),
            "topics": topics,
            "cluster_authorized_operations": -(2**31),
        }

    def api_60(self, _req: Any, _version: int) -> dict[str, Any]:
        return {
            "error_code": 0,
            "error_message": None,
            "endpoint_type": 1,
            "cluster_id": "fake-cluster",
            "controller_id": self.cluster.controller(),
            "brokers": [{**b, "is_fenced": False} for b in self.cluster.brokers("broker_id")],
            "cluster_authorized_operations": -(2**31),
        }

    def api_10(self, req: Any, version: int) -> dict[str, Any]:
        """Transaction (and other non-group) coordinators: the controller node."""
        node = self.cluster.nodes[self.cluster.controller()]
        host, port = node.advertised
        if version >= 4:
            return {
                "coordinators": [
                    {"key": k, "node_id": node.node_id, "host": host, "port": port, "error_code": 0}
                    for k in req.coordinator_keys
                ]
            }
        return {"error_code": 0, "node_id": node.node_id, "host": host, "port": port}

    def api_2(self, req: Any, _version: int) -> dict[str, Any]:
        return {
            "topics": [
                {
                    "name": t.name,
                    "partitions": [
                        {
                            "partition_index": p.partition_index,
                            "error_code": 0,
                            "timestamp": -1,
                            "offset": self.node_id * 1000 + p.partition_index,
                            "leader_epoch": 1,
                        }
                        for p in t.partitions
                    ],
                }
                for t in req.topics
            ]
        }

    def api_32(self, req: Any, _version: int) -> dict[str, Any]:
        """Every resource has one config, ``answered.by`` = this node's id (answered in
        reverse order: the listener must match answers to resources, not trust positions)."""
        return {
            "results": [
                {
                    "error_code": 0,
                    "error_message": None,
                    "resource_type": r.resource_type,
                    "resource_name": r.resource_name,
                    "configs": [
                        {
                            "name": "answered.by",
                            "value": str(self.node_id),
                            "read_only": True,
                            "config_source": 5,
                            "is_sensitive": False,
                            "synonyms": [],
                            "config_type": 1,
                            "documentation": None,
                        }
                    ],
                }
                for r in reversed(req.resources)
            ]
        }

    def api_44(self, req: Any, _version: int) -> dict[str, Any]:
        return {
            "responses": [
                {
                    "error_code": 0,
                    "error_message": f"node {self.node_id}",
                    "resource_type": r.resource_type,
                    "resource_name": r.resource_name,
                }
                for r in req.resources
            ]
        }

    api_33 = api_44  # AlterConfigs answers as IncrementalAlterConfigs does

    # The broker's ACLs (the cluster's ``acls``): kept as (type, name, pattern, principal,
    # host, operation, permission) tuples; filters match exactly or by ANY/None.

    def api_30(self, req: Any, _version: int) -> dict[str, Any]:
        with self.cluster.lock:
            for c in req.creations:
                self.cluster.acls.add(
                    (
                        c.resource_type,
                        c.resource_name,
                        c.resource_pattern_type,
                        c.principal,
                        c.host,
                        c.operation,
                        c.permission_type,
                    )
                )
        return {"results": [{"error_code": 0, "error_message": None} for _ in req.creations]}

    def _matching(self, f: Any) -> list[tuple[Any, ...]]:
        wanted = (
            f.resource_type_filter,
            f.resource_name_filter,
            f.pattern_type_filter,
            f.principal_filter,
            f.host_filter,
            f.operation,
            f.permission_type,
        )
        return sorted(
            acl
            for acl in self.cluster.acls
            if all(w in (None, 1) or w == a for w, a in zip(wanted, acl, strict=True))
        )

    def api_29(self, req: Any, _version: int) -> dict[str, Any]:
        with self.cluster.lock:
            found = self._matching(req)
        return {
            "error_code": 0,
            "error_message": None,
            "resources": [
                {
                    "resource_type": a[0],
                    "resource_name": a[1],
                    "pattern_type": a[2],
                    "acls": [
                        {
                            "principal": a[3],
                            "host": a[4],
                            "operation": a[5],
                            "permission_type": a[6],
                        }
                    ],
                }
                for a in found
            ],
        }

    def api_31(self, req: Any, _version: int) -> dict[str, Any]:
        results = []
        with self.cluster.lock:
            for f in req.filters:
                found = self._matching(f)
                self.cluster.acls.difference_update(found)
                results.append(
                    {
                        "error_code": 0,
                        "error_message": None,
                        "matching_acls": [
                            {
                                "error_code": 0,
                                "error_message": None,
                                "resource_type": a[0],
                                "resource_name": a[1],
                                "pattern_type": a[2],
                                "principal": a[3],
                                "host": a[4],
                                "operation": a[5],
                                "permission_type": a[6],
                            }
                            for a in found
                        ],
                    }
                )
        return {"filter_results": results}

    def _endpoints(self) -> list[dict[str, Any]]:
        leader = self.cluster.nodes[self.cluster.leader(0)]
        host, port = leader.advertised
        return [{"node_id": leader.node_id, "host": host, "port": port, "rack": None}]

    def api_0(self, req: Any, _version: int) -> dict[str, Any]:
        return {
            "responses": [
                {
                    "name": t.name,
                    "partition_responses": [
                        {
                            "index": p.index,
                            "error_code": NOT_LEADER_OR_FOLLOWER,
                            "base_offset": -1,
                            "log_append_time": None,
                            "log_start_offset": -1,
                            "record_errors": [],
                            "current_leader": {
                                "leader_id": self.cluster.leader(0),
                                "leader_epoch": 1,
                            },
                        }
                        for p in t.partition_data
                    ],
                }
                for t in req.topic_data
            ],
            "node_endpoints": self._endpoints(),
        }

    def api_1(self, req: Any, _version: int) -> dict[str, Any]:
        return {
            "error_code": 0,
            "session_id": 0,
            "responses": [
                {
                    "topic_id": t.topic_id,
                    "partitions": [
                        {
                            "partition_index": p.partition,
                            "error_code": NOT_LEADER_OR_FOLLOWER,
                            "high_watermark": -1,
                            "last_stable_offset": -1,
                            "log_start_offset": -1,
                            "aborted_transactions": None,
                            "preferred_read_replica": -1,
                            "current_leader": {
                                "leader_id": self.cluster.leader(0),
                                "leader_epoch": 1,
                            },
                            "records": b"",
                        }
                        for p in t.partitions
                    ],
                }
                for t in req.topics
            ],
            "node_endpoints": self._endpoints(),
        }

    # ------------------------------------------------------------ data (``data=True``)

    def data_3(self, req: Any, version: int) -> dict[str, Any]:
        """Metadata, a named topic that does not exist answered UNKNOWN_TOPIC_OR_PARTITION."""
        values = self.api_3(req, version)
        listed = {t["name"] for t in values["topics"]}
        for t in req.topics or ():
            if t.name and t.name not in listed:
                values["topics"].append(
                    {"error_code": UNKNOWN_TOPIC_OR_PARTITION, "name": t.name, "partitions": []}
                )
        return values

    def _log(self, name: str | None, partition: int) -> FakeLog | None:
        return self.cluster.logs.get((name or "", partition))

    def data_0(self, req: Any, _version: int) -> dict[str, Any]:
        out = []
        with self.cluster.lock:
            for t in req.topic_data:
                name = getattr(t, "name", None) or self.cluster.name_of(t.topic_id)
                parts = []
                for p in t.partition_data:
                    log = self._log(name, p.index)
                    parts.append(
                        {
                            "index": p.index,
                            "error_code": UNKNOWN_TOPIC_OR_PARTITION if log is None else 0,
                            "base_offset": -1 if log is None else log.append(p.records),
                            "log_start_offset": -1 if log is None else log.start,
                        }
                    )
                out.append(
                    {
                        "name": getattr(t, "name", None),
                        "topic_id": getattr(t, "topic_id", None),
                        "partition_responses": parts,
                    }
                )
        return {"responses": out}

    def data_1(self, req: Any, version: int) -> dict[str, Any]:
        """Fetch with KIP-227 sessions (see the module doc)."""
        cluster = self.cluster
        by_id = version >= 13
        session_id, epoch = (req.session_id, req.session_epoch) if version >= 7 else (0, -1)

        def key(t: Any) -> Any:
            return t.topic_id if by_id else t.topic

        asked = {
            (key(t), p.partition): (p.fetch_offset, p.partition_max_bytes)
            for t in req.topics
            for p in t.partitions
        }
        forgotten = [
            (key(t), p)
            for t in getattr(req, "forgotten_topics_data", None) or ()
            for p in t.partitions
        ]
        with cluster.lock:
            if epoch in (0, -1):
                cluster.sessions.pop(session_id, None)
                session = FakeSession(partitions=asked)
                if epoch == 0:
                    session_id = 1 + max(cluster.sessions, default=1000)
                    cluster.sessions[session_id] = session
                else:
                    session_id = 0
            else:
                found = cluster.sessions.get(session_id)
                code = FETCH_SESSION_ID_NOT_FOUND if found is None else 0
                if found is not None and found.epoch != epoch:
                    code = INVALID_FETCH_SESSION_EPOCH
                if code:
                    return {"error_code": code, "session_id": 0, "responses": []}
                assert found is not None
                session = found
                session.epoch += 1
                session.partitions.update(asked)
                for k in forgotten:
                    session.partitions.pop(k, None)
                    session.sent.pop(k, None)
            full = epoch in (0, -1)
            waiting = not any(
                self._records(k, by_id, state) for k, state in session.partitions.items()
            )
        if waiting and int(req.max_wait.total_seconds() * 1000) > 0:
            time.sleep(LONG_POLL_S)  # a short long-poll: nothing to read yet
        out: list[dict[str, Any]] = []
        with cluster.lock:
            for (topic, index), state in session.partitions.items():
                log = self._log(cluster.name_of(topic) if by_id else topic, index)
                records = self._records((topic, index), by_id, state)
                hw = -1 if log is None else log.end
                if (
                    not full
                    and not records
                    and session.sent.get((topic, index)) == hw
                    and log is not None
                ):
                    continue  # unchanged: left out of an incremental answer
                session.sent[topic, index] = hw
                if not out or out[-1]["key"] != topic:
                    out.append(
                        {
                            "key": topic,
                            "topic": None if by_id else topic,
                            "topic_id": topic if by_id else None,
                            "partitions": [],
                        }
                    )
                out[-1]["partitions"].append(
                    {
                        "partition_index": index,
                        "error_code": (UNKNOWN_TOPIC_ID if by_id else UNKNOWN_TOPIC_OR_PARTITION)
                        if log is None
                        else 0,
                        "high_watermark": hw,
                        "last_stable_offset": hw,
                        "log_start_offset": -1 if log is None else log.start,
                        "records": records,
                    }
                )
        for t in out:
            del t["key"]
        return {"error_code": 0, "session_id": session_id, "responses": out}

    def _records(self, key: tuple[Any, int], by_id: bool, state: tuple[int, int]) -> bytes:
        topic, index = key
        log = self._log(self.cluster.name_of(topic) if by_id else topic, index)
        return b"" if log is None else log.read(*state)

    def data_2(self, req: Any, _version: int) -> dict[str, Any]:
        """ListOffsets: -2 the log start offset, anything else the end."""
        out = []
        with self.cluster.lock:
            for t in req.topics:
                parts = []
                for p in t.partitions:
                    log = self._log(t.name, p.partition_index)
                    offset = -1 if log is None else log.start if p.timestamp == -2 else log.end
                    parts.append(
                        {
                            "partition_index": p.partition_index,
                            "error_code": UNKNOWN_TOPIC_OR_PARTITION if log is None else 0,
                            "timestamp": -1,
                            "offset": offset,
                            "leader_epoch": 1,
                        }
                    )
                out.append({"name": t.name, "partitions": parts})
        return {"topics": out}

    def data_21(self, req: Any, _version: int) -> dict[str, Any]:
        """DeleteRecords: the log start offset moves up to the offset asked (-1: the end)."""
        out = []
        with self.cluster.lock:
            for t in req.topics:
                parts = []
                for p in t.partitions:
                    log = self._log(t.name, p.partition_index)
                    if log is not None:
                        log.start = max(
                            log.start, log.end if p.offset == -1 else min(p.offset, log.end)
                        )
                    parts.append(
                        {
                            "partition_index": p.partition_index,
                            "low_watermark": -1 if log is None else log.start,
                            "error_code": UNKNOWN_TOPIC_OR_PARTITION if log is None else 0,
                        }
                    )
                out.append({"name": t.name, "partitions": parts})
        return {"topics": out}

    def data_23(self, req: Any, _version: int) -> dict[str, Any]:
        """OffsetForLeaderEpoch: every epoch ends at the log end (epoch 1 throughout)."""
        out = []
        with self.cluster.lock:
            for t in req.topics:
                parts = []
                for p in t.partitions:
                    log = self._log(t.topic, p.partition)
                    parts.append(
                        {
                            "error_code": UNKNOWN_TOPIC_OR_PARTITION if log is None else 0,
                            "partition": p.partition,
                            "leader_epoch": -1 if log is None else 1,
                            "end_offset": -1 if log is None else log.end,
                        }
                    )
                out.append({"topic": t.topic, "partitions": parts})
        return {"topics": out}

    def data_61(self, req: Any, _version: int) -> dict[str, Any]:
        """DescribeProducers: no active producers anywhere."""
        with self.cluster.lock:
            return {
                "topics": [
                    {
                        "name": t.name,
                        "partitions": [
                            {
                                "partition_index": i,
                                "error_code": UNKNOWN_TOPIC_OR_PARTITION
                                if self._log(t.name, i) is None
                                else 0,
                                "active_producers": [],
                            }
                            for i in t.partition_indexes
                        ],
                    }
                    for t in req.topics
                ]
            }

    def api_default(self, _req: Any, _version: int) -> dict[str, Any]:
        """Any other API offered: an answer of zero values (no error)."""
        return {}

    # ------------------------------------------------------------ topic administration

    def api_19(self, req: Any, version: int) -> dict[str, Any]:
        """CreateTopics: a new topic (a fresh id, 1 partition by default) per name."""
        cluster = self.cluster
        out = []
        with cluster.lock:
            for t in req.topics:
                if t.name in cluster.topics:
                    out.append({"name": t.name, "error_code": TOPIC_ALREADY_EXISTS})
                    continue
                count = t.num_partitions if t.num_partitions > 0 else 1
                topic_id = uuid.uuid4()
                if not req.validate_only:
                    cluster.add_topic(t.name, topic_id, count)
                out.append(
                    {
                        "name": t.name,
                        "topic_id": topic_id,
                        "error_code": 0,
                        "num_partitions": count,
                        "replication_factor": 1,
                        "configs": CONFIGS,
                    }
                )
        return {"topics": out}

    def api_20(self, req: Any, version: int) -> dict[str, Any]:
        """DeleteTopics, by name (v6: or by id)."""
        cluster = self.cluster
        items = (
            [(t.name, t.topic_id) for t in req.topics]
            if version >= 6
            else [(n, None) for n in req.topic_names]
        )
        out = []
        with cluster.lock:
            for name, topic_id in items:
                found = name if name in cluster.topics else cluster.name_of(topic_id)
                if found is None:
                    code = UNKNOWN_TOPIC_ID if topic_id else UNKNOWN_TOPIC_OR_PARTITION
                    out.append({"name": name, "topic_id": topic_id, "error_code": code})
                    continue
                found_id, count = cluster.topics.pop(found)
                for p in range(count):
                    cluster.logs.pop((found, p), None)
                out.append({"name": found, "topic_id": found_id, "error_code": 0})
        return {"responses": out}

    def api_37(self, req: Any, _version: int) -> dict[str, Any]:
        """CreatePartitions: the topic grows to ``count`` partitions."""
        cluster = self.cluster
        out = []
        with cluster.lock:
            for t in req.topics:
                if t.name not in cluster.topics:
                    out.append({"name": t.name, "error_code": UNKNOWN_TOPIC_OR_PARTITION})
                    continue
                topic_id, count = cluster.topics[t.name]
                if not req.validate_only:
                    cluster.add_topic(t.name, topic_id, max(count, t.count))
                out.append({"name": t.name, "error_code": 0})
        return {"results": out}

    def api_75(self, req: Any, _version: int) -> dict[str, Any]:
        """DescribeTopicPartitions: the named topics (or all), sorted, from the cursor on, at
        most ``response_partition_limit`` partitions, then the next cursor (Kafka's paging)."""
        cluster = self.cluster
        cursor = req.cursor
        start = cursor.topic_name if cursor is not None else ""
        limit = max(1, req.response_partition_limit)
        out: list[dict[str, Any]] = []
        next_cursor = None
        count = 0
        with cluster.lock:
            names = sorted({t.name for t in req.topics} if req.topics else cluster.topics)
            for name in (n for n in names if n >= start):
                if name not in cluster.topics:
                    out.append({"error_code": UNKNOWN_TOPIC_OR_PARTITION, "name": name})
                    continue
                topic_id, partitions = cluster.topics[name]
                first = cursor.partition_index if cursor is not None and name == start else 0
                parts = []
                for p in range(first, partitions):
                    if count == limit:
                        next_cursor = {"topic_name": name, "partition_index": p}
                        break
                    parts.append(
                        {
                            "error_code": 0,
                            "partition_index": p,
                            "leader_id": self.node_id,
                            "leader_epoch": 1,
                            "replica_nodes": [self.node_id],
                            "isr_nodes": [self.node_id],
                        }
                    )
                    count += 1
                if parts:
                    out.append(
                        {
                            "error_code": 0,
                            "name": name,
                            "topic_id": topic_id,
                            "partitions": parts,
                            "topic_authorized_operations": -(2**31),
                        }
                    )
                if next_cursor is not None:
                    break
        return {"topics": out, "next_cursor": next_cursor}

    # ------------------------------------------------------------ transactions

    def api_22(self, req: Any, _version: int) -> dict[str, Any]:
        """InitProducerId: a new producer id, or the next epoch of a known transactional id
        (whose ongoing transaction is aborted, as Kafka's transaction coordinator does — or,
        v6 with KeepPreparedTxn (KIP-939), kept, to be ended with the new epoch: the answer
        names it); an idempotent producer (no transactional id) gets a producer id of its own."""
        cluster = self.cluster
        with cluster.lock:
            if req.transactional_id is None:
                cluster.idempotent += 1
                return {
                    "error_code": 0,
                    "producer_id": 9000 + cluster.idempotent,
                    "producer_epoch": 0,
                }
            t = cluster.txns.get(req.transactional_id)
            if t is None:
                t = FakeTxn(producer_id=1000 + len(cluster.txns))
                cluster.txns[req.transactional_id] = t
            elif getattr(req, "keep_prepared_txn", False) and t.state == "Ongoing":
                ongoing = {
                    "ongoing_txn_producer_id": t.producer_id,
                    "ongoing_txn_producer_epoch": t.producer_epoch,
                }
                t.producer_epoch += 1
                return {
                    "error_code": 0,
                    "producer_id": t.producer_id,
                    "producer_epoch": t.producer_epoch,
                    **ongoing,
                }
            else:
                if t.state == "Ongoing":
                    t.state = "CompleteAbort"
                t.producer_epoch += 1
            return {
                "error_code": 0,
                "producer_id": t.producer_id,
                "producer_epoch": t.producer_epoch,
            }

    def _producer(self, req: Any) -> tuple[FakeTxn | None, int]:
        t = self.cluster.txns.get(req.transactional_id)
        if t is None or t.producer_id != req.producer_id:
            return None, 49  # INVALID_PRODUCER_ID_MAPPING
        if t.producer_epoch != req.producer_epoch:
            return None, INVALID_PRODUCER_EPOCH
        return t, 0

    def api_25(self, req: Any, version: int) -> dict[str, Any]:
        """AddOffsetsToTxn; an older epoch is PRODUCER_FENCED from v2 (KIP-588), as Kafka's."""
        with self.cluster.lock:
            t, code = self._producer(req)
            known = self.cluster.txns.get(req.transactional_id)
            if (
                code == INVALID_PRODUCER_EPOCH
                and version >= 2
                and known is not None
                and req.producer_epoch < known.producer_epoch
            ):
                code = 90  # PRODUCER_FENCED
            if t is not None:
                if t.state != "Ongoing":
                    t.state, t.groups = "Ongoing", set()
                t.groups.add(req.group_id)
            return {"error_code": code}

    def api_26(self, req: Any, _version: int) -> dict[str, Any]:
        """EndTxn: completes the transaction as asked (a retry of the same end is answered
        NONE), then — with ``hold_end`` set — holds its answer until ``release_end``."""
        cluster = self.cluster
        with cluster.lock:
            t, code = self._producer(req)
            if t is not None:
                wanted = "CompleteCommit" if req.committed else "CompleteAbort"
                if t.state == "Ongoing":
                    t.state = wanted
                elif t.state != wanted:
                    code = INVALID_TXN_STATE
            held = cluster.hold_end
        if held:
            cluster.end_held.set()
            cluster.end_released.wait(HOLD_S)
        return {"error_code": code}

    def api_24(self, req: Any, _version: int) -> dict[str, Any]:
        """AddPartitionsToTxn v0-3: the partitions join the producer's transaction."""
        with self.cluster.lock:
            t = self.cluster.txns.get(req.v3_and_below_transactional_id)
            code = 0 if t is not None else 49  # INVALID_PRODUCER_ID_MAPPING
            if t is not None:
                t.state = "Ongoing"
                t.partitions |= {(x.name, p) for x in req.v3_and_below_topics for p in x.partitions}
        return {
            "results_by_topic_v3_and_below": [
                {
                    "name": x.name,
                    "results_by_partition": [
                        {"partition_index": p, "partition_error_code": code} for p in x.partitions
                    ],
                }
                for x in req.v3_and_below_topics
            ]
        }

    def api_66(self, _req: Any, _version: int) -> dict[str, Any]:
        """ListTransactions: every transactional id."""
        with self.cluster.lock:
            states = [
                {
                    "transactional_id": tid,
                    "producer_id": t.producer_id,
                    "transaction_state": t.state,
                }
                for tid, t in sorted(self.cluster.txns.items())
            ]
        return {"transaction_states": states}

    def api_65(self, req: Any, _version: int) -> dict[str, Any]:
        states = []
        with self.cluster.lock:
            for tid in req.transactional_ids:
                t = self.cluster.txns.get(tid)
                states.append(
                    {
                        "error_code": TRANSACTIONAL_ID_NOT_FOUND if t is None else 0,
                        "transactional_id": tid,
                        "transaction_state": "" if t is None else t.state,
                        "transaction_timeout": 60_000,
                        "transaction_start_time": datetime.datetime.now(datetime.UTC),
                        "producer_id": -1 if t is None else t.producer_id,
                        "producer_epoch": -1 if t is None else t.producer_epoch,
                        "topics": [
                            {
                                "topic": name,
                                "partitions": sorted(p for n, p in t.partitions if n == name),
                            }
                            for name in sorted({n for n, _p in t.partitions})
                        ]
                        if t is not None
                        else [],
                    }
                )
        return {"transaction_states": states}

    def stop(self) -> None:
        """Stop accepting and drop every open connection (as a broker that went away)."""
        self.server.shutdown()
        self.server.server_close()
        with self.cluster.lock:
            for sock in list(self.open):
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass


class FakeCluster:
    """Nodes answer as one cluster: Metadata lists every node (with its rack, if it has one);
    partition ``p`` is led by the ``p % n``-th node and replicated on every node unless
    ``replicas`` says otherwise; the controller (and transaction coordinator) is the highest
    node id."""

    def __init__(
        self,
        transactions: bool = False,
        data: bool = False,
        topics: dict[str, tuple[uuid.UUID, int]] | None = None,
    ) -> None:
        self.lock = threading.Lock()
        self.transactions = transactions
        self.data = data
        self.topics = topics or {TOPIC: (TOPIC_ID, PARTITIONS)}
        """Name -> (topic id, partition count)."""
        self.logs = {
            (n, p): FakeLog() for n, (_i, count) in self.topics.items() for p in range(count)
        }
        self.sessions: dict[int, FakeSession] = {}
        self.bodies: list[tuple[int, Any]] = []
        """Every request's (api key, decoded body), in order."""
        self.txns: dict[str, FakeTxn] = {}
        self.idempotent = 0
        """Idempotent producers given a producer id."""
        """Transactional id -> its producer and transaction (``transactions=True``)."""
        self.describe_transactions = True
        """False: DescribeTransactions is not offered (as Tansu offers none)."""
        self.hold_end = False
        self.end_held = threading.Event()
        self.end_released = threading.Event()
        self.nodes: dict[int, FakeNode] = {}
        self.log: list[tuple[int, int, int]] = []
        self.replicas: dict[int, list[int]] = {}
        """Partition -> its replicas' node ids (default: every node)."""
        self.acls: set[tuple[Any, ...]] = set()
        """The broker's ACLs (CreateAcls/DescribeAcls/DeleteAcls)."""
        self.silent = False
        """While True, only the coordinator's own requests (client id ``kip848-coordinator``)
        are answered: clients' forwarded requests are read and never answered."""
        self.stuck = 0
        """Connections that left a request unanswered (``silent``)."""

    def add_node(
        self, node_id: int, advertised_host: str | None = None, rack: str | None = None
    ) -> FakeNode:
        node = FakeNode(self, node_id, advertised_host)
        node.rack = rack
        with self.lock:
            self.nodes[node_id] = node
        return node

    def add_topic(self, name: str, topic_id: uuid.UUID, count: int) -> None:
        """A topic of ``count`` partitions (new ones get empty logs); under the lock."""
        self.topics[name] = (topic_id, count)
        for p in range(count):
            self.logs.setdefault((name, p), FakeLog())

    def node_ids(self) -> list[int]:
        with self.lock:
            return sorted(self.nodes)

    def leader(self, partition: int) -> int:
        ids = self.node_ids()
        return ids[partition % len(ids)]

    def controller(self) -> int:
        return max(self.node_ids())

    def brokers(self, id_field: str) -> list[dict[str, Any]]:
        with self.lock:
            nodes = sorted(self.nodes.values(), key=lambda n: n.node_id)
        return [
            {id_field: n.node_id, "host": n.advertised[0], "port": n.advertised[1], "rack": n.rack}
            for n in nodes
        ]

    def expire(self, transactional_id: str) -> None:
        """The transaction times out: aborted with the next epoch, as Kafka's coordinator does."""
        with self.lock:
            t = self.txns[transactional_id]
            assert t.state == "Ongoing", t
            t.state, t.producer_epoch = "CompleteAbort", t.producer_epoch + 1

    def commit_directly(self, transactional_id: str) -> None:
        """An EndTxn(commit) that reached the coordinator without passing the listener."""
        with self.lock:
            t = self.txns[transactional_id]
            assert t.state == "Ongoing", t
            t.state = "CompleteCommit"

    def asked(self, key: int) -> list[Any]:
        """The decoded bodies of the requests of ``key`` received, in order."""
        with self.lock:
            return [body for k, body in self.bodies if k == key]

    def name_of(self, topic_id: uuid.UUID | None) -> str | None:
        return next((n for n, (i, _c) in self.topics.items() if i == topic_id), None)

    def requests(self, key: int) -> list[int]:
        """The node ids that received requests of ``key``, in order."""
        with self.lock:
            return [node for node, k, _v in self.log if k == key]

    def stop(self) -> None:
        for node in list(self.nodes.values()):
            node.stop()


def _exact(sock: socket.socket, n: int) -> bytes | None:
    out = b""
    while len(out) < n:
        chunk = sock.recv(n - len(out))
        if not chunk:
            return None
        out += chunk
    return out
