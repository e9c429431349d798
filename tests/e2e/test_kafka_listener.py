"""The Kafka listener in coordinator-only mode, driven by a hand-built kio client: every served
API and version family, the same state as gRPC, response order, and Kafka's answers to bad input."""

from __future__ import annotations

import struct
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import run_cli
from kafka_support import KafkaClient, KafkaServer, encode_request, request
from kio.schema.errors import ErrorCode as E
from kio.serial import entity_reader

from coordinator.server.kafka import wire
from kip848.v1 import common_pb2, consumer_group_pb2, consumer_group_pb2_grpc


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaServer]:
    s = KafkaServer(
        tmp_path_factory.mktemp("kafka") / "data",
        "--set",
        "connections.max.idle.ms=1500",
        "--set",
        "socket.request.max.bytes=65536",
    )
    try:
        yield s
    finally:
        assert s.stop() == 0, s.stderr_text()


@pytest.fixture
def client(server: KafkaServer) -> Iterator[KafkaClient]:
    c = server.client()
    yield c
    c.close()


def node(server: KafkaServer) -> tuple[str, int]:
    host, _, port = server.kafka_address.rpartition(":")
    return host, int(port)


SERVED = {8: (2, 10), 9: (1, 10), 10: (0, 6), 11: (0, 9), 12: (0, 4), 13: (0, 5), 14: (0, 5)}
SERVED |= {15: (0, 6), 16: (0, 5), 32: (1, 4), 42: (0, 2), 44: (0, 1), 47: (0, 0)}
SERVED |= {68: (0, 1), 69: (0, 1), 3: (0, 13), 18: (0, 4)}
SERVED |= {29: (1, 3), 30: (1, 3), 31: (1, 3), 50: (0, 0), 51: (0, 0)}  # ACLs, SCRAM users
SERVED |= {17: (1, 1), 36: (0, 2)}  # SASL: ILLEGAL_SASL_STATE without it, as Kafka
SERVED |= {19: (2, 7), 20: (1, 6), 37: (0, 3)}  # the topic registry (registry_admin.py)


# ---------------------------------------------------------------- ApiVersions


@pytest.mark.parametrize("version", [0, 3, 4])
def test_api_versions_lists_exactly_the_served_apis(client: KafkaClient, version: int) -> None:
    fields = {"client_software_name": "kio-test", "client_software_version": "1.0"}
    resp = client.call(request(18, version, **(fields if version >= 3 else {})))
    assert resp.error_code == E.none
    assert {k.api_key: (k.min_version, k.max_version) for k in resp.api_keys} == SERVED
    assert [k.api_key for k in resp.api_keys] == sorted(SERVED)


def test_api_versions_of_an_unknown_version_answers_v0_with_unsupported_version(
    client: KafkaClient,
) -> None:
    raw = struct.pack(">hhih", 18, 9, 77, 3) + b"abc" + b"\0\0\0"
    client.send_raw(struct.pack(">i", len(raw)) + raw)
    frame = client.read_frame()
    assert struct.unpack_from(">i", frame)[0] == 77
    from kio.index import load_response_schema
    from kio.serial import entity_reader

    resp, _ = entity_reader(load_response_schema(18, 0))(frame, 4)
    # Kafka (KIP-511): only ApiVersions' own range, what the client retries with.
    assert resp.error_code == E.unsupported_version
    assert [(k.api_key, k.min_version, k.max_version) for k in resp.api_keys] == [(18, 0, 4)]


def test_api_versions_v3_refuses_an_invalid_software_name(client: KafkaClient) -> None:
    resp = client.call(
        request(18, 3, client_software_name="bad name!", client_software_version="1")
    )
    assert resp.error_code == E.invalid_request
    assert resp.api_keys == ()  # Kafka's error answer: no ranges
    # The connection stays: a valid ApiVersions is answered in full.
    resp = client.call(request(18, 3, client_software_name="ok", client_software_version="1"))
    assert resp.error_code == E.none and len(resp.api_keys) == len(SERVED)


def test_sasl_requests_on_a_listener_without_sasl_are_illegal_sasl_state(
    client: KafkaClient,
) -> None:
    """A client set up for SASL against a PLAINTEXT port: Kafka's KafkaApis answers its
    SaslHandshake and SaslAuthenticate ILLEGAL_SASL_STATE in band (and lists both in
    ApiVersions), so the client reports the mistake; the connection stays. Before: not
    advertised, and the connection closed."""
    hs = client.call(request(17, 1, mechanism="PLAIN"))
    assert (hs.error_code, hs.mechanisms) == (E.illegal_sasl_state, ())
    for version in (0, 1, 2):
        auth = client.call(request(36, version, auth_bytes=b"\0alice\0secret"))
        assert auth.error_code == E.illegal_sasl_state
        assert auth.error_message == (
            "SaslAuthenticate request received after successful authentication"
        )
        assert auth.auth_bytes == b""
    resp = client.call(request(18, 3, client_software_name="ok", client_software_version="1"))
    assert resp.error_code == E.none  # served as before


