"""Version-specific group answers through the Kafka listener, checked against Apache Kafka 4.3's
group coordinator (GroupCoordinatorService, GroupMetadataManager, OffsetMetadataManager): the
error code and message a real client reads on the wire for each case."""

from __future__ import annotations

from typing import Any

import test_kafka_listener
from kafka_support import KafkaClient, KafkaServer, request
from kio.schema.errors import ErrorCode as E

server = test_kafka_listener.server  # the fixtures: a coordinator-only listener
client = test_kafka_listener.client


def commit(c: KafkaClient, version: int, group: str, generation: int) -> list[tuple[int, E]]:
    """OffsetCommit of partition 0 of "fid-t" by member "m" at ``generation``."""
    resp: Any = c.call(
        request(
            8,
            version,
            group_id=group,
            generation_id_or_member_epoch=generation,
            member_id="m",
            topics=[
                {"name": "fid-t", "partitions": [{"partition_index": 0, "committed_offset": 1}]}
            ],
        )
    )
    return [(p.partition_index, p.error_code) for t in resp.topics for p in t.partitions]


def test_commit_to_a_missing_group_by_version(server: KafkaServer, client: KafkaClient) -> None:
    """A generation >= 0 to a group that does not exist: OffsetCommit v9+ answers
    GROUP_ID_NOT_FOUND, older versions ILLEGAL_GENERATION (Kafka keeps it for their clients,
    which rejoin on it); nothing is created."""
    server.create_topic("fid-t", 1)
    for version in (2, 5, 8):
        assert commit(client, version, "fid-missing", 1) == [(0, E.illegal_generation)]
    assert commit(client, 9, "fid-missing", 1) == [(0, E.group_id_not_found)]
    listed: Any = client.call(request(16, 4, states_filter=[]))
    assert "fid-missing" not in [g.group_id for g in listed.groups]
