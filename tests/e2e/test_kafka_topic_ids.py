"""Offsets addressed by topic id through the Kafka listener (docs/kafka.md): OffsetCommit v10 and
OffsetFetch v10 (Kafka 4.2, KIP-848) name topics by id only. The same offsets are seen by name
through v9; an id no topic has — the zero id included — is UNKNOWN_TOPIC_ID on its partitions,
as Kafka answers; a member of the consumer protocol commits by id with its epoch."""

from __future__ import annotations

import uuid
from typing import Any

import test_kafka_listener
from kafka_support import KafkaClient, KafkaServer, request
from kio.schema.errors import ErrorCode as E

server = test_kafka_listener.server  # the fixtures: a coordinator-only listener
client = test_kafka_listener.client


def commit_v10(
    c: KafkaClient, group: str, offsets: dict[uuid.UUID, int], member: str = "", epoch: int = -1
) -> list[tuple[uuid.UUID | None, list[tuple[int, E]]]]:
    resp: Any = c.call(
        request(
            8,
            10,
            group_id=group,
            generation_id_or_member_epoch=epoch,
            member_id=member,
            topics=[
                {
                    "topic_id": t,
                    "partitions": [
                        {"partition_index": 0, "committed_offset": o, "committed_metadata": "m"}
                    ],
                }
                for t, o in offsets.items()
            ],
        )
    )
    return [
        (t.topic_id, [(p.partition_index, p.error_code) for p in t.partitions]) for t in resp.topics
    ]


def fetch(c: KafkaClient, version: int, group: str, topics: list[dict[str, Any]] | None) -> Any:
    resp: Any = c.call(request(9, version, groups=[{"group_id": group, "topics": topics}]))
    (g,) = resp.groups
    assert g.error_code == E.none
    return [
        (
            t.topic_id if version >= 10 else t.name,
            [(p.partition_index, p.committed_offset, p.error_code) for p in t.partitions],
        )
        for t in g.topics
    ]


def test_commit_and_fetch_by_topic_id(server: KafkaServer, client: KafkaClient) -> None:
    ids = {name: uuid.UUID(bytes=server.create_topic(name, 2)) for name in ("ids-a", "ids-b")}
    a, b = ids["ids-a"], ids["ids-b"]
    nobody, zero = uuid.uuid4(), uuid.UUID(int=0)
    assert commit_v10(client, "ids-g", {a: 5, b: 7, nobody: 1, zero: 1}) == [
        (a, [(0, E.none)]),
        (b, [(0, E.none)]),
        (nobody, [(0, E.unknown_topic_id)]),
        (None, [(0, E.unknown_topic_id)]),  # the zero id: none on the wire either
    ]
    asked = [{"topic_id": t, "partition_indexes": [0, 1]} for t in (a, nobody, zero)]
    assert fetch(client, 10, "ids-g", asked) == [
        (a, [(0, 5, E.none), (1, -1, E.none)]),
        (nobody, [(0, -1, E.unknown_topic_id), (1, -1, E.unknown_topic_id)]),
        (None, [(0, -1, E.unknown_topic_id), (1, -1, E.unknown_topic_id)]),
    ]
    # Every committed topic, by id (v10) and by name (v9): the same offsets.
    assert sorted(fetch(client, 10, "ids-g", None)) == sorted(
        [(a, [(0, 5, E.none)]), (b, [(0, 7, E.none)])]
    )
    assert sorted(fetch(client, 9, "ids-g", None)) == [
        ("ids-a", [(0, 5, E.none)]),
        ("ids-b", [(0, 7, E.none)]),
    ]


def test_a_consumer_protocol_member_commits_by_id(server: KafkaServer, client: KafkaClient) -> None:
    topic = uuid.UUID(bytes=server.create_topic("ids-member", 1))
    member = "Zk8Sdl+/AAAAAAAAAAAAAB"
    join: Any = client.call(
        request(
            68,
            1,
            group_id="ids-m",
            member_id=member,
            member_epoch=0,
            rebalance_timeout=300000,
            subscribed_topic_names=["ids-member"],
            subscribed_topic_regex="",
            topic_partitions=[],
        )
    )
    assert (join.error_code, join.member_epoch) == (E.none, 1)
    assert commit_v10(client, "ids-m", {topic: 3}, member, 1) == [(topic, [(0, E.none)])]
    assert commit_v10(client, "ids-m", {topic: 4}, member, 2) == [
        (topic, [(0, E.stale_member_epoch)])  # ahead of the coordinator
    ]
    assert fetch(client, 10, "ids-m", [{"topic_id": topic, "partition_indexes": [0]}]) == [
        (topic, [(0, 3, E.none)])
    ]