# ---------------------------------------------------------------- KIP-848 over Kafka, and gRPC


def not_classic(c: KafkaClient, group: str) -> list[tuple]:
    """``group``'s whole DescribeGroups v5 and v6 answers."""
    answers = []
    for version in (5, 6):
        (d,) = c.call(
            request(15, version, groups=[group], include_authorized_operations=False)
        ).groups
        answers.append(
            (
                d.error_code,
                getattr(d, "error_message", None),
                d.group_id,
                d.group_state,
                d.protocol_type,
                d.protocol_data,
                d.members,
                d.authorized_operations,
            )
        )
    return answers


def kafka_not_classic(group: str) -> list[tuple]:
    """Kafka 4.3's DescribeGroups v5 and v6 answers for a group that is not a classic group."""
    omitted = -(2**31)
    return [
        (E.none, None, group, "Dead", "", "", (), omitted),
        (
            E.group_id_not_found,
            f"Group {group} is not a classic group.",
            group,
            "Dead",
            "",
            "",
            (),
            omitted,
        ),
    ]


def test_consumer_group_heartbeat_join_commit_fetch_describe_leave(server: KafkaServer) -> None:
    raw_id = server.create_topic("k-orders", 3)
    topic = uuid.UUID(bytes=raw_id)
    c = server.client("librdkafka-like")
    member = "Zk8Sdl+/AAAAAAAAAAAAAA"  # client-generated, standard base64 (KIP-1082)
    join = c.call(
        request(
            68,
            1,
            group_id="k-g1",
            member_id=member,
            member_epoch=0,
            rebalance_timeout=300000,
            subscribed_topic_names=["k-orders"],
            subscribed_topic_regex="",
            topic_partitions=[],
        )
    )
    assert (join.error_code, join.member_id, join.member_epoch) == (E.none, member, 1)
    assert join.heartbeat_interval.total_seconds() == 5.0
    assert [(tp.topic_id, tp.partitions) for tp in join.assignment.topic_partitions] == [
        (topic, (0, 1, 2))
    ]
    ack = c.call(
        request(
            68,
            1,
            group_id="k-g1",
            member_id=member,
            member_epoch=1,
            topic_partitions=[{"topic_id": topic, "partitions": [0, 1, 2]}],
        )
    )
    assert (ack.error_code, ack.member_epoch, ack.assignment) == (E.none, 1, None)

    # The same group over gRPC: the member is there, with its client id and assignment.
    stub = consumer_group_pb2_grpc.ConsumerGroupServiceStub(server.channel)
    desc = stub.ConsumerGroupDescribe(
        consumer_group_pb2.ConsumerGroupDescribeRequest(group_ids=["k-g1"]), timeout=10
    )
    (g,) = desc.groups
    assert (g.group_state, g.group_epoch, g.assignment_epoch) == ("Stable", 1, 1)
    (m,) = g.members
    assert (m.member_id, m.client_id, m.member_epoch, m.member_type) == (
        member,
        "librdkafka-like",
        1,
        1,
    )
    assert m.client_host == "/127.0.0.1"
    assert list(m.assignment.topic_partitions[0].partitions) == [0, 1, 2]

    # ConsumerGroupDescribe over Kafka, v0 and v1.
    for version in (0, 1):
        (kg,) = c.call(request(69, version, group_ids=["k-g1"])).groups
        assert (kg.error_code, kg.group_state, kg.group_epoch, kg.assignor_name) == (
            E.none,
            "Stable",
            1,
            "uniform",
        )
        (km,) = kg.members
        assert (km.member_id, km.client_id, km.subscribed_topic_names) == (
            member,
            "librdkafka-like",
            ("k-orders",),
        )
        assert [
            (tp.topic_id, tp.topic_name, tp.partitions) for tp in km.assignment.topic_partitions
        ] == [(topic, "k-orders", (0, 1, 2))]
        if version == 1:
            assert km.member_type == 1
    (missing,) = c.call(request(69, 1, group_ids=["nope"])).groups
    assert missing.error_code == E.group_id_not_found

    # OffsetCommit v9 with the member epoch; a stale epoch is fenced; v8 from a KIP-848 member
    # gets Kafka's UNSUPPORTED_VERSION on every partition.
    def commit(version: int, epoch: int) -> list[tuple[int, E]]:
        resp = c.call(
            request(
                8,
                version,
                group_id="k-g1",
                generation_id_or_member_epoch=epoch,
                member_id=member,
                topics=[
                    {
                        "name": "k-orders",
                        "partitions": [
                            {
                                "partition_index": 0,
                                "committed_offset": 42,
                                "committed_metadata": "m",
                            },
                            {
                                "partition_index": 2,
                                "committed_offset": 7,
                                "committed_metadata": None,
                            },
                        ],
                    }
                ],
            )
        )
        (t,) = resp.topics
        assert t.name == "k-orders"
        return [(p.partition_index, p.error_code) for p in t.partitions]

    assert commit(9, 1) == [(0, E.none), (2, E.none)]
    assert commit(9, 2) == [(0, E.stale_member_epoch), (2, E.stale_member_epoch)]
    assert commit(8, 1) == [(0, E.unsupported_version), (2, E.unsupported_version)]
    assert commit(3, 1) == [(0, E.unsupported_version), (2, E.unsupported_version)]

    # OffsetFetch: v9 with the member (librdkafka's KIP-848 shape), v8 multi-group, v7 single.
    v9 = c.call(
        request(
            9,
            9,
            groups=[{"group_id": "k-g1", "member_id": None, "member_epoch": -1, "topics": None}],
            require_stable=True,
        )
    )
    (g9,) = v9.groups
    assert (g9.group_id, g9.error_code) == ("k-g1", E.none)
    assert [
        (p.partition_index, p.committed_offset, p.metadata) for p in g9.topics[0].partitions
    ] == [
        (0, 42, "m"),
        (2, 7, ""),
    ]
    fenced = c.call(
        request(
            9,
            9,
            groups=[{"group_id": "k-g1", "member_id": member, "member_epoch": 5, "topics": None}],
        )
    )
    assert fenced.groups[0].error_code == E.stale_member_epoch
    v7 = c.call(
        request(9, 7, group_id="k-g1", topics=[{"name": "k-orders", "partition_indexes": [0, 1]}])
    )
    assert v7.error_code == E.none
    assert [(p.partition_index, p.committed_offset) for p in v7.topics[0].partitions] == [
        (0, 42),
        (1, -1),
    ]
    v1 = c.call(
        request(9, 1, group_id="k-g1", topics=[{"name": "k-orders", "partition_indexes": [2]}])
    )
    assert [(p.partition_index, p.committed_offset) for p in v1.topics[0].partitions] == [(2, 7)]

    # OffsetDelete: the group subscribes to the topic -> GROUP_SUBSCRIBED_TO_TOPIC.
    od = c.call(
        request(
            47,
            0,
            group_id="k-g1",
            topics=[{"name": "k-orders", "partitions": [{"partition_index": 0}]}],
        )
    )
    assert od.topics[0].partitions[0].error_code == E.group_subscribed_to_topic

    # ListGroups with type and state filters (v5), and v0.
    listed = c.call(request(16, 5, states_filter=["stable"], types_filter=["consumer"]))
    assert ("k-g1", "consumer", "Stable", "consumer") in [
        (g.group_id, g.protocol_type, g.group_state, g.group_type) for g in listed.groups
    ]
    assert c.call(request(16, 5, types_filter=["classic"], states_filter=[])).groups == () or all(
        g.group_type == "classic"
        for g in c.call(request(16, 5, types_filter=["classic"], states_filter=[])).groups
    )
    assert "k-g1" in [g.group_id for g in c.call(request(16, 0)).groups]

    # DescribeGroups: a consumer group is not a classic group (Kafka 4.3): v6 says so, older
    # versions answer it as an unknown group (Dead, no error); so does it once empty.
    assert not_classic(c, "k-g1") == kafka_not_classic("k-g1")

    # Leave (epoch -1), then DeleteGroups.
    leave = c.call(
        request(68, 1, group_id="k-g1", member_id=member, member_epoch=-1, topic_partitions=None)
    )
    assert (leave.error_code, leave.member_epoch) == (E.none, -1)
    assert not_classic(c, "k-g1") == kafka_not_classic("k-g1")
    deleted = c.call(request(42, 2, groups_names=["k-g1", "", "nope", "k-g1", "nope"]))
    assert [(r.group_id, r.error_code) for r in deleted.results] == [  # each name once
        ("k-g1", E.none),
        ("", E.invalid_group_id),
        ("nope", E.group_id_not_found),
    ]
    c.close()


