"""The Kafka listener in front of a real broker (Tansu): forwarding, rewritten broker addresses,
merged ApiVersions, and real clients (confluent-kafka with the KIP-848 protocol, kafka-python
classic) producing and consuming through it."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import pytest
from kafka_support import KafkaServer, Tansu, request
from kio.schema.errors import ErrorCode as E

from kip848.v1 import admin_pb2, consumer_group_pb2, consumer_group_pb2_grpc

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Tansu, KafkaServer]]:
    """Tansu + ``kip848 serve --kafka-listen ... --kafka-upstream <tansu>`` on free ports."""
    root = tmp_path_factory.mktemp("upstream")
    tansu = Tansu(root)
    try:
        server = KafkaServer(root / "data", "--kafka-upstream", tansu.address, clock="system")
        try:
            yield tansu, server
        finally:
            assert server.stop() == 0, server.stderr_text()
    finally:
        tansu.stop()


def create_topic(server: KafkaServer, name: str, partitions: int) -> uuid.UUID:
    """Created upstream through the listener (forwarded), and in the coordinator's registry
    with the upstream's topic id."""
    c = server.client()
    resp = c.call(
        request(
            19,
            7,
            topics=[
                {
                    "name": name,
                    "num_partitions": partitions,
                    "replication_factor": 1,
                    "assignments": [],
                    "configs": [],
                }
            ],
            timeout=5000,
            validate_only=False,
        )
    )
    c.close()
    (t,) = resp.topics
    assert (t.name, t.error_code) == (name, E.none)
    reg = server.admin.CreateTopics(
        admin_pb2.CreateTopicsRequest(
            topics=[
                admin_pb2.CreateTopicsRequest.CreatableTopic(
                    name=name, num_partitions=partitions, topic_id=t.topic_id.bytes
                )
            ]
        ),
        timeout=10,
    )
    assert reg.topics[0].error_code == 0, reg
    return t.topic_id


def test_api_versions_merge_the_upstream_and_ours(stack: tuple[Tansu, KafkaServer]) -> None:
    _tansu, server = stack
    c = server.client()
    keys = {k.api_key: (k.min_version, k.max_version) for k in c.call(request(18, 0)).api_keys}
    c.close()
    assert keys[68] == (0, 1) and keys[69] == (0, 1) and keys[8] == (2, 9) and keys[9] == (1, 9)
    assert keys[0] == (3, 11) and keys[1] == (4, 17) and keys[3] == (0, 12) and keys[19] == (0, 7)
    for hidden in (25, 28, 71, 72):
        assert hidden not in keys


def test_metadata_names_the_listener_not_the_upstream(stack: tuple[Tansu, KafkaServer]) -> None:
    tansu, server = stack
    create_topic(server, "up-meta", 2)
    c = server.client()
    resp = c.call(
        request(
            3,
            12,
            topics=[{"name": "up-meta", "topic_id": None}],
            allow_auto_topic_creation=False,
            include_topic_authorized_operations=False,
        )
    )
    c.close()
    host, _, port = server.kafka_address.rpartition(":")
    assert [(b.node_id, b.host, b.port) for b in resp.brokers] == [(111, host, int(port))]
    assert resp.controller_id == 111
    (t,) = resp.topics
    assert (t.name, len(t.partitions)) == ("up-meta", 2)
    assert all(p.leader_id == 111 for p in t.partitions)
    assert str(tansu.port) not in repr(resp)


def test_real_clients_produce_and_consume_through_the_listener(
    stack: tuple[Tansu, KafkaServer],
) -> None:
    from confluent_kafka import Consumer
    from kafka import KafkaConsumer, KafkaProducer

    _tansu, server = stack
    create_topic(server, "up-orders", 3)
    producer = KafkaProducer(bootstrap_servers=server.kafka_address)
    sent = {f"r{i}".encode() for i in range(30)}
    for i, value in enumerate(sorted(sent)):
        producer.send("up-orders", value, partition=i % 3)
    producer.flush(timeout=20)
    producer.close()

    # librdkafka with the KIP-848 protocol: joins through the listener, gets every partition.
    assigned: list[list[int]] = []
    consumer = Consumer(
        {
            "bootstrap.servers": server.kafka_address,
            "group.id": "up-848",
            "group.protocol": "consumer",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    consumer.subscribe(
        ["up-orders"],
        on_assign=lambda _c, parts: assigned.append(sorted(p.partition for p in parts)),
    )
    got = set()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and got != sent:
        msg = consumer.poll(0.5)
        if msg is not None and msg.error() is None:
            got.add(msg.value())
    consumer.commit(asynchronous=False)
    consumer.close()
    assert assigned and assigned[0] == [0, 1, 2]
    assert got == sent
    stub = consumer_group_pb2_grpc.ConsumerGroupServiceStub(server.channel)
    desc = stub.ConsumerGroupDescribe(
        consumer_group_pb2.ConsumerGroupDescribeRequest(group_ids=["up-848"]), timeout=10
    )
    assert desc.groups[0].error_code == 0 and desc.groups[0].group_epoch >= 1

    # kafka-python (classic protocol) joins the coordinator's classic bridge and reads all.
    classic = KafkaConsumer(
        "up-orders",
        bootstrap_servers=server.kafka_address,
        group_id="up-classic",
        auto_offset_reset="earliest",
        session_timeout_ms=6000,
        heartbeat_interval_ms=1000,
        consumer_timeout_ms=8000,
    )
    values = {m.value for m in classic}
    parts = {tp.partition for tp in classic.assignment()}
    classic.close()
    assert values == sent and parts == {0, 1, 2}
