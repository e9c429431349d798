"""Bounded cost per request (#13 items 1-4), in-process through the gRPC servicers: every limit
refuses before any work or state change, in-band, with Kafka's code and a message naming the
config; an answer too large for one gRPC message is refused in-band, without a traceback."""

from __future__ import annotations

import logging

import pytest
from test_server_services import Ctx

from coordinator.core import regex
from coordinator.core.config import ConfigError, parse_config
from coordinator.runtime import CoordinatorRuntime, ManualClock
from coordinator.runtime.store import MemoryRecordStore
from coordinator.server.services import (
    AdminService,
    ClassicGroupService,
    ConsumerGroupService,
    OffsetService,
)
from kip848.v1 import admin_pb2, classic_group_pb2, common_pb2, offsets_pb2
from kip848.v1 import consumer_group_pb2 as cg

OC = offsets_pb2.OffsetCommitRequest
OF = offsets_pb2.OffsetFetchRequest
LIMITS = {
    "group.coordinator.identifier.max.bytes": "16",
    "group.consumer.regex.max.bytes": "32",
    "group.consumer.max.subscribed.topics": "3",
    "group.coordinator.request.max.partitions": "5",
    "group.coordinator.request.max.groups": "2",
}


async def started(**settings: str) -> CoordinatorRuntime:
    rt = CoordinatorRuntime(
        config=parse_config({**LIMITS, **settings}), store=MemoryRecordStore(), clock=ManualClock(0)
    )
    await rt.start()
    return rt


def join(**fields: object) -> cg.ConsumerGroupHeartbeatRequest:
    base: dict[str, object] = dict(
        group_id="g",
        member_id="m",
        member_epoch=0,
        rebalance_timeout_ms=1000,
        subscribed_topic_names=common_pb2.TopicNames(names=["t"]),
        topic_partitions=common_pb2.TopicPartitionsList(),
    )
    base.update(fields)
    return cg.ConsumerGroupHeartbeatRequest(**base)


def test_limits_are_kafka_style_configs() -> None:
    config = parse_config({})
    assert (
        config.identifier_max_bytes,
        config.consumer_regex_max_bytes,
        config.consumer_max_subscribed_topics,
        config.request_max_partitions,
        config.request_max_groups,
    ) == (1024, 32767, 10_000, 10_000, 10_000)
    with pytest.raises(ConfigError, match="must be <= 32767"):
        parse_config({"group.coordinator.identifier.max.bytes": "32768"})
    with pytest.raises(ConfigError, match="must be >= 1"):
        parse_config({"group.coordinator.request.max.partitions": "0"})


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        (
            {"group_id": "g" * 17},
            "GroupId is 17 bytes long; at most 16 are allowed "
            "(group.coordinator.identifier.max.bytes).",
        ),
        (
            {"group_id": "é" * 9},  # 18 bytes in UTF-8
            "GroupId is 18 bytes long; at most 16 are allowed "
            "(group.coordinator.identifier.max.bytes).",
        ),
        ({"member_id": "m" * 17}, "MemberId is 17 bytes long"),
        ({"instance_id": "i" * 17}, "InstanceId is 17 bytes long"),
        ({"rack_id": "r" * 17}, "RackId is 17 bytes long"),
        (
            {"subscribed_topic_names": common_pb2.TopicNames(names=["a", "b", "c", "d"])},
            "SubscribedTopicNames lists 4 topics; at most 3 are allowed "
            "(group.consumer.max.subscribed.topics).",
        ),
        (
            {"subscribed_topic_names": common_pb2.TopicNames(names=["t" * 17])},
            "A subscribed topic name is 17 bytes long",
        ),
    ],
)
async def test_heartbeat_identifiers_and_subscriptions(
    fields: dict[str, object], message: str
) -> None:
    rt = await started()
    resp = await ConsumerGroupService(rt).ConsumerGroupHeartbeat(join(**fields), Ctx())
    assert resp.error_code == 42 and resp.error_message.startswith(message), resp
    assert rt.snapshot()["groups"] == {}  # refused before any change
    await rt.close()