def test_heartbeat_v1_without_member_id_is_invalid_request_and_v0_gets_one(
    client: KafkaClient, server: KafkaServer
) -> None:
    server.create_topic("k-v0", 1)
    resp = client.call(
        request(
            68,
            1,
            group_id="k-g2",
            member_id="",
            member_epoch=0,
            subscribed_topic_names=["k-v0"],
            topic_partitions=[],
        )
    )
    assert (resp.error_code, resp.error_message) == (E.invalid_request, "MemberId can't be empty.")
    v0 = client.call(
        request(
            68,
            0,
            group_id="k-g2",
            member_id="",
            member_epoch=0,
            rebalance_timeout=30000,
            subscribed_topic_names=["k-v0"],
            topic_partitions=[],
        )
    )
    assert v0.error_code == E.none and v0.member_id and v0.member_epoch == 1


def test_a_group_joined_over_grpc_is_used_over_kafka(
    server: KafkaServer, client: KafkaClient
) -> None:
    raw = server.create_topic("k-mixed", 2)
    stub = consumer_group_pb2_grpc.ConsumerGroupServiceStub(server.channel)
    joined = stub.ConsumerGroupHeartbeat(
        consumer_group_pb2.ConsumerGroupHeartbeatRequest(
            group_id="k-g3",
            member_id="grpc-member-000000000",
            member_epoch=0,
            rebalance_timeout_ms=30000,
            subscribed_topic_names=common_pb2.TopicNames(names=["k-mixed"]),
            topic_partitions=common_pb2.TopicPartitionsList(),
        ),
        timeout=10,
    )
    assert joined.error_code == 0 and joined.member_epoch == 1
    # The gRPC member heartbeats over Kafka now, and commits over Kafka.
    hb = client.call(
        request(
            68,
            1,
            group_id="k-g3",
            member_id="grpc-member-000000000",
            member_epoch=1,
            topic_partitions=[{"topic_id": uuid.UUID(bytes=raw), "partitions": [0, 1]}],
        )
    )
    assert (hb.error_code, hb.member_epoch) == (E.none, 1)
    commit = client.call(
        request(
            8,
            9,
            group_id="k-g3",
            generation_id_or_member_epoch=1,
            member_id="grpc-member-000000000",
            topics=[
                {
                    "name": "k-mixed",
                    "partitions": [
                        {"partition_index": 1, "committed_offset": 3, "committed_metadata": ""}
                    ],
                }
            ],
        )
    )
    assert commit.topics[0].partitions[0].error_code == E.none
    # A second member joins over Kafka: the group over gRPC has both.
    second = client.call(
        request(
            68,
            1,
            group_id="k-g3",
            member_id="kafka-member-000000000",
            member_epoch=0,
            rebalance_timeout=30000,
            subscribed_topic_names=["k-mixed"],
            topic_partitions=[],
        )
    )
    assert second.error_code == E.none
    desc = stub.ConsumerGroupDescribe(
        consumer_group_pb2.ConsumerGroupDescribeRequest(group_ids=["k-g3"]), timeout=10
    )
    assert sorted(m.member_id for m in desc.groups[0].members) == [
        "grpc-member-000000000",
        "kafka-member-000000000",
    ]


