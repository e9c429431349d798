"""Reads of groups answered while PostgreSQL holds a COMMIT of another group's write (a
synchronous standby away): real clients over the Kafka listener (librdkafka's consumer and
admin client) and gRPC get their OffsetFetch, DescribeGroups and ListGroups answers at once,
from the committed state (docs/operations.md, "Reads"), where they used to wait behind the held
write of their coordinator partition and fail at ``offsets.commit.timeout.ms``. The group whose
commit is held reads its committed offset (a plain fetch) or waits for its own write (a
read_committed consumer's stable fetch, as Kafka's)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cluster_support import Nodes, commits_held, settings, until
from pg import PostgresServer

from kip848.v1 import offsets_pb2, offsets_pb2_grpc

pytestmark = pytest.mark.slow

TOPIC = "events"
WRITE_TIMEOUT_MS = 3_000
PROMPT_S = 2.0
"""Every read during the hold is answered within this (under the write timeout, at which the
old behaviour answered them an error)."""


@pytest.fixture
def own_pg() -> Iterator[PostgresServer]:
    """A PostgreSQL of this test alone (its settings are changed)."""
    server = PostgresServer().start()
    yield server
    server.stop()


def timed(read: Any) -> tuple[Any, float]:
    started = time.monotonic()
    answer = read()
    return answer, time.monotonic() - started


def grpc_fetch(channel: Any, *groups: str) -> list[tuple[str, int, dict[int, int]]]:
    resp = offsets_pb2_grpc.OffsetServiceStub(channel).OffsetFetch(
        offsets_pb2.OffsetFetchRequest(
            groups=[offsets_pb2.OffsetFetchRequest.Group(group_id=g) for g in groups]
        ),
        timeout=PROMPT_S,
    )
    return [
        (
            g.group_id,
            g.error_code,
            {p.partition_index: p.committed_offset for t in g.topics for p in t.partitions},
        )
        for g in resp.groups
    ]


def test_reads_of_groups_are_answered_while_a_commit_is_held(
    own_pg: PostgresServer, tmp_path: Path
) -> None:
    from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, TopicPartition
    from confluent_kafka.admin import AdminClient

    nodes = Nodes(
        tmp_path,
        own_pg.fresh_store_dsn(),
        *settings(
            1,  # one coordinator partition: the held write is every group's partition's
            coordinator_lease_ms=60_000,  # far longer than the hold: the node keeps leading
            coordinator_heartbeat_interval_ms=1_000,
            offsets_commit_timeout_ms=WRITE_TIMEOUT_MS,
        ),
    )
    node = nodes.start(1)
    address = nodes.kafka_address(1)

    def consumer(group: str) -> Any:
        return Consumer(
            {
                "bootstrap.servers": address,
                "group.id": group,
                "enable.auto.commit": False,
                "log_level": 0,
            }
        )

    quiet, busy = consumer("quiet"), consumer("busy")
    admin = AdminClient({"bootstrap.servers": address})
    tp = TopicPartition(TOPIC, 0)

    def listed() -> list[tuple[str, str]]:
        groups = admin.list_consumer_groups(request_timeout=PROMPT_S).result(PROMPT_S)
        return sorted((g.group_id, str(g.state)) for g in groups.valid)

    def described() -> tuple[str, str]:
        d = admin.describe_consumer_groups(["quiet"], request_timeout=PROMPT_S)["quiet"]
        got = d.result(PROMPT_S)
        return got.group_id, str(got.state)

    def admin_offsets(group: str) -> int:
        request = [ConsumerGroupTopicPartitions(group, [tp])]
        f = admin.list_consumer_group_offsets(request, request_timeout=PROMPT_S)[group]
        (partition,) = f.result(PROMPT_S).topic_partitions
        return int(partition.offset)

    try:
        node.create_topic(TOPIC, 2)
        quiet.commit(offsets=[TopicPartition(TOPIC, 0, 7)], asynchronous=False)
        busy.commit(offsets=[TopicPartition(TOPIC, 0, 1)], asynchronous=False)
        before = (listed(), described())
        with commits_held(own_pg):
            busy.commit(offsets=[TopicPartition(TOPIC, 0, 2)], asynchronous=True)
            time.sleep(0.5)  # in the held write
            answers = [
                timed(lambda: quiet.committed([tp], timeout=PROMPT_S)[0].offset),  # stable
                timed(lambda: admin_offsets("quiet")),
                timed(lambda: admin_offsets("busy")),  # its committed offset, not 2
                timed(listed),
                timed(described),
                timed(lambda: grpc_fetch(node.channel, "quiet", "busy")),
            ]
            print("answered in", [round(s, 3) for _a, s in answers])
            assert [a for a, _s in answers] == [
                7,
                7,
                1,
                *before,
                [("quiet", 0, {0: 7}), ("busy", 0, {0: 1})],
            ]
            assert all(s < PROMPT_S for _a, s in answers)
        # The held write lands (or is committed again by the client): the stable fetch of
        # its own group reads it.
        until(lambda: busy.committed([tp], timeout=10)[0].offset == 2, "the held commit")
        assert grpc_fetch(node.channel, "quiet", "busy") == [
            ("quiet", 0, {0: 7}),
            ("busy", 0, {0: 2}),
        ]
    finally:
        for c in (quiet, busy):
            c.close()
        admin = None  # librdkafka's handle goes before the node it would retry
        nodes.stop_all()
