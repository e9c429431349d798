"""What librdkafka's own consumer-group tests found against the listener in front of Tansu,
each as a test through real clients (confluent-kafka) that failed before its fix:

* test 0132 (classic): a dynamic classic member's id is Kafka's ``<client.id>-<uuid>``, so the
  client-side assignors, which order members by id, give consumers ``c0`` and ``c1`` a
  deterministic assignment (roundrobin: c0 gets 0 and 2; range: c0 gets 0 and 1);
* test 0045 (KIP-848): a regex subscription is resolved off the heartbeat path, as Kafka 4.x
  does: a member subscribing to a literal topic and a regex the group has not resolved gets
  the literal topic's partitions first and the regex's in a later heartbeat;
* test 0130: a commit right after the broker auto-created its topic is accepted — a commit or a
  forwarded Metadata answer naming a topic the registry does not know looks it up upstream
  first (bounded, negative answers remembered: a flood of unknown names costs a few refreshes a
  second, checked against a fake cluster that counts them).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest
from fake_upstream import FakeCluster
from kafka_clients import Fleet
from kafka_support import KafkaClient, KafkaServer, KafkaStack, create_topics, request
from kio.schema.errors import ErrorCode as E

pytestmark = pytest.mark.slow

UUID = "[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}"


@pytest.mark.parametrize(
    ("strategy", "c0", "c1"),
    [("roundrobin,range", {0, 2}, {1, 3}), ("range,roundrobin", {0, 1}, {2, 3})],
    ids=["roundrobin", "range"],
)
def test_classic_member_ids_order_the_client_side_assignors(
    stack: KafkaStack, fleet: Fleet, admin: Any, strategy: str, c0: set[int], c1: set[int]
) -> None:
    """librdkafka's 0132: consumers with client.id c0 and c1 and the same strategy list get the
    assignment the first strategy computes over members sorted by id: c0's first."""
    topic = f"t0132-{strategy.split(',')[0]}"
    group = f"g0132-{strategy.split(',')[0]}"
    client = stack.server.client()
    create_topics(client, **{topic: 4})
    client.close()
    for name in ("c0", "c1"):
        fleet.start(name, "librdkafka-classic", group, topics=[topic], assignor=strategy)
    got = fleet.wait_for_assignment({(topic, p) for p in range(4)}, 30, names=["c0", "c1"])
    assert got == {"c0": {(topic, p) for p in c0}, "c1": {(topic, p) for p in c1}}
    described = admin.describe_consumer_groups([group])[group].result(10)
    ids = {m.client_id: m.member_id for m in described.members}
    assert set(ids) == {"c0", "c1"}
    for name, member_id in ids.items():
        assert re.fullmatch(f"{name}-{UUID}", member_id), member_id


# ---------------------------------------------------------------- 0045: regexes off the heartbeat


def test_literal_topics_first_then_the_regex_topics(stack: KafkaStack, fleet: Fleet) -> None:
    """librdkafka's 0045 (do_test_resubscribe_with_regex, KIP-848): subscribed to a literal
    topic and a new regex, the consumer's first assignment is the literal topic's partitions,
    a later one adds the regex's topics."""
    client = stack.server.client()
    create_topics(client, **{"t45-literal": 2, "rx45-one": 2, "rx45-two": 1})
    client.close()
    c = fleet.start("c45", "librdkafka-consumer", "g45", topics=["t45-literal", "^rx45-.*"])
    everything = {("t45-literal", 0), ("t45-literal", 1), ("rx45-one", 0), ("rx45-one", 1)}
    everything.add(("rx45-two", 0))
    fleet.wait_for_assignment(everything, 30, names=["c45"])
    assigns = [e["partitions"] for e in fleet.events_of(c) if e["event"] == "assign"]
    assert assigns[0] == [["t45-literal", 0], ["t45-literal", 1]], assigns
    assert len(assigns) >= 2


# ---------------------------------------------------------------- 0130: topics the registry lacks


def test_commit_right_after_the_broker_auto_created_the_topic(stack: KafkaStack) -> None:
    """librdkafka's 0130: produce to a topic that does not exist yet (the broker creates it),
    then commit offsets for it at once: accepted, as by Kafka, whose coordinator shares the
    broker's metadata (the coordinator used to answer UNKNOWN_TOPIC_OR_PARTITION until its next
    periodic refresh)."""
    from confluent_kafka import Consumer, Producer, TopicPartition

    topic, group = "t0130-auto", "g0130-auto"
    address = stack.server.kafka_address
    producer = Producer({"bootstrap.servers": address, "linger.ms": 0})
    producer.produce(topic, b"x", partition=0)
    assert producer.flush(15) == 0
    consumer = Consumer(
        {"bootstrap.servers": address, "group.id": group, "enable.auto.commit": False}
    )
    try:
        done = consumer.commit(offsets=[TopicPartition(topic, 0, 1)], asynchronous=False)
        assert [(tp.topic, tp.partition, tp.offset, tp.error) for tp in done] == [
            (topic, 0, 1, None)
        ]
        got = consumer.committed([TopicPartition(topic, 0)], timeout=10)
        assert [(tp.topic, tp.offset) for tp in got] == [(topic, 1)]
    finally:
        consumer.close()


