"""Version-specific group answers through the Kafka listener, checked against Apache Kafka 4.3's
group coordinator (GroupCoordinatorService, GroupMetadataManager, OffsetMetadataManager): the
error code and message a real client reads on the wire for each case."""

from __future__ import annotations

import struct
from datetime import timedelta
from typing import Any

import pytest
import test_kafka_listener
from kafka_support import KafkaClient, KafkaServer, request
from kio.schema.errors import ErrorCode as E

from coordinator.server.kafka import wire

server = test_kafka_listener.server  # the fixtures: a coordinator-only listener
client = test_kafka_listener.client


@pytest.fixture(scope="module")
def topic(server: KafkaServer) -> str:
    server.create_topic("fid-t", 1)
    return "fid-t"


def commit(
    c: KafkaClient, version: int, group: str, generation: int, metadata: str = ""
) -> list[tuple[int, E]]:
    """OffsetCommit of partition 0 of "fid-t" by member "m" at ``generation``."""
    resp: Any = c.call(
        request(
            8,
            version,
            group_id=group,
            generation_id_or_member_epoch=generation,
            member_id="m",
            topics=[
                {
                    "name": "fid-t",
                    "partitions": [
                        {
                            "partition_index": 0,
                            "committed_offset": 1,
                            "committed_metadata": metadata,
                        }
                    ],
                }
            ],
        )
    )
    return [(p.partition_index, p.error_code) for t in resp.topics for p in t.partitions]


def test_commit_to_a_missing_group_by_version(topic: str, client: KafkaClient) -> None:
    """A generation >= 0 to a group that does not exist: OffsetCommit v9+ answers
    GROUP_ID_NOT_FOUND, older versions ILLEGAL_GENERATION (Kafka keeps it for their clients,
    which rejoin on it); nothing is created."""
    for version in (2, 5, 8):
        assert commit(client, version, "fid-missing", 1) == [(0, E.illegal_generation)]
    assert commit(client, 9, "fid-missing", 1) == [(0, E.group_id_not_found)]
    listed: Any = client.call(request(16, 4, states_filter=[]))
    assert "fid-missing" not in [g.group_id for g in listed.groups]


def heartbeat(c: KafkaClient, version: int, **fields: Any) -> tuple[E, str | None, int]:
    """ConsumerGroupHeartbeat: (error code, message, member epoch)."""
    body: dict[str, Any] = {
        "group_id": "fid-g",
        "member_id": "",
        "member_epoch": 0,
        "rebalance_timeout": -1,
        "subscribed_topic_names": None,
        "topic_partitions": None,
    }
    if version >= 1:
        body["subscribed_topic_regex"] = None
    body.update(fields)
    resp: Any = c.call(request(68, version, **body))
    return resp.error_code, resp.error_message, resp.member_epoch


def test_heartbeat_validation_order_and_messages(topic: str, client: KafkaClient) -> None:
    """Kafka's throwIfConsumerGroupHeartbeatRequestIsInvalid: the member id is checked before
    the group id, a join without a subscription has Kafka's message, and a regex is compiled
    only once the member is known (an unknown member's bad regex is UNKNOWN_MEMBER_ID; a leave
    never looks at it)."""
    invalid = E.invalid_request
    assert heartbeat(client, 0, group_id="", member_epoch=5) == (
        invalid,
        "MemberId can't be empty.",
        0,
    )
    assert heartbeat(client, 1, member_id="m1", rebalance_timeout=30_000, topic_partitions=[]) == (
        invalid,
        "Either SubscribedTopicNames or SubscribedTopicRegex must be non-null when (re-)joining.",
        0,
    )
    joined = heartbeat(
        client,
        1,
        member_id="m1",
        rebalance_timeout=30_000,
        subscribed_topic_names=[topic],
        topic_partitions=[],
    )
    assert joined == (E.none, None, 1)
    assert heartbeat(client, 1, member_id="zz", member_epoch=1, subscribed_topic_regex="(a") == (
        E.unknown_member_id,
        "Member zz is not a member of group fid-g.",
        0,
    )
    assert heartbeat(client, 1, member_id="m1", member_epoch=1, subscribed_topic_regex="(a") == (
        E.invalid_regular_expression,
        "SubscribedTopicRegex `(a` is not a valid regular expression: missing ): (a.",
        0,
    )
    assert heartbeat(client, 1, member_id="m1", member_epoch=-1, subscribed_topic_regex="(a") == (
        E.none,
        None,
        -1,
    )
    # The group is Empty now: ListGroups trims and lower-cases state filters, as Kafka.
    listed: Any = client.call(request(16, 5, states_filter=[" EMPTY\t"], types_filter=["Consumer"]))
    assert [(g.group_id, g.group_state) for g in listed.groups if g.group_id == "fid-g"] == [
        ("fid-g", "Empty")
    ]