# ---------------------------------------------------------------- classic groups


def _subscription(topics: list[str]) -> bytes:
    """ConsumerProtocolSubscription v0 (what kafka-python and aiokafka send)."""
    out = struct.pack(">hi", 0, len(topics))
    for t in topics:
        out += struct.pack(">h", len(t)) + t.encode()
    return out + struct.pack(">i", -1)


def test_classic_join_sync_heartbeat_describe_leave(
    server: KafkaServer, client: KafkaClient
) -> None:
    server.create_topic("k-classic", 2)
    join = dict(
        group_id="k-c1",
        session_timeout=10000,
        rebalance_timeout=10000,
        member_id="",
        protocol_type="consumer",
        protocols=[{"name": "range", "metadata": _subscription(["k-classic"])}],
    )
    first = client.call(request(11, 5, **join))
    assert first.error_code == E.member_id_required and first.member_id
    client.send(request(11, 5, **{**join, "member_id": first.member_id}))
    joined = client.receive_advancing(server.advance, 3000)  # the initial rebalance delay
    assert (joined.error_code, joined.member_id, joined.protocol_name) == (
        E.none,
        first.member_id,
        "range",
    )
    gen = joined.generation_id
    # A classic group: the member is the leader and gets every member's subscription.
    assert joined.leader == first.member_id
    assert [(m.member_id, m.metadata) for m in joined.members] == [
        (first.member_id, _subscription(["k-classic"]))
    ]
    assignment = struct.pack(">hih", 0, 1, 9) + b"k-classic" + struct.pack(">iii", 2, 0, 1)
    assignment += struct.pack(">i", -1)
    synced = client.call(
        request(
            14,
            3,
            group_id="k-c1",
            generation_id=gen,
            member_id=first.member_id,
            assignments=[{"member_id": first.member_id, "assignment": assignment}],
        )
    )
    assert (synced.error_code, synced.assignment) == (E.none, assignment)
    hb = client.call(request(12, 3, group_id="k-c1", generation_id=gen, member_id=first.member_id))
    assert hb.error_code == E.none
    (described,) = client.call(
        request(15, 5, groups=["k-c1"], include_authorized_operations=False)
    ).groups
    assert (described.error_code, described.group_state, described.protocol_type) == (
        E.none,
        "Stable",
        "consumer",
    )
    assert [m.member_id for m in described.members] == [first.member_id]
    assert described.members[0].client_id == "kio-test"
    # DescribeGroups: unknown group -> v6 GROUP_ID_NOT_FOUND, v5 Dead with no error.
    (v6,) = client.call(request(15, 6, groups=["nope"], include_authorized_operations=False)).groups
    assert v6.error_code == E.group_id_not_found
    (v5,) = client.call(request(15, 5, groups=["nope"], include_authorized_operations=False)).groups
    assert (v5.error_code, v5.group_state) == (E.none, "Dead")
    # LeaveGroup v3 (batch): the member and an unknown one.
    left = client.call(
        request(
            13, 3, group_id="k-c1", members=[{"member_id": first.member_id}, {"member_id": "ghost"}]
        )
    )
    assert [(m.member_id, m.error_code) for m in left.members] == [
        (first.member_id, E.none),
        ("ghost", E.unknown_member_id),
    ]