def commit_request(group: str, *topics: str, version: int = 9) -> object:
    return request(
        8,
        version,
        group_id=group,
        generation_id_or_member_epoch=-1,
        member_id="",
        topics=[
            {
                "name": t,
                "partitions": [
                    {"partition_index": 0, "committed_offset": 5, "committed_metadata": None}
                ],
            }
            for t in topics
        ],
    )


def commit_errors(client: KafkaClient, group: str, *topics: str) -> dict[str, E]:
    resp: Any = client.call(commit_request(group, *topics))
    return {t.name: t.partitions[0].error_code for t in resp.topics}


def test_commit_of_a_topic_created_behind_the_coordinators_back(stack: KafkaStack) -> None:
    """A topic created on the broker directly (not through the listener, so no refresh was
    triggered): the commit looks it up upstream before answering."""
    broker = stack.broker()
    create_topics(broker, t0130_back=1)
    broker.close()
    c = stack.server.client()
    try:
        assert commit_errors(c, "g0130-back", "t0130_back") == {"t0130_back": E.none}
    finally:
        c.close()


def test_a_forwarded_metadata_answer_teaches_the_registry(stack: KafkaStack) -> None:
    """A Metadata answer through the listener naming a topic the registry lacks is passed on
    once the registry has it: the topic's id is known to the coordinator right after (an
    OffsetFetch v10-style lookup by id over gRPC finds it, no UNKNOWN_TOPIC_ID)."""
    from kip848.v1 import common_pb2, offsets_pb2, offsets_pb2_grpc

    broker = stack.broker()
    ids = create_topics(broker, t0130_meta=1)
    broker.close()
    c = stack.server.client()
    try:
        resp: Any = c.call(
            request(
                3,
                12,
                topics=[{"name": "t0130_meta", "topic_id": None}],
                allow_auto_topic_creation=False,
                include_topic_authorized_operations=False,
            )
        )
        assert [(t.name, t.error_code) for t in resp.topics] == [("t0130_meta", E.none)]
    finally:
        c.close()
    stub = offsets_pb2_grpc.OffsetServiceStub(stack.server.channel)
    got = stub.OffsetFetch(
        offsets_pb2.OffsetFetchRequest(
            groups=[
                offsets_pb2.OffsetFetchRequest.Group(
                    group_id="g0130-meta",
                    topics=common_pb2.TopicPartitionIndexesList(
                        items=[
                            common_pb2.TopicPartitionIndexes(
                                topic_id=ids["t0130_meta"].bytes, partition_indexes=[0]
                            )
                        ]
                    ),
                )
            ]
        ),
        timeout=10,
    )
    (group,) = got.groups
    (topic,) = group.topics
    assert topic.name == "t0130_meta"
    assert [(p.committed_offset, p.error_code) for p in topic.partitions] == [(-1, 0)]


@pytest.fixture(scope="module")
def fake(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[FakeCluster, KafkaServer]]:
    """A fake one-node cluster (it counts the Metadata requests it gets) with the listener in
    front; periodic refreshes far apart, so every Metadata request is an on-demand lookup."""
    cluster = FakeCluster()
    cluster.add_node(1)
    try:
        server = KafkaServer(
            tmp_path_factory.mktemp("lookups") / "data",
            "--kafka-upstream",
            cluster.nodes[1].address,
            "--set",
            "kafka.upstream.metadata.max.age.ms=60000",
            clock="system",
        )
        try:
            yield cluster, server
        finally:
            assert server.stop() == 0, server.stderr_text()
    finally:
        cluster.stop()


def test_a_flood_of_unknown_topic_names_costs_a_few_refreshes(
    fake: tuple[FakeCluster, KafkaServer],
) -> None:
    """200 commits naming 200 different topics nobody has, from 50 connections at once: each
    is answered UNKNOWN_TOPIC_OR_PARTITION after one lookup, and the refreshes are coalesced
    (at most one every 0.2 s). Asked again, the names are remembered as missing: answered at
    once, no refresh at all."""
    import threading
    import time

    cluster, server = fake
    clients = [server.client() for _ in range(50)]
    errors: list[dict[str, E]] = []
    lock = threading.Lock()

    def flood(i: int, c: KafkaClient) -> None:
        for j in range(4):
            got = commit_errors(c, "g-storm", f"ghost-{i}-{j}")
            with lock:
                errors.append(got)

    try:
        before = len(cluster.requests(3))
        start = time.monotonic()
        threads = [threading.Thread(target=flood, args=(i, c)) for i, c in enumerate(clients)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        elapsed = time.monotonic() - start
        refreshes = len(cluster.requests(3)) - before
        assert len(errors) == 200
        assert all(list(e.values()) == [E.unknown_topic_or_partition] for e in errors)
        assert 1 <= refreshes <= elapsed / 0.2 + 2, (refreshes, elapsed)

        again = time.monotonic()
        for i in range(50):
            assert commit_errors(clients[0], "g-storm", f"ghost-{i}-0") == {
                f"ghost-{i}-0": E.unknown_topic_or_partition
            }
        assert len(cluster.requests(3)) - before == refreshes
        assert time.monotonic() - again < 5
    finally:
        for c in clients:
            c.close()
