"""Two coordinator nodes on one PostgreSQL store in front of one Kafka broker (Tansu), with
consumers that really consume (docs/ha.md "What a client sees"): a confluent-kafka KIP-848
consumer and a kafka-python classic consumer, bootstrapped at node 2, whose groups node 111
coordinates — the id of Tansu's broker too; node 111 is killed (``kill -9``). Every address a
client learns for a broker id must reach that broker — FindCoordinator names a coordinator
with an id no upstream broker has (2**30 + its node id) — so the consumers fetch on through
node 2, find their groups' new coordinator there and consume every record produced after the
kill, without losing their partitions. Metadata lists the coordinator nodes after the
upstream's brokers, by those ids (transactions across nodes: test_cluster_transactions.py)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from cluster_support import Nodes, find_coordinator, settings
from kafka_clients import STACK_SETTINGS, Fleet, produce
from kafka_support import KafkaClient, Tansu, create_topics, request

from coordinator.server.cluster import UPSTREAM_COORDINATOR_ID_BASE

pytestmark = pytest.mark.slow

TOPIC = "orders"


def test_consumers_follow_their_groups_to_the_surviving_node(pg_server, tmp_path: Path) -> None:
    tansu = Tansu(tmp_path)
    nodes = Nodes(
        tmp_path,
        pg_server.fresh_store_dsn(),
        "--kafka-upstream",
        tansu.address,
        *STACK_SETTINGS,
        *settings(6),
    )
    fleet: Fleet | None = None
    try:
        # Node 111 has the id Tansu's broker has: a coordinator must never be named with it.
        one, two = nodes.start(111), nodes.start(2)
        broker = KafkaClient(tansu.address)
        create_topics(broker, **{TOPIC: 2})
        broker.close()
        # Groups node 1 coordinates, as node 2 names it.
        groups = []
        for g in (f"g{i}" for i in range(200)):
            if find_coordinator(two, g) == (0, one.address) and len(groups) < 2:
                groups.append(g)
        assert len(groups) == 2
        bootstrap = nodes.kafka_address(2)
        # On the wire: node 2's Metadata lists the upstream's broker at node 2's own port, then
        # the coordinator nodes by ids of their own, and its FindCoordinator (batched) names
        # node 111 by its id at its listener.
        client = KafkaClient(bootstrap)
        try:
            metadata = client.call(request(3, 12, topics=None, allow_auto_topic_creation=False))
            found = client.call(request(10, 4, key_type=0, coordinator_keys=groups))
        finally:
            client.close()
        assert [(b.node_id, f"{b.host}:{b.port}") for b in metadata.brokers] == [
            (111, bootstrap),
            (UPSTREAM_COORDINATOR_ID_BASE + 2, bootstrap),
            (UPSTREAM_COORDINATOR_ID_BASE + 111, nodes.kafka_address(111)),
        ]
        assert [
            (c.key, c.node_id, f"{c.host}:{c.port}", c.error_code) for c in found.coordinators
        ] == [(g, UPSTREAM_COORDINATOR_ID_BASE + 111, nodes.kafka_address(111), 0) for g in groups]
        fleet = Fleet(bootstrap, tmp_path)
        fleet.start("kip848", "librdkafka-consumer", groups[0], topics=[TOPIC])
        fleet.start("classic", "kafka-python", groups[1], topics=[TOPIC])
        partitions = {(TOPIC, 0), (TOPIC, 1)}
        fleet.wait_for_assignment(partitions, 60, names=["kip848"])
        fleet.wait_for_assignment(partitions, 60, names=["classic"])
        before = [f"before-{i}" for i in range(40)]
        produce(bootstrap, TOPIC, before, 2)
        fleet.wait_consumed(before, 60)

        nodes.kill9(111)
        killed_at = time.monotonic()
        after = [f"after-{i}" for i in range(40)]
        produce(bootstrap, TOPIC, after, 2)
        for name in ("kip848", "classic"):  # each group on its own (not one for both)
            fleet.wait_for(lambda n=name: set(after) <= seen_by(fleet, n), 60, f"{name}'s records")
            print(
                f"{name} consumed every record {time.monotonic() - killed_at:.1f} s after the kill"
            )
        # Both groups commit what they consumed through node 2: it coordinates them now.
        fleet.wait_for(
            lambda: all(
                any(e["t"] > killed_at for e in c.events("commit")) for c in fleet.consumers
            ),
            60,
            "a commit of each group after the kill",
        )
        assert all(find_coordinator(two, g) == (0, two.address) for g in groups)
        # Nothing lost: every consumer still owns both partitions, no `lost` callback.
        assert not [e for c in fleet.consumers for e in c.events("lost")]
        counts = fleet.consumed()
        for name in ("kip848", "classic"):
            assert set(before + after) <= seen_by(fleet, name), name
        assert all(counts[v] >= 2 for v in before + after)  # one per group at least
        fleet.stop_all()
    finally:
        if fleet is not None:
            fleet.close()
        nodes.stop_all()
        tansu.stop()


def seen_by(fleet: Fleet, name: str) -> set[str]:
    """The values the consumers named ``name`` processed."""
    return {
        v
        for c in fleet.consumers
        if c.name == name
        for e in c.events("records")
        for _t, _p, _o, v in e["records"]
    }
