"""Proto <-> core conversion at the server boundary."""

from __future__ import annotations

import pytest

from coordinator.core.commands import (
    ConsumerGroupHeartbeat,
    ConsumerGroupHeartbeatResponse,
    HeartbeatAssignment,
)
from coordinator.core.errors import ErrorCode, InvalidRequestError
from coordinator.core.model import topic_id_from_bytes
from coordinator.core.topics import NewTopic, TopicResult
from coordinator.server import convert
from coordinator.server.api import TopicChanges
from coordinator.server.log_offsets import ListOffsets, LogOffset, OffsetQuery
from coordinator.server.services import client_host_of
from kip848.v1 import admin_pb2, common_pb2
from kip848.v1 import consumer_group_pb2 as cg

T1 = bytes(range(1, 17))
T2 = bytes(range(2, 18))
ID1 = topic_id_from_bytes(T1)
ID2 = topic_id_from_bytes(T2)


def test_absent_optionals_map_to_none_and_minus_one() -> None:
    req = cg.ConsumerGroupHeartbeatRequest(group_id="g", member_id="m", member_epoch=3)
    assert convert.heartbeat_from_proto(
        req, client_id="c", client_host="/1.2.3.4"
    ) == ConsumerGroupHeartbeat(
        group_id="g",
        member_id="m",
        member_epoch=3,
        instance_id=None,
        rack_id=None,
        rebalance_timeout_ms=-1,
        subscribed_topic_names=None,
        subscribed_topic_regex=None,
        server_assignor=None,
        topic_partitions=None,
        client_id="c",
        client_host="/1.2.3.4",
    )


def test_present_empty_wrappers_map_to_empty() -> None:
    req = cg.ConsumerGroupHeartbeatRequest(
        group_id="g",
        member_epoch=0,
        rebalance_timeout_ms=1000,
        instance_id="",
        rack_id="r",
        subscribed_topic_names=common_pb2.TopicNames(),
        subscribed_topic_regex="",
        server_assignor="range",
        topic_partitions=common_pb2.TopicPartitionsList(),
    )
    assert convert.heartbeat_from_proto(req) == ConsumerGroupHeartbeat(
        group_id="g",
        member_id="",
        member_epoch=0,
        instance_id="",
        rack_id="r",
        rebalance_timeout_ms=1000,
        subscribed_topic_names=(),
        subscribed_topic_regex="",
        server_assignor="range",
        topic_partitions={},
    )


def test_owned_partitions_merge_and_bad_ids_are_invalid_request() -> None:
    items = common_pb2.TopicPartitionsList(
        items=[
            common_pb2.TopicPartitions(topic_id=T1, partitions=[2, 0]),
            common_pb2.TopicPartitions(topic_id=T1, partitions=[1], topic_name="ignored"),
            common_pb2.TopicPartitions(topic_id=T2, partitions=[]),
        ]
    )
    req = cg.ConsumerGroupHeartbeatRequest(
        group_id="g", member_epoch=1, member_id="m", topic_partitions=items
    )
    assert convert.heartbeat_from_proto(req).topic_partitions == {ID1: frozenset({0, 1, 2})}
    bad = cg.ConsumerGroupHeartbeatRequest(
        group_id="g",
        topic_partitions=common_pb2.TopicPartitionsList(
            items=[common_pb2.TopicPartitions(topic_id=b"\x01" * 15, partitions=[0])]
        ),
    )
    with pytest.raises(InvalidRequestError, match="16 bytes, got 15"):
        convert.heartbeat_from_proto(bad)