async def test_replica_racks_are_bounded_identifiers() -> None:
    rt = await started()
    T = admin_pb2.CreateTopicsRequest.CreatableTopic
    resp = await AdminService(rt).CreateTopics(
        admin_pb2.CreateTopicsRequest(
            topics=[
                T(
                    name="t",
                    num_partitions=2,
                    replica_racks=[
                        admin_pb2.PartitionRacks(partitions=[0], racks=["ok"]),
                        admin_pb2.PartitionRacks(partitions=[1], racks=["r" * 17]),
                    ],
                )
            ]
        ),
        Ctx(),
    )
    assert resp.error_code == 42 and resp.error_message.startswith(
        "ReplicaRack is 17 bytes long"
    ), resp
    assert (await rt.list_topics()) == []  # refused before any change
    await rt.close()


async def test_client_id_is_bounded() -> None:
    rt = await started()

    class LongClientId(Ctx):
        def invocation_metadata(self):  # type: ignore[no-untyped-def]
            return (("client-id", "c" * 17),)

    resp = await ConsumerGroupService(rt).ConsumerGroupHeartbeat(join(), LongClientId())
    assert (resp.error_code, resp.error_message) == (
        42,
        "ClientId is 17 bytes long; at most 16 are allowed (group.coordinator.identifier.max.bytes).",
    )
    await rt.close()


async def test_regex_is_refused_by_size_before_it_is_compiled() -> None:
    rt = await started()
    regex._cache.clear()
    pattern = "t" + "|x" * 20  # 41 bytes, a perfectly valid RE2 pattern
    resp = await ConsumerGroupService(rt).ConsumerGroupHeartbeat(
        join(subscribed_topic_regex=pattern, subscribed_topic_names=None), Ctx()
    )
    assert (resp.error_code, resp.error_message) == (
        128,
        "SubscribedTopicRegex is 41 bytes long; at most 32 are allowed "
        "(group.consumer.regex.max.bytes).",
    )
    assert len(regex._cache) == 0  # never compiled, never cached
    # ... even for a member of a group that does not exist (epoch > 0).
    resp = await ConsumerGroupService(rt).ConsumerGroupHeartbeat(
        cg.ConsumerGroupHeartbeatRequest(
            group_id="nope", member_id="m", member_epoch=3, subscribed_topic_regex=pattern
        ),
        Ctx(),
    )
    assert resp.error_code == 128 and len(regex._cache) == 0
    await rt.close()


def test_too_complex_regex_and_the_byte_bounded_cache(monkeypatch: pytest.MonkeyPatch) -> None:
    from coordinator.core.errors import InvalidRegularExpressionError

    with pytest.raises(InvalidRegularExpressionError, match="too complex"):
        regex.compile_regex("[a-z]{1,1000}[0-9]{1,1000}" * 40)  # 1,040 bytes
    cache = regex._Cache(max_bytes=50_000)
    monkeypatch.setattr(regex, "_cache", cache)
    for i in range(100):
        regex.compile_regex(f"t{i}.*")
    assert cache.bytes <= 50_000 and 0 < len(cache) < 100  # bounded by bytes, LRU out
    assert regex.compile_regex("t99.*") is regex.compile_regex("t99.*")  # recent ones cached
    big = "|".join(f"topic-{i}" for i in range(3000))  # heavier than the whole budget
    regex.compile_regex(big)
    assert cache.bytes <= 50_000


async def test_owned_partitions_are_bounded_by_what_exists() -> None:
    """Over group.coordinator.request.max.partitions, a heartbeat's owned partitions are still
    accepted up to every partition the coordinator knows: it may have assigned them all to one
    member (a group's first member of a 50,000-partition subscription used to be refused its
    next heartbeat). More than exist is refused before any work."""
    rt = await started()
    service = ConsumerGroupService(rt)
    await AdminService(rt).CreateTopics(
        admin_pb2.CreateTopicsRequest(
            topics=[admin_pb2.CreateTopicsRequest.CreatableTopic(name="t", num_partitions=8)]
        ),
        Ctx(),
    )
    joined = await service.ConsumerGroupHeartbeat(join(member_id="m"), Ctx())
    assert joined.error_code == 0 and joined.member_epoch == 1
    [assigned] = joined.assignment.assigned_topic_partitions
    assert list(assigned.partitions) == list(range(8))  # more than the limit of 5

    def owned(n: int) -> common_pb2.TopicPartitionsList:
        return common_pb2.TopicPartitionsList(
            items=[common_pb2.TopicPartitions(topic_id=assigned.topic_id, partitions=range(n))]
        )

    ack = await service.ConsumerGroupHeartbeat(
        cg.ConsumerGroupHeartbeatRequest(
            group_id="g", member_id="m", member_epoch=1, topic_partitions=owned(8)
        ),
        Ctx(),
    )
    assert (ack.error_code, ack.member_epoch) == (0, 1)
    before = rt.snapshot()
    resp = await service.ConsumerGroupHeartbeat(
        cg.ConsumerGroupHeartbeatRequest(
            group_id="g", member_id="m", member_epoch=1, topic_partitions=owned(9)
        ),
        Ctx(),
    )
    assert (resp.error_code, resp.error_message) == (
        42,
        "The request names 9 owned partitions; at most 5 are allowed in one request "
        "(group.coordinator.request.max.partitions), or every partition the coordinator knows "
        "when there are more.",
    )
    assert rt.snapshot() == before
    await rt.close()