def test_commit_retention_time_of_old_versions(
    topic: str, server: KafkaServer, client: KafkaClient
) -> None:
    """OffsetCommit v2-v4's RetentionTimeMs: offsets committed with 1 s expire at the next
    expiry check (offsets.retention.check.interval.ms, 10 min), those committed with -1 keep
    the broker's retention (7 days), as Kafka's expireTimestampMs."""

    def commit_v2(group: str, retention_ms: int) -> list[tuple[int, E]]:
        resp: Any = client.call(
            request(
                8,
                2,
                group_id=group,
                generation_id_or_member_epoch=-1,
                member_id="",
                retention_time=timedelta(milliseconds=retention_ms),
                topics=[
                    {
                        "name": topic,
                        "partitions": [
                            {"partition_index": 0, "committed_offset": 7, "committed_metadata": ""}
                        ],
                    }
                ],
            )
        )
        return [(p.partition_index, p.error_code) for t in resp.topics for p in t.partitions]

    assert commit_v2("fid-ret", 1_000) == [(0, E.none)]
    assert commit_v2("fid-keep", -1) == [(0, E.none)]
    server.advance(600_000)
    fresh = server.client()
    try:
        for group, offset in (("fid-ret", -1), ("fid-keep", 7)):
            resp: Any = fresh.call(
                request(9, 5, group_id=group, topics=[{"name": topic, "partition_indexes": [0]}])
            )
            assert [p.committed_offset for t in resp.topics for p in t.partitions] == [offset]
    finally:
        fresh.close()


def test_commit_metadata_is_measured_in_java_chars(topic: str, client: KafkaClient) -> None:
    """offset.metadata.max.bytes (4096) against the metadata's UTF-16 length, as Kafka: 2,048
    emoji (8,192 bytes on the wire) fit, 2,049 do not."""
    assert commit(client, 9, "fid-meta", -1, "\U0001f600" * 2_048) == [(0, E.none)]
    assert commit(client, 9, "fid-meta", -1, "\U0001f600" * 2_049) == [
        (0, E.offset_metadata_too_large)
    ]


def _subscription(topics: list[str]) -> bytes:
    """ConsumerProtocolSubscription v0."""
    out = struct.pack(">hi", 0, len(topics))
    for t in topics:
        out += struct.pack(">h", len(t)) + t.encode()
    return out + struct.pack(">i", -1)


def static_join(version: int, group: str, **fields: Any) -> Any:
    """JoinGroup of the static member ``i1`` (a new incarnation: no member id)."""
    body: dict[str, Any] = {
        "group_id": group,
        "session_timeout": 10_000,
        "rebalance_timeout": 10_000,
        "member_id": "",
        "group_instance_id": "i1",
        "protocol_type": "consumer",
        "protocols": [{"name": "range", "metadata": _subscription(["fid-t"])}],
    }
    if version >= 8:
        body["reason"] = None
    body.update(fields)
    return request(11, version, **body)


def test_a_static_leader_back_in_a_stable_group_by_version(
    topic: str, server: KafkaServer, client: KafkaClient
) -> None:
    """Kafka's classicGroupJoinToClassicGroup for a static leader that restarts while its group
    is Stable: no rebalance; JoinGroup v9+ answers it as the leader with the member list and
    skip_assignment (KIP-814), v5-v8 as a follower naming its old incarnation the leader, so
    that the client only collects its assignment."""
    group = "fid-static"
    client.send(static_join(9, group))
    first: Any = client.receive_advancing(server.advance, 3000)  # the initial rebalance delay
    old = first.member_id
    assert (first.error_code, first.generation_id, first.leader) == (E.none, 1, old)
    assignment = struct.pack(">hih", 0, 1, 5) + b"fid-t" + struct.pack(">ii", 1, 0)
    assignment += struct.pack(">i", -1)
    sync = {"group_id": group, "generation_id": 1, "group_instance_id": "i1"}
    synced: Any = client.call(
        request(
            14, 3, **sync, member_id=old, assignments=[{"member_id": old, "assignment": assignment}]
        )
    )
    assert synced.error_code == E.none
    back: Any = client.call(static_join(5, group))
    new = back.member_id
    assert new != old
    assert (back.error_code, back.generation_id, back.protocol_name, back.leader) == (
        E.none,
        1,
        "range",
        old,
    )
    assert list(back.members) == []
    synced = client.call(request(14, 3, **sync, member_id=new, assignments=[]))
    assert (synced.error_code, synced.assignment) == (E.none, assignment)
    again: Any = client.call(static_join(9, group))
    assert (again.error_code, again.generation_id, again.leader, again.skip_assignment) == (
        E.none,
        1,
        again.member_id,
        True,
    )
    assert [(x.member_id, x.metadata) for x in again.members] == [
        (again.member_id, _subscription(["fid-t"]))
    ]
    (described,) = client.call(
        request(15, 5, groups=[group], include_authorized_operations=False)
    ).groups
    assert (described.group_state, [x.member_id for x in described.members]) == (
        "Stable",
        [again.member_id],
    )