def test_heartbeat_response_to_proto() -> None:
    resp = ConsumerGroupHeartbeatResponse(
        member_id="m",
        member_epoch=4,
        heartbeat_interval_ms=5000,
        assignment=HeartbeatAssignment(
            assigned={ID2: frozenset({3, 1}), ID1: frozenset({0})}, pending={ID2: frozenset({5})}
        ),
    )
    names = {ID1: "a", ID2: "b"}
    assert convert.heartbeat_to_proto(resp, names.__getitem__) == cg.ConsumerGroupHeartbeatResponse(
        member_id="m",
        member_epoch=4,
        heartbeat_interval_ms=5000,
        assignment=cg.Assignment(
            assigned_topic_partitions=[
                common_pb2.TopicPartitions(topic_id=T1, partitions=[0], topic_name="a"),
                common_pb2.TopicPartitions(topic_id=T2, partitions=[1, 3], topic_name="b"),
            ],
            pending_topic_partitions=[
                common_pb2.TopicPartitions(topic_id=T2, partitions=[5], topic_name="b")
            ],
        ),
    )
    no_assignment = convert.heartbeat_to_proto(
        ConsumerGroupHeartbeatResponse(member_id=None, member_epoch=-1, heartbeat_interval_ms=0)
    )
    assert no_assignment == cg.ConsumerGroupHeartbeatResponse(member_epoch=-1)
    assert not no_assignment.HasField("member_id") and not no_assignment.HasField("assignment")


def test_heartbeat_error() -> None:
    assert convert.heartbeat_error(
        ErrorCode.UNKNOWN_SERVER_ERROR, None
    ) == cg.ConsumerGroupHeartbeatResponse(error_code=-1)
    assert convert.heartbeat_error(
        ErrorCode.FENCED_MEMBER_EPOCH, "x"
    ) == cg.ConsumerGroupHeartbeatResponse(error_code=110, error_message="x")


def test_topic_registry_messages() -> None:
    req = admin_pb2.CreateTopicsRequest(
        topics=[
            admin_pb2.CreateTopicsRequest.CreatableTopic(name="a", num_partitions=3),
            admin_pb2.CreateTopicsRequest.CreatableTopic(name="b", num_partitions=1, topic_id=T2),
        ]
    )
    assert convert.new_topics_from_proto(req) == TopicChanges(
        entries=[
            NewTopic(name="a", num_partitions=3),
            NewTopic(name="b", num_partitions=1, topic_id=ID2),
        ]
    )
    # The request's own timeout (Kafka's timeoutMs), absent = None (the server's bound).
    timed = admin_pb2.CreateTopicsRequest(timeout_ms=250)
    assert convert.new_topics_from_proto(timed) == TopicChanges(entries=[], timeout_ms=250)
    grow = admin_pb2.CreatePartitionsRequest(
        topics=[admin_pb2.CreatePartitionsRequest.CreatePartitionsTopic(name="a", count=4)],
        timeout_ms=0,
    )
    assert convert.create_partitions_from_proto(grow) == TopicChanges(
        entries=[("a", 4)], timeout_ms=0
    )
    gone = admin_pb2.DeleteTopicsRequest(names=["a", "b"])
    assert convert.delete_topics_from_proto(gone) == TopicChanges(entries=["a", "b"])
    results = [
        TopicResult(name="a", topic_id=ID1, num_partitions=3),
        TopicResult(name="b", error_code=ErrorCode.TOPIC_ALREADY_EXISTS, error_message="exists"),
    ]
    Item = admin_pb2.CreateTopicsResponse.CreatableTopicResult
    assert convert.create_topics_to_proto(results) == admin_pb2.CreateTopicsResponse(
        topics=[
            Item(name="a", topic_id=T1, num_partitions=3),
            Item(name="b", topic_id=bytes(16), error_code=36, error_message="exists"),
        ]
    )
    assert convert.list_topics_to_proto(results[:1]) == admin_pb2.ListTopicsResponse(
        topics=[admin_pb2.ListTopicsResponse.Topic(name="a", topic_id=T1, num_partitions=3)]
    )