async def test_offset_commit_limits() -> None:
    rt = await started()
    offsets = OffsetService(rt)
    many = OC(
        group_id="g",
        topics=[OC.Topic(name="t", partitions=[OC.Partition(partition_index=i) for i in range(6)])],
    )
    resp = await offsets.OffsetCommit(many, Ctx())
    message = (
        "The request names 6 partitions; at most 5 are allowed in one request "
        "(group.coordinator.request.max.partitions)."
    )
    # Counted on the wire message, before converting it: a request-level error (gRPC).
    assert resp == offsets_pb2.OffsetCommitResponse(error_code=42, error_message=message)
    long_group = OC(group_id="g" * 17, topics=[OC.Topic(name="t", partitions=[OC.Partition()])])
    resp = await offsets.OffsetCommit(long_group, Ctx())
    assert resp.topics[0].partitions[0].error_code == 24
    assert rt.snapshot()["groups"] == {}
    listed = await AdminService(rt).ListGroups(admin_pb2.ListGroupsRequest(), Ctx())
    assert listed == admin_pb2.ListGroupsResponse()  # nothing was stored
    await rt.close()


async def test_offset_fetch_and_delete_limits() -> None:
    rt = await started()
    offsets = OffsetService(rt)
    resp = await offsets.OffsetFetch(
        OF(groups=[OF.Group(group_id=g) for g in ("a", "b", "c")]), Ctx()
    )
    assert resp.error_code == 42 and "names 3 groups; at most 2" in resp.error_message
    assert list(resp.groups) == []  # gRPC: the request-level error alone
    resp = await offsets.OffsetFetch(
        OF(
            groups=[
                OF.Group(
                    group_id="a",
                    topics=common_pb2.TopicPartitionIndexesList(
                        items=[
                            common_pb2.TopicPartitionIndexes(
                                name="t", partition_indexes=list(range(6))
                            )
                        ]
                    ),
                )
            ]
        ),
        Ctx(),
    )
    assert resp.error_code == 42 and "names 6 partitions; at most 5" in resp.error_message
    resp = await offsets.OffsetFetch(OF(groups=[OF.Group(group_id="g" * 17)]), Ctx())
    assert (resp.error_code, [g.error_code for g in resp.groups]) == (0, [24])
    deleted = await offsets.OffsetDelete(
        offsets_pb2.OffsetDeleteRequest(
            group_id="g",
            topics=[
                offsets_pb2.OffsetDeleteRequest.Topic(name="t", partition_indexes=list(range(6)))
            ],
        ),
        Ctx(),
    )
    assert deleted.error_code == 42 and "names 6 partitions" in deleted.error_message
    await rt.close()


