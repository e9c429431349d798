"""A classic group (librdkafka consumers with ``group.protocol=classic``) whose leader's
SyncGroup writes do not become durable within ``offsets.commit.timeout.ms``: PostgreSQL stops
acknowledging COMMITs (docs/legacy_bridge.md, "A SyncGroup whose write fails").

As Kafka's group coordinator does when a SyncGroup's append fails, each timed-out write resets
the group — its members get COORDINATOR_NOT_AVAILABLE, no assignment, and rejoin — and a new
rebalance starts. Once PostgreSQL acknowledges again, the held writes land in order (their
records stand, generations going up) and the group settles with every member holding its
assignment, as the last record says.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cluster_support import Nodes, commits_held, settings, until
from pg import PostgresServer

from coordinator.core import codec
from coordinator.core.records import GroupMetadataValue

pytestmark = pytest.mark.slow

TOPIC = "events"
GROUP = "cg"
WRITE_TIMEOUT_MS = 1_000
HELD_S = 5.0
"""How long PostgreSQL holds every COMMIT: the group's first generation is synced within it,
and each timed-out SyncGroup write resets it (every 1 s and a rejoin)."""


@pytest.fixture
def own_pg() -> Iterator[PostgresServer]:
    """A PostgreSQL of this test alone (its settings are changed)."""
    server = PostgresServer().start()
    yield server
    server.stop()


def group_records(dsn: str) -> list[GroupMetadataValue]:
    """The classic group's records in the store's journal, in the order they were written."""
    import psycopg

    with psycopg.connect(dsn) as conn:
        rows = conn.execute(
            'SELECT key, value FROM kip848_journal WHERE log >= 0 ORDER BY log, "offset"'
        ).fetchall()
    out = []
    for key, value in rows:
        decoded = codec.decode(bytes(key), None if value is None else bytes(value))
        if decoded.group_id == GROUP and isinstance(decoded.value, GroupMetadataValue):
            out.append(decoded.value)
    return out


def assigned(consumer: Any) -> set[int]:
    return {tp.partition for tp in consumer.assignment()}


def test_a_classic_group_whose_sync_writes_time_out_rebalances_until_every_member_is_assigned(
    own_pg: PostgresServer, tmp_path: Path
) -> None:
    from confluent_kafka import Consumer

    dsn = own_pg.fresh_store_dsn()
    nodes = Nodes(
        tmp_path,
        dsn,
        *settings(
            1,
            coordinator_lease_ms=60_000,  # far longer than the hold: the node keeps leading
            coordinator_heartbeat_interval_ms=1_000,
            offsets_commit_timeout_ms=WRITE_TIMEOUT_MS,
            group_initial_rebalance_delay_ms=300,
        ),
    )
    node = nodes.start(1)
    consumers = [
        Consumer(
            {
                "bootstrap.servers": nodes.kafka_address(1),
                "group.id": GROUP,
                "group.protocol": "classic",
                "partition.assignment.strategy": "range",
                "client.id": f"c{i}",
                "session.timeout.ms": 10_000,
                "heartbeat.interval.ms": 500,
                "enable.auto.commit": False,
                "socket.timeout.ms": 10_000,
                "log_level": 0,  # not its complaints that this coordinator lists no offsets
            }
        )
        for i in range(2)
    ]
    try:
        node.create_topic(TOPIC, 4)
        with commits_held(own_pg):
            for c in consumers:
                c.subscribe([TOPIC])
            held_until = time.monotonic() + HELD_S
            while time.monotonic() < held_until:
                for c in consumers:
                    c.poll(0.05)
                # Nothing is acknowledged while the writes are held: no member has an
                # assignment (each SyncGroup answered COORDINATOR_NOT_AVAILABLE at the timeout).
                assert [assigned(c) for c in consumers] == [set(), set()]

        def settled() -> bool:
            for c in consumers:
                c.poll(0.05)
            owned = [assigned(c) for c in consumers]
            return all(owned) and sorted(p for o in owned for p in o) == [0, 1, 2, 3]

        until(settled, "every member to hold its assignment", timeout=40)
        for _ in range(20):  # still so a second later: settled, not between two rebalances
            assert settled()
        records = group_records(dsn)
        generations = [v.generation for v in records]
        print(f"generations written: {generations}")
        assert generations == sorted(set(generations)), generations  # in order, each once
        causes = [v.rebalance.cause for v in records if v.rebalance is not None]
        # The group was reset after a timed-out SyncGroup write and rebalanced: the records
        # of the held generations landed, and a generation after them says why it came.
        assert "assignment_not_stored" in causes, causes
        assert "when storing the assignment of generation" in nodes.log_text(1)
        last = records[-1]
        assert len(last.members) == 2 and all(m.assignment for m in last.members)
    finally:
        for c in consumers:
            c.close()
        nodes.stop_all()