def test_replica_racks_both_ways() -> None:
    PR = admin_pb2.PartitionRacks
    req = admin_pb2.CreateTopicsRequest(
        topics=[
            admin_pb2.CreateTopicsRequest.CreatableTopic(
                name="a",
                num_partitions=4,
                replica_racks=[PR(partitions=[2, 0], racks=["y", "x"]), PR(partitions=[1])],
            )
        ]
    )
    xy = frozenset({"x", "y"})
    assert convert.new_topics_from_proto(req).entries == [
        NewTopic(name="a", num_partitions=4, partition_racks={0: xy, 2: xy, 1: frozenset()})
    ]
    twice = admin_pb2.CreateTopicsRequest(
        topics=[
            admin_pb2.CreateTopicsRequest.CreatableTopic(
                name="a",
                num_partitions=4,
                replica_racks=[PR(partitions=[1], racks=["x"]), PR(partitions=[1], racks=["y"])],
            )
        ]
    )
    with pytest.raises(InvalidRequestError, match="partition 1 of topic a are given twice"):
        convert.new_topics_from_proto(twice)
    listed = TopicResult(
        name="a",
        topic_id=ID1,
        num_partitions=4,
        partition_racks={3: frozenset({"z"}), 0: xy, 2: xy},
    )
    assert convert.list_topics_to_proto([listed]) == admin_pb2.ListTopicsResponse(
        topics=[
            admin_pb2.ListTopicsResponse.Topic(
                name="a",
                topic_id=T1,
                num_partitions=4,
                replica_racks=[
                    PR(partitions=[0, 2], racks=["x", "y"]),
                    PR(partitions=[3], racks=["z"]),
                ],
            )
        ]
    )


def test_list_offsets_both_ways() -> None:
    LO = admin_pb2.ListOffsetsRequest
    req = LO(
        isolation_level=1,
        topics=[
            LO.Topic(name="a", partitions=[LO.Partition(partition_index=0, timestamp=-1)]),
            LO.Topic(
                name="b",
                partitions=[
                    LO.Partition(partition_index=2, timestamp=1_700_000_000_000),
                    LO.Partition(partition_index=0, timestamp=-2),
                ],
            ),
        ],
    )
    assert convert.list_offsets_from_proto(req) == ListOffsets(
        isolation_level=1,
        queries=(
            OffsetQuery(topic="a", partition=0, timestamp=-1),
            OffsetQuery(topic="b", partition=2, timestamp=1_700_000_000_000),
            OffsetQuery(topic="b", partition=0, timestamp=-2),
        ),
    )
    R = admin_pb2.ListOffsetsResponse
    answers = [
        LogOffset(topic="a", partition=0, offset=7, leader_epoch=3),
        LogOffset(topic="b", partition=2, timestamp=1_700_000_000_005, offset=4),
        LogOffset(topic="b", partition=0, error_code=6, error_message="moved"),
    ]
    assert convert.list_offsets_to_proto(answers) == R(
        topics=[
            R.Topic(
                name="a",
                partitions=[R.Partition(partition_index=0, timestamp=-1, offset=7, leader_epoch=3)],
            ),
            R.Topic(
                name="b",
                partitions=[
                    R.Partition(
                        partition_index=2, timestamp=1_700_000_000_005, offset=4, leader_epoch=-1
                    ),
                    R.Partition(
                        partition_index=0,
                        error_code=6,
                        error_message="moved",
                        timestamp=-1,
                        offset=-1,
                        leader_epoch=-1,
                    ),
                ],
            ),
        ]
    )


class _Ctx:
    def __init__(self, peer: str) -> None:
        self._peer = peer

    def peer(self) -> str:
        return self._peer


@pytest.mark.parametrize(
    ("peer", "host"),
    [
        ("ipv4:127.0.0.1:5555", "/127.0.0.1"),
        ("ipv6:[::1]:5555", "/::1"),
        # grpcio 1.85 (grpc.aio, the front ends): brackets URL-encoded. An ACL naming ::1 must
        # match it (it did not: "/%5B::1%5D").
        ("ipv6:%5B::1%5D:5555", "/::1"),
        ("ipv6:%5Bfe80::1%5D:5555", "/fe80::1"),
        ("ipv6:%5B::ffff:10.0.0.9%5D:5555", "/10.0.0.9"),  # IPv4 on an IPv6 socket
        ("unix:/tmp/s", "/unix:/tmp/s"),
        ("", ""),
    ],
)
def test_client_host_like_kafka(peer: str, host: str) -> None:
    assert client_host_of(_Ctx(peer)) == host  # type: ignore[arg-type]