async def test_group_count_limits_of_admin_and_describe_rpcs() -> None:
    rt = await started()
    admin = AdminService(rt)
    three = ["a", "b", "c"]
    described = await ConsumerGroupService(rt).ConsumerGroupDescribe(
        cg.ConsumerGroupDescribeRequest(group_ids=three), Ctx()
    )
    assert described.error_code == 42 and "names 3 groups" in described.error_message
    classic = await ClassicGroupService(rt, lambda: ("h", 1)).DescribeGroups(
        classic_group_pb2.DescribeGroupsRequest(group_ids=three), Ctx()
    )
    assert classic.error_code == 42
    deleted = await admin.DeleteGroups(admin_pb2.DeleteGroupsRequest(group_ids=three), Ctx())
    assert deleted.error_code == 42
    deleted = await admin.DeleteGroups(admin_pb2.DeleteGroupsRequest(group_ids=["g" * 17]), Ctx())
    assert [(r.error_code, r.group_id) for r in deleted.results] == [(24, "g" * 17)]
    created = await admin.CreateTopics(
        admin_pb2.CreateTopicsRequest(
            topics=[
                admin_pb2.CreateTopicsRequest.CreatableTopic(name=f"t{i}", num_partitions=1)
                for i in range(6)
            ]
        ),
        Ctx(),
    )
    assert created.error_code == 42 and "names 6 topics; at most 5" in created.error_message
    assert (await admin.ListTopics(admin_pb2.ListTopicsRequest(), Ctx())).topics == []
    await rt.close()


async def test_classic_join_limits() -> None:
    rt = await started()
    classic = ClassicGroupService(rt, lambda: ("h", 1))
    resp = await classic.JoinGroup(
        classic_group_pb2.JoinGroupRequest(
            group_id="g" * 17, session_timeout_ms=10_000, protocol_type="consumer"
        ),
        Ctx(),
    )
    assert resp.error_code == 24 and "GroupId is 17 bytes long" in resp.error_message
    resp = await classic.JoinGroup(
        classic_group_pb2.JoinGroupRequest(
            group_id="g",
            session_timeout_ms=10_000,
            protocol_type="consumer",
            protocols=[
                classic_group_pb2.JoinGroupRequest.Protocol(name=f"p{i}", metadata=b"")
                for i in range(3)
            ],
        ),
        Ctx(),
    )
    assert resp.error_code == 42 and "3 protocols; at most 2" in resp.error_message
    await rt.close()


async def test_an_answer_too_large_for_grpc_is_refused_in_band(
    caplog: pytest.LogCaptureFixture,
) -> None:
    rt = await started(**{"group.coordinator.request.max.partitions": "1000"})
    offsets, admin = OffsetService(rt), AdminService(rt)
    await admin.CreateTopics(
        admin_pb2.CreateTopicsRequest(
            topics=[admin_pb2.CreateTopicsRequest.CreatableTopic(name="t", num_partitions=1)]
        ),
        Ctx(),
    )
    for i in range(50):  # 50 offsets-only groups
        await offsets.OffsetCommit(
            OC(group_id=f"group-{i:04d}", topics=[OC.Topic(name="t", partitions=[OC.Partition()])]),
            Ctx(),
        )
    admin.max_response_bytes = 1024  # what app.py sets from --max-message-bytes
    with caplog.at_level(logging.WARNING):
        listed = await admin.ListGroups(admin_pb2.ListGroupsRequest(), Ctx())
    assert listed.error_code == 42 and list(listed.groups) == []
    assert listed.error_message.startswith("The answer would be ")
    assert listed.error_message.endswith(
        "bytes, more than the largest message this server sends (1024 bytes: kip848 serve "
        "--max-message-bytes); list with a states or types filter."
    )
    assert "Traceback" not in caplog.text
    few = await admin.ListGroups(admin_pb2.ListGroupsRequest(types_filter=["consumer"]), Ctx())
    assert few == admin_pb2.ListGroupsResponse()  # the filtered list fits
    await rt.close()


async def test_the_service_layer_checks_for_every_codec() -> None:
    """What the Kafka listener calls: the service layer, with Kafka's per-partition shape."""
    from coordinator.core.offsets import OffsetCommit, OffsetCommitPartition, OffsetCommitTopic
    from coordinator.server.api import Caller
    from coordinator.server.service import CoordinatorService

    rt = await started()
    service = CoordinatorService(rt)
    req = OffsetCommit(
        group_id="g",
        topics=(
            OffsetCommitTopic(
                name="t",
                partitions=tuple(
                    OffsetCommitPartition(partition_index=i, committed_offset=1) for i in range(6)
                ),
            ),
        ),
    )
    reply = await service.offset_commit(req, Caller(api_version=9))
    assert reply.value is not None
    assert [p.error_code for t in reply.value.topics for p in t.partitions] == [42] * 6
    assert rt.snapshot()["groups"] == {}
    await rt.close()