def test_leave_of_a_group_that_does_not_exist_by_version(client: KafkaClient) -> None:
    """Kafka's GroupCoordinatorService.leaveGroup answers a group it does not have ("Group
    was not found") with no top-level error and each member named UNKNOWN_MEMBER_ID (v3+);
    before v3 only the top-level code exists, and it is the member's."""
    members = [
        {"member_id": "ghost", "group_instance_id": None, "reason": None},
        {"member_id": "", "group_instance_id": "i-ghost", "reason": "closing"},
    ]
    left: Any = client.call(request(13, 5, group_id="fid-no-such-group", members=members))
    assert left == wire.build(
        wire.response_class(13, 5),
        error_code=E.none,
        members=[
            {"member_id": "ghost", "group_instance_id": None, "error_code": E.unknown_member_id},
            {"member_id": "", "group_instance_id": "i-ghost", "error_code": E.unknown_member_id},
        ],
    )
    nobody: Any = client.call(request(13, 5, group_id="fid-no-such-group", members=[]))
    assert nobody == wire.build(wire.response_class(13, 5), error_code=E.none, members=[])
    for version in (0, 1, 2):
        old: Any = client.call(
            request(13, version, group_id="fid-no-such-group", member_id="ghost")
        )
        assert old == wire.build(
            wire.response_class(13, version), error_code=E.unknown_member_id
        ), version
    listed: Any = client.call(request(16, 4, states_filter=[]))
    assert "fid-no-such-group" not in [g.group_id for g in listed.groups]


def test_offset_delete_of_topics_and_partitions_that_do_not_exist(
    topic: str, client: KafkaClient
) -> None:
    """KafkaApis.handleOffsetDeleteRequest answers a topic it does not know, and a partition
    the topic does not have, UNKNOWN_TOPIC_OR_PARTITION before it asks the group coordinator,
    and merges the coordinator's answer in after them (OffsetDeleteResponse.Builder.merge: a
    topic already answered gets its other partitions appended); the partitions that exist are
    deleted."""
    committed = client.call(
        request(
            8,
            9,
            group_id="fid-od",
            generation_id_or_member_epoch=-1,
            member_id="",
            topics=[{"name": topic, "partitions": [{"partition_index": 0, "committed_offset": 3}]}],
        )
    )
    assert [p.error_code for t in committed.topics for p in t.partitions] == [E.none]
    asked = [
        {"name": "fid-od-nope", "partitions": [{"partition_index": 0}]},
        {"name": topic, "partitions": [{"partition_index": p} for p in (0, 7, -1)]},
    ]
    unknown = E.unknown_topic_or_partition
    # Nothing but partitions that do not exist: no top-level error, each answered so (the
    # group, which has an offset, is judged).
    only: Any = client.call(request(47, 0, group_id="fid-od", topics=asked[:1]))
    assert only == wire.build(
        wire.response_class(47, 0),
        error_code=E.none,
        topics=[
            {"name": "fid-od-nope", "partitions": [{"partition_index": 0, "error_code": unknown}]}
        ],
    )
    deleted: Any = client.call(request(47, 0, group_id="fid-od", topics=asked))
    assert deleted == wire.build(
        wire.response_class(47, 0),
        error_code=E.none,
        topics=[
            {"name": "fid-od-nope", "partitions": [{"partition_index": 0, "error_code": unknown}]},
            {
                "name": topic,
                "partitions": [
                    {"partition_index": 7, "error_code": unknown},
                    {"partition_index": -1, "error_code": unknown},
                    {"partition_index": 0, "error_code": E.none},
                ],
            },
        ],
    )
    fetched: Any = client.call(
        request(9, 7, group_id="fid-od", topics=[{"name": topic, "partition_indexes": [0]}])
    )
    assert [(p.partition_index, p.committed_offset) for p in fetched.topics[0].partitions] == [
        (0, -1)
    ]