def test_join_group_v3_needs_no_member_id_round_trip(
    server: KafkaServer, client: KafkaClient
) -> None:
    server.create_topic("k-old", 1)
    client.send(
        request(
            11,
            3,
            group_id="k-c2",
            session_timeout=10000,
            rebalance_timeout=10000,
            member_id="",
            protocol_type="consumer",
            protocols=[{"name": "range", "metadata": _subscription(["k-old"])}],
        )
    )
    joined = client.receive_advancing(server.advance, 3000)
    assert joined.error_code == E.none and joined.member_id and joined.generation_id >= 1
    # LeaveGroup v1: a single member, the top-level error only.
    assert (
        client.call(request(13, 1, group_id="k-c2", member_id=joined.member_id)).error_code
        == E.none
    )
    assert (
        client.call(request(13, 1, group_id="k-c2", member_id="ghost")).error_code
        == E.unknown_member_id
    )


# ---------------------------------------------------------------- FindCoordinator, Metadata, configs


def test_find_coordinator_single_and_batched(server: KafkaServer, client: KafkaClient) -> None:
    host, port = node(server)
    for version in (0, 1, 2, 3):
        fields = {"key": "any-group"} | ({"key_type": 0} if version >= 1 else {})
        resp = client.call(request(10, version, **fields))
        assert (resp.error_code, resp.node_id, resp.host, resp.port) == (E.none, 0, host, port)
    resp = client.call(request(10, 6, key_type=0, coordinator_keys=["a", "b"]))
    assert [(x.key, x.node_id, x.host, x.port, x.error_code) for x in resp.coordinators] == [
        ("a", 0, host, port, E.none),
        ("b", 0, host, port, E.none),
    ]
    txn = client.call(request(10, 6, key_type=1, coordinator_keys=["t"]))
    assert txn.coordinators[0].error_code == E.invalid_request


def test_metadata_from_the_registry(server: KafkaServer, client: KafkaClient) -> None:
    raw = server.create_topic("k-meta", 2)
    host, port = node(server)
    resp = client.call(
        request(
            3,
            12,
            topics=[{"name": "k-meta", "topic_id": None}, {"name": "k-none", "topic_id": None}],
            allow_auto_topic_creation=True,
            include_topic_authorized_operations=False,
        )
    )
    assert [(b.node_id, b.host, b.port) for b in resp.brokers] == [(0, host, port)]
    assert resp.controller_id == 0
    found, missing = resp.topics
    assert (found.name, found.topic_id, found.error_code) == (
        "k-meta",
        uuid.UUID(bytes=raw),
        E.none,
    )
    assert [(p.partition_index, p.leader_id, p.replica_nodes) for p in found.partitions] == [
        (0, 0, (0,)),
        (1, 0, (0,)),
    ]
    assert (missing.name, missing.error_code) == ("k-none", E.unknown_topic_or_partition)
    by_id = client.call(
        request(
            3,
            13,
            topics=[
                {"name": None, "topic_id": uuid.UUID(bytes=raw)},
                {"name": None, "topic_id": uuid.uuid4()},
            ],
            include_topic_authorized_operations=False,
        )
    )
    assert [(t.name, t.error_code) for t in by_id.topics] == [
        ("k-meta", E.none),
        (None, E.unknown_topic_id),
    ]
    everything = client.call(request(3, 1, topics=None))
    assert "k-meta" in [t.name for t in everything.topics]


