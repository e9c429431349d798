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
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from kafka_clients import (
    STACK_SETTINGS,
    BackgroundProducer,
    Fleet,
    GroupView,
    describe,
    wait_described,
)
from kafka_support import KafkaStack, create_topics

pytestmark = pytest.mark.slow

PARTITIONS = 6
SETTLE_S = 30.0


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
    from confluent_kafka import ConsumerGroupTopicPartitions
    from confluent_kafka.admin import AdminClient

    topic, group = f"mig-{assignor}", f"g-mig-{assignor}"
    c = stack.server.client()
    create_topics(c, **{topic: PARTITIONS})
    c.close()
    address, channel = stack.server.kafka_address, stack.server.channel
    partitions = {(topic, p) for p in range(PARTITIONS)}
    admin = AdminClient({"bootstrap.servers": address})
    fleet = Fleet(address, tmp_path)
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

        written = producer.stop()
        producer = None
        fleet.wait_consumed(written, SETTLE_S)
        # Committed offsets reach the end of every partition (each worker commits what it
        # processed, and tries again after a commit refused during a rebalance).
        ends = dict.fromkeys(range(PARTITIONS), 0)
        for partition, offset in written.values():
            ends[partition] = max(ends[partition], offset + 1)

        def committed() -> dict[int, int]:
            got = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])
            return {tp.partition: tp.offset for tp in got[group].result(10).topic_partitions}

        fleet.wait_for(lambda: committed() == ends, SETTLE_S, "offsets committed to the end")
        fleet.check_exclusive_ownership()
        lost = [e for e in fleet.snapshot() if e["event"] == "lost"]
        assert not lost, lost
        fleet.stop_all()
        assert describe(admin, channel, group).state == "EMPTY"
    finally:
        if producer is not None:
            producer.stop()
        fleet.close()
