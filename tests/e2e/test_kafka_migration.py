"""Online migration with real clients under load, through the Kafka listener in front of Tansu.

A classic fleet — three librdkafka consumers and one kafka-python consumer — consumes while a
producer writes. The librdkafka members are restarted one at a time with
``group.protocol=consumer`` (the upgrade), then one at a time back to ``classic`` (the
downgrade). Checked, from each client's own callbacks and from the AdminClient:

* every record written is consumed at least once, and the group's committed offsets reach the
  end of every partition;
* no partition is owned by two members at the same time (``Fleet.check_exclusive_ownership``);
  a graceful restart never fences anyone (no ``lost`` callback);
* the group type follows Kafka's migration rules (``group.consumer.migration.policy`` =
  bidirectional): classic until the first consumer-protocol member joins, a consumer group
  (with classic members inside) until the last consumer-protocol member leaves, then classic.

Both classic flavours run: eager (``range``) and cooperative (``cooperative-sticky``).

A static fleet's rolling downgrade (Kafka 4.0+, KAFKA-17317; docs/legacy_bridge.md, "Static
downgrade"): two librdkafka consumers with ``group.protocol=consumer`` and a
``group.instance.id`` each are stopped one at a time (a static KIP-848 member's leave keeps its
place for the session timeout) and started again with ``classic`` under the same instance id.
The first one's JoinGroup takes its own place in a consumer group that keeps a KIP-848 member;
the second one's takes the place of the last KIP-848 member, and the group becomes a classic
group, with the same checks.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kafka_clients import (
    STACK_SETTINGS,
    BackgroundProducer,
    Fleet,
    GroupView,
    Partition,
    describe,
    settle,
    wait_committed_to_end,
    wait_described,
)
from kafka_support import KafkaStack, create_topics

pytestmark = pytest.mark.slow

PARTITIONS = 6
SETTLE_S = 30.0


def started(stack: KafkaStack, topic: str, tmp_path: Path) -> tuple[set[Partition], Any, Fleet]:
    """``topic`` created with PARTITIONS partitions: its partitions, an AdminClient, a Fleet."""
    from confluent_kafka.admin import AdminClient

    c = stack.server.client()
    create_topics(c, **{topic: PARTITIONS})
    c.close()
    address = stack.server.kafka_address
    partitions = {(topic, p) for p in range(PARTITIONS)}
    return partitions, AdminClient({"bootstrap.servers": address}), Fleet(address, tmp_path)


def drained(admin: Any, fleet: Fleet, group: str, producer: BackgroundProducer) -> None:
    """Stop the producer: every record it wrote is consumed, the committed offsets reach the end
    of every partition (each worker commits what it processed, and tries again after a commit
    refused during a rebalance), no partition was owned twice, nobody was fenced."""
    written = producer.stop()
    fleet.wait_consumed(written, SETTLE_S)
    wait_committed_to_end(admin, fleet, group, written, PARTITIONS, SETTLE_S)
    fleet.check_exclusive_ownership()
    lost = [e for e in fleet.snapshot() if e["event"] == "lost"]
    assert not lost, lost


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaStack]:
    s = KafkaStack(tmp_path_factory.mktemp("kafka-migration"), *STACK_SETTINGS)
    try:
        yield s
    finally:
        assert s.stop() == 0, s.server.stderr_text()


@pytest.mark.parametrize("assignor", ["range", "cooperative-sticky"])
def test_a_classic_fleet_upgrades_and_downgrades_under_load(
    stack: KafkaStack, tmp_path: Path, assignor: str
) -> None:
    topic, group = f"mig-{assignor}", f"g-mig-{assignor}"
    partitions, admin, fleet = started(stack, topic, tmp_path)
    address, channel = stack.server.kafka_address, stack.server.channel
    restarted = ["m1", "m2", "m3"]
    everyone = {*restarted, "kp"}
    producer = None
    try:
        for name in restarted:
            fleet.start(name, "librdkafka-classic", group, topics=[topic], assignor=assignor)
        fleet.start("kp", "kafka-python", group, topics=[topic], assignor=assignor)

        def settled(kind: str) -> GroupView:
            """The four members own every partition, each at least one, and the coordinator
            describes the group as ``kind`` and Stable with the same assignment."""
            fleet.wait_for_assignment(partitions, SETTLE_S, names=everyone)
            return wait_described(
                admin,
                channel,
                group,
                lambda v: (
                    (v.type, v.state) == (kind, "STABLE") and v.partitions == fleet.assignment()
                ),
                SETTLE_S,
                f"{group} to be a stable {kind} group",
            )

        view = settled("CLASSIC")
        assert set(view.members) == everyone
        producer = BackgroundProducer(address, topic, PARTITIONS, 200, assignor)

        def restart(name: str, kind: str, group_type_between: str, group_type_after: str) -> None:
            (old,) = [x for x in fleet.live() if x.name == name]
            old.stop()
            # Between the stop and the start: the group type once the member has left (its
            # leave may still be on its way when its process exits).
            wait_described(
                admin,
                channel,
                group,
                lambda v: v.type == group_type_between and name not in v.members,
                SETTLE_S,
                f"{name} to have left a {group_type_between} group",
            )
            fleet.start(
                name,
                kind,
                group,
                topics=[topic],
                assignor=None if kind == "librdkafka-consumer" else assignor,
            )
            view = settled(group_type_after)
            if group_type_after == "CONSUMER":
                assert view.member_types[name] == (
                    "consumer" if kind == "librdkafka-consumer" else "classic"
                )
                assert view.member_types["kp"] == "classic"

        # Upgrade: the first consumer-protocol member converts the group; it stays a consumer group.
        restart("m1", "librdkafka-consumer", "CLASSIC", "CONSUMER")
        restart("m2", "librdkafka-consumer", "CONSUMER", "CONSUMER")
        restart("m3", "librdkafka-consumer", "CONSUMER", "CONSUMER")
        assert describe(admin, channel, group).member_types == {
            "m1": "consumer",
            "m2": "consumer",
            "m3": "consumer",
            "kp": "classic",
        }
        # Downgrade: a consumer group while a consumer-protocol member remains; classic as soon as
        # the last one (m3) leaves.
        restart("m1", "librdkafka-classic", "CONSUMER", "CONSUMER")
        restart("m2", "librdkafka-classic", "CONSUMER", "CONSUMER")
        restart("m3", "librdkafka-classic", "CLASSIC", "CLASSIC")

        drained(admin, fleet, group, producer)
        producer = None
        fleet.stop_all()
        assert describe(admin, channel, group).state == "EMPTY"
    finally:
        if producer is not None:
            producer.stop()
        fleet.close()


def test_a_static_fleet_downgrades_member_by_member_to_a_classic_group(
    stack: KafkaStack, tmp_path: Path
) -> None:
    topic, group = "mig-static", "g-mig-static"
    partitions, admin, fleet = started(stack, topic, tmp_path)
    address, channel = stack.server.kafka_address, stack.server.channel
    names = ["s1", "s2"]
    producer = None
    try:
        for name in names:
            fleet.start(
                name, "librdkafka-consumer", group, topics=[topic], instance_id=f"inst-{name}"
            )

        def settled(kind: str) -> dict[str, str]:
            """Stable as a ``kind`` group with the clients' assignment; its member types."""
            settle(fleet, admin, channel, group, partitions, names, kind, SETTLE_S)
            return describe(admin, channel, group).member_types

        assert settled("CONSUMER") == {"s1": "consumer", "s2": "consumer"}
        producer = BackgroundProducer(address, topic, PARTITIONS, 200, "static")

        def restart_classic(name: str) -> None:
            (old,) = [x for x in fleet.live() if x.name == name]
            old.stop()
            fleet.start(
                name,
                "librdkafka-classic",
                group,
                topics=[topic],
                instance_id=f"inst-{name}",
                assignor="range",
                session_timeout_ms=10000,
            )

        restart_classic("s1")
        assert settled("CONSUMER") == {"s1": "classic", "s2": "consumer"}
        restart_classic("s2")
        settled("CLASSIC")
        d = admin.describe_consumer_groups([group])[group].result(10)
        assert sorted((m.client_id, m.group_instance_id) for m in d.members) == [
            ("s1", "inst-s1"),
            ("s2", "inst-s2"),
        ]

        # The offsets committed before the downgrade stay; the classic members commit on.
        drained(admin, fleet, group, producer)
        producer = None
        assert describe(admin, channel, group).type == "CLASSIC"
    finally:
        if producer is not None:
            producer.stop()
        fleet.close()