def test_metadata_requests_kafka_refuses_or_reads_its_own_way(
    server: KafkaServer, client: KafkaClient
) -> None:
    """Kafka's handleTopicMetadataRequest: a topic asked twice is answered once; asked by id
    (v12+), the names beside are not looked at; a topic id or a null name before v12 makes the
    whole request INVALID_REQUEST, each topic asked (MetadataRequest.getErrorResponse)."""
    raw = server.create_topic("k-meta-twice", 1)
    topic_id = uuid.UUID(bytes=raw)
    twice = client.call(
        request(
            3,
            12,
            topics=[
                {"name": "k-meta-twice", "topic_id": None},
                {"name": "k-meta-twice", "topic_id": None},
                {"name": "k-meta-nope", "topic_id": None},
                {"name": "k-meta-nope", "topic_id": None},
            ],
            include_topic_authorized_operations=False,
        )
    )
    assert [(t.name, t.error_code) for t in twice.topics] == [
        ("k-meta-twice", E.none),
        ("k-meta-nope", E.unknown_topic_or_partition),
    ]
    by_id = client.call(
        request(
            3,
            12,
            topics=[
                {"name": "k-meta-nope", "topic_id": None},
                {"name": None, "topic_id": topic_id},
                {"name": None, "topic_id": topic_id},
            ],
            include_topic_authorized_operations=False,
        )
    )
    assert [(t.name, t.topic_id, t.error_code) for t in by_id.topics] == [
        ("k-meta-twice", topic_id, E.none)
    ]
    for version in (10, 11):
        refused = client.call(
            request(
                3,
                version,
                topics=[
                    {"name": "k-meta-twice", "topic_id": None},
                    {"name": None, "topic_id": topic_id},
                ],
                include_topic_authorized_operations=False,
            )
        )
        assert refused.brokers == ()
        assert [(t.name, t.topic_id, t.error_code, t.partitions) for t in refused.topics] == [
            ("k-meta-twice", None, E.invalid_request, ()),
            ("", topic_id, E.invalid_request, ()),
        ]
    # The connection was not closed: the same topics by name are answered.
    fine = client.call(request(3, 11, topics=[{"name": "k-meta-twice", "topic_id": None}]))
    assert [(t.name, t.error_code) for t in fine.topics] == [("k-meta-twice", E.none)]


def test_metadata_of_a_topic_name_kafka_refuses(client: KafkaClient) -> None:
    """Kafka's getTopicMetadata answers a topic it does not have UNKNOWN_TOPIC_OR_PARTITION,
    and INVALID_TOPIC_EXCEPTION when the name is not a legal topic name (Topic.validate: empty,
    "." or "..", longer than 249, other characters than ASCII alphanumerics, '.', '_', '-'),
    each under the name asked; an empty name was answered UNKNOWN_TOPIC_OR_PARTITION with a
    null name, the others UNKNOWN_TOPIC_OR_PARTITION."""
    names = ["", "..", "a/b", "x" * 250, "k-meta-missing"]
    for version in (1, 12):
        answer = client.call(
            request(
                3,
                version,
                topics=[{"name": n, "topic_id": None} for n in names],
                allow_auto_topic_creation=False,
                include_topic_authorized_operations=False,
            )
        )
        invalid, unknown = E.invalid_topic_exception, E.unknown_topic_or_partition
        assert list(answer.topics) == [
            wire.build(
                type(answer.topics[0]),
                error_code=code,
                name=name,
                topic_id=None,
                is_internal=False,
                partitions=[],
                topic_authorized_operations=-(2**31),
            )
            for name, code in zip(names, [invalid] * 4 + [unknown], strict=True)
        ], version


def test_group_configs_describe_and_alter(client: KafkaClient) -> None:
    alter = client.call(
        request(
            44,
            1,
            validate_only=False,
            resources=[
                {
                    "resource_type": 32,
                    "resource_name": "k-cfg",
                    "configs": [
                        {
                            "name": "consumer.heartbeat.interval.ms",
                            "config_operation": 0,
                            "value": "6000",
                        }
                    ],
                },
                {"resource_type": 2, "resource_name": "a-topic", "configs": []},
            ],
        )
    )
    assert [(r.resource_name, r.error_code) for r in alter.responses] == [
        ("k-cfg", E.none),
        ("a-topic", E.invalid_request),
    ]
    desc = client.call(
        request(
            32,
            4,
            include_synonyms=True,
            include_documentation=True,
            resources=[
                {
                    "resource_type": 32,
                    "resource_name": "k-cfg",
                    "configuration_keys": ["consumer.heartbeat.interval.ms"],
                }
            ],
        )
    )
    (result,) = desc.results
    (entry,) = result.configs
    assert (entry.name, entry.value, entry.config_source) == (
        "consumer.heartbeat.interval.ms",
        "6000",
        8,
    )
    assert [(s.name, s.value) for s in entry.synonyms] == [
        ("consumer.heartbeat.interval.ms", "6000")
    ]
    assert entry.documentation


# ---------------------------------------------------------------- order and bad input


def test_a_parked_join_holds_back_later_answers_on_its_connection(server: KafkaServer) -> None:
    server.create_topic("k-park", 1)
    c = server.client()
    other = server.client()
    join = dict(
        group_id="k-c3",
        session_timeout=10000,
        rebalance_timeout=10000,
        group_instance_id=None,
        protocol_type="consumer",
        protocols=[{"name": "range", "metadata": _subscription(["k-park"])}],
        reason=None,
    )
    first = c.call(request(11, 7, member_id="", **join))
    assert first.error_code == E.member_id_required
    c.send(request(11, 7, member_id=first.member_id, **join))
    c.send(request(18, 0))
    c.send(request(16, 5, states_filter=[], types_filter=[]))
    # Nothing comes back while the join waits at the barrier; another connection is served.
    with pytest.raises(TimeoutError):
        c.read_frame(timeout=0.5)
    assert other.call(request(18, 0)).error_code == E.none
    assert c.receive_advancing(server.advance, 3000).error_code == E.none  # JoinGroup, then
    assert c.receive().error_code == E.none  # the two behind it, in order
    assert c.receive().error_code == E.none
    c.close()
    other.close()


def test_pipelined_requests_are_answered_in_order(client: KafkaClient) -> None:
    data = b"".join(
        encode_request(
            request(18, 3, client_software_name="x", client_software_version="1")
            if i % 3 == 0
            else request(10, 2, key="g", key_type=0)
            if i % 3 == 1
            else request(16, 4, states_filter=[]),
            i + 1000,
        )
        for i in range(30)
    )
    client.send_raw(data)
    for i in range(30):
        frame = client.read_frame()
        assert struct.unpack_from(">i", frame)[0] == i + 1000


@pytest.mark.parametrize(
    "garbage",
    [
        pytest.param(struct.pack(">i", 1 << 20) + b"x" * 16, id="oversized"),
        pytest.param(struct.pack(">i", -5), id="negative-size"),
        pytest.param(struct.pack(">ihhih", 10, 68, 1, 1, 0), id="truncated-body"),
        pytest.param(struct.pack(">i", 4) + b"\x00\x01\x02\x03", id="truncated-header"),
        pytest.param(struct.pack(">ihhih", 10, 999, 0, 1, 0), id="unknown-api-key"),
        pytest.param(struct.pack(">ihhih", 10, 68, 7, 1, 0), id="unsupported-version"),
        pytest.param(struct.pack(">ihhih", 10, 0, 9, 1, 0), id="data-api-without-upstream"),
        pytest.param(struct.pack(">i", 40) + bytes(range(40)), id="garbage"),
    ],
)
def test_bad_input_closes_only_that_connection(server: KafkaServer, garbage: bytes) -> None:
    bad = server.client()
    good = server.client()
    bad.send_raw(garbage)
    assert bad.closed_by_server(timeout=5)
    assert good.call(request(18, 0)).error_code == E.none
    bad.close()
    good.close()


@pytest.mark.parametrize(
    "bad",
    [
        pytest.param(struct.pack(">ihhih", 10, 999, 0, 9, -1), id="unknown-api"),
        pytest.param(struct.pack(">ihhih", 10, 12, 99, 9, -1), id="unsupported-version"),
        pytest.param(struct.pack(">i", -5), id="negative-size"),
    ],
)
def test_requests_read_before_a_bad_one_are_answered_before_the_close(
    server: KafkaServer, bad: bytes
) -> None:
    """Kafka reads a connection's next request only once it answered the one before, so the
    requests pipelined ahead of one it closes the connection on are answered first. An
    OffsetCommit (which waits for its durable write) pipelined with a bad frame behind it was
    committed and never answered: the close came first."""
    topic = f"k-before-bad-{bad.hex()[8:16]}"
    server.create_topic(topic, 1)
    c = server.client()
    commit = request(
        8,
        9,
        group_id=topic,
        generation_id_or_member_epoch=-1,
        member_id="",
        topics=[{"name": topic, "partitions": [{"partition_index": 0, "committed_offset": 4}]}],
    )
    c.send_raw(encode_request(request(18, 0), 7) + encode_request(commit, 8) + bad)
    versions = c.read_frame()
    assert versions[:6] == struct.pack(">ih", 7, E.none)
    frame = c.read_frame()
    assert struct.unpack_from(">i", frame)[0] == 8
    cls = wire.response_class(8, 9)
    assert entity_reader(cls)(frame, 5)[0] == wire.build(
        cls,
        topics=[{"name": topic, "partitions": [{"partition_index": 0, "error_code": 0}]}],
    )
    assert c.closed_by_server(timeout=5)
    c.close()


def test_a_client_id_that_is_not_utf8_is_read_as_kafka_reads_it(server: KafkaServer) -> None:
    """Kafka reads a header's client id as Java's String(bytes, UTF_8): bytes that are not UTF-8
    become U+FFFD and the request is served (a client configured with a Latin-1 client.id works
    against Kafka); it closed every connection of such a client here."""
    c = server.client()
    member = "Latin1AAAAAAAAAAAAAAAA"
    join = request(
        68,
        1,
        group_id="k-latin1",
        member_id=member,
        member_epoch=0,
        rebalance_timeout=300000,
        subscribed_topic_names=["k-latin1-topic"],
        subscribed_topic_regex="",
        topic_partitions=[],
    )
    framed = encode_request(join, 41, "caf!")
    c.send_raw(framed.replace(b"caf!", b"caf\xe9"))  # Latin-1 "café" as the client id
    frame = c.read_frame()
    assert struct.unpack_from(">i", frame)[0] == 41
    (described,) = c.call(request(69, 1, group_ids=["k-latin1"])).groups
    assert [(m.member_id, m.client_id) for m in described.members] == [(member, "caf\ufffd")]
    c.close()


def test_a_negative_client_id_length_is_a_null_client_id_as_kafka_reads_it(
    server: KafkaServer,
) -> None:
    """Kafka's generated header reader takes any negative client id length as null (``length <
    0``), not only -1: the request is answered; it closed the connection here."""
    c = server.client()
    framed = bytearray(encode_request(request(18, 0), 42, None))
    framed[12:14] = struct.pack(">h", -2)
    c.send_raw(bytes(framed))
    frame = c.read_frame()
    assert frame[:6] == struct.pack(">ih", 42, E.none)
    assert c.call(request(18, 0)).error_code == E.none
    c.close()


def test_strings_that_are_not_utf8_are_read_as_kafka_reads_them(server: KafkaServer) -> None:
    """Kafka's generated readers read every string as Java's String(bytes, UTF_8): a group id
    or topic name that is not UTF-8 (a Latin-1 "grüppe") is served with U+FFFD in place of each
    bad sequence; it closed the connection here."""
    c = server.client()
    member = "Latin1BBBBBBBBBBBBBBBB"
    join = request(
        68,
        1,
        group_id="k-gr!ppe",
        member_id=member,
        member_epoch=0,
        rebalance_timeout=300000,
        subscribed_topic_names=["k-caf!"],
        subscribed_topic_regex="",
        topic_partitions=[],
    )
    framed = encode_request(join, 42).replace(b"gr!ppe", b"gr\xfcppe")
    c.send_raw(framed.replace(b"caf!", b"caf\xe9"))  # Latin-1 bytes, each of one byte
    frame = c.read_frame()
    assert struct.unpack_from(">i", frame)[0] == 42
    (described,) = c.call(request(69, 1, group_ids=["k-gr\ufffdppe"])).groups
    assert described.error_code == E.none
    assert [(m.member_id, m.subscribed_topic_names) for m in described.members] == [
        (member, ("k-caf\ufffd",))
    ]
    c.close()


@pytest.mark.parametrize(("size", "closed"), [(32767, False), (32768, True)])
def test_a_compact_string_longer_than_kafka_reads_closes_the_connection(
    server: KafkaServer, size: int, closed: bool
) -> None:
    """Kafka's generated readers refuse a string longer than 32767 bytes, compact ones too
    ("string field ... had invalid length"), and the broker closes the connection; one of 32767
    bytes is read (here: a group id over the identifier limit, refused in-band)."""
    c = server.client()
    c.send(
        request(
            68,
            0,
            group_id="x" * size,
            member_id="m",
            member_epoch=0,
            rebalance_timeout=300000,
            subscribed_topic_names=["t"],
            server_assignor=None,
            topic_partitions=[],
        )
    )
    if closed:
        assert c.closed_by_server(timeout=5)
    else:
        assert c.receive().error_code == E.invalid_request
    c.close()


def test_a_silent_connection_is_closed_after_the_idle_time(server: KafkaServer) -> None:
    silent = server.client()
    silent.send_raw(struct.pack(">i", 100) + b"\0" * 10)  # a frame that never completes
    started = time.monotonic()
    assert silent.closed_by_server(timeout=10)
    assert 1.0 <= time.monotonic() - started < 9
    silent.close()
    assert server.proc.poll() is None


def test_the_listener_stays_up_after_every_bad_connection(server: KafkaServer) -> None:
    c = server.client()
    assert c.call(request(18, 0)).error_code == E.none
    c.close()
    assert "Traceback" not in server.stderr_text()


def test_kafka_flags_are_checked(tmp_path: Path) -> None:
    done = run_cli(
        "serve", "--data-dir", str(tmp_path), "--kafka-upstream", "127.0.0.1:9092", timeout=30
    )
    assert done.returncode == 2 and "--kafka-upstream needs --kafka-listen" in done.stderr
